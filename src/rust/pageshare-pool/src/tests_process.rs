//! The pool with real worker processes: this test binary itself, started with
//! the arguments that run only `worker_main` (an ignored test that does
//! nothing unless a pool started it).

use crate::handshake::Hello;
use crate::pool::{Launch, Pool, PoolError, Received};
use crate::wait::{Patience, StopReason};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLEEP: u64 = u64::MAX - 1;
/// The body names a file: the worker ends once it exists.
const DIE_WHEN_FILE: u64 = u64::MAX;

pub(crate) fn never() -> impl FnMut() -> Option<StopReason> {
    || None
}

pub(crate) fn self_as(role: &str) -> Launch {
    Launch {
        program: std::env::current_exe().unwrap(),
        args: ["--exact", role, "--ignored", "--nocapture", "--test-threads=1", "-q"].map(String::from).to_vec(),
        env: vec![("PAGESHARE_POOL_TEST_ROLE".into(), role.into())],
        connect_timeout: Duration::from_secs(30),
    }
}

fn worker_launch() -> Launch {
    self_as("tests_process::worker_main")
}

pub(crate) fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
        || pageshare_core::os::process_state(pid).is_none_or(|s| s == 'Z' || s == 'X')
}

pub(crate) fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// The worker: echoes every message with its tag; SLEEP sleeps for a minute
/// first; DIE_WHEN_FILE ends the process once the file its body names exists
/// (so that the master can queue a message behind it).
#[test]
#[ignore]
fn worker_main() {
    if std::env::var("PAGESHARE_POOL_TEST_ROLE").is_err() {
        return;
    }
    fn gone() -> ! {
        pageshare_core::os::exit_now(0)
    }
    let conn = crate::worker::connect_from_env(gone).expect("connect");
    let mut buf = Vec::new();
    loop {
        let tag = match conn.region.tasks(conn.slot).receive(&mut buf, Patience::default(), &mut never()) {
            Ok(t) => t,
            Err(_) => pageshare_core::os::exit_now(0),
        };
        match tag {
            SLEEP => std::thread::sleep(Duration::from_secs(60)),
            DIE_WHEN_FILE => {
                let path = std::path::PathBuf::from(String::from_utf8(buf.clone()).expect("a path"));
                let until = Instant::now() + Duration::from_secs(60);
                while !path.exists() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
                pageshare_core::os::exit_now(3)
            }
            _ => {}
        }
        conn.region.results(conn.slot).send(tag, &buf, Patience::default(), &mut never()).expect("reply");
    }
}

/// A master that starts two workers, one of them in a long task, writes their
/// pids to the file named by PAGESHARE_POOL_TEST_PIDS, and waits to be killed.
/// With PAGESHARE_POOL_TEST_FORK set it first forks a child that holds the
/// master's ends of the workers' sockets (as `mcparallel()` does) and idles;
/// its pid comes third in the file.
#[test]
#[ignore]
fn master_main() {
    let Ok(file) = std::env::var("PAGESHARE_POOL_TEST_PIDS") else { return };
    let pool = Pool::start(2, 4096, worker_launch()).expect("start");
    pool.send(0, SLEEP, b"", Patience::default(), &mut never()).unwrap();
    let mut pids = format!("{} {}", pool.pid(0), pool.pid(1));
    if std::env::var("PAGESHARE_POOL_TEST_FORK").is_ok() {
        // SAFETY: the child calls only async-signal-safe functions (alarm,
        // pause, _exit) before it ends, as a fork of a threaded process must.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above; the alarm ends it should nobody kill it.
            unsafe {
                libc::alarm(120);
                loop {
                    libc::pause();
                }
            }
        }
        assert!(child > 0, "fork failed");
        pids += &format!(" {child}");
    }
    std::fs::write(file.clone() + ".tmp", pids).unwrap();
    std::fs::rename(file.clone() + ".tmp", &file).unwrap();
    std::thread::sleep(Duration::from_secs(120));
}

fn round_trip(pool: &mut Pool, slot: u64, tag: u64, body: &[u8]) -> Received {
    pool.send(slot, tag, body, Patience::default(), &mut never()).unwrap();
    let mut out = Vec::new();
    let got = pool.receive_any(&mut out, Patience::default(), &mut never()).unwrap();
    if let Received::Message { .. } = got {
        assert_eq!(out, body);
    }
    got
}

#[test]
fn workers_answer_on_their_slots_and_are_gone_after_stop() {
    let mut pool = Pool::start(3, 8192, worker_launch()).unwrap();
    let pids: Vec<u32> = (0..3).map(|s| pool.pid(s)).collect();
    assert!(pids.iter().all(|&p| p > 0 && !gone(p)));
    for slot in 0..3 {
        let body = vec![slot as u8; 20_000]; // (larger than the ring: streamed)
        assert_eq!(round_trip(&mut pool, slot, 100 + slot, &body), Received::Message { slot, tag: 100 + slot });
    }
    pool.stop();
    assert!(pids.iter().all(|&p| gone(p)), "every worker reaped by stop()");
}

