//! The only module that calls libc directly: free space, page reservation,
//! process identity and randomness. Everything else stays portable Rust.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Bytes available to an unprivileged writer in the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Argument("the segment directory contains a NUL byte".into()))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(Error::os(
            format!("cannot read free space of {}", dir.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Reserve every page of `file` up to `len` bytes, so that later writes through a
/// mapping can never hit an unbacked tmpfs page (which would raise SIGBUS).
pub fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the descriptor is owned by `file` and open for writing.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// Start time of a process (clock ticks since boot, field 22 of /proc/PID/stat),
/// which together with the pid identifies a process even after pid reuse.
pub fn start_time(pid: u32) -> Option<u64> {
    let mut s = String::new();
    File::open(format!("/proc/{pid}/stat")).ok()?.read_to_string(&mut s).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let after = &s[s.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Is the process (pid, start time) still running?
pub fn is_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    match start_time(pid) {
        Some(s) => s == start,
        None => false,
    }
}

/// `n` bytes from the kernel's random source, for unguessable names and secrets.
pub fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::os("cannot read /dev/urandom", e))?;
    Ok(buf)
}

/// Does the mapped range `[ptr, ptr + len)` hold any page that this process has
/// written in a private (copy-on-write) file mapping? Read from
/// /proc/self/pagemap: a present page that is not a file page is an anonymous
/// copy. `None` if pagemap cannot be read.
pub fn has_private_pages(ptr: *const u8, len: usize) -> Option<bool> {
    use std::io::{Seek, SeekFrom};
    if len == 0 {
        return Some(false);
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let first = ptr as usize / page;
    let last = (ptr as usize + len - 1) / page;
    let mut f = File::open("/proc/self/pagemap").ok()?;
    f.seek(SeekFrom::Start((first * 8) as u64)).ok()?;
    let mut buf = vec![0u8; (last - first + 1) * 8];
    f.read_exact(&mut buf).ok()?;
    const PRESENT: u64 = 1 << 63;
    const FILE_OR_SHARED: u64 = 1 << 61;
    Some(buf.chunks_exact(8).any(|c| {
        let e = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        e & PRESENT != 0 && e & FILE_OR_SHARED == 0
    }))
}

/// Read the 8-byte word at `addr` of this process's memory without being able
/// to fault: through process_vm_readv(), which returns an error for an unmapped
/// or unreadable address (a plain read of freed memory could raise SIGSEGV).
pub fn read_word(addr: usize) -> Option<i64> {
    let mut out: i64 = 0;
    let local = libc::iovec { iov_base: std::ptr::addr_of_mut!(out).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 8 };
    // SAFETY: the kernel copies 8 bytes into `out` or fails; it never faults us.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(out)
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// A mapping laid out as `[one private anonymous page][file pages, private]`:
/// the file's bytes from a page-aligned offset start exactly at the second page,
/// so that a caller can place a header of up to one page right in front of the
/// file data (R's custom vector allocator puts its vector header there). Every
/// page is MAP_PRIVATE: reads of the file pages share the page cache, a write
/// copies the page and never reaches the file. Unmapped on drop.
pub struct PrefixedMapping {
    base: *mut u8,
    len: usize,
    page: usize,
}

impl PrefixedMapping {
    /// Map `data_len` bytes of `file` from `file_offset` (a multiple of the page
    /// size) behind one private page.
    pub fn new(file: &File, file_offset: u64, data_len: usize) -> std::io::Result<PrefixedMapping> {
        let page = page_size();
        if file_offset % page as u64 != 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "offset not page-aligned"));
        }
        let data_pages = data_len.div_ceil(page).max(1) * page;
        let len = page + data_pages;
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        if data_len > 0 {
            // SAFETY: replaces pages inside our own reservation [base, base + len).
            let data = unsafe {
                libc::mmap(
                    base.add(page).cast(),
                    data_pages,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    file_offset as libc::off_t,
                )
            };
            if data == libc::MAP_FAILED {
                let err = std::io::Error::last_os_error();
                // SAFETY: unmapping our own reservation.
                unsafe { libc::munmap(base.cast(), len) };
                return Err(err);
            }
        }
        Ok(PrefixedMapping { base, len, page })
    }

    /// The first byte of the file data.
    pub fn data(&self) -> *mut u8 {
        // SAFETY: the data starts one page into the mapping.
        unsafe { self.base.add(self.page) }
    }

    /// Where a block whose first `prefix` bytes precede the data must start.
    pub fn block(&self, prefix: usize) -> Option<*mut u8> {
        // SAFETY: prefix <= page keeps the pointer inside the first page.
        (prefix <= self.page).then(|| unsafe { self.data().sub(prefix) })
    }
}

impl Drop for PrefixedMapping {
    fn drop(&mut self) {
        // SAFETY: [base, base + len) is exactly what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = pid();
        let st = start_time(me).expect("start time of self");
        assert!(is_alive(me, st));
        assert!(!is_alive(me, st + 1));
        assert!(!is_alive(0, 0));
    }

    #[test]
    fn free_bytes_of_tmp_is_positive() {
        assert!(free_bytes(Path::new("/tmp")).unwrap() > 0);
    }

    #[test]
    fn pagemap_sees_copy_on_write_pages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 1 << 16]).unwrap();
        let file = File::open(&path).unwrap();
        let mut m = unsafe { memmap2::MmapOptions::new().map_copy(&file) }.unwrap();
        let _ = m.iter().map(|&b| b as u64).sum::<u64>(); // read every page
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(false));
        m[5000] = 2;
        assert_eq!(has_private_pages(m.as_ptr(), m.len()), Some(true));
        assert_eq!(has_private_pages(m[16384..].as_ptr(), m.len() - 16384), Some(false));
    }

    #[test]
    fn words_are_read_without_faulting() {
        let mut m = memmap2::MmapMut::map_anon(1 << 16).unwrap();
        m[100..108].copy_from_slice(&42i64.to_le_bytes());
        let addr = m.as_ptr() as usize + 100;
        assert_eq!(read_word(addr), Some(42));
        drop(m);
        assert_eq!(read_word(addr), None); // unmapped: an error, not SIGSEGV
        let none = unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_eq!(read_word(none as usize), None); // mapped but unreadable
        unsafe { libc::munmap(none, 4096) };
    }

    #[test]
    fn prefixed_mapping_puts_file_data_behind_a_private_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut bytes = vec![0u8; 3 * 4096];
        bytes[4096] = 7;
        bytes[4096 + 5000] = 9;
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let m = PrefixedMapping::new(&file, 4096, 6000).unwrap();
        let block = m.block(80).unwrap();
        unsafe {
            *block = 1; // the private page is writable
            assert_eq!(*m.data(), 7);
            assert_eq!(*m.data().add(5000), 9);
            *m.data() = 42; // copy-on-write: the file is untouched
            assert_eq!(*m.data(), 42);
        }
        assert_eq!(std::fs::read(&path).unwrap()[4096], 7);
        assert!(PrefixedMapping::new(&file, 100, 10).is_err());
        assert!(m.block(page_size() + 1).is_none());
    }

    #[test]
    fn random_bytes_differ() {
        assert_ne!(random_bytes(16).unwrap(), random_bytes(16).unwrap());
    }
}
