//! Memory files (memfd) and their seals, where their descriptors go, the
//! limit on open files, locks (and who holds one), opening another process's
//! memfd, and a process's standard output caught in a memfd.

use crate::error::{Error, Result};
use rustix::fs::{FlockOperation, SealFlags};
use rustix::io::Errno;
use rustix::process::{Resource, Rlimit};
use std::fs::File;
use std::os::unix::io::AsRawFd;

/// The descriptors of segments are kept at or above this number when the limit
/// on open files allows, so that the low numbers stay free for sockets: R
/// watches its sockets with select(), which cannot take a descriptor of
/// FD_SETSIZE (1024) or more.
pub const SEGMENT_FD_FLOOR: i32 = 1024;
/// Numbers below [`SEGMENT_FD_FLOOR`] (and below the limit) that a segment never
/// takes: they stay free for R's sockets, connections and files.
const LOW_RESERVE: usize = 64;

/// Raise the soft limit on open files to the hard limit (each segment's owner
/// holds one descriptor); returns the soft limit in force afterwards.
pub fn raise_open_files_limit() -> u64 {
    let rl = rustix::process::getrlimit(Resource::Nofile);
    let (cur, max) = (rlim(rl.current), rlim(rl.maximum));
    if cur < max {
        // (raising the soft limit up to the hard one is always permitted)
        let want = Rlimit { current: rl.maximum, maximum: rl.maximum };
        if rustix::process::setrlimit(Resource::Nofile, want).is_ok() {
            return max;
        }
    }
    cur
}

/// A limit as libc writes it: no limit (None) is RLIM_INFINITY, all ones.
fn rlim(limit: Option<u64>) -> u64 {
    limit.unwrap_or(u64::MAX)
}

fn open_files_limit() -> u64 {
    rlim(rustix::process::getrlimit(Resource::Nofile).current)
}

/// A new anonymous memory file (memfd) named `name` (shown in /proc, never in
/// a directory), close-on-exec and sealable, placed as [`place_high`] places it.
/// `Err(Error::Descriptors)` when this process is too close to its limit.
pub fn memfd(name: &str) -> Result<File> {
    use rustix::fs::MemfdFlags;
    let c = std::ffi::CString::new(name).map_err(|_| Error::Argument("a segment name contains a NUL byte".into()))?;
    match rustix::fs::memfd_create(c.as_c_str(), MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING) {
        Ok(fd) => place_high(File::from(fd)),
        Err(Errno::MFILE | Errno::NFILE) => Err(descriptors_error()),
        Err(e) => Err(Error::os("cannot create an anonymous shared memory file (memfd_create)", e.into())),
    }
}

/// Where a descriptor that this process keeps for long (a segment's, an index
/// entry's lock) goes, so that the room for segments grows with the limit on
/// open files and never squeezes out R's sockets:
/// - first at [`SEGMENT_FD_FLOOR`] or above, a range nothing else uses (the
///   kernel hands out the lowest free number), which it may fill to the limit;
/// - when that range is full or absent (a limit of 1024 or less), at the low
///   number it already has, provided at least [`LOW_RESERVE`] numbers below
///   `min(limit, SEGMENT_FD_FLOOR)` stay free besides it.
///
/// Otherwise `Err(Error::Descriptors)`, before the limit is reached.
pub fn place_high(low: File) -> Result<File> {
    let limit = open_files_limit();
    if low.as_raw_fd() >= SEGMENT_FD_FLOOR {
        return Ok(low);
    }
    if limit > SEGMENT_FD_FLOOR as u64 {
        if let Ok(high) = rustix::io::fcntl_dupfd_cloexec(&low, SEGMENT_FD_FLOOR) {
            return Ok(File::from(high));
        }
    }
    let cap = limit.min(SEGMENT_FD_FLOOR as u64) as i32;
    if free_descriptors_above(low.as_raw_fd(), cap) < LOW_RESERVE {
        return Err(descriptors_error());
    }
    Ok(low)
}

/// How many descriptor numbers in (fd, cap) are free. The kernel hands out the
/// lowest free number, so a new descriptor has none free below it. (On libc:
/// it asks about numbers this process may not hold, and rustix's fcntl takes
/// only a descriptor that is open.)
fn free_descriptors_above(fd: i32, cap: i32) -> usize {
    // SAFETY: F_GETFD only asks whether a number is open; it changes nothing.
    ((fd + 1)..cap).filter(|&n| unsafe { libc::fcntl(n, libc::F_GETFD) } < 0).count()
}

