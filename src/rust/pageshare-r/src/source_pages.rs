//! Give the caller's own copy of a shared vector back to the system.
//!
//! Sharing a vector copies it into a segment, so the caller holds the data twice
//! (its vector and the segment). When the vector's block is a glibc-mmapped
//! chunk of its own (R allocates large vectors with malloc(), and glibc serves
//! those from a private mmap() region), the page-aligned interior of its data
//! is replaced by a private, copy-on-write mapping of the segment's pages, which
//! hold the very same bytes: the vector stays where it is, with the same
//! contents, but its pages are now the shared ones (its private pages are freed).
//! A later write to it (R duplicates first; C code that writes in place anyway)
//! copies just the page written, as for any MAP_PRIVATE mapping, and never
//! reaches the segment. When R frees the vector, glibc unmaps the whole region,
//! this mapping included.
//!
//! The segment is laid out so that its data start at the same offset within a
//! page as the vector's data (the "phase", see pageshare-core's `header.rs`).

use crate::rapi::*;
use once_cell::sync::Lazy;
use pageshare_core::os;
use pageshare_core::segment::Segment;

/// Below this the saving is not worth a mapping (and the block is not an mmap()ed chunk).
const MIN_BYTES: usize = 1 << 20;

static GLIBC_MALLOC: Lazy<bool> = Lazy::new(os::glibc_malloc_in_use);

/// The offset within its page at which a segment copying `x` should start its data.
///
/// # Safety
/// Main R thread; `x` a plain (non-ALTREP) vector with data.
pub unsafe fn phase_of(x: SEXP) -> u64 {
    // SAFETY: forwarded.
    let data = unsafe { DATAPTR_RO(x) } as usize;
    (data % os::page_size()) as u64 & !7
}

/// Re-point the pages of `x`'s data at `seg`, which holds a copy of them laid out
/// at `x`'s phase. Returns the bytes released (0 when `x` does not qualify).
///
/// # Safety
/// Main R thread; `x` a plain (non-ALTREP) numeric vector whose data `seg` holds
/// byte for byte.
pub unsafe fn release(x: SEXP, seg: &Segment) -> usize {
    if !*GLIBC_MALLOC {
        return 0;
    }
    let page = os::page_size();
    // SAFETY: x is a plain vector (caller); reading its address and length.
    let (sexp, data, long) = unsafe { (x as usize, DATAPTR_RO(x) as usize, XLENGTH(x) as u64 > i32::MAX as u64) };
    let bytes = seg.header().data_len as usize;
    if bytes < MIN_BYTES || data % page != seg.header().data_offset as usize % page {
        return 0;
    }
    // R's large vectors are malloc(header + data) with the SEXP at the start of
    // the block (long vectors: 16 bytes in, after their length header).
    let mem = if long { sexp - 16 } else { sexp };
    let Some((start, len)) = os::glibc_mmapped_chunk(mem) else { return 0 };
    if !(start <= sexp && data + bytes <= start + len) || len > bytes + 2 * page {
        return 0; // not a block of this vector alone
    }
    if !os::private_anonymous_covers(start, start + len) {
        return 0; // already replaced, or not memory glibc mapped
    }
    let lo = data.div_ceil(page) * page;
    let hi = (data + bytes) / page * page;
    if hi <= lo {
        return 0;
    }
    // SAFETY: [lo, hi) lies inside the vector's own mmap()ed block, holds the
    // same bytes as the segment's data from lo - data; R is single-threaded and
    // glibc unmaps the whole block when R frees the vector.
    match unsafe { seg.map_data_over(lo, hi - lo, (lo - data) as u64) } {
        Ok(()) => hi - lo,
        Err(_) => 0, // the vector keeps its own pages: nothing lost
    }
}
