#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points the workers and their master use around a task
//! (R/cluster.R, R/future*.R, R/doshm*.R): receiving handles, handing results
//! over, checking that others can open what this process shares. Each is
//! called by its C shell in src/entry_points.c and runs its body through [`entry`].

use crate::altrep::{IN_TASK, RECEIVER_MODE, RECEIVE_FAILURES};
use crate::args::flag_arg;
use crate::boundary::{entry, msg, RError};
use crate::entry_memshare::string_columns;
use crate::r_calls::{scalar_integer, scalar_logical};
use crate::r_sys::*;
use crate::view::view_of;
use pageshare_core::segment;
use std::sync::atomic::Ordering;

/// Receiver mode on or off (see `altrep::RECEIVER_MODE`).
#[no_mangle]
pub extern "C" fn ps_set_receiver_mode_rs(on: SEXP) -> SEXP {
    entry(|| {
        RECEIVER_MODE.store(flag_arg(on)?, Ordering::Relaxed);
        Ok(nil())
    })
}

/// A pageshare task starts (TRUE) or ends (FALSE) on a worker.
#[no_mangle]
pub extern "C" fn ps_task_state_rs(running: SEXP) -> SEXP {
    entry(|| {
        IN_TASK.store(flag_arg(running)?, Ordering::Relaxed);
        Ok(nil())
    })
}

/// The handles this process could not open since the last call, as
/// list(class = <chr>, message = <chr>); forgets them.
#[no_mangle]
pub extern "C" fn ps_take_receive_failures_rs() -> SEXP {
    entry(|| {
        let taken: Vec<(&'static str, String)> =
            std::mem::take(&mut *RECEIVE_FAILURES.lock().unwrap_or_else(|p| p.into_inner()));
        string_columns(("class", "message"), taken.into_iter().map(|(c, m)| (c.to_string(), m)).collect())
    })
}

/// Can receivers open what this process shares (see
/// `os::descriptors_openable_by_others`)?
#[no_mangle]
pub extern "C" fn ps_shares_openable_rs() -> SEXP {
    entry(|| scalar_logical(pageshare_core::os::descriptors_openable_by_others() as i32))
}

/// A worker starting a task: close the descriptors of results handed to the
/// master before (it has received them by now).
#[no_mangle]
pub extern "C" fn ps_release_handoffs_rs() -> SEXP {
    entry(|| scalar_integer(segment::release_handoffs() as i32))
}

/// A worker handing a view to its master: stop holding it (see `Segment::disown`).
#[no_mangle]
pub extern "C" fn ps_disown_rs(x: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: a .Call entry point: R's main thread, a valid SEXP.
        let v = unsafe { view_of(x) }.ok_or_else(|| RError::argument("`x` is not a pageshare view"))?;
        v.seg.disown();
        Ok(x)
    })
}

/// A master receiving a view from a worker: hold it from now on.
#[no_mangle]
pub extern "C" fn ps_adopt_rs(x: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: a .Call entry point: R's main thread, a valid SEXP.
        let v = unsafe { view_of(x) }.ok_or_else(|| RError::argument("`x` is not a pageshare view"))?;
        v.seg.adopt().map_err(msg)?;
        Ok(x)
    })
}

/// The number of bytes serialize() would write for `x`, counted without
/// building them (future >= 1.40 sizes globals the same way). Views write
/// themselves as handles inside a handle scope, so a shared global counts at
/// a handle's size there.
#[no_mangle]
pub extern "C" fn ps_serialized_size_rs(x: SEXP) -> SEXP {
    entry(|| crate::r_calls::scalar_real(crate::r_serialize::serialized_size(x)?))
}
