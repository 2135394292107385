//! Share once: the identity cache from R objects to their views.
//!
//! R offers no finalizer or weak reference on a vector, and its reference counts
//! are not decremented when a container is garbage-collected (a future's globals,
//! a captured function frame), so neither can tell when a source dies. The cache
//! therefore does not hold the source at all, and never trusts an address alone:
//!
//! - Lookup: an entry is found by the source's address and accepted only if the
//!   object there now (live: R passed it) has the recorded type, length, data
//!   address and attributes, and the view's data: an object that merely reuses
//!   a dead source's address gets a new segment unless it holds the very same
//!   values, in which case the view is a correct answer anyway. Comparing the
//!   data costs a read of both copies, except for a source whose pages were
//!   handed over to the segment (source_pages.rs): while that mapping is still
//!   in place and none of its pages was written, the source *is* the segment's
//!   pages, and only the few bytes outside it are compared. Sharing marks the
//!   source not mutable, so R duplicates it before any write.
//! - Eviction: an entry whose source memory can no longer be read (large vectors
//!   are returned to the OS when freed), or whose handed-over mapping is gone,
//!   is dropped after every garbage collection (a source can only die in one).
//!   A share checks only the cache's size, so sharing n objects costs O(n). Sources
//!   whose death cannot be seen that way (small vectors in R's or malloc's heap)
//!   are dropped least-recently-used first once the cached views exceed
//!   `pageshare.cache_limit` bytes. Dropping an entry releases the cache's hold on
//!   the view; the segment goes when the last view does.
//!
//! Only R's API is used: no word of the source's header is written or read.
//! No lock is held while R is called.

use crate::boundary::RError;
use crate::r_calls;
use crate::r_sys::*;
use crate::view::view_of;
use once_cell::sync::Lazy;
use pageshare_core::segment::Handover;
use pageshare_core::strings::Encoding;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Clone, Copy)]
struct Entry {
    /// The view, preserved (R_PreserveObject) while the entry exists.
    view: usize,
    /// The source's attributes as a pairlist (or R_NilValue), preserved too.
    attrs: usize,
    sexptype: u32,
    len: R_xlen_t,
    /// The source's data address (0 for an empty vector).
    data: usize,
    /// Pages of the source that were handed over to the view's segment.
    handed: Option<Handover>,
    bytes: u64,
    used: u64,
    /// The clock when the entry was made (see [`mark`]).
    made: u64,
    /// For a character vector, a digest of its array of string pointers (see
    /// [`string_pointers_digest`]).
    strings_digest: u64,
}

/// Source address -> entry, with the entries' total bytes kept as they change
/// (a share compares it with the limit without walking the entries).
#[derive(Default)]
struct Entries {
    map: HashMap<usize, Entry>,
    bytes: u64,
}

impl Entries {
    fn insert(&mut self, addr: usize, e: Entry) -> Option<Entry> {
        self.bytes += e.bytes;
        let old = self.map.insert(addr, e);
        self.bytes -= old.map_or(0, |o| o.bytes);
        old
    }
    fn remove(&mut self, addr: usize) -> Option<Entry> {
        let old = self.map.remove(&addr);
        self.bytes -= old.map_or(0, |o| o.bytes);
        old
    }
    fn drain(&mut self) -> Vec<Entry> {
        self.bytes = 0;
        self.map.drain().map(|(_, e)| e).collect()
    }
}

static ENTRIES: Lazy<Mutex<Entries>> = Lazy::new(|| Mutex::new(Entries::default()));
static CLOCK: AtomicU64 = AtomicU64::new(1);

fn entries() -> std::sync::MutexGuard<'static, Entries> {
    ENTRIES.lock().unwrap_or_else(|p| p.into_inner())
}

fn tick() -> u64 {
    CLOCK.fetch_add(1, Ordering::Relaxed)
}

/// identical()'s flags with every option strict: numbers compared bitwise,
/// NAs distinguished, attributes in order, byte code, environments and srcrefs
/// not ignored, external pointers compared as objects.
const IDENTICAL_STRICT: std::os::raw::c_int = 1 | 2 | 4 | 8 | 16 | 32 | 64;

/// The view already made for `x`, if `x` was shared before and still holds
/// exactly the view's attributes (`attrs`, as `ps_share` received them) and data.
///
/// # Safety
/// Main R thread; `x` a valid SEXP; `attrs` a pairlist or R_NilValue.
pub unsafe fn lookup(x: SEXP, attrs: SEXP) -> Result<Option<SEXP>, RError> {
    // SAFETY: x is live; only R's API reads it.
    unsafe {
        if ALTREP(x) != 0 {
            return Ok(None);
        }
        let Some(e) = entries().map.get(&(x as usize)).copied() else { return Ok(None) };
        // (the type first: another object may have the address of a
        // collected source, and XLENGTH of anything but a vector is an R error)
        if TYPEOF(x) as u32 != e.sexptype {
            return Ok(None);
        }
        let data = if XLENGTH(x) > 0 { DATAPTR_RO(x) as usize } else { 0 };
        if XLENGTH(x) != e.len || data != e.data {
            return Ok(None);
        }
        if !identical(attrs, e.attrs as SEXP)? || !holds_view_data(x, &e)? {
            return Ok(None);
        }
        if let Some(e) = entries().map.get_mut(&(x as usize)) {
            e.used = tick();
        }
        Ok(Some(e.view as SEXP))
    }
}

