//! The only module that calls libc directly: memory files and their seals,
//! free memory, page reservation, descriptors, process identity and randomness. Everything else stays portable Rust.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Bytes available to an unprivileged writer in the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Argument("the segment directory contains a NUL byte".into()))?;
    // SAFETY: statvfs is a plain C struct for which all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(Error::os(format!("cannot read free space of {}", dir.display()), std::io::Error::last_os_error()));
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Is `dir` on a tmpfs (memory-backed) file system?
pub fn is_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs is a plain C struct for which all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == TMPFS_MAGIC
}

/// Reserve every page of `file` up to `len` bytes, so that later writes through a
/// mapping can never hit an unbacked tmpfs page (which would raise SIGBUS).
pub fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the descriptor is owned by `file` and open for writing.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// Start time of a process (clock ticks since boot, field 22 of /proc/PID/stat),
/// which together with the pid identifies a process even after pid reuse.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid).map(|(_, start)| start)
}

/// The state letter of a process (R running, S sleeping, Z zombie, X dead...).
pub fn process_state(pid: u32) -> Option<char> {
    stat_fields(pid).map(|(state, _)| state)
}

/// Has process `pid` exited? Only on evidence: it is a zombie, or the kernel
/// says there is no such process (`kill(pid, 0)` fails with ESRCH). Where
/// /proc cannot be read, a process that exists counts as running.
pub fn process_exited(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    if let Some(state) = process_state(pid) {
        return state == 'Z' || state == 'X';
    }
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Is the process (pid, start time) still running? A zombie (exited, not yet
/// reaped by its parent) is not: it holds no descriptors and maps nothing.
pub fn is_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    match stat_fields(pid) {
        Some((state, s)) => s == start && state != 'Z' && state != 'X',
        None => false,
    }
}

/// (state, start time) from /proc/PID/stat.
fn stat_fields(pid: u32) -> Option<(char, u64)> {
    let mut s = String::new();
    File::open(format!("/proc/{pid}/stat")).ok()?.read_to_string(&mut s).ok()?;
    parse_stat(&s)
}

/// (state, start time): fields 3 and 22 of a /proc/PID/stat line. The command
/// name (field 2) is in parentheses and may itself contain spaces and
/// parentheses, hence the last ')'.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = f.next()?.chars().next()?;
    Some((state, f.nth(18)?.parse().ok()?))
}

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

/// Does `file` carry every seal [`seal`] sets? Only then can nothing anyone
/// does to it make a reader of its mapping fault.
pub fn is_sealed(file: &File) -> bool {
    // SAFETY: fcntl on a descriptor owned by `file`.
    let s = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    s >= 0 && s & ALL_SEALS == ALL_SEALS
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

/// Receivers open a segment through `/proc/<owner pid>/fd/<n>`, and owners
/// are recognised by their start time in `/proc/<pid>/stat`. Where this
/// process cannot see its own entries there (no /proc mounted), no process can
/// open what it shares or see whom it receives from: sharing is refused with
/// [`Error::Unsupported`], which the front doors turn into plain
/// serialization. Looked at once per process.
pub fn check_segments_openable() -> Result<()> {
    static MISSING: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let missing = MISSING.get_or_init(|| {
        let me = pid();
        let fds = std::fs::read_dir(format!("/proc/{me}/fd")).is_ok();
        let stat = start_time(me).is_some();
        (!(fds && stat)).then(|| {
            format!(
                "this process does not see itself in /proc (/proc/{me}/fd {}, /proc/{me}/stat {}): /proc is \
                 not mounted, and other processes open shared segments through /proc/<pid>/fd",
                if fds { "readable" } else { "missing" },
                if stat { "readable" } else { "missing" }
            )
        })
    });
    match missing {
        None => Ok(()),
        Some(why) => Err(Error::Unsupported { why: why.clone() }),
    }
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Can other processes of this user open this process's descriptors through
/// /proc/<pid>/fd? Not when the process is not dumpable (prctl, a change of
/// credentials): then only a process with CAP_SYS_PTRACE can, so what this
/// process shares would reach an ordinary receiver as an unopenable handle.
pub fn descriptors_openable_by_others() -> bool {
    // SAFETY: PR_GET_DUMPABLE takes no pointer and only reads this process's state.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

/// Memory a new segment can take without pushing the machine or this
/// process's cgroup into the OOM killer: the smaller of the kernel's
/// MemAvailable and, for each memory-limited cgroup above this process, its
/// limit minus what it uses besides page cache. Segments live in memory (memfd
/// pages count as Shmem), whatever the size of /dev/shm.
pub fn available_memory() -> u64 {
    let mut free = meminfo_available().unwrap_or(u64::MAX);
    for (max, used) in cgroup_limits() {
        free = free.min(max.saturating_sub(used));
    }
    free
}

fn meminfo_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// (limit, use minus its reclaimable page cache) of this process's memory
/// cgroup and each ancestor that has a limit: cgroup v2 (memory.max) and v1
/// (memory.limit_in_bytes).
fn cgroup_limits() -> Vec<(u64, u64)> {
    let Ok(s) = std::fs::read_to_string("/proc/self/cgroup") else { return Vec::new() };
    let mut out = Vec::new();
    for line in s.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(rel)) = (f.next(), f.next(), f.next()) else { continue };
        let (root, max, current, cache) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file ")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file ")
        } else {
            continue;
        };
        let root = Path::new(root);
        let mut dir = root.join(rel.trim_start_matches('/'));
        loop {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            // v1 writes "no limit" as a huge number, v2 as "max" (which does not parse)
            if let Some(limit) = read(max).and_then(|m| m.trim().parse::<u64>().ok()).filter(|&l| l < 1 << 62) {
                let used = read(current).and_then(|c| c.trim().parse::<u64>().ok()).unwrap_or(0);
                let reclaimable = read("memory.stat")
                    .and_then(|st| {
                        st.lines().find_map(|l| l.strip_prefix(cache)).and_then(|v| v.trim().parse::<u64>().ok())
                    })
                    .unwrap_or(0);
                out.push((limit, used.saturating_sub(reclaimable)));
            }
            if dir == root || !dir.pop() {
                break;
            }
        }
    }
    out
}

