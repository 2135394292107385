//! The page handover's platform-specific half: everything that depends on
//! glibc's malloc layout, or that replaces the pages under a live vector.
//!
//! - [`glibc_malloc_in_use`]: is malloc() glibc's own (not jemalloc, tcmalloc,
//!   musl... interposed or linked)?
//! - [`glibc_mmapped_chunk`]: glibc's private chunk header (size word with its
//!   IS_MMAPPED bit, the alignment offset in `prev_size`) of a block served
//!   from an mmap() region of its own.
//! - [`private_memory_covers`] and friends: to check that a range is this
//!   process's private memory before its pages are replaced (mappings.rs).
//! - [`map_private_over`]: moves a private file mapping over live pages with
//!   `mremap(MREMAP_MAYMOVE | MREMAP_FIXED)` (never a bare `MAP_FIXED`), and
//!   [`refill_anonymous`], the way back; neither ever ends the process.
//! - [`probe_handover`]: the load-time self-test of all of the above on a
//!   probe block, whose verdict decides whether the handover runs at all.
//!
//! Every assumption is listed in R/foreign-internals.R (pageshare's inventory
//! of what it relies on beyond documented APIs).

use super::mappings::private_mappings_cover;
use super::pages::{page_size, read_word};
use std::fs::File;
use std::os::unix::io::AsRawFd;

/// Is malloc() glibc's own? `Err` says whose it is otherwise. The symbol that
/// `malloc` resolves to must live in glibc's libc.so (an allocator preloaded
/// with LD_PRELOAD, jemalloc or tcmalloc, defines its own, and one built to
/// replace glibc's may define `__libc_malloc` too, so comparing those two is
/// not enough), and
/// glibc must be the C library (`gnu_get_libc_version` exists: not musl).
pub fn glibc_malloc() -> Result<(), String> {
    // SAFETY: dlsym/dladdr with NUL-terminated names and a writable Dl_info;
    // dli_fname, when set, is a NUL-terminated string owned by the loader.
    unsafe {
        if libc::dlsym(libc::RTLD_DEFAULT, c"gnu_get_libc_version".as_ptr()).is_null() {
            return Err("the C library is not glibc".into());
        }
        let malloc = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
        if malloc.is_null() {
            return Err("malloc() cannot be found".into());
        }
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(malloc, &mut info) == 0 || info.dli_fname.is_null() {
            return Err("the library defining malloc() cannot be found".into());
        }
        let file = std::ffi::CStr::from_ptr(info.dli_fname).to_string_lossy().into_owned();
        let base = file.rsplit('/').next().unwrap_or(&file);
        if !base.starts_with("libc.so") {
            return Err(format!("malloc() is {base}'s, not glibc's"));
        }
    }
    Ok(())
}

/// Is malloc() glibc's own (see [`glibc_malloc`])? Only then does
/// [`glibc_mmapped_chunk`] mean anything.
pub fn glibc_malloc_in_use() -> bool {
    glibc_malloc().is_ok()
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

/// Is [start, end) plain private anonymous memory of this process?
pub fn private_anonymous_covers(start: usize, end: usize) -> bool {
    private_memory_covers(start, end, |_| false)
}

/// Are there at least `spare` more mappings allowed for this process?
fn mapping_room(spare: usize) -> bool {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse::<usize>().ok());
    let used = std::fs::read("/proc/self/maps").map(|m| m.iter().filter(|&&b| b == b'\n').count()).ok();
    matches!((max, used), (Some(max), Some(used)) if used + spare < max)
}

/// Map `len` bytes somewhere new: `fd` from `offset` (private, copy on write),
/// or anonymous memory when `fd` is -1. `None` if the kernel refuses.
fn map_elsewhere(len: usize, fd: i32, offset: u64) -> Option<usize> {
    let anon = if fd < 0 { libc::MAP_ANONYMOUS } else { 0 };
    // SAFETY: a fresh mapping at an address the kernel picks; it replaces nothing.
    let got = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | anon,
            fd,
            offset as libc::off_t,
        )
    };
    (got != libc::MAP_FAILED).then_some(got as usize)
}

