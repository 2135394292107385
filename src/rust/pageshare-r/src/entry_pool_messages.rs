#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points by which the master sends messages to the workers
//! of its pool and hears back (R/pool-state.R). Which worker has which
//! message, and which wait for room, is kept here (pageshare-pool's
//! `Dispatch`): a small task costs R no bookkeeping of its own. With each
//! message R gives `what` (an R object: what to do with the reply), kept
//! until the reply comes back with it (r_store.rs).
//!
//! A worker may let go of the segments it handed over with its replies once
//! its master holds them all: a message goes with that word (`RELEASE`)
//! only when every reply of that worker has been read by R. So after a
//! reply that may hold handles (not `PLAIN`), until R has read it and calls
//! [`ps_pool_dispatch_rs`] (`Master::dispatch_due`), no waiting message is
//! sent and no message carries that word.
//!
//! Replies that arrive while R sends calls are read off their rings then
//! (`harvest`), so that a stream of calls keeps its workers busy; R is given
//! them, in order, when it next waits.

use crate::boundary::{entry, RError};
use crate::entry_pool::{
    buffer, flag_bit, master_give_up, no_pool, pool, raw_arg, shrink, slot_arg, Master, CONDITION, FLAGS, PLAIN,
    RELEASE, SCAN,
};
use crate::r_calls::{as_real, list_of, raw_vec, scalar_integer, scalar_logical, scalar_real, Protect};
use crate::r_sys::*;
use pageshare_pool::dispatch::{FreeSlot, Message, Sent, Waiting};
use pageshare_pool::pool::Received;
use pageshare_pool::ring::RingError;
use pageshare_pool::wait::{Patience, StopReason};
use std::time::{Duration, Instant};

const NA_INT: i32 = i32::MIN;

/// How a send ended.
enum Sending {
    Sent,
    /// The worker is gone (its death is still to be read).
    Gone,
    Interrupted,
}

