//! The master's bookkeeping of its messages: which worker has which, in the
//! order it will answer them, and those waiting for room. Nothing here
//! touches the rings or R: the caller sends and receives, and tells this what
//! it did. `W` is what the caller keeps with a message until its reply.
//!
//! A worker has at most `depth` messages at a time (one running, the others
//! ready), so that a worker blocked on a full result ring can never block the
//! master on a full task ring; a message larger than `busy_bytes` goes only
//! to an idle worker (a busy one reads it only after its reply, which the
//! master, still streaming the message, would never read).

use std::collections::VecDeque;

/// A message sent to a worker, until its reply.
pub struct Sent<W> {
    pub tag: u64,
    pub what: W,
    /// The message itself, kept when it may go again to another worker
    /// should this one die before it reads it.
    pub resend: Option<Message>,
}

/// A message's bytes, and whether it holds no handle (see wire.rs's `PLAIN`).
pub struct Message {
    pub payload: Vec<u8>,
    pub plain: bool,
}

/// A message waiting for a worker with room.
pub struct Waiting<W> {
    pub tag: u64,
    pub message: Message,
    pub what: W,
}

/// What [`Dispatch::free_slot`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeSlot {
    /// The least busy worker with room.
    Slot(usize),
    /// Every worker asked about is busy.
    Busy,
    /// No worker is alive in the slots asked about.
    NoneAlive,
}

/// Where a message is (see [`Dispatch::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Waiting for a worker with room.
    Waiting,
    /// Sent to the worker in `slot`; `first`: its oldest message; `alone`:
    /// its only one.
    Sent { slot: usize, first: bool, alone: bool },
}

/// What a worker that died had.
pub struct Lost<W> {
    /// Messages it had begun (or may have): they failed.
    pub begun: Vec<Sent<W>>,
    /// Messages it never read, with no message kept to send again: the
    /// caller decides what becomes of them.
    pub unread: Vec<Sent<W>>,
    /// Messages it never read that wait again, first in the queue.
    pub requeued: usize,
}

pub struct Dispatch<W> {
    depth: usize,
    busy_bytes: usize,
    alive: Vec<bool>,
    pending: Vec<VecDeque<Sent<W>>>,
    queue: VecDeque<Waiting<W>>,
    next_tag: u64,
}

impl<W> Dispatch<W> {
    /// Bookkeeping for `n` workers, all alive.
    pub fn new(n: usize, depth: usize, busy_bytes: usize) -> Dispatch<W> {
        Dispatch {
            depth: depth.max(1),
            busy_bytes,
            alive: vec![true; n],
            pending: (0..n).map(|_| VecDeque::new()).collect(),
            queue: VecDeque::new(),
            next_tag: 1,
        }
    }

    /// A tag no other message of this pool has (at most 2^53: an R double).
    pub fn next_tag(&mut self) -> u64 {
        let t = self.next_tag;
        self.next_tag += 1;
        t
    }

    /// How many messages the worker in `slot` has.
    pub fn load(&self, slot: usize) -> usize {
        self.pending[slot].len()
    }

    /// Messages sent and not answered, and messages waiting.
    pub fn outstanding(&self) -> usize {
        self.pending.iter().map(VecDeque::len).sum::<usize>() + self.queue.len()
    }

    /// Messages waiting for room.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Workers with at least one message.
    pub fn busy_workers(&self) -> usize {
        self.pending.iter().filter(|p| !p.is_empty()).count()
    }

    /// May a message of `bytes` go to the worker in `slot` now?
    pub fn has_room(&self, slot: usize, bytes: usize) -> bool {
        self.alive[slot] && self.load(slot) < if bytes <= self.busy_bytes { self.depth } else { 1 }
    }

    /// The least busy live worker among `slots` (all when `None`) that has
    /// room for a message of `bytes`; the first such in slot order on a tie.
    pub fn free_slot(&self, bytes: usize, slots: Option<&[usize]>) -> FreeSlot {
        let live = |s: &usize| *s < self.alive.len() && self.alive[*s];
        let least = match slots {
            Some(slots) => slots.iter().copied().filter(live).min_by_key(|&s| self.load(s)),
            None => (0..self.alive.len()).filter(live).min_by_key(|&s| self.load(s)),
        };
        match least {
            None => FreeSlot::NoneAlive,
            Some(s) if self.has_room(s, bytes) => FreeSlot::Slot(s),
            Some(_) => FreeSlot::Busy,
        }
    }

