//! Pareto radii: quantiles of the pairwise distances of a 1-D sample, found
//! without materializing the n(n-1)/2 pairs.
//!
//! On a sorted sample the number of pairs at distance <= d is counted by one
//! two-pointer sweep (O(n)). Because that count is monotone in d, and the
//! bit patterns of non-negative doubles are ordered like their values, the
//! k-th smallest distance is found *exactly* by bisection over bit patterns:
//! at most 64 sweeps, and the answer is one of the actual differences
//! `x[j] - x[i]`.

/// Pairs (i < j) of the ascending sample `sorted` with `sorted[j] - sorted[i] <= d`
/// (`d >= 0`).
pub fn count_pairs_within(sorted: &[f64], d: f64) -> u64 {
    sweep(sorted, d, u64::MAX)
}

/// Whether more than `k` pairs of `sorted` are at distance `<= d` (the count of
/// [`count_pairs_within`], stopped as soon as it passes `k`).
pub fn count_pairs_exceed(sorted: &[f64], d: f64, k: u64) -> bool {
    sweep(sorted, d, k) > k
}

/// The two-pointer count of pairs at distance `<= d`, stopped once it exceeds `stop`.
fn sweep(sorted: &[f64], d: f64, stop: u64) -> u64 {
    let n = sorted.len();
    let mut j = 0usize;
    let mut count = 0u64;
    for i in 0..n {
        if j < i + 1 {
            j = i + 1;
        }
        while j < n && sorted[j] - sorted[i] <= d {
            j += 1;
        }
        count += (j - i - 1) as u64;
        if count > stop {
            break;
        }
    }
    count
}

/// Number of pairs of a sample of `n` points.
pub fn pair_count(n: usize) -> u64 {
    let n = n as u64;
    n * n.saturating_sub(1) / 2
}

/// The `k`-th smallest pairwise distance (1-based, `1 <= k <= n(n-1)/2`) of
/// the ascending sample `sorted`: the smallest double `d` with at least `k`
/// pairs at distance `<= d`. Exact: the answer is bracketed (interpolation
/// and bisection steps on the value) until at most a few n pairs lie in the
/// bracket, then those pairs' distances are listed and the right one selected.
pub fn kth_pair_distance(sorted: &[f64], k: u64) -> f64 {
    let n = sorted.len();
    assert!(n >= 2 && k >= 1 && k <= pair_count(n), "kth_pair_distance: k out of range");
    let zeros = count_pairs_within(sorted, 0.0);
    if zeros >= k {
        return 0.0;
    }
    // Invariant: count(lo) = clo < k <= chi = count(hi).
    let (mut lo, mut clo) = (0.0f64, zeros);
    let (mut hi, mut chi) = (sorted[n - 1] - sorted[0], pair_count(n));
    let budget = 4 * n as u64 + 64;
    let mut step = 0u32;
    while chi - clo > budget {
        // Interpolate the count linearly between the ends (the counts near a
        // quantile are smooth), alternating with bisection so that the
        // bracket at least halves every other step.
        step += 1;
        let mid = if step % 2 == 1 {
            let t = (k - clo) as f64 / (chi - clo) as f64;
            let t = t.clamp(0.02, 0.98);
            lo + t * (hi - lo)
        } else {
            0.5 * (lo + hi)
        };
        if mid <= lo || mid >= hi {
            // No double between lo and hi: every pair in (lo, hi] is at hi.
            return hi;
        }
        let c = count_pairs_within(sorted, mid);
        if c >= k {
            hi = mid;
            chi = c;
        } else {
            lo = mid;
            clo = c;
        }
    }
    // The distances in (lo, hi], by two pointers: for each i, j in [a, b).
    let mut within = Vec::with_capacity((chi - clo) as usize);
    let (mut a, mut b) = (0usize, 0usize);
    for i in 0..n {
        a = a.max(i + 1);
        while a < n && sorted[a] - sorted[i] <= lo {
            a += 1;
        }
        b = b.max(a);
        while b < n && sorted[b] - sorted[i] <= hi {
            b += 1;
        }
        within.extend(sorted[a..b].iter().map(|v| v - sorted[i]));
    }
    debug_assert_eq!(within.len() as u64, chi - clo);
    let r = (k - clo - 1) as usize;
    *within.select_nth_unstable_by(r, |x, y| x.partial_cmp(y).expect("finite")).1
}

/// Ultsch's size correction of the Pareto radius: times 4 / n^0.2 above 1024
/// points (continuous at 1024, where 1024^0.2 = 4).
pub fn size_correction(r: f64, n: usize) -> f64 {
    if n > 1024 {
        r * 4.0 / (n as f64).powf(0.2)
    } else {
        r
    }
}

