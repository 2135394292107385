//! Memory files (memfd) and their seals, where their descriptors go, the
//! limit on open files, locks, and opening another process's memfd.

use crate::error::{Error, Result};
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
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `rl` is a writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 0;
    }
    if rl.rlim_cur < rl.rlim_max {
        let want = libc::rlimit { rlim_cur: rl.rlim_max, rlim_max: rl.rlim_max };
        // SAFETY: raising the soft limit up to the hard one is always permitted.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return want.rlim_cur;
        }
    }
    rl.rlim_cur
}

fn open_files_limit() -> u64 {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `rl` is a writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1024;
    }
    rl.rlim_cur
}

/// A new anonymous memory file (memfd) named `name` (shown in /proc, never in
/// a directory), close-on-exec and sealable, placed as [`place_high`] places it.
/// `Err(Error::Descriptors)` when this process is too close to its limit.
pub fn memfd(name: &str) -> Result<File> {
    use std::os::unix::io::FromRawFd;
    let c = std::ffi::CString::new(name).map_err(|_| Error::Argument("a segment name contains a NUL byte".into()))?;
    // SAFETY: `c` is a valid NUL-terminated string; the flags are valid.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EMFILE) | Some(libc::ENFILE) => descriptors_error(),
            _ => Error::os("cannot create an anonymous shared memory file (memfd_create)", e),
        });
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    place_high(unsafe { File::from_raw_fd(fd) })
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
    use std::os::unix::io::FromRawFd;
    let limit = open_files_limit();
    if low.as_raw_fd() >= SEGMENT_FD_FLOOR {
        return Ok(low);
    }
    if limit > SEGMENT_FD_FLOOR as u64 {
        // SAFETY: duplicating a descriptor we own.
        let high = unsafe { libc::fcntl(low.as_raw_fd(), libc::F_DUPFD_CLOEXEC, SEGMENT_FD_FLOOR) };
        if high >= 0 {
            // SAFETY: `high` is a fresh descriptor owned by nobody else.
            return Ok(unsafe { File::from_raw_fd(high) });
        }
    }
    let cap = limit.min(SEGMENT_FD_FLOOR as u64) as i32;
    if free_descriptors_above(low.as_raw_fd(), cap) < LOW_RESERVE {
        return Err(descriptors_error());
    }
    Ok(low)
}

/// How many descriptor numbers in (fd, cap) are free. The kernel hands out the
/// lowest free number, so a new descriptor has none free below it.
fn free_descriptors_above(fd: i32, cap: i32) -> usize {
    // SAFETY: F_GETFD only asks whether a number is open; it changes nothing.
    ((fd + 1)..cap).filter(|&n| unsafe { libc::fcntl(n, libc::F_GETFD) } < 0).count()
}

/// Take a shared lock on `file`'s open file description, without waiting. It
/// lasts until every descriptor of that description is closed (by the kernel
/// too, at any exit), whatever namespace the process runs in.
pub fn lock_shared(file: &File) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor owned by `file`.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Take an exclusive lock on `file`'s open file description, waiting for it
/// as long as another holds one. It goes when `file` is closed.
pub fn lock_exclusive_waiting(file: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor owned by `file`.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Try to take an exclusive lock on `file`'s open file description without
/// waiting: `Ok(true)` when granted (no other open file description of the
/// file holds a lock), `Ok(false)` when another one holds a lock. The lock
/// goes when `file` is closed.
pub fn try_lock_exclusive(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor owned by `file`.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(e)
}

fn descriptors_error() -> Error {
    Error::Descriptors { limit: open_files_limit() }
}

const ALL_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;

/// Seal a memfd for good: nobody, the owner included, can shrink, grow or
/// write it again, or remove the seals. Fails (EBUSY) while a shared writable
/// mapping of it exists.
pub fn seal(file: &File) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor owned by `file`.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, ALL_SEALS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Fix a memfd's size for good (it stays writable): a peer that maps it can
/// never be made to fault by a shrink. For shared memory both sides write.
pub fn seal_size(file: &File) -> std::io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor owned by `file`.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Is `file`'s size sealed as [`seal_size`] seals it?
pub fn is_size_sealed(file: &File) -> bool {
    // SAFETY: fcntl on a descriptor owned by `file`.
    let s = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    s >= 0 && s & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) == (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
}

/// Does `file` carry every seal [`seal`] sets? Only then can nothing anyone
/// does to it make a reader of its mapping fault.
pub fn is_sealed(file: &File) -> bool {
    // SAFETY: fcntl on a descriptor owned by `file`.
    let s = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    s >= 0 && s & ALL_SEALS == ALL_SEALS
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
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(dir);
    let file = match tmp {
        Ok(f) => f,
        // (a kernel or file system without O_TMPFILE says so with one of these)
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)) => {
            let random = super::random_bytes(12).map_err(|e| std::io::Error::other(e.to_string()))?;
            let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
            let path = dir.join(format!(".pageshare-{name}"));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
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
    // SAFETY: an all-zero stat is a valid value of the struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills `st` for a descriptor owned by `file`.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    st.st_mode & libc::S_IFMT == libc::S_IFREG
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
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC).open(&link)
}
