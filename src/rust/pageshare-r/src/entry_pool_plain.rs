#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The plain path of pageshare's pool: a call with nothing to share (see
//! plain_call() in R/pool.R) and its reply go from shm_call() to the worker
//! and back without R code on the way, which would cost more than the trip:
//! - `ps_pool_call_plain`: shm_call()'s plain case, made and sent in one step;
//! - `ps_pool_next_event_delivered`: the pool's next event, a plain reply to
//!   a call read and delivered to its task here;
//! - `ps_task_value_plain`: shm_value()'s case of a call whose reply says
//!   "ok", also while it waits for it;
//! - `ps_pool_worker_serve`: a worker's loop over plain calls.
//!
//! The messages are the wire's (pageshare-pool's wire.rs): a task is a
//! `PlainCall` (the function as R's serialization, its arguments in the wire's
//! value encoding, wire_values.rs, where they are simple), a reply the value
//! in that encoding (`VALUE`) or R's serialization of list(status = "ok",
//! value). Anything else goes the general way, in R (R/pool*.R), from where
//! these leave off.
//!
//! R code runs on this path (the task's own, R's unserializer): always
//! through `try_r`, so its errors reach R's handlers after every Rust frame
//! has returned (see boundary.rs). No lock of the pool is held meanwhile.

use crate::boundary::{entry, RError};
use crate::r_calls::{as_real, raw_vec, scalar_logical, try_r, Protect};
use crate::r_serialize::{serialize, unserialize};
use crate::r_sys::*;
use crate::wire_values;
use pageshare_pool::wire::{Args, Event, EventKind, Header, PlainCall, ValueWriter};
use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::sync::atomic::Ordering;

/// Objects every plain call uses, made once per process and kept from the
/// collector (symbols are never collected).
#[derive(Clone, Copy)]
struct Constants {
    generation: SEXP,
    tag: SEXP,
    reply: SEXP,
    keep: SEXP,
    cancelled: SEXP,
    quote: SEXP,
    threshold_option: SEXP,
    /// "pageshare_task", the class of a task
    task_class: SEXP,
    /// c("status", "value"), the names of an ok reply
    reply_names: SEXP,
    /// "ok"
    ok: SEXP,
    /// list(fun), the function whose bytes `FUN_BYTES` holds
    fun_holder: SEXP,
}

thread_local! {
    static CONSTANTS: Cell<Option<Constants>> = const { Cell::new(None) };
    /// R's serialization of the function in `Constants::fun_holder`.
    static FUN_BYTES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The reply a call gets when its reply cannot be read (pool_unreadable_reply
    /// in R/pool-state.R).
    static UNREADABLE: Cell<Option<SEXP>> = const { Cell::new(None) };
}

fn constants() -> Result<Constants, RError> {
    if let Some(c) = CONSTANTS.with(|c| c.get()) {
        return Ok(c);
    }
    let sym = |name: &'static CStr| {
        // SAFETY: interning a symbol (allocates; R keeps symbols for good).
        try_r(|| unsafe { Rf_install(name.as_ptr()) })
    };
    let kept = |x: SEXP| {
        // SAFETY: a fresh object preserved at once (preserving allocates) and
        // made not mutable, so that R copies it before any change.
        try_r(|| unsafe {
            R_PreserveObject(x);
            MARK_NOT_MUTABLE(x);
            x
        })
    };
    let task_class = kept(crate::r_calls::scalar_string("pageshare_task")?)?;
    let reply_names = kept(crate::r_calls::strings(&["status".to_string(), "value".to_string()])?)?;
    let ok = kept(crate::r_calls::scalar_string("ok")?)?;
    let fun_holder = crate::r_calls::alloc_vector(SEXPTYPE::VECSXP, 1)?;
    // SAFETY: a fresh list preserved at once.
    try_r(|| unsafe { R_PreserveObject(fun_holder) })?;
    let c = Constants {
        generation: sym(c"generation")?,
        tag: sym(c"tag")?,
        reply: sym(c"reply")?,
        keep: sym(c"keep")?,
        cancelled: sym(c"cancelled")?,
        quote: sym(c"quote")?,
        threshold_option: sym(c"pageshare.threshold")?,
        task_class,
        reply_names,
        ok,
        fun_holder,
    };
    CONSTANTS.with(|k| k.set(Some(c)));
    Ok(c)
}

