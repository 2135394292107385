#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry point receives SEXPs from R by design
//! The `.Call` entry point of `mutual_information()` and `mutualinfo()`: the
//! MI of some columns of a double matrix with a discrete response, computed by
//! `pageshare_mutual_info`. The matrix is read through the data pointer
//! R gives (for a view, the shared mapping): nothing is copied but one column
//! at a time into the estimator's own sorted buffer.

use crate::boundary::{entry, RError};
use crate::r_calls;
use crate::r_sys::*;
use pageshare_mutual_info::{column_mi, Method, MiError, Options};

/// `ps_mutual_info(x, nrow, cols, y, nclass, method, eps, na_rm, discrete, base)`:
/// `x` a double vector of `nrow` rows (a matrix, column-major), `cols` the
/// 1-based columns to do, `y` integer class codes 1..nclass (NA left out),
/// `method` "pde" or "memshare". Returns the MIs of those columns divided by
/// ln(base).
#[no_mangle]
pub extern "C" fn ps_mutual_info_rs(
    x: SEXP,
    nrow: SEXP,
    cols: SEXP,
    y: SEXP,
    nclass: SEXP,
    method: SEXP,
    eps: SEXP,
    na_rm: SEXP,
    discrete: SEXP,
    base: SEXP,
) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    entry(|| unsafe {
        if TYPEOF(x) != SEXPTYPE::REALSXP {
            return Err(RError::argument("`X` must be a double matrix"));
        }
        let len = XLENGTH(x) as usize;
        let nrow = r_calls::as_real(nrow)?;
        // (a NaN row count is rejected before any comparison)
        if nrow.is_nan() || nrow < 1.0 || nrow.fract() != 0.0 || !len.is_multiple_of(nrow as usize) {
            return Err(RError::argument("`X` must have at least one row"));
        }
        let nrow = nrow as usize;
        let ncol = len / nrow;
        if TYPEOF(y) != SEXPTYPE::INTSXP || XLENGTH(y) as usize != nrow {
            return Err(RError::argument(format!("`y` must be an integer vector of length {nrow}")));
        }
        if TYPEOF(cols) != SEXPTYPE::INTSXP {
            return Err(RError::internal("ps_mutual_info: `cols` must be integer"));
        }
        let k = r_calls::as_integer(nclass)?;
        if k < 1 {
            return Err(RError::argument("`y` must have at least one class"));
        }
        let method = match r_calls::string_arg(method, "method")?.as_str() {
            "pde" => Method::Pde,
            "memshare" => Method::Memshare,
            _ => return Err(RError::argument("`method` must be \"pde\" or \"memshare\"")),
        };
        let opts = Options {
            method,
            eps: r_calls::as_real(eps)?,
            na_rm: r_calls::as_logical(na_rm)? == 1,
            discrete: r_calls::as_logical(discrete)? == 1,
        };
        let scale = r_calls::as_real(base)?.ln();
        if !(scale.is_finite() && scale > 0.0) {
            return Err(RError::argument("`base` must be a number greater than 1"));
        }
        let ncols = XLENGTH(cols) as usize;
        // The data of vectors of these lengths (for a view, its read-only
        // mapping; another ALTREP class may have to expand, which may raise);
        // R keeps x, y and cols alive for the call, and nothing here allocates
        // R memory while they are read.
        let data = std::slice::from_raw_parts(
            if len == 0 { std::ptr::NonNull::dangling().as_ptr() } else { r_calls::dataptr_ro(x)?.cast::<f64>() },
            len,
        );
        let yv = std::slice::from_raw_parts(r_calls::dataptr_ro(y)?.cast::<i32>(), nrow);
        let cv = std::slice::from_raw_parts(
            if ncols == 0 { std::ptr::NonNull::dangling().as_ptr() } else { r_calls::dataptr_ro(cols)?.cast::<i32>() },
            ncols,
        );
        let mut values = Vec::with_capacity(ncols);
        for &c in cv {
            if c < 1 || c as usize > ncol {
                return Err(RError::internal(format!("ps_mutual_info: column {c} out of range")));
            }
            let j = c as usize - 1;
            let col = &data[j * nrow..(j + 1) * nrow];
            let v = column_mi(col, yv, k as usize, &opts).map_err(|e| match e {
                MiError::NonFinite { row } => RError::argument(format!(
                    "`X` has a non-finite value (NA, NaN or Inf) in column {c}, row {}: use na.rm = TRUE to leave such values out",
                    row + 1
                )),
                MiError::BadClass { row, code } => {
                    RError::internal(format!("ps_mutual_info: class code {code} at row {} is not in 1..{k}", row + 1))
                }
            })?;
            values.push(v / scale);
        }
        let out = r_calls::alloc_vector(SEXPTYPE::REALSXP, ncols as R_xlen_t)?;
        if ncols > 0 {
            std::ptr::copy_nonoverlapping(values.as_ptr(), REAL(out), ncols);
        }
        Ok(out)
    })
}
