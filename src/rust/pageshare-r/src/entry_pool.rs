#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points of pageshare's worker pool (R/pool*.R): the
//! master starts, feeds, hears from, replaces and stops its workers; a worker
//! connects, takes tasks and replies. Bytes only: what a message holds is
//! R's serialization, or for a plain call the wire's own (entry_pool_plain.rs).
//! Each entry point is called by its C
//! shell in src/entry_points.c and runs its body through [`entry`].
//!
//! Waits check for a user interrupt between parked slices: the wait ends in
//! order and R raises the interrupt afterwards (see `pool_receive`).

use crate::boundary::{entry, ErrorKind, RError};
use crate::pool_master::{damaged, master_give_up, no_pool, pool, shrink, RMaster};
use crate::r_calls::{alloc_vector, as_integer, as_real, raw_vec, scalar_integer, string_arg, Protect};
use crate::r_sys::*;
use pageshare_pool::pool::{Launch, Pool};
use pageshare_pool::ring::RingError;
use pageshare_pool::rng::stream_after;
use pageshare_pool::wait::Patience;
use pageshare_pool::wire::{Header, TASK_FIELDS};
use pageshare_pool::worker::{connect_from_env, Connection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// This process's connection to its master, if it is a worker.
static WORKER: OnceLock<Connection> = OnceLock::new();
/// A worker: the number of the last task received (see `ps_pool_worker_running_rs`).
static RUNNING: AtomicU64 = AtomicU64::new(0);
/// A worker's buffer for what it receives (no allocation per message).
static WORKER_BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn worker_buffer() -> MutexGuard<'static, Vec<u8>> {
    WORKER_BUFFER.lock().unwrap_or_else(|p| p.into_inner())
}

fn strings_arg(x: SEXP, what: &str) -> Result<Vec<String>, RError> {
    // SAFETY: .Call argument on R's main thread.
    if unsafe { TYPEOF(x) } != SEXPTYPE::STRSXP {
        return Err(RError::argument(format!("`{what}` must be a character vector")));
    }
    // SAFETY: a character vector.
    let n = unsafe { Rf_xlength(x) };
    (0..n)
        .map(|i| {
            let one = crate::r_calls::string_elt(x, i)?;
            // SAFETY: R_NaString is initialised before package code runs.
            if one == unsafe { R_NaString } {
                return Err(RError::argument(format!("`{what}` must not contain NA")));
            }
            crate::r_calls::utf8_text(one, what)
        })
        .collect()
}

/// Starts a pool of `n` workers running `program args...` with the extra
/// environment `env_names`=`env_values`; rings of `capacity` bytes; each
/// worker must connect within `timeout` seconds; `limits` is c(depth, cores,
/// spin): at most `depth` messages per worker, and while fewer than `cores`
/// workers are busy the master spins `spin` microseconds for a reply before
/// it sleeps. Stops a running pool first. Returns the workers' process ids.
#[no_mangle]
pub extern "C" fn ps_pool_start_rs(
    n: SEXP,
    program: SEXP,
    args: SEXP,
    env_names: SEXP,
    env_values: SEXP,
    capacity: SEXP,
    timeout: SEXP,
    limits: SEXP,
) -> SEXP {
    entry(|| {
        let limits = crate::args::doubles_arg(limits, "limits")?;
        let &[depth, cores, spin] = limits.as_slice() else {
            return Err(RError::argument("`limits` must be c(depth, cores, spin)"));
        };
        let n = as_integer(n)?;
        if n < 1 {
            return Err(RError::argument("a pool needs at least one worker"));
        }
        let names = strings_arg(env_names, "env_names")?;
        let values = strings_arg(env_values, "env_values")?;
        let capacity = as_real(capacity)?;
        if !(capacity >= 4096.0 && capacity <= (1u64 << 40) as f64 && (capacity as u64).is_power_of_two()) {
            return Err(RError::argument("the pool's ring capacity must be a power of two of at least 4096 bytes"));
        }
        let timeout = as_real(timeout)?;
        let launch = Launch {
            program: string_arg(program, "program")?.into(),
            args: strings_arg(args, "args")?,
            env: names.into_iter().zip(values).collect(),
            connect_timeout: Duration::from_secs_f64(if timeout.is_finite() && timeout > 0.0 { timeout } else { 60.0 }),
        };
        let mut guard = pool()?;
        if let Some(old) = guard.take() {
            crate::pool_master::stop(old);
        }
        let started = Pool::start(n as u64, capacity as u64, launch)
            .map_err(|e| RError::new(ErrorKind::WorkerSetup, e.to_string()))?;
        let spin = Duration::from_micros(spin.clamp(0.0, 1e6) as u64);
        *guard = Some(RMaster::new(started, capacity as u64, depth.max(1.0) as usize, cores.max(1.0) as usize, spin));
        crate::pool_master::owned_here();
        pids(guard.as_ref().expect("just set").pool())
    })
}

