//! Which pages of a range this process has written (copy-on-write copies),
//! from its page tables: the PAGEMAP_SCAN ioctl or /proc/self/pagemap.

use super::pages::page_size;
use std::fs::File;
use std::io::Read;
use std::os::unix::io::AsRawFd;

/// Does the mapped range `[ptr, ptr + len)` hold any page that this process has
/// written in a private (copy-on-write) file mapping? Such a page is an
/// anonymous copy: present but not a file page, or swapped out (file pages are
/// dropped, never swapped). `None` if the page tables cannot be read.
///
/// Asked with the PAGEMAP_SCAN ioctl (Linux >= 6.7), which walks only the page
/// tables that exist and stops at the first match: its cost follows what the
/// process has touched, not the range (a 512 MB vector is checked in
/// microseconds, not the ~2 ms of reading 1 MB of pagemap entries). Older
/// kernels get the entries read from /proc/self/pagemap.
pub fn has_private_pages(ptr: *const u8, len: usize) -> Option<bool> {
    if len == 0 {
        return Some(false);
    }
    let page = page_size();
    let first = ptr as usize / page * page;
    let end = (ptr as usize + len).div_ceil(page) * page;
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    scan_private_pages(&pagemap, first, end).or_else(|| read_private_pages(pagemap, first, end))
}

/// `struct pm_scan_arg` of <linux/fs.h>.
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of <linux/fs.h>.
#[repr(C)]
#[derive(Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)` in the generic ioctl layout (x86, arm).
/// Where the layout differs (powerpc, mips, sparc) the ioctl fails with ENOTTY
/// and the entries are read instead.
const PAGEMAP_SCAN: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16) | (0x66 << 8) | 16;
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

/// [`has_private_pages`] through PAGEMAP_SCAN on page-aligned `[start, end)`;
/// `None` if the kernel does not have the ioctl.
fn scan_private_pages(pagemap: &File, start: usize, end: usize) -> Option<bool> {
    let mut found = PageRegion::default();
    let mut arg = PmScanArg {
        size: std::mem::size_of::<PmScanArg>() as u64,
        flags: 0,
        start: start as u64,
        end: end as u64,
        walk_end: 0,
        vec: std::ptr::addr_of_mut!(found) as u64,
        vec_len: 1,
        max_pages: 1,
        // "not a file page" and ("present" or "swapped").
        category_inverted: PAGE_IS_FILE,
        category_mask: PAGE_IS_FILE,
        category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        return_mask: PAGE_IS_FILE | PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
    };
    // SAFETY: the kernel reads `arg` and writes at most `vec_len` regions into
    // `found`; both live across the call. It only reads our own page tables.
    let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, std::ptr::addr_of_mut!(arg)) };
    (n >= 0).then_some(n > 0)
}

/// [`has_private_pages`] from the 8-byte entries of /proc/self/pagemap.
fn read_private_pages(mut pagemap: File, start: usize, end: usize) -> Option<bool> {
    use std::io::{Seek, SeekFrom};
    let page = page_size();
    pagemap.seek(SeekFrom::Start((start / page * 8) as u64)).ok()?;
    let mut buf = vec![0u8; (end - start) / page * 8];
    pagemap.read_exact(&mut buf).ok()?;
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE_OR_SHARED: u64 = 1 << 61;
    Some(buf.chunks_exact(8).any(|c| {
        let e = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        e & SWAPPED != 0 || (e & PRESENT != 0 && e & FILE_OR_SHARED == 0)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private (copy-on-write) mapping of a new file of `len` bytes of 1.
    fn private_file_map(len: usize) -> (tempfile::TempDir, memmap2::MmapMut) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; len]).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: a private (copy-on-write) map of a file only this test knows.
        let m = unsafe { memmap2::MmapOptions::new().map_copy(&file) }.unwrap();
        (dir, m)
    }

    #[test]
    fn pagemap_sees_copy_on_write_pages() {
        let (_dir, mut m) = private_file_map(1 << 16);
        let _ = m.iter().map(|&b| b as u64).sum::<u64>(); // read every page
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false));
        m[5000] = 2;
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(true));
        assert_eq!(has_private_pages(m[16384..].as_ptr(), m.len() - 16384), Some(false));
        assert_eq!(has_private_pages(m[5000..].as_ptr(), 1), Some(true)); // an unaligned byte
                                                                          // Both ways of asking agree (the ioctl where the kernel has it).
        let page = page_size();
        let (start, end) = (m.as_ptr() as usize, m.as_ptr() as usize + m.len());
        let pagemap = || File::open("/proc/self/pagemap").unwrap();
        assert_eq!(read_private_pages(pagemap(), start, end), Some(true));
        assert_eq!(read_private_pages(pagemap(), start + 2 * page, end), Some(false));
        if let Some(found) = scan_private_pages(&pagemap(), start, end) {
            assert!(found);
            assert_eq!(scan_private_pages(&pagemap(), start + 2 * page, end), Some(false));
        }
    }

    #[test]
    fn untouched_pages_of_a_private_mapping_are_not_private() {
        let (_dir, m) = private_file_map(1 << 20);
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false)); // nothing mapped yet
        let _ = m[700_000];
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false)); // read: a file page
    }
}
