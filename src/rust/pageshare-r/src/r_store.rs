#![allow(clippy::not_unsafe_ptr_arg_deref)] // SEXPs are R's handles, valid on its main thread by R's contract
//! R objects that Rust keeps between calls (what pageshare's pool does with
//! a message's reply, see entry_pool_messages.rs): the elements of one R list
//! preserved from the garbage collector, each taken back by its key. One
//! preserved list rather than an R_PreserveObject() per object: R releases a
//! preserved object by searching its whole list of them.

use crate::boundary::RError;
use crate::r_calls::{alloc_vector, try_r};
use crate::r_sys::*;
use std::sync::Mutex;

struct Store {
    /// The preserved list (0: none yet), as an address: R objects are only
    /// touched on R's main thread.
    list: usize,
    /// Elements of `list` that hold nothing.
    free: Vec<usize>,
}

static STORE: Mutex<Store> = Mutex::new(Store { list: 0, free: Vec::new() });

fn store() -> std::sync::MutexGuard<'static, Store> {
    STORE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps `x` (on R's main thread); returns its key.
pub fn keep(x: SEXP) -> Result<usize, RError> {
    let mut s = store();
    if s.free.is_empty() {
        grow(&mut s)?;
    }
    let key = s.free.pop().expect("grown above");
    // SAFETY: `list` is a preserved list with more than `key` elements.
    unsafe { SET_VECTOR_ELT(s.list as SEXP, key as R_xlen_t, x) };
    Ok(key)
}

/// The object kept under `key`, still kept.
pub fn peek(key: usize) -> SEXP {
    let s = store();
    // SAFETY: keys come from keep(), so `list` exists and holds `key`.
    unsafe { VECTOR_ELT(s.list as SEXP, key as R_xlen_t) }
}

/// The object kept under `key`, no longer kept: the caller must protect it
/// before R may allocate.
pub fn take(key: usize) -> SEXP {
    let mut s = store();
    // SAFETY: keys come from keep(), so `list` exists and holds `key`.
    let x = unsafe { VECTOR_ELT(s.list as SEXP, key as R_xlen_t) };
    // SAFETY: as above.
    unsafe { SET_VECTOR_ELT(s.list as SEXP, key as R_xlen_t, nil()) };
    s.free.push(key);
    x
}

/// A list twice as long holding the same elements, preserved in place of the old.
fn grow(s: &mut Store) -> Result<(), RError> {
    let old = s.list as SEXP;
    // SAFETY: `old` is the preserved list or null.
    let len = if s.list == 0 { 0 } else { (unsafe { Rf_xlength(old) }) as usize };
    let new_len = (2 * len).max(64);
    let new = alloc_vector(SEXPTYPE::VECSXP, new_len as R_xlen_t)?;
    // SAFETY: `new` is fresh and unprotected: preserve it before anything allocates.
    try_r(|| unsafe { R_PreserveObject(new) })?;
    for i in 0..len {
        // SAFETY: both lists hold at least `len` elements.
        unsafe { SET_VECTOR_ELT(new, i as R_xlen_t, VECTOR_ELT(old, i as R_xlen_t)) };
    }
    if s.list != 0 {
        // SAFETY: `old` was preserved by an earlier grow().
        unsafe { R_ReleaseObject(old) };
    }
    s.list = new as usize;
    s.free.extend((len..new_len).rev());
    Ok(())
}
