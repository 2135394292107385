#![allow(clippy::not_unsafe_ptr_arg_deref)] // SEXPs are R's handles, valid on its main thread by R's contract
//! A row or a column of a matrix, as `x[i, ]` or `x[, j]` gives it, for
//! memApply(). R's own `[` copies a matrix's row or column element by
//! element, with index arithmetic per element. Here a column (contiguous) is
//! copied as one region through the *_GET_REGION API, which a view answers
//! from its pages, and a row (every nrow-th element) by a loop over the
//! read-only data.
//!
//! Done here only where the result is certain to be `[`'s: a plain matrix
//! (no class) of an atomic type, the index a whole number within range, and
//! no dimnames, or dimnames and at least two elements in the result (then the
//! names along the other margin are the result's names; R's rules for a
//! single element keep or drop names depending on both dimnames). Anything
//! else evaluates `x[i, ]` or `x[, j]` itself, under `try_r` (R's own
//! errors, a subscript out of bounds or a method's, reach the caller as R's).

use crate::boundary::{entry, RError};
use crate::r_calls::{try_r, Protect};
use crate::r_sys::*;

fn evaluate_bracket(x: SEXP, index: SEXP, by_row: bool) -> Result<SEXP, RError> {
    // SAFETY: a call made and evaluated under try_r, protected meanwhile.
    try_r(|| unsafe {
        let (i, j) = if by_row { (index, R_MissingArg) } else { (R_MissingArg, index) };
        let call = Rf_protect(Rf_lang4(R_BracketSymbol, x, i, j));
        let out = Rf_eval(call, R_BaseEnv);
        Rf_unprotect(1);
        out
    })
}

/// `index` as a 0-based position, or None when it is not one whole number
/// in [1, n] (or not an ordinary vector, whose element R would have to make).
fn position(index: SEXP, n: R_xlen_t) -> Option<R_xlen_t> {
    // SAFETY: reading the type, length and one element of an ordinary vector.
    let v = unsafe {
        if Rf_isObject(index) != Rboolean::FALSE || ALTREP(index) != 0 || Rf_xlength(index) != 1 {
            return None;
        }
        match TYPEOF(index) {
            SEXPTYPE::INTSXP if *INTEGER(index) != i32::MIN => *INTEGER(index) as f64,
            SEXPTYPE::REALSXP => *REAL(index),
            _ => return None,
        }
    };
    (v >= 1.0 && v <= n as f64 && v == v.floor()).then(|| v as R_xlen_t - 1)
}

/// `n` elements of `x` from `from`, every `step`-th, into `out` (a new
/// vector of x's type). Run under try_r: another class's region or data
/// method may raise.
///
/// # Safety
/// `x` a vector of an atomic type or strings, `out` a new one of its type
/// and of `n` elements, the elements read within `x`.
unsafe fn copy_slice(x: SEXP, out: SEXP, from: R_xlen_t, step: R_xlen_t, n: R_xlen_t) {
    // One typed loop per type: the element's type and its read-only data.
    unsafe fn strided<T: Copy>(src: *const T, dst: *mut T, from: R_xlen_t, step: R_xlen_t, n: R_xlen_t) {
        for k in 0..n {
            // SAFETY: the caller's contract.
            unsafe { *dst.offset(k) = *src.offset(from + k * step) };
        }
    }
    // SAFETY: the caller's contract; each accessor matches the type.
    unsafe {
        if n == 0 {
            return;
        }
        let t = TYPEOF(x);
        if step == 1 && t != SEXPTYPE::STRSXP {
            // (the count copied is n: the region lies within x)
            let _copied = match t {
                SEXPTYPE::LGLSXP => LOGICAL_GET_REGION(x, from, n, LOGICAL(out)),
                SEXPTYPE::INTSXP => INTEGER_GET_REGION(x, from, n, INTEGER(out)),
                SEXPTYPE::REALSXP => REAL_GET_REGION(x, from, n, REAL(out)),
                SEXPTYPE::CPLXSXP => COMPLEX_GET_REGION(x, from, n, COMPLEX(out)),
                _ => RAW_GET_REGION(x, from, n, RAW(out)),
            };
            return;
        }
        match t {
            SEXPTYPE::LGLSXP => strided(LOGICAL_RO(x), LOGICAL(out), from, step, n),
            SEXPTYPE::INTSXP => strided(INTEGER_RO(x), INTEGER(out), from, step, n),
            SEXPTYPE::REALSXP => strided(REAL_RO(x), REAL(out), from, step, n),
            SEXPTYPE::CPLXSXP => strided(COMPLEX_RO(x), COMPLEX(out), from, step, n),
            SEXPTYPE::RAWSXP => strided(RAW_RO(x), RAW(out), from, step, n),
            _ => {
                for k in 0..n {
                    SET_STRING_ELT(out, k, STRING_ELT(x, from + k * step));
                }
            }
        }
    }
}

