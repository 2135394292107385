//! Room for segments: free space of a file system, reserving a memory file's
//! pages, and the memory this process (and its cgroups) can still take.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes available to an unprivileged writer in the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Argument("the segment directory contains a NUL byte".into()))?;
    let st = rustix::fs::statvfs(c.as_c_str())
        .map_err(|e| Error::os(format!("cannot read free space of {}", dir.display()), e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Is `dir` on a tmpfs (memory-backed) file system?
pub fn is_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // (f_type is an i64 here, narrower on some architectures)
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(c.as_c_str()).is_ok_and(|st| st.f_type as i64 == TMPFS_MAGIC)
}

/// Reserve every page of `file` up to `len` bytes, so that later writes through a
/// mapping can never hit an unbacked tmpfs page (which would raise SIGBUS).
/// (On libc: glibc's posix_fallocate writes the pages itself where the file
/// system lacks fallocate(2); rustix has only the raw call.)
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

/// How long a measurement of [`available_memory`] answers for new segments.
pub const ROOM_REFRESH: Duration = Duration::from_millis(100);

/// The memory new segments may take, measured at most once per
/// [`ROOM_REFRESH`] while they stay small against it: a measurement reads
/// /proc/meminfo and the files of every cgroup level, a cost comparable to
/// making a small segment, which a steady stream of shares should not pay
/// each time.
#[derive(Debug, Default)]
pub struct Room {
    /// When the last measurement was taken, and what it found.
    measured: Option<(Instant, u64)>,
    /// Bytes granted since then.
    granted: u64,
}

impl Room {
    pub const fn new() -> Room {
        Room { measured: None, granted: 0 }
    }

    /// Grant `needed` bytes at time `now`. Without measuring while the last
    /// measurement is younger than [`ROOM_REFRESH`] and the grants since it,
    /// this one included, stay within half of what it found (the other half
    /// is left for what other processes take meanwhile); otherwise with a new
    /// measurement (`measure`). `Err(free)`, free as just measured, when
    /// `needed` does not fit.
    pub fn grant(&mut self, needed: u64, now: Instant, measure: impl FnOnce() -> u64) -> std::result::Result<(), u64> {
        if let Some((at, free)) = self.measured {
            let recent = now.saturating_duration_since(at) < ROOM_REFRESH;
            if recent && self.granted.saturating_add(needed) <= free / 2 {
                self.granted += needed;
                return Ok(());
            }
        }
        let free = measure();
        self.measured = Some((now, free));
        if needed > free {
            self.granted = 0;
            return Err(free);
        }
        self.granted = needed;
        Ok(())
    }
}

static ROOM: Mutex<Room> = Mutex::new(Room::new());

/// Take room for a new segment of `needed` bytes ([`Room::grant`] on this
/// process's room, measured by [`available_memory`]): `Err(free)` when it
/// does not fit.
pub fn take_room(needed: u64) -> std::result::Result<(), u64> {
    ROOM.lock().unwrap_or_else(|p| p.into_inner()).grant(needed, Instant::now(), available_memory)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bytes_of_tmp_is_positive() {
        assert!(free_bytes(Path::new("/tmp")).unwrap() > 0);
    }

    #[test]
    fn room_measures_again_when_old_or_more_than_half_is_granted() {
        let t0 = Instant::now();
        let mut room = Room::new();
        let mut measured = 0;
        let mut grant = |room: &mut Room, needed: u64, at: Duration, free: u64| {
            room.grant(needed, t0 + at, || {
                measured += 1;
                free
            })
        };
        let ms = Duration::from_millis;
        assert_eq!(grant(&mut room, 10, ms(0), 100), Ok(()));
        assert_eq!(grant(&mut room, 40, ms(1), 0), Ok(()), "within half of 100: no measurement");
        assert_eq!(grant(&mut room, 1, ms(2), 60), Ok(()), "51 > 50: measured again, 60 free");
        assert_eq!(grant(&mut room, 29, ms(3), 0), Ok(()), "30 of 60");
        assert_eq!(grant(&mut room, 1, ROOM_REFRESH + ms(3), 60), Ok(()), "too old: measured again");
        assert_eq!(grant(&mut room, 70, ROOM_REFRESH + ms(4), 65), Err(65), "does not fit: the new figure");
        assert_eq!(grant(&mut room, 65, ROOM_REFRESH + ms(5), 65), Ok(()), "more than half: measured, fits");
        assert_eq!(measured, 5);
    }

    #[test]
    fn dev_shm_is_tmpfs() {
        assert!(is_tmpfs(Path::new("/dev/shm")));
    }
}
