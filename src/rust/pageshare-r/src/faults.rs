//! Fault injection for the tests of the boundary (tests/testthat/test-boundary.R):
//! `ps_inject_fault(site, what)` arms one fault, which fires at the next call
//! of that kind of entry point or ALTREP method, inside its Rust body: a
//! panic, or an R error raised by an R API call (a string with an embedded
//! NUL, which `mkCharLenCE` refuses). Disarmed, a site costs one relaxed atomic load.

use crate::boundary::{entry, RError};
use crate::r_calls;
use crate::r_sys::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a fault can be injected: a `.Call` entry point, or a kind of ALTREP method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Site {
    Entry = 1,
    Length,
    Dataptr,
    DataptrOrNull,
    ExtractSubset,
    Duplicate,
    SerializedState,
    Unserialize,
    Inspect,
    StringElt,
    StringSetElt,
    Elt,
    GetRegion,
}

const SITES: [(&str, Site); 13] = [
    ("entry", Site::Entry),
    ("length", Site::Length),
    ("dataptr", Site::Dataptr),
    ("dataptr_or_null", Site::DataptrOrNull),
    ("extract_subset", Site::ExtractSubset),
    ("duplicate", Site::Duplicate),
    ("serialized_state", Site::SerializedState),
    ("unserialize", Site::Unserialize),
    ("inspect", Site::Inspect),
    ("string_elt", Site::StringElt),
    ("string_set_elt", Site::StringSetElt),
    ("elt", Site::Elt),
    ("get_region", Site::GetRegion),
];

const PANIC: u32 = 1 << 8;
const R_ERROR: u32 = 2 << 8;

/// The armed fault: its site in the low byte, what to do above; 0 if none.
/// The C shells of the hottest methods read it too (`ps_faults_armed`).
#[no_mangle]
#[allow(non_upper_case_globals)]
static ps_faults_armed: AtomicU32 = AtomicU32::new(0);
use ps_faults_armed as ARMED;

/// Is any fault armed? (The hottest view methods answer without the
/// panic-catching wrapper while none is.)
#[inline]
pub fn none_armed() -> bool {
    ARMED.load(Ordering::Relaxed) == 0
}

/// Fire the armed fault if it is for `site` (and disarm it).
#[inline]
pub fn inject(site: Site) -> Result<(), RError> {
    let armed = ARMED.load(Ordering::Relaxed);
    if armed == 0 || armed & 0xff != site as u32 {
        return Ok(());
    }
    ARMED.store(0, Ordering::Relaxed);
    if armed & PANIC != 0 {
        // A panic as any other unwinds, without the panic hook's report.
        std::panic::resume_unwind(Box::new(format!("a fault injected for a test ({site:?})")));
    }
    let bad = b"a\0b";
    r_calls::mk_char(bad, cetype_t::CE_UTF8).map(|_| ())
}

/// `ps_inject_fault(site, what)`: arm a fault (`what` "panic" or "r_error") at
/// the next call of `site` ("entry", "length", "dataptr", ..., see `SITES`).
#[no_mangle]
pub extern "C" fn ps_inject_fault_rs(site: SEXP, what: SEXP) -> SEXP {
    entry(|| {
        let site = r_calls::string_arg(site, "site")?;
        let what = r_calls::string_arg(what, "what")?;
        let site = SITES
            .iter()
            .find(|(name, _)| *name == site)
            .ok_or_else(|| RError::argument(format!("no fault site '{site}'")))?
            .1;
        let what = match what.as_str() {
            "panic" => PANIC,
            "r_error" => R_ERROR,
            _ => return Err(RError::argument("`what` must be \"panic\" or \"r_error\"")),
        };
        // (the entry point that arms a fault must not fire it itself)
        ARMED.store(site as u32 | what, Ordering::Relaxed);
        Ok(nil())
    })
}

/// The environment variable that makes a process stop itself (SIGSTOP) as soon
/// as it has taken a key's creation lock in `share(x, key = )`, after creating
/// the file it names: the tests of tests/testthat/test-keys.R hold a process
/// there, deterministically, to show that the others do not hang on it.
const STOP_IN_KEY_LOCK: &str = "PAGESHARE_TEST_STOP_IN_KEY_LOCK";

/// Stop this process here if the tests asked for it (see [`STOP_IN_KEY_LOCK`]);
/// it goes on when it receives SIGCONT. Unset, this costs one look at the
/// environment per keyed share.
pub fn stop_in_key_lock_if_asked() {
    let Some(path) = std::env::var_os(STOP_IN_KEY_LOCK) else { return };
    if std::fs::write(&path, format!("{}\n", std::process::id())).is_ok() {
        // SAFETY: raise() only sends a signal to this process; SIGSTOP cannot
        // be caught, so no handler runs on this thread.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}
