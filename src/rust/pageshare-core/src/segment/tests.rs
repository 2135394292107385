use super::*;
use crate::error::{Error, Result};
use crate::naming;
use std::os::unix::io::AsRawFd;

fn doubles(v: &[f64]) -> Result<Segment> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Segment::create(
        &naming::anonymous().unwrap(),
        Contents { kind: Kind::Double, length: v.len() as u64, data_len: bytes.len() as u64, attributes: b"attrs" },
        |d| d.copy_from_slice(&bytes),
    )
}

#[test]
fn create_open_read_release() {
    // As R's load does (ps_init_rust): with a soft limit of 1024 and a higher
    // hard one (systemd's default), the segment goes high only after this.
    let limit = os::raise_open_files_limit();
    let s = doubles(&[1.0, 2.5, -3.0]).unwrap();
    assert!(s.owned_here());
    let loc = s.locator();
    assert!(loc.fd >= os::SEGMENT_FD_FLOOR || limit <= 1100);
    let r = Segment::open(&loc, s.name()).unwrap();
    assert_eq!(r.data(), s.data());
    assert_eq!(r.attributes(), b"attrs");
    assert_eq!(r.header().length, 3);
    assert!(!r.owned_here());
    assert!(r.is_current());
    assert!(r.private_map().is_ok());
    s.release();
    // Gone for new receivers; existing mappings keep reading.
    assert!(matches!(Segment::open(&loc, s.name()), Err(Error::Missing { .. })));
    assert!(!r.is_current());
    assert!(r.private_map().is_err());
    assert_eq!(&r.data()[..8], &1.0f64.to_le_bytes());
}

#[test]
fn a_sealed_segment_cannot_be_changed_through_any_descriptor() {
    let s = doubles(&[7.0; 1000]).unwrap();
    let loc = s.locator();
    // What a second process of the same user would do, through /proc.
    let path = format!("/proc/{}/fd/{}", loc.pid, loc.fd);
    let w = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    assert!(w.set_len(0).is_err(), "shrink");
    assert!(w.set_len(loc.size * 2).is_err(), "grow");
    assert!(std::os::unix::fs::FileExt::write_all_at(&w, b"x", 200).is_err(), "write");
    // SAFETY: the mapping is expected to be refused.
    assert!(unsafe { MmapMut::map_mut(&w) }.is_err(), "writable shared mapping");
    let r = Segment::open(&loc, s.name()).unwrap();
    assert_eq!(r.data(), s.data());
}

#[test]
fn copies_at_a_phase_read_back() {
    let v: Vec<u8> = (0..20_000u32).flat_map(|i| (i as f64).to_le_bytes()).collect();
    let contents = Contents { kind: Kind::Double, length: 20_000, data_len: v.len() as u64, attributes: b"dims" };
    let s = Segment::create_copy(&naming::anonymous().unwrap(), contents, &v, 64).unwrap();
    let r = Segment::open(&s.locator(), s.name()).unwrap();
    assert_eq!(r.header().data_offset % 4096, 64);
    assert_eq!(r.data(), &v[..]);
    assert_eq!(r.attributes(), b"dims");
    let bad = Contents { kind: Kind::Double, length: 2, data_len: 16, attributes: b"" };
    assert!(Segment::create_copy(&naming::anonymous().unwrap(), bad, &v[..8], 0).is_err());
}

#[test]
fn a_source_handed_over_in_chunks_reads_the_same_and_writes_stay_private() {
    let n = 2 * HANDOVER_CHUNK + (5 << 20); // three chunks
                                            // SAFETY: a malloc'd buffer (a glibc mmap()ed chunk of its own), filled,
                                            // handed over, read, written and freed by this test alone.
    unsafe {
        let p = libc::malloc(n) as *mut u8;
        assert!(!p.is_null());
        for i in (0..n).step_by(8) {
            *(p.add(i) as *mut u64) = i as u64;
        }
        let page = os::page_size();
        let (lo, hi) = ((p as usize).div_ceil(page) * page, (p as usize + n) / page * page);
        let data = std::slice::from_raw_parts(p, n);
        let contents = || Contents { kind: Kind::Raw, length: n as u64, data_len: n as u64, attributes: b"" };
        let phase = (p as usize % page) as u64;
        let name = naming::anonymous().unwrap();
        // a misaligned request is refused before anything is written
        let bad = Handover { lo: lo + 1, hi };
        assert!(Segment::create_copy_handing_over(&name, contents(), data, phase, bad).is_err());
        let (seg, handed) =
            Segment::create_copy_handing_over(&name, contents(), data, phase, Handover { lo, hi }).unwrap();
        assert_eq!(handed, hi - lo);
        assert_eq!(seg.data(), data);
        assert!(!os::private_anonymous_covers(lo, hi));
        assert!(os::private_file_mapping_covers(lo, hi, &seg.maps_path()));
        *(p.add(n / 2 / 8 * 8) as *mut u64) = 7; // copy on write
        assert_eq!(*(p.add(n / 2 / 8 * 8) as *const u64), 7);
        assert_eq!(seg.data()[n / 2 / 8 * 8], ((n / 2 / 8 * 8) as u64).to_le_bytes()[0]);
        libc::free(p.cast());
        assert!(os::read_word(lo).is_none()); // the whole block is gone
        drop(seg);
    }
}

