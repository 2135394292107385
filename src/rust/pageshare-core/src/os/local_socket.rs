//! Local (Unix-domain) sockets between a pool's master and its workers:
//! abstract addresses (no file to clean up after a crash), the peer's user and
//! process id as the kernel reports them, and passing a descriptor.

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use std::fs::File;
use std::io::{Error, ErrorKind, IoSlice, IoSliceMut, Result};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

/// A listener on the abstract address `name` (Linux: no file in any directory;
/// the name disappears with the last descriptor, also on `kill -9`).
pub fn listen_abstract(name: &str) -> Result<UnixListener> {
    UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)
}

/// A connection to the abstract address `name`.
pub fn connect_abstract(name: &str) -> Result<UnixStream> {
    UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)
}

/// The peer's process id and effective user id, as the kernel recorded them
/// when the connection was made (SO_PEERCRED): they cannot be forged. (On
/// libc: the kernel reports pid 0 for a peer in another pid namespace, which
/// rustix's `UCred`, whose pid is never zero, cannot hold.)
pub fn peer_credentials(stream: &UnixStream) -> Result<(u32, u32)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are writable and `len` holds the size of `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}

const FD_SPACE: usize = 64; // room for one descriptor's control message

/// Sends `bytes` with the descriptor of `file` attached (SCM_RIGHTS).
pub fn send_with_descriptor(stream: &UnixStream, bytes: &[u8], file: &File) -> Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [file.as_fd()];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(Error::other("no room for a descriptor in a control message"));
    }
    let sent = rustix::net::sendmsg(stream, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL)?;
    if sent != bytes.len() {
        return Err(Error::new(ErrorKind::WriteZero, "short write of a message with a descriptor"));
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes and the descriptor sent with them
/// (close-on-exec). Returns the number of bytes and the file; an error when no
/// descriptor came.
/// Descriptors beyond the first (a peer may attach several) are closed.
pub fn receive_with_descriptor(stream: &UnixStream, buf: &mut [u8]) -> Result<(usize, File)> {
    let mut space = [MaybeUninit::<u8>::uninit(); FD_SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(stream, &mut [IoSliceMut::new(buf)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    let mut file = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                file.get_or_insert(File::from(fd));
            }
        }
    }
    match file {
        Some(file) => Ok((got.bytes, file)),
        None => Err(Error::new(ErrorKind::InvalidData, "the message carried no descriptor")),
    }
}

/// Sends all of `bytes` (MSG_NOSIGNAL: a peer that is gone is an error here,
/// never a SIGPIPE that would end the process).
pub fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> Result<()> {
    while !bytes.is_empty() {
        match rustix::net::send(stream, bytes, SendFlags::NOSIGNAL) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sends SIGKILL to `pid` (a process this process started and has not yet
/// reaped, so the number cannot have been reused).
pub fn kill_process(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Ends this process at once with `code`, without running exit handlers or
/// unwinding (a worker whose master is gone: nothing of it must outlive it).
/// (On libc: rustix has `_exit` only in its experimental `runtime` API.)
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit() is always safe to call; it does not return.
    unsafe { libc::_exit(code) }
}

/// Waits until `listener` has a connection to accept, at most `timeout`.
pub fn wait_for_connection(listener: &UnixListener, timeout: std::time::Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    // (to the millisecond, as poll(2) with a timeout in milliseconds waited)
    let ms = timeout.as_millis().min(i32::MAX as u128) as i64;
    let ts = Timespec { tv_sec: ms / 1000, tv_nsec: ms % 1000 * 1_000_000 };
    let _ = rustix::event::poll(&mut [PollFd::new(listener, PollFlags::IN)], Some(&ts));
}
