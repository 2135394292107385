//! This process's view of the segments: one mapping per segment (shared by every
//! view of it), and the named segments this process registered (held until
//! released). Views hold `Arc<Segment>`; when the last one goes, the mapping is
//! unmapped and, in the owner, the segment unlinked.

use crate::error::Result;
use crate::segment::{Contents, Handover, Segment};
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

type Key = (PathBuf, String);

#[derive(Default)]
struct State {
    mappings: HashMap<Key, Weak<Segment>>,
    registered: HashMap<Key, Arc<Segment>>,
}

static STATE: Lazy<Mutex<State>> = Lazy::new(|| Mutex::new(State::default()));

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The mapping of `dir/name` in this process, mapping it on first use.
pub fn open(dir: &Path, name: &str) -> Result<Arc<Segment>> {
    let key = (dir.to_path_buf(), name.to_string());
    let known = state().mappings.get(&key).and_then(Weak::upgrade);
    // A name can be unlinked and created again (a re-registered variable): the
    // old mapping is only reused while the name still holds the same file.
    if let Some(seg) = known.filter(|s| s.is_current()) {
        return Ok(seg);
    }
    let seg = Arc::new(Segment::open(dir, name)?);
    let mut st = state();
    st.mappings.retain(|_, w| w.strong_count() > 0);
    st.mappings.insert(key, Arc::downgrade(&seg));
    Ok(seg)
}

/// Create a segment owned by this process and remember its mapping.
pub fn create(dir: &Path, name: &str, contents: Contents<'_>, fill: impl FnOnce(&mut [u8])) -> Result<Arc<Segment>> {
    Ok(remember(Arc::new(Segment::create(dir, name, contents, fill)?)))
}

/// A segment holding a copy of `data` ([`Segment::create_copy`], or with
/// `handover` [`Segment::create_copy_handing_over`]), remembered as mapped.
/// Returns it and the bytes handed over.
///
/// # Safety
/// With a handover, as for [`Segment::create_copy_handing_over`].
pub unsafe fn create_copy(
    dir: &Path,
    name: &str,
    contents: Contents<'_>,
    data: &[u8],
    phase: u64,
    handover: Option<Handover>,
) -> Result<(Arc<Segment>, usize)> {
    let (seg, handed) = match handover {
        // SAFETY: forwarded to the caller.
        Some(h) => unsafe { Segment::create_copy_handing_over(dir, name, contents, data, phase, h)? },
        None => (Segment::create_copy(dir, name, contents, data, phase)?, 0),
    };
    Ok((remember(Arc::new(seg)), handed))
}

fn remember(seg: Arc<Segment>) -> Arc<Segment> {
    let mut st = state();
    st.mappings.retain(|_, w| w.strong_count() > 0);
    st.mappings.insert((seg.dir().to_path_buf(), seg.name().to_string()), Arc::downgrade(&seg));
    seg
}

/// Keep a named segment alive until [`release`] (memshare's registerVariables).
pub fn hold(seg: Arc<Segment>) {
    state().registered.insert((seg.dir().to_path_buf(), seg.name().to_string()), seg);
}

/// Stop holding a registered segment and unlink its name now; views of it in any
/// process keep reading until they are dropped. Returns false if it was not held.
pub fn release(dir: &Path, name: &str) -> bool {
    let seg = state().registered.remove(&(dir.to_path_buf(), name.to_string()));
    match seg {
        Some(s) => {
            s.unlink();
            true
        }
        None => false,
    }
}

/// Names of the segments this process holds as registered, sorted.
pub fn held() -> Vec<String> {
    let mut v: Vec<String> = state().registered.keys().map(|(_, n)| n.clone()).collect();
    v.sort();
    v
}

/// Names of the segments this process currently maps, sorted.
pub fn mapped() -> Vec<String> {
    let mut v: Vec<String> =
        state().mappings.iter().filter(|(_, w)| w.strong_count() > 0).map(|(k, _)| k.1.clone()).collect();
    v.sort();
    v
}

/// How many mapped segments are no longer linked under their name (their owner
/// unlinked or replaced them): the pages of those stay alive only as long as
/// this process maps them, so it is worth collecting garbage views then.
pub fn stale() -> Vec<String> {
    let live: Vec<Arc<Segment>> = state().mappings.values().filter_map(Weak::upgrade).collect();
    live.iter().filter(|s| !s.is_current()).map(|s| s.name().to_string()).collect()
}

/// Release every registered segment (package unload).
pub fn release_all() -> usize {
    let all: Vec<Arc<Segment>> = state().registered.drain().map(|(_, s)| s).collect();
    for s in &all {
        s.unlink();
    }
    all.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Kind;
    use crate::naming;

    fn make(dir: &Path, name: &str) -> Arc<Segment> {
        create(dir, name, Contents { kind: Kind::Raw, length: 4, data_len: 4, attributes: b"" }, |d| {
            d.copy_from_slice(b"abcd")
        })
        .unwrap()
    }

    #[test]
    fn one_mapping_per_segment() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::anonymous().unwrap();
        let a = make(dir.path(), &name);
        let b = open(dir.path(), &name).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(mapped().contains(&name));
        drop((a, b));
        assert!(!dir.path().join(&name).exists());
    }

    #[test]
    fn held_segments_live_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::named("regtest", "v").unwrap();
        hold(make(dir.path(), &name));
        assert!(held().contains(&name));
        let view = open(dir.path(), &name).unwrap();
        assert!(release(dir.path(), &name));
        assert!(!dir.path().join(&name).exists());
        assert_eq!(view.data(), b"abcd"); // still mapped
        assert!(!release(dir.path(), &name));
    }

    #[test]
    fn a_mapping_whose_name_was_unlinked_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let name = naming::named("staletest", "v").unwrap();
        hold(make(dir.path(), &name));
        let view = open(dir.path(), &name).unwrap();
        assert!(!stale().contains(&name));
        assert!(release(dir.path(), &name)); // unlinked; `view` still maps it
        assert!(stale().contains(&name));
        drop(view);
        assert!(!stale().contains(&name));
    }
}
