//! Keyed sharing without R: one copy of a vector per host, found by its key by
//! any process of the same user (R's `share(x, key = )`, `shared_by_key()`,
//! `release_key()`, and the same verbs in Python).
//!
//! Every process that holds a keyed object publishes an index entry of its own
//! for it (`pageshare.k.<key>.<pid>`, see [`naming::keyed`]), so the object is
//! found, and its pages live, while any holder does. A process that shares
//! data under a key some holder already has, with the same contents byte for
//! byte, maps that holder's segment instead of making a copy. A content key
//! (`content:<hash>`) is checked against the segment's contents when it is
//! retrieved; a key given by hand is trusted as the index is: only processes of
//! this user can publish in it.
//!
//! The front ends (pageshare-r, the Python module) only turn their objects
//! into [`Wanted`] and segments back into theirs; the protocol is here, once.

use crate::content::{content_key, is_content_key, CONTENT_PREFIX};
use crate::header::Kind;
use crate::index::{self, CreationLock};
use crate::segment::Segment;
use crate::{naming, os, registry, Error};
use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What can go wrong with a key, by what the caller should do about it.
#[derive(Debug)]
pub enum KeyError {
    /// Other data are shared under the key (by this process or another).
    Conflict(String),
    /// Another process held the key's creation lock for the whole wait.
    Busy { key: String, holder: Option<u32>, wait: f64 },
    /// No live process of this user shares an object under the key.
    NotRegistered(String),
    /// The segment published under the key is not what the key says.
    Invalid(String),
    /// The caller's interrupt check said to stop waiting.
    Interrupted,
    /// An error of the core (with what was being done, if known).
    Core(Error, Option<String>),
}

impl From<Error> for KeyError {
    fn from(e: Error) -> KeyError {
        KeyError::Core(e, None)
    }
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::Conflict(m) | KeyError::NotRegistered(m) | KeyError::Invalid(m) => f.write_str(m),
            KeyError::Busy { key, holder, wait } => write!(
                f,
                "{} holds the lock of key '{key}' (it is sharing an object under that key) and kept it for the {wait} \
                 seconds this process waits",
                describe_holder(*holder)
            ),
            KeyError::Interrupted => f.write_str("interrupted"),
            KeyError::Core(e, None) => write!(f, "{e}"),
            KeyError::Core(e, Some(c)) => write!(f, "{c}: {e}"),
        }
    }
}

/// "process <pid>" with what the kernel says of its state, for [`KeyError::Busy`].
pub fn describe_holder(holder: Option<u32>) -> String {
    match holder {
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
    }
}

/// A key given by hand, checked: a content key only as this package makes them.
pub fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::Argument("a key must be a non-empty string".into()));
    }
    if key.starts_with(CONTENT_PREFIX) && !is_content_key(key) {
        return Err(Error::Argument(format!(
            "key '{key}' begins with '{CONTENT_PREFIX}', which only content keys do (see content_key())"
        )));
    }
    Ok(())
}

/// The contents a caller wants to share: what a segment of them holds.
pub struct Wanted<'a> {
    pub kind: Kind,
    pub length: u64,
    /// The serialized R attributes, as the segment stores them.
    pub attributes: &'a [u8],
    /// The data bytes (packed strings for character vectors). Dropped before
    /// a copy is made, so that an owned buffer does not stay alive meanwhile.
    pub data: Cow<'a, [u8]>,
}

impl Wanted<'_> {
    /// Does `seg` hold these contents: exactly these bytes, or, for the content
    /// key `key`, contents of that key (what `identical()` does not tell apart
    /// may be written otherwise there: -0, a latin1 string)?
    pub fn held_by(&self, seg: &Segment, key: &str) -> bool {
        let h = seg.header();
        if h.kind != self.kind || h.length != self.length {
            return false;
        }
        (seg.attributes() == self.attributes && seg.data() == &self.data[..])
            || (is_content_key(key) && content_key(h.kind, h.length, seg.attributes(), seg.data()) == key)
    }
}

/// What [`share`] came to.
pub enum Shared<T> {
    /// A segment some holder (maybe this process) already has with these
    /// contents: this process now holds it too.
    Existing(Arc<Segment>),
    /// The caller's own copy (what `make` returned), now held and published.
    Made(T),
}

/// The holders' names of `key` in the index, this process's own left out.
fn other_holders(dir: &Path, key: &str, ours: &str) -> Result<Vec<String>, Error> {
    let prefix = naming::keyed_prefix(key)?;
    Ok(registry::live_names_with_prefix(dir, &prefix)?.into_iter().filter(|n| n != ours).collect())
}

