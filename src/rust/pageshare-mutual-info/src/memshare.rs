//! `method = "memshare"`: the numbers of `memshare::mutualinfo(x, y,
//! isYDiscrete = TRUE)` (memshare 1.0.3.1 with DataVisualizations 1.4.0 and
//! ScatterDensity 0.1.1) for a continuous x and a discrete y, computed with
//! O(n + 512 K) work instead of dense 512 x 512 algebra. The steps, as that
//! code performs them:
//!
//! 1. Pareto radius R of x ([`memshare_radius`]; memshare samples 10,000
//!    points with replacement above 10,000, which makes its result random:
//!    here all points are used, always).
//! 2. A grid of 512 points from min(x) - R to max(x) + R (spaced as R's
//!    `seq(length.out = 512)`); each point of class c is counted at its nearest
//!    grid point (a tie at a midpoint goes up), divided by n.
//! 3. Each class column is smoothed by (I + l^2 D2'D2 + 2 l D1'D1)^-1,
//!    l = min(#distinct x, 250) / 4, D1 and D2 the first and second
//!    difference matrices (a banded LDL' solve here).
//! 4. The table is divided by the sum over its first 511 rows of the row sum
//!    times the grid step (the last row is left out); f(i|c) is column c over
//!    its sum times the mean step dx, p(i) the row sum; MI is the sum over
//!    classes of (n_c / n) sum_i f ln(f / p) dx over cells with f > eps.

use super::pareto::memshare_radius;

/// Grid points of the table.
pub const GRID: usize = 512;

/// `seq(from, to, length.out = len)` as R 4.2 computes it.
pub fn r_seq(from: f64, to: f64, len: usize) -> Vec<f64> {
    if from == to {
        return vec![from; len];
    }
    let n1 = (len - 1) as f64;
    let del = to - from;
    let mut g = Vec::with_capacity(len);
    g.push(from);
    for k in 1..len - 1 {
        g.push(from + k as f64 * (del / n1));
    }
    g.push(to);
    g
}

/// A symmetric positive definite pentadiagonal matrix, factored as L D L'.
pub struct Banded {
    d: Vec<f64>,
    l1: Vec<f64>, // L[i][i-1]
    l2: Vec<f64>, // L[i][i-2]
}

impl Banded {
    /// The smoother's matrix I + lambda^2 D2'D2 + 2 lambda D1'D1 of order m, factored.
    pub fn smoother(m: usize, lambda: f64) -> Banded {
        // Bands of D1'D1 and D2'D2, accumulated row by row of D1 and D2.
        let mut b0 = vec![[0.0f64; 2]; m]; // [D1'D1, D2'D2] diagonal
        let mut b1 = vec![[0.0f64; 2]; m]; // (i, i+1)
        let mut b2 = vec![0.0f64; m]; // (i, i+2), D2'D2 only
        for r in 0..m.saturating_sub(1) {
            // row r of D1: -1 at r, +1 at r+1
            b0[r][0] += 1.0;
            b0[r + 1][0] += 1.0;
            b1[r][0] -= 1.0;
        }
        for r in 0..m.saturating_sub(2) {
            // row r of D2: 1, -2, 1 at r, r+1, r+2
            let c = [1.0, -2.0, 1.0];
            for a in 0..3 {
                b0[r + a][1] += c[a] * c[a];
                if a < 2 {
                    b1[r + a][1] += c[a] * c[a + 1];
                }
            }
            b2[r] += c[0] * c[2];
        }
        let lam2 = lambda * lambda;
        let two_lam = 2.0 * lambda;
        let a0: Vec<f64> = b0.iter().map(|b| 1.0 + (lam2 * b[1] + two_lam * b[0])).collect();
        let a1: Vec<f64> = b1.iter().map(|b| lam2 * b[1] + two_lam * b[0]).collect();
        let a2: Vec<f64> = b2.iter().map(|b| lam2 * b).collect();
        Banded::factor(&a0, &a1, &a2)
    }

