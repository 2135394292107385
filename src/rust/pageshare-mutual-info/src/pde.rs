//! `method = "pde"`: mutual information of a continuous, discrete or mixed x
//! with a discrete y by Pareto Density Estimation (Ultsch 2005).
//!
//! The estimator, in four parts:
//!
//! 1. **Scale.** MI is invariant under strictly increasing maps of x, and so
//!    is this estimate: x is replaced by normal scores Phi^-1((i + 1/2) / m)
//!    of its ranks. Whatever the tails of x (lognormal, Student t, counts),
//!    the sample is then standard normal: no isolated tail point gets a window
//!    of its own, and Gaussian data keep (nearly) their shape, hence the
//!    accuracy the estimator had on them.
//! 2. **Atoms and ties.** A value shared by several points is a discrete atom
//!    when it is coarse on that scale: its tied points, were they distinct,
//!    would span at least [`ATOM_WIDTH`] standard deviations of normal scores
//!    (the zeros of a zero-inflated feature, the levels of a coarsely rounded
//!    one, the small counts). D is the atom a point sits on, or "continuous";
//!    since D is a function of x, I(X; Y) = I(D; Y) + P(D = continuous)
//!    I(X; Y | D = continuous). I(D; Y) is estimated from the contingency
//!    table of D and y by the jackknife of the plug-in MI ([`jackknife_mi`]),
//!    not the plug-in MI itself, whose bias (L - 1)(K - 1) / (2 n) is the
//!    size of the signal for a many-level count. Finer ties (the levels of a
//!    count of mean 50, values rounded to a tenth of their spread) stay in the
//!    continuous part, spread over their ranks in a seeded random order
//!    ([`spread_ties`]): a position that says nothing of y beyond x leaves the
//!    MI unchanged.
//! 3. **Densities.** On the normal scores of the continuous points, each class
//!    c has its own Pareto radius R_c (the exact 18% quantile of its pairwise
//!    distances, times 4 / n_c^0.2 above 1024 points; classes of fewer than 5
//!    points, or whose quantile is 0, take the radius of all continuous
//!    points). The PDE of class c at x is k_c(x) / (n_c 2 R_c), k_c(x) the
//!    number of points of class c within R_c of x; the marginal density is the
//!    mixture p(x) = sum_c (n_c / n) p(x | c), so that an estimate never
//!    exceeds ln(1 / p(y)) and well separated classes give H(Y).
//! 4. **Integration rule.** Resubstitution: I(X; Y | continuous) is the mean
//!    over the continuous points of ln(p(x_i | y_i) / p(x_i)). A point's own
//!    count is taken as 1/2 (not 1, nor 0): this removes the first-order bias
//!    of the logarithm of a count (E ln(K + 1/2) = ln E K + O(1 / E K^2) for
//!    Poisson K), which otherwise dominates on independent data with many
//!    small classes. When fewer than half the points are continuous (a feature
//!    of mostly zeros), the remaining small-sample bias of the continuous part
//!    is removed too: the same estimate with the classes of the continuous
//!    points permuted (a fixed, seeded permutation) is subtracted. (Applied to
//!    every feature it would cost a second pass; where most points are
//!    continuous that bias is below 0.001 nats at n = 10,446.)
//!
//! Everything is deterministic: the same input gives the same bits (the
//! permutation's seed is fixed, and the input arrives sorted). The estimate is
//! clamped to [0, ln k] (MI is non-negative and at most H(y)).

use super::pareto::pareto_radius;

/// Classes with fewer continuous points than this use the pooled radius.
pub const MIN_OWN_RADIUS: usize = 5;

/// A run of tied values is an atom when its points, ranked apart, would span
/// at least this many standard deviations of normal scores. (Measured on the
/// families of issue 29, `bench-mi-families.R`, 50 seeds, the estimator's
/// error against the information the drawn cases hold: 0.1 errs by up to 2.0%
/// and leaves null means up to 0.0034 nats; 0.2 up to 1.7%, mean 0.69%, null
/// means up to 0.0021; 0.35, 0.5 and 0.75 up to 1.7%, mean 0.58-0.60%, null
/// means up to 0.0014. Finer runs are better served by the density part, once
/// spread over their ranks.)
pub const ATOM_WIDTH: f64 = 0.35;

