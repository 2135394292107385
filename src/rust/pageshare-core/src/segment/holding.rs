//! Who keeps a segment available to other processes: the process that holds
//! its descriptor. Holding ends at release; a worker hands a segment to its
//! master (disown, kept open among the hand-offs) and the master adopts it.

use super::open::open_checked;
use super::{self_identity, Segment};
use crate::error::Result;
use crate::locator::Locator;
use crate::os;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Descriptors of segments a worker has handed to its master ([`Segment::disown`]),
/// kept open until the master has had the chance to open them itself.
static HANDOFFS: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// How many times this process stopped holding a segment (released it, or
/// dropped the last reference while holding it).
static RELEASES: AtomicU64 = AtomicU64::new(0);

/// How many times this process has stopped holding a segment so far: a
/// process that maps segments of this one need look for stale ones (see
/// `registry::stale`) only when this has changed.
pub fn releases() -> u64 {
    RELEASES.load(Ordering::Relaxed)
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owned_here() {
            RELEASES.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Segment {
    /// Where another process can find this segment now: this process if it
    /// holds a descriptor, else where it was found.
    pub fn locator(&self) -> Locator {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_ref() {
            Some((file, pid)) if *pid == os::pid() => {
                let (pid, start) = self_identity();
                Locator { pid, start, fd: file.as_raw_fd(), ..origin }
            }
            _ => origin,
        }
    }

    /// The process that makes the segment available to others (pid, start time).
    pub fn owner(&self) -> (u32, u64) {
        let l = self.locator();
        (l.pid, l.start)
    }

    /// Does this process hold the segment (keep it available to other processes)?
    pub fn owned_here(&self) -> bool {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|(_, pid)| *pid == os::pid())
    }

    /// A worker handing a view to its master: stop holding the segment, but
    /// keep its descriptor open among the hand-offs until [`release_handoffs`],
    /// so that the master can still open it while the result travels.
    pub fn disown(&self) {
        if !self.owned_here() {
            return;
        }
        let here = self.locator();
        *self.origin.lock().unwrap_or_else(|p| p.into_inner()) = here;
        if let Some((file, _)) = self.held.lock().unwrap_or_else(|p| p.into_inner()).take() {
            HANDOFFS.lock().unwrap_or_else(|p| p.into_inner()).push(file);
        }
    }

    /// Hold the segment from now on (a master receiving a worker's result):
    /// open a descriptor of our own, so that it stays available after the
    /// process that made it is gone.
    pub fn adopt(&self) -> Result<()> {
        if self.owned_here() {
            return Ok(());
        }
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        let file = os::place_high(open_checked(&origin, &self.name)?)?;
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some((file, os::pid()));
        Ok(())
    }

    /// Hold the segment from now on through `file`, a descriptor of it this
    /// process opened already ([`Segment::open_descriptor`], before it looked
    /// at the contents): unlike [`Segment::adopt`] nothing is opened again, so
    /// a holder that lets go after the comparison cannot make this fail.
    pub fn adopt_opened(&self, file: File) -> Result<()> {
        if self.owned_here() {
            return Ok(());
        }
        use std::os::unix::fs::MetadataExt;
        let (m, origin) = (
            file.metadata().map_err(|e| crate::Error::os("cannot stat the segment", e))?,
            *self.origin.lock().unwrap_or_else(|p| p.into_inner()),
        );
        if (m.dev(), m.ino()) != (origin.dev, origin.ino) {
            return Err(crate::Error::Argument(format!("the descriptor given to hold {} is another file", self.name)));
        }
        let file = os::place_high(file)?;
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some((file, os::pid()));
        Ok(())
    }

    /// Stop holding the segment now: no process can open it through us any
    /// more; mappings (here and elsewhere) stay valid until unmapped, and the
    /// kernel frees the memory with the last of them.
    pub fn release(&self) {
        if self.owned_here() {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).take();
            RELEASES.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Close the descriptors of segments handed to the master (a worker starting
/// its next task: the master has received the previous result by then).
pub fn release_handoffs() -> usize {
    let mut h = HANDOFFS.lock().unwrap_or_else(|p| p.into_inner());
    let n = h.len();
    h.clear();
    n
}