/// Map like [`map_elsewhere`], but exactly at `addr`, only if nothing is
/// mapped there (MAP_FIXED_NOREPLACE: it never replaces anything).
fn map_into_hole(addr: usize, len: usize, fd: i32, offset: u64) -> bool {
    let anon = if fd < 0 { libc::MAP_ANONYMOUS } else { 0 };
    // SAFETY: MAP_FIXED_NOREPLACE fails (EEXIST) rather than replace a mapping.
    let got = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED_NOREPLACE | anon,
            fd,
            offset as libc::off_t,
        )
    };
    if got != libc::MAP_FAILED && got as usize != addr {
        // A kernel before 4.17 took the flag as a mere hint.
        // SAFETY: `got` is the mapping just made, known to nobody else.
        unsafe { libc::munmap(got, len) };
        return false;
    }
    got != libc::MAP_FAILED
}

/// Move the mapping [from, from + len) (a whole mapping made by this module)
/// to [to, to + len), replacing what is there, in one mremap() call. On
/// failure the mapping at `from` is unmapped, and what was at `to` is intact
/// (see [`map_private_over`] for the one exception, which this repairs with
/// `repair_fd`/`repair_offset` where it can). `Ok(())` once in place.
///
/// # Safety
/// [to, to + len) as for [`map_private_over`]: this process's own memory,
/// page-aligned, whose contents the mapping at `from` equals.
unsafe fn move_into_place(
    from: usize,
    to: usize,
    len: usize,
    repair_fd: i32,
    repair_offset: u64,
) -> std::io::Result<()> {
    // SAFETY: `from` is a whole mapping of ours; MREMAP_FIXED replaces exactly
    // [to, to + len), which the caller owns and whose bytes it equals.
    let got = unsafe {
        libc::mremap(
            from as *mut libc::c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut libc::c_void,
        )
    };
    if got != libc::MAP_FAILED && got as usize == to {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    // The kernel checks the room for mappings and every argument before it
    // unmaps the target, so a failure normally leaves the target as it was.
    // Only an allocation failing inside the kernel after that (one small
    // kernel object, while the process is being OOM-killed) leaves a hole,
    // filled here with the same bytes; the probe finds out which happened:
    // MAP_FIXED_NOREPLACE fails when the old mapping is still there.
    if read_word(to).is_none() && !map_into_hole(to, len, repair_fd, repair_offset) {
        eprintln!("pageshare: {len} bytes of a vector's memory at {to:#x} could not be restored after {err}");
    }
    // SAFETY: `from` is still our own mapping (a failed mremap leaves it), used no more.
    unsafe { libc::munmap(from as *mut libc::c_void, len) };
    Err(err)
}

/// Make [addr, addr + len) private anonymous memory again holding `file`'s bytes
/// from `offset`: the way back from [`map_private_over`] when the copy that
/// handed the pages over fails. Never destroys anything first: the anonymous
/// copy is filled elsewhere and moved into place ([`map_private_over`]'s way),
/// so if memory for it cannot be had, the range simply stays a private mapping
/// of `file` (the same bytes, kept alive by the mapping itself). Does nothing
/// to a range that is anonymous already.
///
/// # Safety
/// As for [`map_private_over`]; the file must hold the range's bytes.
pub unsafe fn refill_anonymous(addr: usize, len: usize, file: &File, offset: u64) {
    if len == 0 || private_anonymous_covers(addr, addr + len) {
        return;
    }
    let Some(tmp) = map_elsewhere(len, -1, 0) else { return };
    // SAFETY: [tmp, tmp + len) is the writable anonymous mapping just made.
    let copy = unsafe { std::slice::from_raw_parts_mut(tmp as *mut u8, len) };
    if std::os::unix::fs::FileExt::read_exact_at(file, copy, offset).is_err() {
        // SAFETY: our own fresh mapping, used no more.
        unsafe { libc::munmap(tmp as *mut libc::c_void, len) };
        return;
    }
    // SAFETY: per the contract; the copy holds exactly the bytes at `addr`.
    let _ = unsafe { move_into_place(tmp, addr, len, file.as_raw_fd(), offset) };
}

/// Replace the pages [addr, addr + len) of this process by a private (copy on
/// write) mapping of `file` from `offset`.
///
/// The new mapping is made elsewhere first, then moved over the range with
/// one `mremap(MREMAP_MAYMOVE | MREMAP_FIXED)`: unlike `mmap(MAP_FIXED)`,
/// which discards the old pages before it can fail, mremap checks everything
/// (arguments, the room left under vm.max_map_count) before it touches the
/// target, so an error leaves the range with its own pages.
///
/// # Safety
/// [addr, addr + len) must be page-aligned memory this process owns whose
/// contents equal the file's bytes there (so nothing reading it can tell), and
/// nothing may write it concurrently; whoever frees that memory must unmap the
/// whole range (as glibc does for an mmap()ed chunk).
pub unsafe fn map_private_over(addr: usize, len: usize, file: &File, offset: u64) -> std::io::Result<()> {
    // Splitting the region and the temporary mapping add mappings: keep a
    // wide margin below the limit.
    if !mapping_room(64) {
        return Err(std::io::Error::new(std::io::ErrorKind::OutOfMemory, "too close to vm.max_map_count"));
    }
    let Some(tmp) = map_elsewhere(len, file.as_raw_fd(), offset) else {
        return Err(std::io::Error::last_os_error());
    };
    // SAFETY: per the contract above; `tmp` maps the same bytes.
    unsafe { move_into_place(tmp, addr, len, file.as_raw_fd(), offset) }
}

/// The bytes of the probe [`probe_malloc_handover`] asks malloc() for: above
/// glibc's largest dynamic mmap threshold (32 MiB), so it is always an mmap()ed
/// chunk of its own, and freeing it leaves the threshold alone. It costs
/// address space only: two of its pages are touched.
pub const PROBE_BYTES: usize = 40 << 20;

/// [`probe_handover`] on a block of [`PROBE_BYTES`] from malloc(), whose
/// payload starts `header` bytes in (as an R vector's data follow its
/// header), then free() it and check that this unmapped the handed-over pages
/// with the rest of the block.
pub fn probe_malloc_handover(header: usize) -> Result<(), String> {
    glibc_malloc()?;
    // SAFETY: a block of our own, given to probe_handover, then freed.
    let block = unsafe { libc::malloc(PROBE_BYTES) } as usize;
    if block == 0 {
        return Err("no memory for the probe".into());
    }
    // SAFETY: the payload lies in the live block, which nothing else uses.
    let verdict = unsafe { probe_handover(block, block + header, PROBE_BYTES - header) };
    let lo = (block + header).div_ceil(page_size()) * page_size();
    // SAFETY: freeing the block malloc() returned above, once.
    unsafe { libc::free(block as *mut libc::c_void) };
    verdict?;
    match read_word(lo) {
        None => Ok(()),
        Some(_) => Err("free() left the probe's handed-over pages mapped".into()),
    }
}

/// The load-time self-test of the handover, on a probe block that the caller
/// owns and no one else reads or writes: `block` is where the caller's
/// allocator returned it (R's vector header, here), `data..data + bytes` the
/// payload inside it, at least three pages. Checks that malloc() is glibc's,
/// that the block is an mmap()ed chunk of its own whose header glibc's layout
/// explains and which is this process's private anonymous memory, then hands
/// two pages over to a memory file and checks that they read the same, are
/// the file's, and that a write stays private. `Err` says what differed.
///
/// # Safety
/// [data, data + bytes) lies in the live block at `block`, owned by the caller
/// and unused by anything else during the call; the block is freed by the
/// allocator that made it (which unmaps the whole chunk).
pub unsafe fn probe_handover(block: usize, data: usize, bytes: usize) -> Result<(), String> {
    glibc_malloc()?;
    let page = page_size();
    let (start, len) =
        glibc_mmapped_chunk(block).ok_or("the probe block is not a glibc mmap()ed chunk (its header differs)")?;
    if !(start <= block && block < data && data + bytes <= start + len && len <= bytes + 2 * page) {
        return Err(format!(
            "glibc's chunk header of the probe says [{start:#x}, +{len}), which does not hold just its block"
        ));
    }
    if !private_anonymous_covers(start, start + len) {
        return Err("the probe's chunk is not private anonymous memory of its own".into());
    }
    let lo = data.div_ceil(page) * page;
    if lo + 2 * page > data + bytes {
        return Err("the probe is too small".into());
    }
    let pattern: Vec<u8> = (0..2 * page).map(|i| (i % 251) as u8 ^ 0x5a).collect();
    // SAFETY: [lo, lo + 2 pages) lies in the caller's probe (checked above).
    let probe = unsafe { std::slice::from_raw_parts_mut(lo as *mut u8, 2 * page) };
    probe.copy_from_slice(&pattern);
    let file = super::memfd::memfd("pageshare-probe").map_err(|e| e.to_string())?;
    std::os::unix::fs::FileExt::write_all_at(&file, &pattern, 0).map_err(|e| e.to_string())?;
    // SAFETY: the probe's pages hold the file's bytes; nothing else uses them.
    unsafe { map_private_over(lo, 2 * page, &file, 0) }.map_err(|e| format!("moving pages over the probe: {e}"))?;
    // SAFETY: as above; the range is mapped (the file's pages now).
    let probe = unsafe { std::slice::from_raw_parts_mut(lo as *mut u8, 2 * page) };
    if probe != &pattern[..] || !private_memory_covers(lo, lo + 2 * page, |p| p.starts_with("/memfd:pageshare-probe")) {
        return Err("the probe's pages do not read as the file's after the handover".into());
    }
    probe[page] ^= 0xff; // copy on write: the file keeps its byte
    let mut back = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, page as u64).map_err(|e| e.to_string())?;
    if back[0] != pattern[page] || probe[page] != pattern[page] ^ 0xff {
        return Err("a write into a handed-over page reached the file".into());
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

    #[test]
    fn a_failed_move_leaves_the_target_with_its_own_pages() {
        let page = page_size();
        let target = map_elsewhere(4 * page, -1, 0).unwrap();
        // SAFETY: the anonymous mapping just made, filled, then given back.
        unsafe {
            std::ptr::write_bytes(target as *mut u8, 7, 4 * page);
            // misaligned: the kernel refuses before it touches anything
            let from = map_elsewhere(page, -1, 0).unwrap();
            assert!(move_into_place(from, target + 8, page, -1, 0).is_err());
            assert!(read_word(from).is_none()); // the temporary mapping is gone
            assert!((0..4 * page).all(|i| *(target as *const u8).add(i) == 7));
            // a file that cannot be mapped: nothing is touched either
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("d")).unwrap();
            let not_mappable = File::open(dir.path().join("d")).unwrap();
            assert!(map_private_over(target, page, &not_mappable, 0).is_err());
            assert!((0..4 * page).all(|i| *(target as *const u8).add(i) == 7));
            assert!(private_anonymous_covers(target, target + 4 * page));
            libc::munmap(target as *mut libc::c_void, 4 * page);
        }
    }

    #[test]
    fn the_self_test_passes_on_a_large_malloc_and_fails_on_a_heap_block() {
        assert_eq!(probe_malloc_handover(48), Ok(()));
        let n = 40 << 20; // above glibc's largest dynamic mmap threshold
                          // SAFETY: malloc'd probes, used by this test alone, then freed.
        unsafe {
            let p = libc::malloc(n) as usize;
            assert_eq!(probe_handover(p, p + 64, n - 64), Ok(()));
            libc::free(p as *mut libc::c_void); // unmaps the handed-over pages too
            let q = libc::malloc(64 << 10) as usize;
            std::ptr::write_bytes(q as *mut u8, 0, 64 << 10);
            let heap = libc::malloc(256) as usize;
            assert!(probe_handover(heap, heap + 16, 200).is_err());
            libc::free(heap as *mut libc::c_void);
            libc::free(q as *mut libc::c_void);
        }
    }
}
