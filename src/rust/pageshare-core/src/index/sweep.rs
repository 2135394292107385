//! The names with a live holder, and the sweep that removes stale entries and
//! abandoned temporary files.

use super::directory::existing_directory;
use super::entry::{holder_gone, read_entry, remove_stale, Entry};
use super::TEMP_PREFIX;
use crate::error::{Error, Result};
use crate::naming;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Age after which a temporary file of a dead writer is removed.
pub(super) const ABANDONED_AFTER: Duration = Duration::from_secs(60);

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