/// `n` bytes from the kernel's random source, for unguessable names and secrets.
pub fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::os("cannot read /dev/urandom", e))?;
    Ok(buf)
}

/// Does the mapped range `[ptr, ptr + len)` hold any page that this process has
/// written in a private (copy-on-write) file mapping? Such a page is an
/// anonymous copy: present but not a file page, or swapped out (file pages are
/// dropped, never swapped). `None` if the page tables cannot be read.
///
/// Asked with the PAGEMAP_SCAN ioctl (Linux >= 6.7), which walks only the page
/// tables that exist and stops at the first match: its cost follows what the
/// process has touched, not the range (a 512 MB vector is checked in
/// microseconds, not the ~2 ms of reading 1 MB of pagemap entries). Older
/// kernels get the entries read from /proc/self/pagemap.
pub fn has_private_pages(ptr: *const u8, len: usize) -> Option<bool> {
    if len == 0 {
        return Some(false);
    }
    let page = page_size();
    let first = ptr as usize / page * page;
    let end = (ptr as usize + len).div_ceil(page) * page;
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    scan_private_pages(&pagemap, first, end).or_else(|| read_private_pages(pagemap, first, end))
}

/// `struct pm_scan_arg` of <linux/fs.h>.
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of <linux/fs.h>.
#[repr(C)]
#[derive(Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)` in the generic ioctl layout (x86, arm).
/// Where the layout differs (powerpc, mips, sparc) the ioctl fails with ENOTTY
/// and the entries are read instead.
const PAGEMAP_SCAN: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16) | (0x66 << 8) | 16;
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

/// [`has_private_pages`] through PAGEMAP_SCAN on page-aligned `[start, end)`;
/// `None` if the kernel does not have the ioctl.
fn scan_private_pages(pagemap: &File, start: usize, end: usize) -> Option<bool> {
    let mut found = PageRegion::default();
    let mut arg = PmScanArg {
        size: std::mem::size_of::<PmScanArg>() as u64,
        flags: 0,
        start: start as u64,
        end: end as u64,
        walk_end: 0,
        vec: std::ptr::addr_of_mut!(found) as u64,
        vec_len: 1,
        max_pages: 1,
        // "not a file page" and ("present" or "swapped").
        category_inverted: PAGE_IS_FILE,
        category_mask: PAGE_IS_FILE,
        category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        return_mask: PAGE_IS_FILE | PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
    };
    // SAFETY: the kernel reads `arg` and writes at most `vec_len` regions into
    // `found`; both live across the call. It only reads our own page tables.
    let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, std::ptr::addr_of_mut!(arg)) };
    (n >= 0).then_some(n > 0)
}

