//! One shared segment: an anonymous memory file (memfd) that is created,
//! written, sealed and then mapped read-only; other processes open it through
//! the descriptor of a process that holds it (`/proc/<pid>/fd/<n>`, checked
//! against a [`Locator`]).
//!
//! # Why nothing can leak, block or fault
//! A memfd has no name in any directory: the kernel frees it when the last
//! descriptor and the last mapping of it go, so a process killed with `kill -9`
//! (or a forked child leaving through `mcexit()`) leaves nothing behind, and the
//! size of /dev/shm does not bound it. Once sealed (`F_SEAL_SHRINK | GROW |
//! WRITE | SEAL`) nobody, its creator included, can truncate, grow or rewrite
//! it, so a reader's mapping can never fault; a receiver maps only a sealed
//! memfd of its own user whose device, inode, size and header token match the
//! handle it was given.
//!
//! One job per file: `create.rs` makes, fills and seals a segment; `open.rs`
//! opens one that a process holds, checked; `holding.rs` is who keeps a
//! segment available to others (hold, hand off, adopt, release); this file has
//! the segment itself and what reading it needs.

use crate::header::{Header, Kind};
use crate::locator::{hex, Locator};
use crate::os;
use memmap2::Mmap;
pub use memmap2::MmapMut;
use std::fs::File;
use std::sync::Mutex;

mod create;
mod holding;
mod open;
#[cfg(test)]
mod tests;

pub use create::{Handover, HANDOVER_CHUNK};
pub use holding::{release_handoffs, releases};

/// Prefix of the name every pageshare memfd carries in /proc.
pub const MEMFD_PREFIX: &str = "pageshare.";

/// Identity of this process as written into the headers it creates (cached
/// per pid: a forked child has its own).
pub fn self_identity() -> (u32, u64) {
    static CACHE: Mutex<(u32, u64)> = Mutex::new((0, 0));
    let pid = os::pid();
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if c.0 != pid {
        *c = (pid, os::start_time(pid).unwrap_or(0));
    }
    *c
}

pub struct Segment {
    name: String,
    /// Where this process found the segment (or, once it held it, itself).
    origin: Mutex<Locator>,
    /// The descriptor this process holds, with the pid that opened it: while it
    /// is held, other processes can open the segment. A forked child inherits
    /// the descriptor but is not the holder.
    held: Mutex<Option<(File, u32)>>,
    map: Mmap,
    header: Header,
    /// Bytes of the source's own pages that became this segment's pages when
    /// it was created here ([`Segment::create_copy_handing_over`]); 0 otherwise.
    source_released: usize,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("name", &self.name).field("header", &self.header).finish()
    }
}

/// What to put in a new segment.
pub struct Contents<'a> {
    pub kind: Kind,
    pub length: u64,
    pub data_len: u64,
    pub attributes: &'a [u8],
}

impl Segment {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn token(&self) -> [u8; 16] {
        self.header.token
    }

    pub fn data(&self) -> &[u8] {
        let d0 = self.header.data_offset as usize;
        &self.map[d0..d0 + self.header.data_len as usize]
    }

    /// How the mapping shows in /proc/self/maps (without " (deleted)").
    pub fn maps_path(&self) -> String {
        os::memfd_path(&memfd_name(&self.header.token))
    }

    /// The strings of a character segment (validated when it was created or opened).
    pub fn strings(&self) -> crate::strings::StringTable<'_> {
        debug_assert_eq!(self.header.kind, Kind::Character);
        crate::strings::StringTable::trusted(self.data(), self.header.length)
    }
    pub fn attributes(&self) -> &[u8] {
        let a0 = self.header.attr_offset as usize;
        &self.map[a0..a0 + self.header.attr_len as usize]
    }
    /// Size of the whole segment (header, attributes, data).
    pub fn total_size(&self) -> u64 {
        self.header.total_size
    }
    /// Bytes of the source's own pages this segment took over when this
    /// process created it (0 if it copied only, or was opened).
    pub fn source_released(&self) -> usize {
        self.source_released
    }
}

/// The name a segment's memfd shows in /proc: the prefix and the token.
fn memfd_name(token: &[u8; 16]) -> String {
    format!("{MEMFD_PREFIX}{}", hex(token))
}
