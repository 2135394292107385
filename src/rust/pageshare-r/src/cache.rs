//! Share once: the identity cache from R objects to their views.
//!
//! R cannot attach a finalizer or a weak reference to a vector, so the cache holds
//! each source strongly, in a preserved two-element list `(source, view)`, and
//! uses R's reference count to see when nobody else does: an entry whose source
//! has a reference count of 1 (the cache's own) is evicted by [`evict_unused`],
//! which runs before every share and after every garbage collection.
//!
//! The cache's reference also keeps the source safe from in-place writes: while a
//! user binding exists too, the source is MAYBE_SHARED, so R duplicates it before
//! writing, and the view stays equal to it. (A source whose count R has saturated
//! stays cached until the process exits or [`clear`] runs.)
//! No lock is held while R is called.

use crate::rapi::*;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::sync::Mutex;

/// Source address -> preserved entry list (addresses: R owns the objects).
static ENTRIES: Lazy<Mutex<HashMap<usize, usize>>> = Lazy::new(|| Mutex::new(HashMap::new()));

fn entries() -> std::sync::MutexGuard<'static, HashMap<usize, usize>> {
    ENTRIES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The view already made for `x`, if `x` was shared before.
///
/// # Safety
/// Main R thread; `x` a valid SEXP.
pub unsafe fn lookup(x: SEXP) -> Option<SEXP> {
    let entry = *entries().get(&(x as usize))? as SEXP;
    // SAFETY: the entry is preserved until evicted, and it holds x, so x's address
    // cannot have been reused while the entry exists.
    unsafe {
        if VECTOR_ELT(entry, 0) != x {
            return None;
        }
        Some(VECTOR_ELT(entry, 1))
    }
}

/// Remember that `view` is the shared copy of `x`.
///
/// # Safety
/// Main R thread; `x` and `view` valid and protected by the caller.
pub unsafe fn insert(x: SEXP, view: SEXP) {
    // SAFETY: the entry is protected until preserved; no lock is held meanwhile.
    let entry = unsafe {
        let entry = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, 2));
        SET_VECTOR_ELT(entry, 0, x);
        SET_VECTOR_ELT(entry, 1, view);
        R_PreserveObject(entry);
        Rf_unprotect(1);
        entry
    };
    entries().insert(x as usize, entry as usize);
}

/// Drop the entries whose source only the cache still references; returns how many.
///
/// # Safety
/// Main R thread.
pub unsafe fn evict_unused() -> usize {
    let candidates: Vec<(usize, usize)> = entries().iter().map(|(k, v)| (*k, *v)).collect();
    let mut evicted = 0;
    for (key, entry) in candidates {
        // SAFETY: preserved entries are valid until released below.
        let unused = unsafe { REFCNT(VECTOR_ELT(entry as SEXP, 0)) <= 1 };
        if unused {
            entries().remove(&key);
            // SAFETY: the entry was preserved by `insert` and is released once.
            unsafe { R_ReleaseObject(entry as SEXP) };
            evicted += 1;
        }
    }
    evicted
}

/// Forget every entry (package unload).
///
/// # Safety
/// Main R thread.
pub unsafe fn clear() -> usize {
    let all: Vec<usize> = entries().drain().map(|(_, v)| v).collect();
    for entry in &all {
        // SAFETY: each entry was preserved once by `insert`.
        unsafe { R_ReleaseObject(*entry as SEXP) };
    }
    all.len()
}

pub fn len() -> usize {
    entries().len()
}
