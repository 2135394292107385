//! HANDOVER

use super::pages::{page_size, read_word};
use std::fs::File;
use std::os::unix::io::AsRawFd;

/// Is malloc() glibc's own (no allocator interposed with LD_PRELOAD)? Only then
/// does [`glibc_mmapped_chunk`] mean anything.
pub fn glibc_malloc_in_use() -> bool {
    // SAFETY: dlsym with NUL-terminated names; the results are only compared.
    unsafe {
        let malloc = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
        let glibc = libc::dlsym(libc::RTLD_DEFAULT, c"__libc_malloc".as_ptr());
        !malloc.is_null() && malloc == glibc
    }
}

/// If `mem` was returned by glibc's malloc() as a chunk of its own mmap()ed
/// region (glibc does that for blocks of 128 KiB to 32 MiB and more), that
/// region as (start, length): free(mem) unmaps exactly that range. Reads the
/// chunk header (size word with its IS_MMAPPED bit, and the alignment offset
/// before it) without faulting, and checks that it is consistent. The length
/// is rounded up to whole pages, as munmap() rounds it: Debian 12's glibc 2.36
/// keeps the whole mapping's size in the header, Debian sid's 2.43 16 bytes less.
pub fn glibc_mmapped_chunk(mem: usize) -> Option<(usize, usize)> {
    const IS_MMAPPED: i64 = 0x2;
    const CHUNK_HEADER: usize = 16;
    let page = page_size();
    let size_word = read_word(mem.checked_sub(8)?)?;
    if size_word & IS_MMAPPED == 0 || size_word & 0x4 != 0 {
        return None; // not mmapped (or flagged as belonging to another arena)
    }
    let chunk_size = (size_word & !0x7) as usize;
    let offset = read_word(mem.checked_sub(CHUNK_HEADER)?)? as usize; // prev_size
    let start = mem.checked_sub(CHUNK_HEADER)?.checked_sub(offset)?;
    let len = chunk_size.checked_add(offset)?.checked_next_multiple_of(page)?;
    (start.is_multiple_of(page) && offset < page).then_some((start, len))
}

/// Is [start, end) covered, without gaps, by private writable mappings (rw-p)
/// of this process that are anonymous or map a file whose path `file_ok`
/// accepts (as /proc/self/maps prints it, e.g. with " (deleted)")?
pub fn private_memory_covers(start: usize, end: usize, file_ok: impl Fn(&str) -> bool) -> bool {
    private_mappings_cover(start, end, |path| path.is_none() || path.is_some_and(&file_ok))
}

/// Is [start, end) covered, without gaps, by private writable mappings (rw-p)
/// of the file at `path` (also once it was unlinked)? Pages of such a mapping
/// that were written are private copies: [`has_private_pages`] tells.
pub fn private_file_mapping_covers(start: usize, end: usize, path: &str) -> bool {
    private_mappings_cover(start, end, |p| p.is_some_and(|p| p == path || p.strip_suffix(" (deleted)") == Some(path)))
}

/// Is [start, end) covered, without gaps, by rw-p mappings each of which
/// `ok` accepts: `None` for anonymous memory, else the mapped file's path as
/// /proc/self/maps prints it?
fn private_mappings_cover(start: usize, end: usize, ok: impl Fn(Option<&str>) -> bool) -> bool {
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
        let mapped = if inode == "0" && path.is_empty() { None } else { Some(path) };
        areas.push((a, b, perms == "rw-p" && (mapped != Some("") && ok(mapped))));
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

/// Is [start, end) plain private anonymous memory of this process?
pub fn private_anonymous_covers(start: usize, end: usize) -> bool {
    private_memory_covers(start, end, |_| false)
}

/// Make [addr, addr + len) private anonymous memory again holding `file`'s bytes
/// from `offset`: the way back from [`map_private_over`] (a failed copy), and
/// the repair when a MAP_FIXED mapping failed after the kernel had already
/// discarded the old pages. Aborts the process if even that is impossible:
/// continuing would let R read a hole in a live vector.
///
/// # Safety
/// As for [`map_private_over`]; the file must hold the range's bytes.
pub unsafe fn refill_anonymous(addr: usize, len: usize, file: &File, offset: u64) {
    // SAFETY: per the contract: our own range, replaced by fresh private memory.
    let got = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    // SAFETY: on success, [addr, addr + len) is our writable anonymous memory.
    let filled = got != libc::MAP_FAILED
        && std::os::unix::fs::FileExt::read_exact_at(
            file,
            unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) },
            offset,
        )
        .is_ok();
    if !filled {
        eprintln!("pageshare: cannot restore {len} bytes of a vector's memory at {addr:#x}; aborting to avoid reading lost data");
        std::process::abort();
    }
}

