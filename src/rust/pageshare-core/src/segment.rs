//! One shared segment: exclusive creation (mode 0600), page reservation, filling,
//! read-only mapping, and unlinking by its owner.
//!
//! # Why a mapping is only as safe as the file
//! A segment is a file that other processes of the same user could in principle
//! write or truncate. pageshare never writes a segment after it is marked ready and
//! maps it read-only everywhere; the header is validated against the file size
//! before any data is read. A process that truncates a segment under a reader can
//! still make the reader fault: that is the same contract as any file-backed map.

use crate::error::{Error, Result};
use crate::header::{Header, Kind, HEADER_LEN, OWNER_OFFSET, READY_OFFSET};
use crate::os;
use memmap2::Mmap;
pub use memmap2::MmapMut;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Segments this process owns and has not unlinked yet (path -> owning pid);
/// emptied at exit. The pid matters after fork(): a child inherits this table
/// but must never unlink its parent's segments.
static OWNED: Lazy<Mutex<HashMap<PathBuf, u32>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// Identity of this process as written into the headers it creates.
pub fn self_identity() -> (u32, u64) {
    let pid = os::pid();
    (pid, os::start_time(pid).unwrap_or(0))
}

pub struct Segment {
    name: String,
    dir: PathBuf,
    /// (device, inode) of the file this mapping came from: a name can be
    /// unlinked and created again (a re-registered variable), so reopening by
    /// name must check that it still finds the same file.
    identity: (u64, u64),
    map: Mmap,
    header: Header,
    /// The pid responsible for unlinking (0: none in this process). Set at creation
    /// or by [`Segment::adopt`]; after a fork the child's pid differs, so a child
    /// never unlinks its parent's segments.
    creator: AtomicU32,
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
    /// Create, reserve and fill a new segment `dir/name`, then map it read-only.
    /// `fill` receives the (zeroed) data area and must write all of it.
    ///
    /// The pages are reserved (posix_fallocate) before `fill` writes through a
    /// shared mapping: writing into a tmpfs page that cannot be backed raises
    /// SIGBUS, while a failed reservation is an ordinary error.
    pub fn create(dir: &Path, name: &str, contents: Contents<'_>, fill: impl FnOnce(&mut [u8])) -> Result<Segment> {
        let (mut header, file, path, guard) = Segment::begin(dir, name, &contents, 0)?;
        if let Err(e) = os::reserve(&file, header.total_size) {
            return Err(write_error(e, dir, &file, header.total_size));
        }
        // SAFETY: the file was just created exclusively by us, has mode 0600 and its
        // full length is reserved; no other process writes it.
        let mut map =
            unsafe { MmapMut::map_mut(&file) }.map_err(|e| Error::os("cannot map the new segment", e))?;
        map[..HEADER_LEN].copy_from_slice(&header.encode());
        let a0 = header.attr_offset as usize;
        map[a0..a0 + contents.attributes.len()].copy_from_slice(contents.attributes);
        let d0 = header.data_offset as usize;
        fill(&mut map[d0..d0 + header.data_len as usize]);
        // Mark ready last, so a reader never sees a half-written segment as complete.
        map[READY_OFFSET..READY_OFFSET + 4].copy_from_slice(&1u32.to_le_bytes());
        header.ready = true;
        let map = map.make_read_only().map_err(|e| Error::os("cannot make the segment read-only", e))?;
        Segment::finish(dir, name, file, path, guard, map, header)
    }

