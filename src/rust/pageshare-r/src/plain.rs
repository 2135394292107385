//! Plain vectors over shared pages, for processes that *receive* a view.
//!
//! R 4.2 reads an ALTREP vector element by element in hot paths such as matrix
//! subsetting (`X[, j]` calls `REAL_ELT` for every element), which makes a column
//! of a view ~25% slower to extract than a column of an ordinary matrix. A
//! process that unserializes a handle therefore gets an *ordinary* R vector
//! whose data pages are the segment's pages: R's custom allocator interface
//! (`allocVector3`, meant for "COW mmap()") lets us hand R a block laid out as
//! `[allocator copy + vector header | segment data]`, all mapped MAP_PRIVATE
//! from the segment file: the header is written into (a private copy of) the
//! file page before the data. Reads hit the shared page cache; a write copies
//! only the page written and never reaches the segment. R frees the block through [`free_block`], which unmaps
//! it and drops the segment reference.
//!
//! R's garbage collector must not count these pages as its heap: a vector
//! from a custom allocator is left out of R's heap total, but allocating one
//! of length n first runs a full collection and raises R's collection trigger
//! by n (it then takes many collections to shrink back). A worker that received
//! a 500 MB matrix would let ~500 MB of garbage pile up before collecting again,
//! and paid a ~30 ms collection per future. So the vector is allocated with
//! length [`ALLOC_LEN`] (one cell, no collection, the trigger untouched) and
//! then given its real length; R frees a custom block without consulting its
//! length (R >= 3.5 keeps every length, long or short, in the same header field).
//!
//! Numeric vectors (whole segments and slices) whose data are 8-byte aligned in
//! the file are mapped this way; everything else is an ALTREP view. Such a
//! vector is recognised by its data address ([`lookup`]), so `is_shared()`,
//! `shared_info()` and `share()` (which turns it back into a view of the same
//! segment, to travel as a handle again) keep working.
//!
//! Reuse: a worker receives the same data again and again (every chunk of
//! every `future_lapply()` over a matrix shared once). A fresh mapping pays a
//! page fault per 64 KiB read (~25 ms per 256 MB here, ~3% of such a chunk's
//! work), so a process hands out again the vector it made for an earlier
//! handle of the same slice ([`same_vector`]) if R has not freed it yet (the
//! previous future's globals are unbound just before the next future's
//! arrive, and an idle worker collects no garbage), its data unchanged and its
//! attributes exactly the handle's. Once R has freed it, the mapping goes
//! with it, as before: nothing is kept that R would not keep.

use crate::rapi::*;
use crate::view::sexptype;
use once_cell::sync::Lazy;
use pageshare_core::header::Kind;
use pageshare_core::os::PrefixedMapping;
use pageshare_core::segment::Segment;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::{Arc, Mutex};

/// Smaller vectors are not worth a mapping of their own.
const MIN_BYTES: u64 = 64 * 1024;

/// The length a plain vector is allocated with before it gets its real length:
/// 2, not 1, so that R never marks it as a scalar. At most 16 bytes of data:
/// one or two 8-byte cells for every numeric type.
const ALLOC_LEN: R_xlen_t = 2;

#[repr(C)]
pub struct RAllocator {
    mem_alloc: Option<unsafe extern "C" fn(*mut RAllocator, usize) -> *mut c_void>,
    mem_free: Option<unsafe extern "C" fn(*mut RAllocator, *mut c_void)>,
    res: *mut c_void,
    data: *mut c_void,
}

#[allow(improper_ctypes)]
extern "C" {
    fn Rf_allocVector3(t: SEXPTYPE, n: R_xlen_t, allocator: *mut RAllocator) -> SEXP;
    fn SETLENGTH(x: SEXP, v: R_xlen_t);
}

/// What a plain shared vector maps.
pub struct Plain {
    pub seg: Arc<Segment>,
    pub kind: Kind,
    pub offset: u64,
    pub len: u64,
    map: PrefixedMapping,
    data_bytes: usize,
    /// The vector R allocated over the block (0 until then).
    sexp: usize,
}

impl Plain {
    /// Has this vector been written in place (by C code that ignores R's
    /// not-mutable mark, e.g. data.table's `set()`)? Then it no longer equals
    /// its segment and must never travel as the segment's handle.
    ///
    /// The page holding the first data bytes also holds R's vector header (or
    /// its end), written at allocation, so it is always a private copy: its
    /// data bytes are compared with the segment's. The other pages are private
    /// only once written (pagemap); if pagemap cannot be read, say yes.
    pub fn is_modified(&self) -> bool {
        let page = pageshare_core::os::page_size();
        let data = self.data_ptr() as usize;
        let head = ((data / page + 1) * page - data).min(self.data_bytes);
        let start = (self.offset * self.kind.elem_size()) as usize;
        // SAFETY: the mapping holds data_bytes readable bytes from data.
        let mine = unsafe { std::slice::from_raw_parts(self.data_ptr(), head) };
        if mine != &self.seg.data()[start..start + head] {
            return true;
        }
        let rest = self.data_bytes - head;
        rest > 0 && pageshare_core::os::has_private_pages((data + head) as *const u8, rest).unwrap_or(true)
    }

