//! A single-producer single-consumer ring of messages in shared memory.
//!
//! Positions only grow (u64, taken modulo the capacity, a power of two); the
//! producer publishes `head` after writing, the consumer publishes `tail` after
//! reading, each on its own cache line. A message is one or more frames: a
//! 16-byte header (payload length, flags, the sender's tag) and the payload,
//! padded to 16 bytes. A frame never wraps: one that would not fit before the
//! end is preceded by a wrap marker. A message larger than a quarter of the
//! ring travels as several frames while the consumer reads: any size fits.
//!
//! The peer is another process of the same user that may die at any moment or
//! misbehave: every header and position read from the shared pages is checked
//! before use, and a bad one is [`RingError::Corrupt`], never a panic or an
//! access outside the ring.

use crate::wait::{wait_until, Doorbell, Patience, StopReason, Waited};
use crate::wire::{Frame, FRAME_HEADER as HEADER};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[repr(C, align(64))]
struct Position(AtomicU64);

#[repr(C, align(64))]
struct Flag(AtomicU32);

/// The shared control block of one ring.
#[repr(C)]
pub struct RingControl {
    head: Position,
    tail: Position,
    /// Where the producer parks when the ring is full.
    space: Doorbell,
    closed: Flag,
}

/// What ended a send or a receive early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The wait was given up (ring closed, interrupt, deadline).
    Stopped(StopReason),
    /// The shared pages hold something no correct peer writes.
    Corrupt(&'static str),
}

/// One ring as seen by this process: its control block, its data and the
/// doorbell its consumer parks on (several rings may share one: the master
/// waits on one doorbell for the results of all workers).
pub struct Ring<'a> {
    ctrl: &'a RingControl,
    data: *mut u8,
    capacity: u64,
    data_bell: &'a Doorbell,
    _pages: PhantomData<&'a [u8]>,
}

fn padded(len: u64) -> u64 {
    (len + 15) & !15
}

