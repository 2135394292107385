//! The master's side of pageshare's pool, without its entry points: its
//! state (the workers, which has which message, the replies read ahead) and
//! the sending of messages. The entry points (entry_pool.rs: start, stop,
//! fill; entry_pool_messages.rs: submit, wait) work through this.
//!
//! A worker may let go of the segments it handed over with its replies once
//! its master holds them all: a message goes with that word (`RELEASE`)
//! only when every reply of that worker has been read by R. So after a
//! reply that may hold handles (not `PLAIN`), until R has read it and calls
//! `ps_pool_dispatch` (`Master::dispatch_due`), no waiting message is sent
//! and no message carries that word.
//!
//! Replies that arrive while R sends calls are read off their rings then
//! ([`harvest`]), so that a stream of calls keeps its workers busy; R is given
//! them, in order, when it next waits.

use crate::boundary::RError;
use crate::r_calls::interrupted;
use pageshare_pool::dispatch::{Dispatch, Sent};
use pageshare_pool::pool::Pool;
use pageshare_pool::ring::RingError;
use pageshare_pool::wait::{Patience, StopReason};
use pageshare_pool::wire::{Event, Header, Kind};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The master's side of a running pool: its workers and what each has.
pub struct Master {
    pub pool: Pool,
    /// The keys of what R does with each message's reply (see r_store.rs).
    pub dispatch: Dispatch<usize>,
    /// While fewer workers than this are busy, the master spins for a reply
    /// before it sleeps (else its spinning would slow them down).
    pub cores: usize,
    pub spin: Duration,
    /// Replies of the pool may be sent to a worker as soon as R has read
    /// the last reply (see the module's comment).
    pub dispatch_due: bool,
    /// Events read off the result rings before R asked for them, given to
    /// R first, in order (see [`harvest`]).
    pub arrived: VecDeque<Event<usize>>,
    /// For each slot, this process's count of segments let go of when its
    /// worker was last sent a message (see `SCAN`).
    pub scanned: Vec<u64>,
}

impl Master {
    /// Stops the workers; what R kept with their messages is let go.
    pub fn stop(mut self) {
        self.pool.stop();
        for key in self.dispatch.drain() {
            crate::r_store::take(key);
        }
        for a in self.arrived.drain(..) {
            if let Event::Reply { what, .. } = a {
                crate::r_store::take(what);
            }
        }
    }
}

/// The master's pool, if one is running.
static POOL: Mutex<Option<Master>> = Mutex::new(None);
/// The process that started the pool.
static POOL_OWNER: AtomicU32 = AtomicU32::new(0);
/// Reused for every message received (no allocation per message).
static BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The pool, locked. R is single-threaded, so the lock is only ever contended
/// when R code that runs while we wait (an interrupt check may run event
/// handlers) calls into the pool again: that is an error, never a deadlock.
pub fn pool() -> Result<MutexGuard<'static, Option<Master>>, RError> {
    let guard = match POOL.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            return Err(RError::argument("pageshare's worker pool is busy: it cannot be used from inside its own wait"))
        }
    };
    // A forked child (mclapply, plan(multicore)) inherits the pool's memory
    // and sockets but is not its master: it must not touch the rings.
    let owner = POOL_OWNER.load(Ordering::Relaxed);
    if guard.is_some() && owner != pageshare_core::os::pid() {
        return Err(RError::argument(format!(
            "pageshare's worker pool belongs to process {owner}; a forked child cannot use it"
        )));
    }
    Ok(guard)
}

/// Records this process as the master of the pool just started.
pub fn owned_here() {
    POOL_OWNER.store(pageshare_core::os::pid(), Ordering::Relaxed);
}

pub fn no_pool() -> RError {
    RError::argument("pageshare's worker pool is not running")
}

/// A message buffer that grew past this is given back after use.
const BUFFER_KEEP: usize = 1 << 20;

pub fn shrink(buf: &mut Vec<u8>) {
    if buf.capacity() > 4 * BUFFER_KEEP {
        buf.clear();
        buf.shrink_to(BUFFER_KEEP);
    }
}

/// The master's buffer for what it receives.
pub fn buffer() -> MutexGuard<'static, Vec<u8>> {
    BUFFER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits of the master end on an interrupt (checked after parked slices, and
/// now and then while spinning) or at `deadline`.
pub fn master_give_up(deadline: Option<Instant>) -> impl FnMut() -> Option<StopReason> {
    move || {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            Some(StopReason::TimedOut)
        } else if interrupted() {
            Some(StopReason::Interrupted)
        } else {
            None
        }
    }
}

