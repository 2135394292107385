//! Known answers: memshare's reference outputs, the closed form of its
//! estimator, Gaussian mixtures whose MI is computed by quadrature, and the
//! properties `method = "pde"` promises.

use super::memshare::{closed_form, memshare_mi, smoothed_table};
use super::pareto::memshare_radius;
use super::*;
use proptest::prelude::*;

const EPS: f64 = f64::EPSILON * 1000.0;

fn opts(method: Method) -> Options {
    Options { method, eps: EPS, na_rm: false, discrete: false }
}

fn mi(x: &[f64], y: &[i32], method: Method) -> f64 {
    let k = *y.iter().max().unwrap() as usize;
    column_mi(x, y, k, &opts(method)).unwrap()
}

/// Sorted copy and 0-based classes, as `column_mi` hands them on.
fn sorted(x: &[f64], y: &[i32]) -> (Vec<f64>, Vec<u32>) {
    let mut p: Vec<(f64, u32)> = x.iter().copied().zip(y.iter().map(|&c| (c - 1) as u32)).collect();
    p.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
    p.into_iter().unzip()
}

// ---- a small deterministic generator ---------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unif(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn norm(&mut self) -> f64 {
        let (u, v) = (self.unif(), self.unif());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// n points: class sizes from the priors (rounded, summing to n), each class
/// N(mu_c, sd_c^2).
fn gaussian_classes(rng: &mut Rng, n: usize, priors: &[f64], mus: &[f64], sds: &[f64]) -> (Vec<f64>, Vec<i32>) {
    let mut x = Vec::with_capacity(n);
    let mut y = Vec::with_capacity(n);
    let mut done = 0;
    for c in 0..priors.len() {
        let nc = if c + 1 == priors.len() { n - done } else { (priors[c] * n as f64).round() as usize };
        done += nc;
        for _ in 0..nc {
            x.push(mus[c] + sds[c] * rng.norm());
            y.push(c as i32 + 1);
        }
    }
    (x, y)
}

/// I(X; Y) of a Gaussian mixture: H(X) (by quadrature) - sum_c pi_c H(N(mu_c, sd_c^2)).
fn mixture_truth(priors: &[f64], mus: &[f64], sds: &[f64]) -> f64 {
    let lo = (0..mus.len()).map(|c| mus[c] - 14.0 * sds[c]).fold(f64::INFINITY, f64::min);
    let hi = (0..mus.len()).map(|c| mus[c] + 14.0 * sds[c]).fold(f64::NEG_INFINITY, f64::max);
    let m = 400_000;
    let h = (hi - lo) / m as f64;
    let dens = |x: f64| -> f64 {
        (0..mus.len())
            .map(|c| {
                priors[c] * (-0.5 * ((x - mus[c]) / sds[c]).powi(2)).exp()
                    / (sds[c] * (2.0 * std::f64::consts::PI).sqrt())
            })
            .sum()
    };
    let mut hx = 0.0;
    for i in 0..=m {
        let p = dens(lo + i as f64 * h);
        let w = if i == 0 || i == m { 0.5 } else { 1.0 };
        if p > 0.0 {
            hx -= w * p * p.ln();
        }
    }
    hx *= h;
    let hc: f64 = (0..mus.len())
        .map(|c| priors[c] * 0.5 * (2.0 * std::f64::consts::PI * std::f64::consts::E * sds[c] * sds[c]).ln())
        .sum();
    hx - hc
}

/// The class sizes of the stand-in for the paper's data: the 32 sizes issue 14
/// gives (they sum to 10,263) scaled to N = 10,446 (largest remainders).
const PAPER_SIZES: [usize; 32] = [
    1115, 555, 543, 529, 525, 524, 514, 510, 506, 477, 465, 422, 415, 381, 378, 309, 295, 264, 187, 182, 181, 169, 169,
    154, 153, 121, 89, 81, 80, 67, 49, 37,
];