fn damaged(e: impl std::fmt::Display) -> RError {
    RError::system(format!("a plain call of pageshare's pool is damaged: {e}"))
}

// ---------------------------------------------------------------------------
// The master's side.

/// Is a call of a function whose environment is `env` (NULL for a
/// primitive) with `args` plain? The environment is none of the function's
/// own (the global environment or a namespace) and no argument holds data
/// worth sharing or a view.
fn is_plain(env: SEXP, args: SEXP, threshold: f64) -> bool {
    // SAFETY: valid SEXPs on R's main thread; comparing environments and
    // asking whether one is a namespace neither allocates nor raises, and
    // worth_walking only reads.
    unsafe {
        if env != R_NilValue && env != R_GlobalEnv && R_IsNamespaceEnv(env) == Rboolean::FALSE {
            return false;
        }
        !crate::entry_share::worth_walking(args, threshold, 0)
    }
}

/// Is `FUN(<args>)` a plain call, `env` being FUN's environment?
#[no_mangle]
pub extern "C" fn ps_plain_call_rs(env: SEXP, args: SEXP, threshold: SEXP) -> SEXP {
    entry(|| scalar_logical(is_plain(env, args, as_real(threshold)?) as i32))
}

/// R's serialization of `fun`, kept for the next message of the same
/// function so that a stream of calls of one function serializes it once.
/// Kept only while it cannot go stale: the function is held here (no other
/// object takes its address, and R copies an object held twice before it
/// changes it), and its bytes hold nothing by value that may change in place
/// (r_serialize.rs). Appends the bytes to `out` as a plain call's head.
fn write_head(out: &mut Vec<u8>, fun: SEXP, threshold: f64, values: bool) -> Result<(), RError> {
    let c = constants()?;
    // SAFETY: the holder is a preserved list of one element.
    if unsafe { VECTOR_ELT(c.fun_holder, 0) } == fun {
        FUN_BYTES.with(|b| PlainCall::write_head(out, &b.borrow(), threshold, values));
        return Ok(());
    }
    let (bytes, by_value) = serialize(fun)?;
    PlainCall::write_head(out, &bytes, threshold, values);
    let held = if by_value { nil() } else { fun };
    // SAFETY: setting the element of a preserved list allocates nothing.
    unsafe { SET_VECTOR_ELT(c.fun_holder, 0, held) };
    FUN_BYTES.with(|b| *b.borrow_mut() = if by_value { Vec::new() } else { bytes });
    Ok(())
}

/// The message of the plain call `fun(<args>)` (`args` a list, named or not).
fn plain_message(fun: SEXP, args: SEXP, threshold: f64) -> Result<Vec<u8>, RError> {
    // SAFETY: reading the type of a valid SEXP.
    if unsafe { TYPEOF(args) } != SEXPTYPE::VECSXP {
        return Err(RError::argument("`args` must be a list"));
    }
    // SAFETY: the names of a list are read without allocating.
    let names = unsafe { Rf_getAttrib(args, R_NamesSymbol) };
    let mut out = Vec::new();
    // (the list's items as a list without attributes: `args`' own data,
    // written item by item)
    // SAFETY: a list and its names, read only.
    let simple = unsafe {
        let n = XLENGTH(args) as usize;
        let items = (0..n).try_fold(ValueWriter::HEAD, |size, i| {
            size.checked_add(wire_values::encoded_size(VECTOR_ELT(args, i as R_xlen_t), 1)?)
        });
        items.zip(wire_values::encoded_size(names, 0))
    };
    if simple.is_some() {
        write_head(&mut out, fun, threshold, true)?;
        // SAFETY: a list of XLENGTH items, each accepted above.
        let n = unsafe { XLENGTH(args) } as usize;
        ValueWriter { out: &mut out }.list(n);
        for i in 0..n {
            // SAFETY: as above.
            wire_values::encode(unsafe { VECTOR_ELT(args, i as R_xlen_t) }, &mut out)?;
        }
        wire_values::encode(names, &mut out)?;
        return Ok(out);
    }
    // list(values, names), the values without the list's attributes
    // SAFETY: R's allocator under try_r; the closure holds only Copy values;
    // the new lists are protected while more are made.
    let rest = try_r(|| unsafe {
        let n = XLENGTH(args);
        let rest = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, 2));
        let values = Rf_allocVector(SEXPTYPE::VECSXP, n);
        SET_VECTOR_ELT(rest, 0, values);
        for i in 0..n {
            SET_VECTOR_ELT(values, i, VECTOR_ELT(args, i));
        }
        SET_VECTOR_ELT(rest, 1, names);
        Rf_unprotect(1);
        rest
    })?;
    let mut scope = Protect::new();
    scope.protect(rest)?;
    let (bytes, _) = serialize(rest)?;
    write_head(&mut out, fun, threshold, false)?;
    out.extend_from_slice(&bytes);
    Ok(out)
}

