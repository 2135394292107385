#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points of keyed sharing (`share(x, key = )`,
//! `shared_by_key()`, `release_key()`, `content_key()`: R/keys.R): one copy
//! of an object per host, found by its key by any process of the same user.
//!
//! Every process that holds a keyed object publishes an index entry of its own
//! for it (`pageshare.k.<key>.<pid>`, see pageshare_core::naming::keyed), so
//! the object is found, and its pages live, while any holder does. A process
//! that shares data under a key some holder already has, with the same
//! contents byte for byte, maps that holder's segment instead of making a copy.
//! A content key (`content:<hash>`) is checked against the segment's contents
//! when it is retrieved; a key given by hand is trusted as the index is: only
//! processes of this user can publish in it.

use crate::args::{dir_arg, doubles_arg, flag_arg, raw_or_empty, string_arg};
use crate::boundary::{entry, msg, ErrorKind, RError};
use crate::r_calls::{self, named_list, raw_vec, scalar_logical, Protect};
use crate::r_sys::*;
use crate::share_pipeline::{copy_into_segment, vector_contents};
use crate::source_pages;
use crate::view::make_view;
use pageshare_core::content::content_key;
use pageshare_core::keys::{self, KeyError, Shared, Wanted};
use pageshare_core::segment::Segment;
use std::sync::Arc;

/// A key given by hand, checked: a content key only as this package makes them.
fn key_arg(key: SEXP) -> Result<String, RError> {
    let key = string_arg(key, "key")?;
    keys::check_key(&key).map_err(|e| RError::argument(e.to_string()))?;
    Ok(key)
}

impl From<KeyError> for RError {
    fn from(e: KeyError) -> RError {
        match e {
            KeyError::Conflict(m) => RError::new(ErrorKind::KeyConflict, m),
            KeyError::NotRegistered(m) => RError::new(ErrorKind::NotRegistered, m),
            KeyError::Invalid(m) => RError::invalid(m),
            KeyError::Interrupted => RError::new(ErrorKind::Interrupted, "interrupted"),
            busy @ KeyError::Busy { .. } => RError::new(
                ErrorKind::KeyBusy,
                format!(
                    "{busy} (option pageshare.key_wait); try again once it is done, wait longer with \
                     options(pageshare.key_wait = ), or share under a content key (key = TRUE), where the wait \
                     ends with a copy of this process's own"
                ),
            ),
            KeyError::Core(e, None) => RError::from(e),
            KeyError::Core(e, Some(c)) => RError::from(e).context(&c),
        }
    }
}

/// A view of the whole of `seg` with the R attributes `attrs`.
///
/// # Safety
/// Main R thread; `attrs` a pairlist or R_NilValue.
unsafe fn whole_view(seg: Arc<Segment>, attrs: SEXP) -> Result<SEXP, RError> {
    let h = seg.header().clone();
    let mut scope = Protect::new();
    // SAFETY: the whole segment; `view` is protected before anything allocates.
    let view = scope.protect(unsafe { make_view(seg, h.kind, 0, h.length) }?)?;
    // SAFETY: as the caller promised.
    unsafe { r_calls::set_attributes(view, attrs)? };
    Ok(view)
}

/// x's own pages handed over to `seg`, which holds the same data (see
/// `Segment::hand_over_onto`): the copy x holds stops taking memory. Where
/// that cannot be done (a vector not in a block of its own, another malloc,
/// strings), x keeps its pages.
///
/// # Safety
/// Main R thread; `data` is x's data (as vector_contents gives it).
unsafe fn hand_over_onto(x: SEXP, data: &[u8], seg: &Segment) {
    // SAFETY: x is a live vector read through R's API.
    if unsafe { ALTREP(x) } != 0 || seg.header().kind == pageshare_core::header::Kind::Character {
        return;
    }
    // SAFETY: as above: a plain numeric vector of data.len() bytes.
    if let Some(h) = unsafe { source_pages::handover(x, data.len()) } {
        // SAFETY: handover() checked that the pages are x's own block; R is
        // single-threaded, so nothing writes them meanwhile.
        let _ = unsafe { seg.hand_over_onto(data, h) };
    }
}