fn paper_classes() -> Vec<i32> {
    PAPER_SIZES.iter().enumerate().flat_map(|(c, &s)| std::iter::repeat_n(c as i32 + 1, s)).collect()
}

// ---- memshare mode -----------------------------------------------------------

fn memshare_case(which: i32) -> (Vec<f64>, Vec<i32>) {
    let text = include_str!("testdata/memshare-cases.txt");
    let mut x = Vec::new();
    let mut y = Vec::new();
    for line in text.lines() {
        let mut f = line.split(' ');
        if f.next().unwrap().parse::<i32>().unwrap() != which {
            continue;
        }
        y.push(f.next().unwrap().parse::<i32>().unwrap());
        x.push(f.next().unwrap().parse::<f64>().unwrap());
    }
    (x, y)
}

#[test]
fn memshare_mode_gives_the_reference_values() {
    // memshare 1.0.3.1 R/mutualinfo.R with DataVisualizations 1.4.0 and
    // ScatterDensity 0.1.1 on R 4.2.2 (issue 14).
    let expected = [
        (1, 0.321095643926, 5.5636290551e-01),
        (2, 0.380914402707, 3.6420336406e-01),
        (3, 0.123823239242, 4.8251477463e-01),
    ];
    for (case, value, radius) in expected {
        let (x, y) = memshare_case(case);
        let (xs, _) = sorted(&x, &y);
        let r = memshare_radius(&xs);
        assert!((r - radius).abs() < 1e-10 * radius.max(1.0) + 5e-11, "case {case}: radius {r:.10e} vs {radius:.10e}");
        let got = mi(&x, &y, Method::Memshare);
        assert!((got - value).abs() < 1e-9, "case {case}: {got:.12} vs {value:.12}");
        // and the closed form
        let (xs, cs) = sorted(&x, &y);
        let t = smoothed_table(&xs, &cs, 32).unwrap();
        assert!((closed_form(&t, EPS) - value).abs() < 1e-9, "case {case}: closed form");
    }
}

#[test]
fn memshare_mode_degenerate_inputs_give_zero() {
    assert_eq!(mi(&[1.0, 2.0], &[1, 2], Method::Memshare), 0.0);
    assert_eq!(mi(&[3.0; 10], &[1, 2, 1, 2, 1, 2, 1, 2, 1, 2], Method::Memshare), 0.0);
    assert_eq!(mi(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 1, 1], Method::Memshare), 0.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// memshare's output equals the closed form on the smoothed table S:
    /// sum over cells with S_ic / (T_c dx) > eps of S_ic ln(S_ic / (T_c S_i)) + ln(1 - S_512).
    #[test]
    fn memshare_mode_equals_the_closed_form(
        n in prop_oneof![3usize..300, 300usize..=10_000],
        k in 2usize..12,
        kind in 0u8..4,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng(seed);
        let y: Vec<i32> = (0..n).map(|i| (i % k) as i32 + 1).collect();
        let x: Vec<f64> = y.iter().map(|&c| match kind {
            0 => rng.norm() + 0.3 * c as f64,
            1 => (rng.norm() * 2.0 + c as f64).round(),        // heavy ties
            2 => if rng.unif() < 0.5 { 0.0 } else { (1.0 + (rng.norm() + c as f64).exp()).log2() },
            _ => rng.unif() * 1e6 + 1e5 * (c % 3) as f64,        // large scale
        }).collect();
        let (xs, cs) = sorted(&x, &y);
        if xs[0] == xs[n - 1] {
            return Ok(());
        }
        let got = memshare_mi(&xs, &cs, k, EPS);
        let t = smoothed_table(&xs, &cs, k).unwrap();
        let cf = closed_form(&t, EPS);
        prop_assert!((got - cf).abs() < 1e-9, "n {} k {} kind {}: {} vs {}", n, k, kind, got, cf);
        // each smoothed class column keeps its label frequency
        for (c, col) in t.s.chunks(512).enumerate() {
            let tc: f64 = col.iter().sum();
            prop_assert!((tc - t.sizes[c] as f64 / n as f64).abs() < 1e-12);
        }
    }
}

