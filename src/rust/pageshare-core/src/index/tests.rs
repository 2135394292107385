use super::entry::{encode, holder_gone, read_entry, remove_stale, Entry};
use super::registration::write_locked;
use super::sweep::ABANDONED_AFTER;
use super::*;
use crate::error::Error;
use crate::header::Kind;
use crate::locator::Locator;
use crate::segment::{Contents, Segment};
use crate::{naming, os};
use proptest::prelude::*;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime};

fn segment() -> Segment {
    Segment::create(
        &naming::anonymous().unwrap(),
        Contents { kind: Kind::Raw, length: 4, data_len: 4, attributes: b"" },
        |d| d.copy_from_slice(b"abcd"),
    )
    .unwrap()
}

proptest! {
    #[test]
    fn entries_round_trip(pid in 1u32.., fd in 0i32.., token: [u8; 16], ns in "\\PC{1,12}", var in "\\PC{1,12}") {
        let name = naming::named(&ns, &var).unwrap();
        let loc = Locator { pid, start: 1, fd, dev: 2, ino: 3, size: 4, token };
        prop_assert_eq!(decode(&encode(&loc, &name)), Some((loc, name)));
    }
    #[test]
    fn any_bytes_decode_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&b);
    }
}

#[test]
fn publish_lookup_withdraw() {
    let base = tempfile::tempdir().unwrap();
    let name = naming::named("ns", "x").unwrap();
    let s = segment();
    let claim = publish(base.path(), &name, &s.locator()).unwrap();
    let dir = base.path().join(format!("pageshare-{}", os::euid()));
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
    assert_eq!(live_names(base.path()).unwrap(), vec![name.clone()]);
    // a second registration of a held name names the holder, even from the
    // holder's own process (the lock belongs to the claim's descriptor)
    let e = publish(base.path(), &name, &segment().locator()).unwrap_err();
    assert!(matches!(e, Error::Taken { holder_pid, .. } if holder_pid == os::pid()), "{e}");
    assert!(matches!(check_free(base.path(), &name), Err(Error::Taken { .. })));
    assert!(sweep(base.path()).unwrap().is_empty());
    assert!(!withdraw(base.path(), &name, &[0; 16]));
    assert!(withdraw(base.path(), &name, &s.token()));
    drop(claim);
    assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
    // no temporary file is left behind
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn stale_entries_are_replaced_removed_and_swept() {
    let base = tempfile::tempdir().unwrap();
    let name = naming::named("ns", "stale").unwrap();
    let s = segment();
    drop(publish(base.path(), &name, &s.locator()).unwrap()); // as if its process were gone
    assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
    let dir = directory(base.path()).unwrap();
    assert!(!dir.join(&name).exists(), "the lookup removed the stale entry");
    let t = segment();
    drop(publish(base.path(), &name, &t.locator()).unwrap());
    let u = segment();
    let _claim = publish(base.path(), &name, &u.locator()).unwrap(); // replaces the stale one
    assert_eq!(lookup(base.path(), &name).unwrap(), u.locator());
    drop(_claim);
    assert_eq!(live_names(base.path()).unwrap(), Vec::<String>::new());
    assert_eq!(sweep(base.path()).unwrap(), vec![name]);
    assert!(sweep(base.path()).unwrap().is_empty());
}

/// A child process (`sleep`) that inherited a claim's lock, killed and
/// reaped when dropped.
struct Holder(std::process::Child);

impl Holder {
    fn spawn(claim: &Claim) -> Holder {
        use std::os::unix::io::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = claim._lock.as_raw_fd();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("600");
        // SAFETY: runs in the forked child before exec; fcntl is
        // async-signal-safe and touches only that child's descriptor table.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Holder(cmd.spawn().expect("spawn sleep"))
    }

    fn kill(mut self) {
        self.0.kill().unwrap(); // SIGKILL
        self.0.wait().unwrap();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_holder_this_process_cannot_see_keeps_its_entry_until_killed() {
    let base = tempfile::tempdir().unwrap();
    let name = naming::named("ns", "elsewhere").unwrap();
    let dir = directory(base.path()).unwrap();
    // A locator whose pid does not exist here (as for a holder in another
    // PID namespace, or one whose /proc entries cannot be read), published
    // by a process that then hands its lock to a child and lets go itself.
    let s = segment();
    let far = Locator { pid: u32::MAX - 7, start: 12345, ..s.locator() };
    let claim = publish(base.path(), &name, &far).unwrap();
    let holder = Holder::spawn(&claim);
    drop(claim);
    let entry = std::fs::read(dir.join(&name)).unwrap();
    assert_eq!(lookup(base.path(), &name).unwrap(), far);
    assert!(sweep(base.path()).unwrap().is_empty());
    assert_eq!(live_names(base.path()).unwrap(), vec![name.clone()]);
    // a third process cannot take the name
    let e = publish(base.path(), &name, &segment().locator()).unwrap_err();
    assert!(matches!(e, Error::Taken { holder_pid, .. } if holder_pid == far.pid), "{e}");
    assert!(matches!(check_free(base.path(), &name), Err(Error::Taken { .. })));
    // opening it fails clearly, and removes nothing
    let e = crate::registry::open_registered(base.path(), &name).unwrap_err();
    assert!(matches!(e, Error::Unreachable { holder_pid, .. } if holder_pid == far.pid), "{e}");
    assert!(e.to_string().contains("namespace"), "{e}");
    assert_eq!(std::fs::read(dir.join(&name)).unwrap(), entry, "the entry is untouched");
    // kill -9: the kernel drops the lock, the entry is stale
    holder.kill();
    assert!(matches!(lookup(base.path(), &name), Err(Error::Missing { .. })));
    assert!(!dir.join(&name).exists());
    let claim = publish(base.path(), &name, &s.locator()).unwrap();
    assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
    assert!(withdraw(base.path(), &name, &s.token()));
    drop(claim);
}

#[test]
fn a_stale_entry_replaced_meanwhile_is_not_removed() {
    let base = tempfile::tempdir().unwrap();
    let name = naming::named("ns", "raced").unwrap();
    let dir = directory(base.path()).unwrap();
    let path = dir.join(&name);
    drop(publish(base.path(), &name, &segment().locator()).unwrap());
    // a judge finds the old entry stale...
    let Entry::Found(_, old) = read_entry(&path, &name) else { panic!("no entry") };
    assert!(holder_gone(&old));
    // ...and while it holds the lock, nobody else judges that entry stale
    let Entry::Found(_, other) = read_entry(&path, &name) else { panic!("no entry") };
    assert!(!holder_gone(&other));
    // another process replaces it meanwhile
    std::fs::remove_file(&path).unwrap();
    let s = segment();
    let claim = publish(base.path(), &name, &s.locator()).unwrap();
    assert!(!remove_stale(&path, &old), "the new entry is not the one judged stale");
    assert_eq!(lookup(base.path(), &name).unwrap(), s.locator());
    drop(claim);
}

#[test]
fn abandoned_temporary_files_go_only_when_unlocked_and_old() {
    let base = tempfile::tempdir().unwrap();
    let dir = directory(base.path()).unwrap();
    let old = SystemTime::now() - 2 * ABANDONED_AFTER;
    let make = |n: &str| {
        let p = dir.join(format!("{TEMP_PREFIX}{n}"));
        let f = write_locked(&p, b"x").unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(old).unwrap();
        f
    };
    let _writing = make("1.live"); // its writer still holds it
    drop(make("2.dead"));
    drop(write_locked(&dir.join(format!("{TEMP_PREFIX}3.new")), b"x").unwrap()); // too young
    sweep(base.path()).unwrap();
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, vec![format!("{TEMP_PREFIX}1.live"), format!("{TEMP_PREFIX}3.new")]);
}

#[test]
fn hostile_entries_are_errors_or_skipped_and_never_block() {
    let base = tempfile::tempdir().unwrap();
    let dir = directory(base.path()).unwrap();
    let s = segment();
    let target = dir.join("target");
    std::fs::write(&target, encode(&s.locator(), "pageshare.n.h.link")).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("pageshare.n.h.link")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("pageshare.n.h.fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path for a new FIFO.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::create_dir(dir.join("pageshare.n.h.dir")).unwrap();
    let open = dir.join("pageshare.n.h.open");
    std::fs::write(&open, encode(&s.locator(), "pageshare.n.h.open")).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(dir.join("pageshare.n.h.junk"), b"PSI1 not an entry").unwrap();
    let t = std::time::Instant::now();
    for var in ["link", "fifo", "dir", "open", "junk"] {
        let e = lookup(base.path(), &format!("pageshare.n.h.{var}")).unwrap_err();
        assert!(matches!(e, Error::Unsafe { .. }), "{var}: {e}");
    }
    assert!(live_names(base.path()).unwrap().is_empty());
    assert!(sweep(base.path()).unwrap().is_empty());
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn an_unsafe_directory_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join(format!("pageshare-{}", os::euid()));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let name = naming::named("ns", "x").unwrap();
    assert!(matches!(publish(base.path(), &name, &segment().locator()), Err(Error::Unsafe { .. })));
    assert!(matches!(lookup(base.path(), &name), Err(Error::Unsafe { .. })));
    std::fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(base.path(), &dir).unwrap();
    assert!(matches!(lookup(base.path(), &name), Err(Error::Unsafe { .. })));
}

#[test]
fn a_held_creation_lock_is_waited_for_until_the_deadline_or_an_interrupt() {
    use super::CreationLock;
    use std::time::{Duration, Instant};
    let base = tempfile::tempdir().unwrap();
    let never = &mut || false;
    let held = match super::creation_lock(base.path(), "pageshare.k.x.", Instant::now(), never).unwrap() {
        CreationLock::Taken(f) => f,
        other => panic!("{other:?}"),
    };
    // (another open file description of the same lock file: refused while `held` lives)
    let start = Instant::now();
    match super::creation_lock(base.path(), "pageshare.k.x.", start + Duration::from_millis(200), never).unwrap() {
        CreationLock::Busy { holder } => assert_eq!(holder, Some(crate::os::pid())),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() >= Duration::from_millis(200));
    let mut asked = 0;
    let mut interrupt_third = || {
        asked += 1;
        asked == 3
    };
    let far = Instant::now() + Duration::from_secs(3600);
    assert!(matches!(
        super::creation_lock(base.path(), "pageshare.k.x.", far, &mut interrupt_third).unwrap(),
        CreationLock::Interrupted
    ));
    assert_eq!(asked, 3);
    // another key's lock is another lock
    assert!(matches!(
        super::creation_lock(base.path(), "pageshare.k.y.", Instant::now(), never).unwrap(),
        CreationLock::Taken(_)
    ));
    drop(held);
    assert!(matches!(
        super::creation_lock(base.path(), "pageshare.k.x.", Instant::now(), never).unwrap(),
        CreationLock::Taken(_)
    ));
}
