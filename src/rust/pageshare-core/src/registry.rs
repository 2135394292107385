//! This process's view of the segments: one mapping per segment (shared by every
//! view of it, found again by the segment's token), and the named segments this
//! process registered (held, and published in the index, until released).
//! Views hold `Arc<Segment>`; when the last one goes, the mapping is unmapped
//! and, in the holder, the descriptor closed.

use crate::error::{Error, Result};
use crate::index;
use crate::locator::Locator;
use crate::segment::{Contents, Handover, Segment};
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The most bytes this process may hold in segments it made
/// (`pageshare.max_shared_bytes`); `u64::MAX` for no limit.
static BUDGET: AtomicU64 = AtomicU64::new(u64::MAX);

pub fn set_budget(bytes: u64) {
    BUDGET.store(bytes, Ordering::Relaxed);
}

/// Bytes of the segments this process holds.
pub fn held_bytes() -> u64 {
    live().iter().filter(|s| s.owned_here()).map(|s| s.total_size()).sum()
}

/// Refuse a new segment of about `needed` bytes that would exceed the budget.
fn check_budget(contents: &Contents<'_>) -> Result<()> {
    let budget = BUDGET.load(Ordering::Relaxed);
    if budget == u64::MAX {
        return Ok(());
    }
    within_budget(contents, held_bytes(), budget)
}

fn within_budget(contents: &Contents<'_>, held: u64, budget: u64) -> Result<()> {
    let needed = contents.data_len.saturating_add(contents.attributes.len() as u64).saturating_add(4096);
    if held.saturating_add(needed) > budget {
        return Err(crate::Error::OverBudget { needed, held, budget });
    }
    Ok(())
}

#[derive(Default)]
struct State {
    /// token -> (mapping, the [`mark`] at which this process created the
    /// segment; 0 for one it opened)
    mappings: HashMap<[u8; 16], (Weak<Segment>, u64)>,
    /// name -> (segment, index base it is published under, the lock that keeps
    /// its index entry alive)
    registered: HashMap<String, (Arc<Segment>, PathBuf, index::Claim)>,
}

static STATE: Lazy<Mutex<State>> = Lazy::new(|| Mutex::new(State::default()));

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The mapping of the segment `locator` points at, mapping it on first use
/// (received once: every handle of a segment gives the same mapping).
pub fn open(locator: &Locator, name: &str) -> Result<Arc<Segment>> {
    if let Some(seg) = state().mappings.get(&locator.token).and_then(|(w, _)| w.upgrade()) {
        return Ok(seg);
    }
    Ok(remember(Arc::new(Segment::open(locator, name)?), 0))
}

/// Create a segment held by this process and remember its mapping.
pub fn create(name: &str, contents: Contents<'_>, fill: impl FnOnce(&mut [u8])) -> Result<Arc<Segment>> {
    crate::os::check_segments_openable()?;
    check_budget(&contents)?;
    Ok(remember(Arc::new(Segment::create(name, contents, fill)?), next_mark()))
}

/// A segment holding a copy of `data` ([`Segment::create_copy`], or with
/// `handover` [`Segment::create_copy_handing_over`]), remembered as mapped.
/// Returns it and the bytes handed over.
///
/// # Safety
/// With a handover, as for [`Segment::create_copy_handing_over`].
pub unsafe fn create_copy(
    name: &str,
    contents: Contents<'_>,
    data: &[u8],
    phase: u64,
    handover: Option<Handover>,
) -> Result<(Arc<Segment>, usize)> {
    crate::os::check_segments_openable()?;
    check_budget(&contents)?;
    let (seg, handed) = match handover {
        // SAFETY: forwarded to the caller.
        Some(h) => unsafe { Segment::create_copy_handing_over(name, contents, data, phase, h)? },
        None => (Segment::create_copy(name, contents, data, phase)?, 0),
    };
    Ok((remember(Arc::new(seg), next_mark()), handed))
}

fn remember(seg: Arc<Segment>, made: u64) -> Arc<Segment> {
    let mut st = state();
    st.mappings.retain(|_, (w, _)| w.strong_count() > 0);
    st.mappings.insert(seg.token(), (Arc::downgrade(&seg), made));
    seg
}

/// Counts the segments this process creates (from 1).
static MADE: AtomicU64 = AtomicU64::new(1);

fn next_mark() -> u64 {
    MADE.fetch_add(1, Ordering::Relaxed)
}

/// A point in this process's creation of segments: [`release_made_since`]
/// undoes what was created after it (a front door that falls back to plain
/// serialization keeps nothing it shared on the way).
pub fn mark() -> u64 {
    MADE.load(Ordering::Relaxed)
}

