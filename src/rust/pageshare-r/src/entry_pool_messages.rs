#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points by which the master sends messages to the workers
//! of its pool and hears back (R/pool-state.R). What the master decides
//! (which worker has which message, which wait for room, what a wait
//! returns) is pageshare-pool's `Master` (pool_master.rs): a small task costs
//! R no bookkeeping of its own. With each message R gives `what` (an R
//! object: what to do with the reply), kept until the reply comes back with
//! it (r_store.rs). R is given the pool's events as named lists (wire_r.rs).

use crate::boundary::{entry, RError};
use crate::pool_master::{buffer, damaged, master_give_up, no_pool, pool, shrink};
use crate::r_calls::{as_real, raw_vec, scalar_integer, scalar_logical, scalar_real, Protect};
use crate::r_sys::*;
use crate::wire_r;
use pageshare_pool::dispatch::{FreeSlot, Place};
use pageshare_pool::master::Damaged;
use pageshare_pool::master::Submitted;
use pageshare_pool::wire::{Event, EventKind, Relay};
use std::time::{Duration, Instant};

const NA_INT: i32 = i32::MIN;

/// Sends `payload` (`plain`: it holds no handle) with `what` to the worker
/// in `slot` (1-based), or, when `slot` is NA, to the least busy worker with
/// room, else it waits for one (and is kept, to go to another worker should
/// its worker die before reading it; one for a slot whose worker dies
/// unread is reported "unread", see pool_on_death()). Returns the
/// message's tag, or -1 when the worker in `slot` is gone and -2 when the
/// user interrupted a long send.
#[no_mangle]
pub extern "C" fn ps_pool_submit_rs(slot: SEXP, payload: SEXP, plain: SEXP, what: SEXP) -> SEXP {
    entry(|| {
        // (NA: R's NA_integer_ is the smallest int)
        let slot = (crate::r_calls::as_integer(slot)? != NA_INT).then_some(slot);
        let bytes = crate::args::raw_arg(payload, "payload")?;
        let plain = crate::args::flag_arg(plain)?;
        scalar_real(submit(slot, bytes, plain, what)?)
    })
}

/// `ps_pool_submit`'s work (`slot` None: NA): the message's tag, or -1 / -2.
pub fn submit(slot: Option<SEXP>, bytes: &[u8], plain: bool, what: SEXP) -> Result<f64, RError> {
    let mut guard = pool()?;
    let m = guard.as_mut().ok_or_else(no_pool)?;
    let slot = match slot {
        Some(s) => Some(crate::args::slot_arg(s, m.pool().size())? as usize),
        None => None,
    };
    let key = crate::r_store::keep(what)?;
    let submitted = m.submit(slot, bytes, plain, key, &mut master_give_up(None)).map_err(damaged)?;
    Ok(match submitted {
        Submitted::Number(n) => n as f64,
        Submitted::Gone(key) => {
            crate::r_store::take(key);
            -1.0
        }
        Submitted::Interrupted(key) => {
            crate::r_store::take(key);
            -2.0
        }
    })
}

/// The least busy worker among `slots` (1-based; NULL: all) with room for a
/// message of `bytes`: its slot, NA when all are busy, 0 when none is alive.
#[no_mangle]
pub extern "C" fn ps_pool_free_slot_rs(bytes: SEXP, slots: SEXP) -> SEXP {
    entry(|| {
        let guard = pool()?;
        let m = guard.as_ref().ok_or_else(no_pool)?;
        let slots = crate::args::slots_arg(slots, m.pool().size() as usize)?;
        let bytes = as_real(bytes)?.max(0.0) as usize;
        scalar_integer(match m.dispatch().free_slot(bytes, slots.as_deref()) {
            FreeSlot::Slot(s) => s as i32 + 1,
            FreeSlot::Busy => NA_INT,
            FreeSlot::NoneAlive => 0,
        })
    })
}

/// Cancels what can be cancelled of the message `tag` without a worker:
/// a message still waiting is taken out of the queue (its `what` let go).
/// Returns where the message was, as a named list: `place` ("waiting": now
/// withdrawn; "running": its worker's oldest message; "behind": sent behind
/// another; "none": answered or unknown), `slot` (1-based, or NA) and
/// `alone` (its worker has no other message).
#[no_mangle]
pub extern "C" fn ps_pool_cancel_rs(tag: SEXP) -> SEXP {
    entry(|| {
        let tag = as_real(tag)?;
        let mut guard = pool()?;
        let place = match guard.as_mut() {
            Some(m) if tag >= 1.0 && tag.fract() == 0.0 => {
                let place = m.dispatch().place(tag as u64);
                if place == Some(Place::Waiting) {
                    if let Some(key) = m.withdraw(tag as u64) {
                        crate::r_store::take(key);
                    }
                }
                place
            }
            _ => None,
        };
        drop(guard);
        let (name, slot, alone) = match place {
            Some(Place::Waiting) => ("waiting", NA_INT, false),
            Some(Place::Sent { slot, first, alone }) => {
                (if first { "running" } else { "behind" }, slot as i32 + 1, alone)
            }
            None => ("none", NA_INT, false),
        };
        let mut p = Protect::new();
        let name = p.protect(crate::r_calls::scalar_string(name)?)?;
        let slot = p.protect(scalar_integer(slot)?)?;
        let alone = p.protect(scalar_logical(alone as i32)?)?;
        crate::r_calls::named_list(&[("place", name), ("slot", slot), ("alone", alone)])
    })
}

