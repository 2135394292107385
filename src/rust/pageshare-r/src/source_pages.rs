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
//!
//! This relies on R's and glibc's private layouts (R/foreign-internals.R lists
//! them): the node class bits of R's vector header, R's placing of a large
//! vector's header at the start of its malloc() block, and glibc's chunk
//! header. So it runs only where a self-test at load ([`ps_handover_self_test`],
//! called from `.onLoad`) found them as expected on probes; elsewhere
//! (another malloc through LD_PRELOAD, musl, an R with another header) it is
//! off, and the package says so once.

use crate::boundary::entry;
use crate::r_calls::{self, Protect};
use crate::r_sys::*;
use pageshare_core::header::{DATA_ALIGN, ELEM_ALIGN};
use pageshare_core::os;
use pageshare_core::segment::Handover;
use std::sync::OnceLock;

/// Below this the saving is not worth a mapping (and the block is not an mmap()ed chunk).
const MIN_BYTES: usize = 1 << 20;

/// The self-test's verdict: `Ok` when the handover may run in this process.
static VERDICT: OnceLock<Result<(), String>> = OnceLock::new();

/// Did the self-test at load pass (so that the handover runs)?
pub fn handover_enabled() -> bool {
    matches!(VERDICT.get(), Some(Ok(())))
}

/// The length in doubles of the vector whose header the self-test checks as
/// a large one: R allocates vectors of more than 16 doubles with malloc()
/// (node class 7). Small, so that R's heap accounting (and with it when R
/// collects garbage) is left as it was; the handover itself is probed on a
/// block of pageshare-core's own ([`os::probe_malloc_handover`]).
const PROBE_DOUBLES: R_xlen_t = 64;

/// Run the self-test once and report its verdict: `NULL` when the handover is
/// enabled, else why not (one string).
#[no_mangle]
pub extern "C" fn ps_handover_self_test_rs() -> SEXP {
    entry(|| {
        if VERDICT.get().is_none() {
            let mut scope = Protect::new();
            let large = scope.alloc_vector(SEXPTYPE::REALSXP, PROBE_DOUBLES)?;
            let small = scope.alloc_vector(SEXPTYPE::REALSXP, 1)?;
            // SAFETY: fresh plain double vectors that nothing else holds,
            // protected until the test is over.
            let _ = VERDICT.set(unsafe { self_test(large, small) });
        }
        match VERDICT.get() {
            Some(Err(why)) => r_calls::scalar_string(why),
            _ => Ok(nil()),
        }
    })
}

/// The self-test: R's vector header on a scalar and on a malloc()ed vector,
/// which must be a glibc block that starts at the header; then the handover
/// itself on a probe block laid out as such a vector (pageshare-core's
/// `probe_malloc_handover`).
///
/// # Safety
/// Main R thread; `large` a fresh double vector of [`PROBE_DOUBLES`]
/// elements and `small` one of length 1.
unsafe fn self_test(large: SEXP, small: SEXP) -> Result<(), String> {
    os::glibc_malloc()?;
    if os::page_size() as u64 != DATA_ALIGN {
        return Err(format!("pages are {} bytes, not {DATA_ALIGN}", os::page_size()));
    }
    const REALSXP: u64 = 14;
    const SCALAR: u64 = 1 << 5;
    const ALT: u64 = 1 << 7;
    let differs = |word: u64| format!("R's vector header differs from R 3.5-4.6's (sxpinfo word {word:#x})");
    for (x, scalar, class_ok) in [(small, true, 1..=5u64), (large, false, LARGE_NODE_CLASS..=LARGE_NODE_CLASS)] {
        let word = os::read_word(x as usize).ok_or("R's vector header cannot be read")? as u64;
        let class = (word >> 29) & 0x7;
        if word & 0x1f != REALSXP || (word & SCALAR != 0) != scalar || word & ALT != 0 || !class_ok.contains(&class) {
            return Err(differs(word));
        }
    }
    // The large vector is a malloc() block starting at its header: glibc's
    // size word right before it counts the header and the data.
    let bytes = PROBE_DOUBLES as usize * 8;
    // SAFETY: `large` is a plain double vector.
    let header = unsafe { DATAPTR_RO(large) } as usize - large as usize;
    let size = os::read_word(large as usize - 8).ok_or("the word before R's vector cannot be read")? as usize;
    let chunk = size & !0x7;
    if header == 0 || header > 256 || size & 0x2 != 0 || chunk < header + bytes || chunk > header + bytes + 64 {
        return Err(format!(
            "R's large vector is not a glibc block of its own starting at its header (size word {size:#x})"
        ));
    }
    os::probe_malloc_handover(header)
}

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
    if !handover_enabled() || bytes < MIN_BYTES || page as u64 != DATA_ALIGN {
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
