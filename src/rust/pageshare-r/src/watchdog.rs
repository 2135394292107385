//! A worker's watchdog on its master. A PSOCK worker notices that its master is
//! gone only when it next reads from the master's socket, that is after its
//! current task: a worker killed out from under (kill -9, SIGTERM, a crash)
//! would otherwise compute on for as long as the task lasts, holding its
//! shared-memory mappings. `ps_watch_master()` starts a thread that watches the
//! master process itself (a pidfd, or its pid and start time looked up every
//! [`PERIOD`]; never its socket, which a process the master forked may hold
//! open after the master is gone) and ends the process as soon as it is gone.
//!
//! The thread never touches R (R is single-threaded): it reads /proc, removes
//! the segments this process owns, as a normal exit would, and calls `_exit()`,
//! which runs no atexit handler or destructor while the main thread is still
//! running R code.

#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design

use crate::args::pid_arg;
use crate::boundary::{entry, RError};
use crate::r_calls;
use crate::r_sys::*;
use pageshare_core::os;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How often the target is asked again (and, without pidfds, how often the
/// master is looked up: a gone master is then noticed within this).
pub const PERIOD: Duration = Duration::from_millis(100);

/// Exit status of a worker that ends because its master is gone (nobody waits
/// for it but init; it tells someone tracing the process why it ended).
const MASTER_GONE_STATUS: i32 = 70;

/// The process watched, and the pid of the process whose watchdog thread runs
/// (a fork has no thread: the child starts its own).
struct Watch {
    target: Option<(u32, u64)>,
    thread_of: u32,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch { target: None, thread_of: 0 });

/// This R session's temporary directory (R_SESSION_TMPDIR, read on the main
/// thread when the watch starts): _exit() skips R's own removal of it.
static SESSION_TMPDIR: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

fn watch_state() -> MutexGuard<'static, Watch> {
    // Nothing panics while holding the lock; should it, the state is still whole.
    WATCH.lock().unwrap_or_else(|p| p.into_inner())
}

/// Returns once the process that `target()` names is no longer running
/// (`target()` is asked every `period`: it may change; `None` watches
/// nothing). The process is watched through a pidfd where the kernel has
/// them, so its end is seen at once, else looked up in /proc every `period`.
pub fn wait_until_gone(target: impl Fn() -> Option<(u32, u64)>, period: Duration) {
    let mut watched: Option<((u32, u64), Option<os::ProcessWatch>)> = None;
    loop {
        let now = target();
        if now.is_none() {
            watched = None;
            std::thread::sleep(period);
            continue;
        }
        if watched.as_ref().map(|(t, _)| *t) != now {
            let (pid, start) = now.expect("checked above");
            watched = Some(((pid, start), os::ProcessWatch::open(pid, start)));
        }
        let gone = match &watched {
            // (no watch: the process was not running when it was opened)
            Some((_, None)) => true,
            Some((_, Some(w))) => w.wait(period),
            None => false,
        };
        // (the target may have changed while the old one ended)
        if gone && target() == now {
            return;
        }
    }
}

/// Watch the process (`pid`, `start`) from a background thread of this process
/// and end this process once it is gone. The thread is started once per
/// process; a later call changes what it watches. `Ok(false)` (nothing
/// watched) when `pid` is this process, or when /proc cannot tell this
/// process's own start time (every master would look gone).
pub fn watch(pid: u32, start: u64) -> std::io::Result<bool> {
    let me = os::pid();
    if pid == 0 || pid == me || os::start_time(me).is_none() {
        return Ok(false);
    }
    let mut w = watch_state();
    w.target = Some((pid, start));
    if w.thread_of != me {
        std::thread::Builder::new().name("pageshare-watchdog".into()).spawn(|| {
            wait_until_gone(|| watch_state().target, PERIOD);
            master_gone()
        })?;
        w.thread_of = me;
    }
    Ok(true)
}