/// Stop holding every segment this process created since `mark` (their
/// mappings go with the last view); returns how many.
pub fn release_made_since(mark: u64) -> usize {
    let made: Vec<Arc<Segment>> =
        state().mappings.values().filter(|(_, m)| *m >= mark).filter_map(|(w, _)| w.upgrade()).collect();
    let held: Vec<&Arc<Segment>> = made.iter().filter(|s| s.owned_here()).collect();
    for s in &held {
        s.release();
    }
    held.len()
}

/// Hold a named segment until [`release`] and publish it under its name in
/// the index under `base` (memshare's registerVariables).
pub fn register(base: &Path, seg: Arc<Segment>) -> Result<()> {
    let claim = index::publish(base, seg.name(), &seg.locator())?;
    state().registered.insert(seg.name().to_string(), (seg, base.to_path_buf(), claim));
    Ok(())
}

/// Hold `seg` (made here, or opened from another holder: this process then
/// opens a descriptor of its own) and publish it in the index under `base` as
/// `name` until [`release`]: a keyed object (see [`crate::naming::keyed`]),
/// findable while any of its holders lives.
pub fn hold_as(base: &Path, name: &str, seg: Arc<Segment>) -> Result<()> {
    seg.adopt()?;
    let claim = index::publish(base, name, &seg.locator())?;
    state().registered.insert(name.to_string(), (seg, base.to_path_buf(), claim));
    Ok(())
}

/// As [`hold_as`], for `seg` found through another holder with
/// [`open_registered_to_hold`]: this process holds it through `file`, the
/// descriptor opened before its contents were compared, so a holder that lets
/// go meanwhile changes nothing here.
pub fn hold_opened_as(base: &Path, name: &str, seg: Arc<Segment>, file: std::fs::File) -> Result<()> {
    seg.adopt_opened(file)?;
    let claim = index::publish(base, name, &seg.locator())?;
    state().registered.insert(name.to_string(), (seg, base.to_path_buf(), claim));
    Ok(())
}

/// The segment this process holds and publishes as `name`, if it does.
pub fn held_as(name: &str) -> Option<Arc<Segment>> {
    state().registered.get(name).map(|(s, _, _)| s.clone())
}

/// The names in the index under `base` that begin with `prefix` and whose
/// holder lives, sorted.
pub fn live_names_with_prefix(base: &Path, prefix: &str) -> Result<Vec<String>> {
    Ok(index::live_names(base)?.into_iter().filter(|n| n.starts_with(prefix)).collect())
}

/// The segment registered as `name` in the index under `base`, mapped. A
/// holder that is alive but whose segment cannot be opened from here is
/// [`Error::Unreachable`], never a missing name.
pub fn open_registered(base: &Path, name: &str) -> Result<Arc<Segment>> {
    let loc = index::lookup(base, name)?;
    match open(&loc, name) {
        Err(Error::Missing { .. }) => match index::lookup(base, name) {
            // still the same entry, and its holder still alive
            Ok(again) if again.token == loc.token => {
                Err(Error::Unreachable { name: name.to_string(), holder_pid: loc.pid })
            }
            Ok(_) => Err(Error::Missing { name: name.to_string() }),
            Err(e) => Err(e),
        },
        other => other,
    }
}

/// As [`open_registered`], with a descriptor of the segment opened at the same
/// time, to hold it with ([`hold_opened_as`]) once its contents are found to
/// be the ones wanted. A holder gone before the descriptor could be opened is
/// [`Error::Missing`].
pub fn open_registered_to_hold(base: &Path, name: &str) -> Result<(Arc<Segment>, std::fs::File)> {
    let loc = index::lookup(base, name)?;
    let file = match Segment::open_descriptor(&loc, name) {
        Err(Error::Missing { .. }) => {
            return match index::lookup(base, name) {
                Ok(again) if again.token == loc.token => {
                    Err(Error::Unreachable { name: name.to_string(), holder_pid: loc.pid })
                }
                Ok(_) => Err(Error::Missing { name: name.to_string() }),
                Err(e) => Err(e),
            }
        }
        other => other?,
    };
    if let Some(seg) = state().mappings.get(&loc.token).and_then(|(w, _)| w.upgrade()) {
        return Ok((seg, file));
    }
    let seg = remember(Arc::new(Segment::map_opened(&file, &loc, name)?), 0);
    Ok((seg, file))
}

/// Stop holding a registered segment and withdraw its index entry; views of it
/// in any process keep reading until they are dropped. Returns false if it was
/// not held. A forked child, which inherited the registration, withdraws
/// nothing: the entry is its parent's.
pub fn release(name: &str) -> bool {
    let entry = state().registered.remove(name);
    match entry {
        Some((s, base, claim)) => {
            if s.owned_here() {
                index::withdraw(&base, name, &s.token());
            }
            s.release();
            drop(claim); // only now may the entry be judged stale
            true
        }
        None => false,
    }
}

