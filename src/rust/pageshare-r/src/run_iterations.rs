#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The iterations of a foreach task (R/doshm-tasks.R): for each iteration k,
//! every iteration variable bound to its k-th value in the loop's
//! environment and the body evaluated there, as eval(body, env) would but
//! without eval()'s closure call and context, which cost more than a tiny
//! body itself. Only for bodies that do not look at that context (see
//! evaluates_directly() in R/doshm-tasks.R).
//!
//! The iterations run under one `try_r` up to an error: the error then goes
//! to R's handler around this call (doshm_run_chunk()), which records it as
//! that iteration's result and calls again from the next one. The results go
//! into `out` and their kinds into `kinds`, fresh vectors of the caller's,
//! written in place: 0 a value, 1 an error condition returned, 3 the
//! iteration running (the one an error came from).

use crate::boundary::{entry, RError};
use crate::r_calls::{scalar_integer, try_r, Protect};
use crate::r_sys::*;

/// The iteration running (see the module's comment).
const RUNNING: i32 = 3;

/// column[[k]], unprotected.
///
/// # Safety
/// Inside try_r (allocates); `column` a vector of more than `k` elements.
unsafe fn element(column: SEXP, k: R_xlen_t) -> SEXP {
    // SAFETY: the caller's contract; each accessor matches the type.
    unsafe {
        match TYPEOF(column) {
            SEXPTYPE::VECSXP | SEXPTYPE::EXPRSXP => VECTOR_ELT(column, k),
            SEXPTYPE::INTSXP => Rf_ScalarInteger(INTEGER_ELT(column, k)),
            SEXPTYPE::REALSXP => Rf_ScalarReal(REAL_ELT(column, k)),
            SEXPTYPE::LGLSXP => Rf_ScalarLogical(LOGICAL_ELT(column, k)),
            SEXPTYPE::STRSXP => Rf_ScalarString(STRING_ELT(column, k)),
            SEXPTYPE::CPLXSXP => Rf_ScalarComplex(COMPLEX_ELT(column, k)),
            _ => Rf_ScalarRaw(RAW_ELT(column, k)),
        }
    }
}

/// Runs the iterations of `columns` (a named list of vectors or lists of one
/// length, the loop's variables) from `from` (0-based) on: `expr` evaluated
/// in `env`, results in `out` and `kinds` (see above). Returns the number of
/// iterations, or raises the error of the iteration that `kinds` marks running.
#[no_mangle]
pub extern "C" fn ps_run_iterations_rs(
    columns: SEXP,
    expr: SEXP,
    env: SEXP,
    out: SEXP,
    kinds: SEXP,
    from: SEXP,
) -> SEXP {
    entry(|| {
        // SAFETY: reading types, lengths and names of .Call arguments.
        let (vars, n, names) = unsafe {
            if TYPEOF(env) != SEXPTYPE::ENVSXP {
                return Err(RError::argument("`env` must be an environment"));
            }
            let names = Rf_getAttrib(columns, R_NamesSymbol);
            if TYPEOF(columns) != SEXPTYPE::VECSXP || TYPEOF(names) != SEXPTYPE::STRSXP {
                return Err(RError::argument("`columns` must be a named list"));
            }
            let vars = Rf_xlength(columns);
            let n = if vars > 0 { Rf_xlength(VECTOR_ELT(columns, 0)) } else { 0 };
            for j in 0..vars {
                let column = VECTOR_ELT(columns, j);
                let ok = matches!(
                    TYPEOF(column),
                    SEXPTYPE::VECSXP
                        | SEXPTYPE::EXPRSXP
                        | SEXPTYPE::INTSXP
                        | SEXPTYPE::REALSXP
                        | SEXPTYPE::LGLSXP
                        | SEXPTYPE::STRSXP
                        | SEXPTYPE::CPLXSXP
                        | SEXPTYPE::RAWSXP
                ) && Rf_xlength(column) == n;
                if !ok {
                    return Err(RError::argument("the iteration columns must be vectors of one length"));
                }
            }
            let fits = TYPEOF(out) == SEXPTYPE::VECSXP
                && Rf_xlength(out) == n
                && TYPEOF(kinds) == SEXPTYPE::INTSXP
                && ALTREP(kinds) == 0
                && Rf_xlength(kinds) == n;
            if !fits {
                return Err(RError::argument(
                    "`out` and `kinds` must be a list and an integer vector, one per iteration",
                ));
            }
            (vars, n, names)
        };
        let from = crate::r_calls::as_real(from)?;
        if !(from >= 0.0 && from <= n as f64) {
            return Err(RError::argument("`from` must be an iteration"));
        }
        let mut scope = Protect::new();
        let syms = scope.alloc_vector(SEXPTYPE::VECSXP, vars)?;
        for j in 0..vars {
            // SAFETY: a character vector of `vars` names.
            let name = unsafe { STRING_ELT(names, j) };
            // (R refuses to translate NA and "bytes" with an error of its own)
            // SAFETY: R_NaString is initialised before package code runs;
            // reading a string's encoding cannot raise.
            if name == unsafe { R_NaString } || unsafe { Rf_getCharCE(name) } == cetype_t::CE_BYTES as i32 {
                return Err(RError::argument(
                    "`columns' names` must be text that can name a variable (not NA, not \"bytes\")",
                ));
            }
            // SAFETY: interning a symbol (translates, allocates) under try_r.
            let sym = try_r(|| unsafe { Rf_installChar(name) })?;
            // SAFETY: a protected list of `vars` elements.
            unsafe { SET_VECTOR_ELT(syms, j, sym) };
        }
        // SAFETY: the iterations, all under one try_r: R's API on the main
        // thread, each value protected while it is bound; the closure holds
        // only Copy values, so an error's jump out of it drops nothing.
        try_r(|| unsafe {
            let marks = INTEGER(kinds);
            for k in from as R_xlen_t..n {
                *marks.offset(k) = RUNNING;
                for j in 0..vars {
                    let value = Rf_protect(element(VECTOR_ELT(columns, j), k));
                    Rf_defineVar(VECTOR_ELT(syms, j), value, env);
                    Rf_unprotect(1);
                }
                let result = Rf_eval(expr, env);
                SET_VECTOR_ELT(out, k, result);
                let error = Rf_isObject(result) != Rboolean::FALSE && Rf_inherits(result, c"error".as_ptr()) != 0;
                *marks.offset(k) = error as i32;
            }
        })?;
        scalar_integer(n as i32)
    })
}
