//! One shared segment: an anonymous memory file (memfd) that is created,
//! written, sealed and then mapped read-only; other processes open it through
//! the descriptor of a process that holds it (`/proc/<pid>/fd/<n>`, checked
//! against a [`Locator`]).
//!
//! # Why nothing can leak, block or fault
//! A memfd has no name in any directory: the kernel frees it when the last
//! descriptor and the last mapping of it go, so a process killed with `kill -9`
//! (or a forked child leaving through `mcexit()`) leaves nothing behind, and the
//! size of /dev/shm does not bound it. Once sealed (`F_SEAL_SHRINK | GROW |
//! WRITE | SEAL`) nobody, its creator included, can truncate, grow or rewrite
//! it, so a reader's mapping can never fault; a receiver maps only a sealed
//! memfd of its own user whose device, inode, size and header token match the
//! handle it was given.

use crate::error::{Error, Result};
use crate::header::{Header, Kind, HEADER_LEN, READY_OFFSET};
use crate::locator::{hex, Locator};
use crate::os;
use memmap2::Mmap;
pub use memmap2::MmapMut;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::Mutex;

/// Prefix of the name every pageshare memfd carries in /proc.
pub const MEMFD_PREFIX: &str = "pageshare.";

/// Identity of this process as written into the headers it creates (cached
/// per pid: a forked child has its own).
pub fn self_identity() -> (u32, u64) {
    static CACHE: Mutex<(u32, u64)> = Mutex::new((0, 0));
    let pid = os::pid();
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if c.0 != pid {
        *c = (pid, os::start_time(pid).unwrap_or(0));
    }
    *c
}

/// Descriptors of segments a worker has handed to its master ([`Segment::disown`]),
/// kept open until the master has had the chance to open them itself.
static HANDOFFS: Mutex<Vec<File>> = Mutex::new(Vec::new());

pub struct Segment {
    name: String,
    /// Where this process found the segment (or, once it held it, itself).
    origin: Mutex<Locator>,
    /// The descriptor this process holds, with the pid that opened it: while it
    /// is held, other processes can open the segment. A forked child inherits
    /// the descriptor but is not the holder.
    held: Mutex<Option<(File, u32)>>,
    map: Mmap,
    header: Header,
    /// Bytes of the source's own pages that became this segment's pages when
    /// it was created here ([`Segment::create_copy_handing_over`]); 0 otherwise.
    source_released: usize,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("name", &self.name).field("header", &self.header).finish()
    }
}

/// Bytes written per pwrite() when a source's pages are handed over as the copy
/// proceeds: the most memory held twice at any moment.
pub const HANDOVER_CHUNK: usize = 64 << 20;

/// Page-aligned addresses [lo, hi) of a source's data whose pages are handed
/// over to the segment that copies them ([`Segment::create_copy_handing_over`]).
#[derive(Clone, Copy, Debug)]
pub struct Handover {
    pub lo: usize,
    pub hi: usize,
}

