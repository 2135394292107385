//! Index entries: how memshare's API (`registerVariables()`, `retrieveViews()`)
//! finds a segment by namespace and variable name, from any process of the same
//! user. Segments themselves have no names; an entry is a small file
//! `<base>/pageshare-<uid>/<segment name>` holding the [`Locator`] of the
//! registering process's descriptor.
//!
//! The directory is made mode 0700 and checked (a real directory, this user's,
//! closed to others) before every use, so another user can neither squat a name
//! nor redirect one. Every entry is opened without following links and without
//! blocking, and used only if it is a small regular file of this user closed to
//! others. An entry whose process is gone (kill -9) is stale: the next lookup
//! or [`sweep`] removes it; nothing else can be left behind.
//!
//! ```text
//! "PSI1" | locator | name_len u16 | name
//! ```

use crate::error::{Error, Result};
use crate::locator::{self, hex, Locator};
use crate::{naming, os, segment};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 4] = b"PSI1";
/// No entry is larger (a locator and a name of at most 255 bytes).
const MAX_ENTRY: u64 = 512;
/// Prefix of the temporary files an entry is written to before it is linked.
const TEMP_PREFIX: &str = ".tmp.";
/// Age after which a temporary file of a dead writer is removed.
const ABANDONED_AFTER: Duration = Duration::from_secs(60);

/// The per-user index directory under `base`, created (0700) if missing.
pub fn directory(base: &Path) -> Result<PathBuf> {
    let dir = base.join(format!("pageshare-{}", os::euid()));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::os(format!("cannot create the index directory {}", dir.display()), e)),
    }
    check_directory(&dir)?;
    Ok(dir)
}

/// The index directory under `base` if it exists and is safe, else `None`
/// (nothing to read there).
fn existing_directory(base: &Path) -> Result<Option<PathBuf>> {
    let dir = base.join(format!("pageshare-{}", os::euid()));
    match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => check_directory(&dir).map(|()| Some(dir)),
    }
}

fn check_directory(dir: &Path) -> Result<()> {
    let unsafe_dir = |why: String| Error::Unsafe { path: dir.display().to_string(), why };
    let m = std::fs::symlink_metadata(dir).map_err(|e| Error::os(format!("cannot inspect {}", dir.display()), e))?;
    if !m.file_type().is_dir() {
        return Err(unsafe_dir("it is not a directory (a link or a file is in its place)".into()));
    }
    if m.uid() != os::euid() {
        return Err(unsafe_dir(format!("it belongs to user {}, not to this process's user {}", m.uid(), os::euid())));
    }
    if m.permissions().mode() & 0o077 != 0 {
        return Err(unsafe_dir(format!("its mode is {:o}: other users could change it", m.permissions().mode() & 0o777)));
    }
    Ok(())
}

fn encode(loc: &Locator, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + locator::ENCODED_LEN + name.len());
    b.extend_from_slice(MAGIC);
    loc.encode_into(&mut b);
    b.extend_from_slice(&(name.len() as u16).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// Decode an entry's bytes; `None` for anything that is not one.
pub fn decode(b: &[u8]) -> Option<(Locator, String)> {
    let rest = b.strip_prefix(MAGIC)?;
    let loc = Locator::decode(rest.get(..locator::ENCODED_LEN)?)?;
    let rest = &rest[locator::ENCODED_LEN..];
    let n = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(rest.get(2..)?).ok()?;
    (name.len() == n && naming::validate(name).is_ok()).then(|| (loc, name.to_string()))
}

/// What reading one entry found.
enum Entry {
    Absent,
    /// Not a usable entry (a link, a FIFO, a directory, a device, another
    /// user's file, one open to others, or bytes that do not decode).
    Unusable(String),
    Found(Locator),
}

fn read_entry(path: &Path, name: &str) -> Entry {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Absent,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Entry::Unusable("it is a symbolic link".into()),
        Err(e) => return Entry::Unusable(format!("it cannot be opened ({e})")),
    };
    let Ok(m) = file.metadata() else { return Entry::Unusable("it cannot be inspected".into()) };
    if !m.file_type().is_file() {
        return Entry::Unusable("it is not a regular file".into());
    }
    if m.uid() != os::euid() || m.permissions().mode() & 0o077 != 0 {
        return Entry::Unusable(format!("it belongs to user {} with mode {:o}", m.uid(), m.permissions().mode() & 0o777));
    }
    if m.len() > MAX_ENTRY {
        return Entry::Unusable(format!("it has {} bytes, more than an entry", m.len()));
    }
    let mut b = Vec::new();
    if file.take(MAX_ENTRY).read_to_end(&mut b).is_err() {
        return Entry::Unusable("it cannot be read".into());
    }
    match decode(&b) {
        Some((loc, n)) if n == name => Entry::Found(loc),
        _ => Entry::Unusable("it is not a pageshare index entry for this name".into()),
    }
}