/// Whether the tied run at ascending positions `i..j` of `n` points is an atom.
pub fn is_atom(i: usize, j: usize, n: usize) -> bool {
    let nf = n as f64;
    j - i >= 2 && qnorm((j as f64 - 0.5) / nf) - qnorm((i as f64 + 0.5) / nf) >= ATOM_WIDTH
}

/// MI (nats) of `xs` ascending with 0-based classes `cs` (`k` classes).
pub fn pde_mi(xs: &[f64], cs: &[u32], k: usize) -> f64 {
    let n = xs.len();
    if n < 2 {
        return 0.0;
    }
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
        if is_atom(i, j, n) {
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
        jackknife_mi(&cat, cs, atoms + 1, k)
    };
    let m = cont_x.len();
    let w = m as f64 / n as f64;
    let i_c = if m < 2 {
        0.0
    } else {
        let mut cont_c = cont_c;
        let scores = spread_scores(&cont_x, &mut cont_c);
        let est = continuous_mi(&scores, &cont_c, k);
        if 2 * m < n {
            let mut perm = cont_c;
            shuffle(&mut perm, PERMUTATION_SEED ^ m as u64);
            est - continuous_mi(&scores, &perm, k)
        } else {
            est
        }
    };
    // MI is non-negative and at most H(y) <= ln k, bounds a bias-corrected
    // estimate of a small sample can cross.
    (i_d + w * i_c).min((k.max(1) as f64).ln()).max(0.0)
}

/// The seed of the permutation of part 4 and of the orders of [`spread_ties`].
pub const PERMUTATION_SEED: u64 = 0x7061_6765_7368_6172;

/// The normal scores of the continuous points `xs` (ascending), ties spread
/// over their ranks: point i of the m gets Phi^-1((i + 1/2) / m), once the
/// classes `cs` within each run of tied values have been placed by
/// [`spread_ties`]. Ascending with x, so the MI is unchanged, and the sample is
/// then standard normal whatever the tails of x.
pub fn spread_scores(xs: &[f64], cs: &mut [u32]) -> Vec<f64> {
    spread_ties(xs, cs);
    let m = xs.len() as f64;
    (0..xs.len()).map(|i| qnorm((i as f64 + 0.5) / m)).collect()
}

/// Put the classes of each run of tied values of `xs` (ascending, `cs`
/// ascending within a run) in a random order, drawn per run from a fixed seed:
/// the points of a tied value then take its ranks in that order.
///
/// Why: a tied value is one value of x, not one point of a density, so its
/// points are given positions within its rank span that carry no class
/// information. A position independent of y given x leaves the MI as it is
/// (x is a function of the position), and the estimate is then the
/// estimator's on a continuous sample: x plus an independent jitter inside each
/// value. Kept as ties, a value is a spike of which a window counts all or
/// nothing (measured: rounded and count features whose levels are about as
/// wide as the window came out 3-4% low). Spacing each class evenly over the
/// run instead of a random order was tried: it removes the chance variation
/// of the class mix that the densities' correction expects, and came out low
/// where fine ties hold most of the information (`bench-mi-families.R`, 50
/// seeds: the estimator's own error -2.8% on a negative binomial of size 0.5;
/// within 1.7% on every family with this order). Deterministic: the seed is
/// fixed, and a run's input order is the total order (x, class).
pub fn spread_ties(xs: &[f64], cs: &mut [u32]) {
    let n = xs.len();
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && xs[j] == xs[i] {
            j += 1;
        }
        if j - i > 1 {
            shuffle(&mut cs[i..j], PERMUTATION_SEED ^ ((i as u64) << 24));
        }
        i = j;
    }
}

