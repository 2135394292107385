//! The master's side of a running pool as one state machine, without R:
//! its workers ([`Pool`]), which has which message ([`Dispatch`]), the
//! messages read ahead, and what each wait returns ([`Event`]). pageshare-r
//! keeps one of these and turns its events into R objects; everything it
//! decides is here, so that `cargo test` runs it with real worker processes.
//!
//! A worker may let go of the segments it handed over with its replies once
//! its master holds them all: a message goes with that word (`RELEASE`)
//! only when every reply of that worker has been read. So after a reply that
//! may hold handles (not `PLAIN`), until its reader says it has read it
//! ([`Master::dispatch`]), no waiting message is sent and no message carries
//! that word.
//!
//! Replies that arrive while the master sends calls are read off their rings
//! then ([`Master::submit`]), so that a stream of calls keeps its workers
//! busy; they are the next waits' events, in order.

use crate::dispatch::{Dispatch, FreeSlot, Message, Sent, Waiting};
use crate::pool::{Pool, PoolError, Received};
use crate::ring::RingError;
use crate::wait::{Patience, StopReason};
use crate::wire::{Event, Header, Kind};
use std::collections::VecDeque;
use std::time::Duration;

/// A wait's way to end early: called now and then, it says why to stop.
pub type GiveUp<'a> = &'a mut dyn FnMut() -> Option<StopReason>;

/// A ring holds what no correct peer writes: the pool cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

fn damaged(ring: &str, why: impl std::fmt::Display) -> Damaged {
    Damaged(format!("the pool's {ring} ring is damaged: {why}"))
}

/// How [`Master::submit`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Submitted<W> {
    /// Sent, or waiting for a worker with room: the message's number.
    Number(u64),
    /// The worker asked for is gone (its death is still to be read): `what` back.
    Gone(W),
    /// The wait for room was given up: `what` back.
    Interrupted(W),
}

/// How a send ended.
enum Sending {
    Sent,
    Gone,
    Interrupted,
}

pub struct Master<W> {
    pool: Pool,
    dispatch: Dispatch<W>,
    /// While fewer workers than this are busy, the master spins for a reply
    /// before it sleeps (else its spinning would slow them down).
    cores: usize,
    spin: Duration,
    /// Waiting messages go once the last reply that may hold handles is read
    /// (see the module's comment).
    dispatch_due: bool,
    /// Events read off the result rings before a wait asked for them.
    arrived: VecDeque<Event<W>>,
    /// For each slot, this process's count of segments let go of when its
    /// worker was last sent a message (see `SCAN`).
    scanned: Vec<u64>,
}

