//! Mutual information of a numeric feature with a discrete response, in nats.
//! No R here, and no shared memory: statistics live apart from the segment
//! crate (pageshare-core); the `.Call` shell is `pageshare-r/src/mutual_info.rs`.
//!
//! - [`Method::Pde`]: Pareto Density Estimation with exact radii ([`pde`]).
//! - [`Method::Memshare`]: the numbers of memshare's `mutualinfo()` ([`memshare`]).
//! - `discrete`: x is a discrete variable too; both methods give the exact
//!   plug-in MI of the contingency table ([`plug_in_mi`]).
//!
//! Work and memory are O(n) per feature beyond the input (plus 512 x K for the
//! memshare table); the input is only read.

#![forbid(unsafe_code)]

pub mod memshare;
pub mod pareto;
pub mod pde;

#[cfg(test)]
mod tests;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Pde,
    Memshare,
}

#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub method: Method,
    /// memshare's threshold below which a density cell is left out.
    pub eps: f64,
    /// Leave out points whose x is not finite (otherwise an error).
    pub na_rm: bool,
    /// x is discrete: the plug-in MI of the contingency table.
    pub discrete: bool,
}

/// Why a feature has no MI.
#[derive(Debug, PartialEq)]
pub enum MiError {
    /// x has a non-finite value (NA, NaN, Inf) at this 0-based row and `na_rm` is off.
    NonFinite { row: usize },
    /// y has a code outside 1..=k (not NA) at this 0-based row.
    BadClass { row: usize, code: i32 },
}

/// R's NA_integer_.
pub const NA_CODE: i32 = i32::MIN;

/// MI (nats) of `x` with the classes `y` (codes 1..=k; [`NA_CODE`] rows are left out).
pub fn column_mi(x: &[f64], y: &[i32], k: usize, opts: &Options) -> Result<f64, MiError> {
    assert_eq!(x.len(), y.len(), "column_mi: x and y differ in length");
    let mut pairs: Vec<(f64, u32)> = Vec::with_capacity(x.len());
    for (row, (&v, &c)) in x.iter().zip(y).enumerate() {
        if c == NA_CODE {
            continue;
        }
        if c < 1 || c as usize > k {
            return Err(MiError::BadClass { row, code: c });
        }
        if !v.is_finite() {
            if opts.na_rm {
                continue;
            }
            return Err(MiError::NonFinite { row });
        }
        // -0 and 0 are one value.
        pairs.push((if v == 0.0 { 0.0 } else { v }, (c - 1) as u32));
    }
    // Ascending by x, then class: a total order, so the result does not depend
    // on the order of the rows.
    pairs.sort_unstable_by(|a, b| a.0.partial_cmp(&b.0).expect("finite").then(a.1.cmp(&b.1)));
    let (xs, cs): (Vec<f64>, Vec<u32>) = pairs.into_iter().unzip();
    if xs.len() < 2 {
        return Ok(0.0);
    }
    if opts.discrete {
        let mut cat = vec![0usize; xs.len()];
        let mut level = 0usize;
        for i in 1..xs.len() {
            if xs[i] != xs[i - 1] {
                level += 1;
            }
            cat[i] = level;
        }
        return Ok(plug_in_mi(&cat, &cs, level + 1, k));
    }
    Ok(match opts.method {
        Method::Pde => pde::pde_mi(&xs, &cs, k),
        Method::Memshare => memshare::memshare_mi(&xs, &cs, k, opts.eps),
    })
}

/// The plug-in MI (nats) of two discrete variables, `a` in 0..ka, `b` in 0..kb:
/// sum over cells of p_ab ln(p_ab / (p_a p_b)).
pub fn plug_in_mi(a: &[usize], b: &[u32], ka: usize, kb: usize) -> f64 {
    let n = a.len();
    if n == 0 {
        return 0.0;
    }
    let t = Table::of(a, b, ka, kb);
    let nf = n as f64;
    let mut mi = 0.0;
    for &((x, y), count) in &t.cells {
        let nab = count as f64;
        mi += nab / nf * (nab * nf / (t.na[x] as f64 * t.nb[y as usize] as f64)).ln();
    }
    mi.max(0.0)
}

/// The counts of the two-way table of `a` (in 0..ka) and `b` (in 0..kb): its
/// margins, and its non-empty cells with their counts, in sorted order (memory
/// O(n) whatever ka * kb is).
pub(crate) struct Table {
    pub na: Vec<u64>,
    pub nb: Vec<u64>,
    pub cells: Vec<((usize, u32), u64)>,
}

impl Table {
    pub fn of(a: &[usize], b: &[u32], ka: usize, kb: usize) -> Table {
        let mut na = vec![0u64; ka];
        let mut nb = vec![0u64; kb];
        let mut pairs: Vec<(usize, u32)> = a.iter().copied().zip(b.iter().copied()).collect();
        for &(x, y) in &pairs {
            na[x] += 1;
            nb[y as usize] += 1;
        }
        pairs.sort_unstable();
        let mut cells = Vec::new();
        let mut i = 0;
        while i < pairs.len() {
            let mut j = i + 1;
            while j < pairs.len() && pairs[j] == pairs[i] {
                j += 1;
            }
            cells.push((pairs[i], (j - i) as u64));
            i = j;
        }
        Table { na, nb, cells }
    }
}
