//! How a map's elements are cut into chunks for the workers, without R.
//!
//! A chunk runs for about [`CHUNK_SECONDS`] at the rate measured so far (a
//! probe of [`PROBE_ELEMENTS`] until a rate is known), never more than half a
//! worker's share of what is left, so that the workers finish together. Once
//! what is left would take each worker less than one chunk's time, it is
//! split evenly: a smaller chunk would cost more in round trips than it could
//! save in balance. A chunk whose worker died before it began it goes again,
//! before any new one.

use std::collections::VecDeque;

/// The time a chunk should run, in seconds.
pub const CHUNK_SECONDS: f64 = 0.01;
/// The size of the first chunks, before a rate is known.
pub const PROBE_ELEMENTS: u64 = 2;
/// The least rate taken as measured (seconds per element): a faster one is
/// timer noise.
const MIN_RATE: f64 = 1e-7;

/// Elements `start..end` (0-based, end excluded) of a map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub start: u64,
    pub end: u64,
}

impl Chunk {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The chunks of one map of `n` elements over `workers` workers.
#[derive(Debug, Clone)]
pub struct MapPlan {
    n: u64,
    workers: u64,
    next: u64,
    rate: Option<f64>,
    even: Option<u64>,
    redo: VecDeque<Chunk>,
}

impl MapPlan {
    /// A plan for `n` elements; `workers` of at least 1.
    pub fn new(n: u64, workers: u64) -> MapPlan {
        MapPlan { n, workers: workers.max(1), next: 0, rate: None, even: None, redo: VecDeque::new() }
    }

    /// The next chunk to send, or `None` when every element has gone out.
    pub fn next_chunk(&mut self) -> Option<Chunk> {
        if let Some(c) = self.redo.pop_front() {
            return Some(c);
        }
        if self.next >= self.n {
            return None;
        }
        let left = self.n - self.next;
        let size = match self.even {
            Some(size) => size,
            None => {
                let size = self.chunk_size(left);
                if self.splits_evenly(left) {
                    self.even = Some(size);
                }
                size
            }
        };
        let start = self.next;
        self.next = (start + size.max(1)).min(self.n);
        Some(Chunk { start, end: self.next })
    }

    /// A worker measured `seconds_per_element` over a chunk; a value that is
    /// not a finite non-negative number is no measurement.
    pub fn record_rate(&mut self, seconds_per_element: f64) {
        if seconds_per_element.is_finite() && seconds_per_element >= 0.0 {
            self.rate = Some(seconds_per_element);
        }
    }

    /// `chunk`'s worker died before it began it: it goes out again first.
    pub fn requeue(&mut self, chunk: Chunk) {
        if !chunk.is_empty() {
            self.redo.push_back(chunk);
        }
    }

    /// The rate measured last, if any.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    fn chunk_size(&self, left: u64) -> u64 {
        let half_share = left.div_ceil(2 * self.workers);
        match self.rate {
            None => PROBE_ELEMENTS.min(half_share).max(1),
            Some(_) if self.splits_evenly(left) => left.div_ceil(self.workers),
            Some(rate) => {
                let by_time = (CHUNK_SECONDS / rate.max(MIN_RATE)).floor();
                // (a float beyond u64's range saturates: the share bounds it)
                (by_time as u64).min(half_share).max(1)
            }
        }
    }

