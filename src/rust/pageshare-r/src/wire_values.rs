#![allow(clippy::not_unsafe_ptr_arg_deref)] // SEXPs are R's handles, valid on its main thread by R's contract
//! R values in the pool wire's own value encoding (pageshare-pool's wire.rs:
//! `ValueWriter`, `ValueReader`), for the plain path's arguments and replies:
//! NULL, and ordinary vectors of the basic types (logical, integer, double,
//! complex, raw, character, and lists of such values) with no attribute and
//! nested at most `MAX_DEPTH` deep. Anything else travels as R's
//! serialization (r_serialize.rs).

use crate::boundary::RError;
use crate::r_calls::try_r;
use crate::r_sys::*;
use pageshare_pool::wire::{Item, StringMark, ValueKind, ValueReader, ValueWriter, WireError, MAX_DEPTH};
use std::os::raw::c_int;

#[allow(improper_ctypes)] // SEXPREC is opaque: only pointers to it cross.
extern "C" {
    /// src/boundary.c: has `x` any attribute (R's API for this differs
    /// between R versions)?
    fn ps_any_attrib(x: SEXP) -> c_int;
}

fn kind_of(t: SEXPTYPE) -> Option<ValueKind> {
    Some(match t {
        SEXPTYPE::NILSXP => ValueKind::Null,
        SEXPTYPE::LGLSXP => ValueKind::Logical,
        SEXPTYPE::INTSXP => ValueKind::Integer,
        SEXPTYPE::REALSXP => ValueKind::Double,
        SEXPTYPE::CPLXSXP => ValueKind::Complex,
        SEXPTYPE::RAWSXP => ValueKind::Raw,
        SEXPTYPE::STRSXP => ValueKind::Character,
        SEXPTYPE::VECSXP => ValueKind::List,
        _ => return None,
    })
}

fn sexptype(k: ValueKind) -> SEXPTYPE {
    match k {
        ValueKind::Null => SEXPTYPE::NILSXP,
        ValueKind::Logical => SEXPTYPE::LGLSXP,
        ValueKind::Integer => SEXPTYPE::INTSXP,
        ValueKind::Double => SEXPTYPE::REALSXP,
        ValueKind::Complex => SEXPTYPE::CPLXSXP,
        ValueKind::Raw => SEXPTYPE::RAWSXP,
        ValueKind::Character => SEXPTYPE::STRSXP,
        ValueKind::List => SEXPTYPE::VECSXP,
    }
}

/// The bytes of `x`'s encoding, or `None` when `x` is not such a value.
/// Reads types, lengths and strings of ordinary vectors only (nothing that
/// allocates or raises).
///
/// # Safety
/// R's main thread; `x` a valid object.
pub unsafe fn encoded_size(x: SEXP, depth: usize) -> Option<usize> {
    // SAFETY: the caller's contract; ALTREP vectors (whose data R may have to
    // make) and vectors with attributes are declined before any element is read.
    unsafe {
        let kind = kind_of(TYPEOF(x))?;
        if kind == ValueKind::Null {
            return Some(1);
        }
        if depth > MAX_DEPTH || ALTREP(x) != 0 || ps_any_attrib(x) != 0 {
            return None;
        }
        let n = XLENGTH(x) as usize;
        let head = ValueWriter::HEAD;
        match kind {
            ValueKind::Character => (0..n).try_fold(head, |size, i| {
                let s = STRING_ELT(x, i as R_xlen_t);
                let bytes = if s == R_NaString { 1 } else { ValueWriter::STRING_HEAD + LENGTH(s) as usize };
                size.checked_add(bytes)
            }),
            ValueKind::List => (0..n)
                .try_fold(head, |size, i| size.checked_add(encoded_size(VECTOR_ELT(x, i as R_xlen_t), depth + 1)?)),
            _ => n.checked_mul(kind.element_size()?)?.checked_add(head),
        }
    }
}

/// The bytes of a string's mark: ASCII when every byte is, else R's mark.
unsafe fn mark_of(s: SEXP, bytes: &[u8]) -> StringMark {
    if bytes.is_ascii() {
        return StringMark::Ascii;
    }
    // SAFETY: `s` is a CHARSXP; reading its encoding cannot raise.
    match unsafe { Rf_getCharCE(s) } {
        1 => StringMark::Utf8,
        2 => StringMark::Latin1,
        3 => StringMark::Bytes,
        _ => StringMark::Native,
    }
}