// ---- discrete x --------------------------------------------------------------

#[test]
fn discrete_x_gives_the_exact_plug_in_mi() {
    let y: Vec<i32> = (0..400).map(|i| (i % 4) + 1).collect();
    let x: Vec<f64> = y.iter().map(|&c| c as f64 * 10.0).collect();
    for method in [Method::Pde, Method::Memshare] {
        let o = Options { method, eps: EPS, na_rm: false, discrete: true };
        let v = column_mi(&x, &y, 4, &o).unwrap();
        // two identical 4-class variables: ln 4 nats = 2 bits (memshare gives 1.4988 bits)
        assert!((v - 4f64.ln()).abs() < 1e-14, "{v}");
    }
    // independent: p_ab = p_a p_b exactly
    let x2: Vec<f64> = (0..400).map(|i| ((i / 4) % 2) as f64).collect();
    let o = Options { method: Method::Pde, eps: EPS, na_rm: false, discrete: true };
    assert!(column_mi(&x2, &y, 4, &o).unwrap().abs() < 1e-15);
}

// ---- pde mode: known answers -------------------------------------------------

const N: usize = 10_446;

fn pde_mean_over_seeds(priors: &[f64], mus: &[f64], sds: &[f64]) -> f64 {
    let mut s = 0.0;
    for seed in 0..5u64 {
        let mut rng = Rng(1000 + seed);
        let (x, y) = gaussian_classes(&mut rng, N, priors, mus, sds);
        s += mi(&x, &y, Method::Pde);
    }
    s / 5.0
}

/// (class probabilities, class means, class standard deviations, true MI)
type MixtureCase<'a> = (&'a [f64], &'a [f64], &'a [f64], f64);

#[test]
fn quadrature_reproduces_the_given_answers() {
    let cases: [MixtureCase<'_>; 6] = [
        (&[0.5, 0.5], &[0.0, 0.5], &[1.0, 1.0], 0.03031),
        (&[0.5, 0.5], &[0.0, 1.0], &[1.0, 1.0], 0.11142),
        (&[0.5, 0.5], &[0.0, 2.0], &[1.0, 1.0], 0.33683),
        (&[0.5, 0.5], &[0.0, 4.0], &[1.0, 1.0], 0.63272),
        (&[0.5, 0.5], &[0.0, 0.0], &[1.0, 3.0], 0.18649),
        (&[0.7, 0.2, 0.1], &[0.0, 1.5, 3.0], &[1.0, 1.0, 1.0], 0.31861),
    ];
    for (p, m, s, truth) in cases {
        let q = mixture_truth(p, m, s);
        assert!((q - truth).abs() < 6e-6, "{q} vs {truth}");
    }
}

#[test]
fn pde_is_within_5_percent_of_known_gaussian_answers() {
    let cases: [(&[f64], &[f64], &[f64]); 6] = [
        (&[0.5, 0.5], &[0.0, 0.5], &[1.0, 1.0]),
        (&[0.5, 0.5], &[0.0, 1.0], &[1.0, 1.0]),
        (&[0.5, 0.5], &[0.0, 2.0], &[1.0, 1.0]),
        (&[0.5, 0.5], &[0.0, 4.0], &[1.0, 1.0]),
        (&[0.5, 0.5], &[0.0, 0.0], &[1.0, 3.0]),
        (&[0.7, 0.2, 0.1], &[0.0, 1.5, 3.0], &[1.0, 1.0, 1.0]),
    ];
    for (p, m, s) in cases {
        let truth = mixture_truth(p, m, s);
        let est = pde_mean_over_seeds(p, m, s);
        let ok = (est - truth).abs() <= (0.05 * truth).max(0.005);
        eprintln!("pde: truth {truth:.5} estimate {est:.5} ({:+.2}%)", 100.0 * (est / truth - 1.0));
        assert!(ok, "truth {truth} estimate {est}");
    }
}