fn pids(pool: &Pool) -> Result<SEXP, RError> {
    let out = alloc_vector(SEXPTYPE::INTSXP, pool.size() as R_xlen_t)?;
    for s in 0..pool.size() {
        // SAFETY: an integer vector of pool.size() elements.
        unsafe { *INTEGER(out).add(s as usize) = pool.pid(s) as i32 };
    }
    Ok(out)
}

/// Stops the pool (every worker reaped). TRUE if one was running.
#[no_mangle]
pub extern "C" fn ps_pool_stop_rs() -> SEXP {
    entry(|| {
        let old = pool()?.take();
        let was = old.is_some();
        if let Some(m) = old {
            crate::pool_master::stop(m);
        }
        crate::r_calls::scalar_logical(was as i32)
    })
}

/// The workers' process ids (integer(0) without a pool).
#[no_mangle]
pub extern "C" fn ps_pool_pids_rs() -> SEXP {
    entry(|| match pool()?.as_ref() {
        Some(m) => pids(m.pool()),
        None => alloc_vector(SEXPTYPE::INTSXP, 0),
    })
}

/// Starts a worker in the empty `slot`; returns its process id.
#[no_mangle]
pub extern "C" fn ps_pool_fill_rs(slot: SEXP) -> SEXP {
    entry(|| {
        let mut guard = pool()?;
        let m = guard.as_mut().ok_or_else(no_pool)?;
        let slot = crate::args::slot_arg(slot, m.pool().size())?;
        m.fill(slot, &mut master_give_up(None))
            .map_err(damaged)?
            .map_err(|e| RError::new(ErrorKind::WorkerSetup, e.to_string()))?;
        scalar_integer(m.pool().pid(slot) as i32)
    })
}

/// What the worker in `slot` last wrote to its standard error.
#[no_mangle]
pub extern "C" fn ps_pool_stderr_rs(slot: SEXP) -> SEXP {
    entry(|| {
        let guard = pool()?;
        let m = guard.as_ref().ok_or_else(no_pool)?;
        let slot = crate::args::slot_arg(slot, m.pool().size())?;
        crate::r_calls::scalar_string(&m.pool().stderr_tail(slot))
    })
}

/// A worker: connect to the master named in the environment; returns the
/// 1-based slot.
#[no_mangle]
pub extern "C" fn ps_pool_worker_connect_rs() -> SEXP {
    entry(|| {
        if WORKER.get().is_none() {
            crate::watchdog::remember_session_tmpdir();
            let c = connect_from_env(crate::watchdog::master_gone)
                .map_err(|e| RError::new(ErrorKind::WorkerSetup, format!("cannot join pageshare's pool: {e}")))?;
            // (this worker now ends with its master: whether a segment its
            // master holds is still held is then one look in /proc)
            let (master, start) = c.master;
            if start != 0 {
                pageshare_core::os::note_ends_with(master, start);
            }
            let _ = WORKER.set(c);
        }
        scalar_integer(WORKER.get().expect("set above").slot as i32 + 1)
    })
}

fn worker() -> Result<&'static Connection, RError> {
    WORKER.get().ok_or_else(|| RError::argument("this process is not a worker of pageshare's pool"))
}

/// A worker: waits as long as it takes for the next task, whose payload is
/// then in the worker's buffer (`worker_buffer()`); None when the pool
/// closed this worker's ring (the pool stopped).
pub fn receive_task() -> Result<Option<Header>, RError> {
    let c = worker()?;
    let mut buf = worker_buffer();
    // (an idle worker parks in slices of a second: it has nothing else to check)
    let patience = Patience { slice: Duration::from_secs(1), ..Patience::default() };
    match c.region.tasks(c.slot).receive(&mut buf, patience, &mut || None) {
        Ok(tag) => {
            let h = Header::decode_task(tag)
                .map_err(|e| RError::system(format!("the pool's task ring is damaged: {e}")))?;
            RUNNING.store(h.number, Ordering::Relaxed);
            // (what tasks write is relayed with their replies, from the first
            // task on: what the worker's start-up wrote goes nowhere, as before)
            crate::relay::catch_stdout();
            Ok(Some(h))
        }
        Err(RingError::Stopped(_)) => Ok(None),
        Err(RingError::Corrupt(why)) => Err(RError::system(format!("the pool's task ring is damaged: {why}"))),
    }
}