/// The Pareto radius used by `method = "pde"`: the exact 18% quantile of all
/// pairwise distances (the ceil(0.18 m)-th smallest of the m pairs), with the
/// size correction. 0 for fewer than 2 points or when that quantile is 0.
pub fn pareto_radius(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n < 2 {
        return 0.0;
    }
    let m = pair_count(n);
    let k = ((0.18 * m as f64).ceil() as u64).clamp(1, m);
    size_correction(kth_pair_distance(sorted, k), n)
}

/// The radius memshare's `mutualinfo()` uses (DataVisualizations 1.4.0
/// `ParetoRadius_fast()` on all points): the 18% distance quantile by the
/// same bisection on values (stop at a relative width of 1e-9, the last
/// midpoint with more than floor(0.18 m) pairs at or below it), then the size
/// correction. NaN for fewer than 2 points or a constant sample.
pub fn memshare_radius(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n < 2 {
        return f64::NAN;
    }
    let m = pair_count(n);
    let k = (0.18 * m as f64).floor() as u64;
    let mut lo = 0.0f64;
    let mut hi = sorted[n - 1] - sorted[0];
    let mut ans = hi;
    while hi - lo > 1e-9 * (1.0 + hi) {
        let mid = 0.5 * (lo + hi);
        if count_pairs_exceed(sorted, mid, k) {
            ans = mid;
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // The bisection stops at a positive width, so `ans` is 0 only for a
    // constant sample: ParetoRadius_fast()'s fallback for a zero quantile (the
    // smallest non-zero percentile) never applies, and heavily tied data get a
    // radius of about 1e-9 times their range (memshare's MI of such data is then
    // negative).
    if ans == 0.0 {
        return f64::NAN;
    }
    size_correction(ans, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all_distances(sorted: &[f64]) -> Vec<f64> {
        let mut d = Vec::new();
        for i in 0..sorted.len() {
            for j in i + 1..sorted.len() {
                d.push(sorted[j] - sorted[i]);
            }
        }
        d.sort_by(|a, b| a.partial_cmp(b).unwrap());
        d
    }

    #[test]
    fn counts_pairs_with_ties() {
        let x = [0.0, 0.0, 0.0, 1.0, 2.0];
        assert_eq!(count_pairs_within(&x, 0.0), 3);
        assert_eq!(count_pairs_within(&x, 1.0), 3 + 3 + 1);
        assert_eq!(count_pairs_within(&x, 2.0), 10);
        assert_eq!(pair_count(5), 10);
    }

    #[test]
    fn radius_of_degenerate_samples() {
        assert_eq!(pareto_radius(&[]), 0.0);
        assert_eq!(pareto_radius(&[3.0]), 0.0);
        assert_eq!(pareto_radius(&[3.0, 3.0, 3.0]), 0.0);
        assert_eq!(pareto_radius(&[1.0, 3.0]), 2.0);
        assert!(memshare_radius(&[2.0, 2.0]).is_nan());
    }

    #[test]
    fn memshare_radius_of_tied_data_is_tiny_not_zero() {
        // 10 zeros and 2 ones: 46 of 66 distances are 0, more than 18%.
        let mut x = vec![0.0; 10];
        x.extend([1.0, 1.0]);
        let r = memshare_radius(&x);
        assert!(r > 0.0 && r < 1e-9, "{r}");
    }

    proptest! {
        #[test]
        fn kth_distance_is_the_sorted_distance(v in prop::collection::vec(-50i32..50, 2..40), scale in 0.01f64..100.0, kf in 0.0f64..1.0) {
            let mut x: Vec<f64> = v.iter().map(|&a| a as f64 * scale).collect();
            x.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let d = all_distances(&x);
            let k = ((kf * d.len() as f64) as u64).clamp(1, d.len() as u64);
            prop_assert_eq!(kth_pair_distance(&x, k), d[k as usize - 1]);
            let kk = ((0.18 * d.len() as f64).ceil() as usize).clamp(1, d.len());
            prop_assert_eq!(pareto_radius(&x), d[kk - 1]);
        }

        #[test]
        fn counts_match_brute_force(v in prop::collection::vec(-1000.0f64..1000.0, 0..60), dd in 0.0f64..500.0) {
            let mut x = v.clone();
            x.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let brute = all_distances(&x).iter().filter(|&&e| e <= dd).count() as u64;
            prop_assert_eq!(count_pairs_within(&x, dd), brute);
        }
    }
}