impl<'a> Ring<'a> {
    /// # Safety
    /// `ctrl` and `data_bell` must be valid for `'a` (they may be in shared
    /// memory and change under us: only atomics are read from them); `data`
    /// must point at `capacity` bytes valid for reads and writes for `'a`;
    /// `capacity` must be a power of two of at least 64. This process must be
    /// the ring's only producer if it sends and its only consumer if it
    /// receives.
    pub unsafe fn new(ctrl: &'a RingControl, data: *mut u8, capacity: u64, data_bell: &'a Doorbell) -> Ring<'a> {
        debug_assert!(capacity.is_power_of_two() && capacity >= 64);
        Ring { ctrl, data, capacity, data_bell, _pages: PhantomData }
    }

    /// Empties the ring and opens it (the master, before a new worker takes a
    /// slot whose previous worker died).
    pub fn reset(&self) {
        self.ctrl.head.0.store(0, Ordering::SeqCst);
        self.ctrl.tail.0.store(0, Ordering::SeqCst);
        self.ctrl.closed.0.store(0, Ordering::SeqCst);
    }

    /// Closes the ring and wakes both sides: a waiting receive on an empty ring
    /// and a waiting send end with `Stopped(Closed)`.
    pub fn close(&self) {
        self.ctrl.closed.0.store(1, Ordering::SeqCst);
        self.data_bell.ring_always();
        self.ctrl.space.ring_always();
    }

    pub fn is_closed(&self) -> bool {
        self.ctrl.closed.0.load(Ordering::SeqCst) != 0
    }

    /// Is a frame waiting to be read?
    pub fn has_data(&self) -> bool {
        self.ctrl.head.0.load(Ordering::Acquire) != self.ctrl.tail.0.load(Ordering::Relaxed)
    }

    /// Sends one message. Waits (spin, then park) while the ring is full.
    pub fn send(
        &self,
        tag: u64,
        payload: &[u8],
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<(), RingError> {
        let max_chunk = (self.capacity / 4 - HEADER) as usize;
        let mut rest = payload;
        let mut start = true;
        loop {
            let n = rest.len().min(max_chunk);
            let (chunk, after) = rest.split_at(n);
            self.send_frame(tag, start, !after.is_empty(), chunk, patience, give_up)?;
            if after.is_empty() {
                return Ok(());
            }
            start = false;
            rest = after;
        }
    }

    fn send_frame(
        &self,
        tag: u64,
        start: bool,
        more: bool,
        chunk: &[u8],
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<(), RingError> {
        let head = self.ctrl.head.0.load(Ordering::Relaxed);
        let offset = head & (self.capacity - 1);
        let frame = HEADER + padded(chunk.len() as u64);
        let before_end = self.capacity - offset;
        let skip = if frame > before_end { before_end } else { 0 };
        let needed = skip + frame;
        let ctrl = self.ctrl;
        let capacity = self.capacity;
        let free = || capacity.saturating_sub(head.wrapping_sub(ctrl.tail.0.load(Ordering::Acquire))) >= needed;
        if self.is_closed() {
            return Err(RingError::Stopped(StopReason::Closed));
        }
        if !free() {
            let waited = wait_until(&self.ctrl.space, patience, free, || {
                if ctrl.closed.0.load(Ordering::SeqCst) != 0 {
                    Some(StopReason::Closed)
                } else {
                    give_up()
                }
            });
            if let Waited::Stopped(r) = waited {
                return Err(RingError::Stopped(r));
            }
        }
        let mut at = offset;
        if skip > 0 {
            self.write_header(at, Frame::Wrap);
            at = 0;
        }
        // SAFETY: at + HEADER + chunk.len() <= capacity (the frame fits before
        // the end, by `skip`), and the consumer does not read these bytes until
        // `head` is published below.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.data.add((at + HEADER) as usize), chunk.len());
        }
        self.write_header(at, Frame::Part { len: chunk.len() as u32, tag, start, more });
        self.ctrl.head.0.store(head.wrapping_add(needed), Ordering::Release);
        self.data_bell.ring();
        Ok(())
    }

    fn write_header(&self, at: u64, frame: Frame) {
        let [word, tag] = frame.to_words();
        // SAFETY: at + 16 <= capacity (frames start at 16-byte boundaries) and
        // the 16 bytes are aligned to 8; volatile, as the peer maps them too.
        unsafe {
            let p = self.data.add(at as usize).cast::<u64>();
            std::ptr::write_volatile(p, word);
            std::ptr::write_volatile(p.add(1), tag);
        }
    }

    fn read_header(&self, at: u64) -> Result<Frame, RingError> {
        // SAFETY: as in write_header (the caller checked at + 16 <= capacity).
        let (word, tag) = unsafe {
            let p = self.data.add(at as usize).cast::<u64>();
            (std::ptr::read_volatile(p), std::ptr::read_volatile(p.add(1)))
        };
        Frame::from_words(word, tag).map_err(|e| RingError::Corrupt(e.0))
    }

    /// Receives one message into `out` (cleared first) and returns its tag.
    /// Waits (spin, then park on the ring's data doorbell) while it is empty;
    /// messages already published are delivered even after the ring closed.
    /// A receive given up in the middle of a message loses the frames it read:
    /// a consumer that may give up while frames still come uses
    /// [`Ring::resume`].
    pub fn receive(
        &self,
        out: &mut Vec<u8>,
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<u64, RingError> {
        out.clear();
        self.resume(out, &mut None, patience, give_up)
    }

    /// Receives the rest of a message whose first frames a receive given up
    /// before has read (their payload in `out`, their tag in `begun`), or,
    /// with `begun` None, a whole message appended to `out`. Given up (a
    /// deadline, an interrupt, the ring closed) in the middle of a message,
    /// `out` and `begun` hold what was read, to be passed to the next call:
    /// no frame is lost and none is read twice.
    pub fn resume(
        &self,
        out: &mut Vec<u8>,
        begun: &mut Option<u64>,
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<u64, RingError> {
        loop {
            self.wait_for_data(patience, give_up)?;
            match self.take_frame(out)? {
                None => continue, // a wrap marker
                Some((tag, more, start)) => {
                    // (a message begins with its START frame and has no other:
                    // anything else is a message cut short, never half-read)
                    if start != begun.is_none() {
                        return Err(RingError::Corrupt("a message's frames are out of order"));
                    }
                    let tag0 = *begun.get_or_insert(tag);
                    if tag != tag0 {
                        return Err(RingError::Corrupt("a message's frames carry different tags"));
                    }
                    if !more {
                        *begun = None;
                        return Ok(tag);
                    }
                }
            }
        }
    }

    fn wait_for_data(
        &self,
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<(), RingError> {
        if self.has_data() {
            return Ok(());
        }
        let ctrl = self.ctrl;
        let ready = || ctrl.head.0.load(Ordering::Acquire) != ctrl.tail.0.load(Ordering::Relaxed);
        let waited = wait_until(self.data_bell, patience, ready, || {
            if ctrl.closed.0.load(Ordering::SeqCst) != 0 {
                // (a last publication may have raced with the close)
                if ready() {
                    return None;
                }
                Some(StopReason::Closed)
            } else {
                give_up()
            }
        });
        match waited {
            Waited::Ready => Ok(()),
            Waited::Stopped(r) => Err(RingError::Stopped(r)),
        }
    }

    /// Reads the frame at `tail` (there is one): appends its payload to `out`
    /// and returns its tag, whether the message continues and whether the
    /// frame begins a message, or `None` for a wrap marker. Publishes the new
    /// tail.
    fn take_frame(&self, out: &mut Vec<u8>) -> Result<Option<(u64, bool, bool)>, RingError> {
        let head = self.ctrl.head.0.load(Ordering::Acquire);
        let tail = self.ctrl.tail.0.load(Ordering::Relaxed);
        let available = head.wrapping_sub(tail);
        if available > self.capacity || !available.is_multiple_of(16) || !tail.is_multiple_of(16) {
            return Err(RingError::Corrupt("the ring's positions are inconsistent"));
        }
        if available < HEADER {
            return Err(RingError::Corrupt("a frame shorter than its header"));
        }
        let offset = tail & (self.capacity - 1);
        let (len, tag, first, more) = match self.read_header(offset)? {
            Frame::Wrap => {
                let skip = self.capacity - offset;
                if offset == 0 || skip > available {
                    return Err(RingError::Corrupt("a wrap marker in the wrong place"));
                }
                self.advance(tail, skip);
                return Ok(None);
            }
            Frame::Part { len, tag, start, more } => (len, tag, start, more),
        };
        let frame = HEADER + padded(len as u64);
        if frame > available || offset + frame > self.capacity {
            return Err(RingError::Corrupt("a frame longer than what was published"));
        }
        let start = out.len();
        out.reserve(len as usize);
        // SAFETY: offset + 16 + len <= capacity (checked above); `out` has room
        // for len more bytes (reserved); the producer does not write these bytes
        // until the tail passes them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.data.add((offset + HEADER) as usize),
                out.as_mut_ptr().add(start),
                len as usize,
            );
            out.set_len(start + len as usize);
        }
        self.advance(tail, frame);
        Ok(Some((tag, more, first)))
    }

    /// The tags of the messages published but not yet begun by the consumer,
    /// oldest first: after the consumer died, the tasks it never started
    /// (they can safely run elsewhere). Stops at the first frame that does not
    /// check out.
    pub fn unread_tags(&self) -> Vec<u64> {
        let head = self.ctrl.head.0.load(Ordering::Acquire);
        let mut pos = self.ctrl.tail.0.load(Ordering::Acquire);
        let mut tags = Vec::new();
        while head.wrapping_sub(pos) >= HEADER && head.wrapping_sub(pos) <= self.capacity && pos.is_multiple_of(16) {
            let offset = pos & (self.capacity - 1);
            let step = match self.read_header(offset) {
                Ok(Frame::Wrap) if offset != 0 => self.capacity - offset,
                Ok(Frame::Part { len, tag, start, .. }) => {
                    if start {
                        tags.push(tag);
                    }
                    HEADER + padded(len as u64)
                }
                _ => break,
            };
            if offset + step > self.capacity || step > head.wrapping_sub(pos) {
                break;
            }
            pos = pos.wrapping_add(step);
        }
        tags
    }

    fn advance(&self, tail: u64, by: u64) {
        self.ctrl.tail.0.store(tail.wrapping_add(by), Ordering::Release);
        self.ctrl.space.ring();
    }
}

#[cfg(test)]
impl Ring<'_> {
    /// Writes `data` over the ring's pages and sets both positions, as a
    /// misbehaving peer could.
    /// Publishes 16 bytes no correct producer writes (a header of all ones),
    /// as a worker whose memory was corrupted would.
    #[cfg(test)]
    pub(crate) fn publish_garbage_for_tests(&self) {
        let head = self.ctrl.head.0.load(Ordering::Relaxed);
        let at = head & (self.capacity - 1);
        // SAFETY: frames start at 16-byte boundaries, so at + 16 <= capacity.
        unsafe { std::ptr::write_bytes(self.data.add(at as usize), 0xff, 16) };
        self.ctrl.head.0.store(head.wrapping_add(16), Ordering::Release);
        self.data_bell.ring();
    }

    pub(crate) fn scribble_for_tests(&self, data: &[u8], head: u64, tail: u64) {
        let n = data.len().min(self.capacity as usize);
        // SAFETY: n <= capacity bytes of the ring's data.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.data, n) };
        self.ctrl.head.0.store(head, Ordering::SeqCst);
        self.ctrl.tail.0.store(tail, Ordering::SeqCst);
    }
}