/// Share `wanted` under `key` in the index under `dir`: the segment a holder of
/// `key` has with exactly these contents (this process then holds it too), or a
/// new segment, made by `make(name)` and then published under `key`.
///
/// One process at a time decides for a key, until its own copy is published.
/// The wait for that ends after `wait` seconds (a holder may be stopped, or
/// slow) and when `interrupted()` says so: then the holders there are already
/// are asked all the same, and for a content key a copy of our own is made (its
/// contents are those of the key, whoever publishes them); for a key given by
/// hand that is [`KeyError::Busy`], naming the process that holds the lock.
/// `on_locked()` is called once the lock is taken (fault injection in tests).
pub fn share<T, E: From<KeyError>>(
    dir: &Path,
    key: &str,
    wanted: Wanted<'_>,
    wait: f64,
    interrupted: &mut dyn FnMut() -> bool,
    on_locked: &mut dyn FnMut(),
    make: impl FnOnce(&str) -> Result<(T, Arc<Segment>), E>,
) -> Result<Shared<T>, E> {
    let core = |e: Error| E::from(KeyError::from(e));
    check_key(key).map_err(core)?;
    let ours = naming::keyed(key, os::pid()).map_err(core)?;
    let content = is_content_key(key);
    if content && content_key(wanted.kind, wanted.length, wanted.attributes, &wanted.data) != key {
        return Err(core(Error::Argument(format!("the data do not hold the contents of key '{key}'"))));
    }
    if let Some(seg) = registry::held_as(&ours) {
        if wanted.held_by(&seg, key) {
            return Ok(Shared::Existing(seg));
        }
        return Err(E::from(KeyError::Conflict(format!(
            "this process already shares other data under key '{key}'; release_key() it first, or use another key"
        ))));
    }
    let prefix = naming::keyed_prefix(key).map_err(core)?;
    // (capped: a deadline some years ahead is as good as none)
    let deadline = Instant::now() + Duration::from_secs_f64(wait.clamp(0.0, 1e8));
    let mut busy = None;
    let _deciding = match index::creation_lock(dir, &prefix, deadline, interrupted).map_err(core)? {
        CreationLock::Taken(file) => {
            on_locked();
            Some(file)
        }
        CreationLock::Interrupted => return Err(E::from(KeyError::Interrupted)),
        CreationLock::Busy { holder } => {
            busy = Some(holder);
            None
        }
    };
    for name in other_holders(dir, key, &ours).map_err(core)? {
        // (a holder whose segment cannot be opened from here, or that let go
        // of it meanwhile: another may do, or our own copy. The descriptor is
        // opened with the mapping, so a holder that lets go after the
        // comparison cannot take the segment away from us.)
        let Ok((seg, file)) = registry::open_registered_to_hold(dir, &name) else { continue };
        if wanted.held_by(&seg, key) {
            registry::hold_opened_as(dir, &ours, seg.clone(), file).map_err(core)?;
            return Ok(Shared::Existing(seg));
        }
        if !content {
            let pid = seg.owner().0;
            return Err(E::from(KeyError::Conflict(format!(
                "process {pid} shares other data under key '{key}'; use another key"
            ))));
        }
    }
    if let (Some(holder), false) = (busy, content) {
        return Err(E::from(KeyError::Busy { key: key.to_string(), holder, wait }));
    }
    drop(wanted);
    let (made, seg) = make(&ours)?;
    registry::hold_as(dir, &ours, seg).map_err(core)?;
    Ok(Shared::Made(made))
}

/// The segment some process of this user shares under `key` (this process
/// then holds it too). A content key whose segment does not hash to it is an
/// invalid segment, never data.
pub fn retrieve(dir: &Path, key: &str) -> Result<Arc<Segment>, KeyError> {
    check_key(key)?;
    let ours = naming::keyed(key, os::pid())?;
    if let Some(seg) = registry::held_as(&ours) {
        return Ok(seg);
    }
    let mut failure = None;
    for name in other_holders(dir, key, &ours)? {
        let (seg, file) = match registry::open_registered_to_hold(dir, &name) {
            Ok(found) => found,
            // (a holder that let go meanwhile: the next one, if any)
            Err(Error::Missing { .. }) => continue,
            Err(e) => {
                failure.get_or_insert(KeyError::Core(e, Some(format!("key '{key}'"))));
                continue;
            }
        };
        let h = seg.header();
        if is_content_key(key) && content_key(h.kind, h.length, seg.attributes(), seg.data()) != key {
            failure.get_or_insert_with(|| {
                KeyError::Invalid(format!(
                    "the segment published under key '{key}' by process {} does not hold those contents",
                    seg.owner().0
                ))
            });
            continue;
        }
        registry::hold_opened_as(dir, &ours, seg.clone(), file)?;
        return Ok(seg);
    }
    Err(failure.unwrap_or_else(|| {
        KeyError::NotRegistered(format!("no process of this user shares an object under key '{key}' (any more)"))
    }))
}

