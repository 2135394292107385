//! Creating a segment: plan its header, check that the memory is there, make
//! the memfd, write it (through a mapping, or with pwrite() while handing a
//! source's pages over), seal it and map it read-only.

use super::{memfd_name, self_identity, Contents, Segment};
use crate::error::{Error, Result};
use crate::header::{Header, HEADER_LEN, READY_OFFSET};
use crate::locator::Locator;
use crate::os;
use memmap2::{Mmap, MmapMut};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::Mutex;

/// Bytes written per pwrite() when a source's pages are handed over as the copy
/// proceeds: the most memory held twice at any moment, which the peak memory
/// of a process tree sharing a large vector shows (a few more system calls per
/// chunk are nothing beside copying it).
pub const HANDOVER_CHUNK: usize = 8 << 20;

/// Page-aligned addresses [lo, hi) of a source's data whose pages are handed
/// over to the segment that copies them ([`Segment::create_copy_handing_over`]).
#[derive(Clone, Copy, Debug)]
pub struct Handover {
    pub lo: usize,
    pub hi: usize,
}

impl Segment {
    /// Create, reserve and fill a new segment called `name`, seal it, then map
    /// it read-only. `fill` receives the (zeroed) data area and must write all of it.
    ///
    /// The pages are reserved (fallocate) before `fill` writes through a shared
    /// mapping, so running out of memory is an ordinary error, never SIGBUS.
    pub fn create(name: &str, contents: Contents<'_>, fill: impl FnOnce(&mut [u8])) -> Result<Segment> {
        let (mut header, file) = Segment::begin(&contents, 0, 0)?;
        if let Err(e) = os::reserve(&file, header.total_size) {
            return Err(write_error(e, header.total_size));
        }
        {
            // SAFETY: the memfd was just made by us and is reachable by no other
            // process yet (nobody knows its descriptor); its length is reserved.
            let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| Error::os("cannot map the new segment", e))?;
            header.ready = true;
            map[..HEADER_LEN].copy_from_slice(&header.encode());
            let a0 = header.attr_offset as usize;
            map[a0..a0 + contents.attributes.len()].copy_from_slice(contents.attributes);
            let d0 = header.data_offset as usize;
            fill(&mut map[d0..d0 + header.data_len as usize]);
            // The writable mapping must be gone before the seals can be set.
        }
        Segment::seal_and_map(name, file, header)
    }

    /// Create a segment holding a copy of `data`, starting `phase` bytes into a
    /// page (see [`Header::plan_at`]), seal it and map it read-only.
    ///
    /// The bytes are written with pwrite(), never through a mapping: the kernel
    /// fills each page as it allocates it instead of zeroing it first and then
    /// taking a page fault per page.
    pub fn create_copy(name: &str, contents: Contents<'_>, data: &[u8], phase: u64) -> Result<Segment> {
        // SAFETY: no handover: only the memfd is written.
        unsafe { Segment::copy(name, contents, data, phase, None) }.map(|(s, _)| s)
    }

    /// [`Segment::create_copy`], handing the pages `handover` of `data` over to
    /// the segment as the copy proceeds: each stretch of them, once written, is
    /// re-mapped copy-on-write onto the segment's pages
    /// ([`os::map_private_over`]), so that the data never exist twice for more
    /// than one chunk ([`HANDOVER_CHUNK`]). Returns the segment and the bytes
    /// handed over (less than asked if a re-mapping failed: the rest keeps its
    /// pages).
    ///
    /// # Safety
    /// `handover` must lie inside `data`, page-aligned, with `phase` equal to
    /// `data`'s offset within its page, and must meet the contract of
    /// [`os::map_private_over`] (memory the caller owns, not written meanwhile,
    /// unmapped as a whole by whoever frees it).
    pub unsafe fn create_copy_handing_over(
        name: &str,
        contents: Contents<'_>,
        data: &[u8],
        phase: u64,
        handover: Handover,
    ) -> Result<(Segment, usize)> {
        let page = os::page_size();
        let (start, end) = (data.as_ptr() as usize, data.as_ptr() as usize + data.len());
        let Handover { lo, hi } = handover;
        if lo < start || hi > end || lo > hi || lo % page != 0 || hi % page != 0 || start % page != phase as usize {
            return Err(Error::Argument(
                "pages to hand over must be page-aligned, inside the data, at its phase".into(),
            ));
        }
        // SAFETY: checked above; the rest is the caller's contract.
        unsafe { Segment::copy(name, contents, data, phase, Some(handover)) }
    }

    unsafe fn copy(
        name: &str,
        contents: Contents<'_>,
        data: &[u8],
        phase: u64,
        mut handover: Option<Handover>,
    ) -> Result<(Segment, usize)> {
        if data.len() as u64 != contents.data_len {
            return Err(Error::Argument(format!("{} data bytes given for {} planned", data.len(), contents.data_len)));
        }
        // Pages handed over do not count twice: only one chunk of them is held
        // twice at a time.
        let handed_bytes = handover.map_or(0, |h| (h.hi - h.lo) as u64);
        let relief = handed_bytes.saturating_sub(HANDOVER_CHUNK as u64);
        let (mut header, file) = Segment::begin(&contents, phase, relief)?;
        let total_size = header.total_size;
        let write = |bytes: &[u8], at: u64| {
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, at).map_err(|e| write_error(e, total_size))
        };
        write(&header.encode(), 0)?;
        write(contents.attributes, header.attr_offset)?;
        let base = data.as_ptr() as usize;
        let page = os::page_size();
        let lo = handover.map_or(0, |h| h.lo);
        let data_offset = header.data_offset;
        let file_offset = |addr: usize| data_offset + (addr - base) as u64;
        // Give handed-over pages back to anonymous memory (holding the same
        // bytes, read back from the memfd) when the copy fails.
        let give_back = |handed: usize| {
            if handed > 0 {
                // SAFETY: [lo, lo + handed) was handed over and the memfd holds its bytes.
                unsafe { os::refill_anonymous(lo, handed, &file, file_offset(lo)) };
            }
        };
        let mut handed = 0usize;
        let mut written = 0usize;
        while written < data.len() {
            let n = HANDOVER_CHUNK.min(data.len() - written);
            if let Err(e) = write(&data[written..written + n], header.data_offset + written as u64) {
                give_back(handed);
                return Err(e);
            }
            written += n;
            if let Some(Handover { lo, hi }) = handover {
                let next = lo + handed;
                let upto = hi.min((base + written) / page * page);
                if upto > next {
                    // SAFETY: [next, upto) is inside the caller's handover range
                    // and now written to the memfd at the matching offset.
                    let done = unsafe { os::map_private_over(next, upto - next, &file, file_offset(next)) };
                    match done {
                        Ok(()) => handed += upto - next,
                        Err(_) => {
                            // The rest keeps its own pages. Should the failed move
                            // have left a hole (see map_private_over), refill it.
                            // SAFETY: [next, upto) is written to the memfd.
                            unsafe { os::refill_anonymous(next, upto - next, &file, file_offset(next)) };
                            handover = None;
                        }
                    }
                }
            }
        }
        let finish = || -> Result<()> {
            // The holes (padding before the data) read as zeros and take no memory.
            file.set_len(total_size).map_err(|e| write_error(e, total_size))?;
            write(&1u32.to_le_bytes(), READY_OFFSET as u64)
        };
        if let Err(e) = finish() {
            give_back(handed);
            return Err(e);
        }
        header.ready = true;
        let sealed = match seal_and_map(&file) {
            Ok(s) => s,
            Err(e) => {
                give_back(handed);
                return Err(e);
            }
        };
        let mut segment = Segment::assemble(name, file, sealed, header);
        segment.source_released = handed;
        Ok((segment, handed))
    }

    /// Plan the header (with a fresh token), check that the memory is there
    /// (`relief`: bytes that will be given back while it is written) and make
    /// the memfd.
    pub(super) fn begin(contents: &Contents<'_>, phase: u64, relief: u64) -> Result<(Header, File)> {
        let (pid, start) = self_identity();
        let mut header = Header::plan_at(
            contents.kind,
            contents.length,
            contents.data_len,
            contents.attributes.len() as u64,
            pid,
            start,
            phase,
        )?;
        header.token = os::random_bytes(16)?.try_into().expect("16 bytes");
        if let Err(free) = os::take_room(header.total_size.saturating_sub(relief)) {
            return Err(Error::NoSpace { needed: header.total_size, free });
        }
        let file = os::memfd(&memfd_name(&header.token))?;
        Ok((header, file))
    }

    fn seal_and_map(name: &str, file: File, header: Header) -> Result<Segment> {
        let sealed = seal_and_map(&file)?;
        Ok(Segment::assemble(name, file, sealed, header))
    }

    /// The segment made of a sealed memfd (held by this process) and its mapping.
    fn assemble(name: &str, file: File, (map, dev, ino): (Mmap, u64, u64), header: Header) -> Segment {
        let (pid, start) = self_identity();
        let origin =
            Locator { pid, start, fd: file.as_raw_fd(), dev, ino, size: header.total_size, token: header.token };
        Segment {
            name: name.to_string(),
            origin: Mutex::new(origin),
            held: Mutex::new(Some((file, pid))),
            map,
            header,
            source_released: 0,
        }
    }
}

/// Seal a complete memfd and map it read-only; with its (device, inode).
fn seal_and_map(file: &File) -> Result<(Mmap, u64, u64)> {
    os::seal(file).map_err(|e| Error::os("cannot seal the new segment", e))?;
    // SAFETY: mapped read-only; the memfd is complete and sealed: nobody can
    // change or truncate it any more.
    let map = unsafe { Mmap::map(file) }.map_err(|e| Error::os("cannot map the new segment", e))?;
    let (dev, ino) = file_identity(file).map_err(|e| Error::os("cannot stat the new segment", e))?;
    Ok((map, dev, ino))
}

fn file_identity(file: &File) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// A failed reservation or write: no memory becomes the no-space error, and
/// anything else an OS error.
fn write_error(e: std::io::Error, needed: u64) -> Error {
    if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::ENOMEM) | Some(libc::EFBIG)) {
        return Error::NoSpace { needed, free: os::available_memory() };
    }
    Error::os(format!("cannot write {needed} bytes to a new segment"), e)
}
