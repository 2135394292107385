//! The master's side of the pool: start worker processes, let in only the ones
//! it started (same user, the right process for the slot, the pool's secret;
//! every connection heard side by side with a deadline of its own),
//! watch each one's socket from a thread of its own (the kernel closes it on
//! any exit, `kill -9` included: the worker's rings are closed and the master
//! woken at once), replace a worker that died, and stop them all.

use crate::handshake::{hex, Hello, HELLO_LEN, SECRET_LEN};
use crate::region::Region;
use crate::ring::RingError;
use crate::wait::{wait_until, Patience, StopReason, Waited};
use crate::worker::{ENV_ADDRESS, ENV_SECRET, ENV_SLOT};
use pageshare_core::os;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to start one worker process.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// How long a new worker may take to connect.
    pub connect_timeout: Duration,
}

/// What went wrong with the pool's workers.
#[derive(Debug)]
pub enum PoolError {
    /// A worker could not be started or did not connect in time; what it last
    /// wrote to its standard error, if anything.
    Start { slot: u64, why: String, stderr: String },
    /// The pool's own resources (region, socket) could not be set up.
    Setup(String),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::Start { slot, why, stderr } if stderr.is_empty() => {
                write!(f, "worker {} of the pool could not be started: {why}", slot + 1)
            }
            PoolError::Start { slot, why, stderr } => write!(
                f,
                "worker {} of the pool could not be started: {why}; it wrote:\n{}",
                slot + 1,
                stderr.trim_end()
            ),
            PoolError::Setup(why) => write!(f, "the pool could not be set up: {why}"),
        }
    }
}

/// What [`Pool::receive_any`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A message from the worker in `slot`, sent with `tag`.
    Message { slot: u64, tag: u64 },
    /// The worker in `slot` (process `pid`) is gone, with nothing more to
    /// read. `damaged`: it did not die by itself; it wrote what no worker
    /// writes into its result ring (why), and was ended for it.
    Died { slot: u64, pid: u32, damaged: Option<&'static str> },
}

const STDERR_KEEP: usize = 4096;

/// How long the death of a worker waits for the rest of its standard error
/// (its end comes at once when the worker exits, unless a process it started
/// still holds it; a busy machine may delay the thread that reads it).
const STDERR_LAST_READ: Duration = Duration::from_secs(2);

/// The end of what a worker wrote to its standard error (kept for messages).
type StderrTail = Arc<Tail>;

/// What a worker last wrote to its standard error, and whether its end was
/// read (the worker closed it: it exited).
#[derive(Default)]
struct Tail {
    bytes: Mutex<Vec<u8>>,
    ended: AtomicBool,
}

/// How long a connection may take to send its hello once made. A worker sends
/// it right after connecting; connections are heard side by side, so this only
/// bounds how long a silent one is kept.
const HELLO_DEADLINE: Duration = Duration::from_secs(1);

/// At most this many connections per worker being started wait for their
/// hello at a time (only processes this pool started get that far).
const MAX_KNOCKS_PER_WORKER: usize = 4;

/// A connection from a process this pool started, whose hello is awaited.
struct Knock {
    stream: UnixStream,
    pid: u32,
    hello: [u8; HELLO_LEN],
    got: usize,
    deadline: Instant,
}

/// What [`Pool::hear`] made of a knock.
enum Heard {
    Waiting,
    Refused,
    /// One of the workers starting, of another version (why, in words): the
    /// pool cannot start.
    OtherVersion {
        slot: u64,
        why: String,
    },
    /// Admitted: the index of its process in the workers being started.
    Admitted(usize),
}

/// A new connection, kept to be heard if the kernel says it was made by one of
/// the `children` being started (of this user), else closed at once: no other
/// process, of this user or another, can be a worker of this pool.
fn knock(stream: UnixStream, children: &[Starting]) -> Option<Knock> {
    let (pid, uid) = os::peer_credentials(&stream).ok()?;
    if uid != os::euid() || !children.iter().any(|s| s.child.id() == pid) {
        return None;
    }
    stream.set_nonblocking(true).ok()?;
    Some(Knock { stream, pid, hello: [0u8; HELLO_LEN], got: 0, deadline: Instant::now() + HELLO_DEADLINE })
}

/// A worker process started but not yet connected.
struct Starting {
    slot: u64,
    child: Child,
    stderr: StderrTail,
}

