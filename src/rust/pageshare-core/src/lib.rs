//! pageshare-core: the R-free half of pageshare.
//!
//! A *segment* is a file in a tmpfs directory (POSIX shared memory, `/dev/shm` by
//! default) holding one vector: a validated [`header::Header`], an optional blob of
//! serialized R attributes, and the element data. Segments are created once by their
//! owner, filled, then mapped read-only by every process that reads them.
//!
//! Modules, one responsibility each:
//! - [`os`]: every libc call (free space, reservation, process identity, randomness).
//! - [`header`]: the segment header layout and its validation.
//! - [`naming`]: segment names (anonymous and namespace/variable) and owners.
//! - [`segment`]: create, fill, map and unlink one segment.
//! - [`registry`]: this process's mappings and owned segments.
//! - [`sweep`]: reclaiming segments whose owner process is dead.
//! - [`handle`]: the few bytes a view serializes to inside a dispatch scope.
//! - [`strings`]: the packed layout of character vectors.
//! - [`mutual_info`]: mutual information of features with a discrete response.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod error;
pub mod handle;
pub mod header;
pub mod mutual_info;
pub mod naming;
pub mod os;
pub mod registry;
pub mod segment;
pub mod strings;
pub mod sweep;

pub use error::{Error, Result};
