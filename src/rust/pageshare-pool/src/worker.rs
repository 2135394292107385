//! The worker's side of the pool: connect to the master named in the
//! environment, prove who it is, receive the pool's region, and from then on
//! die with the master: a thread blocks on the socket and ends the process at
//! once (through the caller's `master_gone`) when it closes (the master exited, was killed, or stopped the pool),
//! also in the middle of a task.

use crate::handshake::{secret_from_hex, Hello};
use crate::region::Region;
use pageshare_core::os;
use std::io::Read;
use std::os::unix::net::UnixStream;

/// The environment variables a worker is started with.
pub const ENV_ADDRESS: &str = "PAGESHARE_POOL_ADDRESS";
pub const ENV_SECRET: &str = "PAGESHARE_POOL_SECRET";
pub const ENV_SLOT: &str = "PAGESHARE_POOL_SLOT";
/// For tests only: the package version a worker claims in its hello instead
/// of its own, to see its master refuse a worker of another version.
pub const ENV_TEST_VERSION: &str = "PAGESHARE_POOL_TEST_VERSION";

/// A connected worker: its slot and the pool's region.
pub struct Connection {
    pub region: Region,
    pub slot: u64,
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
    watch_master(socket, master_gone)?;
    Ok(Connection { region, slot })
}

fn watch_master(mut socket: UnixStream, master_gone: fn() -> !) -> std::io::Result<()> {
    std::thread::Builder::new().name("pageshare-pool-watch".into()).spawn(move || {
        let mut byte = [0u8; 64];
        loop {
            match socket.read(&mut byte) {
                Ok(0) => master_gone(),
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => master_gone(),
            }
        }
    })?;
    Ok(())
}