/// Writes `x`, a value `encoded_size` accepted.
///
/// # Safety
/// R's main thread; `encoded_size(x, _)` returned a size.
unsafe fn write(x: SEXP, w: &mut ValueWriter) {
    // SAFETY: `x` is an ordinary vector of the type read (see encoded_size):
    // its data pointer and strings are read without allocating.
    unsafe {
        let Some(kind) = kind_of(TYPEOF(x)) else { return };
        let n = if kind == ValueKind::Null { 0 } else { XLENGTH(x) as usize };
        match kind {
            ValueKind::Null => w.null(),
            ValueKind::Character => {
                w.strings(n);
                for i in 0..n {
                    let s = STRING_ELT(x, i as R_xlen_t);
                    if s == R_NaString {
                        w.string(None);
                    } else {
                        let bytes = std::slice::from_raw_parts(R_CHAR(s).cast::<u8>(), LENGTH(s) as usize);
                        w.string(Some((mark_of(s, bytes), bytes)));
                    }
                }
            }
            ValueKind::List => {
                w.list(n);
                for i in 0..n {
                    write(VECTOR_ELT(x, i as R_xlen_t), w);
                }
            }
            _ => {
                let size = n * kind.element_size().unwrap_or(0);
                let data = if size == 0 { &[][..] } else { std::slice::from_raw_parts(data_mut(x).cast::<u8>(), size) };
                w.atomic(kind, n, data);
            }
        }
    }
}

/// Appends `x`'s encoding to `out`; false (nothing written) when `x` is not
/// such a value.
pub fn encode(x: SEXP, out: &mut Vec<u8>) -> Result<bool, RError> {
    // SAFETY: main thread (every caller is an entry point's body), valid SEXP.
    let Some(size) = (unsafe { encoded_size(x, 0) }) else { return Ok(false) };
    out.try_reserve(size).map_err(|_| RError::system("no memory for a message of pageshare's pool"))?;
    // SAFETY: encoded_size accepted `x`; the room is reserved.
    unsafe { write(x, &mut ValueWriter { out }) };
    Ok(true)
}

/// The R value of the next item of `r` (unprotected), made with R's
/// allocator directly: the caller runs this under `try_r`, so an R error
/// jumps over these frames, which hold only Copy values.
///
/// # Safety
/// R's main thread, inside `try_r`.
unsafe fn build(r: &mut ValueReader, depth: usize) -> Result<SEXP, WireError> {
    // SAFETY: every vector is allocated at the length read and filled within
    // it; a list is protected while its items are made.
    unsafe {
        Ok(match r.item()? {
            Item::Null => R_NilValue,
            Item::Atomic { kind, len, data } => {
                let x = Rf_allocVector(sexptype(kind), len as R_xlen_t);
                if !data.is_empty() {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), data_mut(x).cast::<u8>(), data.len());
                }
                x
            }
            Item::Strings { len } => {
                let x = Rf_protect(Rf_allocVector(SEXPTYPE::STRSXP, len as R_xlen_t));
                for i in 0..len {
                    let s = match r.string() {
                        Ok(None) => R_NaString,
                        Ok(Some((mark, bytes))) => {
                            let enc = match mark {
                                StringMark::Utf8 => cetype_t::CE_UTF8,
                                StringMark::Latin1 => cetype_t::CE_LATIN1,
                                StringMark::Bytes => cetype_t::CE_BYTES,
                                StringMark::Native | StringMark::Ascii => cetype_t::CE_NATIVE,
                            };
                            Rf_mkCharLenCE(bytes.as_ptr().cast(), bytes.len() as c_int, enc)
                        }
                        Err(e) => {
                            Rf_unprotect(1);
                            return Err(e);
                        }
                    };
                    SET_STRING_ELT(x, i as R_xlen_t, s);
                }
                Rf_unprotect(1);
                x
            }
            Item::List { len } => {
                if depth >= MAX_DEPTH {
                    return Err(WireError("a value nested too deep"));
                }
                let x = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, len as R_xlen_t));
                for i in 0..len {
                    match build(r, depth + 1) {
                        Ok(v) => {
                            SET_VECTOR_ELT(x, i as R_xlen_t, v);
                        }
                        Err(e) => {
                            Rf_unprotect(1);
                            return Err(e);
                        }
                    }
                }
                Rf_unprotect(1);
                x
            }
        })
    }
}

/// The `N` values `bytes` hold one after the other, all of them (a value; a
/// plain call's arguments and their names), as a list (unprotected).
pub fn decode_all<const N: usize>(bytes: &[u8]) -> Result<SEXP, RError> {
    // SAFETY: R's allocator on the main thread inside try_r; the closure
    // holds only Copy values (a jump drops nothing); the list is protected
    // while its values are made.
    let out = try_r(|| unsafe {
        let mut r = ValueReader::new(bytes);
        let list = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, N as R_xlen_t));
        for i in 0..N {
            match build(&mut r, 0) {
                Ok(v) => {
                    SET_VECTOR_ELT(list, i as R_xlen_t, v);
                }
                Err(e) => {
                    Rf_unprotect(1);
                    return Err(e);
                }
            }
        }
        Rf_unprotect(1);
        r.finish().map(|()| list)
    })?;
    out.map_err(|e| RError::system(format!("a message of pageshare's pool is damaged: {e}")))
}
