//! The worker's side of the pool: connect to the master named in the
//! environment, prove who it is, receive the pool's region, and from then on
//! die with the master: a thread waits on the socket and on the master
//! process itself and ends the process at once (through the caller's
//! `master_gone`), also in the middle of a task, when either ends: the socket
//! when the master stopped the pool, the process when it exited or was killed.
//! The socket alone is not enough: a process the master forked
//! (`mcparallel()`, `mclapply()`) holds the master's end too and keeps it open
//! after the master is gone.

use crate::handshake::{secret_from_hex, Hello};
use crate::region::Region;
use pageshare_core::os;
use pageshare_core::os::ProcessWatch;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The environment variables a worker is started with.
pub const ENV_ADDRESS: &str = "PAGESHARE_POOL_ADDRESS";
pub const ENV_SECRET: &str = "PAGESHARE_POOL_SECRET";
pub const ENV_SLOT: &str = "PAGESHARE_POOL_SLOT";
/// For tests only: the package version a worker claims in its hello instead
/// of its own, to see its master refuse a worker of another version.
pub const ENV_TEST_VERSION: &str = "PAGESHARE_POOL_TEST_VERSION";

/// A connected worker: its slot, the pool's region, and its master as
/// (pid, start time) (start time 0 where /proc cannot tell it).
pub struct Connection {
    pub region: Region,
    pub slot: u64,
    pub master: (u32, u64),
}

fn invalid(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why.into())
}

/// Connects as the environment says, or explains why it cannot. When the
/// master's end of the socket closes, a thread of this process calls
/// `master_gone` (which must end the process; it runs beside the main thread,
/// so it must not touch what the main thread uses).
pub fn connect_from_env(master_gone: fn() -> !) -> std::io::Result<Connection> {
    let var = |k: &str| {
        std::env::var(k)
            .map_err(|_| invalid(format!("{k} is not set: this process was not started by a pageshare pool")))
    };
    let address = var(ENV_ADDRESS)?;
    let secret = secret_from_hex(&var(ENV_SECRET)?).ok_or_else(|| invalid(format!("{ENV_SECRET} is malformed")))?;
    let slot: u64 = var(ENV_SLOT)?.parse().map_err(|_| invalid(format!("{ENV_SLOT} is malformed")))?;
    let socket = os::connect_abstract(&address)?;
    // The master is the process that listens on the address, as the kernel
    // recorded it (SO_PEERCRED); it must be of this user. Its watch is opened
    // before the handshake: the master's reply below then proves that the
    // process watched was still the master after the watch was opened.
    let (master, uid) = os::peer_credentials(&socket)?;
    if uid != os::euid() {
        return Err(invalid("the pool's address is held by a process of another user"));
    }
    let gone = || invalid("the pool's master is gone");
    let (watch, start) = match os::start_time(master) {
        Some(start) => (Some(ProcessWatch::open(master, start).ok_or_else(gone)?), start),
        // (no /proc to tell any start time: the socket alone is watched)
        None if os::start_time(os::pid()).is_none() => (None, 0),
        None => return Err(gone()),
    };
    let mut hello = Hello::ours(slot);
    if let Ok(v) = std::env::var(ENV_TEST_VERSION) {
        hello.package = v;
    }
    os::send_all(&socket, &hello.encode(&secret).map_err(|e| invalid(e.to_string()))?)?;
    let mut reply = [0u8; 2];
    let (n, file) = os::receive_with_descriptor(&socket, &mut reply)?;
    if n != 2 || &reply != b"ok" {
        return Err(invalid(format!(
            "the pool's master refused this worker (pageshare {}, wire {})",
            hello.package, hello.wire
        )));
    }
    let region = Region::open(file)?;
    if slot >= region.slots() {
        return Err(invalid("the pool's region has no slot for this worker"));
    }
    watch_master(socket, watch, master_gone)?;
    Ok(Connection { region, slot, master: (master, start) })
}

/// A thread that calls `master_gone` once the master's socket closes or the
/// master process ends, whichever comes first.
fn watch_master(mut socket: UnixStream, master: Option<ProcessWatch>, master_gone: fn() -> !) -> std::io::Result<()> {
    std::thread::Builder::new().name("pageshare-pool-watch".into()).spawn(move || {
        let mut fds = vec![socket.as_raw_fd()];
        fds.extend(master.as_ref().and_then(|m| m.pidfd()));
        let timeout = master.as_ref().map_or(-1, |m| m.poll_timeout_ms());
        let mut byte = [0u8; 64];
        loop {
            if master.as_ref().is_some_and(|m| m.ended()) {
                master_gone();
            }
            let ready = os::poll_in(&mut fds, timeout);
            if ready[0] {
                match socket.read(&mut byte) {
                    Ok(0) => master_gone(),
                    Ok(_) => continue,
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock) => {
                        continue
                    }
                    Err(_) => master_gone(),
                }
            }
        }
    })?;
    Ok(())
}