    /// Create a segment `dir/name` holding a copy of `data`, starting `phase`
    /// bytes into a page (see [`Header::plan_at`]), then map it read-only.
    ///
    /// The bytes are written with pwrite(), never through a mapping: on a full
    /// tmpfs the write fails with ENOSPC (an error, not SIGBUS), and the kernel
    /// fills each page as it allocates it instead of zeroing it first and then
    /// taking a page fault per page (0.19 s instead of 0.24 s for 512 MB here).
    pub fn create_copy(dir: &Path, name: &str, contents: Contents<'_>, data: &[u8], phase: u64) -> Result<Segment> {
        // SAFETY: no handover: only the file is written.
        unsafe { Segment::copy(dir, name, contents, data, phase, None) }.map(|(s, _)| s)
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
        dir: &Path,
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
            return Err(Error::Argument("pages to hand over must be page-aligned, inside the data, at its phase".into()));
        }
        // SAFETY: checked above; the rest is the caller's contract.
        unsafe { Segment::copy(dir, name, contents, data, phase, Some(handover)) }
    }

    unsafe fn copy(
        dir: &Path,
        name: &str,
        contents: Contents<'_>,
        data: &[u8],
        phase: u64,
        mut handover: Option<Handover>,
    ) -> Result<(Segment, usize)> {
        if data.len() as u64 != contents.data_len {
            return Err(Error::Argument(format!("{} data bytes given for {} planned", data.len(), contents.data_len)));
        }
        let (mut header, file, path, guard) = Segment::begin(dir, name, &contents, phase)?;
        let write = |bytes: &[u8], at: u64| {
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, at)
                .map_err(|e| write_error(e, dir, &file, header.total_size))
        };
        write(&header.encode(), 0)?;
        write(contents.attributes, header.attr_offset)?;
        let base = data.as_ptr() as usize;
        let page = os::page_size();
        let lo = handover.map_or(0, |h| h.lo);
        let file_offset = |addr: usize| header.data_offset + (addr - base) as u64;
        // Give handed-over pages back to anonymous memory (holding the same
        // bytes, read back from the file) when the copy fails.
        let give_back = |handed: usize| {
            if handed > 0 {
                // SAFETY: [lo, lo + handed) was handed over and the file holds its bytes.
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
                    // and now written to the file at the matching offset.
                    let done = unsafe { os::map_private_over(next, upto - next, &file, file_offset(next)) };
                    match done {
                        Ok(()) => handed += upto - next,
                        Err(_) => {
                            // The rest keeps its own pages. A failed MAP_FIXED may
                            // already have discarded the old ones: refill them.
                            // SAFETY: [next, upto) is written to the file.
                            unsafe { os::refill_anonymous(next, upto - next, &file, file_offset(next)) };
                            handover = None;
                        }
                    }
                }
            }
        }
        let finish = || -> Result<()> {
            // The holes (padding before the data) read as zeros and take no memory.
            file.set_len(header.total_size).map_err(|e| write_error(e, dir, &file, header.total_size))?;
            // Mark ready last, so a reader never sees a half-written segment as complete.
            write(&1u32.to_le_bytes(), READY_OFFSET as u64)
        };
        if let Err(e) = finish() {
            give_back(handed);
            return Err(e);
        }
        header.ready = true;
        // SAFETY: mapped read-only; the file is ours (exclusive create, 0600) and
        // complete; nobody writes it from now on.
        let map = match unsafe { Mmap::map(&file) } {
            Ok(m) => m,
            Err(e) => {
                give_back(handed);
                return Err(Error::os("cannot map the new segment", e));
            }
        };
        Segment::finish(dir, name, file, path, guard, map, header).map(|s| (s, handed))
    }

    /// Plan the header, check the free space and create the file exclusively
    /// (mode 0600); the guard removes the file unless the creation completes.
    fn begin(dir: &Path, name: &str, contents: &Contents<'_>, phase: u64) -> Result<(Header, File, PathBuf, RemoveOnError)> {
        let (pid, start) = self_identity();
        let header = Header::plan_at(
            contents.kind,
            contents.length,
            contents.data_len,
            contents.attributes.len() as u64,
            pid,
            start,
            phase,
        )?;
        let free = os::free_bytes(dir)?;
        if header.total_size > free {
            return Err(Error::NoSpace { dir: dir.display().to_string(), needed: header.total_size, free });
        }
        let path = dir.join(name);
        let file = match create_exclusive(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(already_exists(dir, name));
            }
            Err(e) => return Err(Error::os(format!("cannot create {}", path.display()), e)),
        };
        let guard = RemoveOnError(Some(path.clone()));
        Ok((header, file, path, guard))
    }

    fn finish(
        dir: &Path,
        name: &str,
        file: File,
        path: PathBuf,
        guard: RemoveOnError,
        map: Mmap,
        header: Header,
    ) -> Result<Segment> {
        let identity = file_identity(&file).map_err(|e| Error::os("cannot stat the new segment", e))?;
        guard.disarm();
        let pid = header.owner_pid;
        OWNED.lock().unwrap_or_else(|p| p.into_inner()).insert(path, pid);
        Ok(Segment { name: name.to_string(), dir: dir.to_path_buf(), identity, map, header, creator: AtomicU32::new(pid) })
    }

    /// Map an existing, complete segment read-only, validating its header first.
    pub fn open(dir: &Path, name: &str) -> Result<Segment> {
        crate::naming::validate(name)?;
        let path = dir.join(name);
        let file = File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Missing { name: name.into(), dir: dir.display().to_string() },
            _ => Error::os(format!("cannot open shared segment {}", path.display()), e),
        })?;
        let size = file.metadata().map_err(|e| Error::os("cannot stat the segment", e))?.len();
        if size < HEADER_LEN as u64 {
            return Err(Error::Invalid { name: name.into(), why: format!("it is {size} bytes long, shorter than a header") });
        }
        // SAFETY: mapped read-only; the header is validated against the file size
        // below before any data is read (see the module docs for the contract).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::os("cannot map the segment", e))?;
        let header = Header::parse(&map[..HEADER_LEN], map.len() as u64, name)?;
        if !header.ready {
            return Err(Error::Invalid { name: name.into(), why: "its owner has not finished writing it".into() });
        }
        if header.kind == Kind::Character {
            let d0 = header.data_offset as usize;
            crate::strings::StringTable::parse(&map[d0..d0 + header.data_len as usize], header.length, name)?;
        }
        let identity = file_identity(&file).map_err(|e| Error::os("cannot stat the segment", e))?;
        Ok(Segment { name: name.to_string(), dir: dir.to_path_buf(), identity, map, header, creator: AtomicU32::new(0) })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// The current owner (pid, start time) as written in the file's header; it
    /// changes when another process adopts the segment.
    pub fn owner(&self) -> (u32, u64) {
        Header::parse_owner(&self.map[..HEADER_LEN]).unwrap_or((self.header.owner_pid, self.header.owner_start))
    }
    /// Does this process own (and therefore eventually unlink) the segment?
    pub fn owned_here(&self) -> bool {
        self.creator.load(Ordering::Relaxed) == os::pid()
    }

    /// Give up responsibility for unlinking (a worker about to hand a result to its
    /// master). The header still names this process, so if nobody adopts the
    /// segment the sweep reclaims it once this process is gone.
    pub fn disown(&self) {
        if self.owned_here() {
            self.creator.store(0, Ordering::Relaxed);
            OWNED.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.dir.join(&self.name));
        }
    }

    /// Take responsibility for unlinking: this process becomes the owner in the
    /// header (so the sweep judges it by this process's life) and unlinks the
    /// segment when done with it.
    pub fn adopt(&self) -> Result<()> {
        if self.owned_here() {
            return Ok(());
        }
        let path = self.dir.join(&self.name);
        let (pid, start) = self_identity();
        let mut owner = [0u8; 16];
        owner[0..4].copy_from_slice(&pid.to_le_bytes());
        owner[8..16].copy_from_slice(&start.to_le_bytes());
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| Error::os(format!("cannot adopt segment {}", path.display()), e))?;
        std::os::unix::fs::FileExt::write_all_at(&file, &owner, OWNER_OFFSET as u64)
            .map_err(|e| Error::os(format!("cannot adopt segment {}", path.display()), e))?;
        self.creator.store(pid, Ordering::Relaxed);
        OWNED.lock().unwrap_or_else(|p| p.into_inner()).insert(path, pid);
        Ok(())
    }
    pub fn data(&self) -> &[u8] {
        let d0 = self.header.data_offset as usize;
        &self.map[d0..d0 + self.header.data_len as usize]
    }
    /// A private copy-on-write mapping of the whole segment: reads see the shared
    /// pages, a write copies only the page it touches, and never reaches the
    /// segment (MAP_PRIVATE). Offsets are as in the file (use the header's).
    ///
    /// The file is reopened by name and closed again at once: a process may map
    /// thousands of segments, and holding a descriptor for each would push R's
    /// socket descriptors past FD_SETSIZE (R's select() then aborts the process).
    /// Fails if the name was unlinked; callers then make a full private copy.
    pub fn private_map(&self) -> Result<MmapMut> {
        let file = self.reopen()?;
        // SAFETY: MAP_PRIVATE: writes through this map stay in this process; the
        // file is the validated segment (same name, same size) that nobody
        // writes after it is ready.
        unsafe { memmap2::MmapOptions::new().map_copy(&file) }
            .map_err(|e| Error::os(format!("cannot make a private mapping of {}", self.name), e))
    }

    /// A [`os::PrefixedMapping`] of `len` data bytes starting `offset` bytes into
    /// the data (`offset` a multiple of 8). Reopens the file
    /// by name and closes it again (see [`Segment::private_map`]).
    pub fn prefixed_map(&self, offset: u64, len: usize) -> Result<os::PrefixedMapping> {
        let file = self.reopen()?;
        os::PrefixedMapping::new(&file, self.header.data_offset + offset, len)
            .map_err(|e| Error::os(format!("cannot map {} behind a header", self.name), e))
    }

    /// Open the segment's file again by name, refusing a different file that has
    /// taken the name since (same name unlinked and created again).
    fn reopen(&self) -> Result<File> {
        let path = self.dir.join(&self.name);
        let file = File::open(&path).map_err(|e| Error::os(format!("cannot reopen {}", path.display()), e))?;
        let same = file_identity(&file).ok() == Some(self.identity)
            && file.metadata().map(|m| m.len()).ok() == Some(self.map.len() as u64);
        if !same {
            return Err(Error::Invalid { name: self.name.clone(), why: "its name now holds another segment".into() });
        }
        Ok(file)
    }

    /// Does `dir/name` still hold this segment's file?
    pub fn is_current(&self) -> bool {
        std::fs::metadata(self.dir.join(&self.name))
            .map(|m| (std::os::unix::fs::MetadataExt::dev(&m), std::os::unix::fs::MetadataExt::ino(&m)) == self.identity)
            .unwrap_or(false)
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
    /// Size of the whole file (header, attributes, data).
    pub fn total_size(&self) -> u64 {
        self.header.total_size
    }
    /// Remove the name now (mappings stay valid until unmapped). Only the owner does.
    pub fn unlink(&self) {
        if self.owned_here() {
            let path = self.dir.join(&self.name);
            let _ = std::fs::remove_file(&path);
            OWNED.lock().unwrap_or_else(|p| p.into_inner()).remove(&path);
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Never panics: errors (already removed) are ignored.
        self.unlink();
    }
}

/// Unlink every segment this process still owns (at exit and on package unload),
/// or only those in `dir`.
pub fn unlink_all_owned(dir: Option<&Path>) -> usize {
    let me = os::pid();
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    let doomed: Vec<PathBuf> = owned
        .iter()
        .filter(|(p, pid)| **pid == me && dir.is_none_or(|d| p.parent() == Some(d)))
        .map(|(p, _)| p.clone())
        .collect();
    for p in &doomed {
        owned.remove(p);
        let _ = std::fs::remove_file(p);
    }
    doomed.len()
}

fn file_identity(file: &File) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

fn create_exclusive(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path)
}