#[test]
fn replies_larger_than_the_ring_arrive_whole_through_polls_that_give_up() {
    // Two workers stream replies of many frames side by side while the
    // master polls with a deadline that ends most of its waits in the middle
    // of one: each reply still arrives whole, from its own slot.
    let mut pool = Pool::start(2, 4096, worker_launch()).unwrap();
    let bodies: Vec<Vec<u8>> = (0..2u8).map(|s| (0..300_000u32).map(|i| (i % 241) as u8 ^ s).collect()).collect();
    for slot in 0..2 {
        pool.send(slot, 200 + slot, &bodies[slot as usize], Patience::default(), &mut never()).unwrap();
    }
    let mut got = Vec::new();
    let mut out = Vec::new();
    let mut polls = 0u64;
    while got.len() < 2 {
        polls += 1;
        // (a deadline already past: a wait for a frame not yet written ends after
        // its first spins)
        let mut give_up = || Some(StopReason::TimedOut);
        match pool.receive_any(&mut out, Patience { spin: Duration::from_secs(1), ..Patience::default() }, &mut give_up)
        {
            Ok(Received::Message { slot, tag }) => {
                assert_eq!(tag, 200 + slot);
                assert!(out == bodies[slot as usize], "reply of slot {slot} arrived whole");
                got.push(slot);
            }
            Ok(other) => panic!("{other:?}"),
            Err(crate::ring::RingError::Stopped(StopReason::TimedOut)) => {}
            Err(e) => panic!("{e:?} after {polls} polls"),
        }
    }
    got.sort();
    assert_eq!(got, vec![0, 1]);
    pool.stop();
}

#[test]
fn a_worker_that_dies_mid_task_is_reported_and_replaced() {
    let mut pool = Pool::start(2, 4096, worker_launch()).unwrap();
    let old = pool.pid(0);
    // (the worker ends only once the second message is surely queued behind
    // the first: were it gone before, that send would find it closed)
    let gate = std::env::temp_dir().join(format!("pageshare-pool-test-{}-gate", std::process::id()));
    let _ = std::fs::remove_file(&gate);
    pool.send(0, DIE_WHEN_FILE, gate.to_str().unwrap().as_bytes(), Patience::default(), &mut never()).unwrap();
    pool.send(0, 77, b"never begun", Patience::default(), &mut never()).unwrap();
    std::fs::write(&gate, b"").unwrap();
    let mut out = Vec::new();
    let got = pool.receive_any(&mut out, Patience::default(), &mut never()).unwrap();
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(got, Received::Died { slot: 0, pid: old, damaged: None });
    assert_eq!(pool.replace(0).unwrap(), vec![77]);
    let new = pool.pid(0);
    assert!(new != old && new > 0);
    assert_eq!(round_trip(&mut pool, 0, 5, b"after"), Received::Message { slot: 0, tag: 5 });
    assert_eq!(round_trip(&mut pool, 1, 6, b"other"), Received::Message { slot: 1, tag: 6 });
}

#[test]
fn a_worker_killed_from_outside_wakes_a_waiting_master() {
    let mut pool = Pool::start(2, 4096, worker_launch()).unwrap();
    let pid = pool.pid(1);
    pool.send(1, SLEEP, b"", Patience::default(), &mut never()).unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        pageshare_core::os::kill_process(pid);
    });
    let mut out = Vec::new();
    let got = pool.receive_any(&mut out, Patience::default(), &mut never()).unwrap();
    killer.join().unwrap();
    assert_eq!(got, Received::Died { slot: 1, pid, damaged: None });
    assert!(eventually(|| gone(pid)));
}

#[test]
fn a_worker_that_cannot_start_is_an_error_with_its_last_words() {
    let launch = Launch {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo cannot load the package >&2; exit 3".into()],
        env: vec![],
        connect_timeout: Duration::from_secs(30),
    };
    match Pool::start(2, 4096, launch) {
        Err(PoolError::Start { why, stderr, .. }) => {
            assert!(why.contains("exited"), "{why}");
            assert!(stderr.contains("cannot load the package"), "{stderr}");
        }
        other => panic!("expected a start error, got {:?}", other.map(|_| ())),
    }
    let missing = Launch { program: "/nonexistent/Rscript".into(), ..worker_launch() };
    assert!(matches!(Pool::start(1, 4096, missing), Err(PoolError::Start { .. })));
}

#[test]
fn a_worker_of_another_version_is_refused_at_start_with_both_versions() {
    let mut launch = worker_launch();
    launch.env.push((crate::worker::ENV_TEST_VERSION.into(), "0.0.0-other".into()));
    match Pool::start(2, 4096, launch) {
        Err(PoolError::Start { why, .. }) => {
            assert!(why.contains("pageshare 0.0.0-other"), "{why}");
            assert!(why.contains(&format!("pageshare {}", crate::wire::PACKAGE_VERSION)), "{why}");
        }
        other => panic!("expected a start error, got {:?}", other.map(|_| ())),
    }
}

