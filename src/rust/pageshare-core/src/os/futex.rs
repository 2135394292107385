//! Futexes on words in shared memory: a process parks on a word until another
//! process (or a thread) changes it and wakes it. Shared (not private)
//! futexes, so that a wake from another process reaches the waiter.

use rustix::thread::futex;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout`. Returns when woken, when
/// the word no longer holds `expected`, on a signal, or when the time is up: the
/// caller always checks its own condition again.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = rustix::thread::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos().into(),
    };
    // (EAGAIN, EINTR and ETIMEDOUT all send the caller back to its condition)
    let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&ts));
}

/// Wakes every process or thread parked on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_wait_ends_on_a_wake_a_changed_word_or_the_timeout() {
        let word = Arc::new(AtomicU32::new(0));
        let t = Instant::now();
        futex_wait(&word, 1, Duration::from_secs(5)); // not 1: at once
        assert!(t.elapsed() < Duration::from_secs(1));
        let t = Instant::now();
        futex_wait(&word, 0, Duration::from_millis(50)); // the timeout
        assert!(t.elapsed() >= Duration::from_millis(40));
        let waker = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                word.store(1, Ordering::SeqCst);
                futex_wake_all(&word);
            })
        };
        let t = Instant::now();
        while word.load(Ordering::SeqCst) == 0 {
            futex_wait(&word, 0, Duration::from_secs(10));
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        waker.join().unwrap();
    }
}