/// How a send ended.
pub enum Sending {
    Sent,
    /// The worker is gone (its death is still to be read).
    Gone,
    Interrupted,
}

/// Sends `bytes`, the task `number` (`plain`: it holds no handle), to the
/// worker in `slot` (0-based); it carries `RELEASE` (wire.rs) when that worker's
/// replies are all read by R (none is waiting in `m.arrived` or being read,
/// see [`harvest`]), and `SCAN` when this process let go of segments since
/// that worker's last message. The caller records a message sent
/// (`Dispatch::sent`).
pub fn send_to(m: &mut Master, slot: usize, number: u64, bytes: &[u8], plain: bool) -> Result<Sending, RError> {
    let released = pageshare_core::segment::releases();
    let header = Header {
        kind: Kind::Task,
        number,
        release: m.dispatch.all_answered(slot) && !m.dispatch_due,
        plain,
        scan: m.scanned[slot] != released,
    };
    let tag = header.encode().map_err(|e| RError::system(format!("a message of the pool cannot be sent: {e}")))?;
    match m.pool.send(slot as u64, tag, bytes, Patience::default(), &mut master_give_up(None)) {
        Ok(()) => {
            m.scanned[slot] = released;
            Ok(Sending::Sent)
        }
        Err(RingError::Stopped(StopReason::Closed)) => Ok(Sending::Gone),
        Err(RingError::Stopped(_)) => Ok(Sending::Interrupted),
        Err(RingError::Corrupt(why)) => Err(RError::system(format!("the pool's task ring is damaged: {why}"))),
    }
}

/// Sends the waiting messages that workers have room for, in their order.
/// (Waiting messages are calls: each is kept, to go again should its worker
/// die before reading it.)
pub fn send_waiting(m: &mut Master) -> Result<(), RError> {
    if m.dispatch_due {
        return Ok(());
    }
    while let Some((slot, w)) = m.dispatch.next_ready() {
        match send_to(m, slot, w.tag, &w.message.payload, w.message.plain)? {
            Sending::Sent => m.dispatch.sent(slot, Sent { tag: w.tag, what: w.what, resend: Some(w.message) }),
            // (it waits again, first, for another worker; the death is read next)
            Sending::Gone => {
                m.dispatch.gone(slot);
                m.dispatch.wait(w, true);
            }
            Sending::Interrupted => {
                m.dispatch.wait(w, true);
                break;
            }
        }
    }
    Ok(())
}

/// The event of the message `tag` with `payload` from the worker in `slot`,
/// its reply recorded as answered.
pub fn arrived(m: &mut Master, slot: u64, tag: u64, payload: Vec<u8>) -> Result<Event<usize>, RError> {
    let header = Header::decode_from_worker(tag)
        .map_err(|e| RError::system(format!("the pool's result ring is damaged: {e}")))?;
    if header.kind == Kind::Condition {
        return Ok(Event::Condition { payload });
    }
    Ok(match m.dispatch.answered(slot as usize, header.number) {
        Ok(sent) => Event::Reply { what: sent.what, payload, plain: header.plain },
        Err(expected) => Event::OutOfStep { slot, number: header.number, expected },
    })
}

/// Reads the messages that have arrived, without waiting, into `m.arrived`
/// (R's next waits are given them first, in order), so that their workers
/// have room for the messages that wait, and sends those. Stops after a
/// reply that may hold handles: nothing is sent until R has read it. FALSE
/// when the user interrupted a long read (the pool is then restarted).
pub fn harvest(m: &mut Master) -> Result<bool, RError> {
    let mut give_up = master_give_up(None);
    while !m.dispatch_due {
        let mut payload = Vec::new();
        match m.pool.try_receive(&mut payload, &mut give_up) {
            Ok(Some((slot, tag))) => {
                let a = arrived(m, slot, tag, payload)?;
                m.dispatch_due = a.holds_handles();
                m.arrived.push_back(a);
            }
            Ok(None) => break,
            Err(RingError::Stopped(StopReason::Interrupted)) => return Ok(false),
            // (a worker that died in the middle of a message: its death is read next)
            Err(RingError::Stopped(_)) => break,
            Err(RingError::Corrupt(why)) => {
                return Err(RError::system(format!("the pool's result ring is damaged: {why}")))
            }
        }
    }
    send_waiting(m)?;
    Ok(true)
}
