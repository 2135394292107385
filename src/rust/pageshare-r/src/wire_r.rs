//! The pool's wire as R sees it: an event of the master's wait and a task a
//! worker receives are named lists whose names and event names come from
//! pageshare-pool's `wire.rs` (`EventKind::fields`, `TASK_FIELDS`), never
//! positions R or C must know. The names vectors and the events' names are
//! made once per process and kept (a wait returns an event per task: they
//! are not worth making each time).

use crate::boundary::RError;
use crate::r_calls::{mk_string, scalar_string, try_r, Protect};
use crate::r_sys::*;
use pageshare_pool::wire::{EventKind, TASK_FIELDS};
use std::cell::RefCell;

/// The kept R objects: a names vector per event kind (by its index in
/// `EventKind::ALL`), then the task's; then each event's name.
const SLOTS: usize = 2 * EventKind::ALL.len() + 1;

thread_local! {
    static KEPT: RefCell<[Option<SEXP>; SLOTS]> = const { RefCell::new([None; SLOTS]) };
}

fn index(kind: EventKind) -> usize {
    EventKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

/// The object kept in `slot`, made by `make` the first time (preserved from
/// the collector for the life of the process, and not mutable: R copies it
/// before any change).
fn kept(slot: usize, make: impl FnOnce() -> Result<SEXP, RError>) -> Result<SEXP, RError> {
    if let Some(x) = KEPT.with(|k| k.borrow()[slot]) {
        return Ok(x);
    }
    let mut scope = Protect::new();
    let x = scope.protect(make()?)?;
    // SAFETY: a valid object on R's main thread; preserving it allocates.
    try_r(|| unsafe { R_PreserveObject(x) })?;
    // SAFETY: as above.
    unsafe { MARK_NOT_MUTABLE(x) };
    KEPT.with(|k| k.borrow_mut()[slot] = Some(x));
    Ok(x)
}

fn names(fields: &[&str]) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let out = scope.alloc_vector(SEXPTYPE::STRSXP, fields.len() as R_xlen_t)?;
    for (i, f) in fields.iter().enumerate() {
        let s = mk_string(f)?;
        // SAFETY: a protected character vector of fields.len() elements.
        unsafe { SET_STRING_ELT(out, i as R_xlen_t, s) };
    }
    Ok(out)
}

/// A list of `values` named `names` (a names vector of as many elements).
fn named(names: SEXP, values: &[SEXP]) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let out = scope.alloc_vector(SEXPTYPE::VECSXP, values.len() as R_xlen_t)?;
    for (i, v) in values.iter().enumerate() {
        // SAFETY: a protected list of values.len() elements.
        unsafe { SET_VECTOR_ELT(out, i as R_xlen_t, *v) };
    }
    // SAFETY: names of the list's length, set on a fresh list (R checks
    // nothing that can fail for a character vector of the right length).
    try_r(|| unsafe { Rf_setAttrib(out, R_NamesSymbol, names) })?;
    Ok(out)
}

/// The event `kind` as R is given it: `list(event = <its name>, <fields>)`,
/// with `values` the fields after `event`, in `kind.fields()`'s order (they
/// must be protected by the caller).
pub fn event(kind: EventKind, values: &[SEXP]) -> Result<SEXP, RError> {
    let fields = kind.fields();
    if values.len() + 1 != fields.len() {
        return Err(RError::internal(format!("the event '{}' has {} fields", kind.name(), fields.len())));
    }
    let i = index(kind);
    let names = kept(i, || names(fields))?;
    let name = kept(EventKind::ALL.len() + 1 + i, || scalar_string(kind.name()))?;
    let mut all = Vec::with_capacity(fields.len());
    all.push(name);
    all.extend_from_slice(values);
    named(names, &all)
}

/// A task as a worker's loop is given it: its fields in `TASK_FIELDS`'s
/// order (they must be protected by the caller).
pub fn task(values: &[SEXP; TASK_FIELDS.len()]) -> Result<SEXP, RError> {
    let names = kept(EventKind::ALL.len(), || names(&TASK_FIELDS))?;
    named(names, values)
}

/// An event of `kind` with no field but its name.
pub fn bare_event(kind: EventKind) -> Result<SEXP, RError> {
    event(kind, &[])
}