/// splitmix64's finaliser of `seed + golden ratio`: a fixed, well mixed value.
fn splitmix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The standard normal quantile, Wichura's AS 241 (PPND16, relative error
/// about 1e-16), for 1e-11 <= p <= 1 - 1e-11 (smaller p are taken as 1e-11:
/// ranks of fewer than 5e10 points never get there).
// The coefficients as Wichura published them (R's qnorm.c has the same digits).
#[allow(clippy::excessive_precision)]
pub fn qnorm(p: f64) -> f64 {
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        let r = 0.180625 - q * q;
        return q
            * (((((((r * 2509.0809287301226727 + 33430.575583588128105) * r + 67265.770927008700853) * r
                + 45921.953931549871457)
                * r
                + 13731.693765509461125)
                * r
                + 1971.5909503065514427)
                * r
                + 133.14166789178437745)
                * r
                + 3.387132872796366608)
            / (((((((r * 5226.495278852854561 + 28729.085735721942674) * r + 39307.89580009271061) * r
                + 21213.794301586595867)
                * r
                + 5394.1960214247511077)
                * r
                + 687.1870074920579083)
                * r
                + 42.313330701600911252)
                * r
                + 1.0);
    }
    let tail = if q < 0.0 { p } else { 1.0 - p };
    let r = (-tail.max(1e-11).ln()).sqrt() - 1.6;
    let v = (((((((r * 7.7454501427834140764e-4 + 0.0227238449892691845833) * r + 0.24178072517745061177) * r
        + 1.27045825245236838258)
        * r
        + 3.64784832476320460504)
        * r
        + 5.7694972214606914055)
        * r
        + 4.6303378461565452959)
        * r
        + 1.42343711074968357734)
        / (((((((r * 1.05075007164441684324e-9 + 5.475938084995344946e-4) * r + 0.0151986665636164571966) * r
            + 0.14810397642748007459)
            * r
            + 0.68976733498510000455)
            * r
            + 1.6763848301838038494)
            * r
            + 2.05319162663775882187)
            * r
            + 1.0);
    if q < 0.0 {
        -v
    } else {
        v
    }
}

/// Parts 3 and 4 on continuous points (`xs` ascending, on any scale: the
/// caller gives normal scores).
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

/// I(A; B) of the table of `a` and `b` by the delete-one jackknife of the
/// plug-in MI: n I - (n - 1) times the mean of the n estimates that leave one
/// point out. The plug-in MI is biased up by about (L - 1)(K - 1) / (2 n)
/// (0.07 nats for a 50-level count and 32 classes at n = 10,446); the
/// jackknife removes that first-order term as the table itself shows it.
/// Grassberger's (2003) entropy estimator, used before, removed less of it:
/// on features of (nearly) only atoms (`bench-mi-families.R`, 50 seeds) the
/// estimator's own error was +1.3% (Poisson(1)) and +1.1% (N(0, 1) rounded to
/// 0.5), +0.6% and +0.7% with the jackknife. A leave-one-out table differs
/// from the full one in one cell, one row and one column, so the whole costs
/// one pass over the cells. May be slightly negative (the caller clamps).
pub fn jackknife_mi(a: &[usize], b: &[u32], ka: usize, kb: usize) -> f64 {
    let n = a.len();
    if n < 2 {
        return 0.0;
    }
    let t = crate::Table::of(a, b, ka, kb);
    // One variable constant: the MI is exactly 0.
    if t.na.iter().filter(|&&m| m > 0).count() < 2 || t.nb.iter().filter(|&&m| m > 0).count() < 2 {
        return 0.0;
    }
    // With S(counts) = sum of c ln c, the plug-in MI of m points is
    // ln m - (S(rows) + S(columns) - S(cells)) / m.
    let c_ln_c = |c: u64| if c > 1 { c as f64 * (c as f64).ln() } else { 0.0 };
    let plug_in = |s_rows: f64, s_cols: f64, s_cells: f64, m: f64| m.ln() - (s_rows + s_cols - s_cells) / m;
    let s_rows: f64 = t.na.iter().map(|&c| c_ln_c(c)).sum();
    let s_cols: f64 = t.nb.iter().map(|&c| c_ln_c(c)).sum();
    let s_cells: f64 = t.cells.iter().map(|&(_, c)| c_ln_c(c)).sum();
    let nf = n as f64;
    let full = plug_in(s_rows, s_cols, s_cells, nf);
    // The sum over the n points of the estimate without that point: the points
    // of one cell all give the same.
    let without_one: f64 = t
        .cells
        .iter()
        .map(|&((i, j), c)| {
            let (row, col) = (t.na[i], t.nb[j as usize]);
            c as f64
                * plug_in(
                    s_rows - c_ln_c(row) + c_ln_c(row - 1),
                    s_cols - c_ln_c(col) + c_ln_c(col - 1),
                    s_cells - c_ln_c(c) + c_ln_c(c - 1),
                    nf - 1.0,
                )
        })
        .sum();
    nf * full - (nf - 1.0) / nf * without_one
}

/// A Fisher-Yates shuffle driven by splitmix64 from `seed` (deterministic).
pub fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut state = seed;
    for i in (1..v.len()).rev() {
        let z = splitmix(state);
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let j = (z % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}