    /// Does the worker in `slot` hold every reply it sent? (Then it may let go
    /// of what it handed over with them.)
    pub fn all_answered(&self, slot: usize) -> bool {
        self.pending[slot].is_empty()
    }

    /// `sent` went to the worker in `slot`.
    pub fn sent(&mut self, slot: usize, sent: Sent<W>) {
        self.pending[slot].push_back(sent);
    }

    /// A message waits for room (`first`: before every other).
    pub fn wait(&mut self, waiting: Waiting<W>, first: bool) {
        if first {
            self.queue.push_front(waiting);
        } else {
            self.queue.push_back(waiting);
        }
    }

    /// The first waiting message and a worker with room for it, if there is one.
    pub fn next_ready(&mut self) -> Option<(usize, Waiting<W>)> {
        let bytes = self.queue.front()?.message.payload.len();
        match self.free_slot(bytes, None) {
            FreeSlot::Slot(s) => self.queue.pop_front().map(|w| (s, w)),
            _ => None,
        }
    }

    /// The worker in `slot` answered with `tag`: the message it answered, or
    /// `Err(expected)`, the tag its oldest message has (`None`: it has none).
    pub fn answered(&mut self, slot: usize, tag: u64) -> Result<Sent<W>, Option<u64>> {
        match self.pending[slot].front() {
            Some(s) if s.tag == tag => Ok(self.pending[slot].pop_front().expect("front exists")),
            Some(s) => Err(Some(s.tag)),
            None => Err(None),
        }
    }

    /// The worker in `slot` died; `unread` are the tags of the messages it
    /// never read. Messages kept for that go first in the queue again, in
    /// their order.
    pub fn died(&mut self, slot: usize, unread: &[u64]) -> Lost<W> {
        self.alive[slot] = false;
        let mut lost = Lost { begun: Vec::new(), unread: Vec::new(), requeued: 0 };
        let mut again = Vec::new();
        for mut s in self.pending[slot].drain(..) {
            if !unread.contains(&s.tag) {
                lost.begun.push(s);
            } else if let Some(message) = s.resend.take() {
                again.push(Waiting { tag: s.tag, message, what: s.what });
            } else {
                lost.unread.push(s);
            }
        }
        lost.requeued = again.len();
        for w in again.into_iter().rev() {
            self.queue.push_front(w);
        }
        lost
    }

    /// The worker in `slot` is gone (a send to it failed): nothing more goes
    /// to it; what it had is settled by [`Dispatch::died`] once its death is read.
    pub fn gone(&mut self, slot: usize) {
        self.alive[slot] = false;
    }

    /// A new worker runs in `slot`.
    pub fn filled(&mut self, slot: usize) {
        self.alive[slot] = true;
    }

    /// Where the message `tag` is: waiting, or sent to a worker (in which
    /// slot, and whether it is that worker's oldest message, the one it runs
    /// or reads next); `None` when it was answered or never was.
    pub fn place(&self, tag: u64) -> Option<Place> {
        if self.queue.iter().any(|w| w.tag == tag) {
            return Some(Place::Waiting);
        }
        self.pending.iter().enumerate().find_map(|(slot, p)| {
            p.iter().position(|s| s.tag == tag).map(|i| Place::Sent { slot, first: i == 0, alone: p.len() == 1 })
        })
    }

    /// Takes the waiting message `tag` out of the queue (it is never sent).
    pub fn withdraw(&mut self, tag: u64) -> Option<Waiting<W>> {
        let i = self.queue.iter().position(|w| w.tag == tag)?;
        self.queue.remove(i)
    }

