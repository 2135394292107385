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
//! or [`sweep`] removes it, if it is still the same file). A lock that cannot
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

use crate::error::{Error, Result};
use crate::locator::{self, hex, Locator};
use crate::{naming, os};
use std::fs::File;
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
        return Err(unsafe_dir(format!(
            "its mode is {:o}: other users could change it",
            m.permissions().mode() & 0o777
        )));
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
    /// An entry and the file it was read from (to judge its holder with).
    Found(Locator, File),
}

/// Open `path` without following links or blocking, if it is a small regular
/// file of this user closed to others.
fn open_own_file(path: &Path) -> std::result::Result<File, Option<String>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(Some("it is a symbolic link".into())),
        Err(e) => return Err(Some(format!("it cannot be opened ({e})"))),
    };
    let Ok(m) = file.metadata() else { return Err(Some("it cannot be inspected".into())) };
    if !m.file_type().is_file() {
        return Err(Some("it is not a regular file".into()));
    }
    if m.uid() != os::euid() || m.permissions().mode() & 0o077 != 0 {
        return Err(Some(format!("it belongs to user {} with mode {:o}", m.uid(), m.permissions().mode() & 0o777)));
    }
    if m.len() > MAX_ENTRY {
        return Err(Some(format!("it has {} bytes, more than an entry", m.len())));
    }
    Ok(file)
}

fn read_entry(path: &Path, name: &str) -> Entry {
    let file = match open_own_file(path) {
        Ok(f) => f,
        Err(None) => return Entry::Absent,
        Err(Some(why)) => return Entry::Unusable(why),
    };
    let mut b = Vec::new();
    if (&file).take(MAX_ENTRY).read_to_end(&mut b).is_err() {
        return Entry::Unusable("it cannot be read".into());
    }
    match decode(&b) {
        Some((loc, n)) if n == name => Entry::Found(loc, file),
        _ => Entry::Unusable("it is not a pageshare index entry for this name".into()),
    }
}

/// Is the holder of the entry open as `file` gone? Only on the kernel's
/// evidence: an exclusive lock is granted, so no descriptor of the holder's
/// (or of its forked children) is left. The lock stays taken while `file` is
/// open, so that no other judge can act on the same entry meanwhile (it sees
/// the lock and judges the holder alive: the safe mistake). A lock that cannot
/// be tried at all is no evidence.
fn holder_gone(file: &File) -> bool {
    os::try_lock_exclusive(file).unwrap_or(false)
}

/// Remove the entry at `path` judged stale through `file` (whose exclusive
/// lock the caller holds), if `path` still is that file: another process may
/// have replaced it meanwhile, and its new entry must stay.
fn remove_stale(path: &Path, file: &File) -> bool {
    let (Ok(held), Ok(now)) = (file.metadata(), std::fs::symlink_metadata(path)) else { return false };
    (held.dev(), held.ino()) == (now.dev(), now.ino()) && std::fs::remove_file(path).is_ok()
}

/// A published entry's lock: while it is open, the entry's holder is alive.
/// Dropping it (after [`withdraw`]) lets the entry be judged stale.
#[derive(Debug)]
pub struct Claim {
    _lock: File,
}