/// What to put in a new segment.
pub struct Contents<'a> {
    pub kind: Kind,
    pub length: u64,
    pub data_len: u64,
    pub attributes: &'a [u8],
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
                            // The rest keeps its own pages. A failed MAP_FIXED may
                            // already have discarded the old ones: refill them.
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
    fn begin(contents: &Contents<'_>, phase: u64, relief: u64) -> Result<(Header, File)> {
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
        let free = os::available_memory();
        if header.total_size.saturating_sub(relief) > free {
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

    /// Map the segment `locator` points at, read-only, after checking that it
    /// is what the locator says (see the module docs). `name` is the segment's
    /// name as the sender knows it (for messages and the registry).
    pub fn open(locator: &Locator, name: &str) -> Result<Segment> {
        crate::naming::validate(name)?;
        let file = open_checked(locator, name)?;
        // SAFETY: mapped read-only; the memfd is sealed (checked): its size and
        // contents can no longer change.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::os("cannot map the segment", e))?;
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

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn token(&self) -> [u8; 16] {
        self.header.token
    }

    /// Where another process can find this segment now: this process if it
    /// holds a descriptor, else where it was found.
    pub fn locator(&self) -> Locator {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_ref() {
            Some((file, pid)) if *pid == os::pid() => {
                let (pid, start) = self_identity();
                Locator { pid, start, fd: file.as_raw_fd(), ..origin }
            }
            _ => origin,
        }
    }

    /// The process that makes the segment available to others (pid, start time).
    pub fn owner(&self) -> (u32, u64) {
        let l = self.locator();
        (l.pid, l.start)
    }

    /// Does this process hold the segment (keep it available to other processes)?
    pub fn owned_here(&self) -> bool {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|(_, pid)| *pid == os::pid())
    }

    /// A worker handing a view to its master: stop holding the segment, but
    /// keep its descriptor open among the hand-offs until [`release_handoffs`],
    /// so that the master can still open it while the result travels.
    pub fn disown(&self) {
        if !self.owned_here() {
            return;
        }
        let here = self.locator();
        *self.origin.lock().unwrap_or_else(|p| p.into_inner()) = here;
        if let Some((file, _)) = self.held.lock().unwrap_or_else(|p| p.into_inner()).take() {
            HANDOFFS.lock().unwrap_or_else(|p| p.into_inner()).push(file);
        }
    }

    /// Hold the segment from now on (a master receiving a worker's result):
    /// open a descriptor of our own, so that it stays available after the
    /// process that made it is gone.
    pub fn adopt(&self) -> Result<()> {
        if self.owned_here() {
            return Ok(());
        }
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        let file = os::place_high(open_checked(&origin, &self.name)?)?;
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some((file, os::pid()));
        Ok(())
    }

    pub fn data(&self) -> &[u8] {
        let d0 = self.header.data_offset as usize;
        &self.map[d0..d0 + self.header.data_len as usize]
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

    /// How the mapping shows in /proc/self/maps (without " (deleted)").
    pub fn maps_path(&self) -> String {
        os::memfd_path(&memfd_name(&self.header.token))
    }

    /// The strings of a character segment (validated when it was created or opened).
    pub fn strings(&self) -> crate::strings::StringTable<'_> {
        debug_assert_eq!(self.header.kind, Kind::Character);
        crate::strings::StringTable::trusted(self.data(), self.header.length)
    }
    pub fn attributes(&self) -> &[u8] {
        let a0 = self.header.attr_offset as usize;
        &self.map[a0..a0 + self.header.attr_len as usize]
    }
    /// Size of the whole segment (header, attributes, data).
    pub fn total_size(&self) -> u64 {
        self.header.total_size
    }
    /// Bytes of the source's own pages this segment took over when this
    /// process created it (0 if it copied only, or was opened).
    pub fn source_released(&self) -> usize {
        self.source_released
    }
    /// Stop holding the segment now: no process can open it through us any
    /// more; mappings (here and elsewhere) stay valid until unmapped, and the
    /// kernel frees the memory with the last of them.
    pub fn release(&self) {
        if self.owned_here() {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
    }
}

/// Close the descriptors of segments handed to the master (a worker starting
/// its next task: the master has received the previous result by then).
pub fn release_handoffs() -> usize {
    let mut h = HANDOFFS.lock().unwrap_or_else(|p| p.into_inner());
    let n = h.len();
    h.clear();
    n
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

/// Does a live process still hold the descriptor `l` names, and is it still
/// the same memory file, as far as this process can tell? It answers "could a
/// process like this one open the segment through `l`", which is what
/// [`Segment::is_current`] needs (when in doubt a view is sent as its data, and
/// a view is counted as stale): nothing is ever removed on this answer. Index
/// entries judge their holders by the kernel's locks instead ([`crate::index`]).
fn is_held(l: &Locator) -> bool {
    use std::os::unix::fs::MetadataExt;
    os::is_alive(l.pid, l.start)
        && std::fs::metadata(format!("/proc/{}/fd/{}", l.pid, l.fd)).is_ok_and(|m| (m.dev(), m.ino()) == (l.dev, l.ino))
}

/// The name a segment's memfd shows in /proc: the prefix and the token.
fn memfd_name(token: &[u8; 16]) -> String {
    format!("{MEMFD_PREFIX}{}", hex(token))
}

/// Open the memfd `l` points at and check it (see the module docs): a gone
/// process or descriptor is [`Error::Missing`], anything else that does not
/// match is [`Error::Invalid`].
fn open_checked(l: &Locator, name: &str) -> Result<File> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming;

    fn doubles(v: &[f64]) -> Result<Segment> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Segment::create(
            &naming::anonymous().unwrap(),
            Contents { kind: Kind::Double, length: v.len() as u64, data_len: bytes.len() as u64, attributes: b"attrs" },
            |d| d.copy_from_slice(&bytes),
        )
    }

    #[test]
    fn create_open_read_release() {
        let s = doubles(&[1.0, 2.5, -3.0]).unwrap();
        assert!(s.owned_here());
        let loc = s.locator();
        assert!(loc.fd >= os::SEGMENT_FD_FLOOR || os::raise_open_files_limit() <= 1100);
        let r = Segment::open(&loc, s.name()).unwrap();
        assert_eq!(r.data(), s.data());
        assert_eq!(r.attributes(), b"attrs");
        assert_eq!(r.header().length, 3);
        assert!(!r.owned_here());
        assert!(r.is_current());
        assert!(r.private_map().is_ok());
        s.release();
        // Gone for new receivers; existing mappings keep reading.
        assert!(matches!(Segment::open(&loc, s.name()), Err(Error::Missing { .. })));
        assert!(!r.is_current());
        assert!(r.private_map().is_err());
        assert_eq!(&r.data()[..8], &1.0f64.to_le_bytes());
    }

    #[test]
    fn a_sealed_segment_cannot_be_changed_through_any_descriptor() {
        let s = doubles(&[7.0; 1000]).unwrap();
        let loc = s.locator();
        // What a second process of the same user would do, through /proc.
        let path = format!("/proc/{}/fd/{}", loc.pid, loc.fd);
        let w = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        assert!(w.set_len(0).is_err(), "shrink");
        assert!(w.set_len(loc.size * 2).is_err(), "grow");
        assert!(std::os::unix::fs::FileExt::write_all_at(&w, b"x", 200).is_err(), "write");
        // SAFETY: the mapping is expected to be refused.
        assert!(unsafe { MmapMut::map_mut(&w) }.is_err(), "writable shared mapping");
        let r = Segment::open(&loc, s.name()).unwrap();
        assert_eq!(r.data(), s.data());
    }

    #[test]
    fn copies_at_a_phase_read_back() {
        let v: Vec<u8> = (0..20_000u32).flat_map(|i| (i as f64).to_le_bytes()).collect();
        let contents = Contents { kind: Kind::Double, length: 20_000, data_len: v.len() as u64, attributes: b"dims" };
        let s = Segment::create_copy(&naming::anonymous().unwrap(), contents, &v, 64).unwrap();
        let r = Segment::open(&s.locator(), s.name()).unwrap();
        assert_eq!(r.header().data_offset % 4096, 64);
        assert_eq!(r.data(), &v[..]);
        assert_eq!(r.attributes(), b"dims");
        let bad = Contents { kind: Kind::Double, length: 2, data_len: 16, attributes: b"" };
        assert!(Segment::create_copy(&naming::anonymous().unwrap(), bad, &v[..8], 0).is_err());
    }

    #[test]
    fn a_source_handed_over_in_chunks_reads_the_same_and_writes_stay_private() {
        let n = 2 * HANDOVER_CHUNK + (5 << 20); // three chunks
                                                // SAFETY: a malloc'd buffer (a glibc mmap()ed chunk of its own), filled,
                                                // handed over, read, written and freed by this test alone.
        unsafe {
            let p = libc::malloc(n) as *mut u8;
            assert!(!p.is_null());
            for i in (0..n).step_by(8) {
                *(p.add(i) as *mut u64) = i as u64;
            }
            let page = os::page_size();
            let (lo, hi) = ((p as usize).div_ceil(page) * page, (p as usize + n) / page * page);
            let data = std::slice::from_raw_parts(p, n);
            let contents = || Contents { kind: Kind::Raw, length: n as u64, data_len: n as u64, attributes: b"" };
            let phase = (p as usize % page) as u64;
            let name = naming::anonymous().unwrap();
            // a misaligned request is refused before anything is written
            let bad = Handover { lo: lo + 1, hi };
            assert!(Segment::create_copy_handing_over(&name, contents(), data, phase, bad).is_err());
            let (seg, handed) =
                Segment::create_copy_handing_over(&name, contents(), data, phase, Handover { lo, hi }).unwrap();
            assert_eq!(handed, hi - lo);
            assert_eq!(seg.data(), data);
            assert!(!os::private_anonymous_covers(lo, hi));
            assert!(os::private_file_mapping_covers(lo, hi, &seg.maps_path()));
            *(p.add(n / 2 / 8 * 8) as *mut u64) = 7; // copy on write
            assert_eq!(*(p.add(n / 2 / 8 * 8) as *const u64), 7);
            assert_eq!(seg.data()[n / 2 / 8 * 8], ((n / 2 / 8 * 8) as u64).to_le_bytes()[0]);
            libc::free(p.cast());
            assert!(os::read_word(lo).is_none()); // the whole block is gone
            drop(seg);
        }
    }

    #[test]
    fn wrong_dead_and_foreign_locators_are_clear_errors() {
        let s = doubles(&[1.0; 100]).unwrap();
        let name = s.name().to_string();
        let good = s.locator();
        // another token: the same descriptor is not taken for another segment
        let e = Segment::open(&Locator { token: [9; 16], ..good }, &name).unwrap_err();
        assert!(matches!(e, Error::Missing { .. } | Error::Invalid { .. }), "{e}");
        // a dead owner (a pid that cannot exist, or a reused pid: other start time)
        let e = Segment::open(&Locator { pid: u32::MAX - 1, ..good }, &name).unwrap_err();
        assert!(matches!(e, Error::Missing { .. }), "{e}");
        let e = Segment::open(&Locator { start: good.start + 1, ..good }, &name).unwrap_err();
        assert!(matches!(e, Error::Missing { .. }), "{e}");
        // a descriptor that is an ordinary file, a FIFO, a pipe: never opened
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("plain")).unwrap();
        let e = Segment::open(&Locator { fd: f.as_raw_fd(), ..good }, &name).unwrap_err();
        assert!(matches!(e, Error::Missing { .. }), "{e}");
        let mut fds = [0i32; 2];
        // SAFETY: a fresh pipe for this test.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let t = std::time::Instant::now();
        let e = Segment::open(&Locator { fd: fds[0], ..good }, &name).unwrap_err();
        assert!(t.elapsed().as_secs() < 1, "{e}");
        // SAFETY: closing the test's own pipe.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        // a wrong size is refused before mapping
        let e = Segment::open(&Locator { size: good.size + 4096, ..good }, &name).unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        // an unsealed memfd of ours with the right header is not trusted
        let (header, file) =
            Segment::begin(&Contents { kind: Kind::Raw, length: 0, data_len: 0, attributes: b"" }, 0, 0).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &header.encode(), 0).unwrap();
        file.set_len(header.total_size).unwrap();
        let m = file.metadata().unwrap();
        use std::os::unix::fs::MetadataExt;
        let unsealed = Locator {
            pid: good.pid,
            start: good.start,
            fd: file.as_raw_fd(),
            dev: m.dev(),
            ino: m.ino(),
            size: header.total_size,
            token: header.token,
        };
        let e = Segment::open(&unsealed, &name).unwrap_err();
        assert!(e.to_string().contains("sealed"), "{e}");
    }

    #[test]
    fn disown_then_adopt_moves_the_duty_to_hold() {
        let s = doubles(&[4.0]).unwrap();
        let loc = s.locator();
        s.disown();
        assert!(!s.owned_here());
        assert_eq!(s.locator(), loc); // still found where it was
        drop(s); // disowned: the hand-off keeps it
        let r = Segment::open(&loc, "pageshare.a.1.x").unwrap();
        r.adopt().unwrap();
        assert!(r.owned_here());
        assert_ne!(r.locator().fd, loc.fd);
        assert!(release_handoffs() >= 1);
        // now only the adopter holds it, and it can be found through it
        assert!(Segment::open(&loc, "pageshare.a.1.x").is_err());
        let again = Segment::open(&r.locator(), "pageshare.a.1.x").unwrap();
        assert_eq!(again.data(), r.data());
    }

    #[test]
    fn private_maps_never_write_the_segment() {
        let s = doubles(&[1.0, 2.0]).unwrap();
        let mut p = s.private_map().unwrap();
        let d0 = s.header().data_offset as usize;
        p[d0..d0 + 8].copy_from_slice(&9.0f64.to_le_bytes());
        assert_eq!(&p[d0..d0 + 8], &9.0f64.to_le_bytes());
        assert_eq!(&s.data()[..8], &1.0f64.to_le_bytes());
        let r = Segment::open(&s.locator(), s.name()).unwrap();
        assert_eq!(&r.data()[..8], &1.0f64.to_le_bytes());
    }

    #[test]
    fn zero_length_vectors() {
        let s = doubles(&[]).unwrap();
        let r = Segment::open(&s.locator(), s.name()).unwrap();
        assert_eq!(r.data().len(), 0);
    }

    #[test]
    fn too_large_request_is_refused_before_reserving() {
        let n = 1u64 << 50; // 8 PiB of doubles
        let e = Segment::create(
            &naming::anonymous().unwrap(),
            Contents { kind: Kind::Double, length: n, data_len: n * 8, attributes: b"" },
            |_| unreachable!(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("available"));
    }

    #[test]
    fn thousands_of_segments_fit_under_the_raised_limit() {
        let limit = os::raise_open_files_limit();
        let n = 3000.min(limit.saturating_sub(2000)) as usize;
        let segs: Vec<Segment> = (0..n).map(|i| doubles(&[i as f64]).unwrap()).collect();
        let v = vec![1u8; 64];
        let copies: Vec<Segment> = (0..n)
            .map(|_| {
                let c = Contents { kind: Kind::Raw, length: 64, data_len: 64, attributes: b"" };
                Segment::create_copy(&naming::anonymous().unwrap(), c, &v, 0).unwrap()
            })
            .collect();
        assert!(segs.iter().chain(&copies).all(|s| s.locator().fd >= os::SEGMENT_FD_FLOOR));
        // the low descriptors stay free for sockets
        let f = File::open("/dev/null").unwrap();
        assert!(f.as_raw_fd() < os::SEGMENT_FD_FLOOR);
    }
}