#[test]
fn pde_on_independent_data_with_32_classes_is_below_001() {
    let y = paper_classes();
    let mut worst: f64 = 0.0;
    for seed in 0..5u64 {
        let mut rng = Rng(77 + seed);
        let x: Vec<f64> = y.iter().map(|_| rng.norm()).collect();
        let v = mi(&x, &y, Method::Pde);
        worst = worst.max(v);
    }
    eprintln!("pde: independent data, 32 classes: largest of 5 seeds {worst:.5}");
    assert!(worst < 0.01, "{worst}");
}

#[test]
fn pde_on_32_separated_classes_is_h_of_y() {
    let y = paper_classes();
    let n = y.len() as f64;
    let hy: f64 = PAPER_SIZES.iter().map(|&s| -(s as f64 / n) * (s as f64 / n).ln()).sum();
    let mut rng = Rng(5);
    let x: Vec<f64> = y.iter().map(|&c| 20.0 * c as f64 + rng.norm()).collect();
    let v = mi(&x, &y, Method::Pde);
    assert!((v - hy).abs() < 0.02 * hy, "{v} vs H(Y) {hy}");
    assert!((hy - 3.2332).abs() < 1e-4);
}

#[test]
fn pde_is_invariant_under_increasing_affine_maps() {
    let mut rng = Rng(9);
    let (x, y) = gaussian_classes(&mut rng, 3000, &[0.5, 0.3, 0.2], &[0.0, 1.0, 2.5], &[1.0, 0.7, 1.5]);
    let base = mi(&x, &y, Method::Pde);
    for (a, b) in [(2.0, 0.0), (0.25, -3.0), (3.7, 5.2), (1e-4, 2e-4), (1e6, -7e5), (0.01, 0.0)] {
        let z: Vec<f64> = x.iter().map(|v| a * v + b).collect();
        let t = mi(&z, &y, Method::Pde);
        assert!((t - base).abs() <= 1e-12 * base, "a {a} b {b}: {t} vs {base}");
    }
    // the order of the rows does not matter
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.reverse();
    let xr: Vec<f64> = idx.iter().map(|&i| x[i]).collect();
    let yr: Vec<i32> = idx.iter().map(|&i| y[i]).collect();
    assert_eq!(mi(&xr, &yr, Method::Pde), base);
}

#[test]
fn pde_with_ties_is_the_discrete_mi() {
    // x in {0, 1, 2} with class-dependent probabilities.
    let probs = [[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]];
    let mut rng = Rng(3);
    let mut x = Vec::new();
    let mut y = Vec::new();
    for (c, p) in probs.iter().enumerate() {
        for _ in 0..N / 2 {
            let u = rng.unif();
            x.push(if u < p[0] {
                0.0
            } else if u < p[0] + p[1] {
                1.0
            } else {
                2.0
            });
            y.push(c as i32 + 1);
        }
    }
    let truth: f64 = (0..3)
        .map(|v| {
            let pv = 0.5 * (probs[0][v] + probs[1][v]);
            (0..2).map(|c| 0.5 * probs[c][v] * (probs[c][v] / pv).ln()).sum::<f64>()
        })
        .sum();
    let v = mi(&x, &y, Method::Pde);
    assert!(v >= 0.0 && (v - truth).abs() < 0.05 * truth, "{v} vs {truth}");
}

/// Zero-inflated classes: with probability z_c the feature is 0, else N(mu_c, 1).
/// Truth: I(A; Y) + P(continuous) I(X; Y | continuous), A the zero indicator.
fn zero_inflated_truth(z: &[f64], mus: &[f64]) -> f64 {
    let k = z.len() as f64;
    let pz: f64 = z.iter().sum::<f64>() / k;
    let h = |p: f64| {
        if p <= 0.0 || p >= 1.0 {
            0.0
        } else {
            -p * p.ln() - (1.0 - p) * (1.0 - p).ln()
        }
    };
    let i_a = h(pz) - z.iter().map(|&q| h(q) / k).sum::<f64>();
    let pc = 1.0 - pz;
    let priors: Vec<f64> = z.iter().map(|&q| (1.0 - q) / k / pc).collect();
    i_a + pc * mixture_truth(&priors, mus, &vec![1.0; z.len()])
}