/// Names of the segments this process holds as registered, sorted.
pub fn held() -> Vec<String> {
    let mut v: Vec<String> = state().registered.keys().cloned().collect();
    v.sort();
    v
}

fn live() -> Vec<Arc<Segment>> {
    state().mappings.values().filter_map(|(w, _)| w.upgrade()).collect()
}

/// What [`details`] tells about a segment this process maps.
pub struct Details {
    pub name: String,
    pub kind: crate::header::Kind,
    pub length: u64,
    pub bytes: u64,
    pub owner_pid: u32,
    pub owned_here: bool,
    /// The views of it in this process (each holds the segment; a name
    /// registered here holds it too, and is not counted).
    pub views: usize,
}

/// The segments this process maps, sorted by name.
pub fn details() -> Vec<Details> {
    let st = state();
    let mut v: Vec<Details> = st
        .mappings
        .values()
        .filter_map(|(w, _)| w.upgrade())
        .map(|s| {
            let registered = st.registered.get(s.name()).is_some_and(|(r, _, _)| Arc::ptr_eq(r, &s));
            // (less the reference made here, and the registration's)
            let views = Arc::strong_count(&s).saturating_sub(1 + registered as usize);
            Details {
                name: s.name().to_string(),
                kind: s.header().kind,
                length: s.header().length,
                bytes: s.total_size(),
                owner_pid: s.owner().0,
                owned_here: s.owned_here(),
                views,
            }
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// The mapped segments no process holds any more (released, or their owner
/// exited): their pages stay alive only as long as this process maps them, so
/// it is worth collecting garbage views then.
pub fn stale() -> Vec<String> {
    live().iter().filter(|s| !s.is_current()).map(|s| s.name().to_string()).collect()
}

/// At a normal exit: withdraw the index entries of the names this process
/// registered (a forked child, which inherited them, withdraws nothing).
pub fn withdraw_at_exit() {
    let st = state();
    for (name, (seg, base, _)) in st.registered.iter() {
        if seg.owned_here() {
            index::withdraw(base, name, &seg.token());
        }
    }
}

/// Release every registered segment and stop holding every other one
/// (package unload). Mappings stay valid while views of them exist.
pub fn release_all() -> usize {
    let registered: Vec<String> = state().registered.keys().cloned().collect();
    let mut n = 0;
    for name in registered {
        n += release(&name) as usize;
    }
    for s in live() {
        if s.owned_here() {
            s.release();
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Kind;
    use crate::naming;

    fn make(name: &str) -> Arc<Segment> {
        create(name, Contents { kind: Kind::Raw, length: 4, data_len: 4, attributes: b"" }, |d| {
            d.copy_from_slice(b"abcd")
        })
        .unwrap()
    }

    #[test]
    fn the_budget_refuses_what_would_exceed_it() {
        // (The static budget itself is not set here: tests run in parallel.)
        let small = Contents { kind: Kind::Raw, length: 10, data_len: 10, attributes: b"" };
        assert!(within_budget(&small, 1000, 1000 + 4096 + 10).is_ok());
        let e = within_budget(&small, 1000, 1000 + 4096 + 9).unwrap_err();
        assert!(matches!(e, crate::Error::OverBudget { held: 1000, .. }), "{e}");
        assert!(e.to_string().contains("pageshare.max_shared_bytes"));
    }

    #[test]
    fn one_mapping_per_segment() {
        let name = naming::anonymous().unwrap();
        let a = make(&name);
        let b = open(&a.locator(), &name).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let listed = |name: &str| details().into_iter().find(|d| d.name == name);
        let d = listed(&name).expect("mapped");
        assert_eq!((d.views, d.owned_here, d.owner_pid, d.length), (2, true, std::process::id(), 4));
        drop((a, b));
        assert!(listed(&name).is_none());
    }

    #[test]
    fn registered_segments_live_until_released() {
        let base = tempfile::tempdir().unwrap();
        let name = naming::named("regtest", "v").unwrap();
        register(base.path(), make(&name)).unwrap();
        assert!(held().contains(&name));
        let loc = index::lookup(base.path(), &name).unwrap();
        let view = open(&loc, &name).unwrap();
        assert!(!stale().contains(&name));
        assert!(release(&name));
        assert!(index::lookup(base.path(), &name).is_err());
        assert!(stale().contains(&name)); // nobody holds it; `view` still maps it
        assert_eq!(view.data(), b"abcd");
        assert!(!release(&name));
        drop(view);
        assert!(!stale().contains(&name));
    }
}
