#![allow(clippy::not_unsafe_ptr_arg_deref)] // SEXPs are R's handles, valid on its main thread by R's contract
//! The checks of the arguments the R code passes to the entry points, one
//! function per kind of argument. (The user's own arguments are checked in R
//! first, with messages naming them.)

use crate::boundary::RError;
use crate::r_calls;
use crate::r_sys::*;
use std::path::{Path, PathBuf};

pub use crate::r_calls::string_arg;

/// The index directory (option `pageshare.dir`): an existing absolute path.
pub fn dir_arg(x: SEXP) -> Result<PathBuf, RError> {
    let d = string_arg(x, "pageshare.dir")?;
    if !d.starts_with('/') || !Path::new(&d).is_dir() {
        return Err(RError::argument(format!(
            "option `pageshare.dir` must name an existing directory by absolute path, not '{d}'"
        )));
    }
    Ok(PathBuf::from(d))
}

/// A byte limit: a number >= 0; anything else (Inf, NA, negative) means no limit.
pub fn byte_limit_arg(x: SEXP) -> Result<u64, RError> {
    let v = r_calls::as_real(x)?;
    Ok(if v.is_finite() && v >= 0.0 { v as u64 } else { u64::MAX })
}

/// A flag: TRUE is true, anything else false.
pub fn flag_arg(x: SEXP) -> Result<bool, RError> {
    Ok(r_calls::as_logical(x)? == 1)
}

/// A process id: a whole number from 1 to i32::MAX.
pub fn pid_arg(x: SEXP, what: &str) -> Result<u32, RError> {
    let v = r_calls::as_real(x)?;
    if v.is_finite() && v >= 1.0 && v <= i32::MAX as f64 && v.fract() == 0.0 {
        Ok(v as u32)
    } else {
        Err(RError::argument(format!("`{what}` must be a process id (a whole number >= 1)")))
    }
}

/// The numbers of a double vector.
pub fn doubles_arg(x: SEXP, what: &str) -> Result<Vec<f64>, RError> {
    // SAFETY: a .Call argument on R's main thread.
    if unsafe { TYPEOF(x) } != SEXPTYPE::REALSXP {
        return Err(RError::argument(format!("`{what}` must be a double vector")));
    }
    // SAFETY: a double vector, copied at once.
    Ok(unsafe { r_calls::vector_data::<f64>(x)? }.to_vec())
}

/// 0-based slots from R's 1-based ones (NULL: every slot, as `None`), each
/// below `size`.
pub fn slots_arg(x: SEXP, size: usize) -> Result<Option<Vec<usize>>, RError> {
    // SAFETY: a .Call argument on R's main thread.
    if unsafe { TYPEOF(x) } == SEXPTYPE::NILSXP {
        return Ok(None);
    }
    let v = r_calls::coerce_vector(x, SEXPTYPE::INTSXP)?;
    // SAFETY: an integer vector (coerced above), alive while `x` is.
    let ints = unsafe { r_calls::vector_data::<i32>(v)? };
    ints.iter()
        .map(|&s| {
            if s >= 1 && (s as usize) <= size {
                Ok(s as usize - 1)
            } else {
                Err(RError::argument(format!("worker slot {s} is not one of the pool's 1..{size}")))
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The bytes of the raw vector `x` (the argument `what`), alive while R
/// holds `x`: the slice must not outlive the entry point's body.
pub fn raw_arg(x: SEXP, what: &str) -> Result<&'static [u8], RError> {
    // SAFETY: .Call argument on R's main thread.
    if unsafe { TYPEOF(x) } != SEXPTYPE::RAWSXP {
        return Err(RError::argument(format!("`{what}` must be a raw vector")));
    }
    // SAFETY: a raw vector, alive (referenced by R) for the whole .Call; the
    // slice does not outlive the entry point's body.
    unsafe { r_calls::vector_data::<u8>(x) }
}

/// A worker slot of a pool of `size` (1-based in R), 0-based.
pub fn slot_arg(x: SEXP, size: u64) -> Result<u64, RError> {
    let s = r_calls::as_integer(x)?;
    if s < 1 || s as u64 > size {
        return Err(RError::argument(format!("worker slot {s} is not one of the pool's 1..{size}")));
    }
    Ok(s as u64 - 1)
}

/// The bytes of a raw vector, or none for anything else (a blob of
/// serialized attributes that may be NULL).
///
/// # Safety
/// R holds `x` (a .Call argument) while the bytes are used.
pub unsafe fn raw_or_empty(x: SEXP) -> Result<&'static [u8], RError> {
    // SAFETY: reading the type cannot raise; a raw vector's bytes are read
    // while R holds it (the caller's contract), through dataptr_ro (it may be
    // an ALTREP vector).
    unsafe {
        if TYPEOF(x) == SEXPTYPE::RAWSXP {
            r_calls::vector_data::<u8>(x)
        } else {
            Ok(&[])
        }
    }
}
