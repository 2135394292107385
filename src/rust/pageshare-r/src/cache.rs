//! Share once: the identity cache from R objects to their views.
//!
//! R offers no finalizer or weak reference on a vector, and its reference counts
//! are not decremented when a container is garbage-collected (a future's globals,
//! a captured function frame), so neither can tell when a source dies. The cache
//! therefore does not hold the source at all:
//!
//! - Identity: sharing writes a fresh token into the source's TRUELENGTH (unused
//!   for ordinary, non-growable vectors; R sets it to 0 in every new vector) and
//!   marks it not mutable, so it can never change in place. A later `share(y)`
//!   finds the entry by `y`'s address and accepts it only if `y` carries the same
//!   token: `y` is live (R passed it), so this never reads freed memory, and an
//!   object that merely reuses a dead source's address has token 0.
//! - Eviction: an entry whose source memory can no longer be read (large vectors
//!   are returned to the OS when freed) or no longer carries the token is
//!   dropped before every share and after every garbage collection. Sources whose
//!   death cannot be seen that way (small vectors in R's or malloc's heap) are
//!   dropped least-recently-used first once the cached views exceed
//!   `pageshare.cache_limit` bytes. Dropping an entry releases the cache's hold on
//!   the view; the segment goes when the last view does.
//!
//! No lock is held while R is called.

use crate::rapi::*;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Clone, Copy)]
struct Entry {
    token: R_xlen_t,
    /// The view, preserved (R_PreserveObject) while the entry exists.
    view: usize,
    bytes: u64,
    used: u64,
}

/// Source address -> entry.
static ENTRIES: Lazy<Mutex<HashMap<usize, Entry>>> = Lazy::new(|| Mutex::new(HashMap::new()));
static CLOCK: AtomicU64 = AtomicU64::new(1);
/// Byte offset of TRUELENGTH in a vector's header, found at load (None: unknown,
/// then only unmapping tells a source's death).
static TRUELENGTH_OFFSET: Lazy<Mutex<Option<usize>>> = Lazy::new(|| Mutex::new(None));

fn entries() -> std::sync::MutexGuard<'static, HashMap<usize, Entry>> {
    ENTRIES.lock().unwrap_or_else(|p| p.into_inner())
}

fn tick() -> u64 {
    CLOCK.fetch_add(1, Ordering::Relaxed)
}

const TOKEN_TAG: u64 = 0x5053_0000_0000_0000;
const TOKEN_TAG_MASK: u64 = 0xffff_0000_0000_0000;

/// Tokens are large and distinct from any capacity R would store in TRUELENGTH.
fn fresh_token() -> R_xlen_t {
    (TOKEN_TAG | (tick() & !TOKEN_TAG_MASK)) as R_xlen_t
}

/// Is this TRUELENGTH a token of ours (left behind by an entry that was dropped,
/// e.g. by `forget_shared()`), rather than a capacity R keeps there?
fn is_token(tl: R_xlen_t) -> bool {
    tl as u64 & TOKEN_TAG_MASK == TOKEN_TAG
}

/// Find where TRUELENGTH lives in a vector header (called once at load).
///
/// # Safety
/// Main R thread, from the package's init routine.
pub unsafe fn init() {
    // SAFETY: a fresh, protected vector; we only read its own header bytes.
    unsafe {
        let v = Rf_protect(Rf_allocVector(SEXPTYPE::REALSXP, 1));
        let marker: R_xlen_t = 0x1234_5678_9abc_def0;
        SET_TRUELENGTH(v, marker);
        let base = v as usize;
        let data = DATAPTR(v) as usize;
        let mut found = None;
        let mut off = 8;
        while base + off + 8 <= data {
            if std::ptr::read_unaligned((base + off) as *const R_xlen_t) == marker {
                found = Some(off);
                break;
            }
            off += 8;
        }
        SET_TRUELENGTH(v, 0);
        Rf_unprotect(1);
        *TRUELENGTH_OFFSET.lock().unwrap_or_else(|p| p.into_inner()) = found;
    }
}

