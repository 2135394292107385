#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! What a task writes to its standard output and the conditions it signals,
//! relayed to the caller as future relays them (the wire's `Relay`, in
//! pageshare-pool's wire.rs):
//! - a worker's standard output is a memory file (pageshare-core's
//!   `StdoutCatch`), so a task that writes nothing costs one `lseek()` and no
//!   R code; the conditions its task signals are kept here by the worker's
//!   calling handler (R/pool-worker.R), serialized by R's serializer;
//! - with a task's reply both go to the master at the head of its payload
//!   (the reply's tag says `RELAY`): see [`attach`];
//! - the master gives R a reply's relay as `list(stdout, conditions)`
//!   (`RELAY_FIELDS`), which the door that waits for the reply re-emits
//!   (relay_emit() in R/pool-state.R).

use crate::boundary::{entry, RError};
use crate::r_calls::{scalar_logical, Protect};
use crate::r_sys::*;
use pageshare_core::os::StdoutCatch;
use pageshare_pool::wire::{Header, Kind, Relay, RELAY_FIELDS};
use std::sync::{Mutex, OnceLock};

/// A worker's standard output, caught (none where it could not be caught:
/// the output then goes where it went before, nowhere).
static CATCH: OnceLock<Option<StdoutCatch>> = OnceLock::new();
/// The conditions the running task signalled, each R's serialization.
static CONDITIONS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn conditions() -> std::sync::MutexGuard<'static, Vec<Vec<u8>>> {
    CONDITIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A worker catches its standard output from now on (once).
pub fn catch_stdout() {
    CATCH.get_or_init(|| StdoutCatch::start().ok());
}

mod c_stdio {
    extern "C" {
        /// C's standard output stream (ISO C's `stdout`, a variable of this
        /// name in glibc and musl), through which R writes its console output.
        pub static mut stdout: *mut libc::FILE;
    }
}

/// What the running task wrote since the last reply: R's console writes
/// through C's buffered `stdout`, flushed first (flushing one stream costs
/// less than flushing all with fflush(NULL)).
fn take_stdout() -> Vec<u8> {
    let Some(Some(c)) = CATCH.get() else { return Vec::new() };
    // SAFETY: `stdout` is set up by the C library before any code of ours
    // runs and is read here on R's main thread, the only one that writes
    // to it; fflush() of a valid stream cannot misread memory (what it
    // could not write stays unwritten).
    unsafe { libc::fflush(c_stdio::stdout) };
    c.take().unwrap_or_default()
}

/// A reply about to go to the master with `header` and `bytes`: when its
/// task wrote output or kept conditions, the reply's payload is the relay
/// followed by `bytes`, and its header says `RELAY`. None: `bytes` go as they
/// are.
pub fn attach(header: &mut Header, bytes: &[u8]) -> Option<Vec<u8>> {
    if header.kind != Kind::Reply {
        return None;
    }
    let stdout = take_stdout();
    let kept = std::mem::take(&mut *conditions());
    if stdout.is_empty() && kept.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() + stdout.len() + 64);
    Relay::write(&mut out, &stdout, &kept);
    out.extend_from_slice(bytes);
    header.relay = true;
    Some(out)
}

/// A worker keeps `cond`, a condition its running task signalled, for the
/// task's reply, if its serialization takes at most `limit` bytes (a
/// condition's call may hold the values of its arguments). TRUE: kept;
/// FALSE: it cannot be serialized; NA: it is larger (not kept).
#[no_mangle]
pub extern "C" fn ps_pool_worker_keep_condition_rs(cond: SEXP, limit: SEXP) -> SEXP {
    entry(|| {
        let limit = crate::r_calls::as_real(limit)?;
        let kept = match crate::r_serialize::serialize(cond) {
            Ok((bytes, _)) if bytes.len() as f64 > limit => i32::MIN,
            Ok((bytes, _)) => {
                conditions().push(bytes);
                1
            }
            // (R's error is left behind: the condition is simply not relayed)
            Err(_) => 0,
        };
        scalar_logical(kept)
    })
}

/// A reply's relay as R is given it: `list(stdout, conditions)`, the output
/// as one string (NUL bytes, which R's strings cannot hold, dropped) or
/// NULL, the conditions as a list (one that cannot be read is left out).
/// Unprotected.
pub fn relay_to_r(relay: &Relay) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let stdout = if relay.stdout.is_empty() {
        nil()
    } else {
        let text: Vec<u8> = relay.stdout.iter().copied().filter(|b| *b != 0).collect();
        let c = crate::r_calls::mk_char(&text, cetype_t::CE_NATIVE)?;
        let s = scope.alloc_vector(SEXPTYPE::STRSXP, 1)?;
        // SAFETY: a protected character vector of one element.
        unsafe { SET_STRING_ELT(s, 0, c) };
        s
    };
    let mut read = Vec::with_capacity(relay.conditions.len());
    for bytes in &relay.conditions {
        if let Ok(c) = crate::r_serialize::unserialize(bytes) {
            read.push(scope.protect(c)?);
        }
    }
    let conds = scope.protect(crate::r_calls::list_of(&read)?)?;
    let [a, b] = RELAY_FIELDS;
    crate::r_calls::named_list(&[(a, stdout), (b, conds)])
}