    fn splits_evenly(&self, left: u64) -> bool {
        self.rate.is_some_and(|rate| left as f64 * rate.max(MIN_RATE) / self.workers as f64 <= CHUNK_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Hands out every chunk of `plan`, requeueing those `requeue` picks
    /// (once each) and recording `rates` as replies come; returns what was
    /// handed out and not requeued.
    fn run(plan: &mut MapPlan, rates: &[f64], requeue: &[bool]) -> Vec<Chunk> {
        let mut done = Vec::new();
        let mut requeued = 0usize;
        let mut k = 0usize;
        while let Some(c) = plan.next_chunk() {
            assert!(!c.is_empty(), "an empty chunk");
            if requeue.get(k).copied().unwrap_or(false) && requeued < 64 {
                requeued += 1;
                plan.requeue(c);
            } else {
                done.push(c);
            }
            if let Some(&r) = rates.get(k) {
                plan.record_rate(r);
            }
            k += 1;
            assert!(k < 1_000_000, "the plan does not end");
        }
        done
    }

    #[test]
    fn the_first_chunks_probe_then_chunks_follow_the_rate_then_the_rest_is_split_evenly() {
        let mut plan = MapPlan::new(10_000, 2);
        assert_eq!(plan.next_chunk(), Some(Chunk { start: 0, end: 2 }));
        assert_eq!(plan.next_chunk(), Some(Chunk { start: 2, end: 4 }));
        // 1 ms per element: 10 elements make 10 ms.
        plan.record_rate(1e-3);
        assert_eq!(plan.next_chunk(), Some(Chunk { start: 4, end: 14 }));
        // 4 us per element: 2,500 by time, but at most half a worker's
        // share of what is left (9,986 / 4).
        plan.record_rate(4e-6);
        assert_eq!(plan.next_chunk(), Some(Chunk { start: 14, end: 14 + 2_497 }));
        // Smaller chunks as the rest shrinks, until what is left takes each
        // worker less than a chunk: then even halves.
        let mut left = 10_000 - plan.next;
        while left as f64 * 4e-6 / 2.0 > CHUNK_SECONDS {
            assert_eq!(plan.next_chunk().unwrap().len(), left.div_ceil(4));
            left = 10_000 - plan.next;
        }
        let a = plan.next_chunk().unwrap();
        let b = plan.next_chunk().unwrap();
        assert_eq!((a.len(), b.end), (left.div_ceil(2), 10_000));
        assert_eq!(plan.next_chunk(), None);
    }

    #[test]
    fn chunk_sizes_probe_then_take_about_ten_milliseconds_at_most_a_quarter_or_split_evenly() {
        let size = |left: u64, rate: Option<f64>, workers: u64| {
            let mut plan = MapPlan::new(left, workers);
            plan.rate = rate;
            plan.chunk_size(left)
        };
        assert_eq!(size(2000, None, 2), 2, "rate unknown: a probe");
        assert_eq!(size(3, None, 2), 1, "never more than a share");
        assert_eq!(size(2000, Some(1e-3), 2), 10, "1 ms each: 10 per chunk");
        assert_eq!(size(2000, Some(1.0), 2), 1, "1 s each: one by one");
        assert_eq!(size(2000, Some(1e-6), 2), 1000, "the rest is little work: split evenly");
        assert_eq!(size(1_000_000, Some(1e-6), 2), 10_000, "else ~10 ms of work ...");
        assert_eq!(size(25_000, Some(1e-6), 2), 6_250, "... at most a quarter of what is left");
    }

    #[test]
    fn a_requeued_chunk_goes_out_again_before_new_ones() {
        let mut plan = MapPlan::new(100, 4);
        let first = plan.next_chunk().unwrap();
        let second = plan.next_chunk().unwrap();
        plan.requeue(first);
        assert_eq!(plan.next_chunk(), Some(first));
        assert_eq!(plan.next_chunk().unwrap().start, second.end);
    }

    #[test]
    fn no_element_and_bad_rates_are_handled() {
        assert_eq!(MapPlan::new(0, 3).next_chunk(), None);
        let mut plan = MapPlan::new(5, 0);
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            plan.record_rate(bad);
        }
        assert_eq!(plan.rate(), None);
        plan.record_rate(0.0);
        assert_eq!(plan.next_chunk(), Some(Chunk { start: 0, end: 5 }), "instant elements: one even split");
    }

    proptest! {
        /// Whatever the rates and the chunks lost to dead workers, every
        /// element goes out exactly once among the chunks not lost, and no
        /// chunk before the even split exceeds half a worker's share.
        #[test]
        fn every_element_goes_out_exactly_once(
            n in 0u64..5_000,
            workers in 1u64..65,
            rates in proptest::collection::vec(prop_oneof![Just(f64::NAN), 0.0f64..0.02, Just(0.0)], 0..50),
            requeue in proptest::collection::vec(any::<bool>(), 0..50),
        ) {
            let mut plan = MapPlan::new(n, workers);
            let mut done = run(&mut plan, &rates, &requeue);
            done.sort_by_key(|c| c.start);
            let mut at = 0;
            for c in &done {
                prop_assert_eq!(c.start, at);
                at = c.end;
            }
            prop_assert_eq!(at, n);
        }

        #[test]
        fn chunks_before_the_even_split_leave_work_for_every_worker(
            n in 1u64..100_000,
            workers in 1u64..65,
            rate in 1e-7f64..1e-2,
        ) {
            let mut plan = MapPlan::new(n, workers);
            plan.record_rate(rate);
            while plan.even.is_none() {
                let left = n - plan.next;
                let Some(c) = plan.next_chunk() else { break };
                if plan.even.is_none() {
                    prop_assert!(c.len() <= left.div_ceil(2 * workers));
                } else {
                    prop_assert_eq!(c.len(), left.div_ceil(workers).min(left));
                }
            }
        }
    }
}