#[test]
fn pde_with_60_percent_zeros_matches_the_mixture_truth() {
    let z = [0.45, 0.75];
    let mus = [1.0, 2.5];
    let truth = zero_inflated_truth(&z, &mus);
    let mut s = 0.0;
    for seed in 0..5u64 {
        let mut rng = Rng(40 + seed);
        let mut x = Vec::new();
        let mut y = Vec::new();
        for c in 0..2 {
            for _ in 0..N / 2 {
                x.push(if rng.unif() < z[c] { 0.0 } else { mus[c] + rng.norm() });
                y.push(c as i32 + 1);
            }
        }
        let v = mi(&x, &y, Method::Pde);
        assert!(v >= 0.0);
        s += v;
    }
    let est = s / 5.0;
    eprintln!("pde: 60% zeros: truth {truth:.5} estimate {est:.5}");
    assert!((est - truth).abs() < 0.05 * truth, "{est} vs {truth}");
}

#[test]
fn pde_handles_constant_tiny_and_outlying_features() {
    let y: Vec<i32> = (0..200).map(|i| (i % 4) + 1).collect();
    assert_eq!(mi(&[1.5; 200], &y, Method::Pde), 0.0);
    // an odd number of points, and a single class among the atoms
    let y_odd: Vec<i32> = (0..201).map(|i| (i % 4) + 1).collect();
    assert_eq!(mi(&[1.5; 201], &y_odd, Method::Pde), 0.0);
    assert_eq!(jackknife_mi(&[0, 1, 1, 0, 2], &[0, 0, 0, 0, 0], 3, 1), 0.0);
    // one class of a single point
    let mut rng = Rng(11);
    let mut y2: Vec<i32> = (0..500).map(|i| (i % 2) + 1).collect();
    y2[0] = 3;
    let x2: Vec<f64> = y2.iter().map(|&c| c as f64 + rng.norm()).collect();
    let v = mi(&x2, &y2, Method::Pde);
    assert!(v.is_finite() && v > 0.0);
    // an outlier does not change the smoothing of the others
    let (mut x3, y3) = gaussian_classes(&mut Rng(12), 4000, &[0.5, 0.5], &[0.0, 2.0], &[1.0, 1.0]);
    let before = mi(&x3, &y3, Method::Pde);
    x3[0] = 1000.0;
    let after = mi(&x3, &y3, Method::Pde);
    assert!((before - after).abs() < 0.01 * before, "{before} -> {after}");
}

#[test]
fn non_finite_values_are_an_error_or_left_out() {
    let x = [1.0, f64::NAN, 3.0, 4.0, 2.0, 0.5];
    let y = [1, 2, 1, 2, 1, 2];
    let o = opts(Method::Pde);
    assert_eq!(column_mi(&x, &y, 2, &o), Err(MiError::NonFinite { row: 1 }));
    let o2 = Options { na_rm: true, ..o };
    assert!(column_mi(&x, &y, 2, &o2).unwrap().is_finite());
    assert_eq!(column_mi(&x, &[1, 2, 1, 9, 1, 2], 2, &o2), Err(MiError::BadClass { row: 3, code: 9 }));
    // NA classes are left out
    let yn = [1, NA_CODE, 1, 2, 1, 2];
    let xf = [1.0, 99.0, 3.0, 4.0, 2.0, 0.5];
    let a = column_mi(&xf, &yn, 2, &o).unwrap();
    let b = column_mi(&[1.0, 3.0, 4.0, 2.0, 0.5], &[1, 1, 2, 1, 2], 2, &o).unwrap();
    assert_eq!(a, b);
}

