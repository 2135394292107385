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
//! page as the vector's data (the "phase", see pageshare-core's `header.rs`),
//! and the pages are handed over chunk by chunk as the copy is written
//! (`Segment::create_copy_handing_over`): the data are never held twice for
//! more than one chunk.

use crate::rapi::*;
use once_cell::sync::Lazy;
use pageshare_core::os;
use pageshare_core::segment::Handover;
use std::path::Path;

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

/// The pages of `x`'s data that can be handed over to the segment copying it
/// (None when `x` does not qualify): the page-aligned interior of its data,
/// when its block is a glibc mmap()ed chunk of its own made of private memory:
/// anonymous, or private mappings of earlier segments in `dir` (a source shared
/// again after its segment was dropped, e.g. by `forget_shared()`).
///
/// # Safety
/// Main R thread; `x` a plain (non-ALTREP) numeric vector of `bytes` data bytes.
pub unsafe fn handover(x: SEXP, bytes: usize, dir: &Path) -> Option<Handover> {
    if !*GLIBC_MALLOC || bytes < MIN_BYTES {
        return None;
    }
    let page = os::page_size();
    // SAFETY: x is a plain vector (caller); reading its address and length.
    let (sexp, data, long) = unsafe { (x as usize, DATAPTR_RO(x) as usize, XLENGTH(x) as u64 > i32::MAX as u64) };
    // R's large vectors are malloc(header + data) with the SEXP at the start of
    // the block (long vectors: 16 bytes in, after their length header).
    let mem = if long { sexp - 16 } else { sexp };
    let (start, len) = os::glibc_mmapped_chunk(mem)?;
    if !(start <= sexp && data + bytes <= start + len) || len > bytes + 2 * page {
        return None; // not a block of this vector alone
    }
    let ours = format!("{}/pageshare.", dir.display());
    if !os::private_memory_covers(start, start + len, |path| path.starts_with(&ours)) {
        return None; // not (only) memory glibc mapped or pages of our segments
    }
    let lo = data.div_ceil(page) * page;
    let hi = (data + bytes) / page * page;
    (hi > lo).then_some(Handover { lo, hi })
}