/// The worker's buffer, taken (to be given back with `give_back`): R code
/// may run while its bytes are used.
pub fn take_buffer() -> Vec<u8> {
    std::mem::take(&mut *worker_buffer())
}

pub fn give_back(mut buf: Vec<u8>) {
    shrink(&mut buf);
    *worker_buffer() = buf;
}

/// A task as a worker's loop is given it, a named list of `TASK_FIELDS`
/// (wire.rs): `list(tag, payload, release, plain, scan, shared)`.
pub fn task_list(h: &Header, payload: &[u8], shared: SEXP) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let t = scope.protect(crate::r_calls::scalar_real(h.number as f64)?)?;
    let payload = scope.protect(raw_vec(payload)?)?;
    let mut bit = |b: bool| scope.protect(crate::r_calls::scalar_logical(b as i32)?);
    let (release, plain, scan) = (bit(h.release)?, bit(h.plain)?, bit(h.scan)?);
    let fields: [SEXP; TASK_FIELDS.len()] = [t, payload, release, plain, scan, shared];
    crate::wire_r::task(&fields)
}

/// A worker: sends `bytes` with `header` to the master; false if the ring
/// is closed (the pool is stopping). A reply carries its task's output and
/// conditions, if any (relay.rs).
pub fn send_to_master(mut header: Header, bytes: &[u8]) -> Result<bool, RError> {
    let c = worker()?;
    let relayed = crate::relay::attach(&mut header, bytes);
    let bytes = relayed.as_deref().unwrap_or(bytes);
    let tag = header.encode().map_err(|e| RError::argument(format!("not a reply of the pool: {e}")))?;
    match c.region.results(c.slot).send(tag, bytes, Patience::default(), &mut || None) {
        Ok(()) => Ok(true),
        Err(RingError::Stopped(_)) => Ok(false),
        Err(RingError::Corrupt(why)) => Err(RError::system(format!("the pool's result ring is damaged: {why}"))),
    }
}

/// A worker: the tag of the message it received last (the one it runs, or
/// ran: an error that ends its loop is that message's reply).
#[no_mangle]
pub extern "C" fn ps_pool_worker_running_rs() -> SEXP {
    entry(|| crate::r_calls::scalar_real(RUNNING.load(Ordering::Relaxed) as f64))
}

/// A worker: sends `payload` with `tag` (and `plain`: it holds no handle;
/// `condition`: it is a condition of the task, not its reply) to the master.
/// FALSE if the ring is closed (the pool is stopping).
#[no_mangle]
pub extern "C" fn ps_pool_worker_reply_rs(tag: SEXP, payload: SEXP, plain: SEXP, condition: SEXP) -> SEXP {
    entry(|| {
        let number = as_real(tag)? as u64;
        let header = if crate::args::flag_arg(condition)? {
            Header::condition(number)
        } else {
            Header::reply(number, crate::args::flag_arg(plain)?)
        };
        let bytes = crate::args::raw_arg(payload, "payload")?;
        crate::r_calls::scalar_logical(send_to_master(header, bytes)? as i32)
    })
}

/// `.Random.seed` of the `n`-th L'Ecuyer-CMRG stream after `seed` (an
/// L'Ecuyer-CMRG `.Random.seed`, 7 integers).
#[no_mangle]
pub extern "C" fn ps_rng_stream_rs(seed: SEXP, n: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: .Call argument on R's main thread.
        if unsafe { TYPEOF(seed) } != SEXPTYPE::INTSXP || unsafe { Rf_xlength(seed) } != 7 {
            return Err(RError::argument("`seed` must be an L'Ecuyer-CMRG .Random.seed (7 integers)"));
        }
        let n = as_real(n)?;
        if !(n >= 0.0 && n.fract() == 0.0 && n < 9.0e15) {
            return Err(RError::argument("`n` must be a whole number >= 0"));
        }
        // SAFETY: an integer vector of 7 elements, alive for the call.
        let s = unsafe { crate::r_calls::vector_data::<i32>(seed)? };
        let state: [u32; 6] = std::array::from_fn(|i| s[i + 1] as u32);
        let next = stream_after(state, n as u64);
        let out = alloc_vector(SEXPTYPE::INTSXP, 7)?;
        // SAFETY: a new integer vector of 7 elements.
        unsafe {
            let p = INTEGER(out);
            *p = s[0];
            for (i, v) in next.iter().enumerate() {
                *p.add(i + 1) = *v as i32;
            }
        }
        Ok(out)
    })
}
