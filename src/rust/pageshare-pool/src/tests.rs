use crate::region::Region;
use crate::ring::RingError;
use crate::wait::{Patience, StopReason};
use proptest::prelude::*;
use std::time::Duration;

const CAP: u64 = 4096;

fn never() -> impl FnMut() -> Option<StopReason> {
    || None
}

fn quick() -> Patience {
    Patience { spin: Duration::from_micros(20), slice: Duration::from_millis(5) }
}

#[test]
fn messages_arrive_in_order_with_their_tags() {
    let region = Region::create(2, CAP, &[]).unwrap();
    let ring = region.tasks(1);
    for i in 0..10u64 {
        ring.send(i, format!("message {i}").as_bytes(), quick(), &mut never()).unwrap();
    }
    let mut out = Vec::new();
    for i in 0..10u64 {
        assert_eq!(ring.receive(&mut out, quick(), &mut never()).unwrap(), i);
        assert_eq!(out, format!("message {i}").as_bytes());
    }
    assert!(!ring.has_data());
}

#[test]
fn an_empty_message_is_a_message() {
    let region = Region::create(1, CAP, &[]).unwrap();
    let ring = region.results(0);
    ring.send(7, b"", quick(), &mut never()).unwrap();
    let mut out = vec![1, 2, 3];
    assert_eq!(ring.receive(&mut out, quick(), &mut never()).unwrap(), 7);
    assert!(out.is_empty());
}