/// May a message of `bytes` go to the worker in `slot` (1-based) now?
#[no_mangle]
pub extern "C" fn ps_pool_has_room_rs(slot: SEXP, bytes: SEXP) -> SEXP {
    entry(|| {
        let guard = pool()?;
        let m = guard.as_ref().ok_or_else(no_pool)?;
        let slot = crate::args::slot_arg(slot, m.pool().size())? as usize;
        scalar_logical(m.dispatch().has_room(slot, as_real(bytes)?.max(0.0) as usize) as i32)
    })
}

/// R has read the last reply: the waiting messages may go.
#[no_mangle]
pub extern "C" fn ps_pool_dispatch_rs() -> SEXP {
    entry(|| {
        let mut guard = pool()?;
        if let Some(m) = guard.as_mut() {
            m.dispatch_now(&mut master_give_up(None)).map_err(damaged)?;
        }
        Ok(nil())
    })
}

/// The next event of the pool (see `Event` in pageshare-pool's wire.rs),
/// waiting at most `timeout` seconds (NA: no limit); with `idle` FALSE it
/// does not wait when no message is out (event "idle"). A reply's payload is
/// the master's buffer, lent: give it back with `give_back`.
pub fn next_event(timeout: SEXP, idle: SEXP) -> Result<Event<usize>, RError> {
    next_event_within(as_real(timeout)?, crate::args::flag_arg(idle)?)
}

/// `next_event()` with its arguments as numbers: `t` seconds (not finite or
/// negative: no limit), `wait_idle`.
pub fn next_event_within(t: f64, wait_idle: bool) -> Result<Event<usize>, RError> {
    let deadline = (t.is_finite() && t >= 0.0).then(|| Instant::now() + Duration::from_secs_f64(t));
    let mut guard = pool()?;
    let m = guard.as_mut().ok_or_else(no_pool)?;
    let mut buf = buffer();
    m.next_event(&mut buf, wait_idle, &mut master_give_up(deadline)).map_err(damaged)
}

/// The bytes of a reply's payload back in the master's buffer (no
/// allocation per message).
pub fn give_back(mut payload: Vec<u8>) {
    shrink(&mut payload);
    *buffer() = payload;
}

/// An event as R is given it, a named list `list(event = <name>, <fields>)`
/// (wire_r.rs), with the objects R kept with its messages (no longer kept):
/// - "reply" (`what`, `payload`, `plain`, `value`, `relay`), with what R gave
///   its message; `relay` is NULL, or the task's output and conditions
///   (relay.rs), split off the head of the payload;
/// - "died" (`slot`, `pid`, `begun`, `unread`, `waiting`): `begun` and
///   `unread` are lists of the whats of the messages it had begun and of
///   those it never read and that were not kept;
/// - "interrupted", "timed_out", "idle", "delivered";
/// - "out_of_step" (`slot`, `tag`, `expected`): a reply out of step (a bug);
/// - "condition" (`payload`): a condition a task signalled, relayed at once.
pub fn event_to_r(ev: Event<usize>) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    match ev {
        Event::Reply { what, payload, plain, value, relay } => {
            let out = (|| {
                let what = scope.protect(crate::r_store::take(what))?;
                let (relayed, rest) = if relay {
                    let (r, rest) =
                        Relay::split(&payload).map_err(|e| damaged(Damaged(format!("a reply's relay: {e}"))))?;
                    (scope.protect(crate::relay::relay_to_r(&r)?)?, rest)
                } else {
                    (nil(), &payload[..])
                };
                let raw = scope.protect(raw_vec(rest)?)?;
                let items = [
                    what,
                    raw,
                    scope.protect(scalar_logical(plain as i32)?)?,
                    scope.protect(scalar_logical(value as i32)?)?,
                    relayed,
                ];
                wire_r::event(EventKind::Reply, &items)
            })();
            give_back(payload);
            out
        }
        Event::Condition { payload } => {
            let raw = scope.protect(raw_vec(&payload)?)?;
            wire_r::event(EventKind::Condition, &[raw])
        }
        Event::Died { slot, pid, begun, unread, waiting, damaged, last_words } => {
            let begun = whats(&mut scope, begun.into_iter())?;
            let unread = whats(&mut scope, unread.into_iter())?;
            let items = [
                scope.protect(scalar_integer(slot as i32 + 1)?)?,
                scope.protect(scalar_integer(pid as i32)?)?,
                begun,
                unread,
                scope.protect(scalar_integer(waiting as i32)?)?,
                scope.protect(crate::r_calls::scalar_string(damaged.unwrap_or(""))?)?,
                scope.protect(crate::r_calls::scalar_string(&last_words)?)?,
            ];
            wire_r::event(EventKind::Died, &items)
        }
        Event::OutOfStep { slot, number, expected } => {
            let items = [
                scope.protect(scalar_integer(slot as i32 + 1)?)?,
                scope.protect(scalar_real(number as f64)?)?,
                scope.protect(scalar_real(expected.map_or(f64::NAN, |e| e as f64))?)?,
            ];
            wire_r::event(EventKind::OutOfStep, &items)
        }
        other => wire_r::bare_event(other.kind()),
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