struct Worker {
    pid: u32,
    /// Shared with the monitor thread, which reads it (one descriptor per worker).
    socket: Arc<UnixStream>,
    /// Set by the monitor once the process is reaped.
    reaped: Arc<AtomicBool>,
    monitor: Option<JoinHandle<()>>,
    /// The end of what the worker wrote to its standard error.
    stderr: StderrTail,
    /// Its death was reported by receive_any.
    death_reported: bool,
    /// It wrote what no worker writes into its result ring (why): it was
    /// killed and its ring is read no more (see `Pool::condemn`).
    damaged: Option<&'static str>,
}

/// A running pool.
pub struct Pool {
    region: Arc<Region>,
    listener: UnixListener,
    address: String,
    secret: [u8; SECRET_LEN],
    launch: Launch,
    workers: Vec<Option<Worker>>,
    next_scan: u64,
    /// Per slot, a reply whose first frames were read by a receive that was
    /// given up (a deadline, an interrupt) while its worker still wrote it:
    /// its tag and bytes, continued by the next receive from that slot.
    unfinished: Vec<Option<(u64, Vec<u8>)>>,
}

impl Pool {
    /// Starts `n` workers with rings of `capacity` bytes each way; fails (and
    /// leaves no process) if any of them cannot be started.
    pub fn start(n: u64, capacity: u64, launch: Launch) -> Result<Pool, PoolError> {
        let setup = |e: std::io::Error| PoolError::Setup(e.to_string());
        // (where no memfd can be made, the region may also go where the
        // workers are told to keep their temporary files: see region.rs)
        let workers_tmp = launch.env.iter().filter(|(k, _)| k == "TMPDIR").map(|(_, v)| PathBuf::from(v));
        let fallback: Vec<PathBuf> = workers_tmp.chain(std::iter::once(std::env::temp_dir())).collect();
        let region = Arc::new(Region::create(n, capacity, &fallback).map_err(setup)?);
        let random = os::random_bytes(SECRET_LEN + 8).map_err(|e| PoolError::Setup(e.to_string()))?;
        let mut secret = [0u8; SECRET_LEN];
        secret.copy_from_slice(&random[..SECRET_LEN]);
        let address = format!("pageshare-pool-{}-{}", os::pid(), hex(&random[SECRET_LEN..]));
        let listener = os::listen_abstract(&address).map_err(setup)?;
        listener.set_nonblocking(true).map_err(setup)?;
        let mut pool = Pool {
            region,
            listener,
            address,
            secret,
            launch,
            workers: (0..n).map(|_| None).collect(),
            next_scan: 0,
            unfinished: (0..n).map(|_| None).collect(),
        };
        let all: Vec<u64> = (0..n).collect();
        pool.start_workers(&all)?; // (on error, dropping `pool` stops whatever started)
        Ok(pool)
    }

    pub fn size(&self) -> u64 {
        self.workers.len() as u64
    }

