//! The only module that makes system calls: through rustix (safe, typed), and
//! through libc only where rustix lacks a call (DEVELOPING.md lists them).
//! Everything else stays portable Rust.
//!
//! One file per concern; everything is re-exported here, so callers write
//! `pageshare_core::os::name` whatever file `name` lives in:
//! - `space`: free space, reserving a memory file's pages, available memory;
//! - `process`: process identity, liveness, user, randomness;
//! - `memfd`: memory files, seals, descriptor placement and limits, locks;
//! - `pages`: page size, fault-free reads, prefixed private file mappings;
//! - `pagemap`: which pages of a range this process has written;
//! - `mappings`: which mappings cover a range of this process's memory;
//! - `futex`: parking on and waking a word in shared memory;
//! - `local_socket`: Unix-domain sockets, peer credentials, passing a descriptor;
//! - `glibc_page_handover`: everything that depends on glibc's malloc layout
//!   and replaces a live vector's pages (the page handover), alone and named.

mod futex;
mod glibc_page_handover;
mod local_socket;
mod mappings;
mod memfd;
mod pagemap;
mod pages;
mod process;
mod space;

pub use futex::*;
pub use glibc_page_handover::*;
pub use local_socket::*;
pub use memfd::*;
pub use pagemap::*;
pub use pages::*;
pub use process::*;
pub use space::*;