// ---- pde mode: heavy tails, counts, rounded values (issue 29) ---------------

use super::pde::{is_atom, jackknife_mi, qnorm, spread_ties};

#[test]
fn qnorm_matches_r() {
    // qnorm() of R 4.2.2
    for (p, q) in [
        (0.5, 0.0),
        (0.975, 1.959963984540054),
        (0.9, 1.2815515655446004),
        (0.02, -2.053748910631823),
        (1e-4, -3.71901648545568),
        (1.0 - 1e-6, 4.753424308817089),
    ] {
        assert!((qnorm(p) - q).abs() < 1e-14 * q.abs().max(1.0), "qnorm({p}) = {} vs {q}", qnorm(p));
    }
}

#[test]
fn atoms_are_runs_that_are_coarse_on_the_normal_score_scale() {
    let n = 10_446;
    // a level of a Poisson(50) count at its mode (5.6% of the points) is fine
    assert!(!is_atom(n / 2 - 292, n / 2 + 292, n));
    // a level of N(0, 1) rounded to 0.5 at its mode (20%) is coarse
    assert!(is_atom(n / 2 - 1045, n / 2 + 1045, n));
    // 60% zeros, and a run of 20 points in the far tail
    assert!(is_atom(0, 6268, n));
    assert!(is_atom(n - 20, n, n));
    // a single point never; a pair at the centre not
    assert!(!is_atom(5, 6, n));
    assert!(!is_atom(n / 2, n / 2 + 2, n));
}

#[test]
fn jackknife_mi_of_a_table() {
    // y a function of a: the MI is H(y) = ln 4, which the jackknife gives to
    // within its (small) bias at 200 points per cell.
    let a: Vec<usize> = (0..800).map(|i| i % 4).collect();
    let b: Vec<u32> = a.iter().map(|&v| v as u32).collect();
    assert!((jackknife_mi(&a, &b, 4, 4) - 4f64.ln()).abs() < 0.01);
    // independent a and b: about 0 on average, where the plug-in MI is biased
    // up by about 9 / 1600 (the spread of one table's estimate is about 0.003)
    let mut rng = Rng(29);
    let (mut jackknife, mut plug_in) = (0.0, 0.0);
    for _ in 0..200 {
        let a2: Vec<usize> = (0..800).map(|_| (rng.unif() * 4.0) as usize).collect();
        let b2: Vec<u32> = (0..800).map(|_| (rng.unif() * 4.0) as u32).collect();
        jackknife += jackknife_mi(&a2, &b2, 4, 4) / 200.0;
        plug_in += plug_in_mi(&a2, &b2, 4, 4) / 200.0;
    }
    assert!(jackknife.abs() < 1e-3, "{jackknife}");
    assert!(plug_in > 4e-3, "{plug_in}");
    // two points per class, each class its own value: the jackknife of so
    // small a table overshoots H(y) = ln 4; the estimate stops there
    let x: Vec<f64> = (0..8).map(|i| (i / 2) as f64).collect();
    let y: Vec<i32> = (0..8).map(|i| i / 2 + 1).collect();
    assert!(
        jackknife_mi(&x.iter().map(|&v| v as usize).collect::<Vec<_>>(), &[0, 0, 1, 1, 2, 2, 3, 3], 4, 4) > 4f64.ln()
    );
    assert_eq!(mi(&x, &y, Method::Pde), 4f64.ln());
}

impl Rng {
    fn poisson(&mut self, lambda: f64) -> f64 {
        // inversion (lambda is small here)
        let u = self.unif();
        let (mut k, mut p) = (0u32, (-lambda).exp());
        let mut cdf = p;
        while u > cdf && k < 10_000 {
            k += 1;
            p *= lambda / k as f64;
            cdf += p;
        }
        k as f64
    }
    fn student_t2(&mut self) -> f64 {
        // N / sqrt(chi2_2 / 2), chi2_2 = -2 ln U
        self.norm() / (-self.unif().ln()).sqrt()
    }
}