    /// The process id of the worker in `slot` (0 when the slot is empty).
    pub fn pid(&self, slot: u64) -> u32 {
        self.workers[slot as usize].as_ref().map_or(0, |w| w.pid)
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Starts workers for the empty `slots` and waits until each has connected.
    fn start_workers(&mut self, slots: &[u64]) -> Result<(), PoolError> {
        let mut children: Vec<Starting> = Vec::new();
        for &slot in slots {
            self.region.tasks(slot).reset();
            self.region.results(slot).reset();
            self.unfinished[slot as usize] = None;
            let mut cmd = Command::new(&self.launch.program);
            cmd.args(&self.launch.args)
                .envs(self.launch.env.iter().map(|(k, v)| (k, v)))
                .env(ENV_ADDRESS, &self.address)
                .env(ENV_SECRET, hex(&self.secret))
                .env(ENV_SLOT, slot.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                // (its own process group: a Ctrl-C at the master's terminal is the
                // master's to handle, not every worker's)
                .process_group(0);
            match cmd.spawn() {
                Ok(mut child) => {
                    let tail: StderrTail = Arc::default();
                    if let Some(err) = child.stderr.take() {
                        keep_tail(err, Arc::clone(&tail));
                    }
                    children.push(Starting { slot, child, stderr: tail });
                }
                Err(e) => {
                    abandon(children);
                    return Err(PoolError::Start {
                        slot,
                        why: format!("cannot run {}: {e}", self.launch.program.display()),
                        stderr: String::new(),
                    });
                }
            }
        }
        let deadline = Instant::now() + self.launch.connect_timeout;
        // Connections are heard side by side, each with its own short
        // deadline, so that no connection (a stuck or hostile client, or many)
        // holds up the workers' own.
        let mut knocks: Vec<Knock> = Vec::new();
        while !children.is_empty() {
            loop {
                match self.listener.accept() {
                    Ok((stream, _)) => {
                        if knocks.len() < MAX_KNOCKS_PER_WORKER * children.len() {
                            knocks.extend(knock(stream, &children));
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let slot = children[0].slot;
                        abandon(children);
                        return Err(PoolError::Start { slot, why: e.to_string(), stderr: String::new() });
                    }
                }
            }
            let mut k = 0;
            while k < knocks.len() {
                match self.hear(&mut knocks[k], &children) {
                    Heard::Waiting if Instant::now() < knocks[k].deadline => k += 1,
                    Heard::Waiting | Heard::Refused => {
                        knocks.swap_remove(k);
                    }
                    // (one of ours, of another version: the pool cannot start;
                    // its connection is closed unanswered, so it ends)
                    Heard::OtherVersion { slot, why } => {
                        abandon(children);
                        return Err(PoolError::Start { slot, why, stderr: String::new() });
                    }
                    Heard::Admitted(i) => {
                        let stream = knocks.swap_remove(k).stream;
                        let s = children.swap_remove(i);
                        let slot = s.slot;
                        if !self.install(slot, s.child, stream, s.stderr) {
                            abandon(children);
                            return Err(PoolError::Start {
                                slot,
                                why: "no thread could be started to watch it".into(),
                                stderr: String::new(),
                            });
                        }
                    }
                }
            }
            if children.is_empty() {
                break;
            }
            if let Some(i) = children.iter_mut().position(|s| matches!(s.child.try_wait(), Ok(Some(_)))) {
                let Starting { slot, mut child, stderr: tail } = children.swap_remove(i);
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                std::thread::sleep(Duration::from_millis(20)); // (let its last words reach the tail)
                abandon(children);
                return Err(PoolError::Start {
                    slot,
                    why: format!("it exited ({status}) before connecting"),
                    stderr: tail_text(&tail),
                });
            }
            if Instant::now() >= deadline {
                let slot = children[0].slot;
                let tail = Arc::clone(&children[0].stderr);
                abandon(children);
                return Err(PoolError::Start {
                    slot,
                    why: format!("it did not connect within {:?}", self.launch.connect_timeout),
                    stderr: tail_text(&tail),
                });
            }
            let mut fds: Vec<RawFd> =
                std::iter::once(self.listener.as_raw_fd()).chain(knocks.iter().map(|k| k.stream.as_raw_fd())).collect();
            os::poll_in(&mut fds, 5);
        }
        Ok(())
    }

    /// Reads what `knock` has sent so far: once its hello is whole, it is
    /// admitted if the hello carries this pool's secret and the slot of the
    /// process that made the connection (its index in `children`) and this
    /// build's wire and package versions; else refused.
    fn hear(&self, knock: &mut Knock, children: &[Starting]) -> Heard {
        loop {
            match (&knock.stream).read(&mut knock.hello[knock.got..]) {
                Ok(0) => return Heard::Refused,
                Ok(n) => {
                    knock.got += n;
                    if knock.got == HELLO_LEN {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Heard::Waiting,
                Err(_) => return Heard::Refused,
            }
        }
        let Some(hello) = Hello::decode(&knock.hello, &self.secret) else { return Heard::Refused };
        let Some(i) = children.iter().position(|s| s.slot == hello.slot && s.child.id() == knock.pid) else {
            return Heard::Refused;
        };
        if let Err(why) = hello.same_versions() {
            return Heard::OtherVersion { slot: hello.slot, why };
        }
        // (blocking from here on: the monitor thread reads it so)
        if knock.stream.set_nonblocking(false).is_err()
            || os::send_with_descriptor(&knock.stream, b"ok", self.region.file()).is_err()
        {
            return Heard::Refused;
        }
        Heard::Admitted(i)
    }

    /// Takes the admitted worker into `slot` with a thread that watches its
    /// socket; false (the worker killed and reaped) if no thread can be started.
    fn install(&mut self, slot: u64, child: Child, socket: UnixStream, stderr: StderrTail) -> bool {
        let pid = child.id();
        let reaped = Arc::new(AtomicBool::new(false));
        let socket = Arc::new(socket);
        let watched = Arc::clone(&socket);
        let region = Arc::clone(&self.region);
        let done = Arc::clone(&reaped);
        let child = Arc::new(Mutex::new(Some(child)));
        let watched_child = Arc::clone(&child);
        let monitor = std::thread::Builder::new().name("pageshare-pool-monitor".into()).spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match (&*watched).read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            region.tasks(slot).close();
            region.results(slot).close();
            if let Some(mut c) = watched_child.lock().ok().and_then(|mut g| g.take()) {
                let _ = c.wait();
            }
            done.store(true, Ordering::SeqCst);
        });
        let monitor = match monitor {
            Ok(m) => Some(m),
            Err(_) => {
                if let Some(mut c) = child.lock().ok().and_then(|mut g| g.take()) {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return false;
            }
        };
        self.workers[slot as usize] =
            Some(Worker { pid, socket, reaped, monitor, stderr, death_reported: false, damaged: None });
        true
    }

    /// Sends a message to the worker in `slot`.
    pub fn send(
        &self,
        slot: u64,
        tag: u64,
        bytes: &[u8],
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<(), RingError> {
        self.region.tasks(slot).send(tag, bytes, patience, give_up)
    }

    /// A message that has arrived from any worker, read without waiting for
    /// one to arrive: `Some((slot, tag))`, or None when no ring holds one.
    /// (Deaths are left to `receive_any`, which reports them after the
    /// messages read here.)
    pub fn try_receive(
        &mut self,
        out: &mut Vec<u8>,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<Option<(u64, u64)>, RingError> {
        let n = self.size();
        for k in 0..n {
            let slot = (self.next_scan + k) % n;
            if self.region.results(slot).has_data() && !self.is_condemned(slot) {
                self.next_scan = (slot + 1) % n;
                // (a message larger than the ring is read as its worker writes it)
                match self.receive_from(slot, out, Patience::default(), give_up) {
                    Ok(tag) => return Ok(Some((slot, tag))),
                    // (its worker was ended: receive_any reports it)
                    Err(RingError::Corrupt(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(None)
    }

    /// The next message from any worker, or the death of one (each death is
    /// reported once, after the messages it sent before it died).
    pub fn receive_any(
        &mut self,
        out: &mut Vec<u8>,
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<Received, RingError> {
        let n = self.size();
        loop {
            for k in 0..n {
                let slot = (self.next_scan + k) % n;
                let ring = self.region.results(slot);
                // (closed is read first: a reply published just before the
                // worker exited is then seen by has_data())
                let closed = ring.is_closed();
                if ring.has_data() && !self.is_condemned(slot) {
                    self.next_scan = (slot + 1) % n;
                    match self.receive_from(slot, out, patience, give_up) {
                        Ok(tag) => return Ok(Received::Message { slot, tag }),
                        Err(RingError::Corrupt(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                if closed || self.is_condemned(slot) {
                    if let Some(w) = self.workers[slot as usize].as_mut() {
                        if !w.death_reported {
                            w.death_reported = true;
                            return Ok(Received::Died { slot, pid: w.pid, damaged: w.damaged });
                        }
                    }
                }
            }
            let region = &self.region;
            let workers = &self.workers;
            let ready = || {
                (0..n).any(|s| {
                    let r = region.results(s);
                    let w = workers[s as usize].as_ref();
                    let condemned = w.is_some_and(|w| w.damaged.is_some());
                    (r.has_data() && !condemned)
                        || ((r.is_closed() || condemned) && w.is_some_and(|w| !w.death_reported))
                })
            };
            if let Waited::Stopped(r) = wait_until(region.master_bell(), patience, ready, &mut *give_up) {
                return Err(RingError::Stopped(r));
            }
        }
    }

    /// Receives the next message of `slot`'s result ring into `out`, going on
    /// with the one a receive given up before had begun (see
    /// `Pool::unfinished`): a reply is never cut by the caller's patience.
    fn receive_from(
        &mut self,
        slot: u64,
        out: &mut Vec<u8>,
        patience: Patience,
        give_up: &mut dyn FnMut() -> Option<StopReason>,
    ) -> Result<u64, RingError> {
        out.clear();
        let mut begun = None;
        if let Some((tag, bytes)) = self.unfinished[slot as usize].take() {
            *out = bytes;
            begun = Some(tag);
        }
        let got = self.region.results(slot).resume(out, &mut begun, patience, give_up);
        match (&got, begun) {
            (Err(RingError::Stopped(_)), Some(tag)) => {
                self.unfinished[slot as usize] = Some((tag, std::mem::take(out)))
            }
            (Err(RingError::Corrupt(why)), _) => self.condemn(slot, why),
            _ => {}
        }
        got
    }

    /// The worker in `slot` wrote what no worker of this pool writes into its
    /// result ring (`why`): a worker whose memory was corrupted, or another
    /// process of the user writing into its pages. Nothing it sends can be
    /// trusted any more, so it is killed and its ring is read no more; its
    /// death is reported next (`Received::Died` with `damaged`), its tasks
    /// fail as a dead worker's do and the slot can be filled again.
    pub fn condemn(&mut self, slot: u64, why: &'static str) {
        if let Some(w) = self.workers[slot as usize].as_mut() {
            if w.damaged.is_none() {
                w.damaged = Some(why);
                if !w.reaped.load(Ordering::SeqCst) {
                    // (not reaped yet, so the pid is still this worker's)
                    os::kill_process(w.pid);
                }
            }
        }
        self.unfinished[slot as usize] = None;
        self.region.results(slot).close();
    }

    fn is_condemned(&self, slot: u64) -> bool {
        self.workers[slot as usize].as_ref().is_some_and(|w| w.damaged.is_some())
    }

    /// What the worker in `slot` last wrote to its standard error.
    pub fn stderr_tail(&self, slot: u64) -> String {
        self.workers[slot as usize].as_ref().map(|w| tail_text(&w.stderr)).unwrap_or_default()
    }

    /// What the worker in `slot`, which has died, last wrote to its standard
    /// error (a crash report, R's fatal error), once all of it was read: the
    /// thread that reads it may still be at it when the death is seen. Waits
    /// for that at most `STDERR_LAST_READ`.
    pub fn last_words(&self, slot: u64) -> String {
        let Some(w) = self.workers[slot as usize].as_ref() else { return String::new() };
        let until = Instant::now() + STDERR_LAST_READ;
        while !w.stderr.ended.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        tail_text(&w.stderr)
    }

    /// Ends the worker in `slot` (if any) and leaves the slot empty. Returns
    /// the tags of the messages it had not begun (they never ran: the caller
    /// may send them again).
    pub fn vacate(&mut self, slot: u64) -> Vec<u64> {
        if let Some(w) = self.workers[slot as usize].take() {
            retire(vec![w]);
        }
        self.unfinished[slot as usize] = None;
        self.region.tasks(slot).unread_tags()
    }

    /// Starts a worker in the empty `slot`.
    pub fn fill(&mut self, slot: u64) -> Result<(), PoolError> {
        if self.workers[slot as usize].is_some() {
            return Ok(());
        }
        self.start_workers(&[slot])
    }

    /// [`Pool::vacate`], then [`Pool::fill`].
    pub fn replace(&mut self, slot: u64) -> Result<Vec<u64>, PoolError> {
        let unread = self.vacate(slot);
        self.fill(slot)?;
        Ok(unread)
    }

    /// Ends every worker: their sockets close (each worker ends itself when
    /// its socket closes), and one that has not exited within a second is
    /// killed. Returns when every worker has been reaped.
    pub fn stop(&mut self) {
        let workers: Vec<Worker> = self.workers.iter_mut().filter_map(Option::take).collect();
        retire(workers);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn retire(workers: Vec<Worker>) {
    for w in &workers {
        let _ = w.socket.shutdown(std::net::Shutdown::Both);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while workers.iter().any(|w| !w.reaped.load(Ordering::SeqCst)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    for w in &workers {
        if !w.reaped.load(Ordering::SeqCst) {
            // (not reaped yet, so the pid is still this worker's)
            os::kill_process(w.pid);
        }
    }
    for mut w in workers {
        if let Some(m) = w.monitor.take() {
            let _ = m.join();
        }
    }
}

/// Kills and reaps workers that never connected.
fn abandon(children: Vec<Starting>) {
    for mut s in children {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
}

fn keep_tail(mut from: std::process::ChildStderr, tail: StderrTail) {
    let _ = std::thread::Builder::new().name("pageshare-pool-stderr".into()).spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Ok(mut t) = tail.bytes.lock() {
                t.extend_from_slice(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_KEEP);
                t.drain(..excess);
            }
        }
        tail.ended.store(true, Ordering::SeqCst);
    });
}

fn tail_text(tail: &Tail) -> String {
    tail.bytes.lock().map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default()
}