/// Does `x` hold exactly the data of the entry's view?
///
/// # Safety
/// Main R thread; `x` live, of the entry's type, length and data address.
unsafe fn holds_view_data(x: SEXP, e: &Entry) -> Result<bool, RError> {
    // SAFETY: the view is preserved by the entry; x's data cover v.bytes().
    unsafe {
        let view = e.view as SEXP;
        let Some(v) = view_of(view) else { return Ok(false) };
        if R_altrep_data2(view) != nil() || v.is_modified() {
            return Ok(false); // the view no longer reads its segment
        }
        if TYPEOF(x) == SEXPTYPE::STRSXP {
            return Ok(string_pointers_digest(x) == e.strings_digest || holds_view_strings(x, v));
        }
        let n = v.bytes();
        let start = (v.offset * v.kind.elem_size()) as usize;
        let shared = &v.seg.data()[start..start + n];
        let mine = if n > 0 { std::slice::from_raw_parts(e.data as *const u8, n) } else { &[][..] };
        Ok(match e.handed {
            Some(h) if handover_intact(h, &v.seg) => {
                let (lo, hi) = (h.lo - e.data, h.hi - e.data);
                mine[..lo] == shared[..lo] && mine[hi..] == shared[hi..]
            }
            _ => mine == shared,
        })
    }
}