    pub fn data_ptr(&self) -> *const u8 {
        self.map.data()
    }
    pub fn bytes(&self) -> usize {
        self.data_bytes
    }
}

/// The Plains whose blocks R has not freed (boxes as addresses): by data
/// address (to recognise a vector), and by slice (to find one to hand out
/// again without a scan of all: a process may hold thousands).
#[derive(Default)]
struct Live {
    by_data: HashMap<usize, usize>,
    by_slice: HashMap<SliceKey, Vec<usize>>,
}

/// (segment mapping address, kind, offset, length): the Plain's Arc keeps the
/// segment, so its address names it for as long as the entry exists.
type SliceKey = (usize, u32, u64, u64);

fn slice_key(seg: &Arc<Segment>, kind: Kind, offset: u64, len: u64) -> SliceKey {
    (Arc::as_ptr(seg) as usize, kind as u32, offset, len)
}

impl Live {
    fn insert(&mut self, data_addr: usize, boxed: *mut Plain) {
        // SAFETY: a Box just made by plain_vector.
        let p = unsafe { &*boxed };
        self.by_data.insert(data_addr, boxed as usize);
        self.by_slice.entry(slice_key(&p.seg, p.kind, p.offset, p.len)).or_default().push(boxed as usize);
    }
    fn remove(&mut self, boxed: *mut Plain) {
        // SAFETY: a Box in LIVE, not yet dropped.
        let p = unsafe { &*boxed };
        self.by_data.remove(&(p.map.data() as usize));
        let key = slice_key(&p.seg, p.kind, p.offset, p.len);
        if let Some(v) = self.by_slice.get_mut(&key) {
            v.retain(|&b| b != boxed as usize);
            if v.is_empty() {
                self.by_slice.remove(&key);
            }
        }
    }
}

static LIVE: Lazy<Mutex<Live>> = Lazy::new(|| Mutex::new(Live::default()));

fn live() -> std::sync::MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

unsafe extern "C" fn alloc_block(a: *mut RAllocator, request: usize) -> *mut c_void {
    // SAFETY: `data` is the Box<Plain> made by `plain_vector` for this allocation.
    unsafe {
        let p = &*((*a).data as *const Plain);
        // R rounds the data up to whole 8-byte cells; the rest is its header.
        // (R asks for the ALLOC_LEN elements it allocates, not for `len`.)
        let cells = (ALLOC_LEN as usize * p.kind.elem_size() as usize).div_ceil(8) * 8;
        if request < cells {
            return std::ptr::null_mut();
        }
        match p.map.block(request - cells) {
            Some(b) => b.cast(),
            None => std::ptr::null_mut(), // R reports an allocation error
        }
    }
}

unsafe extern "C" fn free_block(a: *mut RAllocator, _block: *mut c_void) {
    // SAFETY: `a` is R's copy of our allocator inside the block; read what we
    // need before the block (and `a` with it) is unmapped by dropping the Box.
    unsafe {
        let boxed = (*a).data as *mut Plain;
        live().remove(boxed);
        drop(Box::from_raw(boxed));
    }
}

/// An ordinary R vector over `len` elements of `seg` from `offset`, or None when
/// this slice cannot be mapped that way (type, size, alignment, mapping error).
///
/// # Safety
/// Main R thread; the slice must lie inside the segment.
pub unsafe fn plain_vector(seg: &Arc<Segment>, kind: Kind, offset: u64, len: u64) -> Option<SEXP> {
    if !matches!(kind, Kind::Double | Kind::Integer | Kind::Logical | Kind::Complex | Kind::Raw) {
        return None;
    }
    let data_bytes = len.checked_mul(kind.elem_size())?;
    let start = offset.checked_mul(kind.elem_size())?;
    if data_bytes < MIN_BYTES || !(seg.header().data_offset + start).is_multiple_of(8) {
        return None;
    }
    let map = seg.prefixed_map(start, data_bytes as usize).ok()?;
    let data_addr = map.data() as usize;
    // (sexp stays 0 until R has allocated the vector: if the allocation fails,
    // the entry left in LIVE is never taken for a vector.)
    let boxed =
        Box::into_raw(Box::new(Plain { seg: seg.clone(), kind, offset, len, map, data_bytes: data_bytes as usize, sexp: 0 }));
    let mut allocator = RAllocator {
        mem_alloc: Some(alloc_block),
        mem_free: Some(free_block),
        res: std::ptr::null_mut(),
        data: boxed.cast(),
    };
    live().insert(data_addr, boxed);
    // SAFETY: R copies the allocator into the block and calls alloc_block once.
    let x = unsafe { Rf_allocVector3(sexptype(kind), ALLOC_LEN, &mut allocator) };
    // SAFETY: x is the new vector, its block holds `len` elements of data; from
    // now on R must duplicate it before writing.
    unsafe {
        SETLENGTH(x, len as R_xlen_t);
        MARK_NOT_MUTABLE(x);
        (*boxed).sexp = x as usize;
    }
    Some(x)
}