    /// Every message, sent or waiting (the pool stops).
    pub fn drain(&mut self) -> Vec<W> {
        let mut out: Vec<W> = self.pending.iter_mut().flat_map(|p| p.drain(..).map(|s| s.what)).collect();
        out.extend(self.queue.drain(..).map(|w| w.what));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(bytes: usize) -> Message {
        Message { payload: vec![0; bytes], plain: false }
    }

    fn send(d: &mut Dispatch<&'static str>, slot: usize, what: &'static str, keep: bool) -> u64 {
        let tag = d.next_tag();
        d.sent(slot, Sent { tag, what, resend: keep.then(|| msg(8)) });
        tag
    }

    #[test]
    fn a_message_is_placed_and_withdrawn_only_while_it_waits() {
        let mut d: Dispatch<&str> = Dispatch::new(2, 2, 100);
        let a = send(&mut d, 0, "a", false);
        let b = send(&mut d, 0, "b", false);
        let c = send(&mut d, 1, "c", false);
        let w = d.next_tag();
        d.wait(Waiting { tag: w, message: msg(8), what: "w" }, false);
        assert_eq!(d.place(a), Some(Place::Sent { slot: 0, first: true, alone: false }));
        assert_eq!(d.place(b), Some(Place::Sent { slot: 0, first: false, alone: false }));
        assert_eq!(d.place(c), Some(Place::Sent { slot: 1, first: true, alone: true }));
        assert_eq!(d.place(w), Some(Place::Waiting));
        assert!(d.withdraw(a).is_none());
        assert_eq!(d.withdraw(w).map(|x| x.what), Some("w"));
        assert_eq!(d.place(w), None);
        assert_eq!(d.waiting(), 0);
        assert_eq!(d.outstanding(), 3);
        assert!(d.answered(0, a).is_ok());
        assert_eq!(d.place(a), None);
        assert_eq!(d.place(b), Some(Place::Sent { slot: 0, first: true, alone: true }));
        assert_eq!(d.place(12345), None);
    }

    #[test]
    fn free_slot_is_the_least_busy_with_room() {
        let mut d: Dispatch<&str> = Dispatch::new(3, 2, 100);
        assert_eq!(d.free_slot(8, None), FreeSlot::Slot(0));
        send(&mut d, 0, "a", false);
        assert_eq!(d.free_slot(8, None), FreeSlot::Slot(1));
        send(&mut d, 1, "b", false);
        send(&mut d, 2, "c", false);
        assert_eq!(d.free_slot(8, None), FreeSlot::Slot(0));
        // a large message only to an idle worker
        assert_eq!(d.free_slot(1000, None), FreeSlot::Busy);
        assert_eq!(d.free_slot(8, Some(&[2])), FreeSlot::Slot(2));
        send(&mut d, 2, "d", false);
        assert_eq!(d.free_slot(8, Some(&[2])), FreeSlot::Busy);
        d.died(2, &[]);
        assert_eq!(d.free_slot(8, Some(&[2])), FreeSlot::NoneAlive);
        d.filled(2);
        assert_eq!(d.free_slot(1000, Some(&[2])), FreeSlot::Slot(2));
    }

    #[test]
    fn replies_come_in_order_and_out_of_step_is_seen() {
        let mut d: Dispatch<&str> = Dispatch::new(1, 2, 100);
        let a = send(&mut d, 0, "a", false);
        let b = send(&mut d, 0, "b", false);
        assert!(!d.all_answered(0));
        assert_eq!(d.answered(0, b).err(), Some(Some(a)));
        assert_eq!(d.answered(0, a).map(|s| s.what).ok(), Some("a"));
        assert_eq!(d.answered(0, b).map(|s| s.what).ok(), Some("b"));
        assert_eq!(d.answered(0, b).err(), Some(None));
        assert!(d.all_answered(0));
        assert_eq!(d.outstanding(), 0);
    }

    #[test]
    fn a_death_splits_begun_unread_and_requeued() {
        let mut d: Dispatch<&str> = Dispatch::new(2, 3, 100);
        d.wait(Waiting { tag: 100, message: msg(8), what: "queued" }, false);
        let _running = send(&mut d, 0, "running", true);
        let unread_call = send(&mut d, 0, "unread call", true);
        let unread_job = send(&mut d, 0, "unread job", false);
        let lost = d.died(0, &[unread_call, unread_job]);
        assert_eq!(lost.begun.iter().map(|s| s.what).collect::<Vec<_>>(), vec!["running"]);
        assert_eq!(lost.unread.iter().map(|s| s.what).collect::<Vec<_>>(), vec!["unread job"]);
        assert_eq!(lost.requeued, 1);
        // the unread call goes first, before what waited already, to a live worker
        let (slot, w) = d.next_ready().expect("slot 1 is free");
        assert_eq!((slot, w.what, w.tag), (1, "unread call", unread_call));
        assert_eq!(d.outstanding(), 1);
        assert_eq!(d.drain(), vec!["queued"]);
    }
}
