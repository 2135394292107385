//! Registering a name: publish an entry (locked before it is visible), look
//! one up, check that a name is free, withdraw an entry.

use super::directory::{directory, existing_directory};
use super::entry::{encode, holder_gone, read_entry, remove_stale, Entry};
use super::TEMP_PREFIX;
use crate::error::{Error, Result};
use crate::locator::{hex, Locator};
use crate::{naming, os};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A published entry's lock: while it is open, the entry's holder is alive.
/// Dropping it (after [`withdraw`]) lets the entry be judged stale.
#[derive(Debug)]
pub struct Claim {
    pub(super) _lock: File,
}

/// What waiting for a key's creation lock ([`creation_lock`]) came to.
#[derive(Debug)]
pub enum CreationLock {
    /// Taken: held until the file is dropped (or the process ends).
    Taken(File),
    /// Another process still held it at the deadline: its pid, where the
    /// kernel says (`/proc/locks`).
    Busy { holder: Option<u32> },
    /// The caller's `interrupted()` said to stop waiting.
    Interrupted,
}

/// Wait, until `deadline` at most, for the lock under which one process at a
/// time, of those that share under the names beginning with `prefix` (a key's
/// holders), decides whether to take a holder's segment or make its own:
/// processes that share the same data at the same moment then keep one copy.
/// The lock is tried again and again (never a blocking wait the caller could
/// not end), and `interrupted()` is asked between tries: a holder that is
/// stopped (SIGSTOP, a debugger) or slow can delay the caller, never hang it.
/// Its file is a temporary file of the index, which a sweep removes once
/// nobody has locked it for a while.
pub fn creation_lock(
    base: &Path,
    prefix: &str,
    deadline: std::time::Instant,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<CreationLock> {
    let dir = directory(base)?;
    let digest = crate::content::digest_hex(prefix.as_bytes());
    let path = dir.join(format!("{TEMP_PREFIX}lock.{}", &digest[..32]));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::os(format!("cannot open the lock file {}", path.display()), e))?;
    if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
        return Err(Error::Invalid { name: path.display().to_string(), why: "it is not a regular file".into() });
    }
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        let taken = os::try_lock_exclusive(&file).map_err(|e| {
            Error::os(format!("cannot lock {} (its file system must support flock)", path.display()), e)
        })?;
        if taken {
            // (recently used: a sweep leaves it alone)
            let _ = file.set_modified(std::time::SystemTime::now());
            return Ok(CreationLock::Taken(file));
        }
        if interrupted() {
            return Ok(CreationLock::Interrupted);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Ok(CreationLock::Busy { holder: os::flock_holder(&file) });
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
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
pub(super) fn write_locked(temp: &Path, bytes: &[u8]) -> Result<Claim> {
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
