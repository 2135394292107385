//! Process identity (pid, start time, state, user), watching another process
//! end, whether other processes can open this one's descriptors, and
//! randomness.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Read;

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// This process's parent's id.
pub fn parent_pid() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_pid() as u32)
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
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else { return false };
    // (signal 0 sends nothing; it only asks whether the process exists)
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}

/// A process this one ends with, as (pid, start time): see [`note_ends_with`].
static ENDS_WITH: std::sync::OnceLock<(u32, u64)> = std::sync::OnceLock::new();

/// Note that this process ends as soon as the process (pid, start time) does
/// (a pool worker, which a thread ends when its master's socket closes):
/// [`is_alive_or_outlived`] then answers for it without reading /proc.
pub fn note_ends_with(pid: u32, start: u64) {
    let _ = ENDS_WITH.set((pid, start));
}

/// [`is_alive`], except that a process this one ends with (see
/// [`note_ends_with`]) counts as running without a look: for callers that
/// next open one of its descriptors through /proc, which fails should it
/// have ended a moment ago. (Not for watching a process end.)
pub fn is_alive_or_outlived(pid: u32, start: u64) -> bool {
    ENDS_WITH.get() == Some(&(pid, start)) || is_alive(pid, start)
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

/// A watch on another process's end. Where the kernel has pidfds (Linux >=
/// 5.3) it holds one: the descriptor becomes readable the moment the process
/// exits (a zombie has exited) and can never come to name a later process that
/// reuses the pid. Elsewhere it looks the process up by pid and start time.
pub struct ProcessWatch {
    pid: u32,
    start: u64,
    pidfd: Option<std::os::fd::OwnedFd>,
}

/// How often a watch without a pidfd looks the process up.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_millis(100);

impl ProcessWatch {
    /// Watches the process (`pid`, `start`); None when no such process runs
    /// now (ended, a zombie, or its pid is another process's by now).
    pub fn open(pid: u32, start: u64) -> Option<ProcessWatch> {
        Self::open_with(pid, start, true)
    }

    /// As [`ProcessWatch::open`], without a pidfd (what a kernel without
    /// `pidfd_open` gets): for tests of that path.
    pub fn open_polling(pid: u32, start: u64) -> Option<ProcessWatch> {
        Self::open_with(pid, start, false)
    }

    fn open_with(pid: u32, start: u64, pidfd: bool) -> Option<ProcessWatch> {
        if pid == 0 || pid > i32::MAX as u32 {
            return None;
        }
        let pidfd = if pidfd { pidfd_open(pid) } else { None };
        let watch = ProcessWatch { pid, start, pidfd };
        // (checked after the pidfd is open: were the pid reused before, the
        // start time differs; reused after, the pidfd still names the old one)
        if !is_alive(pid, start) || watch.ended() {
            return None;
        }
        Some(watch)
    }

    /// The watched process's id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Does this watch hold a pidfd (or look the process up by its pid)?
    pub fn has_pidfd(&self) -> bool {
        self.pidfd.is_some()
    }

    /// The pidfd, for a caller that polls it with descriptors of its own
    /// (readable once the process has ended); None without one.
    pub fn pidfd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.pidfd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Has the process ended? A zombie has.
    pub fn ended(&self) -> bool {
        match self.pidfd() {
            Some(fd) => poll_in(&mut [fd], 0).first().copied().unwrap_or(false),
            None => !is_alive(self.pid, self.start),
        }
    }

    /// Waits until the process has ended, at most `timeout`; whether it has.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            if self.ended() {
                return true;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.pidfd() {
                Some(fd) => {
                    poll_in(&mut [fd], left.as_millis().clamp(1, i32::MAX as u128) as i32);
                }
                None => std::thread::sleep(left.min(WATCH_POLL)),
            }
        }
    }

    /// How long a caller polling [`ProcessWatch::pidfd`] with its own
    /// descriptors may wait before it must ask [`ProcessWatch::ended`] again:
    /// forever (-1) with a pidfd, else the lookup period (milliseconds).
    pub fn poll_timeout_ms(&self) -> i32 {
        if self.pidfd.is_some() {
            -1
        } else {
            WATCH_POLL.as_millis() as i32
        }
    }
}