/// Are there at least `spare` more mappings allowed for this process?
fn mapping_room(spare: usize) -> bool {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse::<usize>().ok());
    let used = std::fs::read("/proc/self/maps").map(|m| m.iter().filter(|&&b| b == b'\n').count()).ok();
    matches!((max, used), (Some(max), Some(used)) if used + spare < max)
}

/// Replace the pages [addr, addr + len) of this process by a private (copy on
/// write) mapping of `file` from `offset`.
///
/// # Safety
/// [addr, addr + len) must be page-aligned memory this process owns whose
/// contents equal the file's bytes there (so nothing reading it can tell), and
/// nothing may write it concurrently; whoever frees that memory must unmap the
/// whole range (as glibc does for an mmap()ed chunk).
pub unsafe fn map_private_over(addr: usize, len: usize, file: &File, offset: u64) -> std::io::Result<()> {
    // A MAP_FIXED mapping that fails after the kernel has discarded the old pages
    // loses them (callers then refill the range, see refill_anonymous()). The
    // likeliest failure is running out of mappings (splitting a region adds
    // two), so refuse early with a wide margin.
    if !mapping_room(64) {
        return Err(std::io::Error::new(std::io::ErrorKind::OutOfMemory, "too close to vm.max_map_count"));
    }
    // SAFETY: per the contract above; MAP_FIXED replaces exactly that range.
    let got = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            file.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_malloc_is_a_glibc_mmapped_chunk_that_can_be_backed_by_a_file() {
        assert!(glibc_malloc_in_use());
        let n = 8 << 20;
        // SAFETY: plain malloc/free of a buffer we fill and read.
        unsafe {
            let p = libc::malloc(n) as *mut u8;
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 5, n);
            let (start, len) = glibc_mmapped_chunk(p as usize).expect("an mmapped chunk");
            assert!(start <= p as usize && p as usize + n <= start + len);
            assert!(private_anonymous_covers(start, start + len));
            // Back the page-aligned interior by a file holding the same bytes.
            let page = page_size();
            let lo = (p as usize).div_ceil(page) * page;
            let hi = (p as usize + n) / page * page;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            std::fs::write(&path, vec![5u8; hi - lo]).unwrap();
            let file = File::open(&path).unwrap();
            map_private_over(lo, hi - lo, &file, 0).unwrap();
            assert!(!private_anonymous_covers(start, start + len)); // now file-backed in the middle
            let name = path.display().to_string();
            assert!(private_memory_covers(start, start + len, |p| p.starts_with(&name)));
            assert!(!private_memory_covers(start, start + len, |p| p.starts_with("/elsewhere")));
            assert!((0..n).step_by(4093).all(|i| *p.add(i) == 5));
            *p.add(n / 2) = 9; // copy on write: the file is unchanged
            assert_eq!(*p.add(n / 2), 9);
            assert_eq!(std::fs::read(&path).unwrap()[n / 2 - (lo - p as usize)], 5);
            libc::free(p.cast()); // unmaps the whole region, file pages included
            assert!(read_word(lo).is_none());
            // A small block lives in the heap, not in a chunk of its own.
            let q = libc::malloc(64);
            assert!(glibc_mmapped_chunk(q as usize).is_none());
            libc::free(q);
        }
    }

    #[test]
    fn refilled_memory_is_anonymous_again_with_the_files_bytes() {
        let n = 4 << 20;
        let page = page_size();
        // SAFETY: a malloc'd buffer handed to a file mapping and back, then freed.
        unsafe {
            let p = libc::malloc(n) as *mut u8;
            let (lo, hi) = ((p as usize).div_ceil(page) * page, (p as usize + n) / page * page);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let bytes: Vec<u8> = (0..hi - lo).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            let file = File::open(&path).unwrap();
            map_private_over(lo, hi - lo, &file, 0).unwrap();
            assert!(!private_anonymous_covers(lo, hi));
            refill_anonymous(lo, hi - lo, &file, 0);
            assert!(private_anonymous_covers(lo, hi));
            assert_eq!(std::slice::from_raw_parts(lo as *const u8, hi - lo), &bytes[..]);
            libc::free(p.cast());
        }
    }
}