/// The message of the plain call `fun(<args>)`, as a raw vector.
#[no_mangle]
pub extern "C" fn ps_plain_message_rs(fun: SEXP, args: SEXP, threshold: SEXP) -> SEXP {
    entry(|| raw_vec(&plain_message(fun, args, as_real(threshold)?)?))
}

/// The number the option pageshare.threshold holds, if it is one as the
/// option must be (one number, not NA, >= 0); anything else (also a valid
/// value of another form) is left to the general path, which reads the
/// option by its rule.
fn plain_threshold(x: SEXP) -> Option<f64> {
    // SAFETY: reading the type, length and first element of a valid vector
    // that is not an object (no method runs).
    unsafe {
        if Rf_isObject(x) != Rboolean::FALSE || Rf_xlength(x) != 1 {
            return None;
        }
        let v = match TYPEOF(x) {
            SEXPTYPE::REALSXP => *REAL(x),
            SEXPTYPE::INTSXP if *INTEGER(x) != i32::MIN => *INTEGER(x) as f64,
            _ => return None,
        };
        (v >= 0.0).then_some(v)
    }
}

/// Has the pool a worker in every slot? (`pids` is NULL while no pool runs;
/// else pool_ensure() in R/pool-state.R starts the pool or fills the slot.)
fn pool_ready(pids: SEXP) -> bool {
    // SAFETY: reading the elements of an ordinary integer or double vector.
    unsafe {
        let n = match TYPEOF(pids) {
            SEXPTYPE::INTSXP | SEXPTYPE::REALSXP if ALTREP(pids) == 0 => XLENGTH(pids),
            _ => return false,
        };
        n > 0
            && (0..n as usize).all(|i| match TYPEOF(pids) {
                SEXPTYPE::INTSXP => *INTEGER(pids).add(i) != i32::MIN,
                _ => !(*REAL(pids).add(i)).is_nan(),
            })
    }
}

/// shm_call(FUN, ...) with `args` = list(...), when it is a plain call to a
/// pool whose workers (`pids`) all run: its message sent to the least busy
/// worker (or queued for one), and the task returned, as R/pool.R makes it.
/// NULL when the call is not plain (nothing is sent: R takes the general
/// path); a negative number when the send did not happen (-2: the user
/// interrupted it).
#[no_mangle]
pub extern "C" fn ps_pool_call_plain_rs(fun: SEXP, args: SEXP, pids: SEXP, generation: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: reading types of valid SEXPs.
        let (function, list) = unsafe { (Rf_isFunction(fun) != Rboolean::FALSE, TYPEOF(args) == SEXPTYPE::VECSXP) };
        if !function || !list || !pool_ready(pids) {
            return Ok(nil());
        }
        let c = constants()?;
        // SAFETY: a closure's environment is read without allocating.
        let env = if unsafe { TYPEOF(fun) } == SEXPTYPE::CLOSXP { unsafe { get_closure_env(fun) } } else { nil() };
        // SAFETY: reading an option (a lookup in .Options) under try_r.
        let option = try_r(|| unsafe { Rf_GetOption1(c.threshold_option) })?;
        let Some(threshold) = plain_threshold(option) else { return Ok(nil()) };
        // (a closure among the arguments has the promises it reads forced
        // first, in R: force_sent_promises())
        // SAFETY: reading the elements' types of a list.
        let closure_arg = unsafe { (0..XLENGTH(args)).any(|i| TYPEOF(VECTOR_ELT(args, i)) == SEXPTYPE::CLOSXP) };
        if closure_arg || !is_plain(env, args, threshold) {
            return Ok(nil());
        }
        let payload = plain_message(fun, args, threshold)?;
        let mut scope = Protect::new();
        // SAFETY: a new environment with its class and generation, made under
        // try_r; the environment is protected while the rest allocates.
        let task = scope.protect(try_r(|| unsafe {
            let task = Rf_protect(R_NewEnv(R_EmptyEnv, 0, 0));
            Rf_defineVar(c.generation, generation, task);
            Rf_setAttrib(task, R_ClassSymbol, c.task_class);
            Rf_unprotect(1);
            task
        })?)?;
        let tag = crate::entry_pool_messages::submit(None, &payload, true, task)?;
        if tag < 0.0 {
            return crate::r_calls::scalar_real(tag);
        }
        // SAFETY: the tag defined in the protected task under try_r.
        try_r(|| unsafe {
            let t = Rf_protect(Rf_ScalarReal(tag));
            Rf_defineVar(c.tag, t, task);
            Rf_unprotect(1);
        })?;
        Ok(task)
    })
}

