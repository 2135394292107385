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
use pageshare_core::content::{content_key, is_content_key, CONTENT_PREFIX};
use pageshare_core::index::CreationLock;
use pageshare_core::segment::Segment;
use pageshare_core::{index, naming, os, registry};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A key given by hand, checked: a content key only as this package makes them.
fn key_arg(key: SEXP) -> Result<String, RError> {
    let key = string_arg(key, "key")?;
    if key.starts_with(CONTENT_PREFIX) && !is_content_key(&key) {
        return Err(RError::argument(format!(
            "key '{key}' begins with '{CONTENT_PREFIX}', which only content keys do (see content_key())"
        )));
    }
    Ok(key)
}

/// Does `seg` hold these contents: exactly these bytes, or, for the content
/// key `key`, contents of that key (what `identical()` does not tell apart
/// may be written otherwise there: -0, a latin1 string)?
fn holds(
    seg: &Segment,
    key: &str,
    kind: pageshare_core::header::Kind,
    length: u64,
    attributes: &[u8],
    data: &[u8],
) -> bool {
    let h = seg.header();
    if h.kind != kind || h.length != length {
        return false;
    }
    (seg.attributes() == attributes && seg.data() == data)
        || (is_content_key(key) && content_key(h.kind, h.length, seg.attributes(), seg.data()) == key)
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

/// The holders' names of `key` in the index, this process's own left out.
fn other_holders(dir: &Path, key: &str, ours: &str) -> Result<Vec<String>, RError> {
    let prefix = naming::keyed_prefix(key).map_err(msg)?;
    Ok(registry::live_names_with_prefix(dir, &prefix).map_err(msg)?.into_iter().filter(|n| n != ours).collect())
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
        let ours = naming::keyed(&key, os::pid()).map_err(msg)?;
        // SAFETY: R holds blob (an argument).
        let attributes = unsafe { raw_or_empty(blob)? };
        // SAFETY: a .Call entry point: R's main thread; R holds x.
        let (kind, length, data) = unsafe { vector_contents(x)? };
        let content = is_content_key(&key);
        if content && content_key(kind, length, attributes, &data) != key {
            return Err(RError::argument(format!("`x` does not hold the contents of key '{key}'")));
        }
        if let Some(seg) = registry::held_as(&ours) {
            if holds(&seg, &key, kind, length, attributes, &data) {
                if release {
                    // SAFETY: R's main thread; x is alive and nothing writes it meanwhile.
                    unsafe { hand_over_onto(x, &data, &seg) };
                }
                // SAFETY: R's main thread; attrs a pairlist (from R).
                return unsafe { whole_view(seg, attrs) };
            }
            return Err(RError::new(
                ErrorKind::KeyConflict,
                format!("this process already shares other data under key '{key}'; release_key() it first, or use another key"),
            ));
        }
        // One process at a time decides for this key, until its own copy is
        // published. The wait for that ends at `wait` seconds (a holder may be
        // stopped, or slow) and at an interrupt (Ctrl-C): then the holders
        // there are already are asked all the same, and for a content key a
        // copy of our own is made (its contents are those of the key, whoever
        // publishes them); for a key given by hand that is an error naming the
        // process that holds the lock.
        let prefix = naming::keyed_prefix(&key).map_err(msg)?;
        // (capped: a deadline some years ahead is as good as none)
        let deadline = Instant::now() + Duration::from_secs_f64(wait.min(1e8));
        let mut busy = None;
        let _deciding = match index::creation_lock(&dir, &prefix, deadline, &mut r_calls::interrupted).map_err(msg)? {
            CreationLock::Taken(file) => {
                crate::faults::stop_in_key_lock_if_asked();
                Some(file)
            }
            CreationLock::Interrupted => return Err(RError::new(ErrorKind::Interrupted, "interrupted")),
            CreationLock::Busy { holder } => {
                busy = Some(holder);
                None
            }
        };
        for name in other_holders(&dir, &key, &ours)? {
            // (a holder whose segment cannot be opened from here, or that let
            // go of it meanwhile: another may do, or our own copy. The
            // descriptor is opened with the mapping, so a holder that lets go
            // after the comparison cannot take the segment away from us.)
            let Ok((seg, file)) = registry::open_registered_to_hold(&dir, &name) else { continue };
            if holds(&seg, &key, kind, length, attributes, &data) {
                registry::hold_opened_as(&dir, &ours, seg.clone(), file).map_err(msg)?;
                if release {
                    // SAFETY: R's main thread; x is alive and nothing writes it meanwhile.
                    unsafe { hand_over_onto(x, &data, &seg) };
                }
                // SAFETY: R's main thread; attrs a pairlist (from R).
                return unsafe { whole_view(seg, attrs) };
            }
            if !content {
                let pid = seg.owner().0;
                return Err(RError::new(
                    ErrorKind::KeyConflict,
                    format!("process {pid} shares other data under key '{key}'; use another key"),
                ));
            }
        }
        if let (Some(holder), false) = (busy, content) {
            return Err(key_busy(&key, holder, wait));
        }
        drop(data);
        let mut scope = Protect::new();
        // SAFETY: as above; the view is protected before anything allocates.
        let (view, _, seg) = unsafe { copy_into_segment(x, &ours, attributes, release)? };
        scope.protect(view)?;
        registry::hold_as(&dir, &ours, seg).map_err(msg)?;
        // SAFETY: `view` is fresh and protected; `attrs` a pairlist.
        unsafe { r_calls::set_attributes(view, attrs)? };
        Ok(view)
    })
}