/// Null features of the tailed and tied families: 32 classes of the paper's
/// sizes, 5 seeds; the mean must stay below 0.01 nats (issue 29).
#[test]
fn pde_null_features_with_heavy_tails_counts_and_rounding_are_below_001() {
    let y = paper_classes();
    type Draw = fn(&mut Rng) -> f64;
    let families: [(&str, Draw); 6] = [
        ("lognormal(0,2)", |r| (2.0 * r.norm()).exp()),
        ("t_2", |r| r.student_t2()),
        ("Poisson(50)", |r| r.poisson(50.0)),
        ("N(0,1) rounded to 0.1", |r| (r.norm() * 10.0).round() / 10.0),
        ("60% zeros + lognormal", |r| if r.unif() < 0.6 { 0.0 } else { (2.0 * r.norm()).exp() }),
        ("Poisson(5)", |r| r.poisson(5.0)),
    ];
    for (name, draw) in families {
        let mut s = 0.0;
        for seed in 0..5u64 {
            let mut rng = Rng(500 + seed);
            let x: Vec<f64> = y.iter().map(|_| draw(&mut rng)).collect();
            s += mi(&x, &y, Method::Pde);
        }
        eprintln!("pde: null {name}: mean of 5 seeds {:.5}", s / 5.0);
        assert!(s / 5.0 < 0.01, "{name}: {}", s / 5.0);
    }
}