/// A digest of the character vector `x`'s array of string pointers. R's
/// strings are immutable and unique per text and encoding, and `x` holds each
/// string it points to, so the same array means the same strings: a vector
/// found again is checked by reading its array (8 bytes per string, in order)
/// rather than every string's text, scattered over the heap.
///
/// # Safety
/// Main R thread; `x` a live ordinary (not ALTREP) character vector.
unsafe fn string_pointers_digest(x: SEXP) -> u64 {
    // SAFETY: the array of an ordinary STRSXP holds XLENGTH(x) pointers.
    let words = unsafe { std::slice::from_raw_parts(STRING_PTR_RO(x), XLENGTH(x) as usize) };
    // (any good mixing will do: a collision needs another vector at the same
    // address, of the same length, whose pointers happen to mix alike)
    let mut h: u64 = 0x243F_6A88_85A3_08D3 ^ words.len() as u64;
    for w in words {
        h = (h ^ (*w as usize as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    h
}

/// Does the character vector `x` hold the view's strings, byte for byte and
/// with the same encodings and NAs? Read from the segment's packed table:
/// identical() with the view would make an R string of every element (seconds
/// for a million).
///
/// # Safety
/// Main R thread; `x` a live ordinary (not ALTREP) character vector of the
/// view's length.
unsafe fn holds_view_strings(x: SEXP, v: &crate::view::View) -> bool {
    // SAFETY: x is an ordinary STRSXP, so its array holds XLENGTH(x) CHARSXPs,
    // alive as long as x; only their bytes, lengths and encodings are read.
    unsafe {
        let table = v.seg.strings();
        let offset = v.offset as usize;
        let n = XLENGTH(x) as usize;
        if offset + n > table.len() {
            return false;
        }
        let array: *const SEXP = STRING_PTR_RO(x);
        (0..n).all(|i| {
            let c = *array.add(i);
            let mine = if c == R_NaString {
                None
            } else {
                let bytes = std::slice::from_raw_parts(R_CHAR(c).cast::<u8>(), LENGTH(c) as usize);
                Some((bytes, Encoding::from_cetype(Rf_getCharCE(c))))
            };
            mine == table.get(offset + i)
        })
    }
}

/// R's identical() in its strictest form. It may run ALTREP methods (a view's
/// strings), which may raise.
fn identical(a: SEXP, b: SEXP) -> Result<bool, RError> {
    // SAFETY: both are valid SEXPs held by the caller.
    r_calls::try_r(|| unsafe { R_compute_identical(a, b, IDENTICAL_STRICT) != Rboolean::FALSE })
}

/// Are the handed-over pages still a mapping of the segment's file, none of
/// them written? (If the source was freed, its block and this mapping with it
/// went back to the system; an object allocated at the same place since has
/// memory of its own.)
fn handover_intact(h: Handover, seg: &pageshare_core::segment::Segment) -> bool {
    pageshare_core::os::private_file_mapping_covers(h.lo, h.hi, &seg.maps_path())
        && pageshare_core::os::has_private_pages(h.lo as *const u8, h.hi - h.lo) == Some(false)
}

/// Remember that `view` is the shared copy of `x` (with attributes `attrs`),
/// whose pages `handed` were handed over to the view's segment. ALTREP sources
/// (compact sequences, other packages' classes) are not cached.
///
/// # Safety
/// Main R thread; `x`, `attrs` and `view` valid and protected by the caller.
pub unsafe fn insert(x: SEXP, attrs: SEXP, view: SEXP, bytes: u64, handed: Option<Handover>) -> Result<(), RError> {
    // SAFETY: x is an ordinary live vector, read through R's API.
    unsafe {
        if ALTREP(x) != 0 {
            return Ok(());
        }
        // Preserving allocates (and may raise): before anything is changed.
        r_calls::try_r(|| R_PreserveObject(view))?;
        if let Err(e) = r_calls::try_r(|| R_PreserveObject(attrs)) {
            R_ReleaseObject(view);
            return Err(e);
        }
        // It must never change in place now: R duplicates it before any write.
        MARK_NOT_MUTABLE(x);
        let data = if XLENGTH(x) > 0 { DATAPTR_RO(x) as usize } else { 0 };
        let e = Entry {
            view: view as usize,
            attrs: attrs as usize,
            sexptype: TYPEOF(x) as u32,
            len: XLENGTH(x),
            data,
            handed,
            bytes,
            used: tick(),
            made: tick(),
            strings_digest: if TYPEOF(x) == SEXPTYPE::STRSXP { string_pointers_digest(x) } else { 0 },
        };
        if let Some(old) = entries().insert(x as usize, e) {
            release(&old);
        }
        Ok(())
    }
}

/// Give up the entry's holds on R objects.
///
/// # Safety
/// Main R thread; `e` was made by `insert` and is released once.
unsafe fn release(e: &Entry) {
    // SAFETY: both were preserved once by `insert`.
    unsafe {
        R_ReleaseObject(e.view as SEXP);
        R_ReleaseObject(e.attrs as SEXP);
    }
}

/// Is the source at `addr` still there, as far as can be seen without reading
/// freed memory? The word is read with a call that cannot fault: the memory
/// may have been freed and unmapped, or reused with other protections.
fn source_alive(addr: usize, e: &Entry) -> bool {
    if pageshare_core::os::read_word(addr).is_none() {
        return false;
    }
    match e.handed {
        // SAFETY: the view is preserved by the entry.
        Some(h) => unsafe { view_of(e.view as SEXP) }.is_some_and(|v| handover_intact(h, &v.seg)),
        None => true,
    }
}

/// Drop the entries whose source is gone, then the least recently used ones
/// while the cached views exceed `limit` bytes (never the one used last).
/// Returns how many entries were dropped.
///
/// # Safety
/// Main R thread.
pub unsafe fn evict_unused(limit: u64) -> usize {
    let mut all: Vec<(usize, Entry)> = entries().map.iter().map(|(k, v)| (*k, *v)).collect();
    all.sort_by_key(|(_, e)| e.used);
    let newest = all.last().map(|(k, _)| *k);
    let mut total: u64 = all.iter().map(|(_, e)| e.bytes).sum();
    let mut dropped = 0;
    for (addr, e) in all {
        let gone = !source_alive(addr, &e);
        let over_cap = total > limit && Some(addr) != newest;
        if gone || over_cap {
            entries().remove(addr);
            total -= e.bytes;
            // SAFETY: made by `insert`, released once here.
            unsafe { release(&e) };
            dropped += 1;
        }
    }
    dropped
}

/// After a share: [`evict_unused`] only when the cached views exceed `limit`
/// bytes (dead sources are dropped after each garbage collection; checking
/// every entry at every share would make sharing n objects cost O(n^2)).
///
/// # Safety
/// Main R thread.
pub unsafe fn trim_to(limit: u64) -> usize {
    if entries().bytes <= limit {
        return 0;
    }
    // SAFETY: forwarded.
    unsafe { evict_unused(limit) }
}

/// Forget every entry (package unload, `forget_shared()`).
///
/// # Safety
/// Main R thread.
pub unsafe fn clear() -> usize {
    let all: Vec<Entry> = entries().drain();
    for e in &all {
        // SAFETY: each entry was made by `insert` and is released once here.
        unsafe { release(e) };
    }
    all.len()
}

/// A point in the cache's history: [`forget_since`] drops what came after.
pub fn mark() -> u64 {
    CLOCK.load(Ordering::Relaxed)
}

/// Drop the entries made since `mark` (a front door that falls back: none of
/// the views it made may be found again). Returns how many.
///
/// # Safety
/// Main R thread.
pub unsafe fn forget_since(mark: u64) -> usize {
    let mut all = entries();
    let doomed: Vec<usize> = all.map.iter().filter(|(_, e)| e.made >= mark).map(|(a, _)| *a).collect();
    let dropped: Vec<Entry> = doomed.iter().filter_map(|a| all.remove(*a)).collect();
    drop(all);
    for e in &dropped {
        // SAFETY: each entry was made by `insert` and is released once here.
        unsafe { release(e) };
    }
    dropped.len()
}

pub fn len() -> usize {
    entries().map.len()
}
