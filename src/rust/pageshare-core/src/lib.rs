//! pageshare-core: the R-free half of pageshare.
//!
//! A *segment* is an anonymous memory file (memfd) holding one vector: a validated
//! [`header::Header`], an optional blob of serialized R attributes, and the element
//! data. Segments are created once by their owner, filled, sealed, then mapped
//! read-only by every process that reads them, found through a [`locator::Locator`].
//!
//! Modules, one responsibility each:
//! - [`os`]: every libc call (memfds and seals, free memory, descriptors, process identity).
//! - [`header`]: the segment header layout and its validation.
//! - [`naming`]: segment names (anonymous and namespace/variable) and owners.
//! - [`segment`]: create, fill, seal, open (checked) and release one segment.
//! - [`locator`]: where another process finds a segment, and what it checks.
//! - [`index`]: the per-user index entries of named (registered) segments.
//! - [`registry`]: this process's mappings and registered segments.
//! - [`handle`]: the few bytes a view serializes to inside a dispatch scope.
//! - [`strings`]: the packed layout of character vectors.
//! - [`content`]: content keys (a hash of what a vector holds).
//! - [`keys`]: keyed sharing (one copy per host, found by its key), for every front end.
//! - [`rserialize`]: the subset of R's serialization format that attribute blobs use.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod content;
pub mod cursor;
pub mod error;
pub mod handle;
pub mod header;
pub mod index;
pub mod keys;
pub mod locator;
pub mod naming;
pub mod os;
pub mod registry;
pub mod rserialize;
pub mod segment;
pub mod strings;

pub use error::{Error, Result};