/// The error for an existing name: for a named segment, say which process holds it.
fn already_exists(dir: &Path, name: &str) -> Error {
    if let Some((namespace, variable)) = crate::naming::parse_named(name) {
        let holder_pid = read_owner(&dir.join(name)).map(|(p, _)| p).unwrap_or(0);
        return Error::Taken { namespace, variable, holder_pid };
    }
    Error::Argument(format!("segment name {name} is already in use"))
}

/// Owner (pid, start time) from a segment's header prefix, if it has one.
pub fn read_owner(path: &Path) -> Option<(u32, u64)> {
    let mut buf = [0u8; HEADER_LEN];
    File::open(path).ok()?.read_exact(&mut buf).ok()?;
    Header::parse_owner(&buf)
}

/// A failed reservation or write: ENOSPC becomes the no-space error, with the
/// free space counting what our partial file holds (the guard removes it), and
/// anything else an OS error.
fn write_error(e: std::io::Error, dir: &Path, file: &File, needed: u64) -> Error {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        use std::os::unix::fs::MetadataExt;
        let ours = file.metadata().map(|m| m.blocks() * 512).unwrap_or(0);
        let free = os::free_bytes(dir).unwrap_or(0).saturating_add(ours);
        return Error::NoSpace { dir: dir.display().to_string(), needed, free };
    }
    Error::os(format!("cannot write {needed} bytes to a new segment in {}", dir.display()), e)
}

