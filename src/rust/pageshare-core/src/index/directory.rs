//! The per-user index directory: made mode 0700, and checked (a real
//! directory, this user's, closed to others) before every use.

use crate::error::{Error, Result};
use crate::os;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

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
pub(super) fn existing_directory(base: &Path) -> Result<Option<PathBuf>> {
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