/// list(status = "ok", value), unprotected.
fn ok_reply(value: SEXP) -> Result<SEXP, RError> {
    let c = constants()?;
    // SAFETY: a new list filled and named under try_r.
    try_r(|| unsafe {
        let reply = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, 2));
        SET_VECTOR_ELT(reply, 0, c.ok);
        SET_VECTOR_ELT(reply, 1, value);
        Rf_setAttrib(reply, R_NamesSymbol, c.reply_names);
        Rf_unprotect(1);
        reply
    })
}

/// A plain reply read: its value in the wire's encoding (`value`) made
/// list(status = "ok", value), else R's serialization of the reply. Unprotected.
fn read_reply(payload: &[u8], value: bool) -> Result<SEXP, RError> {
    if !value {
        return unserialize(payload);
    }
    let mut scope = Protect::new();
    let one = scope.protect(wire_values::decode_all::<1>(payload)?)?;
    // SAFETY: a protected list of one element.
    ok_reply(unsafe { VECTOR_ELT(one, 0) })
}

/// A plain reply's payload read (`value`: in the wire's value encoding).
#[no_mangle]
pub extern "C" fn ps_pool_read_reply_rs(payload: SEXP, value: SEXP) -> SEXP {
    entry(|| read_reply(crate::args::raw_arg(payload, "payload")?, crate::args::flag_arg(value)?))
}

fn unreadable_reply() -> Result<SEXP, RError> {
    if let Some(r) = UNREADABLE.with(|u| u.get()) {
        return Ok(r);
    }
    let name = crate::r_calls::scalar_string("pageshare")?;
    // SAFETY: looking up pageshare's namespace and a binding in it under
    // try_r; the value found is preserved for the life of the process.
    let r = try_r(|| unsafe {
        Rf_protect(name);
        let ns = R_FindNamespace(name);
        Rf_protect(ns);
        let sym = Rf_install(c"pool_unreadable_reply".as_ptr());
        let r = Rf_eval(sym, ns);
        R_PreserveObject(r);
        Rf_unprotect(2);
        r
    })?;
    UNREADABLE.with(|u| u.set(Some(r)));
    Ok(r)
}

/// The pool's next event (see `event_to_r`), except a plain reply to a call
/// (its `what` the task, an environment): that is read and delivered here,
/// as `reply` in the task, and the event is "delivered". Until the reply is
/// read the task holds the unreadable reply: an error in reading (no memory)
/// goes on to the caller, and the task fails. None: "delivered".
fn next_event_delivered(timeout: f64, idle: bool) -> Result<Option<SEXP>, RError> {
    let ev = crate::entry_pool_messages::next_event_within(timeout, idle)?;
    // (a reply with its task's output or conditions goes to R, which relays them)
    let Event::Reply { what, payload, plain: true, value, relay: false } = ev else {
        return crate::entry_pool_messages::event_to_r(ev).map(Some);
    };
    // SAFETY: reading the type of a kept object.
    if unsafe { TYPEOF(crate::r_store::peek(what)) } != SEXPTYPE::ENVSXP {
        let ev = Event::Reply { what, payload, plain: true, value, relay: false };
        return crate::entry_pool_messages::event_to_r(ev).map(Some);
    }
    let mut scope = Protect::new();
    let task = scope.protect(crate::r_store::take(what))?;
    let delivered = (|| {
        let c = constants()?;
        let unreadable = unreadable_reply()?;
        // SAFETY: defining a variable in the protected task under try_r.
        try_r(|| unsafe { Rf_defineVar(c.reply, unreadable, task) })?;
        let reply = scope.protect(read_reply(&payload, value)?)?;
        // SAFETY: as above.
        try_r(|| unsafe { Rf_defineVar(c.reply, reply, task) })
    })();
    crate::entry_pool_messages::give_back(payload);
    delivered.map(|()| None)
}

