//! Local (Unix-domain) sockets between a pool's master and its workers:
//! abstract addresses (no file to clean up after a crash), the peer's user and
//! process id as the kernel reports them, and passing a descriptor.

use std::fs::File;
use std::io::{Error, ErrorKind, Result};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
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
/// when the connection was made (SO_PEERCRED): they cannot be forged.
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
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let mut control = [0u8; FD_SPACE];
    // SAFETY: an all-zero msghdr is valid; every pointer set below stays valid
    // for the sendmsg call (iov, control live on this frame).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as _;
    // SAFETY: msg_control points at FD_SPACE bytes, more than CMSG_SPACE(int);
    // CMSG_FIRSTHDR therefore returns a header inside `control`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), file.as_raw_fd());
    }
    // SAFETY: `msg` is fully initialised as above.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(Error::last_os_error());
    }
    if sent as usize != bytes.len() {
        return Err(Error::new(ErrorKind::WriteZero, "short write of a message with a descriptor"));
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes and the descriptor sent with them
/// (close-on-exec). Returns the number of bytes and the file; an error when no
/// descriptor came.
pub fn receive_with_descriptor(stream: &UnixStream, buf: &mut [u8]) -> Result<(usize, File)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u8; FD_SPACE];
    // SAFETY: as in send_with_descriptor.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = FD_SPACE as _;
    // SAFETY: `msg` points at live buffers of the sizes given.
    let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: recvmsg filled msg_control/msg_controllen; CMSG_FIRSTHDR and
    // CMSG_DATA stay within them, and a SCM_RIGHTS message of this length
    // holds one int.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || (*cmsg).cmsg_level != libc::SOL_SOCKET || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            None
        } else {
            Some(std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()))
        }
    };
    match fd {
        // SAFETY: the kernel just installed this descriptor in this process for us.
        Some(fd) if fd >= 0 => Ok((got as usize, unsafe { File::from_raw_fd(fd) })),
        _ => Err(Error::new(ErrorKind::InvalidData, "the message carried no descriptor")),
    }
}

/// Sends all of `bytes` (MSG_NOSIGNAL: a peer that is gone is an error here,
/// never a SIGPIPE that would end the process).
pub fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live buffer of the length given.
        let n = unsafe { libc::send(stream.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Sends SIGKILL to `pid` (a process this process started and has not yet
/// reaped, so the number cannot have been reused).
pub fn kill_process(pid: u32) {
    // SAFETY: kill() has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Ends this process at once with `code`, without running exit handlers or
/// unwinding (a worker whose master is gone: nothing of it must outlive it).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit() is always safe to call; it does not return.
    unsafe { libc::_exit(code) }
}

/// Waits until `listener` has a connection to accept, at most `timeout`.
pub fn wait_for_connection(listener: &UnixListener, timeout: std::time::Duration) {
    let mut p = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as libc::c_int);
    }
}