/// The master is gone: nobody will read this process's results. Withdraw the
/// index entries of names it registered (as a normal exit does; only files, no
/// R), remove R's temporary directory of this session ([`remember_session_tmpdir`])
/// and end it at once; the kernel frees its segments with its descriptors.
/// Called from a thread beside R's (this watchdog's, or a pool worker's
/// watch on its socket): touches no R.
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

/// `ps_watch_master(pid, start_time)`: start (or retarget) this process's
/// watchdog on the process `pid` whose start time (clock ticks since boot, as
/// `ps_process_start_time()` gives it) is `start_time`. Returns `TRUE` if it
/// is watched, `FALSE` if not (`pid` is this process, or no /proc).
#[no_mangle]
pub extern "C" fn ps_watch_master_rs(pid: SEXP, start_time: SEXP) -> SEXP {
    entry(|| {
        let pid = pid_arg(pid, "pid")?;
        let start = r_calls::as_real(start_time)?;
        // Start times are counts of clock ticks: exact in a double up to 2^53.
        if !(start.is_finite() && start >= 0.0 && start < 2f64.powi(53) && start.fract() == 0.0) {
            return Err(RError::argument("`start_time` must be a process start time (a whole number >= 0)"));
        }
        remember_session_tmpdir();
        let watched =
            watch(pid, start as u64).map_err(|e| RError::system(format!("cannot start the watchdog thread: {e}")))?;
        r_calls::scalar_logical(watched as i32)
    })
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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

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

    #[test]
    fn waiting_ends_soon_after_the_target_goes_and_follows_a_new_target() {
        let (mut first, pid1, start1) = sleeper();
        let (mut second, pid2, start2) = sleeper();
        let target = Arc::new(Mutex::new(Some((pid1, start1))));
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (target, done) = (target.clone(), done.clone());
            std::thread::spawn(move || {
                wait_until_gone(|| *target.lock().unwrap(), Duration::from_millis(10));
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!done.load(Ordering::SeqCst));
        // Retarget, then end the first one: the waiter keeps waiting on the second.
        *target.lock().unwrap() = Some((pid2, start2));
        first.kill().unwrap();
        first.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!done.load(Ordering::SeqCst));
        let killed = Instant::now();
        second.kill().unwrap(); // a zombie until the wait below
        waiter.join().unwrap();
        assert!(killed.elapsed() < Duration::from_secs(2));
        second.wait().unwrap();
    }

    /// Run as a child by the next test (with PAGESHARE_TEST_MASTER set): watch
    /// that process, then idle as a long task would.
    #[test]
    #[ignore]
    fn child_watching_a_master() {
        let Ok(target) = std::env::var("PAGESHARE_TEST_MASTER") else { return };
        let (pid, start) = target.split_once(':').unwrap();
        assert!(watch(pid.parse().unwrap(), start.parse().unwrap()).unwrap());
        std::thread::sleep(Duration::from_secs(30));
    }

    #[test]
    fn a_watching_process_exits_soon_after_its_master_is_killed() {
        let (mut master, pid, start) = sleeper();
        let mut worker = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "watchdog::tests::child_watching_a_master", "--ignored", "--nocapture"])
            .env("PAGESHARE_TEST_MASTER", format!("{pid}:{start}"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert!(worker.try_wait().unwrap().is_none(), "the worker ended while its master ran");
        let killed = Instant::now();
        master.kill().unwrap(); // left a zombie: the worker must see it as gone
        let deadline = killed + Duration::from_secs(5);
        let status = loop {
            if let Some(s) = worker.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if status.is_none() {
            let _ = worker.kill();
        }
        let _ = worker.wait();
        master.wait().unwrap();
        let status = status.expect("the worker outlived its master by 5 s");
        assert_eq!(status.code(), Some(MASTER_GONE_STATUS));
        assert!(killed.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn watching_this_process_or_pid_zero_is_refused() {
        let me = os::pid();
        assert!(!watch(me, os::start_time(me).unwrap()).unwrap());
        assert!(!watch(0, 0).unwrap());
        assert!(watch_state().target.is_none());
    }
}