    /// Factor the matrix with diagonal `a0`, first superdiagonal `a1[i] = A[i][i+1]`
    /// and second `a2[i] = A[i][i+2]`.
    pub fn factor(a0: &[f64], a1: &[f64], a2: &[f64]) -> Banded {
        let m = a0.len();
        let mut d = vec![0.0; m];
        let mut l1 = vec![0.0; m];
        let mut l2 = vec![0.0; m];
        for i in 0..m {
            if i >= 2 {
                l2[i] = a2[i - 2] / d[i - 2];
            }
            if i >= 1 {
                let mut v = a1[i - 1];
                if i >= 2 {
                    v -= l2[i] * l1[i - 1] * d[i - 2];
                }
                l1[i] = v / d[i - 1];
            }
            let mut v = a0[i];
            if i >= 1 {
                v -= l1[i] * l1[i] * d[i - 1];
            }
            if i >= 2 {
                v -= l2[i] * l2[i] * d[i - 2];
            }
            d[i] = v;
        }
        Banded { d, l1, l2 }
    }

    /// Solve A z = b in place.
    pub fn solve(&self, b: &mut [f64]) {
        let m = b.len();
        for i in 0..m {
            let mut v = b[i];
            if i >= 1 {
                v -= self.l1[i] * b[i - 1];
            }
            if i >= 2 {
                v -= self.l2[i] * b[i - 2];
            }
            b[i] = v;
        }
        for (bi, di) in b.iter_mut().zip(&self.d).take(m) {
            *bi /= di;
        }
        for i in (0..m).rev() {
            let mut v = b[i];
            if i + 1 < m {
                v -= self.l1[i + 1] * b[i + 1];
            }
            if i + 2 < m {
                v -= self.l2[i + 2] * b[i + 2];
            }
            b[i] = v;
        }
    }
}

/// The smoothed table of step 3, before normalization: `s[c * GRID + i]` for
/// grid point i and present class c; each class column sums to n_c / n.
pub struct Smoothed {
    pub grid: Vec<f64>,
    pub s: Vec<f64>,
    /// Class sizes of the present classes, in class order.
    pub sizes: Vec<usize>,
    pub n: usize,
    pub radius: f64,
}

/// Steps 1-3 for `xs` ascending, `cs` the 0-based class of each point (`k`
/// classes). None when the radius is not defined (fewer than 2 distinct values).
pub fn smoothed_table(xs: &[f64], cs: &[u32], k: usize) -> Option<Smoothed> {
    let n = xs.len();
    let radius = memshare_radius(xs);
    if !radius.is_finite() {
        return None;
    }
    let grid = r_seq(xs[0] - radius, xs[n - 1] + radius, GRID);
    let mids: Vec<f64> = (0..GRID - 1).map(|i| grid[i] + 0.5 * (grid[i + 1] - grid[i])).collect();
    // Present classes in order, and their column.
    let mut sizes_all = vec![0usize; k];
    for &c in cs {
        sizes_all[c as usize] += 1;
    }
    let mut column = vec![usize::MAX; k];
    let mut sizes = Vec::new();
    for (c, &sz) in sizes_all.iter().enumerate() {
        if sz > 0 {
            column[c] = sizes.len();
            sizes.push(sz);
        }
    }
    let kp = sizes.len();
    let mut s = vec![0.0f64; kp * GRID];
    let mut counts = vec![0u32; kp * GRID];
    let mut bin = 0usize; // number of midpoints <= x (x ascending)
    let mut distinct = 0usize;
    for (i, (&x, &c)) in xs.iter().zip(cs).enumerate() {
        while bin < GRID - 1 && mids[bin] <= x {
            bin += 1;
        }
        counts[column[c as usize] * GRID + bin] += 1;
        if i == 0 || x != xs[i - 1] {
            distinct += 1;
        }
    }
    for (v, &cnt) in s.iter_mut().zip(&counts) {
        *v = cnt as f64 / n as f64;
    }
    let lambda = distinct.min(250) as f64 / 4.0;
    let smoother = Banded::smoother(GRID, lambda);
    for col in s.chunks_mut(GRID) {
        smoother.solve(col);
    }
    Some(Smoothed { grid, s, sizes, n, radius })
}

