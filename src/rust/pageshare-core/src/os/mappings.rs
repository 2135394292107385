//! Which mappings cover a range of this process's memory: the PROCMAP_QUERY
//! ioctl on /proc/self/maps (Linux >= 6.11), which asks the kernel about the
//! mappings of the range alone, or else the whole of /proc/self/maps, read and
//! parsed (hundreds of microseconds in an R process: the kernel prints every
//! mapping).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::Mutex;

/// One mapping met in a range: `[start, end)`, whether it is private and
/// readable and writable but not executable ("rw-p"), and the mapped file's
/// path as /proc/self/maps prints it (`None` for anonymous memory).
struct Area<'a> {
    start: usize,
    end: usize,
    rw_private: bool,
    path: Option<&'a str>,
}

/// Is [start, end) covered, without gaps, by rw-p mappings each of which
/// `ok` accepts: `None` for anonymous memory, else the mapped file's path as
/// /proc/self/maps prints it (e.g. with " (deleted)")?
pub(super) fn private_mappings_cover(start: usize, end: usize, ok: impl Fn(Option<&str>) -> bool) -> bool {
    let accept = |a: &Area| a.rw_private && a.path != Some("") && ok(a.path);
    match query_cover(start, end, accept) {
        Some(covered) => covered,
        None => read_cover(start, end, accept),
    }
}

/// `struct procmap_query` of <linux/fs.h>.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `_IOWR('f', 17, struct procmap_query)` in the generic ioctl layout (x86,
/// arm); elsewhere the ioctl fails with ENOTTY and the maps are read instead.
const PROCMAP_QUERY: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<ProcmapQuery>() as libc::c_ulong) << 16) | (0x66 << 8) | 17;
const VMA_READABLE: u64 = 1;
const VMA_WRITABLE: u64 = 2;
const VMA_EXECUTABLE: u64 = 4;
const VMA_SHARED: u64 = 8;

/// This process's /proc/self/maps, open for PROCMAP_QUERY, with the pid that
/// opened it.
static MAPS: Mutex<Option<(u32, File)>> = Mutex::new(None);

/// [`private_mappings_cover`] by PROCMAP_QUERY: the mapping at each address
/// from `start` on, one after the other. `None` if the kernel does not have
/// the ioctl.
fn query_cover(start: usize, end: usize, accept: impl Fn(&Area) -> bool) -> Option<bool> {
    let mut held = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    // (opened once per process: a forked child must ask about its own mappings)
    let me = super::pid();
    if held.as_ref().is_none_or(|(pid, _)| *pid != me) {
        *held = Some((me, File::open("/proc/self/maps").ok()?));
    }
    let maps = &held.as_ref().expect("opened above").1;
    let mut name = vec![0u8; 4096];
    let mut at = start;
    while at < end {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: at as u64,
            vma_name_size: name.len() as u32,
            vma_name_addr: name.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `q` is a procmap_query the kernel reads and fills; the name
        // buffer it points to holds vma_name_size bytes and outlives the call.
        let r = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY, std::ptr::addr_of_mut!(q)) };
        if r != 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                // (no mapping holds `at`: a gap)
                Some(libc::ENOENT) => Some(false),
                _ => None,
            };
        }
        // (the name's length counts its closing NUL; 0 when it has none)
        let len = (q.vma_name_size as usize).saturating_sub(1).min(name.len());
        let Ok(text) = std::str::from_utf8(&name[..len]) else { return None };
        let path = if q.inode == 0 && text.is_empty() { None } else { Some(text) };
        let rw_private =
            q.vma_flags & (VMA_READABLE | VMA_WRITABLE | VMA_EXECUTABLE | VMA_SHARED) == VMA_READABLE | VMA_WRITABLE;
        let area = Area { start: q.vma_start as usize, end: q.vma_end as usize, rw_private, path };
        if area.start > at || area.end <= at || !accept(&area) {
            return Some(false);
        }
        at = area.end;
    }
    Some(true)
}

/// [`private_mappings_cover`] from the text of /proc/self/maps.
fn read_cover(start: usize, end: usize, accept: impl Fn(&Area) -> bool) -> bool {
    // (bytes, not a String: a mapped file's name need not be UTF-8)
    let Ok(raw) = std::fs::read("/proc/self/maps") else { return false };
    let maps = String::from_utf8_lossy(&raw);
    let mut areas: Vec<(usize, usize, bool)> = Vec::new();
    for line in maps.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        let path = f.next().unwrap_or("").trim();
        let Some((a, b)) = range.split_once('-') else { return false };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { return false };
        if b <= start || a >= end {
            continue;
        }
        let path = if inode == "0" && path.is_empty() { None } else { Some(path) };
        let area = Area { start: a, end: b, rw_private: perms == "rw-p", path };
        areas.push((a, b, accept(&area)));
    }
    areas.sort();
    let mut covered = start;
    for (a, b, ok) in areas {
        if !ok || a > covered {
            return false;
        }
        covered = covered.max(b);
    }
    covered >= end
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::mm;

    /// The ioctl and the text give the same answers, where the kernel has the ioctl.
    #[test]
    fn query_and_text_agree() {
        let page = crate::os::page_size();
        let len = 8 * page;
        // SAFETY: a fresh anonymous mapping of our own, unmapped at the end.
        let base = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                mm::ProtFlags::READ | mm::ProtFlags::WRITE,
                mm::MapFlags::PRIVATE,
            )
        }
        .unwrap() as usize;
        let at = |a: usize| a as *mut std::ffi::c_void;
        // a read-only page in the middle, then a hole after it
        // SAFETY: pages of our own mapping.
        unsafe {
            mm::mprotect(at(base + 3 * page), page, mm::MprotectFlags::READ).unwrap();
            mm::munmap(at(base + 6 * page), page).unwrap();
        }
        let anonymous = |p: Option<&str>| p.is_none();
        let cases = [
            (base, base + 3 * page, true),
            (base, base + 4 * page, false), // the read-only page
            (base + 4 * page, base + 6 * page, true),
            (base + 4 * page, base + 7 * page, false), // the hole
            (base + page, base + 2 * page, true),
        ];
        for (a, b, want) in cases {
            let accept = |x: &Area| x.rw_private && x.path != Some("") && anonymous(x.path);
            assert_eq!(read_cover(a, b, accept), want, "text, [{a:#x}, {b:#x})");
            if let Some(got) = query_cover(a, b, accept) {
                assert_eq!(got, want, "ioctl, [{a:#x}, {b:#x})");
            }
        }
        // (on a kernel that has the ioctl, it must be the one that answers)
        if kernel_at_least(6, 11) {
            assert!(query_cover(base, base + page, |_| true).is_some(), "PROCMAP_QUERY failed");
        }
        // a file's mapping is named by the file
        let accept_none =
            |x: &Area| x.rw_private && x.path != Some("") && x.path.is_some_and(|p| p.starts_with("/nowhere"));
        assert!(!read_cover(base, base + page, accept_none));
        assert!(!query_cover(base, base + page, accept_none).unwrap_or(false));
        // SAFETY: the rest of our own mapping.
        unsafe {
            mm::munmap(at(base), 6 * page).unwrap();
            mm::munmap(at(base + 7 * page), page).unwrap();
        }
    }

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = rustix::system::uname().release().to_string_lossy().into_owned();
        let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
        let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (a, b) >= (major, minor)
    }
}