/// [`has_private_pages`] from the 8-byte entries of /proc/self/pagemap.
fn read_private_pages(mut pagemap: File, start: usize, end: usize) -> Option<bool> {
    use std::io::{Seek, SeekFrom};
    let page = page_size();
    pagemap.seek(SeekFrom::Start((start / page * 8) as u64)).ok()?;
    let mut buf = vec![0u8; (end - start) / page * 8];
    pagemap.read_exact(&mut buf).ok()?;
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE_OR_SHARED: u64 = 1 << 61;
    Some(buf.chunks_exact(8).any(|c| {
        let e = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        e & SWAPPED != 0 || (e & PRESENT != 0 && e & FILE_OR_SHARED == 0)
    }))
}

/// Read the 8-byte word at `addr` of this process's memory without being able
/// to fault: through process_vm_readv(), which returns an error for an unmapped
/// or unreadable address (a plain read of freed memory could raise SIGSEGV).
pub fn read_word(addr: usize) -> Option<i64> {
    let mut out: i64 = 0;
    let local = libc::iovec { iov_base: std::ptr::addr_of_mut!(out).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 8 };
    // SAFETY: the kernel copies 8 bytes into `out` or fails; it never faults us.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(out)
}

/// Is malloc() glibc's own (no allocator interposed with LD_PRELOAD)? Only then
/// does [`glibc_mmapped_chunk`] mean anything.
pub fn glibc_malloc_in_use() -> bool {
    // SAFETY: dlsym with NUL-terminated names; the results are only compared.
    unsafe {
        let malloc = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
        let glibc = libc::dlsym(libc::RTLD_DEFAULT, c"__libc_malloc".as_ptr());
        !malloc.is_null() && malloc == glibc
    }
}

/// If `mem` was returned by glibc's malloc() as a chunk of its own mmap()ed
/// region (glibc does that for blocks of 128 KiB to 32 MiB and more), that
/// region as (start, length): free(mem) unmaps exactly that range. Reads the
/// chunk header (size word with its IS_MMAPPED bit, and the alignment offset
/// before it) without faulting, and checks that it is consistent. The length
/// is rounded up to whole pages, as munmap() rounds it: Debian 12's glibc 2.36
/// keeps the whole mapping's size in the header, Debian sid's 2.43 16 bytes less.
pub fn glibc_mmapped_chunk(mem: usize) -> Option<(usize, usize)> {
    const IS_MMAPPED: i64 = 0x2;
    const CHUNK_HEADER: usize = 16;
    let page = page_size();
    let size_word = read_word(mem.checked_sub(8)?)?;
    if size_word & IS_MMAPPED == 0 || size_word & 0x4 != 0 {
        return None; // not mmapped (or flagged as belonging to another arena)
    }
    let chunk_size = (size_word & !0x7) as usize;
    let offset = read_word(mem.checked_sub(CHUNK_HEADER)?)? as usize; // prev_size
    let start = mem.checked_sub(CHUNK_HEADER)?.checked_sub(offset)?;
    let len = chunk_size.checked_add(offset)?.checked_next_multiple_of(page)?;
    (start.is_multiple_of(page) && offset < page).then_some((start, len))
}

/// Is [start, end) covered, without gaps, by private writable mappings (rw-p)
/// of this process that are anonymous or map a file whose path `file_ok`
/// accepts (as /proc/self/maps prints it, e.g. with " (deleted)")?
pub fn private_memory_covers(start: usize, end: usize, file_ok: impl Fn(&str) -> bool) -> bool {
    private_mappings_cover(start, end, |path| path.is_none() || path.is_some_and(&file_ok))
}

/// Is [start, end) covered, without gaps, by private writable mappings (rw-p)
/// of the file at `path` (also once it was unlinked)? Pages of such a mapping
/// that were written are private copies: [`has_private_pages`] tells.
pub fn private_file_mapping_covers(start: usize, end: usize, path: &str) -> bool {
    private_mappings_cover(start, end, |p| p.is_some_and(|p| p == path || p.strip_suffix(" (deleted)") == Some(path)))
}

