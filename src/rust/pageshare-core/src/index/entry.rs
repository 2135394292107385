//! One index entry: its bytes, how it is opened and read without trusting the
//! file, and how its holder is judged (by the kernel's lock on it).

use crate::locator::{self, Locator};
use crate::{naming, os};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

const MAGIC: &[u8; 4] = b"PSI1";
/// No entry is larger (a locator and a name of at most 255 bytes).
const MAX_ENTRY: u64 = 512;

pub(super) fn encode(loc: &Locator, name: &str) -> Vec<u8> {
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
pub(super) enum Entry {
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

pub(super) fn read_entry(path: &Path, name: &str) -> Entry {
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
pub(super) fn holder_gone(file: &File) -> bool {
    os::try_lock_exclusive(file).unwrap_or(false)
}

/// Remove the entry at `path` judged stale through `file` (whose exclusive
/// lock the caller holds), if `path` still is that file: another process may
/// have replaced it meanwhile, and its new entry must stay.
pub(super) fn remove_stale(path: &Path, file: &File) -> bool {
    let (Ok(held), Ok(now)) = (file.metadata(), std::fs::symlink_metadata(path)) else { return false };
    (held.dev(), held.ino()) == (now.dev(), now.ino()) && std::fs::remove_file(path).is_ok()
}