/// The error of `share(x, key = )` whose key's creation lock `holder` still
/// held after `wait` seconds.
fn key_busy(key: &str, holder: Option<u32>, wait: f64) -> RError {
    let who = match holder {
        Some(pid) => {
            let state = match os::process_state(pid) {
                Some('T') => " (stopped: SIGSTOP or Ctrl-Z; `kill -CONT` it to let it go on)",
                Some('t') => " (stopped by a debugger)",
                Some('D') => " (waiting for the disk or memory)",
                _ => "",
            };
            format!("process {pid}{state}")
        }
        None => "another process".to_string(),
    };
    RError::new(
        ErrorKind::KeyBusy,
        format!(
            "{who} holds the lock of key '{key}' (it is sharing an object under that key) and kept it for the \
             {wait} seconds this process waits (option pageshare.key_wait); try again once it is done, wait longer \
             with options(pageshare.key_wait = ), or share under a content key (key = TRUE), where the wait ends \
             with a copy of this process's own"
        ),
    )
}

/// `shared_by_key(key)`: `list(view, attributes)` of the object some process
/// of this user shares under `key` (this process then holds it too). A content
/// key whose segment does not hash to it is an invalid segment, never data.
#[no_mangle]
pub extern "C" fn ps_retrieve_keyed_rs(key: SEXP, dir: SEXP) -> SEXP {
    entry(|| {
        let key = key_arg(key)?;
        let dir = dir_arg(dir)?;
        let ours = naming::keyed(&key, os::pid()).map_err(msg)?;
        let found = |seg: Arc<Segment>| -> Result<SEXP, RError> {
            let h = seg.header().clone();
            let mut scope = Protect::new();
            let blob = scope.protect(raw_vec(seg.attributes())?)?;
            // SAFETY: the whole segment.
            let view = scope.protect(unsafe { make_view(seg, h.kind, 0, h.length) }?)?;
            named_list(&[("view", view), ("attributes", blob)])
        };
        if let Some(seg) = registry::held_as(&ours) {
            return found(seg);
        }
        let mut failure = None;
        for name in other_holders(&dir, &key, &ours)? {
            let (seg, file) = match registry::open_registered_to_hold(&dir, &name) {
                Ok(found) => found,
                // (a holder that let go meanwhile: the next one, if any)
                Err(pageshare_core::Error::Missing { .. }) => continue,
                Err(e) => {
                    failure.get_or_insert_with(|| RError::from(e).context(&format!("key '{key}'")));
                    continue;
                }
            };
            let h = seg.header();
            if is_content_key(&key) && content_key(h.kind, h.length, seg.attributes(), seg.data()) != key {
                failure.get_or_insert_with(|| {
                    RError::invalid(format!(
                        "the segment published under key '{key}' by process {} does not hold those contents",
                        seg.owner().0
                    ))
                });
                continue;
            }
            registry::hold_opened_as(&dir, &ours, seg.clone(), file).map_err(msg)?;
            return found(seg);
        }
        Err(failure.unwrap_or_else(|| {
            RError::new(
                ErrorKind::NotRegistered,
                format!("no process of this user shares an object under key '{key}' (any more)"),
            )
        }))
    })
}

/// `release_key(key)`: stop holding the object shared or retrieved under
/// `key`; FALSE if this process held none.
#[no_mangle]
pub extern "C" fn ps_release_key_rs(key: SEXP) -> SEXP {
    entry(|| {
        let key = key_arg(key)?;
        let ours = naming::keyed(&key, os::pid()).map_err(msg)?;
        scalar_logical(registry::release(&ours) as i32)
    })
}
