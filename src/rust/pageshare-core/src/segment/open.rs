//! Opening a segment another process holds (or this one), after checking
//! that it is the segment the locator names (see the module docs of
//! [`crate::segment`]), and the private mappings made from it.

use super::{memfd_name, Handover, Segment, HANDOVER_CHUNK};
use crate::error::{Error, Result};
use crate::header::{Header, Kind, HEADER_LEN};
use crate::locator::Locator;
use crate::os;
use memmap2::{Mmap, MmapMut};
use std::fs::File;
use std::sync::Mutex;

impl Segment {
    /// Map the segment `locator` points at, read-only, after checking that it
    /// is what the locator says (see the module docs). `name` is the segment's
    /// name as the sender knows it (for messages and the registry).
    pub fn open(locator: &Locator, name: &str) -> Result<Segment> {
        crate::naming::validate(name)?;
        let file = open_checked(locator, name)?;
        Segment::map_opened(&file, locator, name)
    }

    /// A descriptor of the segment `locator` points at, opened and checked as
    /// [`Segment::open`] does: whoever keeps it can hold the segment later
    /// ([`Segment::adopt_opened`]) even if the process it was found through
    /// lets go of it meanwhile.
    pub fn open_descriptor(locator: &Locator, name: &str) -> Result<File> {
        crate::naming::validate(name)?;
        open_checked(locator, name)
    }

    /// Map the segment `file` (from [`Segment::open_descriptor`] with the same
    /// `locator`), checking its header as [`Segment::open`] does.
    pub fn map_opened(file: &File, locator: &Locator, name: &str) -> Result<Segment> {
        // SAFETY: mapped read-only; the memfd is sealed (checked): its size and
        // contents can no longer change.
        let map = unsafe { Mmap::map(file) }.map_err(|e| Error::os("cannot map the segment", e))?;
        let header = Header::parse(&map[..HEADER_LEN.min(map.len())], map.len() as u64, name)?;
        if header.token != locator.token {
            return Err(Error::Invalid { name: name.into(), why: "its token does not match the handle".into() });
        }
        if !header.ready {
            return Err(Error::Invalid { name: name.into(), why: "its owner has not finished writing it".into() });
        }
        if header.kind == Kind::Character {
            let d0 = header.data_offset as usize;
            crate::strings::StringTable::parse(&map[d0..d0 + header.data_len as usize], header.length, name)?;
        }
        Ok(Segment {
            name: name.to_string(),
            origin: Mutex::new(*locator),
            held: Mutex::new(None),
            map,
            header,
            source_released: 0,
        })
    }

    /// A private copy-on-write mapping of the whole segment: reads see the shared
    /// pages, a write copies only the page it touches, and never reaches the
    /// segment (MAP_PRIVATE). Offsets are as in the memfd (use the header's).
    /// Fails once no process holds the segment any more; callers then make a
    /// full private copy.
    pub fn private_map(&self) -> Result<MmapMut> {
        let file = self.reopen()?;
        // SAFETY: MAP_PRIVATE: writes through this map stay in this process; the
        // memfd is the checked, sealed segment.
        unsafe { memmap2::MmapOptions::new().map_copy(&file) }
            .map_err(|e| Error::os(format!("cannot make a private mapping of {}", self.name), e))
    }

    /// A [`os::PrefixedMapping`] of `len` data bytes starting `offset` bytes into
    /// the data (`offset` a multiple of 8) (see [`Segment::private_map`]).
    pub fn prefixed_map(&self, offset: u64, len: usize) -> Result<os::PrefixedMapping> {
        let file = self.reopen()?;
        os::PrefixedMapping::new(&file, self.header.data_offset + offset, len)
            .map_err(|e| Error::os(format!("cannot map {} behind a header", self.name), e))
    }