/// A pidfd of process `pid`, or None (no such process; a kernel older than
/// 5.3 or a seccomp filter refuses the call).
fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    // (pidfd_open makes its descriptors close-on-exec)
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// poll(2) for input on `fds` for at most `timeout_ms` (-1: no limit): for
/// each, whether it is readable or hung up (an error of poll itself, EINTR
/// included, reports none). (On libc: it takes descriptor numbers, and
/// rustix's poll takes descriptors borrowed as open.)
pub fn poll_in(fds: &mut [std::os::fd::RawFd], timeout_ms: i32) -> Vec<bool> {
    let mut p: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: `p` is a live array of `p.len()` pollfds for the duration of the call.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if rc <= 0 {
        return vec![false; p.len()];
    }
    p.iter().map(|q| q.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0).collect()
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
    rustix::process::geteuid().as_raw()
}

/// Can other processes of this user open this process's descriptors through
/// /proc/<pid>/fd? Not when the process is not dumpable (prctl, a change of
/// credentials): then only a process with CAP_SYS_PTRACE can, so what this
/// process shares would reach an ordinary receiver as an unopenable handle.
pub fn descriptors_openable_by_others() -> bool {
    matches!(rustix::process::dumpable_behavior(), Ok(rustix::process::DumpableBehavior::Dumpable))
}

/// `n` bytes from the kernel's random source, for unguessable names and secrets.
pub fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::os("cannot read /dev/urandom", e))?;
    Ok(buf)
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

    fn ends_soon_after_a_kill(polling: bool) {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let id = child.id();
        let start = start_time(id).unwrap();
        let watch = if polling { ProcessWatch::open_polling(id, start) } else { ProcessWatch::open(id, start) }
            .expect("a running child is watched");
        assert_eq!(watch.has_pidfd(), !polling);
        assert!(!watch.ended());
        assert!(!watch.wait(std::time::Duration::from_millis(50)));
        child.kill().unwrap(); // a zombie until reaped below: it has ended
        let t = std::time::Instant::now();
        assert!(watch.wait(std::time::Duration::from_secs(10)));
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        assert!(watch.ended());
        child.wait().unwrap();
        assert!(watch.ended());
        assert!(ProcessWatch::open(id, start).is_none());
    }

    #[test]
    fn a_watch_sees_a_killed_process_end_zombie_or_reaped() {
        ends_soon_after_a_kill(false);
    }

    #[test]
    fn a_watch_without_a_pidfd_sees_it_too() {
        ends_soon_after_a_kill(true);
    }

    #[test]
    fn no_watch_on_a_wrong_start_time_or_no_pid() {
        let me = pid();
        let st = start_time(me).unwrap();
        assert!(ProcessWatch::open(me, st).is_some());
        assert!(ProcessWatch::open(me, st + 1).is_none());
        assert!(ProcessWatch::open_polling(me, st + 1).is_none());
        assert!(ProcessWatch::open(0, 0).is_none());
    }

    #[test]
    fn ids_and_dumpable_match_proc() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let field = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace().nth(2).or(line.split_whitespace().nth(1)).unwrap().parse::<u32>().unwrap()
        };
        assert_eq!(euid(), field("Uid:"));
        assert_eq!(parent_pid(), status.lines().find_map(|l| l.strip_prefix("PPid:")).unwrap().trim().parse().unwrap());
        assert!(descriptors_openable_by_others(), "a test process is dumpable");
    }

    #[test]
    fn random_bytes_differ() {
        assert_ne!(random_bytes(16).unwrap(), random_bytes(16).unwrap());
    }
}