fn matrix_slice(x: SEXP, index: SEXP, by_row: bool) -> Result<SEXP, RError> {
    // SAFETY: reading the type, class bit and dim of a valid object (getAttrib
    // of dim allocates nothing).
    let (t, object, dim) = unsafe { (TYPEOF(x), Rf_isObject(x) != Rboolean::FALSE, Rf_getAttrib(x, R_DimSymbol)) };
    let plain_type = matches!(
        t,
        SEXPTYPE::LGLSXP
            | SEXPTYPE::INTSXP
            | SEXPTYPE::REALSXP
            | SEXPTYPE::CPLXSXP
            | SEXPTYPE::RAWSXP
            | SEXPTYPE::STRSXP
    );
    // SAFETY: as above.
    let dims = unsafe { TYPEOF(dim) == SEXPTYPE::INTSXP && ALTREP(dim) == 0 && Rf_xlength(dim) == 2 };
    if !plain_type || object || !dims {
        return evaluate_bracket(x, index, by_row);
    }
    // SAFETY: an ordinary integer vector of two elements.
    let (nrow, ncol) = unsafe { (*INTEGER(dim) as R_xlen_t, *INTEGER(dim).add(1) as R_xlen_t) };
    let length = if by_row { ncol } else { nrow };
    // SAFETY: reading the dimnames of a matrix (a list of two, as R keeps them).
    let names = unsafe {
        let dimnames = Rf_getAttrib(x, R_DimNamesSymbol);
        if dimnames == R_NilValue {
            Some(R_NilValue)
        } else if length < 2 {
            None
        } else {
            Some(VECTOR_ELT(dimnames, if by_row { 1 } else { 0 }))
        }
    };
    let (Some(at), Some(names)) = (position(index, if by_row { nrow } else { ncol }), names) else {
        return evaluate_bracket(x, index, by_row);
    };
    let mut scope = Protect::new();
    let out = scope.alloc_vector(t, length)?;
    let (from, step) = if by_row { (at, nrow) } else { (at * nrow, 1) };
    // SAFETY: `out` is a new vector of x's type and `length` elements; the
    // elements read lie within x (at < nrow or ncol).
    try_r(|| unsafe { copy_slice(x, out, from, step, length) })?;
    if names != nil() {
        // SAFETY: R_NamesSymbol is initialised before package code runs.
        crate::r_calls::set_attrib(out, unsafe { R_NamesSymbol }, names)?;
    }
    Ok(out)
}

/// `x[i, ]`
#[no_mangle]
pub extern "C" fn ps_matrix_row_rs(x: SEXP, i: SEXP) -> SEXP {
    entry(|| matrix_slice(x, i, true))
}

/// `x[, j]`
#[no_mangle]
pub extern "C" fn ps_matrix_column_rs(x: SEXP, j: SEXP) -> SEXP {
    entry(|| matrix_slice(x, j, false))
}
