//! `method = "pde"`: mutual information of a continuous (or mixed) x with a
//! discrete y by Pareto Density Estimation (Ultsch 2005).
//!
//! The estimator, in three parts:
//!
//! 1. **Atoms.** A value that at least max(2, ceil(n / 100)) points share (a
//!    spike of zeros, the levels of a count) is a discrete atom. D is the atom
//!    a point sits on, or "continuous". Since D is a function of x,
//!    I(X; Y) = I(D; Y) + P(D = continuous) I(X; Y | D = continuous); the first
//!    term is the exact plug-in MI of the contingency table of D and y.
//!    (A feature of only ties is then treated as discrete, a constant one has
//!    MI 0, and a zero-inflated one is a point mass plus a density.)
//! 2. **Densities.** On the continuous points, each class c has its own Pareto
//!    radius R_c (the exact 18% quantile of its pairwise distances, times
//!    4 / n_c^0.2 above 1024 points; classes of fewer than 5 points, or whose
//!    quantile is 0, take the radius of all continuous points). The PDE of
//!    class c at x is k_c(x) / (n_c 2 R_c), k_c(x) the number of points of
//!    class c within R_c of x; the marginal density is the mixture
//!    p(x) = sum_c (n_c / n) p(x | c), so that an estimate never exceeds
//!    ln(1 / p(y)) and well separated classes give H(Y).
//! 3. **Integration rule.** Resubstitution: the MI is the mean over the points
//!    of ln(p(x_i | y_i) / p(x_i)). A point's own count is taken as 1/2 (not 1,
//!    nor 0): this removes the first-order bias of the logarithm of a count
//!    (E ln(K + 1/2) = ln E K + O(1 / E K^2) for Poisson K), which otherwise
//!    dominates on independent data with many small classes.
//!
//! Everything is exact and deterministic: no sampling, and the same input
//! gives the same bits. The estimate is clamped at 0 (MI is non-negative).

use super::pareto::pareto_radius;
use super::plug_in_mi;

/// Classes with fewer continuous points than this use the pooled radius.
pub const MIN_OWN_RADIUS: usize = 5;

/// The smallest multiplicity of an atom among `n` points.
pub fn atom_min(n: usize) -> usize {
    n.div_ceil(100).max(2)
}

/// MI (nats) of `xs` ascending with 0-based classes `cs` (`k` classes).
pub fn pde_mi(xs: &[f64], cs: &[u32], k: usize) -> f64 {
    let n = xs.len();
    if n < 2 {
        return 0.0;
    }
    let min_atom = atom_min(n);
    // D: the atom of each point (0, 1, ...) or usize::MAX for continuous.
    let mut d = vec![usize::MAX; n];
    let mut atoms = 0usize;
    let mut cont_x = Vec::with_capacity(n);
    let mut cont_c = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && xs[j] == xs[i] {
            j += 1;
        }
        if j - i >= min_atom {
            d[i..j].fill(atoms);
            atoms += 1;
        } else {
            cont_x.extend_from_slice(&xs[i..j]);
            cont_c.extend_from_slice(&cs[i..j]);
        }
        i = j;
    }
    let i_d = if atoms == 0 {
        0.0
    } else {
        let cat: Vec<usize> = d.iter().map(|&a| if a == usize::MAX { atoms } else { a }).collect();
        plug_in_mi(&cat, cs, atoms + 1, k)
    };
    let w = cont_x.len() as f64 / n as f64;
    let i_c = if cont_x.len() >= 2 { continuous_mi(&cont_x, &cont_c, k) } else { 0.0 };
    (i_d + w * i_c).max(0.0)
}

/// Part 2 and 3 on continuous points (`xs` ascending).
pub fn continuous_mi(xs: &[f64], cs: &[u32], k: usize) -> f64 {
    let n = xs.len();
    let mut by_class: Vec<Vec<f64>> = vec![Vec::new(); k];
    for (&x, &c) in xs.iter().zip(cs) {
        by_class[c as usize].push(x);
    }
    let present: Vec<usize> = (0..k).filter(|&c| !by_class[c].is_empty()).collect();
    if present.len() < 2 {
        return 0.0;
    }
    let mut radius: Vec<f64> =
        (0..k).map(|c| if by_class[c].len() < MIN_OWN_RADIUS { 0.0 } else { pareto_radius(&by_class[c]) }).collect();
    if present.iter().any(|&c| radius[c] <= 0.0) {
        let pooled = pareto_radius(xs);
        if pooled <= 0.0 {
            return 0.0;
        }
        for &c in &present {
            if radius[c] <= 0.0 {
                radius[c] = pooled;
            }
        }
    }
    // Window [lo, hi) of each present class around the current x (xs ascending,
    // so both ends only move right).
    let mut lo = vec![0usize; k];
    let mut hi = vec![0usize; k];
    let mut total = 0.0;
    for (&x, &y) in xs.iter().zip(cs) {
        let mut s = 0.0;
        let mut own = 0.0;
        for &c in &present {
            let v = &by_class[c];
            let r = radius[c];
            while lo[c] < v.len() && x - v[lo[c]] > r {
                lo[c] += 1;
            }
            if hi[c] < lo[c] {
                hi[c] = lo[c];
            }
            while hi[c] < v.len() && v[hi[c]] - x <= r {
                hi[c] += 1;
            }
            let mut count = (hi[c] - lo[c]) as f64;
            if c == y as usize {
                count -= 0.5;
                own = count / (v.len() as f64 * r);
            }
            s += count / r;
        }
        total += (own * n as f64 / s).ln();
    }
    total / n as f64
}
