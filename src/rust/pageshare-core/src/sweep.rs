//! Reclaiming segments whose owner died without cleaning up (`kill -9`, a crash).
//!
//! The owner of a segment is the (pid, start time) pair in its header; a segment
//! whose owner is not running any more is unlinked. Start times make a reused pid
//! harmless. A file too short to have a header (its creator died in the few
//! instructions between create and header write) is removed once it is a minute old.

use crate::header::HEADER_LEN;
use crate::naming;
use crate::os;
use crate::segment::read_owner;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Age after which a headerless file of ours is considered abandoned.
const ABANDONED_AFTER: Duration = Duration::from_secs(60);

/// Unlink the segments in `dir` whose owner is dead; returns their names.
pub fn sweep(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if !naming::is_ours(&name) {
            continue;
        }
        let path = entry.path();
        let dead = match read_owner(&path) {
            Some((pid, start)) => !os::is_alive(pid, start),
            None => is_abandoned(&path),
        };
        if dead && std::fs::remove_file(&path).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    Ok(removed)
}

fn is_abandoned(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    if meta.len() >= HEADER_LEN as u64 {
        // A header-sized file without our magic is not ours to judge.
        return false;
    }
    let age = meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok());
    age.is_some_and(|a| a > ABANDONED_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Header, Kind};

    fn fake_segment(dir: &Path, name: &str, pid: u32, start: u64) {
        let h = Header::plan(Kind::Raw, 0, 0, 0, pid, start).unwrap();
        let mut bytes = h.encode().to_vec();
        bytes.resize(h.total_size as usize, 0);
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn dead_owners_are_swept_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let me = os::pid();
        let my_start = os::start_time(me).unwrap();
        fake_segment(dir.path(), "pageshare.a.1.live", me, my_start);
        // Same pid but another start time: a previous process with a reused pid.
        fake_segment(dir.path(), "pageshare.a.1.reused", me, my_start + 12345);
        // A pid that cannot exist.
        fake_segment(dir.path(), "pageshare.n.ns.dead", u32::MAX - 1, 1);
        std::fs::write(dir.path().join("unrelated"), b"x").unwrap();
        std::fs::write(dir.path().join("pageshare.a.1.fresh-partial"), b"x").unwrap();
        let removed = sweep(dir.path()).unwrap();
        assert_eq!(removed, vec!["pageshare.a.1.reused".to_string(), "pageshare.n.ns.dead".to_string()]);
        assert!(dir.path().join("pageshare.a.1.live").exists());
        assert!(dir.path().join("unrelated").exists());
        // Too young to be called abandoned.
        assert!(dir.path().join("pageshare.a.1.fresh-partial").exists());
    }
}
