#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points by which the master sends messages to the workers
//! of its pool and hears back (R/pool-state.R). Which worker has which
//! message, and which wait for room, is kept by pageshare-pool's `Dispatch`
//! (pool_master.rs): a small task costs R no bookkeeping of its own. With
//! each message R gives `what` (an R object: what to do with the reply),
//! kept until the reply comes back with it (r_store.rs). R is given the
//! pool's events as named lists (wire_r.rs).

use crate::boundary::{entry, RError};
use crate::pool_master::{
    arrived, buffer, harvest, master_give_up, no_pool, pool, send_to, send_waiting, shrink, Master, Sending,
};
use crate::r_calls::{as_real, raw_vec, scalar_integer, scalar_logical, scalar_real, Protect};
use crate::r_sys::*;
use crate::wire_r;
use pageshare_pool::dispatch::{FreeSlot, Message, Sent, Waiting};
use pageshare_pool::pool::Received;
use pageshare_pool::ring::RingError;
use pageshare_pool::wait::{Patience, StopReason};
use pageshare_pool::wire::{Event, EventKind, FLAGS};
use std::time::{Duration, Instant};

const NA_INT: i32 = i32::MIN;

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
            Some(crate::args::slot_arg(slot, m.pool.size())? as usize)
        };
        let bytes = crate::args::raw_arg(payload, "payload")?;
        let plain = crate::args::flag_arg(plain)?;
        let keep = slot.is_none() || crate::args::flag_arg(resend)?;
        let tag = m.dispatch.next_tag();
        // (the bytes are copied only for a message that is kept or waits)
        let kept = || Message { payload: bytes.to_vec(), plain };
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
            Some(s) => match send_to(m, s, tag, bytes, plain)? {
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
        let slot = crate::args::slot_arg(slot, m.pool.size())? as usize;
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

/// The next event of the pool (see `Event` in pageshare-pool's wire.rs), as
/// a named list `list(event = <name>, <fields>)` (wire_r.rs), waiting at
/// most `timeout` seconds (NA: no limit); with `idle` FALSE it does not wait
/// when no message is out (event "idle"):
/// - "reply" (`what`, `payload`, `plain`), with what R gave its message;
/// - "died" (`slot`, `pid`, `begun`, `unread`, `waiting`): `begun` and
///   `unread` are lists of the whats of the messages it had begun and of
///   those it never read and that were not kept;
/// - "interrupted", "timed_out", "idle";
/// - "out_of_step" (`slot`, `tag`, `expected`): a reply out of step (a bug);
/// - "condition" (`payload`): a condition a task signalled, relayed at once.
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
        m.dispatch_due = m.arrived.back().is_some_and(Event::holds_handles);
        send_waiting(m)?;
        let mut scope = Protect::new();
        if let Some(a) = m.arrived.pop_front() {
            return event(m, &mut scope, a);
        }
        if !wait_idle && m.dispatch.outstanding() == 0 {
            return wire_r::bare_event(EventKind::Idle);
        }
        let spin = if m.dispatch.busy_workers() < m.cores { m.spin } else { Duration::ZERO };
        let patience = Patience { spin, ..Patience::default() };
        let mut buf = buffer();
        let got = m.pool.receive_any(&mut buf, patience, &mut master_give_up(deadline));
        match got {
            Ok(Received::Message { slot, tag }) => {
                // (the buffer's bytes are lent to the event and taken back: no
                // allocation per message)
                let a = arrived(m, slot, tag, std::mem::take(&mut *buf))?;
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
                    scope.protect(scalar_integer(slot as i32 + 1)?)?,
                    scope.protect(scalar_integer(pid as i32)?)?,
                    begun,
                    unread,
                    scope.protect(scalar_integer(m.dispatch.waiting() as i32)?)?,
                ];
                wire_r::event(EventKind::Died, &items)
            }
            Err(RingError::Stopped(StopReason::Interrupted)) => wire_r::bare_event(EventKind::Interrupted),
            Err(RingError::Stopped(_)) => wire_r::bare_event(EventKind::TimedOut),
            Err(RingError::Corrupt(why)) => Err(RError::system(format!("the pool's result ring is damaged: {why}"))),
        }
    })
}

/// The event R is given for `a`, a message read off a ring (see ps_pool_next_event_rs).
fn event(m: &mut Master, scope: &mut Protect, a: Event<usize>) -> Result<SEXP, RError> {
    event_lending(m, scope, a).0
}

/// [`event`], and the payload's buffer back.
fn event_lending(m: &mut Master, scope: &mut Protect, a: Event<usize>) -> (Result<SEXP, RError>, Vec<u8>) {
    match a {
        Event::Condition { payload } => {
            let out = (|| {
                let raw = scope.protect(raw_vec(&payload)?)?;
                wire_r::event(EventKind::Condition, &[raw])
            })();
            (out, payload)
        }
        Event::Reply { what, payload, plain } => {
            let out = (|| {
                let what = scope.protect(crate::r_store::take(what))?;
                let raw = scope.protect(raw_vec(&payload)?)?;
                if plain {
                    send_waiting(m)?;
                } else {
                    m.dispatch_due = true;
                }
                let items = [what, raw, scope.protect(scalar_logical(plain as i32)?)?];
                wire_r::event(EventKind::Reply, &items)
            })();
            (out, payload)
        }
        Event::OutOfStep { slot, number, expected } => {
            let out = (|| {
                let items = [
                    scope.protect(scalar_integer(slot as i32 + 1)?)?,
                    scope.protect(scalar_real(number as f64)?)?,
                    scope.protect(scalar_real(expected.map_or(f64::NAN, |e| e as f64))?)?,
                ];
                wire_r::event(EventKind::OutOfStep, &items)
            })();
            (out, Vec::new())
        }
        // (made by the master's wait itself, never read off a ring)
        Event::Died { .. } | Event::Interrupted | Event::TimedOut | Event::Idle | Event::Delivered => {
            (Err(RError::internal("an event read ahead that is not a message")), Vec::new())
        }
    }
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
