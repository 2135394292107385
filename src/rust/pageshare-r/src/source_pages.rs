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

use crate::r_sys::*;
use once_cell::sync::Lazy;
use pageshare_core::header::{DATA_ALIGN, ELEM_ALIGN};
use pageshare_core::os;
use pageshare_core::segment::Handover;

/// Below this the saving is not worth a mapping (and the block is not an mmap()ed chunk).
const MIN_BYTES: usize = 1 << 20;

static GLIBC_MALLOC: Lazy<bool> = Lazy::new(os::glibc_malloc_in_use);

/// The offset within its page at which a segment copying `x` should start its data.
///
/// # Safety
/// Main R thread; `x` a plain (non-ALTREP) vector with data.
pub unsafe fn phase_of(x: SEXP) -> u64 {
    // SAFETY: forwarded.
    let data = unsafe { DATAPTR_RO(x) } as u64;
    (data % DATA_ALIGN) & !(ELEM_ALIGN - 1)
}

/// The pages of `x`'s data that can be handed over to the segment copying it
/// (None when `x` does not qualify): the page-aligned interior of its data,
/// when its block is a glibc mmap()ed chunk of its own made of private memory:
/// anonymous, or private mappings of earlier segments (a source shared again
/// after its segment was dropped, e.g. by `forget_shared()`).
///
/// # Safety
/// Main R thread; `x` a plain (non-ALTREP) numeric vector of `bytes` data bytes.
pub unsafe fn handover(x: SEXP, bytes: usize) -> Option<Handover> {
    let page = os::page_size();
    // The segment's layout matches the source's page offsets only with 4 KiB pages.
    if !*GLIBC_MALLOC || bytes < MIN_BYTES || page as u64 != DATA_ALIGN {
        return None;
    }
    // SAFETY: x is a plain vector (caller); reading its address and header.
    let (sexp, data, class) = unsafe { (x as usize, DATAPTR_RO(x) as usize, node_class(x)) };
    // R (>= 3.5) allocates a large vector as malloc(header + data) with the SEXP
    // at the start of the block, in node class 7; custom-allocated vectors
    // (other packages' allocVector3) are class 6 and are left alone.
    if class != Some(LARGE_NODE_CLASS) {
        return None;
    }
    let (start, len) = os::glibc_mmapped_chunk(sexp)?;
    if !(start <= sexp && data + bytes <= start + len) || len > bytes + 2 * page {
        return None; // not a block of this vector alone
    }
    let ours = pageshare_core::os::memfd_path(pageshare_core::segment::MEMFD_PREFIX);
    if !os::private_memory_covers(start, start + len, |path| path.starts_with(&ours)) {
        return None; // not (only) memory glibc mapped or pages of our segments
    }
    let lo = data.div_ceil(page) * page;
    let hi = (data + bytes) / page * page;
    (hi > lo).then_some(Handover { lo, hi })
}

/// R's node class of large, malloc()ed vectors.
const LARGE_NODE_CLASS: u64 = 7;

/// The node class of a vector (`gccls`, bits 29-31 of R's 64-bit sxpinfo
/// header word, as laid out since R 3.5 on little-endian Linux); None if the
/// word cannot be read.
///
/// # Safety
/// `x` a valid SEXP.
unsafe fn node_class(x: SEXP) -> Option<u64> {
    let word = os::read_word(x as usize)? as u64;
    Some((word >> 29) & 0x7)
}