/// Publish `name` -> `loc`. Fails with [`Error::Taken`] if a live process holds
/// the name, and replaces a stale entry (its process is gone).
pub fn publish(base: &Path, name: &str, loc: &Locator) -> Result<()> {
    naming::validate(name)?;
    let dir = directory(base)?;
    let temp = dir.join(format!("{TEMP_PREFIX}{}.{}", os::pid(), hex(&os::random_bytes(8)?)));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temp)
        .and_then(|mut f| f.write_all(&encode(loc, name)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(Error::os(format!("cannot write an index entry in {}", dir.display()), e));
    }
    let path = dir.join(name);
    let mut result = Ok(());
    for attempt in 0..2 {
        // link() is atomic and never replaces: two processes registering the
        // same name cannot both succeed.
        match std::fs::hard_link(&temp, &path) {
            Ok(()) => {
                result = Ok(());
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                result = match read_entry(&path, name) {
                    Entry::Found(other) if segment::is_held(&other) => Err(taken(name, other.pid)),
                    // stale (its holder is gone) or unusable in our own directory: replace it
                    _ if attempt == 0 => {
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    _ => Err(taken(name, 0)),
                };
                break;
            }
            Err(e) => {
                result = Err(Error::os(format!("cannot publish {name} in {}", dir.display()), e));
                break;
            }
        }
    }
    let _ = std::fs::remove_file(&temp);
    result
}

fn taken(name: &str, holder_pid: u32) -> Error {
    match naming::parse_named(name) {
        Some((namespace, variable)) => Error::Taken { namespace, variable, holder_pid },
        None => Error::Argument(format!("segment name {name} is already in use")),
    }
}

/// The locator published under `name`, if a live process holds it. A stale
/// entry is removed; an entry that cannot be trusted is an error naming it.
pub fn lookup(base: &Path, name: &str) -> Result<Locator> {
    naming::validate(name)?;
    let missing = || Error::Missing { name: name.to_string() };
    let Some(dir) = existing_directory(base)? else { return Err(missing()) };
    let path = dir.join(name);
    match read_entry(&path, name) {
        Entry::Absent => Err(missing()),
        Entry::Unusable(why) => Err(Error::Unsafe { path: path.display().to_string(), why }),
        Entry::Found(loc) if segment::is_held(&loc) => Ok(loc),
        Entry::Found(_) => {
            remove_if_unchanged(&path, name);
            Err(missing())
        }
    }
}

/// Is `name` free to register (no live process holds it)?
pub fn check_free(base: &Path, name: &str) -> Result<()> {
    match lookup(base, name) {
        Ok(loc) => Err(taken(name, loc.pid)),
        Err(Error::Missing { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Remove the entry `name` if it still points at the segment with `token`
/// (release by its holder). Returns whether it was removed.
pub fn withdraw(base: &Path, name: &str, token: &[u8; 16]) -> bool {
    let Ok(Some(dir)) = existing_directory(base) else { return false };
    let path = dir.join(name);
    match read_entry(&path, name) {
        Entry::Found(loc) if &loc.token == token => std::fs::remove_file(&path).is_ok(),
        _ => false,
    }
}

/// A stale entry is removed only if it is still the one judged stale (another
/// process may have replaced it meanwhile).
fn remove_if_unchanged(path: &Path, name: &str) {
    if let Entry::Found(loc) = read_entry(path, name) {
        if !segment::is_held(&loc) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Names of the entries whose segment a live process holds, sorted. Entries
/// that cannot be trusted are skipped.
pub fn live_names(base: &Path) -> Result<Vec<String>> {
    let Some(dir) = existing_directory(base)? else { return Ok(Vec::new()) };
    let mut out: Vec<String> = list(&dir)?
        .into_iter()
        .filter(|n| matches!(read_entry(&dir.join(n), n), Entry::Found(l) if segment::is_held(&l)))
        .collect();
    out.sort();
    Ok(out)
}

fn list(dir: &Path) -> Result<Vec<String>> {
    Ok(std::fs::read_dir(dir)
        .map_err(|e| Error::os(format!("cannot list {}", dir.display()), e))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| naming::is_ours(n) || n.starts_with(TEMP_PREFIX))
        .collect())
}

/// Remove the stale entries (their process is gone) and abandoned temporary
/// files; returns the names removed, sorted. Entries that cannot be trusted
/// are left alone.
pub fn sweep(base: &Path) -> Result<Vec<String>> {
    let Some(dir) = existing_directory(base)? else { return Ok(Vec::new()) };
    let mut removed = Vec::new();
    for name in list(&dir)? {
        let path = dir.join(&name);
        let doomed = if name.starts_with(TEMP_PREFIX) {
            abandoned(&path, &name)
        } else {
            matches!(read_entry(&path, &name), Entry::Found(l) if !segment::is_held(&l))
        };
        if doomed && std::fs::remove_file(&path).is_ok() && !name.starts_with(TEMP_PREFIX) {
            removed.push(name);
        }
    }
    removed.sort();
    Ok(removed)
}

/// A temporary file whose writer is dead and that is old enough.
fn abandoned(path: &Path, name: &str) -> bool {
    let writer = name[TEMP_PREFIX.len()..].split('.').next().and_then(|p| p.parse::<u32>().ok());
    let alive = writer.is_some_and(|p| os::start_time(p).is_some());
    let Ok(m) = std::fs::symlink_metadata(path) else { return false };
    let age = m.modified().ok().and_then(|t| SystemTime::now().duration_since(t).ok());
    !alive && m.file_type().is_file() && age.is_some_and(|a| a > ABANDONED_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Kind;
    use crate::segment::{Contents, Segment};
    use proptest::prelude::*;

    fn segment() -> Segment {
        Segment::create(
            &naming::anonymous().unwrap(),
            Contents { kind: Kind::Raw, length: 4, data_len: 4, attributes: b"" },
            |d| d.copy_from_slice(b"abcd"),
        )
        .unwrap()
    }

    proptest! {
        #[test]
        fn entries_round_trip(pid in 1u32.., fd in 0i32.., token: [u8; 16], ns in "\\PC{1,12}", var in "\\PC{1,12}") {
            let name = naming::named(&ns, &var).unwrap();
            let loc = Locator { pid, start: 1, fd, dev: 2, ino: 3, size: 4, token };
            prop_assert_eq!(decode(&encode(&loc, &name)), Some((loc, name)));
        }
        #[test]
        fn any_bytes_decode_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }
    }

    #[test]
    fn publish_lookup_withdraw() {
        let base = tempfile::tempdir().unwrap();
        let name = naming::named("ns", "x").unwrap();
        let s = segment();
        publish(base.path(), &name, &s.locator()).unwrap();
        let dir = base.path().join(format!("pageshare-{}", os::euid()));
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
        assert_eq!(live_names(base.path()).unwrap(), vec![name.clone()]);
        // a second registration of a held name names the holder
        let e = publish(base.path(), &name, &segment().locator()).unwrap_err();
        assert!(matches!(e, Error::Taken { holder_pid, .. } if holder_pid == os::pid()), "{e}");
        assert!(matches!(check_free(base.path(), &name), Err(Error::Taken { .. })));
        assert!(!withdraw(base.path(), &name, &[0; 16]));
        assert!(withdraw(base.path(), &name, &s.token()));
        assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
        // no temporary file is left behind
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn stale_entries_are_replaced_removed_and_swept() {
        let base = tempfile::tempdir().unwrap();
        let name = naming::named("ns", "stale").unwrap();
        let s = segment();
        publish(base.path(), &name, &s.locator()).unwrap();
        s.release(); // as if its process were gone
        assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
        let dir = directory(base.path()).unwrap();
        assert!(!dir.join(&name).exists(), "the lookup removed the stale entry");
        let t = segment();
        publish(base.path(), &name, &t.locator()).unwrap();
        t.release();
        let u = segment();
        publish(base.path(), &name, &u.locator()).unwrap(); // replaces the stale one
        assert_eq!(lookup(base.path(), &name).unwrap(), u.locator());
        u.release();
        assert_eq!(sweep(base.path()).unwrap(), vec![name]);
        assert!(sweep(base.path()).unwrap().is_empty());
    }

    #[test]
    fn hostile_entries_are_errors_or_skipped_and_never_block() {
        let base = tempfile::tempdir().unwrap();
        let dir = directory(base.path()).unwrap();
        let s = segment();
        let target = dir.join("target");
        std::fs::write(&target, encode(&s.locator(), "pageshare.n.h.link")).unwrap();
        std::os::unix::fs::symlink(&target, dir.join("pageshare.n.h.link")).unwrap();
        let fifo = std::ffi::CString::new(dir.join("pageshare.n.h.fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path for a new FIFO.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(dir.join("pageshare.n.h.dir")).unwrap();
        let open = dir.join("pageshare.n.h.open");
        std::fs::write(&open, encode(&s.locator(), "pageshare.n.h.open")).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(dir.join("pageshare.n.h.junk"), b"PSI1 not an entry").unwrap();
        let t = std::time::Instant::now();
        for var in ["link", "fifo", "dir", "open", "junk"] {
            let e = lookup(base.path(), &format!("pageshare.n.h.{var}")).unwrap_err();
            assert!(matches!(e, Error::Unsafe { .. }), "{var}: {e}");
        }
        assert!(live_names(base.path()).unwrap().is_empty());
        assert!(sweep(base.path()).unwrap().is_empty());
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn an_unsafe_directory_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join(format!("pageshare-{}", os::euid()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let name = naming::named("ns", "x").unwrap();
        assert!(matches!(publish(base.path(), &name, &segment().locator()), Err(Error::Unsafe { .. })));
        assert!(matches!(lookup(base.path(), &name), Err(Error::Unsafe { .. })));
        std::fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink(base.path(), &dir).unwrap();
        assert!(matches!(lookup(base.path(), &name), Err(Error::Unsafe { .. })));
    }
}