/// Is [start, end) covered, without gaps, by rw-p mappings each of which
/// `ok` accepts: `None` for anonymous memory, else the mapped file's path as
/// /proc/self/maps prints it?
fn private_mappings_cover(start: usize, end: usize, ok: impl Fn(Option<&str>) -> bool) -> bool {
    // (bytes, not a String: a mapped file's name need not be UTF-8)
    let Ok(raw) = std::fs::read("/proc/self/maps") else { return false };
    let maps = String::from_utf8_lossy(&raw);
    let mut areas: Vec<(usize, usize, bool)> = Vec::new();
    for line in maps.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        let path = f.next().unwrap_or("").trim();
        let Some((a, b)) = range.split_once('-') else { return false };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { return false };
        if b <= start || a >= end {
            continue;
        }
        let mapped = if inode == "0" && path.is_empty() { None } else { Some(path) };
        areas.push((a, b, perms == "rw-p" && (mapped != Some("") && ok(mapped))));
    }
    areas.sort();
    let mut covered = start;
    for (a, b, ok) in areas {
        if !ok || a > covered {
            return false;
        }
        covered = covered.max(b);
    }
    covered >= end
}

/// Is [start, end) plain private anonymous memory of this process?
pub fn private_anonymous_covers(start: usize, end: usize) -> bool {
    private_memory_covers(start, end, |_| false)
}

/// Make [addr, addr + len) private anonymous memory again holding `file`'s bytes
/// from `offset`: the way back from [`map_private_over`] (a failed copy), and
/// the repair when a MAP_FIXED mapping failed after the kernel had already
/// discarded the old pages. Aborts the process if even that is impossible:
/// continuing would let R read a hole in a live vector.
///
/// # Safety
/// As for [`map_private_over`]; the file must hold the range's bytes.
pub unsafe fn refill_anonymous(addr: usize, len: usize, file: &File, offset: u64) {
    // SAFETY: per the contract: our own range, replaced by fresh private memory.
    let got = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    // SAFETY: on success, [addr, addr + len) is our writable anonymous memory.
    let filled = got != libc::MAP_FAILED
        && std::os::unix::fs::FileExt::read_exact_at(
            file,
            unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) },
            offset,
        )
        .is_ok();
    if !filled {
        eprintln!("pageshare: cannot restore {len} bytes of a vector's memory at {addr:#x}; aborting to avoid reading lost data");
        std::process::abort();
    }
}

/// Are there at least `spare` more mappings allowed for this process?
fn mapping_room(spare: usize) -> bool {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse::<usize>().ok());
    let used = std::fs::read("/proc/self/maps").map(|m| m.iter().filter(|&&b| b == b'\n').count()).ok();
    matches!((max, used), (Some(max), Some(used)) if used + spare < max)
}

/// Replace the pages [addr, addr + len) of this process by a private (copy on
/// write) mapping of `file` from `offset`.
///
/// # Safety
/// [addr, addr + len) must be page-aligned memory this process owns whose
/// contents equal the file's bytes there (so nothing reading it can tell), and
/// nothing may write it concurrently; whoever frees that memory must unmap the
/// whole range (as glibc does for an mmap()ed chunk).
pub unsafe fn map_private_over(addr: usize, len: usize, file: &File, offset: u64) -> std::io::Result<()> {
    // A MAP_FIXED mapping that fails after the kernel has discarded the old pages
    // loses them (callers then refill the range, see refill_anonymous()). The
    // likeliest failure is running out of mappings (splitting a region adds
    // two), so refuse early with a wide margin.
    if !mapping_room(64) {
        return Err(std::io::Error::new(std::io::ErrorKind::OutOfMemory, "too close to vm.max_map_count"));
    }
    // SAFETY: per the contract above; MAP_FIXED replaces exactly that range.
    let got = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            file.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// A private mapping of a file's bytes from `file_offset` on, together with the
/// file page before them, so that a caller can place a header of up to one page
/// right in front of the data (R's custom vector allocator puts its vector
/// header there). Every page is MAP_PRIVATE: reads share the page cache, a write
/// (such as the header's, which lands in the page before the data) copies that
/// page and never reaches the file. Unmapped on drop.
pub struct PrefixedMapping {
    base: *mut u8,
    len: usize,
    /// Offset of the data from `base`: at least one page.
    lead: usize,
}

impl PrefixedMapping {
    /// Map `data_len` bytes of `file` from `file_offset` (at least one page into
    /// the file, a multiple of 8) behind the rest of their page and the page before.
    pub fn new(file: &File, file_offset: u64, data_len: usize) -> std::io::Result<PrefixedMapping> {
        let page = page_size() as u64;
        if file_offset < page || !file_offset.is_multiple_of(8) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "data offset below one page or unaligned",
            ));
        }
        let map_start = file_offset / page * page - page;
        let lead = (file_offset - map_start) as usize;
        let len = (lead + data_len).div_ceil(page as usize) * page as usize;
        // SAFETY: a fresh private mapping of our own file; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                map_start as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(PrefixedMapping { base: base.cast(), len, lead })
    }

    /// The first byte of the file data.
    pub fn data(&self) -> *mut u8 {
        // SAFETY: lead < len: the data start lies inside the mapping.
        unsafe { self.base.add(self.lead) }
    }

    /// Where a block whose first `prefix` bytes precede the data must start.
    pub fn block(&self, prefix: usize) -> Option<*mut u8> {
        // SAFETY: prefix <= lead keeps the pointer inside the mapping.
        (prefix <= self.lead).then(|| unsafe { self.data().sub(prefix) })
    }
}