/// The vector this process already has over exactly this slice of `seg`, if
/// its data are unchanged and its attributes, object bit and levels are exactly
/// these: a worker that receives the same data in its next future gets the
/// same vector (it was never written: R duplicates a not-mutable vector before
/// writing), its pages already mapped. The vector may be garbage that R has not
/// collected yet; until R frees it (free_block) it is intact, and once returned
/// it is referenced again.
///
/// # Safety
/// Main R thread; `attr` a pairlist or R_NilValue.
pub unsafe fn same_vector(
    seg: &Arc<Segment>,
    kind: Kind,
    offset: u64,
    len: u64,
    attr: SEXP,
    objf: std::os::raw::c_int,
    levs: std::os::raw::c_int,
) -> Option<SEXP> {
    let candidates: Vec<usize> = live()
        .by_slice
        .get(&slice_key(seg, kind, offset, len))
        .into_iter()
        .flatten()
        .filter_map(|&b| {
            // SAFETY: LIVE holds Boxes of blocks R has not freed.
            let p = unsafe { &*(b as *const Plain) };
            (p.sexp != 0).then_some(p.sexp)
        })
        .take(MAX_CANDIDATES)
        .collect();
    // SAFETY: every candidate is in LIVE, i.e. not freed. All are protected
    // before the first R call: comparing attributes may allocate, i.e. collect
    // (and free) any of them that is garbage.
    unsafe {
        for &c in &candidates {
            Rf_protect(c as SEXP);
        }
        let found = candidates.iter().map(|&c| c as SEXP).find(|&x| {
            lookup(x).is_some_and(|p| !p.is_modified())
                && OBJECT(x) == objf
                && LEVELS(x) == levs
                && R_compute_identical(ATTRIB(x), attr, IDENTICAL_STRICT) != Rboolean::FALSE
                && same_strings(ATTRIB(x), attr, 0)
        });
        Rf_unprotect(candidates.len() as std::os::raw::c_int);
        found
    }
}

/// `identical()` calls two strings equal when their text is, even in different
/// encodings (latin1 and UTF-8 "é"). Having found `a` and `b` identical, also
/// require every string in them to be the same CHARSXP (R keeps one per bytes
/// and encoding), so that a vector handed out again carries exactly the
/// handle's strings. Walks lists, pairlists and attributes; no allocation.
///
/// # Safety
/// Main R thread; `a` and `b` valid SEXPs that `identical()` found equal.
unsafe fn same_strings(a: SEXP, b: SEXP, depth: u32) -> bool {
    if a == b {
        return true;
    }
    if depth > 64 {
        return false; // too deep to check cheaply: do not reuse
    }
    // SAFETY: a and b have the same type and length (identical); every
    // element read is in range.
    unsafe {
        let same_here = match TYPEOF(a) {
            SEXPTYPE::STRSXP => (0..XLENGTH(a)).all(|i| STRING_ELT(a, i) == STRING_ELT(b, i)),
            SEXPTYPE::VECSXP | SEXPTYPE::EXPRSXP => {
                (0..XLENGTH(a)).all(|i| same_strings(VECTOR_ELT(a, i), VECTOR_ELT(b, i), depth + 1))
            }
            SEXPTYPE::LISTSXP => {
                // (identical(): same length, same tags)
                let (mut p, mut q) = (a, b);
                let mut same = true;
                while same && TYPEOF(p) == SEXPTYPE::LISTSXP && TYPEOF(q) == SEXPTYPE::LISTSXP {
                    same = same_strings(CAR(p), CAR(q), depth + 1) && same_strings(ATTRIB(p), ATTRIB(q), depth + 1);
                    (p, q) = (CDR(p), CDR(q));
                }
                same && p == q
            }
            _ => true,
        };
        same_here && same_strings(ATTRIB(a), ATTRIB(b), depth + 1)
    }
}

/// At most this many vectors over one slice are looked at (each is protected
/// while they are compared; there is usually one).
const MAX_CANDIDATES: usize = 8;

/// identical()'s flags with every option strict: numbers compared bitwise,
/// NAs distinguished, attributes in order, byte code, environments and srcrefs
/// not ignored, external pointers compared as objects.
const IDENTICAL_STRICT: std::os::raw::c_int = 1 | 2 | 4 | 8 | 16 | 32 | 64;

/// The Plain behind an ordinary vector whose data are mapped from a segment.
///
/// # Safety
/// Main R thread; `x` a valid SEXP; the reference must not outlive `x`.
pub unsafe fn lookup<'a>(x: SEXP) -> Option<&'a Plain> {
    // SAFETY: only plain (non-ALTREP) numeric vectors have a data address to test.
    unsafe {
        if ALTREP(x) != 0
            || !matches!(
                TYPEOF(x),
                SEXPTYPE::REALSXP | SEXPTYPE::INTSXP | SEXPTYPE::LGLSXP | SEXPTYPE::CPLXSXP | SEXPTYPE::RAWSXP
            )
            || XLENGTH(x) == 0
        {
            return None;
        }
        let addr = DATAPTR_RO(x) as usize;
        let p = *live().by_data.get(&addr)?;
        Some(&*(p as *const Plain))
    }
}