/// The attribute that marks a key's segment as a list's (a data frame's)
/// column keys: a character vector of its elements' content keys, with the
/// list's attributes and this one (R/keys.R and the Python module write and
/// read it alike).
pub const COLUMNS_MARK: &str = "pageshare.columns";

/// The element keys of a list shared under a key (see [`COLUMNS_MARK`]);
/// None for any other segment.
pub fn column_keys(seg: &Segment) -> Option<Vec<String>> {
    if seg.header().kind != Kind::Character {
        return None;
    }
    let attrs = crate::rserialize::decode_attributes(seg.attributes()).ok()?;
    if !attrs.iter().any(|(n, _)| n == COLUMNS_MARK) {
        return None;
    }
    let table = seg.strings();
    Some((0..table.len()).filter_map(|i| table.get(i)).map(|(b, _)| String::from_utf8_lossy(b).into_owned()).collect())
}

/// Stop holding the object shared or retrieved under `key` in this process
/// (for a list's key, its elements' content keys too); false if it held
/// none. Mappings of it stay valid until they are dropped.
pub fn release(key: &str) -> Result<bool, Error> {
    check_key(key)?;
    let name = naming::keyed(key, os::pid())?;
    let columns = registry::held_as(&name).and_then(|seg| column_keys(&seg));
    let released = registry::release(&name);
    for column in columns.into_iter().flatten().filter(|k| is_content_key(k)) {
        registry::release(&naming::keyed(&column, os::pid())?);
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Contents;

    fn wanted(data: &[u8]) -> Wanted<'_> {
        Wanted { kind: Kind::Raw, length: data.len() as u64, attributes: b"", data: Cow::Borrowed(data) }
    }

    fn make(name: &str, data: &[u8]) -> Result<((), Arc<Segment>), KeyError> {
        let contents =
            Contents { kind: Kind::Raw, length: data.len() as u64, data_len: data.len() as u64, attributes: b"" };
        Ok(((), registry::create(name, contents, |d| d.copy_from_slice(data))?))
    }

    #[test]
    fn share_retrieve_release() {
        let dir = tempfile::tempdir().unwrap();
        let key = "keys-test-share";
        let got =
            share(dir.path(), key, wanted(b"abcd"), 1.0, &mut || false, &mut || {}, |n| make(n, b"abcd")).unwrap();
        assert!(matches!(got, Shared::Made(())));
        // the same contents again: the segment held already
        let again =
            share(dir.path(), key, wanted(b"abcd"), 1.0, &mut || false, &mut || {}, |n| make(n, b"abcd")).unwrap();
        assert!(matches!(again, Shared::Existing(_)));
        // other contents: a conflict
        let other = share(dir.path(), key, wanted(b"abce"), 1.0, &mut || false, &mut || {}, |n| make(n, b"abce"));
        assert!(matches!(other, Err(KeyError::Conflict(_))));
        assert_eq!(retrieve(dir.path(), key).unwrap().data(), b"abcd");
        assert!(release(key).unwrap());
        assert!(!release(key).unwrap());
        assert!(matches!(retrieve(dir.path(), key), Err(KeyError::NotRegistered(_))));
    }

    #[test]
    fn content_keys_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_key("content:xyz").is_err());
        assert!(check_key("").is_err());
        let key = content_key(Kind::Raw, 4, b"", b"wxyz");
        let wrong = share(dir.path(), &key, wanted(b"wxyq"), 1.0, &mut || false, &mut || {}, |n| make(n, b"wxyq"));
        assert!(matches!(wrong, Err(KeyError::Core(Error::Argument(_), _))));
        let got =
            share(dir.path(), &key, wanted(b"wxyz"), 1.0, &mut || false, &mut || {}, |n| make(n, b"wxyz")).unwrap();
        assert!(matches!(got, Shared::Made(())));
        assert!(release(&key).unwrap());
    }
}
