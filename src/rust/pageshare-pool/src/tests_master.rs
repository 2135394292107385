//! The master's state machine ([`Master`]) with real worker processes that
//! speak the wire: dispatch over workers, the word that lets a worker let go
//! of its results, a worker's death mid-task (what it began fails, what it
//! never read goes again or back to its owner), replies out of step,
//! conditions, damaged tags, waits given up, and a map's chunks
//! ([`MapPlan`]) over the workers while one of them dies. (A master's death:
//! tests_process.rs.)

use crate::dispatch::FreeSlot;
use crate::map_plan::{Chunk, MapPlan};
use crate::master::{Master, Submitted};
use crate::pool::Pool;
use crate::tests_process::{eventually, gone, never, self_as};
use crate::wait::{Patience, StopReason};
use crate::wire::{Event, Header, RELEASE};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const RING: u64 = 8192;

/// The worker: runs each task its payload names, and replies with the wire.
/// "die" ends the process at once; "die-when:<path>" once the file exists;
/// "reply-when:<path>" replies once the file exists;
/// "condition" relays a condition, then replies; "wrong-number" replies
/// with another number; "bad-tag" replies with a flag only masters send;
/// "garbage" publishes bytes no worker writes into its result ring;
/// "last-words" writes a line to its standard error and ends at once;
/// anything else is echoed with "release=<flag>" and this worker's pid.
#[test]
#[ignore]
fn wire_worker_main() {
    if std::env::var("PAGESHARE_POOL_TEST_ROLE").is_err() {
        return;
    }
    fn gone() -> ! {
        pageshare_core::os::exit_now(0)
    }
    let conn = crate::worker::connect_from_env(gone).expect("connect");
    let (tasks, results) = (conn.region.tasks(conn.slot), conn.region.results(conn.slot));
    let mut buf = Vec::new();
    loop {
        let Ok(tag) = tasks.receive(&mut buf, Patience::default(), &mut never()) else {
            pageshare_core::os::exit_now(0)
        };
        let task = Header::decode_task(tag).expect("a task of the wire");
        let body = String::from_utf8(buf.clone()).expect("text");
        let reply =
            |tag: u64, bytes: &[u8]| results.send(tag, bytes, Patience::default(), &mut never()).expect("reply");
        let ok = Header::reply(task.number, task.plain).encode().unwrap();
        match body.as_str() {
            "die" => pageshare_core::os::exit_now(3),
            "condition" => {
                reply(Header::condition(task.number).encode().unwrap(), b"a condition");
                reply(ok, b"after the condition");
            }
            "wrong-number" => reply(Header::reply(task.number + 1000, task.plain).encode().unwrap(), b""),
            "bad-tag" => reply(task.number | RELEASE, b""),
            "garbage" => results.publish_garbage_for_tests(),
            "last-words" => {
                eprintln!("my last words: pid={}", std::process::id());
                pageshare_core::os::exit_now(3)
            }
            _ => {
                if let Some(path) = body.strip_prefix("die-when:") {
                    let until = Instant::now() + Duration::from_secs(60);
                    while !Path::new(path).exists() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    pageshare_core::os::exit_now(3)
                }
                if let Some(path) = body.strip_prefix("reply-when:") {
                    let until = Instant::now() + Duration::from_secs(60);
                    while !Path::new(path).exists() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                let text = format!("{body} release={} pid={}", task.release, std::process::id());
                reply(ok, text.as_bytes());
            }
        }
    }
}

fn master(workers: u64, depth: usize) -> Master<usize> {
    let pool = Pool::start(workers, RING, self_as("tests_master::wire_worker_main")).expect("start");
    Master::new(pool, RING, depth, 2, Duration::ZERO)
}

fn submit(m: &mut Master<usize>, slot: Option<usize>, body: &str, plain: bool, what: usize) -> u64 {
    match m.submit(slot, body.as_bytes(), plain, what, &mut never()).unwrap() {
        Submitted::Number(n) => n,
        other => panic!("not sent: {other:?}"),
    }
}

fn next(m: &mut Master<usize>) -> Event<usize> {
    let mut buf = Vec::new();
    m.next_event(&mut buf, false, &mut never()).unwrap()
}

fn text(payload: &[u8]) -> String {
    String::from_utf8(payload.to_vec()).unwrap()
}

/// A file that does not exist yet, in a directory of this test's own.
fn trigger(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pageshare-master-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("go")
}

#[test]
fn tasks_spread_over_the_workers_and_each_reply_finds_its_what() {
    let mut m = master(2, 2);
    let pids = [m.pool().pid(0), m.pool().pid(1)];
    for i in 0..40 {
        submit(&mut m, None, &format!("task {i}"), true, i);
    }
    let mut seen = [false; 40];
    let mut by = std::collections::HashSet::new();
    loop {
        match next(&mut m) {
            Event::Reply { what, payload, plain, .. } => {
                assert!(plain);
                let t = text(&payload);
                assert!(t.starts_with(&format!("task {what} ")), "{t} for {what}");
                assert!(!seen[what], "{what} answered twice");
                seen[what] = true;
                by.insert(t.rsplit("pid=").next().unwrap().parse::<u32>().unwrap());
            }
            Event::Idle => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(seen.iter().all(|&s| s), "every task answered");
    assert_eq!(by, pids.into_iter().collect(), "both workers had tasks");
    assert!(m.stop().is_empty());
}

#[test]
fn a_reply_that_may_hold_handles_holds_back_waiting_messages_and_the_release_word() {
    let go = trigger("release");
    let mut m = master(1, 2);
    submit(&mut m, None, &format!("reply-when:{}", go.display()), false, 0);
    submit(&mut m, None, "b", false, 1);
    submit(&mut m, None, "c", false, 2);
    assert_eq!(m.dispatch().waiting(), 1, "depth 2: the third waits");
    std::fs::write(&go, b"").unwrap();
    let Event::Reply { what: 0, payload, plain: false, .. } = next(&mut m) else { panic!("a's reply first") };
    assert_eq!(text(&payload).split(' ').nth(1), Some("release=true"), "a went to an idle worker");
    // (a's reply may hold handles: until it is read, c stays)
    assert_eq!(m.dispatch().waiting(), 1);
    m.dispatch_now(&mut never()).unwrap();
    assert_eq!(m.dispatch().waiting(), 0);
    let Event::Reply { what: 1, payload, .. } = next(&mut m) else { panic!("b's reply") };
    assert_eq!(text(&payload).split(' ').nth(1), Some("release=false"), "b went while a was out");
    let Event::Reply { what: 2, .. } = next(&mut m) else { panic!("c's reply") };
    assert_eq!(next(&mut m), Event::Idle);
    m.stop();
    std::fs::remove_dir_all(go.parent().unwrap()).unwrap();
}

#[test]
fn a_worker_dying_mid_task_fails_what_it_began_and_requeues_what_it_never_read() {
    let go = trigger("death");
    let later = go.with_file_name("later");
    let mut m = master(2, 2);
    let (dying, other) = (m.pool().pid(0), m.pool().pid(1));
    // (the other worker full, so that the message for any worker goes to the
    // dying one, behind the task it dies in)
    submit(&mut m, Some(1), &format!("reply-when:{}", later.display()), true, 20);
    submit(&mut m, Some(1), &format!("reply-when:{}", later.display()), true, 21);
    submit(&mut m, Some(0), &format!("die-when:{}", go.display()), true, 10);
    submit(&mut m, None, "kept", true, 11);
    submit(&mut m, Some(0), "for slot 0", true, 12);
    assert_eq!(m.dispatch().load(0), 3);
    std::fs::write(&go, b"").unwrap();
    match next(&mut m) {
        Event::Died { slot: 0, pid, begun, unread, waiting, damaged: None, .. } => {
            assert_eq!(pid, dying);
            assert_eq!(begun, vec![10], "the task it ran fails");
            assert_eq!(unread, vec![12], "a task for its slot it never read goes back to its owner");
            assert_eq!(waiting, 1, "the one for any worker waits for the live worker");
        }
        other => panic!("expected its death, got {other:?}"),
    }
    assert!(eventually(|| gone(dying)));
    std::fs::write(&later, b"").unwrap();
    for what in [20, 21] {
        let Event::Reply { what: w, .. } = next(&mut m) else { panic!("the other worker's replies") };
        assert_eq!(w, what);
    }
    let Event::Reply { what: 11, payload, .. } = next(&mut m) else { panic!("the kept task ran elsewhere") };
    assert!(text(&payload).ends_with(&format!("pid={other}")));
    assert_eq!(next(&mut m), Event::Idle);
    // A new worker takes the slot, and runs what is sent to it.
    m.fill(0, &mut never()).unwrap().unwrap();
    let fresh = m.pool().pid(0);
    assert!(fresh != dying && fresh > 0);
    submit(&mut m, Some(0), "again", true, 13);
    let Event::Reply { what: 13, payload, .. } = next(&mut m) else { panic!("the new worker answers") };
    assert!(text(&payload).ends_with(&format!("pid={fresh}")));
    m.stop();
    std::fs::remove_dir_all(go.parent().unwrap()).unwrap();
}

#[test]
fn a_dead_worker_s_last_words_on_its_standard_error_come_with_its_death() {
    let mut m = master(1, 1);
    let pid = m.pool().pid(0);
    submit(&mut m, Some(0), "last-words", true, 0);
    match next(&mut m) {
        Event::Died { slot: 0, last_words, begun, .. } => {
            assert_eq!(begun, vec![0]);
            assert!(last_words.contains(&format!("my last words: pid={pid}")), "{last_words:?}");
        }
        other => panic!("expected its death, got {other:?}"),
    }
    m.stop();
}

#[test]
fn a_worker_that_dies_at_once_is_replaced_and_what_waited_goes_to_the_others() {
    let mut m = master(2, 1);
    // (depth 1: one task per worker; the rest wait, and are kept)
    submit(&mut m, None, "die", true, 0);
    submit(&mut m, None, "x", true, 1);
    submit(&mut m, None, "y", true, 2);
    let mut replies = Vec::new();
    let mut deaths = 0;
    while replies.len() < 2 {
        match next(&mut m) {
            Event::Died { begun, .. } => {
                deaths += 1;
                assert_eq!(begun, vec![0]);
            }
            Event::Reply { what, .. } => replies.push(what),
            other => panic!("unexpected {other:?}"),
        }
    }
    if deaths == 0 {
        // (its death may come after the replies: a wait for deaths sees it)
        let mut buf = Vec::new();
        let Event::Died { begun, .. } = m.next_event(&mut buf, true, &mut never()).unwrap() else {
            panic!("its death")
        };
        assert_eq!(begun, vec![0]);
        deaths += 1;
    }
    replies.sort();
    assert_eq!((deaths, replies), (1, vec![1, 2]));
    m.stop();
}

#[test]
fn conditions_arrive_before_their_reply_and_out_of_step_replies_are_named() {
    let mut m = master(1, 2);
    let n = submit(&mut m, None, "condition", true, 0);
    assert_eq!(next(&mut m), Event::Condition { payload: b"a condition".to_vec() });
    let Event::Reply { what: 0, payload, .. } = next(&mut m) else { panic!("the reply after") };
    assert_eq!(text(&payload), "after the condition");
    let n2 = submit(&mut m, None, "wrong-number", true, 1);
    assert!(n2 > n);
    assert_eq!(next(&mut m), Event::OutOfStep { slot: 0, number: n2 + 1000, expected: Some(n2) });
    m.stop();
}

#[test]
fn a_worker_that_writes_what_no_worker_writes_is_ended_and_replaced() {
    // A tag no worker may send, or bytes that are no frame: nothing more it
    // sends can be trusted. It is killed, reported as a death saying why
    // (its task failed), the other worker goes on, and its slot is filled
    // again; the master never waits for a reply that will not come.
    for what in ["bad-tag", "garbage"] {
        let mut m = master(2, 2);
        let (bad, good) = (m.pool().pid(0), m.pool().pid(1));
        submit(&mut m, Some(0), what, true, 0);
        submit(&mut m, Some(1), "fine", true, 1);
        let mut died = None;
        let mut replied = false;
        while died.is_none() || !replied {
            match next(&mut m) {
                Event::Died { slot: 0, pid, begun, damaged, .. } => died = Some((pid, begun, damaged)),
                Event::Reply { what: 1, payload, .. } => {
                    assert!(text(&payload).ends_with(&format!("pid={good}")));
                    replied = true;
                }
                other => panic!("{what}: unexpected {other:?}"),
            }
        }
        let (pid, begun, damaged) = died.unwrap();
        assert_eq!(pid, bad);
        assert_eq!(begun, vec![0], "{what}: its task failed");
        assert!(damaged.is_some(), "{what}: the death says why");
        assert!(eventually(|| gone(bad)), "{what}: the worker was ended");
        assert_eq!(next(&mut m), Event::Idle);
        m.fill(0, &mut never()).unwrap().unwrap();
        submit(&mut m, Some(0), "again", true, 2);
        let Event::Reply { what: 2, payload, .. } = next(&mut m) else { panic!("{what}: the new worker answers") };
        assert!(!text(&payload).ends_with(&format!("pid={bad}")));
        m.stop();
    }
}

#[test]
fn waits_end_when_given_up_and_stop_gives_back_what_was_out() {
    let go = trigger("give-up");
    let mut m = master(1, 2);
    let mut buf = Vec::new();
    assert_eq!(m.next_event(&mut buf, false, &mut never()).unwrap(), Event::Idle);
    submit(&mut m, None, &format!("die-when:{}", go.display()), true, 7);
    let mut interrupt = || Some(StopReason::Interrupted);
    assert_eq!(m.next_event(&mut buf, false, &mut interrupt).unwrap(), Event::Interrupted);
    let until = Instant::now() + Duration::from_millis(50);
    let mut deadline = || (Instant::now() >= until).then_some(StopReason::TimedOut);
    assert_eq!(m.next_event(&mut buf, true, &mut deadline).unwrap(), Event::TimedOut);
    let pid = m.pool().pid(0);
    assert_eq!(m.stop(), vec![7]);
    assert!(eventually(|| gone(pid)));
    std::fs::remove_dir_all(go.parent().unwrap()).unwrap();
}

/// A map as pageshare-r drives one: chunks of the plan go to workers with
/// room; a worker dies mid-map (with one chunk begun and one never read);
/// the chunk it never read goes again, to the other worker, and every
/// element but those of the chunk it began is answered exactly once.
#[test]
fn a_map_goes_on_without_a_worker_that_dies_and_its_unread_chunk_goes_again() {
    let go = trigger("map");
    let mut m = master(2, 2);
    let dying = m.pool().pid(0);
    let n = 300u64;
    let mut plan = MapPlan::new(n, 2);
    let mut sent: Vec<Chunk> = Vec::new();
    let mut answered = vec![0u32; n as usize];
    let mut failed: Vec<Chunk> = Vec::new();
    let mut requeued = 0;
    // (the first message of worker 0 waits for `go`, then ends the process:
    // it is the chunk it began; the one behind it it never read)
    let mut first = true;
    let mut out = 0usize;
    loop {
        while let FreeSlot::Slot(slot) = m.dispatch().free_slot(0, None) {
            let Some(c) = plan.next_chunk() else { break };
            let body = if first && slot == 0 {
                first = false;
                format!("die-when:{}", go.display())
            } else {
                format!("chunk {} {}", c.start, c.end)
            };
            sent.push(c);
            submit(&mut m, Some(slot), &body, true, sent.len() - 1);
            out += 1;
            if m.dispatch().load(0) == 2 && !go.exists() {
                // (worker 0 holds its begun chunk and one unread: now it dies)
                std::fs::write(&go, b"").unwrap();
            }
        }
        if out == 0 {
            break;
        }
        match next(&mut m) {
            Event::Reply { what, payload, .. } => {
                out -= 1;
                let c = sent[what];
                assert!(text(&payload).starts_with(&format!("chunk {} {}", c.start, c.end)));
                for i in c.start..c.end {
                    answered[i as usize] += 1;
                }
                plan.record_rate(1e-6);
            }
            Event::Died { slot: 0, pid, begun, unread, .. } => {
                assert_eq!(pid, dying);
                out -= begun.len() + unread.len();
                failed.extend(begun.iter().map(|&w| sent[w]));
                for w in unread {
                    requeued += 1;
                    plan.requeue(sent[w]);
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(eventually(|| gone(dying)));
    assert_eq!(failed.len(), 1, "the chunk it began fails");
    assert!(requeued >= 1, "the chunk it never read went again");
    for i in 0..n {
        let expected = u32::from(!failed.iter().any(|c| (c.start..c.end).contains(&i)));
        assert_eq!(answered[i as usize], expected, "element {i}");
    }
    m.stop();
    std::fs::remove_dir_all(go.parent().unwrap()).unwrap();
}