/// `content_key(x)`: the content key of the vector `x` with serialized
/// attributes `blob`.
#[no_mangle]
pub extern "C" fn ps_content_key_rs(x: SEXP, blob: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: a .Call entry point: R's main thread; R holds x and blob.
        let (kind, length, data) = unsafe { vector_contents(x)? };
        // SAFETY: as above.
        let key = content_key(kind, length, unsafe { raw_or_empty(blob)? }, &data);
        r_calls::strings(&[key])
    })
}

/// `share(x, key = )` for one vector: a view of the segment a holder of `key`
/// has with exactly x's contents (this process then holds it too), or of a
/// new segment holding x, published under `key`.
#[no_mangle]
pub extern "C" fn ps_share_keyed_rs(
    x: SEXP,
    attrs: SEXP,
    blob: SEXP,
    key: SEXP,
    dir: SEXP,
    release_source: SEXP,
    wait: SEXP,
) -> SEXP {
    entry(|| {
        let key = key_arg(key)?;
        let dir = dir_arg(dir)?;
        let release = flag_arg(release_source)?;
        let wait = match doubles_arg(wait, "wait")?[..] {
            [w] if w >= 0.0 => w,
            _ => return Err(RError::argument("`wait` must be a number of seconds >= 0")),
        };
        // SAFETY: R holds blob (an argument).
        let attributes = unsafe { raw_or_empty(blob)? };
        // SAFETY: a .Call entry point: R's main thread; R holds x.
        let (kind, length, data) = unsafe { vector_contents(x)? };
        // (x's own data, borrowed, are what a handover gives up; packed
        // strings are not handed over)
        let source: Option<&'static [u8]> = match &data {
            std::borrow::Cow::Borrowed(d) => Some(d),
            std::borrow::Cow::Owned(_) => None,
        };
        let wanted = Wanted { kind, length, attributes, data };
        let mut scope = Protect::new();
        let shared = keys::share(
            &dir,
            &key,
            wanted,
            wait,
            &mut r_calls::interrupted,
            &mut crate::faults::stop_in_key_lock_if_asked,
            |name| -> Result<(SEXP, Arc<Segment>), RError> {
                // SAFETY: as above; the view is protected before anything allocates.
                let (view, _, seg) = unsafe { copy_into_segment(x, name, attributes, release)? };
                scope.protect(view)?;
                Ok((view, seg))
            },
        )?;
        match shared {
            Shared::Existing(seg) => {
                if let (true, Some(data)) = (release, source) {
                    // SAFETY: R's main thread; x is alive and nothing writes it meanwhile.
                    unsafe { hand_over_onto(x, data, &seg) };
                }
                // SAFETY: R's main thread; attrs a pairlist (from R).
                unsafe { whole_view(seg, attrs) }
            }
            Shared::Made(view) => {
                // SAFETY: `view` is fresh and protected; `attrs` a pairlist.
                unsafe { r_calls::set_attributes(view, attrs)? };
                Ok(view)
            }
        }
    })
}

/// `shared_by_key(key)`: `list(view, attributes)` of the object some process
/// of this user shares under `key` (this process then holds it too). A content
/// key whose segment does not hash to it is an invalid segment, never data.
#[no_mangle]
pub extern "C" fn ps_retrieve_keyed_rs(key: SEXP, dir: SEXP) -> SEXP {
    entry(|| {
        let key = key_arg(key)?;
        let dir = dir_arg(dir)?;
        let seg = keys::retrieve(&dir, &key)?;
        let h = seg.header().clone();
        let mut scope = Protect::new();
        let blob = scope.protect(raw_vec(seg.attributes())?)?;
        // SAFETY: the whole segment.
        let view = scope.protect(unsafe { make_view(seg, h.kind, 0, h.length) }?)?;
        named_list(&[("view", view), ("attributes", blob)])
    })
}

/// `release_key(key)`: stop holding the object shared or retrieved under
/// `key`; FALSE if this process held none.
#[no_mangle]
pub extern "C" fn ps_release_key_rs(key: SEXP) -> SEXP {
    entry(|| {
        let key = key_arg(key)?;
        scalar_logical(keys::release(&key).map_err(msg)? as i32)
    })
}