/// Take a shared lock on `file`'s open file description, without waiting. It
/// lasts until every descriptor of that description is closed (by the kernel
/// too, at any exit), whatever namespace the process runs in.
pub fn lock_shared(file: &File) -> std::io::Result<()> {
    Ok(rustix::fs::flock(file, FlockOperation::NonBlockingLockShared)?)
}

/// Take an exclusive lock on `file`'s open file description, waiting for it
/// as long as another holds one. It goes when `file` is closed.
pub fn lock_exclusive_waiting(file: &File) -> std::io::Result<()> {
    loop {
        match rustix::fs::flock(file, FlockOperation::LockExclusive) {
            Err(Errno::INTR) => continue,
            r => return Ok(r?),
        }
    }
}

/// The process that holds a `flock()` lock on `file`'s inode, as the kernel
/// lists it in `/proc/locks` (in this process's pid namespace); None where it
/// lists none or cannot be read.
pub fn flock_holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().ok()?;
    let id = format!("{:02x}:{:02x}:{}", rustix::fs::major(m.dev()), rustix::fs::minor(m.dev()), m.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    flock_holder_in(&locks, &id)
}

/// The pid of the granted FLOCK lock on the inode `id` ("maj:min:inode") in
/// the text of `/proc/locks` (waiting ones, "->", left out).
fn flock_holder_in(locks: &str, id: &str) -> Option<u32> {
    locks.lines().filter(|l| !l.contains("->")).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&id)).then(|| f.get(4)?.parse().ok()).flatten()
    })
}

/// Try to take an exclusive lock on `file`'s open file description without
/// waiting: `Ok(true)` when granted (no other open file description of the
/// file holds a lock), `Ok(false)` when another one holds a lock. The lock
/// goes when `file` is closed.
pub fn try_lock_exclusive(file: &File) -> std::io::Result<bool> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn descriptors_error() -> Error {
    Error::Descriptors { limit: open_files_limit() }
}

const ALL_SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW).union(SealFlags::WRITE).union(SealFlags::SEAL);
const SIZE_SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW);

/// Seal a memfd for good: nobody, the owner included, can shrink, grow or
/// write it again, or remove the seals. Fails (EBUSY) while a shared writable
/// mapping of it exists.
pub fn seal(file: &File) -> std::io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(file, ALL_SEALS)?)
}

/// Fix a memfd's size for good (it stays writable): a peer that maps it can
/// never be made to fault by a shrink. For shared memory both sides write.
pub fn seal_size(file: &File) -> std::io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(file, SIZE_SEALS | SealFlags::SEAL)?)
}

/// Is `file`'s size sealed as [`seal_size`] seals it?
pub fn is_size_sealed(file: &File) -> bool {
    rustix::fs::fcntl_get_seals(file).is_ok_and(|s| s.contains(SIZE_SEALS))
}

/// Does `file` carry every seal [`seal`] sets? Only then can nothing anyone
/// does to it make a reader of its mapping fault.
pub fn is_sealed(file: &File) -> bool {
    rustix::fs::fcntl_get_seals(file).is_ok_and(|s| s.contains(ALL_SEALS))
}

/// A new file of this user alone (mode 0600) in directory `dir`, with no name
/// in any directory: only a process given a descriptor of it (over a socket)
/// can map it, and its memory goes with the last descriptor and mapping, as a
/// memfd's does. For memory that must be shared where memfd_create() is
/// refused (a container's seccomp profile). Made with O_TMPFILE, which never
/// names it; on a file system without O_TMPFILE, created under a random name
/// (exclusively, never through a link) and unlinked at once. Its size cannot
/// be sealed: see [`is_unnamed_private`] for what a receiver checks instead.
pub fn unnamed_file(dir: &std::path::Path) -> std::io::Result<File> {
    use rustix::fs::OFlags;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags((OFlags::TMPFILE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW).bits() as i32)
        .open(dir);
    let file = match tmp {
        Ok(f) => f,
        // (a kernel or file system without O_TMPFILE says so with one of these)
        Err(e)
            if matches!(
                e.raw_os_error().map(Errno::from_raw_os_error),
                Some(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL)
            ) =>
        {
            let random = super::random_bytes(12).map_err(|e| std::io::Error::other(e.to_string()))?;
            let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
            let path = dir.join(format!(".pageshare-{name}"));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags((OFlags::CLOEXEC | OFlags::NOFOLLOW).bits() as i32)
                .open(&path)?;
            std::fs::remove_file(&path)?;
            f
        }
        Err(e) => return Err(e),
    };
    if !is_unnamed_private(&file) {
        return Err(std::io::Error::other(format!("{} gave a file that is named or not ours alone", dir.display())));
    }
    place_high(file).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Is `file` a regular file of this user, readable by nobody else, and in no
/// directory (made by [`unnamed_file`])? Then no process can open it by name:
/// only those it was given to (ours) hold it, so none can shrink it under
/// another's mapping unless it is one of ours.
pub fn is_unnamed_private(file: &File) -> bool {
    let Ok(st) = rustix::fs::fstat(file) else { return false };
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        && st.st_nlink == 0
        && st.st_uid == super::euid()
        && st.st_mode & 0o077 == 0
}

/// What /proc shows for a memfd made by [`memfd`] with `name`.
pub fn memfd_path(name: &str) -> String {
    format!("/memfd:{name}")
}

/// Open descriptor `fd` of process `pid` (through /proc/PID/fd, which needs the
/// same user, or root) read-only, if it is a memfd whose name starts with
/// `prefix`. Never blocks (O_NONBLOCK: a FIFO put there cannot hang us) and
/// never opens anything else by name (the link is read first).
pub fn open_process_memfd(pid: u32, fd: i32, prefix: &str) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let link = format!("/proc/{pid}/fd/{fd}");
    let target = std::fs::read_link(&link)?;
    let shown = target.to_string_lossy();
    if !shown.starts_with(&memfd_path(prefix)) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("descriptor {fd} of process {pid} is {shown}"),
        ));
    }
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC;
    std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(&link)
}