#[test]
fn a_message_larger_than_the_ring_streams_through_it() {
    let region = Region::create(1, CAP, &[]).unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::thread::scope(|s| {
        let region = &region;
        let expected = big.clone();
        let reader = s.spawn(move || {
            let mut out = Vec::new();
            let tag = region.tasks(0).receive(&mut out, quick(), &mut never()).unwrap();
            assert_eq!(tag, 42);
            assert_eq!(out, expected);
        });
        region.tasks(0).send(42, &big, quick(), &mut never()).unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn a_receive_given_up_mid_message_resumes_where_it_stopped() {
    // The master polls with a deadline (a future's non-blocking resolved())
    // while a worker streams a reply larger than the ring: every give-up
    // after the first frames must leave them with the caller, not lose them.
    let region = Region::create(1, CAP, &[]).unwrap();
    let big: Vec<u8> = (0..60_000u32).map(|i| (i % 253) as u8).collect();
    std::thread::scope(|s| {
        let region = &region;
        let sent = big.clone();
        let writer = s.spawn(move || {
            region.results(0).send(9, &sent, quick(), &mut never()).unwrap();
            region.results(0).send(10, b"after", quick(), &mut never()).unwrap();
        });
        let mut out = Vec::new();
        let mut begun = None;
        let mut stops = 0;
        let mut calls = 0u32;
        let tag = loop {
            // (gives up on every second check: many stops in the middle)
            let mut give_up = || {
                calls += 1;
                calls.is_multiple_of(2).then_some(StopReason::TimedOut)
            };
            match region.results(0).resume(&mut out, &mut begun, quick(), &mut give_up) {
                Ok(tag) => break tag,
                Err(RingError::Stopped(StopReason::TimedOut)) => stops += 1,
                Err(e) => panic!("{e:?} after {stops} stops"),
            }
        };
        assert_eq!(tag, 9);
        assert!(begun.is_none());
        assert_eq!(out, big);
        assert_eq!(region.results(0).receive(&mut out, quick(), &mut never()).unwrap(), 10);
        assert_eq!(out, b"after");
        writer.join().unwrap();
    });
}

#[test]
fn closing_wakes_a_parked_receiver_and_fails_a_sender() {
    let region = Region::create(1, CAP, &[]).unwrap();
    std::thread::scope(|s| {
        let region = &region;
        let reader = s.spawn(move || {
            let mut out = Vec::new();
            region.results(0).receive(&mut out, Patience::default(), &mut never())
        });
        std::thread::sleep(Duration::from_millis(50));
        region.results(0).close();
        assert_eq!(reader.join().unwrap(), Err(RingError::Stopped(StopReason::Closed)));
    });
    let err = region.results(0).send(1, b"x", quick(), &mut never());
    assert_eq!(err, Err(RingError::Stopped(StopReason::Closed)));
}

#[test]
fn a_message_published_before_the_close_is_still_delivered() {
    let region = Region::create(1, CAP, &[]).unwrap();
    let ring = region.results(0);
    ring.send(3, b"last words", quick(), &mut never()).unwrap();
    ring.close();
    let mut out = Vec::new();
    assert_eq!(ring.receive(&mut out, quick(), &mut never()), Ok(3));
    assert_eq!(ring.receive(&mut out, quick(), &mut never()), Err(RingError::Stopped(StopReason::Closed)));
    ring.reset();
    ring.send(4, b"again", quick(), &mut never()).unwrap();
    assert_eq!(ring.receive(&mut out, quick(), &mut never()), Ok(4));
}

#[test]
fn the_messages_a_consumer_never_began_are_known_by_their_tags() {
    let region = Region::create(1, CAP, &[]).unwrap();
    let ring = region.tasks(0);
    assert!(ring.unread_tags().is_empty());
    ring.send(1, b"read", quick(), &mut never()).unwrap();
    ring.send(2, &[7u8; 1500], quick(), &mut never()).unwrap(); // (several frames)
    ring.send(3, b"", quick(), &mut never()).unwrap();
    let mut out = Vec::new();
    assert_eq!(ring.receive(&mut out, quick(), &mut never()), Ok(1));
    assert_eq!(ring.unread_tags(), vec![2, 3]);
    assert_eq!(ring.receive(&mut out, quick(), &mut never()), Ok(2));
    assert_eq!(ring.unread_tags(), vec![3]);
    // (a wrap marker on the way is skipped)
    for t in 10..40 {
        ring.send(t, &[1u8; 200], quick(), &mut never()).unwrap();
        ring.receive(&mut out, quick(), &mut never()).unwrap();
    }
    assert_eq!(ring.unread_tags(), vec![39]);
}

#[test]
fn give_up_ends_a_wait_on_an_empty_ring() {
    let region = Region::create(1, CAP, &[]).unwrap();
    let mut asked = 0;
    let mut give_up = || {
        asked += 1;
        (asked > 3).then_some(StopReason::Interrupted)
    };
    let mut out = Vec::new();
    let got = region.tasks(0).receive(&mut out, quick(), &mut give_up);
    assert_eq!(got, Err(RingError::Stopped(StopReason::Interrupted)));
}

#[test]
fn a_full_ring_makes_the_sender_wait_until_the_receiver_reads() {
    let region = Region::create(1, CAP, &[]).unwrap();
    std::thread::scope(|s| {
        let region = &region;
        let writer = s.spawn(move || {
            for i in 0..2000u64 {
                region.tasks(0).send(i, &[i as u8; 300], quick(), &mut never()).unwrap();
            }
        });
        let mut out = Vec::new();
        for i in 0..2000u64 {
            assert_eq!(region.tasks(0).receive(&mut out, quick(), &mut never()).unwrap(), i);
            assert_eq!(out, vec![i as u8; 300]);
        }
        writer.join().unwrap();
    });
}

#[test]
fn a_region_is_opened_only_when_it_is_one() {
    use std::io::Write;
    let region = Region::create(3, CAP, &[]).unwrap();
    let again = Region::open(region.file().try_clone().unwrap()).unwrap();
    assert_eq!(again.slots(), 3);
    region.tasks(2).send(9, b"seen by the other mapping", quick(), &mut never()).unwrap();
    let mut out = Vec::new();
    assert_eq!(again.tasks(2).receive(&mut out, quick(), &mut never()).unwrap(), 9);

    let plain = pageshare_core::os::memfd("not-a-pool").unwrap();
    plain.set_len(1 << 20).unwrap();
    assert!(Region::open(plain.try_clone().unwrap()).is_err(), "not size-sealed");
    pageshare_core::os::seal_size(&plain).unwrap();
    assert!(Region::open(plain).is_err(), "no magic");

    let mut short = pageshare_core::os::memfd("short-pool").unwrap();
    let header = {
        let mut h = vec![0u8; 4096];
        h[..8].copy_from_slice(&0x7073_706f_6f6c_0001u64.to_ne_bytes());
        h[8..16].copy_from_slice(&1000u64.to_ne_bytes());
        h[16..24].copy_from_slice(&4096u64.to_ne_bytes());
        h
    };
    short.write_all(&header).unwrap();
    pageshare_core::os::seal_size(&short).unwrap();
    assert!(Region::open(short).is_err(), "shorter than its header says");
}

#[test]
fn an_unnamed_file_serves_as_a_region_where_no_memfd_can_be_made() {
    let dir = std::env::temp_dir();
    let region = Region::create_unnamed(2, CAP, &dir).unwrap();
    assert!(pageshare_core::os::is_unnamed_private(region.file()));
    assert!(!pageshare_core::os::is_size_sealed(region.file()));
    let again = Region::open(region.file().try_clone().unwrap()).unwrap();
    assert_eq!(again.slots(), 2);
    region.tasks(1).send(5, b"through an unnamed file", quick(), &mut never()).unwrap();
    let mut out = Vec::new();
    assert_eq!(again.tasks(1).receive(&mut out, quick(), &mut never()).unwrap(), 5);
    assert_eq!(out, b"through an unnamed file");

    // A file that anyone can open by name, or that others may read, is not one.
    let path = dir.join(format!("pageshare-region-test-{}", std::process::id()));
    let named = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    named.set_len(1 << 20).unwrap();
    let refused = Region::open(named.try_clone().unwrap());
    std::fs::remove_file(&path).unwrap();
    assert!(refused.is_err(), "a named file");
    let open_to_all = pageshare_core::os::unnamed_file(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    open_to_all.set_permissions(std::fs::Permissions::from_mode(0o644)).unwrap();
    open_to_all.set_len(1 << 20).unwrap();
    assert!(Region::open(open_to_all).is_err(), "readable by others");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    // Messages of any sizes, sent by one thread and read by another, arrive
    // whole and in order through a small ring (wrap markers, streaming).
    #[test]
    fn any_sequence_of_messages_arrives_whole(sizes in prop::collection::vec(0usize..9000, 1..40)) {
        let region = Region::create(1, CAP, &[]).unwrap();
        std::thread::scope(|s| {
            let region = &region;
            let sent = sizes.clone();
            let writer = s.spawn(move || {
                for (i, n) in sent.iter().enumerate() {
                    let body: Vec<u8> = (0..*n).map(|k| (k * 7 + i) as u8).collect();
                    region.results(0).send(i as u64, &body, quick(), &mut never()).unwrap();
                }
            });
            let mut out = Vec::new();
            for (i, n) in sizes.iter().enumerate() {
                let tag = region.results(0).receive(&mut out, quick(), &mut never()).unwrap();
                assert_eq!(tag, i as u64);
                let body: Vec<u8> = (0..*n).map(|k| (k * 7 + i) as u8).collect();
                assert_eq!(&out, &body);
            }
            writer.join().unwrap();
        });
    }

    // Whatever a misbehaving peer writes into a ring's pages and positions, a
    // receive returns a message, a stop or Corrupt: never a panic, never a
    // read outside the ring, never an unbounded wait.
    #[test]
    fn a_receive_survives_any_bytes(data in prop::collection::vec(any::<u8>(), CAP as usize),
                                    tail in any::<u64>(), published in 0u64..=CAP / 16,
                                    wild_head in prop::option::of(any::<u64>())) {
        // (mostly positions a correct peer could publish, sometimes any at all)
        let tail = tail & !15;
        let head = wild_head.unwrap_or(tail.wrapping_add(published * 16));
        let region = Region::create(1, CAP, &[]).unwrap();
        let ring = region.tasks(0);
        ring.scribble_for_tests(&data, head, tail);
        let mut out = Vec::new();
        let mut budget = 0;
        let mut give_up = || { budget += 1; (budget > 2).then_some(StopReason::TimedOut) };
        let _ = ring.unread_tags();
        for _ in 0..50 {
            match ring.receive(&mut out, Patience { spin: Duration::ZERO, slice: Duration::from_millis(1) }, &mut give_up) {
                Ok(_) => continue,
                Err(_) => break,
            }
        }
    }
}
