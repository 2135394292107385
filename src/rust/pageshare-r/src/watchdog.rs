//! What a worker of pageshare's pool does once its master is gone, and the
//! process queries R uses to tell whether processes have ended. A pool
//! worker watches its master (its socket and, where the kernel has them, a
//! pidfd: pageshare-pool's worker.rs) from a thread beside R's; when the
//! master is gone, [`master_gone`] ends the worker at once, also in the
//! middle of a task, instead of computing on with shared memory mapped.
//!
//! That thread never touches R (R is single-threaded): it removes the index
//! entries and R's temporary directory this process made, as a normal exit
//! would, and calls `_exit()`, which runs no atexit handler or destructor
//! while the main thread is still running R code.

#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design

use crate::args::pid_arg;
use crate::boundary::entry;
use crate::r_calls;
use crate::r_sys::*;
use pageshare_core::os;
use std::sync::Mutex;

/// Exit status of a worker that ends because its master is gone (nobody waits
/// for it but init; it tells someone tracing the process why it ended).
const MASTER_GONE_STATUS: i32 = 70;

/// This R session's temporary directory (R_SESSION_TMPDIR, read on the main
/// thread when the worker connects): _exit() skips R's own removal of it.
static SESSION_TMPDIR: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// The master is gone: nobody will read this process's results. Withdraw the
/// index entries of names it registered (as a normal exit does; only files, no
/// R), remove R's temporary directory of this session ([`remember_session_tmpdir`])
/// and end it at once; the kernel frees its segments with its descriptors.
/// Called from a thread beside R's (a pool worker's watch on its master):
/// touches no R.
pub fn master_gone() -> ! {
    let _ = std::panic::catch_unwind(pageshare_core::registry::withdraw_at_exit);
    // R's temporary directory of this session would be left in /tmp too.
    let tmp = SESSION_TMPDIR.lock().map(|t| t.clone()).unwrap_or(None);
    if let Some(dir) = tmp.filter(|d| d.file_name().is_some_and(|n| n.to_string_lossy().starts_with("Rtmp"))) {
        let _ = std::fs::remove_dir_all(dir);
    }
    // SAFETY: _exit() ends the process without running atexit handlers or
    // destructors, so nothing runs concurrently with the main thread's R code.
    unsafe { libc::_exit(MASTER_GONE_STATUS) }
}

/// Notes R's temporary directory of this session (R_SESSION_TMPDIR), for
/// [`master_gone`] to remove. Main thread.
pub fn remember_session_tmpdir() {
    if let Some(dir) = std::env::var_os("R_SESSION_TMPDIR") {
        *SESSION_TMPDIR.lock().unwrap_or_else(|p| p.into_inner()) = Some(dir.into());
    }
}

/// `ps_processes_gone(pids)`: for each pid (integer or double; NA counts as
/// not gone), whether that process has exited (`os::process_exited`: no such
/// process, or a zombie: killed workers are orphans that PID 1 reaps late).
#[no_mangle]
pub extern "C" fn ps_processes_gone_rs(pids: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    entry(|| unsafe {
        let mut scope = r_calls::Protect::new();
        let pids = scope.protect(r_calls::coerce_vector(pids, SEXPTYPE::REALSXP)?)?;
        let n = XLENGTH(pids);
        let out = scope.alloc_vector(SEXPTYPE::LGLSXP, n)?;
        let pids = r_calls::vector_data::<f64>(pids)?;
        for (i, &p) in pids.iter().enumerate() {
            let gone = p.is_finite() && p >= 1.0 && p <= u32::MAX as f64 && os::process_exited(p as u32);
            *LOGICAL(out).add(i) = gone as i32;
        }
        Ok(out)
    })
}

/// `ps_process_start_time(pid)`: the start time of process `pid` (clock ticks
/// since boot, field 22 of /proc/PID/stat) as a double, `NA` if there is no
/// such process.
#[no_mangle]
pub extern "C" fn ps_process_start_time_rs(pid: SEXP) -> SEXP {
    entry(|| {
        let pid = pid_arg(pid, "pid")?;
        // SAFETY: R_NaReal is a constant of R's.
        r_calls::scalar_real(os::start_time(pid).map_or(unsafe { R_NaReal }, |s| s as f64))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    fn sleeper() -> (Child, u32, u64) {
        let child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let pid = child.id();
        let start = os::start_time(pid).expect("start time of the child");
        (child, pid, start)
    }

    fn is_zombie(pid: u32) -> bool {
        matches!(os::process_state(pid), Some('Z') | Some('X'))
    }

    #[test]
    fn state_and_start_after_a_command_name_with_parentheses_and_spaces() {
        let tail = " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 19";
        assert_eq!(os::parse_stat(&format!("123 (R) S{tail}")), Some(('S', 777)));
        assert_eq!(os::parse_stat(&format!("123 (a) Z) (b c) Z{tail}")), Some(('Z', 777)));
        assert_eq!(os::parse_stat("123 (R)"), None);
        assert_eq!(os::parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_runs_and_a_wrong_start_time_or_no_pid_does_not() {
        let me = os::pid();
        let start = os::start_time(me).unwrap();
        assert!(os::is_alive(me, start));
        assert!(!is_zombie(me));
        assert!(!os::is_alive(me, start + 1));
        assert!(!os::is_alive(0, start));
    }

    #[test]
    fn a_killed_unreaped_child_is_a_zombie_and_not_running() {
        let (mut child, pid, start) = sleeper();
        assert!(os::is_alive(pid, start));
        child.kill().unwrap(); // SIGKILL, not reaped yet
        let deadline = Instant::now() + Duration::from_secs(5);
        while !is_zombie(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(is_zombie(pid));
        assert_eq!(os::start_time(pid), Some(start)); // still listed: why the state matters
        assert!(!os::is_alive(pid, start));
        child.wait().unwrap();
        assert!(!is_zombie(pid));
        assert!(!os::is_alive(pid, start));
    }
}