    /// Hand the pages `handover` of `data`, a copy of this segment's data at
    /// the same offset within a page, over to this segment (as
    /// [`Segment::create_copy_handing_over`] does for a segment it makes), so
    /// that the copy stops taking memory of its own: chunk by chunk, each
    /// compared with the segment's bytes first; the first chunk that differs,
    /// or cannot be mapped, ends it. Returns the bytes handed over, from
    /// `handover.lo` on.
    ///
    /// # Safety
    /// As for the handover of [`Segment::create_copy_handing_over`]: the pages
    /// are memory the caller owns, not written meanwhile, unmapped as a whole
    /// by whoever frees it.
    pub unsafe fn hand_over_onto(&self, data: &[u8], handover: Handover) -> Result<usize> {
        let page = os::page_size();
        let base = data.as_ptr() as usize;
        let Handover { lo, hi } = handover;
        let phase_differs = (self.header.data_offset as usize) % page != base % page;
        if lo < base || hi > base + data.len() || lo > hi || lo % page != 0 || hi % page != 0 || phase_differs {
            return Err(Error::Argument(
                "pages to hand over must be page-aligned, inside the data, at its phase".into(),
            ));
        }
        if data.len() != self.data().len() {
            return Err(Error::Argument("the data are not a copy of the segment's".into()));
        }
        let file = self.reopen()?;
        let file_offset = |addr: usize| self.header.data_offset + (addr - base) as u64;
        let mut at = lo;
        while at < hi {
            let n = HANDOVER_CHUNK.min(hi - at);
            // SAFETY: [at, at + n) lies inside `data`.
            let mine = unsafe { std::slice::from_raw_parts(at as *const u8, n) };
            if mine != &self.data()[at - base..at - base + n] {
                break;
            }
            // SAFETY: the caller's contract; the memfd holds these very bytes.
            if unsafe { os::map_private_over(at, n, &file, file_offset(at)) }.is_err() {
                // (should the failed move have left a hole, refill it)
                // SAFETY: as above.
                unsafe { os::refill_anonymous(at, n, &file, file_offset(at)) };
                break;
            }
            at += n;
        }
        Ok(at - lo)
    }

    /// A descriptor of the segment: a duplicate of ours, or one opened (and
    /// checked) again where it was found. Closed again by the caller: a process
    /// may map thousands of segments, and holding a descriptor for each would
    /// push R's socket descriptors past FD_SETSIZE.
    fn reopen(&self) -> Result<File> {
        if let Some((file, pid)) = self.held.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            if *pid == os::pid() {
                return file.try_clone().map_err(|e| Error::os("cannot duplicate a descriptor", e));
            }
        }
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        open_checked(&origin, &self.name)
    }

    /// Can other processes still open this segment (does some live process
    /// hold it)?
    pub fn is_current(&self) -> bool {
        if self.owned_here() {
            return true;
        }
        is_held(&self.origin.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Does a live process still hold the descriptor `l` names, and is it still
/// the same memory file, as far as this process can tell? It answers "could a
/// process like this one open the segment through `l`", which is what
/// [`Segment::is_current`] needs (when in doubt a view is sent as its data, and
/// a view is counted as stale): nothing is ever removed on this answer. Index
/// entries judge their holders by the kernel's locks instead ([`crate::index`]).
fn is_held(l: &Locator) -> bool {
    use std::os::unix::fs::MetadataExt;
    os::is_alive_or_outlived(l.pid, l.start)
        && std::fs::metadata(format!("/proc/{}/fd/{}", l.pid, l.fd)).is_ok_and(|m| (m.dev(), m.ino()) == (l.dev, l.ino))
}

/// Open the memfd `l` points at and check it (see the module docs): a gone
/// process or descriptor is [`Error::Missing`], anything else that does not
/// match is [`Error::Invalid`].
pub(super) fn open_checked(l: &Locator, name: &str) -> Result<File> {
    let gone = || Error::Missing { name: name.into() };
    let invalid = |why: String| Error::Invalid { name: name.into(), why };
    // (without /proc every owner would look gone: say why instead)
    os::check_segments_openable()?;
    if !os::is_alive(l.pid, l.start) {
        return Err(gone());
    }
    let file = os::open_process_memfd(l.pid, l.fd, &memfd_name(&l.token)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData => gone(),
        _ => Error::os(format!("cannot open segment {name} held by process {}", l.pid), e),
    })?;
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().map_err(|e| Error::os("cannot stat the segment", e))?;
    if !m.file_type().is_file() {
        return Err(invalid("it is not a regular memory file".into()));
    }
    if m.uid() != os::euid() {
        return Err(invalid(format!("it belongs to user {}, not to this process's user {}", m.uid(), os::euid())));
    }
    if (m.dev(), m.ino()) != (l.dev, l.ino) {
        return Err(gone());
    }
    if m.len() != l.size {
        return Err(invalid(format!("it has {} bytes, the handle says {}", m.len(), l.size)));
    }
    if !os::is_sealed(&file) {
        return Err(invalid("it is not sealed against changes".into()));
    }
    Ok(file)
}