#[test]
fn wrong_dead_and_foreign_locators_are_clear_errors() {
    let s = doubles(&[1.0; 100]).unwrap();
    let name = s.name().to_string();
    let good = s.locator();
    // another token: the same descriptor is not taken for another segment
    let e = Segment::open(&Locator { token: [9; 16], ..good }, &name).unwrap_err();
    assert!(matches!(e, Error::Missing { .. } | Error::Invalid { .. }), "{e}");
    // a dead owner (a pid that cannot exist, or a reused pid: other start time)
    let e = Segment::open(&Locator { pid: u32::MAX - 1, ..good }, &name).unwrap_err();
    assert!(matches!(e, Error::Missing { .. }), "{e}");
    let e = Segment::open(&Locator { start: good.start + 1, ..good }, &name).unwrap_err();
    assert!(matches!(e, Error::Missing { .. }), "{e}");
    // a descriptor that is an ordinary file, a FIFO, a pipe: never opened
    let dir = tempfile::tempdir().unwrap();
    let f = File::create(dir.path().join("plain")).unwrap();
    let e = Segment::open(&Locator { fd: f.as_raw_fd(), ..good }, &name).unwrap_err();
    assert!(matches!(e, Error::Missing { .. }), "{e}");
    let mut fds = [0i32; 2];
    // SAFETY: a fresh pipe for this test.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let t = std::time::Instant::now();
    let e = Segment::open(&Locator { fd: fds[0], ..good }, &name).unwrap_err();
    assert!(t.elapsed().as_secs() < 1, "{e}");
    // SAFETY: closing the test's own pipe.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    // a wrong size is refused before mapping
    let e = Segment::open(&Locator { size: good.size + 4096, ..good }, &name).unwrap_err();
    assert!(e.to_string().contains("bytes"), "{e}");
    // an unsealed memfd of ours with the right header is not trusted
    let (header, file) =
        Segment::begin(&Contents { kind: Kind::Raw, length: 0, data_len: 0, attributes: b"" }, 0, 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &header.encode(), 0).unwrap();
    file.set_len(header.total_size).unwrap();
    let m = file.metadata().unwrap();
    use std::os::unix::fs::MetadataExt;
    let unsealed = Locator {
        pid: good.pid,
        start: good.start,
        fd: file.as_raw_fd(),
        dev: m.dev(),
        ino: m.ino(),
        size: header.total_size,
        token: header.token,
    };
    let e = Segment::open(&unsealed, &name).unwrap_err();
    assert!(e.to_string().contains("sealed"), "{e}");
}

#[test]
fn disown_then_adopt_moves_the_duty_to_hold() {
    let s = doubles(&[4.0]).unwrap();
    let loc = s.locator();
    s.disown();
    assert!(!s.owned_here());
    assert_eq!(s.locator(), loc); // still found where it was
    drop(s); // disowned: the hand-off keeps it
    let r = Segment::open(&loc, "pageshare.a.1.x").unwrap();
    r.adopt().unwrap();
    assert!(r.owned_here());
    assert_ne!(r.locator().fd, loc.fd);
    assert!(release_handoffs() >= 1);
    // now only the adopter holds it, and it can be found through it
    assert!(Segment::open(&loc, "pageshare.a.1.x").is_err());
    let again = Segment::open(&r.locator(), "pageshare.a.1.x").unwrap();
    assert_eq!(again.data(), r.data());
}

#[test]
fn private_maps_never_write_the_segment() {
    let s = doubles(&[1.0, 2.0]).unwrap();
    let mut p = s.private_map().unwrap();
    let d0 = s.header().data_offset as usize;
    p[d0..d0 + 8].copy_from_slice(&9.0f64.to_le_bytes());
    assert_eq!(&p[d0..d0 + 8], &9.0f64.to_le_bytes());
    assert_eq!(&s.data()[..8], &1.0f64.to_le_bytes());
    let r = Segment::open(&s.locator(), s.name()).unwrap();
    assert_eq!(&r.data()[..8], &1.0f64.to_le_bytes());
}

#[test]
fn zero_length_vectors() {
    let s = doubles(&[]).unwrap();
    let r = Segment::open(&s.locator(), s.name()).unwrap();
    assert_eq!(r.data().len(), 0);
}

#[test]
fn too_large_request_is_refused_before_reserving() {
    let n = 1u64 << 50; // 8 PiB of doubles
    let e = Segment::create(
        &naming::anonymous().unwrap(),
        Contents { kind: Kind::Double, length: n, data_len: n * 8, attributes: b"" },
        |_| unreachable!(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("available"));
}

#[test]
fn thousands_of_segments_fit_under_the_raised_limit() {
    let limit = os::raise_open_files_limit();
    let n = 3000.min(limit.saturating_sub(2000)) as usize;
    let segs: Vec<Segment> = (0..n).map(|i| doubles(&[i as f64]).unwrap()).collect();
    let v = vec![1u8; 64];
    let copies: Vec<Segment> = (0..n)
        .map(|_| {
            let c = Contents { kind: Kind::Raw, length: 64, data_len: 64, attributes: b"" };
            Segment::create_copy(&naming::anonymous().unwrap(), c, &v, 0).unwrap()
        })
        .collect();
    assert!(segs.iter().chain(&copies).all(|s| s.locator().fd >= os::SEGMENT_FD_FLOOR));
    // the low descriptors stay free for sockets
    let f = File::open("/dev/null").unwrap();
    assert!(f.as_raw_fd() < os::SEGMENT_FD_FLOOR);
}