/// Publish `name` -> `loc` and return the [`Claim`] that keeps it alive. Fails
/// with [`Error::Taken`] if a live process holds the name, and replaces a stale
/// entry (its holder is gone).
pub fn publish(base: &Path, name: &str, loc: &Locator) -> Result<Claim> {
    naming::validate(name)?;
    let dir = directory(base)?;
    let temp = dir.join(format!("{TEMP_PREFIX}{}.{}", os::pid(), hex(&os::random_bytes(8)?)));
    let claim = write_locked(&temp, &encode(loc, name)).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })?;
    let path = dir.join(name);
    let mut result = Ok(());
    for attempt in 0..2 {
        // link() is atomic and never replaces: two processes registering the
        // same name cannot both succeed. The entry is locked before it is
        // visible, so nobody can find it without a live holder.
        match std::fs::hard_link(&temp, &path) {
            Ok(()) => {
                result = Ok(());
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                result = match read_entry(&path, name) {
                    Entry::Found(other, file) => {
                        if holder_gone(&file) {
                            remove_stale(&path, &file);
                            if attempt == 0 {
                                continue;
                            }
                        }
                        Err(taken(name, other.pid))
                    }
                    // gone meanwhile, or unusable in our own directory: replace it
                    Entry::Absent if attempt == 0 => continue,
                    Entry::Unusable(_) if attempt == 0 => {
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
    result.map(|()| claim)
}

/// Create `temp` holding `bytes`, locked (shared) through a descriptor kept
/// where long-held descriptors go ([`os::place_high`]).
fn write_locked(temp: &Path, bytes: &[u8]) -> Result<Claim> {
    let dir = temp.parent().unwrap_or(temp).display().to_string();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(temp)
        .map_err(|e| Error::os(format!("cannot write an index entry in {dir}"), e))?;
    os::lock_shared(&f).map_err(|e| {
        Error::os(format!("cannot lock an index entry in {dir} (its file system must support flock)"), e)
    })?;
    f.write_all(bytes).map_err(|e| Error::os(format!("cannot write an index entry in {dir}"), e))?;
    Ok(Claim { _lock: os::place_high(f)? })
}

fn taken(name: &str, holder_pid: u32) -> Error {
    match naming::parse_named(name) {
        Some((namespace, variable)) => Error::Taken { namespace, variable, holder_pid },
        None => Error::Argument(format!("segment name {name} is already in use")),
    }
}

/// The locator published under `name`, if a holder of it is alive (it may live
/// in another PID namespace: the locator then does not open here). A stale
/// entry is removed; an entry that cannot be trusted is an error naming it.
pub fn lookup(base: &Path, name: &str) -> Result<Locator> {
    naming::validate(name)?;
    let missing = || Error::Missing { name: name.to_string() };
    let Some(dir) = existing_directory(base)? else { return Err(missing()) };
    let path = dir.join(name);
    match read_entry(&path, name) {
        Entry::Absent => Err(missing()),
        Entry::Unusable(why) => Err(Error::Unsafe { path: path.display().to_string(), why }),
        Entry::Found(loc, file) => {
            if !holder_gone(&file) {
                return Ok(loc);
            }
            remove_stale(&path, &file);
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
/// (release by its holder, before it drops its [`Claim`]). Returns whether it
/// was removed.
pub fn withdraw(base: &Path, name: &str, token: &[u8; 16]) -> bool {
    let Ok(Some(dir)) = existing_directory(base) else { return false };
    let path = dir.join(name);
    match read_entry(&path, name) {
        Entry::Found(loc, _) if &loc.token == token => std::fs::remove_file(&path).is_ok(),
        _ => false,
    }
}

/// Names of the entries whose holder is alive, sorted. Entries that cannot be
/// trusted are skipped.
pub fn live_names(base: &Path) -> Result<Vec<String>> {
    let Some(dir) = existing_directory(base)? else { return Ok(Vec::new()) };
    let mut out: Vec<String> = list(&dir)?
        .into_iter()
        .filter(|n| !n.starts_with(TEMP_PREFIX))
        .filter(|n| matches!(read_entry(&dir.join(n), n), Entry::Found(_, f) if !holder_gone(&f)))
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

/// Remove the stale entries (their holder is gone) and abandoned temporary
/// files; returns the names removed, sorted. Entries that cannot be trusted
/// are left alone.
pub fn sweep(base: &Path) -> Result<Vec<String>> {
    let Some(dir) = existing_directory(base)? else { return Ok(Vec::new()) };
    let mut removed = Vec::new();
    for name in list(&dir)? {
        let path = dir.join(&name);
        if name.starts_with(TEMP_PREFIX) {
            if let Some(file) = abandoned(&path) {
                remove_stale(&path, &file);
            }
        } else if let Entry::Found(_, file) = read_entry(&path, &name) {
            if holder_gone(&file) && remove_stale(&path, &file) {
                removed.push(name);
            }
        }
    }
    removed.sort();
    Ok(removed)
}

/// A temporary file whose writer is gone (its lock is free: the writer locks
/// it right after creating it) and that is old enough that it is not being
/// created right now; its file, locked, if so. Only a regular file is opened
/// (a device or a FIFO under such a name is never touched).
fn abandoned(path: &Path) -> Option<File> {
    if !std::fs::symlink_metadata(path).ok()?.file_type().is_file() {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let m = file.metadata().ok()?;
    let age = m.modified().ok().and_then(|t| SystemTime::now().duration_since(t).ok());
    (m.file_type().is_file() && age.is_some_and(|a| a > ABANDONED_AFTER) && holder_gone(&file)).then_some(file)
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
        let claim = publish(base.path(), &name, &s.locator()).unwrap();
        let dir = base.path().join(format!("pageshare-{}", os::euid()));
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
        assert_eq!(live_names(base.path()).unwrap(), vec![name.clone()]);
        // a second registration of a held name names the holder, even from the
        // holder's own process (the lock belongs to the claim's descriptor)
        let e = publish(base.path(), &name, &segment().locator()).unwrap_err();
        assert!(matches!(e, Error::Taken { holder_pid, .. } if holder_pid == os::pid()), "{e}");
        assert!(matches!(check_free(base.path(), &name), Err(Error::Taken { .. })));
        assert!(sweep(base.path()).unwrap().is_empty());
        assert!(!withdraw(base.path(), &name, &[0; 16]));
        assert!(withdraw(base.path(), &name, &s.token()));
        drop(claim);
        assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
        // no temporary file is left behind
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn stale_entries_are_replaced_removed_and_swept() {
        let base = tempfile::tempdir().unwrap();
        let name = naming::named("ns", "stale").unwrap();
        let s = segment();
        drop(publish(base.path(), &name, &s.locator()).unwrap()); // as if its process were gone
        assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
        let dir = directory(base.path()).unwrap();
        assert!(!dir.join(&name).exists(), "the lookup removed the stale entry");
        let t = segment();
        drop(publish(base.path(), &name, &t.locator()).unwrap());
        let u = segment();
        let _claim = publish(base.path(), &name, &u.locator()).unwrap(); // replaces the stale one
        assert_eq!(lookup(base.path(), &name).unwrap(), u.locator());
        drop(_claim);
        assert_eq!(live_names(base.path()).unwrap(), Vec::<String>::new());
        assert_eq!(sweep(base.path()).unwrap(), vec![name]);
        assert!(sweep(base.path()).unwrap().is_empty());
    }

    /// A child process (`sleep`) that inherited a claim's lock, killed and
    /// reaped when dropped.
    struct Holder(std::process::Child);

    impl Holder {
        fn spawn(claim: &Claim) -> Holder {
            use std::os::unix::io::AsRawFd;
            use std::os::unix::process::CommandExt;
            let fd = claim._lock.as_raw_fd();
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("600");
            // SAFETY: runs in the forked child before exec; fcntl is
            // async-signal-safe and touches only that child's descriptor table.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            Holder(cmd.spawn().expect("spawn sleep"))
        }

        fn kill(mut self) {
            self.0.kill().unwrap(); // SIGKILL
            self.0.wait().unwrap();
        }
    }

    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_holder_this_process_cannot_see_keeps_its_entry_until_killed() {
        let base = tempfile::tempdir().unwrap();
        let name = naming::named("ns", "elsewhere").unwrap();
        let dir = directory(base.path()).unwrap();
        // A locator whose pid does not exist here (as for a holder in another
        // PID namespace, or one whose /proc entries cannot be read), published
        // by a process that then hands its lock to a child and lets go itself.
        let s = segment();
        let far = Locator { pid: u32::MAX - 7, start: 12345, ..s.locator() };
        let claim = publish(base.path(), &name, &far).unwrap();
        let holder = Holder::spawn(&claim);
        drop(claim);
        let entry = std::fs::read(dir.join(&name)).unwrap();
        assert_eq!(lookup(base.path(), &name).unwrap(), far);
        assert!(sweep(base.path()).unwrap().is_empty());
        assert_eq!(live_names(base.path()).unwrap(), vec![name.clone()]);
        // a third process cannot take the name
        let e = publish(base.path(), &name, &segment().locator()).unwrap_err();
        assert!(matches!(e, Error::Taken { holder_pid, .. } if holder_pid == far.pid), "{e}");
        assert!(matches!(check_free(base.path(), &name), Err(Error::Taken { .. })));
        // opening it fails clearly, and removes nothing
        let e = crate::registry::open_registered(base.path(), &name).unwrap_err();
        assert!(matches!(e, Error::Unreachable { holder_pid, .. } if holder_pid == far.pid), "{e}");
        assert!(e.to_string().contains("namespace"), "{e}");
        assert_eq!(std::fs::read(dir.join(&name)).unwrap(), entry, "the entry is untouched");
        // kill -9: the kernel drops the lock, the entry is stale
        holder.kill();
        assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
        assert!(!dir.join(&name).exists());
        let claim = publish(base.path(), &name, &s.locator()).unwrap();
        assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
        assert!(withdraw(base.path(), &name, &s.token()));
        drop(claim);
    }

    #[test]
    fn a_stale_entry_replaced_meanwhile_is_not_removed() {
        let base = tempfile::tempdir().unwrap();
        let name = naming::named("ns", "raced").unwrap();
        let dir = directory(base.path()).unwrap();
        let path = dir.join(&name);
        drop(publish(base.path(), &name, &segment().locator()).unwrap());
        // a judge finds the old entry stale...
        let Entry::Found(_, old) = read_entry(&path, &name) else { panic!("no entry") };
        assert!(holder_gone(&old));
        // ...and while it holds the lock, nobody else judges that entry stale
        let Entry::Found(_, other) = read_entry(&path, &name) else { panic!("no entry") };
        assert!(!holder_gone(&other));
        // another process replaces it meanwhile
        std::fs::remove_file(&path).unwrap();
        let s = segment();
        let claim = publish(base.path(), &name, &s.locator()).unwrap();
        assert!(!remove_stale(&path, &old), "the new entry is not the one judged stale");
        assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
        drop(claim);
    }

    #[test]
    fn abandoned_temporary_files_go_only_when_unlocked_and_old() {
        let base = tempfile::tempdir().unwrap();
        let dir = directory(base.path()).unwrap();
        let old = SystemTime::now() - 2 * ABANDONED_AFTER;
        let make = |n: &str| {
            let p = dir.join(format!("{TEMP_PREFIX}{n}"));
            let f = write_locked(&p, b"x").unwrap();
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(old).unwrap();
            f
        };
        let _writing = make("1.live"); // its writer still holds it
        drop(make("2.dead"));
        drop(write_locked(&dir.join(format!("{TEMP_PREFIX}3.new")), b"x").unwrap()); // too young
        sweep(base.path()).unwrap();
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, vec![format!("{TEMP_PREFIX}1.live"), format!("{TEMP_PREFIX}3.new")]);
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