/// Step 4 on a smoothed table.
pub fn mi_of_table(t: &Smoothed, eps: f64) -> f64 {
    let kp = t.sizes.len();
    let g = &t.grid;
    let steps: Vec<f64> = (0..GRID - 1).map(|i| g[i + 1] - g[i]).collect();
    let dx = steps.iter().sum::<f64>() / (GRID - 1) as f64;
    let mut int = 0.0;
    for col in t.s.chunks(GRID) {
        int += col[..GRID - 1].iter().zip(&steps).map(|(v, d)| v * d).sum::<f64>();
    }
    let mut p = vec![0.0f64; GRID];
    for col in t.s.chunks(GRID) {
        for (pi, v) in p.iter_mut().zip(col) {
            *pi += v / int;
        }
    }
    let mut mi = 0.0;
    for (c, col) in t.s.chunks(GRID).enumerate().take(kp) {
        let colsum: f64 = col.iter().map(|v| v / int).sum();
        let mut inner = 0.0;
        for (v, pi) in col.iter().zip(&p) {
            let f = (v / int) / (colsum * dx);
            if f > eps {
                inner += f * (f / pi).ln();
            }
        }
        mi += inner * dx * (t.sizes[c] as f64 / t.n as f64);
    }
    mi
}

/// MI (nats) the way memshare computes it, for `xs` ascending with classes `cs`.
/// 0 for fewer than 3 points, fewer than 2 classes, or sd(x) < eps.
pub fn memshare_mi(xs: &[f64], cs: &[u32], k: usize, eps: f64) -> f64 {
    let n = xs.len();
    if n < 3 || sd(xs) < eps || cs.iter().all(|&c| c == cs[0]) {
        return 0.0;
    }
    match smoothed_table(xs, cs, k) {
        Some(t) => mi_of_table(&t, eps),
        None => 0.0,
    }
}

fn sd(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    (x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0)).sqrt()
}

/// The closed form the reference's output equals: over cells with
/// S_ic / (T_c dx) > eps, sum S_ic ln(S_ic / (T_c S_i)), plus ln(1 - S_512),
/// with S the smoothed table, T_c its column sums, S_i its row sums.
pub fn closed_form(t: &Smoothed, eps: f64) -> f64 {
    let g = &t.grid;
    let dx = (g[GRID - 1] - g[0]) / (GRID - 1) as f64;
    let mut rows = vec![0.0f64; GRID];
    for col in t.s.chunks(GRID) {
        for (r, v) in rows.iter_mut().zip(col) {
            *r += v;
        }
    }
    let mut sum = 0.0;
    for col in t.s.chunks(GRID) {
        let tc: f64 = col.iter().sum();
        for (v, r) in col.iter().zip(&rows) {
            if v / (tc * dx) > eps {
                sum += v * (v / (tc * r)).ln();
            }
        }
    }
    sum + (1.0 - rows[GRID - 1]).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_seq_ends_exactly() {
        let g = r_seq(-1.3, 2.9, 512);
        assert_eq!(g.len(), 512);
        assert_eq!(g[0], -1.3);
        assert_eq!(g[511], 2.9);
        assert_eq!(g[1], -1.3 + 1.0 * (4.2 / 511.0));
    }

    #[test]
    fn banded_solve_inverts_the_smoother_and_keeps_column_sums() {
        let m = 40;
        let lambda = 7.25;
        let f = Banded::smoother(m, lambda);
        let b: Vec<f64> = (0..m).map(|i| ((i * 7919) % 13) as f64 / 13.0).collect();
        let mut z = b.clone();
        f.solve(&mut z);
        // Apply A = I + l^2 D2'D2 + 2 l D1'D1 to z through its definition.
        let d1: Vec<f64> = (0..m - 1).map(|i| z[i + 1] - z[i]).collect();
        let d2: Vec<f64> = (0..m - 2).map(|i| z[i + 2] - 2.0 * z[i + 1] + z[i]).collect();
        let mut az = z.clone();
        for (r, v) in d1.iter().enumerate() {
            az[r] -= 2.0 * lambda * v;
            az[r + 1] += 2.0 * lambda * v;
        }
        for (r, v) in d2.iter().enumerate() {
            az[r] += lambda * lambda * v;
            az[r + 1] -= 2.0 * lambda * lambda * v;
            az[r + 2] += lambda * lambda * v;
        }
        for i in 0..m {
            assert!((az[i] - b[i]).abs() < 1e-10, "row {i}: {} vs {}", az[i], b[i]);
        }
        let (sb, sz): (f64, f64) = (b.iter().sum(), z.iter().sum());
        assert!((sb - sz).abs() < 1e-10);
    }
}