/// The pool's next event as a named list (see `next_event_delivered`).
#[no_mangle]
pub extern "C" fn ps_pool_next_event_delivered_rs(timeout: SEXP, idle: SEXP) -> SEXP {
    entry(|| match next_event_delivered(as_real(timeout)?, crate::args::flag_arg(idle)?)? {
        Some(ev) => Ok(ev),
        None => crate::wire_r::bare_event(EventKind::Delivered),
    })
}

/// Is `reply` a call's reply that says "ok" (list(status = "ok", value))?
fn reply_ok(reply: SEXP) -> bool {
    // SAFETY: reading types, lengths and a string of ordinary vectors.
    unsafe {
        if TYPEOF(reply) != SEXPTYPE::VECSXP || Rf_xlength(reply) != 2 {
            return false;
        }
        let status = VECTOR_ELT(reply, 0);
        TYPEOF(status) == SEXPTYPE::STRSXP
            && ALTREP(status) == 0
            && Rf_xlength(status) == 1
            && CStr::from_ptr(R_CHAR(STRING_ELT(status, 0))).to_bytes() == b"ok"
    }
}

/// The variable `sym` of the environment `env`, or NULL.
fn var_in(env: SEXP, sym: SEXP) -> Result<SEXP, RError> {
    // SAFETY: looking up (and evaluating: a promise is forced) a variable of
    // an environment under try_r.
    try_r(|| unsafe {
        if R_existsVarInFrame(env, sym) != 0 {
            Rf_eval(sym, env)
        } else {
            R_NilValue
        }
    })
}

/// shm_value(task) while it is plain: the task's value as list(value) once
/// its reply says "ok" (read here too when it arrives while this waits, as
/// the event "delivered"). Anything else is left to shm_value() in R: NULL
/// when the task is not one, was cancelled, has failed or belongs to a pool
/// stopped since;
/// list(NULL, event) when the pool had another event for R to handle first.
#[no_mangle]
pub extern "C" fn ps_task_value_plain_rs(task: SEXP, generation: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: reading the type and class of a valid SEXP.
        let is_task = unsafe { TYPEOF(task) == SEXPTYPE::ENVSXP && Rf_inherits(task, c"pageshare_task".as_ptr()) != 0 };
        if !is_task {
            return Ok(nil());
        }
        let c = constants()?;
        // (a cancelled task gets no reply: shm_value() says so)
        let cancelled = var_in(task, c.cancelled)?;
        // SAFETY: reading the type, length and element of a valid vector.
        if unsafe { TYPEOF(cancelled) == SEXPTYPE::LGLSXP && Rf_xlength(cancelled) == 1 && *LOGICAL(cancelled) == 1 } {
            return Ok(nil());
        }
        let mut scope = Protect::new();
        loop {
            let reply = var_in(task, c.reply)?;
            if reply != nil() {
                if !reply_ok(reply) {
                    return Ok(nil());
                }
                let reply = scope.protect(reply)?;
                // (the task no longer keeps the shared arguments: its worker is done)
                // SAFETY: R API under try_r on a protected task and reply.
                return try_r(|| unsafe {
                    if R_existsVarInFrame(task, c.keep) != 0 {
                        Rf_defineVar(c.keep, R_NilValue, task);
                    }
                    let got = Rf_allocVector(SEXPTYPE::VECSXP, 1);
                    SET_VECTOR_ELT(got, 0, VECTOR_ELT(reply, 1));
                    got
                });
            }
            let own = var_in(task, c.generation)?;
            // SAFETY: comparing two valid objects (reads only).
            if unsafe { R_compute_identical(own, generation, 16) } == Rboolean::FALSE {
                return Ok(nil());
            }
            if let Some(ev) = next_event_delivered(f64::NAN, false)? {
                let mut inner = Protect::new();
                return crate::r_calls::list_of(&[nil(), inner.protect(ev)?]);
            }
        }
    })
}