impl<W> Master<W> {
    /// The master of `pool`: at most `depth` messages per worker; a message
    /// larger than a quarter of a ring (`ring_bytes`) goes only to an idle
    /// worker; while fewer than `cores` workers are busy a wait spins `spin`
    /// before it sleeps.
    pub fn new(pool: Pool, ring_bytes: u64, depth: usize, cores: usize, spin: Duration) -> Master<W> {
        let n = pool.size() as usize;
        Master {
            pool,
            dispatch: Dispatch::new(n, depth.max(1), ring_bytes as usize / 4),
            cores: cores.max(1),
            spin,
            dispatch_due: false,
            arrived: VecDeque::new(),
            scanned: vec![0; n],
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn dispatch(&self) -> &Dispatch<W> {
        &self.dispatch
    }

    /// Takes the waiting message `tag` out of the queue: what was kept with
    /// it, or `None` when it does not wait (sent, answered, or unknown).
    pub fn withdraw(&mut self, tag: u64) -> Option<W> {
        self.dispatch.withdraw(tag).map(|w| w.what)
    }

    /// Stops the workers; returns what was kept with every message out or
    /// read ahead (their replies will never be read).
    pub fn stop(mut self) -> Vec<W> {
        self.pool.stop();
        let mut whats = self.dispatch.drain();
        for a in self.arrived.drain(..) {
            if let Event::Reply { what, .. } = a {
                whats.push(what);
            }
        }
        whats
    }

    /// Starts a worker in the empty `slot` and sends it what waits.
    pub fn fill(&mut self, slot: u64, give_up: GiveUp) -> Result<Result<(), PoolError>, Damaged> {
        if let Err(e) = self.pool.fill(slot) {
            return Ok(Err(e));
        }
        self.dispatch.filled(slot as usize);
        self.send_waiting(give_up)?;
        Ok(Ok(()))
    }

    /// The reader has read the last reply: the waiting messages may go.
    pub fn dispatch_now(&mut self, give_up: GiveUp) -> Result<(), Damaged> {
        self.dispatch_due = false;
        self.send_waiting(give_up)
    }

    /// Sends `bytes` (`plain`: it holds no handle) with `what` to the worker
    /// in `slot` (0-based), or, when `slot` is None, to the least busy worker
    /// with room, else it waits for one (and is kept, to go to another
    /// worker should its worker die before reading it). A message for one
    /// slot that its worker never read goes back to its owner
    /// ([`Event::Died`]'s `unread`), whose business it is to send it again.
    pub fn submit(
        &mut self,
        slot: Option<usize>,
        bytes: &[u8],
        plain: bool,
        what: W,
        give_up: GiveUp,
    ) -> Result<Submitted<W>, Damaged> {
        let keep = slot.is_none();
        // (the bytes are copied only for a message that is kept or waits)
        let kept = || Message { payload: bytes.to_vec(), plain };
        let choose = |m: &Master<W>| match slot {
            Some(s) => Some(s),
            None => match m.dispatch.free_slot(bytes.len(), None) {
                // (a message waits behind those waiting before it)
                FreeSlot::Slot(s) if m.dispatch.waiting() == 0 => Some(s),
                _ => None,
            },
        };
        let mut target = choose(self);
        if target.is_none() {
            // (replies that arrived since the last wait make room: a stream of
            // calls keeps its workers busy while they are still being sent)
            if !self.harvest(give_up)? {
                return Ok(Submitted::Interrupted(what));
            }
            target = choose(self);
        }
        let number = self.dispatch.next_tag();
        let Some(s) = target else {
            self.dispatch.wait(Waiting { tag: number, message: kept(), what }, false);
            return Ok(Submitted::Number(number));
        };
        Ok(match self.send_to(s, number, bytes, plain, give_up)? {
            Sending::Sent => {
                self.dispatch.sent(s, Sent { tag: number, what, resend: keep.then(kept) });
                Submitted::Number(number)
            }
            // (to any worker: it waits for another one)
            Sending::Gone if slot.is_none() => {
                self.dispatch.gone(s);
                self.dispatch.wait(Waiting { tag: number, message: kept(), what }, false);
                self.send_waiting(give_up)?;
                Submitted::Number(number)
            }
            Sending::Gone => {
                self.dispatch.gone(s);
                Submitted::Gone(what)
            }
            Sending::Interrupted => Submitted::Interrupted(what),
        })
    }

    /// The next event, waiting as long as `give_up` lets it (with
    /// `wait_idle` false, [`Event::Idle`] at once when no message is out). A
    /// reply's payload is `buf`'s bytes, taken: the caller may give them
    /// back once used, so that no message costs an allocation.
    pub fn next_event(&mut self, buf: &mut Vec<u8>, wait_idle: bool, give_up: GiveUp) -> Result<Event<W>, Damaged> {
        // (every event given before was read by now; one read ahead that may
        // hold handles is still to be given: harvest() stops after such a
        // reply, so it is the last)
        self.dispatch_due = self.arrived.back().is_some_and(Event::holds_handles);
        self.send_waiting(give_up)?;
        if let Some(a) = self.arrived.pop_front() {
            return self.given(a, give_up);
        }
        if !wait_idle && self.dispatch.outstanding() == 0 {
            return Ok(Event::Idle);
        }
        let spin = if self.dispatch.busy_workers() < self.cores { self.spin } else { Duration::ZERO };
        let patience = Patience { spin, ..Patience::default() };
        loop {
            return match self.pool.receive_any(buf, patience, give_up) {
                Ok(Received::Message { slot, tag }) => match self.arrived(slot, tag, std::mem::take(buf)) {
                    Some(a) => self.given(a, give_up),
                    None => continue, // (its worker was ended: its death comes next)
                },
                Ok(Received::Died { slot, pid, damaged }) => {
                    // (read before the slot is vacated, with its worker's pipe)
                    let last_words = self.pool.last_words(slot);
                    let unread: Vec<u64> = self
                        .pool
                        .vacate(slot)
                        .into_iter()
                        .filter_map(|t| Header::decode_task(t).ok())
                        .map(|h| h.number)
                        .collect();
                    let lost = self.dispatch.died(slot as usize, &unread);
                    self.send_waiting(give_up)?;
                    Ok(Event::Died {
                        slot,
                        pid,
                        begun: lost.begun.into_iter().map(|s| s.what).collect(),
                        unread: lost.unread.into_iter().map(|s| s.what).collect(),
                        waiting: self.dispatch.waiting(),
                        damaged,
                        last_words,
                    })
                }
                Err(RingError::Stopped(StopReason::Interrupted)) => Ok(Event::Interrupted),
                Err(RingError::Stopped(_)) => Ok(Event::TimedOut),
                Err(RingError::Corrupt(why)) => Err(damaged("result", why)),
            };
        }
    }

    /// `a`, about to be given to the reader: after a plain reply the waiting
    /// messages go at once; after one that may hold handles, only once the
    /// reader says it has read it.
    fn given(&mut self, a: Event<W>, give_up: GiveUp) -> Result<Event<W>, Damaged> {
        match &a {
            Event::Reply { plain: true, .. } => self.send_waiting(give_up)?,
            Event::Reply { plain: false, .. } => self.dispatch_due = true,
            _ => {}
        }
        Ok(a)
    }

    /// Sends the message `number` (`plain`: it holds no handle) to the worker
    /// in `slot`; it carries `RELEASE` when that worker's replies are all
    /// read (none is read ahead or being read), and `SCAN` when this process
    /// let go of segments since that worker's last message. The caller
    /// records a message sent.
    fn send_to(
        &mut self,
        slot: usize,
        number: u64,
        bytes: &[u8],
        plain: bool,
        give_up: GiveUp,
    ) -> Result<Sending, Damaged> {
        let released = pageshare_core::segment::releases();
        let header = Header {
            kind: Kind::Task,
            number,
            release: self.dispatch.all_answered(slot) && !self.dispatch_due,
            plain,
            scan: self.scanned[slot] != released,
            value: false,
            relay: false,
        };
        let tag = header.encode().map_err(|e| damaged("task", e))?;
        match self.pool.send(slot as u64, tag, bytes, Patience::default(), give_up) {
            Ok(()) => {
                self.scanned[slot] = released;
                Ok(Sending::Sent)
            }
            Err(RingError::Stopped(StopReason::Closed)) => Ok(Sending::Gone),
            Err(RingError::Stopped(_)) => Ok(Sending::Interrupted),
            Err(RingError::Corrupt(why)) => Err(damaged("task", why)),
        }
    }

    /// Sends the waiting messages that workers have room for, in their order.
    /// (Waiting messages are kept, to go again should their worker die
    /// before reading them.)
    fn send_waiting(&mut self, give_up: GiveUp) -> Result<(), Damaged> {
        if self.dispatch_due {
            return Ok(());
        }
        while let Some((slot, w)) = self.dispatch.next_ready() {
            match self.send_to(slot, w.tag, &w.message.payload, w.message.plain, give_up)? {
                Sending::Sent => self.dispatch.sent(slot, Sent { tag: w.tag, what: w.what, resend: Some(w.message) }),
                // (it waits again, first, for another worker; the death is read next)
                Sending::Gone => {
                    self.dispatch.gone(slot);
                    self.dispatch.wait(w, true);
                }
                Sending::Interrupted => {
                    self.dispatch.wait(w, true);
                    break;
                }
            }
        }
        Ok(())
    }

    /// The event of the message `tag` with `payload` from the worker in
    /// `slot`, its reply recorded as answered; None when the tag is none a
    /// worker sends (the worker is ended for it: `Pool::condemn`).
    fn arrived(&mut self, slot: u64, tag: u64, payload: Vec<u8>) -> Option<Event<W>> {
        let Ok(header) = Header::decode_from_worker(tag) else {
            self.pool.condemn(slot, "a reply's header is none a worker writes");
            return None;
        };
        if header.kind == Kind::Condition {
            return Some(Event::Condition { payload });
        }
        Some(match self.dispatch.answered(slot as usize, header.number) {
            Ok(sent) => {
                Event::Reply { what: sent.what, payload, plain: header.plain, value: header.value, relay: header.relay }
            }
            Err(expected) => Event::OutOfStep { slot, number: header.number, expected },
        })
    }

    /// Reads the messages that have arrived, without waiting, to be the next
    /// waits' events, so that their workers have room for the messages that
    /// wait, and sends those. Stops after a reply that may hold handles:
    /// nothing is sent until it is read. False when `give_up` ended a long
    /// read.
    fn harvest(&mut self, give_up: GiveUp) -> Result<bool, Damaged> {
        while !self.dispatch_due {
            let mut payload = Vec::new();
            match self.pool.try_receive(&mut payload, give_up) {
                Ok(Some((slot, tag))) => {
                    // (None: its worker was ended; its death is read next)
                    if let Some(a) = self.arrived(slot, tag, payload) {
                        self.dispatch_due = a.holds_handles();
                        self.arrived.push_back(a);
                    }
                }
                Ok(None) => break,
                Err(RingError::Stopped(StopReason::Interrupted)) => return Ok(false),
                // (a worker that died in the middle of a message: its death is read next)
                Err(RingError::Stopped(_)) => break,
                Err(RingError::Corrupt(why)) => return Err(damaged("result", why)),
            }
        }
        self.send_waiting(give_up)?;
        Ok(true)
    }
}
