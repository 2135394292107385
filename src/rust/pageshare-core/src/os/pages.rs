//! Pages: their size, reading a word without faulting, and a private
//! mapping of a file with room for a header in front of its data.

use rustix::mm::{MapFlags, ProtFlags};
use std::fs::File;

/// Read the 8-byte word at `addr` of this process's memory without being able
/// to fault: through process_vm_readv(), which returns an error for an unmapped
/// or unreadable address (a plain read of freed memory could raise SIGSEGV).
/// (On libc: rustix has no process_vm_readv.)
pub fn read_word(addr: usize) -> Option<i64> {
    let mut out: i64 = 0;
    let local = libc::iovec { iov_base: std::ptr::addr_of_mut!(out).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 8 };
    // SAFETY: the kernel copies 8 bytes into `out` or fails; it never faults us.
    let n = unsafe { libc::process_vm_readv(std::process::id() as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == 8).then_some(out)
}

/// The system page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// A private mapping of a file's bytes from `file_offset` on, together with the
/// file page before them, so that a caller can place a header of up to one page
/// right in front of the data (R's custom vector allocator puts its vector
/// header there). Every page is MAP_PRIVATE: reads share the page cache, a write
/// (such as the header's, which lands in the page before the data) copies that
/// page and never reaches the file. Unmapped on drop.
pub struct PrefixedMapping {
    base: *mut u8,
    len: usize,
    /// Offset of the data from `base`: at least one page.
    lead: usize,
}

impl PrefixedMapping {
    /// Map `data_len` bytes of `file` from `file_offset` (at least one page into
    /// the file, a multiple of 8) behind the rest of their page and the page before.
    pub fn new(file: &File, file_offset: u64, data_len: usize) -> std::io::Result<PrefixedMapping> {
        let page = page_size() as u64;
        if file_offset < page || !file_offset.is_multiple_of(8) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "data offset below one page or unaligned",
            ));
        }
        let map_start = file_offset / page * page - page;
        let lead = (file_offset - map_start) as usize;
        let len = (lead + data_len).div_ceil(page as usize) * page as usize;
        // SAFETY: a fresh private mapping of our own file at an address the
        // kernel picks; nothing else refers to it.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
                file,
                map_start,
            )
        }?;
        Ok(PrefixedMapping { base: base.cast(), len, lead })
    }

    /// The first byte of the file data.
    pub fn data(&self) -> *mut u8 {
        // SAFETY: lead < len: the data start lies inside the mapping.
        unsafe { self.base.add(self.lead) }
    }

    /// Where a block whose first `prefix` bytes precede the data must start.
    pub fn block(&self, prefix: usize) -> Option<*mut u8> {
        // SAFETY: prefix <= lead keeps the pointer inside the mapping.
        (prefix <= self.lead).then(|| unsafe { self.data().sub(prefix) })
    }
}

impl Drop for PrefixedMapping {
    fn drop(&mut self) {
        // SAFETY: [base, base + len) is exactly what `new` mapped, and nothing
        // borrows it any more.
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_read_without_faulting() {
        let mut m = memmap2::MmapMut::map_anon(1 << 16).unwrap();
        m[100..108].copy_from_slice(&42i64.to_le_bytes());
        let addr = m.as_ptr() as usize + 100;
        assert_eq!(read_word(addr), Some(42));
        drop(m);
        assert_eq!(read_word(addr), None); // unmapped: an error, not SIGSEGV
                                           // SAFETY: a new anonymous mapping; nothing else is affected.
        let none = unsafe {
            rustix::mm::mmap_anonymous(std::ptr::null_mut(), 4096, ProtFlags::empty(), MapFlags::PRIVATE).unwrap()
        };
        assert_eq!(read_word(none as usize), None); // mapped but unreadable
                                                    // SAFETY: `none` is the 4096-byte mapping made above, used no more.
        unsafe { rustix::mm::munmap(none, 4096) }.unwrap();
    }

    #[test]
    fn prefixed_mapping_puts_file_data_behind_a_private_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut bytes = vec![0u8; 3 * 4096];
        for (at, v) in [(4096, 7u8), (4096 + 5000, 9), (4096 + 64, 11), (4096 + 64 + 5000, 13)] {
            bytes[at] = v;
        }
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        // data on a page boundary and 64 bytes into a page (a source's phase)
        for (offset, first, later) in [(4096u64, 7u8, 9u8), (4096 + 64, 11, 13)] {
            let m = PrefixedMapping::new(&file, offset, 6000).unwrap();
            let block = m.block(80).unwrap();
            // SAFETY: `block` and `data()` point into the live private mapping `m`, which spans
            // the header page and at least 5001 data bytes.
            unsafe {
                *block = 1; // the header's page is writable (a private copy)
                assert_eq!(*m.data(), first);
                assert_eq!(*m.data().add(5000), later);
                *m.data() = 42; // copy-on-write: the file is untouched
                assert_eq!(*m.data(), 42);
            }
            assert!(m.block(page_size() + offset as usize % 4096).is_some());
            assert!(m.block(page_size() + offset as usize % 4096 + 1).is_none());
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert!(PrefixedMapping::new(&file, 100, 10).is_err()); // less than a page in
        assert!(PrefixedMapping::new(&file, 4100, 10).is_err()); // unaligned
    }
}
