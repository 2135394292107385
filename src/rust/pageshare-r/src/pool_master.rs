//! The master's pool of this R session: the one running pageshare-pool
//! `Master` (its state machine: which worker has which message, what each
//! wait returns), locked for each entry point, and what R adds to it: the
//! objects R keeps with each message (keys of r_store.rs) and the user's
//! interrupt as a way to end a wait. The entry points (entry_pool.rs: start,
//! stop, fill; entry_pool_messages.rs: submit, wait) work through this.

use crate::boundary::RError;
use crate::r_calls::interrupted;
use pageshare_pool::master::{Damaged, Master};
use pageshare_pool::wait::StopReason;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The master, its messages kept with the keys of what R does with each
/// reply (see r_store.rs).
pub type RMaster = Master<usize>;

/// Stops the workers of `m`; what R kept with their messages is let go.
pub fn stop(m: RMaster) {
    for key in m.stop() {
        crate::r_store::take(key);
    }
}

/// A damaged ring, as R's error.
pub fn damaged(e: Damaged) -> RError {
    RError::system(e.0)
}

/// The master's pool, if one is running.
static POOL: Mutex<Option<RMaster>> = Mutex::new(None);
/// The process that started the pool.
static POOL_OWNER: AtomicU32 = AtomicU32::new(0);
/// Reused for every message received (no allocation per message).
static BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The pool, locked. R is single-threaded, so the lock is only ever contended
/// when R code that runs while we wait (an interrupt check may run event
/// handlers) calls into the pool again: that is an error, never a deadlock.
pub fn pool() -> Result<MutexGuard<'static, Option<RMaster>>, RError> {
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