/// Starts `master_main` (forking a child that holds its sockets when `fork`),
/// kills it, and returns how long its workers outlived it (None: past 20 s).
fn workers_outlive_a_killed_master(fork: bool) -> Option<Duration> {
    let dir = std::env::temp_dir().join(format!("pageshare-pool-test-{}-{fork}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pids");
    let launch = self_as("tests_process::master_main");
    let mut cmd = std::process::Command::new(&launch.program);
    cmd.args(&launch.args).env("PAGESHARE_POOL_TEST_PIDS", &file).stdout(std::process::Stdio::null());
    if fork {
        cmd.env("PAGESHARE_POOL_TEST_FORK", "1");
    }
    let mut master = cmd.spawn().unwrap();
    assert!(eventually(|| file.exists()), "the master started its workers");
    let pids: Vec<u32> = std::fs::read_to_string(&file).unwrap().split(' ').map(|p| p.parse().unwrap()).collect();
    let (workers, forked) = pids.split_at(2);
    assert!(pids.iter().all(|&p| !gone(p)));
    master.kill().unwrap();
    let killed = Instant::now();
    master.wait().unwrap();
    let all_gone = eventually(|| workers.iter().all(|&p| gone(p)));
    let took = killed.elapsed();
    for &p in workers.iter().chain(forked) {
        if !gone(p) {
            pageshare_core::os::kill_process(p); // (ours: started by this test)
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    all_gone.then_some(took)
}

#[test]
fn workers_die_with_their_master_even_in_a_long_task() {
    assert!(workers_outlive_a_killed_master(false).is_some(), "workers outlived their master");
}

#[test]
fn workers_die_with_their_master_while_a_fork_of_it_holds_their_sockets() {
    // (the fork keeps the master's ends open: only the master process's own
    // end tells the workers)
    let took = workers_outlive_a_killed_master(true).expect("workers outlived their master");
    assert!(took < Duration::from_secs(5), "workers outlived their master by {took:?}");
}

/// Connections to the pool's address while it starts, from a process that is
/// none of its workers: `n` of them, silent, half a hello, or a wrong one,
/// all kept open. Returns how many were made before `started` was set.
fn knock_while_starting(n: usize, started: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let prefix = format!("@pageshare-pool-{}-", std::process::id());
        let until = Instant::now() + Duration::from_secs(20);
        let address = loop {
            let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
            if let Some(name) = table.split_whitespace().find(|w| w.starts_with(&prefix)) {
                break Some(name[1..].to_string());
            }
            if Instant::now() > until || started.load(Ordering::SeqCst) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let Some(address) = address else { return 0 };
        let mut held = Vec::new();
        for i in 0..n {
            let Ok(s) = pageshare_core::os::connect_abstract(&address) else { break };
            let _ = match i % 3 {
                0 => Ok(()),
                1 => pageshare_core::os::send_all(&s, &Hello::ours(0).encode(&[0u8; 32]).unwrap()[..20]),
                _ => pageshare_core::os::send_all(&s, &Hello::ours(0).encode(&[1u8; 32]).unwrap()),
            };
            if !started.load(Ordering::SeqCst) {
                held.push(s);
            }
        }
        let made = held.len();
        while !started.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        made
    })
}

#[test]
fn silent_and_hostile_connections_do_not_hold_up_a_start() {
    // Workers that take a moment to connect, so that the connections come first.
    let mut launch = worker_launch();
    let exe = launch.program.to_string_lossy().into_owned();
    let args: Vec<String> = launch.args.iter().map(|a| format!("'{a}'")).collect();
    launch.args = vec!["-c".into(), format!("sleep 0.5; exec '{exe}' {}", args.join(" "))];
    launch.program = "/bin/sh".into();
    let started = Arc::new(AtomicBool::new(false));
    let knocker = knock_while_starting(30, Arc::clone(&started));
    let t = Instant::now();
    let pool = Pool::start(2, 4096, launch);
    let took = t.elapsed();
    started.store(true, Ordering::SeqCst);
    let made = knocker.join().unwrap();
    let mut pool = pool.expect("the pool starts despite the connections");
    assert_eq!(made, 30, "the connections were made while the pool started");
    // (0.5 s of the workers' own delay; each connection held up the start by
    // seconds when they were heard one at a time)
    assert!(took < Duration::from_secs(5), "the start took {took:?}");
    assert_eq!(round_trip(&mut pool, 1, 9, b"fine"), Received::Message { slot: 1, tag: 9 });
}

/// Round trips of an empty message to one worker (run by hand:
/// cargo test --release -p pageshare-pool round_trip_timing -- --ignored --nocapture).
#[test]
#[ignore]
fn round_trip_timing() {
    let mut pool = Pool::start(1, 4096, worker_launch()).unwrap();
    let mut out = Vec::new();
    for gap_us in [0u64, 1, 2, 5, 10, 20, 40, 100] {
        let mut times = Vec::new();
        for i in 0..2000u64 {
            let t = Instant::now();
            pool.send(0, i, b"", Patience::default(), &mut never()).unwrap();
            pool.receive_any(&mut out, Patience::default(), &mut never()).unwrap();
            times.push(t.elapsed());
            let until = Instant::now() + Duration::from_micros(gap_us);
            while Instant::now() < until {}
        }
        times.sort();
        println!("gap {gap_us} us: median {:?}, p90 {:?}", times[1000], times[1800]);
    }
}