impl Drop for PrefixedMapping {
    fn drop(&mut self) {
        // SAFETY: [base, base + len) is exactly what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_has_exited_only_on_evidence() {
        assert!(!process_exited(pid()));
        assert!(!process_exited(0));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = child.id();
        child.wait().unwrap(); // reaped: no such process any more
        assert!(process_exited(id));
    }

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = pid();
        let st = start_time(me).expect("start time of self");
        assert!(is_alive(me, st));
        assert!(!is_alive(me, st + 1));
        assert!(!is_alive(0, 0));
    }

    #[test]
    fn free_bytes_of_tmp_is_positive() {
        assert!(free_bytes(Path::new("/tmp")).unwrap() > 0);
    }

    /// A private (copy-on-write) mapping of a new file of `len` bytes of 1.
    fn private_file_map(len: usize) -> (tempfile::TempDir, memmap2::MmapMut) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; len]).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: a private (copy-on-write) map of a file only this test knows.
        let m = unsafe { memmap2::MmapOptions::new().map_copy(&file) }.unwrap();
        (dir, m)
    }

    #[test]
    fn pagemap_sees_copy_on_write_pages() {
        let (_dir, mut m) = private_file_map(1 << 16);
        let _ = m.iter().map(|&b| b as u64).sum::<u64>(); // read every page
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false));
        m[5000] = 2;
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(true));
        assert_eq!(has_private_pages(m[16384..].as_ptr(), m.len() - 16384), Some(false));
        assert_eq!(has_private_pages(m[5000..].as_ptr(), 1), Some(true)); // an unaligned byte
                                                                          // Both ways of asking agree (the ioctl where the kernel has it).
        let page = page_size();
        let (start, end) = (m.as_ptr() as usize, m.as_ptr() as usize + m.len());
        let pagemap = || File::open("/proc/self/pagemap").unwrap();
        assert_eq!(read_private_pages(pagemap(), start, end), Some(true));
        assert_eq!(read_private_pages(pagemap(), start + 2 * page, end), Some(false));
        if let Some(found) = scan_private_pages(&pagemap(), start, end) {
            assert!(found);
            assert_eq!(scan_private_pages(&pagemap(), start + 2 * page, end), Some(false));
        }
    }

    #[test]
    fn untouched_pages_of_a_private_mapping_are_not_private() {
        let (_dir, m) = private_file_map(1 << 20);
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false)); // nothing mapped yet
        let _ = m[700_000];
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false)); // read: a file page
    }

    #[test]
    fn words_are_read_without_faulting() {
        let mut m = memmap2::MmapMut::map_anon(1 << 16).unwrap();
        m[100..108].copy_from_slice(&42i64.to_le_bytes());
        let addr = m.as_ptr() as usize + 100;
        assert_eq!(read_word(addr), Some(42));
        drop(m);
        assert_eq!(read_word(addr), None); // unmapped: an error, not SIGSEGV
                                           // SAFETY: a new anonymous mapping; nothing else is affected.
        let none = unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_eq!(read_word(none as usize), None); // mapped but unreadable
                                                    // SAFETY: `none` is the 4096-byte mapping made above, used no more.
        unsafe { libc::munmap(none, 4096) };
    }

    #[test]
    fn prefixed_mapping_puts_file_data_behind_a_private_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut bytes = vec![0u8; 3 * 4096];
        for (at, v) in [(4096, 7u8), (4096 + 5000, 9), (4096 + 64, 11), (4096 + 64 + 5000, 13)] {
            bytes[at] = v;
        }
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        // data on a page boundary and 64 bytes into a page (a source's phase)
        for (offset, first, later) in [(4096u64, 7u8, 9u8), (4096 + 64, 11, 13)] {
            let m = PrefixedMapping::new(&file, offset, 6000).unwrap();
            let block = m.block(80).unwrap();
            // SAFETY: `block` and `data()` point into the live private mapping `m`, which spans
            // the header page and at least 5001 data bytes.
            unsafe {
                *block = 1; // the header's page is writable (a private copy)
                assert_eq!(*m.data(), first);
                assert_eq!(*m.data().add(5000), later);
                *m.data() = 42; // copy-on-write: the file is untouched
                assert_eq!(*m.data(), 42);
            }
            assert!(m.block(page_size() + offset as usize % 4096).is_some());
            assert!(m.block(page_size() + offset as usize % 4096 + 1).is_none());
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert!(PrefixedMapping::new(&file, 100, 10).is_err()); // less than a page in
        assert!(PrefixedMapping::new(&file, 4100, 10).is_err()); // unaligned
    }

    #[test]
    fn a_large_malloc_is_a_glibc_mmapped_chunk_that_can_be_backed_by_a_file() {
        assert!(glibc_malloc_in_use());
        let n = 8 << 20;
        // SAFETY: plain malloc/free of a buffer we fill and read.
        unsafe {
            let p = libc::malloc(n) as *mut u8;
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 5, n);
            let (start, len) = glibc_mmapped_chunk(p as usize).expect("an mmapped chunk");
            assert!(start <= p as usize && p as usize + n <= start + len);
            assert!(private_anonymous_covers(start, start + len));
            // Back the page-aligned interior by a file holding the same bytes.
            let page = page_size();
            let lo = (p as usize).div_ceil(page) * page;
            let hi = (p as usize + n) / page * page;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            std::fs::write(&path, vec![5u8; hi - lo]).unwrap();
            let file = File::open(&path).unwrap();
            map_private_over(lo, hi - lo, &file, 0).unwrap();
            assert!(!private_anonymous_covers(start, start + len)); // now file-backed in the middle
            let name = path.display().to_string();
            assert!(private_memory_covers(start, start + len, |p| p.starts_with(&name)));
            assert!(!private_memory_covers(start, start + len, |p| p.starts_with("/elsewhere")));
            assert!((0..n).step_by(4093).all(|i| *p.add(i) == 5));
            *p.add(n / 2) = 9; // copy on write: the file is unchanged
            assert_eq!(*p.add(n / 2), 9);
            assert_eq!(std::fs::read(&path).unwrap()[n / 2 - (lo - p as usize)], 5);
            libc::free(p.cast()); // unmaps the whole region, file pages included
            assert!(read_word(lo).is_none());
            // A small block lives in the heap, not in a chunk of its own.
            let q = libc::malloc(64);
            assert!(glibc_mmapped_chunk(q as usize).is_none());
            libc::free(q);
        }
    }

    #[test]
    fn refilled_memory_is_anonymous_again_with_the_files_bytes() {
        let n = 4 << 20;
        let page = page_size();
        // SAFETY: a malloc'd buffer handed to a file mapping and back, then freed.
        unsafe {
            let p = libc::malloc(n) as *mut u8;
            let (lo, hi) = ((p as usize).div_ceil(page) * page, (p as usize + n) / page * page);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let bytes: Vec<u8> = (0..hi - lo).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            let file = File::open(&path).unwrap();
            map_private_over(lo, hi - lo, &file, 0).unwrap();
            assert!(!private_anonymous_covers(lo, hi));
            refill_anonymous(lo, hi - lo, &file, 0);
            assert!(private_anonymous_covers(lo, hi));
            assert_eq!(std::slice::from_raw_parts(lo as *const u8, hi - lo), &bytes[..]);
            libc::free(p.cast());
        }
        assert!(is_tmpfs(Path::new("/dev/shm")));
    }

    #[test]
    fn random_bytes_differ() {
        assert_ne!(random_bytes(16).unwrap(), random_bytes(16).unwrap());
    }
}