/// Sends `bytes` with `tag` and `flags` to the worker in `slot` (0-based);
/// the tag carries [`RELEASE`] when that worker's replies are all read by R
/// (none is waiting in `m.arrived` or being read, see `harvest`), and
/// [`SCAN`] when this process let go of segments since that worker's last
/// message. The caller records a message sent (`Dispatch::sent`).
fn send_to(m: &mut Master, slot: usize, tag: u64, bytes: &[u8], flags: u64) -> Result<Sending, RError> {
    let release = if m.dispatch.all_answered(slot) && !m.dispatch_due { RELEASE } else { 0 };
    let released = pageshare_core::segment::releases();
    let scan = if m.scanned[slot] != released { SCAN } else { 0 };
    match m.pool.send(slot as u64, tag | release | scan | flags, bytes, Patience::default(), &mut master_give_up(None))
    {
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
        match send_to(m, slot, w.tag, &w.message.payload, w.message.flags)? {
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

/// Sends `payload` (`plain`: it holds no handle) with `what` to the worker
/// in `slot` (1-based), or, when `slot` is NA, to the least busy worker with
/// room, else it waits for one (and is kept, to go to another worker should
/// its worker die before reading it, as it is when `resend`). Returns the
/// message's tag, or -1 when the worker in `slot` is gone and -2 when the
/// user interrupted a long send.
#[no_mangle]
pub extern "C" fn ps_pool_submit_rs(slot: SEXP, payload: SEXP, plain: SEXP, what: SEXP, resend: SEXP) -> SEXP {
    entry(|| {
        let mut guard = pool()?;
        let m = guard.as_mut().ok_or_else(no_pool)?;
        // (NA: R's NA_integer_ is the smallest int)
        let slot = if crate::r_calls::as_integer(slot)? == NA_INT {
            None
        } else {
            Some(slot_arg(slot, m.pool.size())? as usize)
        };
        let bytes = raw_arg(payload, "payload")?;
        let flags = flag_bit(plain, PLAIN)?;
        let keep = slot.is_none() || crate::args::flag_arg(resend)?;
        let tag = m.dispatch.next_tag();
        // (the bytes are copied only for a message that is kept or waits)
        let kept = || Message { payload: bytes.to_vec(), flags };
        let choose = |m: &Master| match slot {
            Some(s) => Some(s),
            None => match m.dispatch.free_slot(bytes.len(), None) {
                // (a message waits behind those waiting before it)
                FreeSlot::Slot(s) if m.dispatch.waiting() == 0 => Some(s),
                _ => None,
            },
        };
        let mut target = choose(m);
        if target.is_none() {
            // (replies that arrived since R last waited make room: a stream of
            // calls keeps its workers busy while R is still sending)
            if !harvest(m)? {
                return scalar_real(-2.0);
            }
            target = choose(m);
        }
        let key = crate::r_store::keep(what)?;
        let status = match target {
            None => {
                m.dispatch.wait(Waiting { tag, message: kept(), what: key }, false);
                0
            }
            Some(s) => match send_to(m, s, tag, bytes, flags)? {
                Sending::Sent => {
                    m.dispatch.sent(s, Sent { tag, what: key, resend: keep.then(kept) });
                    0
                }
                // (to any worker: it waits for another one)
                Sending::Gone if slot.is_none() => {
                    m.dispatch.gone(s);
                    m.dispatch.wait(Waiting { tag, message: kept(), what: key }, false);
                    send_waiting(m)?;
                    0
                }
                Sending::Gone => {
                    m.dispatch.gone(s);
                    crate::r_store::take(key);
                    -1
                }
                Sending::Interrupted => {
                    crate::r_store::take(key);
                    -2
                }
            },
        };
        scalar_real(if status < 0 { status as f64 } else { tag as f64 })
    })
}

/// The least busy worker among `slots` (1-based; NULL: all) with room for a
/// message of `bytes`: its slot, NA when all are busy, 0 when none is alive.
#[no_mangle]
pub extern "C" fn ps_pool_free_slot_rs(bytes: SEXP, slots: SEXP) -> SEXP {
    entry(|| {
        let guard = pool()?;
        let m = guard.as_ref().ok_or_else(no_pool)?;
        let slots = crate::args::slots_arg(slots, m.pool.size() as usize)?;
        let bytes = as_real(bytes)?.max(0.0) as usize;
        scalar_integer(match m.dispatch.free_slot(bytes, slots.as_deref()) {
            FreeSlot::Slot(s) => s as i32 + 1,
            FreeSlot::Busy => NA_INT,
            FreeSlot::NoneAlive => 0,
        })
    })
}

/// May a message of `bytes` go to the worker in `slot` (1-based) now?
#[no_mangle]
pub extern "C" fn ps_pool_has_room_rs(slot: SEXP, bytes: SEXP) -> SEXP {
    entry(|| {
        let guard = pool()?;
        let m = guard.as_ref().ok_or_else(no_pool)?;
        let slot = slot_arg(slot, m.pool.size())? as usize;
        scalar_logical(m.dispatch.has_room(slot, as_real(bytes)?.max(0.0) as usize) as i32)
    })
}

/// R has read the last reply: the waiting messages may go.
#[no_mangle]
pub extern "C" fn ps_pool_dispatch_rs() -> SEXP {
    entry(|| {
        let mut guard = pool()?;
        if let Some(m) = guard.as_mut() {
            m.dispatch_due = false;
            send_waiting(m)?;
        }
        Ok(nil())
    })
}

/// The next event of the pool, waiting at most `timeout` seconds (NA: no
/// limit); with `idle` FALSE it does not wait when no message is out:
/// - `list(0, what, payload, plain)`: a reply, with what R gave its message;
/// - `list(1, slot, pid, begun, unread, waiting)`: the worker in `slot`
///   died; `begun`: the whats of the messages it had begun (they failed),
///   `unread`: those it never read and that were not kept (the kept ones
///   wait again, first), `waiting`: how many messages wait for a worker;
/// - `list(2)` the user interrupted, `list(3)` time up, `list(4)` no message
///   is out (with `idle` FALSE);
/// - `list(5, slot, tag, expected)`: a reply out of step (a bug);
/// - `list(6, payload)`: a condition a task signalled, relayed at once.
#[no_mangle]
pub extern "C" fn ps_pool_next_event_rs(timeout: SEXP, idle: SEXP) -> SEXP {
    entry(|| {
        let t = as_real(timeout)?;
        let wait_idle = crate::args::flag_arg(idle)?;
        let deadline = (t.is_finite() && t >= 0.0).then(|| Instant::now() + Duration::from_secs_f64(t));
        let mut guard = pool()?;
        let m = guard.as_mut().ok_or_else(no_pool)?;
        // (R has read every reply it was given by now; one read off its ring
        // before, that may hold handles, is still to be given: harvest() stops
        // after such a reply, so it is the last)
        m.dispatch_due = m.arrived.back().is_some_and(Arrived::holds_handles);
        send_waiting(m)?;
        let mut scope = Protect::new();
        if let Some(a) = m.arrived.pop_front() {
            return event(m, &mut scope, a);
        }
        if !wait_idle && m.dispatch.outstanding() == 0 {
            return code(&mut scope, 4);
        }
        let spin = if m.dispatch.busy_workers() < m.cores { m.spin } else { Duration::ZERO };
        let patience = Patience { spin, ..Patience::default() };
        let mut buf = buffer();
        let got = m.pool.receive_any(&mut buf, patience, &mut master_give_up(deadline));
        match got {
            Ok(Received::Message { slot, tag }) => {
                // (the buffer's bytes are lent to the event and taken back: no
                // allocation per message)
                let a = arrived(m, slot, tag, std::mem::take(&mut *buf));
                let (out, payload) = event_lending(m, &mut scope, a);
                *buf = payload;
                shrink(&mut buf);
                out
            }
            Ok(Received::Died { slot, pid }) => {
                let unread: Vec<u64> = m.pool.vacate(slot).into_iter().map(|t| t & !FLAGS).collect();
                let lost = m.dispatch.died(slot as usize, &unread);
                let begun = whats(&mut scope, lost.begun.iter().map(|s| s.what))?;
                let unread = whats(&mut scope, lost.unread.iter().map(|s| s.what))?;
                send_waiting(m)?;
                let items = [
                    code_sexp(&mut scope, 1)?,
                    scope.protect(scalar_integer(slot as i32 + 1)?)?,
                    scope.protect(scalar_integer(pid as i32)?)?,
                    begun,
                    unread,
                    scope.protect(scalar_integer(m.dispatch.waiting() as i32)?)?,
                ];
                list_of(&items)
            }
            Err(RingError::Stopped(StopReason::Interrupted)) => code(&mut scope, 2),
            Err(RingError::Stopped(_)) => code(&mut scope, 3),
            Err(RingError::Corrupt(why)) => Err(RError::system(format!("the pool's result ring is damaged: {why}"))),
        }
    })
}

/// A message from a worker, read off its ring.
pub enum Arrived {
    /// A reply to the message whose `what` R kept under this key; `plain`:
    /// it holds no handle.
    Reply { what: usize, payload: Vec<u8>, plain: bool },
    /// A condition a task signalled, relayed at once.
    Condition { payload: Vec<u8> },
    /// A reply out of step (a bug): its worker's slot and tag, and the tag expected.
    OutOfStep { slot: u64, tag: u64, expected: Option<u64> },
}

impl Arrived {
    fn holds_handles(&self) -> bool {
        matches!(self, Arrived::Reply { plain: false, .. })
    }
}

/// The message `tag` with `payload` from the worker in `slot`, its reply
/// recorded as answered.
fn arrived(m: &mut Master, slot: u64, tag: u64, payload: Vec<u8>) -> Arrived {
    if tag & CONDITION != 0 {
        return Arrived::Condition { payload };
    }
    let plain = tag & PLAIN != 0;
    let tag = tag & !PLAIN;
    match m.dispatch.answered(slot as usize, tag) {
        Ok(sent) => Arrived::Reply { what: sent.what, payload, plain },
        Err(expected) => Arrived::OutOfStep { slot, tag, expected },
    }
}

/// Reads the messages that have arrived, without waiting, into `m.arrived`
/// (R's next waits are given them first, in order), so that their workers
/// have room for the messages that wait, and sends those. Stops after a
/// reply that may hold handles: nothing is sent until R has read it. FALSE
/// when the user interrupted a long read (the pool is then restarted).
fn harvest(m: &mut Master) -> Result<bool, RError> {
    let mut give_up = master_give_up(None);
    while !m.dispatch_due {
        let mut payload = Vec::new();
        match m.pool.try_receive(&mut payload, &mut give_up) {
            Ok(Some((slot, tag))) => {
                let a = arrived(m, slot, tag, payload);
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

/// The event R is given for `a` (see ps_pool_next_event_rs).
fn event(m: &mut Master, scope: &mut Protect, a: Arrived) -> Result<SEXP, RError> {
    event_lending(m, scope, a).0
}

/// [`event`], and the payload's buffer back.
fn event_lending(m: &mut Master, scope: &mut Protect, a: Arrived) -> (Result<SEXP, RError>, Vec<u8>) {
    match a {
        Arrived::Condition { payload } => {
            let out = (|| {
                let raw = scope.protect(raw_vec(&payload)?)?;
                let items = [code_sexp(scope, 6)?, raw];
                list_of(&items)
            })();
            (out, payload)
        }
        Arrived::Reply { what, payload, plain } => {
            let out = (|| {
                let what = scope.protect(crate::r_store::take(what))?;
                let raw = scope.protect(raw_vec(&payload)?)?;
                if plain {
                    send_waiting(m)?;
                } else {
                    m.dispatch_due = true;
                }
                let items = [code_sexp(scope, 0)?, what, raw, scope.protect(scalar_logical(plain as i32)?)?];
                list_of(&items)
            })();
            (out, payload)
        }
        Arrived::OutOfStep { slot, tag, expected } => {
            let out = (|| {
                let items = [
                    code_sexp(scope, 5)?,
                    scope.protect(scalar_integer(slot as i32 + 1)?)?,
                    scope.protect(scalar_real(tag as f64)?)?,
                    scope.protect(scalar_real(expected.map_or(f64::NAN, |e| e as f64))?)?,
                ];
                list_of(&items)
            })();
            (out, Vec::new())
        }
    }
}

fn code_sexp(scope: &mut Protect, c: i32) -> Result<SEXP, RError> {
    scope.protect(scalar_integer(c)?)
}

fn code(scope: &mut Protect, c: i32) -> Result<SEXP, RError> {
    let c = code_sexp(scope, c)?;
    list_of(&[c])
}

/// A list of the objects kept under `keys`, no longer kept.
fn whats(scope: &mut Protect, keys: impl ExactSizeIterator<Item = usize>) -> Result<SEXP, RError> {
    let out = scope.alloc_vector(SEXPTYPE::VECSXP, keys.len() as R_xlen_t)?;
    for (i, key) in keys.enumerate() {
        // SAFETY: `out` is a protected list of keys.len() elements; setting an
        // element allocates nothing.
        unsafe { SET_VECTOR_ELT(out, i as R_xlen_t, crate::r_store::take(key)) };
    }
    Ok(out)
}
