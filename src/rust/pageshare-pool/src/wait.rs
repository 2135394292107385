//! Waiting for another process: spin briefly (a reply that is a few
//! microseconds away costs no system call), then park on a futex word in
//! shared memory in bounded slices, so that the caller can look at peer death,
//! interrupts and deadlines between slices. An idle waiter burns no CPU.

use pageshare_core::os::{futex_wait, futex_wake_all};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A futex word and the flag a waiter raises before it parks on it. Lives in
/// shared memory, on its own cache line.
#[repr(C, align(64))]
pub struct Doorbell {
    word: AtomicU32,
    parked: AtomicU32,
}

impl Doorbell {
    /// Wakes the waiter if it parked (or is about to). Call after publishing,
    /// so that a waiter that raised its flag before the publication is woken,
    /// and one that raises it after sees the publication.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) != 0 {
            self.ring_always();
        }
    }

    /// Wakes every waiter whether parked or not (closing, peer death).
    pub fn ring_always(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        futex_wake_all(&self.word);
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The condition holds.
    Ready,
    /// `give_up` said stop (peer gone, interrupt, deadline); its reason.
    Stopped(StopReason),
}

/// Why a wait was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Closed,
    Interrupted,
    TimedOut,
}

/// How long to spin before parking, and the longest single park.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    pub spin: Duration,
    pub slice: Duration,
}

impl Default for Patience {
    /// Spins long enough to cover a peer that runs some R code before it
    /// answers (a call with a shared argument): a futex wake-up per message
    /// costs more, in time and CPU, than spinning through it.
    fn default() -> Self {
        Patience { spin: Duration::from_micros(150), slice: Duration::from_millis(20) }
    }
}

/// Waits until `ready()` holds. `give_up()` is asked between spins now and then
/// and after every parked slice; a `Some(reason)` ends the wait.
pub fn wait_until(
    bell: &Doorbell,
    patience: Patience,
    mut ready: impl FnMut() -> bool,
    mut give_up: impl FnMut() -> Option<StopReason>,
) -> Waited {
    if ready() {
        return Waited::Ready;
    }
    let start = Instant::now();
    let mut spins = 0u32;
    while start.elapsed() < patience.spin {
        for _ in 0..64 {
            std::hint::spin_loop();
            if ready() {
                return Waited::Ready;
            }
        }
        spins += 1;
        // (on a machine with more runnable processes than cores, let the peer run)
        if spins.is_multiple_of(8) {
            std::thread::yield_now();
        }
        if let Some(r) = give_up() {
            return Waited::Stopped(r);
        }
    }
    loop {
        bell.parked.store(1, Ordering::SeqCst);
        // (the flag must be visible before the condition is read again: the
        // other side publishes, then reads the flag)
        fence(Ordering::SeqCst);
        let seen = bell.word.load(Ordering::SeqCst);
        if ready() {
            bell.parked.store(0, Ordering::SeqCst);
            return Waited::Ready;
        }
        futex_wait(&bell.word, seen, patience.slice);
        bell.parked.store(0, Ordering::SeqCst);
        if ready() {
            return Waited::Ready;
        }
        if let Some(r) = give_up() {
            return Waited::Stopped(r);
        }
    }
}
