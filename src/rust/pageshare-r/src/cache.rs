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
//! writing, and the view stays equal to it. (A source whose count R has saturated, such
//! as a compact sequence, is not cached at all.)
//! No lock is held while R is called.

use crate::rapi::*;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::sync::Mutex;

/// One cached source: its preserved `(source, view)` list, the view's size and
/// when it was last used (for the size cap).
#[derive(Clone, Copy)]
struct Entry {
    list: usize,
    bytes: u64,
    used: u64,
}

/// Source address -> entry (addresses: R owns the objects).
static ENTRIES: Lazy<Mutex<HashMap<usize, Entry>>> = Lazy::new(|| Mutex::new(HashMap::new()));
static CLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn entries() -> std::sync::MutexGuard<'static, HashMap<usize, Entry>> {
    ENTRIES.lock().unwrap_or_else(|p| p.into_inner())
}

fn tick() -> u64 {
    CLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The view already made for `x`, if `x` was shared before.
///
/// # Safety
/// Main R thread; `x` a valid SEXP.
pub unsafe fn lookup(x: SEXP) -> Option<SEXP> {
    let entry = {
        let mut map = entries();
        let e = map.get_mut(&(x as usize))?;
        e.used = tick();
        e.list as SEXP
    };
    // SAFETY: the entry is preserved until evicted, and it holds x, so x's address
    // cannot have been reused while the entry exists.
    unsafe {
        if VECTOR_ELT(entry, 0) != x {
            return None;
        }
        Some(VECTOR_ELT(entry, 1))
    }
}

/// R's saturated reference count: an object marked not mutable (or referenced
/// 65535 times) keeps it forever.
const REFCNT_MAX: i32 = 65535;

/// Remember that `view` is the shared copy of `x`. A source whose reference count
/// is saturated is not cached: it could never be evicted (it would leak).
///
/// # Safety
/// Main R thread; `x` and `view` valid and protected by the caller.
pub unsafe fn insert(x: SEXP, view: SEXP, bytes: u64) {
    // SAFETY: reading the count of a valid object.
    if unsafe { REFCNT(x) } >= REFCNT_MAX {
        return;
    }
    // SAFETY: the entry is protected until preserved; no lock is held meanwhile.
    let entry = unsafe {
        let entry = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, 2));
        SET_VECTOR_ELT(entry, 0, x);
        SET_VECTOR_ELT(entry, 1, view);
        R_PreserveObject(entry);
        Rf_unprotect(1);
        entry
    };
    entries().insert(x as usize, Entry { list: entry as usize, bytes, used: tick() });
}

/// Drop the entries whose source only the cache still references, then the
/// least recently used ones while the cached views exceed `limit` bytes (a source
/// bound in an environment that died without being cleaned up, e.g. by `local()`,
/// keeps its reference count; the cap bounds what such entries can hold).
/// Returns how many entries were dropped.
///
/// # Safety
/// Main R thread.
pub unsafe fn evict_unused(limit: u64) -> usize {
    let mut candidates: Vec<(usize, Entry)> = entries().iter().map(|(k, v)| (*k, *v)).collect();
    candidates.sort_by_key(|(_, e)| e.used);
    let mut total: u64 = candidates.iter().map(|(_, e)| e.bytes).sum();
    let newest = candidates.last().map(|(k, _)| *k);
    let mut evicted = 0;
    for (key, entry) in candidates {
        // The cap never drops the entry used last: it is the one being worked on.
        let over_cap = total > limit && Some(key) != newest;
        // SAFETY: preserved entries are valid until released below.
        let unused = unsafe { REFCNT(VECTOR_ELT(entry.list as SEXP, 0)) <= 1 };
        if unused || over_cap {
            entries().remove(&key);
            total -= entry.bytes;
            // SAFETY: the entry was preserved by `insert` and is released once.
            unsafe { R_ReleaseObject(entry.list as SEXP) };
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
    let all: Vec<Entry> = entries().drain().map(|(_, v)| v).collect();
    for entry in &all {
        // SAFETY: each entry was preserved once by `insert`.
        unsafe { R_ReleaseObject(entry.list as SEXP) };
    }
    all.len()
}

pub fn len() -> usize {
    entries().len()
}