/// Informative lognormal and Poisson features: shifts of 0, 0.5, ... 2 latent
/// sds in 5 groups of the 32 classes; truths by quadrature (the MI of a
/// lognormal is that of its log) and by exact sums over the counts.
#[test]
fn pde_informative_lognormal_and_poisson_features_are_within_5_percent() {
    let y = paper_classes();
    let n = y.len() as f64;
    let shift = |c: i32| 0.5 * ((c - 1) % 5) as f64;
    let priors: Vec<f64> = PAPER_SIZES.iter().map(|&s| s as f64 / n).collect();
    let mus: Vec<f64> = (1..=32).map(shift).collect();
    let gauss = mixture_truth(&priors, &mus, &[1.0; 32]);
    // Poisson(50 + 7.07 s): exact sum
    let lam = |c: i32| 50.0 + shift(c) * 50f64.sqrt();
    let pmf = |l: f64, k: u32| -> f64 {
        let mut lp = -l;
        for j in 1..=k {
            lp += (l / j as f64).ln();
        }
        lp.exp()
    };
    let mut pois = 0.0;
    for k in 0..400u32 {
        let f: Vec<f64> = (1..=32).map(|c| pmf(lam(c), k)).collect();
        let p: f64 = f.iter().zip(&priors).map(|(a, b)| a * b).sum();
        for c in 0..32 {
            if f[c] > 0.0 {
                pois += priors[c] * f[c] * (f[c] / p).ln();
            }
        }
    }
    for (name, truth, family) in [("lognormal(0,2)", gauss, 0), ("Poisson(50)", pois, 1)] {
        let mut s = 0.0;
        for seed in 0..5u64 {
            let mut rng = Rng(900 + seed);
            let x: Vec<f64> = y
                .iter()
                .map(|&c| if family == 0 { (2.0 * (rng.norm() + shift(c))).exp() } else { rng.poisson(lam(c)) })
                .collect();
            s += mi(&x, &y, Method::Pde);
        }
        let est = s / 5.0;
        eprintln!("pde: informative {name}: truth {truth:.5} estimate {est:.5} ({:+.2}%)", 100.0 * (est / truth - 1.0));
        assert!((est - truth).abs() < 0.05 * truth, "{name}: {est} vs {truth}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// The estimate depends on x only through its ranks (ties kept): any
    /// strictly increasing map gives the same bits, and it is never negative
    /// nor above ln k.
    #[test]
    fn pde_is_invariant_under_increasing_maps(
        n in 2usize..600,
        k in 2usize..6,
        levels in prop_oneof![Just(0u32), 2u32..40],
        seed in any::<u64>(),
    ) {
        let mut rng = Rng(seed);
        let y: Vec<i32> = (0..n).map(|i| (i % k) as i32 + 1).collect();
        let x: Vec<f64> = y.iter().map(|&c| {
            let v = rng.norm() + 0.4 * c as f64;
            if levels == 0 { v } else { (v * levels as f64 / 4.0).round() }
        }).collect();
        let base = mi(&x, &y, Method::Pde);
        prop_assert!((0.0..=(k as f64).ln() + 1e-12).contains(&base));
        for f in [|v: f64| v.powi(3) + 2.0 * v, |v: f64| v.atan(), |v: f64| (v / 3.0).exp()] {
            let z: Vec<f64> = x.iter().map(|&v| f(v)).collect();
            prop_assert_eq!(mi(&z, &y, Method::Pde), base);
        }
    }

    /// The one-pass jackknife is its definition: n times the plug-in MI minus
    /// (n - 1) times the mean of the plug-in MIs that leave one point out.
    #[test]
    fn jackknife_mi_is_the_mean_of_leaving_each_point_out(
        v in prop::collection::vec((0usize..5, 0u32..4), 3..120),
    ) {
        let (a, b): (Vec<usize>, Vec<u32>) = v.iter().copied().unzip();
        let distinct = |w: Vec<u64>| { let mut w = w; w.sort_unstable(); w.dedup(); w.len() };
        prop_assume!(distinct(a.iter().map(|&x| x as u64).collect()) > 1);
        prop_assume!(distinct(b.iter().map(|&y| y as u64).collect()) > 1);
        let n = a.len() as f64;
        let left_out: f64 = (0..a.len()).map(|i| {
            let (mut a1, mut b1) = (a.clone(), b.clone());
            a1.remove(i);
            b1.remove(i);
            plug_in_mi(&a1, &b1, 5, 4)
        }).sum::<f64>() / n;
        let expected = n * plug_in_mi(&a, &b, 5, 4) - (n - 1.0) * left_out;
        let got = jackknife_mi(&a, &b, 5, 4);
        prop_assert!((got - expected).abs() < 1e-9 * expected.abs().max(1.0), "{} vs {}", got, expected);
    }

    /// Spreading ties keeps each run's classes (only their order changes),
    /// leaves untied points alone, is deterministic, and does reorder: a run
    /// of 2 x 16 points stays sorted by class with probability 1 / 601,080,390.
    #[test]
    fn spreading_ties_reorders_classes_only_within_runs(
        v in prop::collection::vec((-6i32..6, 0u32..4), 1..300),
        pair in 1usize..24,
    ) {
        let mut pts: Vec<(f64, u32)> = v.iter().map(|&(a, c)| (a as f64, c)).collect();
        // a run of `pair` points of class 0 and `pair` of class 1 at x = 100
        pts.extend((0..2 * pair).map(|t| (100.0, (t % 2) as u32)));
        pts.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
        let (xs, cs): (Vec<f64>, Vec<u32>) = pts.into_iter().unzip();
        let mut spread = cs.clone();
        spread_ties(&xs, &mut spread);
        let mut again = cs.clone();
        spread_ties(&xs, &mut again);
        prop_assert_eq!(&spread, &again);
        let mut i = 0;
        while i < xs.len() {
            let j = (i..xs.len()).find(|&j| xs[j] != xs[i]).unwrap_or(xs.len());
            let mut run = spread[i..j].to_vec();
            run.sort_unstable();
            prop_assert_eq!(&run[..], &cs[i..j], "run at {}", i);
            i = j;
        }
        let last = &spread[xs.len() - 2 * pair..];
        prop_assert!(pair < 16 || last.windows(2).any(|w| w[0] > w[1]), "{:?}", last);
    }
}