// ---------------------------------------------------------------------------
// The worker's side.

/// What running a plain call gave.
enum Ran {
    /// The reply's bytes; `value`: in the wire's value encoding.
    Reply { bytes: Vec<u8>, value: bool },
    /// list(value, threshold) (protected by the caller's scope): the value
    /// holds data worth sharing, which R shares (R/pool-worker.R).
    Shared(SEXP),
}

/// The call `fun(<values>)`, each argument named by `names` (or NULL): a
/// symbol or a call among them is quoted (as do.call(quote = TRUE) does),
/// not evaluated. Unprotected.
fn call_of(fun: SEXP, values: SEXP, names: SEXP) -> Result<SEXP, RError> {
    let c = constants()?;
    // SAFETY: R's API under try_r; the argument list is protected while the
    // call is made; only Copy values live in the closure.
    try_r(|| unsafe {
        let n = Rf_xlength(values);
        let arglist = Rf_protect(Rf_allocList(n as i32));
        let named = TYPEOF(names) == SEXPTYPE::STRSXP && Rf_xlength(names) == n;
        let mut cell = arglist;
        for i in 0..n {
            let mut value = VECTOR_ELT(values, i);
            if matches!(
                TYPEOF(value),
                SEXPTYPE::SYMSXP | SEXPTYPE::LANGSXP | SEXPTYPE::PROMSXP | SEXPTYPE::DOTSXP | SEXPTYPE::BCODESXP
            ) {
                value = Rf_lang2(c.quote, value);
            }
            SETCAR(cell, value);
            if named {
                let name = STRING_ELT(names, i);
                if LENGTH(name) > 0 {
                    SET_TAG(cell, Rf_installChar(name));
                }
            }
            cell = CDR(cell);
        }
        let call = Rf_lcons(fun, arglist);
        Rf_unprotect(1);
        call
    })
}

/// A worker runs the plain call `payload`. Its reply is in the wire's value
/// encoding where `value_reply` allows and the value is simple. An error (in
/// the call or in reading it) is returned as it is, R's own left pending.
fn run_plain(payload: &[u8], value_reply: bool, scope: &mut Protect) -> Result<Ran, RError> {
    let call = PlainCall::decode(payload).map_err(damaged)?;
    let fun = scope.protect(unserialize(call.function)?)?;
    let (values, names) = match call.args {
        Args::Values(bytes) => {
            let both = scope.protect(wire_values::decode_all::<2>(bytes)?)?;
            // SAFETY: a protected list of two elements.
            unsafe { (VECTOR_ELT(both, 0), VECTOR_ELT(both, 1)) }
        }
        Args::Serialized(bytes) => {
            let rest = scope.protect(unserialize(bytes)?)?;
            // SAFETY: reading types and lengths of a protected object.
            let ok = unsafe {
                TYPEOF(rest) == SEXPTYPE::VECSXP
                    && Rf_xlength(rest) == 2
                    && TYPEOF(VECTOR_ELT(rest, 0)) == SEXPTYPE::VECSXP
            };
            if !ok {
                return Err(damaged("its arguments are not a list"));
            }
            // SAFETY: as above.
            unsafe { (VECTOR_ELT(rest, 0), VECTOR_ELT(rest, 1)) }
        }
    };
    let rcall = scope.protect(call_of(fun, values, names)?)?;
    crate::altrep::IN_TASK.store(true, Ordering::Relaxed);
    // SAFETY: the task's own code, evaluated under try_r (its error stops
    // there and is resumed by the shell).
    let value = scope.protect(try_r(|| unsafe { Rf_eval(rcall, R_GlobalEnv) })?)?;
    crate::altrep::IN_TASK.store(false, Ordering::Relaxed);
    // SAFETY: reading the type of a protected value; worth_walking only reads.
    let vector = unsafe {
        matches!(
            TYPEOF(value),
            SEXPTYPE::LGLSXP
                | SEXPTYPE::INTSXP
                | SEXPTYPE::REALSXP
                | SEXPTYPE::CPLXSXP
                | SEXPTYPE::STRSXP
                | SEXPTYPE::RAWSXP
                | SEXPTYPE::VECSXP
        )
    };
    // SAFETY: as above.
    if vector && unsafe { crate::entry_share::worth_walking(value, call.threshold, 0) } {
        let threshold = scope.protect(crate::r_calls::scalar_real(call.threshold)?)?;
        return Ok(Ran::Shared(scope.protect(crate::r_calls::list_of(&[value, threshold])?)?));
    }
    let mut bytes = Vec::new();
    if value_reply && wire_values::encode(value, &mut bytes)? {
        return Ok(Ran::Reply { bytes, value: true });
    }
    let reply = scope.protect(ok_reply(value)?)?;
    Ok(Ran::Reply { bytes: serialize(reply)?.0, value: false })
}

