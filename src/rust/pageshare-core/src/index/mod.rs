//! Index entries: how memshare's API (`registerVariables()`, `retrieveViews()`)
//! finds a segment by namespace and variable name, from any process of the same
//! user. Segments themselves have no names; an entry is a small file
//! `<base>/pageshare-<uid>/<segment name>` holding the
//! [`Locator`](crate::locator::Locator) of the registering process's
//! descriptor.
//!
//! The directory is made mode 0700 and checked (a real directory, this user's,
//! closed to others) before every use, so another user can neither squat a name
//! nor redirect one. Every entry is opened without following links and without
//! blocking, and used only if it is a small regular file of this user closed to
//! others.
//!
//! # Liveness: the kernel says when a holder is gone
//! The registering process locks the entry's inode (`flock`, shared) before it
//! links it into place, and keeps that descriptor (close-on-exec) for as long as
//! it holds the registration ([`Claim`]). The kernel drops the lock with the
//! last descriptor of it, at release or at any exit (`kill -9` included).
//! Whoever judges an entry tries a non-blocking exclusive lock on it: refused
//! means a holder is alive, whatever PID namespace it runs in and whether or
//! not its /proc entries can be read here; granted is the evidence that the
//! holder is gone, and only then is the entry stale (the next lookup, publish
//! or [`sweep()`] removes it, if it is still the same file). A lock that cannot
//! be tried at all counts as held: an entry is never removed on a guess.
//!
//! A forked child (`mclapply`) inherits the descriptor, so an entry stays
//! locked until the registering process and its forked children have all
//! exited or released it. Meanwhile the name cannot be registered again, and a
//! lookup finds the entry of a holder that may be gone: opening its segment
//! then checks the process and the descriptor ([`crate::segment`]) and fails
//! cleanly, never maps other data.
//!
//! ```text
//! "PSI1" | locator | name_len u16 | name
//! ```
//!
//! One job per file: `directory.rs` makes and checks the per-user directory;
//! `entry.rs` is one entry's bytes, how it is read safely and how its holder is
//! judged; `registration.rs` publishes, looks up and withdraws a name;
//! `sweep.rs` lists the live names and removes the stale ones.

mod directory;
mod entry;
mod registration;
mod sweep;
#[cfg(test)]
mod tests;

pub use directory::directory;
pub use entry::decode;
pub use registration::{check_free, creation_lock, lookup, publish, withdraw, Claim, CreationLock};
pub use sweep::{live_names, sweep};

/// Prefix of the temporary files an entry is written to before it is linked.
const TEMP_PREFIX: &str = ".tmp.";
