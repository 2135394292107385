//! Process identity (pid, start time, state, user), whether other processes
//! can open this one's descriptors, and randomness.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Read;

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// This process's parent's id.
pub fn parent_pid() -> u32 {
    // SAFETY: getppid() takes nothing and cannot fail.
    unsafe { libc::getppid() as u32 }
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

    #[test]
    fn random_bytes_differ() {
        assert_ne!(random_bytes(16).unwrap(), random_bytes(16).unwrap());
    }
}