struct RemoveOnError(Option<PathBuf>);
impl RemoveOnError {
    fn disarm(mut self) {
        self.0 = None;
    }
}
impl Drop for RemoveOnError {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming;
    use std::os::unix::fs::PermissionsExt;

    fn doubles(dir: &Path, name: &str, v: &[f64]) -> Result<Segment> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Segment::create(
            dir,
            name,
            Contents { kind: Kind::Double, length: v.len() as u64, data_len: bytes.len() as u64, attributes: b"attrs" },
            |d| d.copy_from_slice(&bytes),
        )
    }

    #[test]
    fn create_open_read_unlink() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let s = doubles(dir.path(), &name, &[1.0, 2.5, -3.0]).unwrap();
        let path = dir.path().join(&name);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let r = Segment::open(dir.path(), &name).unwrap();
        assert_eq!(r.data(), s.data());
        assert_eq!(r.attributes(), b"attrs");
        assert_eq!(r.header().length, 3);
        assert!(!r.owned_here());
        drop(r); // a reader never unlinks
        assert!(path.exists());
        drop(s);
        assert!(!path.exists());
    }

    #[test]
    fn copy_at_a_phase_reads_back_and_is_private_to_the_user() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let v: Vec<u8> = (0..20_000u32).flat_map(|i| (i as f64).to_le_bytes()).collect();
        let contents = Contents { kind: Kind::Double, length: 20_000, data_len: v.len() as u64, attributes: b"dims" };
        let s = Segment::create_copy(dir.path(), &name, contents, &v, 64).unwrap();
        let path = dir.path().join(&name);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let r = Segment::open(dir.path(), &name).unwrap();
        assert_eq!(r.header().data_offset % 4096, 64);
        assert_eq!(r.data(), &v[..]);
        assert_eq!(r.attributes(), b"dims");
        assert!(s.owned_here());
        // A wrong data length is refused before any file is made.
        let other = naming::anonymous().unwrap();
        let bad = Contents { kind: Kind::Double, length: 2, data_len: 16, attributes: b"" };
        assert!(Segment::create_copy(dir.path(), &other, bad, &v[..8], 0).is_err());
        assert!(!dir.path().join(&other).exists());
        drop((r, s));
        assert!(!path.exists());
    }

    #[test]
    fn a_source_handed_over_in_chunks_reads_the_same_and_writes_stay_private() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let name = naming::anonymous().unwrap();
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
            // a misaligned request is refused before anything is written
            let bad = Handover { lo: lo + 1, hi };
            let other = naming::anonymous().unwrap();
            assert!(Segment::create_copy_handing_over(dir.path(), &other, contents(), data, phase, bad).is_err());
            assert!(!dir.path().join(&other).exists());
            let (seg, handed) =
                Segment::create_copy_handing_over(dir.path(), &name, contents(), data, phase, Handover { lo, hi }).unwrap();
            assert_eq!(handed, hi - lo);
            assert_eq!(seg.data(), data);
            assert!(!os::private_anonymous_covers(lo, hi));
            *(p.add(n / 2 / 8 * 8) as *mut u64) = 7; // copy on write
            assert_eq!(*(p.add(n / 2 / 8 * 8) as *const u64), 7);
            assert_eq!(seg.data()[n / 2 / 8 * 8], ((n / 2 / 8 * 8) as u64).to_le_bytes()[0]);
            libc::free(p.cast());
            assert!(os::read_word(lo).is_none()); // the whole block is gone
            drop(seg);
        }
    }

    #[test]
    fn missing_truncated_and_foreign_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = Segment::open(dir.path(), "pageshare.a.1.ff").unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        std::fs::write(dir.path().join("pageshare.a.1.00"), b"short").unwrap();
        let e = Segment::open(dir.path(), "pageshare.a.1.00").unwrap_err().to_string();
        assert!(e.contains("shorter than a header"), "{e}");
        std::fs::write(dir.path().join("pageshare.a.1.01"), vec![7u8; 4096]).unwrap();
        let e = Segment::open(dir.path(), "pageshare.a.1.01").unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
        // A valid segment cut short.
        let name = naming::anonymous().unwrap();
        let s = doubles(dir.path(), &name, &[1.0; 100]).unwrap();
        let copy = dir.path().join("pageshare.a.1.02");
        let bytes = std::fs::read(dir.path().join(&name)).unwrap();
        std::fs::write(&copy, &bytes[..bytes.len() - 8]).unwrap();
        let e = Segment::open(dir.path(), "pageshare.a.1.02").unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        drop(s);
    }

    #[test]
    fn named_segments_are_exclusive_and_name_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::named("ns", "x").unwrap();
        let s = doubles(dir.path(), &name, &[1.0]).unwrap();
        let e = doubles(dir.path(), &name, &[2.0]).unwrap_err().to_string();
        assert!(e.contains(&format!("process {}", std::process::id())), "{e}");
        assert!(e.contains("'x'") && e.contains("'ns'"), "{e}");
        drop(s);
        assert!(doubles(dir.path(), &name, &[2.0]).is_ok());
    }

    #[test]
    fn disown_then_adopt_moves_the_duty_to_unlink() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let s = doubles(dir.path(), &name, &[4.0]).unwrap();
        s.disown();
        drop(s); // disowned: stays
        let path = dir.path().join(&name);
        assert!(path.exists());
        let r = Segment::open(dir.path(), &name).unwrap();
        assert!(!r.owned_here());
        r.adopt().unwrap();
        assert!(r.owned_here());
        assert_eq!(read_owner(&path).unwrap().0, std::process::id());
        assert_eq!(r.owner().0, std::process::id()); // seen through the mapping too
        drop(r);
        assert!(!path.exists());
    }

    #[test]
    fn private_maps_never_write_the_segment() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let s = doubles(dir.path(), &name, &[1.0, 2.0]).unwrap();
        let mut p = s.private_map().unwrap();
        let d0 = s.header().data_offset as usize;
        p[d0..d0 + 8].copy_from_slice(&9.0f64.to_le_bytes());
        assert_eq!(&p[d0..d0 + 8], &9.0f64.to_le_bytes());
        assert_eq!(&s.data()[..8], &1.0f64.to_le_bytes());
        let r = Segment::open(dir.path(), &name).unwrap();
        assert_eq!(&r.data()[..8], &1.0f64.to_le_bytes());
        drop(p);
        s.unlink();
        assert!(s.private_map().is_err()); // the name is gone: callers copy instead
    }

    #[test]
    fn a_name_created_again_is_not_mistaken_for_the_old_segment() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::named("reuse", "x").unwrap();
        let old = doubles(dir.path(), &name, &[1.0, 2.0]).unwrap();
        let reader = Segment::open(dir.path(), &name).unwrap();
        drop(old); // unlinked by its owner
        let new = doubles(dir.path(), &name, &[-7.0, -7.0]).unwrap();
        assert!(!reader.is_current());
        assert!(reader.private_map().is_err());
        assert!(reader.prefixed_map(0, 16).is_err());
        assert_eq!(&reader.data()[..8], &1.0f64.to_le_bytes()); // the old mapping still reads the old data
        assert!(new.is_current());
    }

    #[test]
    fn zero_length_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let s = doubles(dir.path(), &name, &[]).unwrap();
        let r = Segment::open(dir.path(), &name).unwrap();
        assert_eq!(r.data().len(), 0);
        drop((s, r));
    }

    #[test]
    fn too_large_request_is_refused_before_reserving() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let n = 1u64 << 50; // 8 PiB of doubles
        let e = Segment::create(
            dir.path(),
            &name,
            Contents { kind: Kind::Double, length: n, data_len: n * 8, attributes: b"" },
            |_| unreachable!(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("free"));
        assert!(!dir.path().join(&name).exists());
    }

    #[test]
    fn unlink_all_owned_removes_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let s = doubles(dir.path(), &name, &[1.0]).unwrap();
        std::mem::forget(s); // as if the R object were never collected
        assert!(dir.path().join(&name).exists());
        assert_eq!(unlink_all_owned(Some(dir.path())), 1);
        assert!(!dir.path().join(&name).exists());
    }
}