#[cfg(test)]
mod lock_holder_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_granted_lock_names_its_holder() {
        let locks = "1: POSIX  ADVISORY  WRITE 77 00:2f:15 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 00:2f:15 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 00:2f:15 0 EOF\n";
        assert_eq!(flock_holder_in(locks, "00:2f:15"), Some(4242));
        assert_eq!(flock_holder_in(locks, "00:2f:16"), None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let a = File::create(&path).unwrap();
        assert_eq!(flock_holder(&a), None);
        assert!(try_lock_exclusive(&a).unwrap());
        let b = File::open(&path).unwrap();
        assert!(!try_lock_exclusive(&b).unwrap());
        assert_eq!(flock_holder(&b), Some(crate::os::pid()));
    }

    proptest! {
        #[test]
        fn any_text_as_proc_locks_gives_an_answer(text in "[ -~\n]{0,300}", id in "[0-9a-f:]{0,12}") {
            let _ = flock_holder_in(&text, &id);
        }
    }
}

/// This process's standard output (descriptor 1), caught in a memory file:
/// what is written there stays in the file until [`StdoutCatch::take`]
/// takes it. A pool's worker relays its task's output this way: a task that
/// writes nothing costs one `lseek()`.
pub struct StdoutCatch {
    file: File,
}

impl StdoutCatch {
    /// Makes descriptor 1 a new memory file (what was there before is
    /// closed: a worker's standard output goes nowhere else).
    pub fn start() -> std::io::Result<StdoutCatch> {
        use rustix::fs::MemfdFlags;
        let fd = rustix::fs::memfd_create(c"pageshare-stdout", MemfdFlags::CLOEXEC)?;
        rustix::stdio::dup2_stdout(&fd)?;
        Ok(StdoutCatch { file: File::from(fd) })
    }

    /// The bytes written since the last take (the file is emptied), or
    /// nothing at one `lseek()`'s cost when none were. (The file and
    /// descriptor 1 share one file offset: the offset is what was written.)
    pub fn take(&self) -> std::io::Result<Vec<u8>> {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::FileExt;
        let mut f = &self.file;
        let written = f.stream_position()?;
        if written == 0 {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; usize::try_from(written).unwrap_or(usize::MAX)];
        let n = f.read_at(&mut out, 0)?;
        out.truncate(n);
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        Ok(out)
    }
}

#[cfg(test)]
mod stdout_catch_tests {
    // (fork: the catch replaces the test process's own standard output)
    #[test]
    fn a_child_catches_what_it_writes_and_takes_it_once() {
        // SAFETY: fork in a test; the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = (|| {
                let c = super::StdoutCatch::start().ok()?;
                if !c.take().ok()?.is_empty() {
                    return None;
                }
                rustix::io::write(rustix::stdio::stdout(), b"hello\n").ok()?;
                let first = c.take().ok()?;
                let second = c.take().ok()?;
                rustix::io::write(rustix::stdio::stdout(), b"again").ok()?;
                let third = c.take().ok()?;
                Some(first == b"hello\n" && second.is_empty() && third == b"again")
            })();
            // SAFETY: ending the forked child at once.
            unsafe { libc::_exit(if ok == Some(true) { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
    }
}