/// The view already made for `x`, if `x` was shared before.
///
/// # Safety
/// Main R thread; `x` a valid SEXP.
pub unsafe fn lookup(x: SEXP) -> Option<SEXP> {
    // SAFETY: x is live; ALTREP objects have no TRUELENGTH to read.
    unsafe {
        if ALTREP(x) != 0 {
            return None;
        }
        let tl = TRUELENGTH(x);
        let mut map = entries();
        let e = map.get_mut(&(x as usize))?;
        if e.token != tl {
            return None;
        }
        e.used = tick();
        Some(e.view as SEXP)
    }
}

/// Remember that `view` is the shared copy of `x`. ALTREP sources (compact
/// sequences, other packages' classes) are not cached.
///
/// # Safety
/// Main R thread; `x` and `view` valid and protected by the caller.
pub unsafe fn insert(x: SEXP, view: SEXP, bytes: u64) {
    // SAFETY: x is an ordinary live vector; SET_TRUELENGTH writes its own header.
    unsafe {
        // TRUELENGTH is ours only while R leaves it at 0 (or at an old token of
        // ours: a source shared again after its entry was dropped): a growable
        // vector (`x[n + 1] <- v`) keeps its capacity there, and R reads it when
        // the vector is freed. Such a source is not cached.
        let tl = TRUELENGTH(x);
        if ALTREP(x) != 0 || (tl != 0 && !is_token(tl)) {
            return;
        }
        let token = fresh_token();
        SET_TRUELENGTH(x, token);
        // It must never change in place now: R duplicates it before any write.
        MARK_NOT_MUTABLE(x);
        R_PreserveObject(view);
        let old = entries().insert(x as usize, Entry { token, view: view as usize, bytes, used: tick() });
        if let Some(old) = old {
            R_ReleaseObject(old.view as SEXP);
        }
    }
}

/// Is the source at `addr` (which carried `token`) still there? The word is
/// read with a call that cannot fault: the memory may have been freed and
/// unmapped, or reused with other protections. A stale token in freed memory
/// only makes us keep an entry (bounded by the cache cap).
fn source_alive(addr: usize, token: R_xlen_t) -> bool {
    let off = *TRUELENGTH_OFFSET.lock().unwrap_or_else(|p| p.into_inner());
    match off {
        Some(off) => pageshare_core::os::read_word(addr + off) == Some(token as i64),
        // Without the offset, only unreadable memory tells a death.
        None => pageshare_core::os::read_word(addr).is_some(),
    }
}

/// Drop the entries whose source is gone, then the least recently used ones
/// while the cached views exceed `limit` bytes (never the one used last).
/// Returns how many entries were dropped.
///
/// # Safety
/// Main R thread.
pub unsafe fn evict_unused(limit: u64) -> usize {
    let mut all: Vec<(usize, Entry)> = entries().iter().map(|(k, v)| (*k, *v)).collect();
    all.sort_by_key(|(_, e)| e.used);
    let newest = all.last().map(|(k, _)| *k);
    let mut total: u64 = all.iter().map(|(_, e)| e.bytes).sum();
    let mut dropped = 0;
    for (addr, e) in all {
        let gone = !source_alive(addr, e.token);
        let over_cap = total > limit && Some(addr) != newest;
        if gone || over_cap {
            entries().remove(&addr);
            total -= e.bytes;
            // SAFETY: preserved once by `insert`, released once here.
            unsafe { R_ReleaseObject(e.view as SEXP) };
            dropped += 1;
        }
    }
    dropped
}

/// Forget every entry (package unload, `forget_shared()`).
///
/// # Safety
/// Main R thread.
pub unsafe fn clear() -> usize {
    let all: Vec<Entry> = entries().drain().map(|(_, v)| v).collect();
    for e in &all {
        // SAFETY: each view was preserved once by `insert`.
        unsafe { R_ReleaseObject(e.view as SEXP) };
    }
    all.len()
}

pub fn len() -> usize {
    entries().len()
}

/// (address, bytes, source still seen alive) of every entry, for diagnostics.
pub fn describe() -> Vec<(usize, u64, bool)> {
    entries().iter().map(|(a, e)| (*a, e.bytes, source_alive(*a, e.token))).collect()
}