/// A worker runs a plain call (`payload`, its message, holding no handle).
/// Returns the serialized reply list(status = "ok", value), or list(value,
/// threshold) when the value holds data worth sharing (R/pool-worker.R then
/// shares it). An error (in FUN or in reading the message) is raised to the
/// worker's loop, which replies with it.
#[no_mangle]
pub extern "C" fn ps_pool_run_plain_rs(payload: SEXP) -> SEXP {
    entry(|| {
        let bytes = crate::args::raw_arg(payload, "payload")?;
        let mut scope = Protect::new();
        match run_plain(bytes, false, &mut scope)? {
            Ran::Reply { bytes, .. } => raw_vec(&bytes),
            Ran::Shared(out) => Ok(out),
        }
    })
}

/// A worker runs the plain calls it receives, and replies, as long as it may:
/// `clean` says that no earlier message left state to let go of first (see
/// pool_worker_clean() in R/pool-worker.R), and a message that says views may
/// be stale (`scan`) finds none. Returns the first message it leaves to R, a
/// named list of `TASK_FIELDS` (wire.rs), with `shared` set when it ran the
/// call and its value holds data worth sharing (list(value, threshold); the
/// segments handed over before were let go, so `release` is then FALSE);
/// NULL when the pool stops.
#[no_mangle]
pub extern "C" fn ps_pool_worker_serve_rs(clean: SEXP) -> SEXP {
    entry(|| {
        let may = crate::args::flag_arg(clean)?;
        loop {
            let Some(mut h) = crate::entry_pool::receive_task()? else { return Ok(nil()) };
            let payload = crate::entry_pool::take_buffer();
            // (views of released segments are collected by R first, with a gc())
            let runs = may && h.plain && (!h.scan || pageshare_core::registry::stale().is_empty());
            let mut scope = Protect::new();
            let out = if runs {
                if h.release {
                    pageshare_core::segment::release_handoffs();
                }
                match run_plain(&payload, true, &mut scope) {
                    Ok(Ran::Reply { bytes, value }) => {
                        let header = if value { Header::value_reply(h.number) } else { Header::reply(h.number, true) };
                        crate::entry_pool::send_to_master(header, &bytes).map(|sent| (!sent).then(nil))
                    }
                    Ok(Ran::Shared(shared)) => {
                        h.release = false;
                        crate::entry_pool::task_list(&h, &payload, shared).map(Some)
                    }
                    Err(e) => Err(e),
                }
            } else {
                crate::entry_pool::task_list(&h, &payload, nil()).map(Some)
            };
            crate::entry_pool::give_back(payload);
            if let Some(msg) = out? {
                return Ok(msg);
            }
        }
    })
}

// ---------------------------------------------------------------------------
// The wire's value encoding from R (tests).

/// The bytes of `x` in the wire's value encoding, or NULL when it is not a
/// simple value.
#[no_mangle]
pub extern "C" fn ps_wire_value_rs(x: SEXP) -> SEXP {
    entry(|| {
        let mut out = Vec::new();
        if wire_values::encode(x, &mut out)? {
            raw_vec(&out)
        } else {
            Ok(nil())
        }
    })
}

/// The value `bytes` (the wire's value encoding) hold.
#[no_mangle]
pub extern "C" fn ps_wire_value_read_rs(bytes: SEXP) -> SEXP {
    entry(|| {
        let mut scope = Protect::new();
        let one = scope.protect(wire_values::decode_all::<1>(crate::args::raw_arg(bytes, "bytes")?)?)?;
        // SAFETY: a protected list of one element.
        Ok(unsafe { VECTOR_ELT(one, 0) })
    })
}
