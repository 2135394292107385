//! The pool's wire, defined once: every code a message carries between a
//! master and its workers, and every event the master's wait can return.
//! Nothing else in pageshare defines a flag bit, a message kind, a reply
//! status or an event code: the rings move frames ([`Frame`]), the master and
//! the worker read a message's [`Header`] off its tag, and R is given events
//! by their [`EventKind::name`] and fields (pageshare-r's `wire_r.rs`).
//!
//! Everything read off the shared pages comes from another process that may
//! misbehave: every decoder here returns an error for what no correct peer
//! writes, never panics and reads nothing beyond what it is given.

use pageshare_core::cursor::Cursor;

/// The version of this wire. A worker of another wire (or another build of
/// the package) is refused at the handshake: messages change meaning between
/// versions, and a stale worker would misread them silently.
pub const WIRE_VERSION: u32 = 3;

/// The version of the package this wire belongs to (the workspace's version,
/// the R package's `Version:`), carried by the handshake.
pub const PACKAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why bytes are not a message of this wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireError(pub &'static str);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for WireError {}

// ---------------------------------------------------------------------------
// Frames: how a ring carries the pieces of a message.

/// Bytes of a frame's header: payload length (u32), frame flags (u32), tag (u64).
pub const FRAME_HEADER: u64 = 16;
/// The message continues in the next frame.
const FRAME_MORE: u32 = 1;
/// Skip to the start of the ring (a frame never wraps).
const FRAME_WRAP: u32 = 2;
/// The first frame of a message.
const FRAME_START: u32 = 4;

/// A frame's header, as a ring holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// Nothing more before the end of the ring: the next frame is at its start.
    Wrap,
    /// `len` bytes of the message `tag`; `start`: its first frame; `more`:
    /// not its last.
    Part { len: u32, tag: u64, start: bool, more: bool },
}

impl Frame {
    /// The header as the two words a ring stores (native byte order: both
    /// ends are processes of one machine).
    pub fn to_words(self) -> [u64; 2] {
        match self {
            Frame::Wrap => [(FRAME_WRAP as u64) << 32, 0],
            Frame::Part { len, tag, start, more } => {
                let flags = if start { FRAME_START } else { 0 } | if more { FRAME_MORE } else { 0 };
                [(len as u64) | ((flags as u64) << 32), tag]
            }
        }
    }

    pub fn from_words(word: u64, tag: u64) -> Result<Frame, WireError> {
        let (len, flags) = (word as u32, (word >> 32) as u32);
        if flags == FRAME_WRAP {
            return if len == 0 && tag == 0 { Ok(Frame::Wrap) } else { Err(WireError("a wrap marker with contents")) };
        }
        if flags & !(FRAME_MORE | FRAME_START) != 0 {
            return Err(WireError("unknown frame flags"));
        }
        Ok(Frame::Part { len, tag, start: flags & FRAME_START != 0, more: flags & FRAME_MORE != 0 })
    }

    pub fn to_bytes(self) -> [u8; FRAME_HEADER as usize] {
        let [w, t] = self.to_words();
        let mut out = [0u8; FRAME_HEADER as usize];
        out[..8].copy_from_slice(&w.to_ne_bytes());
        out[8..].copy_from_slice(&t.to_ne_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Frame, WireError> {
        let (Some(w), Some(t)) = (bytes.get(..8), bytes.get(8..16)) else {
            return Err(WireError("a frame shorter than its header"));
        };
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        Frame::from_words(word(w), word(t))
    }
}

// ---------------------------------------------------------------------------
// Messages: what a tag says.

/// The master holds every result the worker handed over before: their
/// segments may be let go (master to worker).
pub const RELEASE: u64 = 1 << 63;
/// The message holds no handle: the worker runs such a call in one step,
/// the master reads such a reply in one step (either way).
pub const PLAIN: u64 = 1 << 62;
/// Not a reply but a condition the running task signalled, relayed at once
/// (worker to master).
pub const CONDITION: u64 = 1 << 61;
/// The master let go of segments since this worker's last message: views of
/// them may be stale (master to worker).
pub const SCAN: u64 = 1 << 60;
/// A plain reply that says "ok" and carries the task's value in this wire's
/// own encoding ([`ValueWriter`]), not R's serialization of the whole reply
/// (worker to master).
pub const VALUE: u64 = 1 << 59;
/// A reply whose payload begins with what its task wrote to its standard
/// output and the conditions it signalled ([`Relay`]), to be relayed in the
/// caller; the reply itself follows (worker to master).
pub const RELAY: u64 = 1 << 58;
/// Every flag bit of a tag.
pub const FLAGS: u64 = RELEASE | PLAIN | CONDITION | SCAN | VALUE | RELAY;
/// The largest message number: numbers travel to R as doubles, exact up to 2^53.
pub const MAX_NUMBER: u64 = 1 << 53;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Work for a worker (master to worker).
    Task,
    /// A task's reply (worker to master).
    Reply,
    /// A condition a task signalled while it ran (worker to master).
    Condition,
}

/// A message's header: its kind, its number (the task's, which its reply and
/// its conditions carry too) and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub number: u64,
    /// [`RELEASE`]: only in a task.
    pub release: bool,
    /// [`PLAIN`]: a task or a reply.
    pub plain: bool,
    /// [`SCAN`]: only in a task.
    pub scan: bool,
    /// [`VALUE`]: only in a plain reply.
    pub value: bool,
    /// [`RELAY`]: only in a reply.
    pub relay: bool,
}

impl Header {
    pub fn task(number: u64) -> Header {
        Header { kind: Kind::Task, number, release: false, plain: false, scan: false, value: false, relay: false }
    }

    pub fn reply(number: u64, plain: bool) -> Header {
        Header { kind: Kind::Reply, number, release: false, plain, scan: false, value: false, relay: false }
    }

    /// A plain reply whose payload is the task's value ([`VALUE`]).
    pub fn value_reply(number: u64) -> Header {
        Header { value: true, ..Header::reply(number, true) }
    }

    pub fn condition(number: u64) -> Header {
        Header { kind: Kind::Condition, number, release: false, plain: false, scan: false, value: false, relay: false }
    }

    /// The tag that carries this header; an error for a header no decoder
    /// would accept (a number out of range, a flag its kind cannot have).
    pub fn encode(self) -> Result<u64, WireError> {
        if self.number == 0 || self.number > MAX_NUMBER {
            return Err(WireError("a message number out of range"));
        }
        let bit = |on: bool, b: u64| if on { b } else { 0 };
        match self.kind {
            Kind::Task if !self.value && !self.relay => {}
            Kind::Reply if !self.release && !self.scan && (self.plain || !self.value) => {}
            Kind::Condition if !self.release && !self.scan && !self.plain && !self.value && !self.relay => {}
            _ => return Err(WireError("a flag its kind of message cannot have")),
        }
        Ok(self.number
            | bit(self.release, RELEASE)
            | bit(self.plain, PLAIN)
            | bit(self.scan, SCAN)
            | bit(self.value, VALUE)
            | bit(self.relay, RELAY)
            | bit(self.kind == Kind::Condition, CONDITION))
    }

    /// The header of a message a worker received from its master.
    pub fn decode_task(tag: u64) -> Result<Header, WireError> {
        if tag & (CONDITION | VALUE | RELAY) != 0 {
            return Err(WireError("a task with a flag only a worker sends"));
        }
        Ok(Header {
            kind: Kind::Task,
            number: number(tag)?,
            release: tag & RELEASE != 0,
            plain: tag & PLAIN != 0,
            scan: tag & SCAN != 0,
            value: false,
            relay: false,
        })
    }

    /// The header of a message the master received from a worker.
    pub fn decode_from_worker(tag: u64) -> Result<Header, WireError> {
        if tag & (RELEASE | SCAN) != 0 {
            return Err(WireError("a worker's message with a flag only its master sends"));
        }
        let number = number(tag)?;
        if tag & CONDITION != 0 {
            if tag & (PLAIN | VALUE | RELAY) != 0 {
                return Err(WireError("a condition that says it is plain or a reply"));
            }
            return Ok(Header::condition(number));
        }
        let relay = tag & RELAY != 0;
        match (tag & PLAIN != 0, tag & VALUE != 0) {
            (_, false) => Ok(Header { relay, ..Header::reply(number, tag & PLAIN != 0) }),
            (true, true) => Ok(Header { relay, ..Header::value_reply(number) }),
            (false, true) => Err(WireError("a value reply that is not plain")),
        }
    }
}

fn number(tag: u64) -> Result<u64, WireError> {
    let n = tag & !FLAGS;
    if n == 0 || n > MAX_NUMBER {
        return Err(WireError("a message number out of range"));
    }
    Ok(n)
}

/// How a task ended, as its reply says (`status` of the reply R reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The task's value.
    Ok,
    /// The task's error (and the index of the element that raised it).
    Error,
    /// The worker died while it ran the task (made by the master).
    Died,
    /// A chunk of a map whose worker no longer holds the map: the master
    /// sends it again with the map.
    NeedsStage,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Ok, Status::Error, Status::Died, Status::NeedsStage];

    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Died => "died",
            Status::NeedsStage => "needs_stage",
        }
    }
}

/// The fields of a task as a worker's loop is given it (pageshare-r's
/// `wire_r.rs`): the task's number, its payload, its flags, and `shared`,
/// the value of a plain call run on the way whose result is worth sharing
/// (else NULL).
pub const TASK_FIELDS: [&str; 6] = ["tag", "payload", "release", "plain", "scan", "shared"];

// ---------------------------------------------------------------------------
// Events: what the master's wait returns.

/// What the master's wait found. `W` is what the master keeps with each
/// message until its reply (what to do with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<W> {
    /// A reply to the message kept with `what`; `plain`: it holds no handle;
    /// `value`: its payload is the task's value in this wire's encoding
    /// ([`VALUE`]), else R's serialization of the reply; `relay`: the payload
    /// begins with the task's output and conditions ([`RELAY`], [`Relay`]).
    Reply { what: W, payload: Vec<u8>, plain: bool, value: bool, relay: bool },
    /// The worker in `slot` (0-based), process `pid`, died. `begun`: the
    /// messages it had begun (they failed); `unread`: those it never read
    /// and that were not kept to go again (the kept ones wait again, first);
    /// `waiting`: how many messages wait for a worker. `damaged`: it did not
    /// die by itself but was ended for writing what no worker writes (why).
    /// `last_words`: the end of what it wrote to its standard error (a crash
    /// report, R's fatal error; empty when it wrote nothing).
    Died {
        slot: u64,
        pid: u32,
        begun: Vec<W>,
        unread: Vec<W>,
        waiting: usize,
        damaged: Option<&'static str>,
        last_words: String,
    },
    /// The user interrupted the wait.
    Interrupted,
    /// The wait's time is up.
    TimedOut,
    /// No message is out (a wait that does not wait for deaths).
    Idle,
    /// A reply out of step (a bug): the worker's slot, the reply's number
    /// and the number expected (`None`: the worker had no message).
    OutOfStep { slot: u64, number: u64, expected: Option<u64> },
    /// A condition a task signalled, relayed at once.
    Condition { payload: Vec<u8> },
    /// A plain reply to a call, read and delivered to its task on the way
    /// (the plain path, in the entry point that waits).
    Delivered,
}

/// An event without its contents: its name and the fields R is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Reply,
    Died,
    Interrupted,
    TimedOut,
    Idle,
    OutOfStep,
    Condition,
    Delivered,
}

impl EventKind {
    pub const ALL: [EventKind; 8] = [
        EventKind::Reply,
        EventKind::Died,
        EventKind::Interrupted,
        EventKind::TimedOut,
        EventKind::Idle,
        EventKind::OutOfStep,
        EventKind::Condition,
        EventKind::Delivered,
    ];

    /// Its name, the value of the field `event`.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Reply => "reply",
            EventKind::Died => "died",
            EventKind::Interrupted => "interrupted",
            EventKind::TimedOut => "timed_out",
            EventKind::Idle => "idle",
            EventKind::OutOfStep => "out_of_step",
            EventKind::Condition => "condition",
            EventKind::Delivered => "delivered",
        }
    }

    /// The fields of the event as R is given it, `event` first, in order.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            EventKind::Reply => &["event", "what", "payload", "plain", "value", "relay"],
            EventKind::Died => &["event", "slot", "pid", "begun", "unread", "waiting", "damaged", "last_words"],
            EventKind::OutOfStep => &["event", "slot", "tag", "expected"],
            EventKind::Condition => &["event", "payload"],
            EventKind::Interrupted | EventKind::TimedOut | EventKind::Idle | EventKind::Delivered => &["event"],
        }
    }

    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl<W> Event<W> {
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Reply { .. } => EventKind::Reply,
            Event::Died { .. } => EventKind::Died,
            Event::Interrupted => EventKind::Interrupted,
            Event::TimedOut => EventKind::TimedOut,
            Event::Idle => EventKind::Idle,
            Event::OutOfStep { .. } => EventKind::OutOfStep,
            Event::Condition { .. } => EventKind::Condition,
            Event::Delivered => EventKind::Delivered,
        }
    }

    /// A reply that may hold handles: nothing more goes to the workers until
    /// R has read it (see pageshare-r's pool_master.rs).
    pub fn holds_handles(&self) -> bool {
        matches!(self, Event::Reply { plain: false, .. })
    }
}

// ---------------------------------------------------------------------------
// Values: R's vectors without attributes (and lists of them) in the wire's
// own encoding, for a plain call's arguments and a plain reply's value, so
// that the hot path needs neither R's serializer nor a writer of its format.
// An item is its kind (one byte), then for a vector its length (u64) and its
// elements (native byte order: both ends are processes of one machine); a
// string is its mark (one byte, or NA_STRING), then its length (u32) and bytes.

/// What an item of a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    Null,
    Logical,
    Integer,
    Double,
    Complex,
    Raw,
    Character,
    List,
}

impl ValueKind {
    pub const ALL: [ValueKind; 8] = [
        ValueKind::Null,
        ValueKind::Logical,
        ValueKind::Integer,
        ValueKind::Double,
        ValueKind::Complex,
        ValueKind::Raw,
        ValueKind::Character,
        ValueKind::List,
    ];

    fn code(self) -> u8 {
        ValueKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u8
    }

    /// Bytes of one element of an atomic kind; `None` for the others.
    pub fn element_size(self) -> Option<usize> {
        match self {
            ValueKind::Logical | ValueKind::Integer => Some(4),
            ValueKind::Double => Some(8),
            ValueKind::Complex => Some(16),
            ValueKind::Raw => Some(1),
            ValueKind::Null | ValueKind::Character | ValueKind::List => None,
        }
    }
}

/// How a string's bytes are to be read (R's encoding marks of a string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringMark {
    Native,
    Utf8,
    Latin1,
    Bytes,
    Ascii,
}

impl StringMark {
    pub const ALL: [StringMark; 5] =
        [StringMark::Native, StringMark::Utf8, StringMark::Latin1, StringMark::Bytes, StringMark::Ascii];
}

/// The mark of R's NA_STRING.
const NA_STRING: u8 = 255;

/// The deepest nesting of lists a value may have: deeper values travel as
/// R's serialization.
pub const MAX_DEPTH: usize = 32;

/// A string of a character vector: `None` is NA.
pub type WireString<'a> = Option<(StringMark, &'a [u8])>;

/// Writes the items of a value, in order, at the end of a buffer.
pub struct ValueWriter<'a> {
    pub out: &'a mut Vec<u8>,
}

impl ValueWriter<'_> {
    fn head(&mut self, kind: ValueKind, len: usize) {
        self.out.push(kind.code());
        self.out.extend_from_slice(&(len as u64).to_ne_bytes());
    }

    pub fn null(&mut self) {
        self.out.push(ValueKind::Null.code());
    }

    /// A vector of an atomic `kind` whose `len` elements are `data`.
    pub fn atomic(&mut self, kind: ValueKind, len: usize, data: &[u8]) {
        debug_assert_eq!(kind.element_size().map(|s| s * len), Some(data.len()));
        self.head(kind, len);
        self.out.extend_from_slice(data);
    }

    /// A character vector of `len` strings, which follow ([`ValueWriter::string`]).
    pub fn strings(&mut self, len: usize) {
        self.head(ValueKind::Character, len);
    }

    pub fn string(&mut self, s: WireString) {
        match s {
            None => self.out.push(NA_STRING),
            Some((mark, bytes)) => {
                self.out.push(StringMark::ALL.iter().position(|m| *m == mark).unwrap_or(0) as u8);
                self.out.extend_from_slice(&(bytes.len() as u32).to_ne_bytes());
                self.out.extend_from_slice(bytes);
            }
        }
    }

    /// A list of `len` items, which follow.
    pub fn list(&mut self, len: usize) {
        self.head(ValueKind::List, len);
    }

    /// Bytes of an item's head (kind and length) and of a string's head.
    pub const HEAD: usize = 9;
    pub const STRING_HEAD: usize = 5;
}

/// An item read; a character vector's strings and a list's items follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    Null,
    Atomic { kind: ValueKind, len: usize, data: &'a [u8] },
    Strings { len: usize },
    List { len: usize },
}

/// Reads the items of a value, in order. Every length is checked against the
/// bytes left (each element takes at least one byte), so no reader allocates
/// more than the bytes it was given could hold.
#[derive(Debug, Clone, Copy)]
pub struct ValueReader<'a> {
    bytes: Cursor<'a>,
}

impl<'a> ValueReader<'a> {
    pub fn new(bytes: &'a [u8]) -> ValueReader<'a> {
        ValueReader { bytes: Cursor::new(bytes) }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        self.bytes.take(n).ok_or(WireError("a value ends early"))
    }

    fn left(&self) -> usize {
        self.bytes.left()
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes.rest()
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        Ok(u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
    }

    pub fn item(&mut self) -> Result<Item<'a>, WireError> {
        let code = self.take(1)?[0];
        let kind = *ValueKind::ALL.get(code as usize).ok_or(WireError("an unknown kind of value"))?;
        if kind == ValueKind::Null {
            return Ok(Item::Null);
        }
        let len = usize::try_from(self.u64()?).map_err(|_| WireError("a value's length out of range"))?;
        if len > self.left() {
            return Err(WireError("a value longer than its bytes"));
        }
        Ok(match kind.element_size() {
            Some(size) => {
                let bytes = len.checked_mul(size).ok_or(WireError("a value's length out of range"))?;
                Item::Atomic { kind, len, data: self.take(bytes)? }
            }
            None if kind == ValueKind::Character => Item::Strings { len },
            None => Item::List { len },
        })
    }

    pub fn string(&mut self) -> Result<WireString<'a>, WireError> {
        let code = self.take(1)?[0];
        if code == NA_STRING {
            return Ok(None);
        }
        let mark = *StringMark::ALL.get(code as usize).ok_or(WireError("an unknown mark of a string"))?;
        let n = u32::from_ne_bytes(self.take(4)?.try_into().unwrap_or([0; 4]));
        if n > i32::MAX as u32 {
            return Err(WireError("a string too long for R"));
        }
        let bytes = self.take(n as usize)?;
        // (R's strings hold no NUL: R refuses to make one)
        if bytes.contains(&0) {
            return Err(WireError("a string with a NUL byte"));
        }
        Ok(Some((mark, bytes)))
    }

    /// Every byte was read.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.bytes.left() == 0 {
            Ok(())
        } else {
            Err(WireError("bytes after a value"))
        }
    }
}

/// A value as Rust holds it (tests, and readers without R).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Atomic(ValueKind, Vec<u8>),
    Strings(Vec<Option<(StringMark, Vec<u8>)>>),
    List(Vec<Value>),
}

impl Value {
    pub fn encode(&self, w: &mut ValueWriter) {
        match self {
            Value::Null => w.null(),
            Value::Atomic(kind, data) => {
                let size = kind.element_size().unwrap_or(1);
                w.atomic(*kind, data.len() / size, data)
            }
            Value::Strings(v) => {
                w.strings(v.len());
                for s in v {
                    w.string(s.as_ref().map(|(m, b)| (*m, &b[..])));
                }
            }
            Value::List(v) => {
                w.list(v.len());
                for x in v {
                    x.encode(w);
                }
            }
        }
    }

    /// The value `bytes` hold, all of them.
    pub fn decode(bytes: &[u8]) -> Result<Value, WireError> {
        let mut r = ValueReader::new(bytes);
        let v = Value::read(&mut r, 0)?;
        r.finish()?;
        Ok(v)
    }

    fn read(r: &mut ValueReader, depth: usize) -> Result<Value, WireError> {
        Ok(match r.item()? {
            Item::Null => Value::Null,
            Item::Atomic { kind, data, .. } => Value::Atomic(kind, data.to_vec()),
            Item::Strings { len } => Value::Strings(
                (0..len).map(|_| Ok(r.string()?.map(|(m, b)| (m, b.to_vec())))).collect::<Result<_, _>>()?,
            ),
            Item::List { len } => {
                if depth >= MAX_DEPTH {
                    return Err(WireError("a value nested too deep"));
                }
                Value::List((0..len).map(|_| Value::read(r, depth + 1)).collect::<Result<_, _>>()?)
            }
        })
    }
}

// ---------------------------------------------------------------------------
// A relay: what a task wrote to its standard output and the conditions it
// signalled (other than errors and those relayed at once), at the head of its
// reply's payload when the reply's tag has RELAY. The output's length (u64)
// and bytes, the number of conditions (u64), then each condition's length
// (u64) and bytes (R's serialization of the condition, made by R's
// serializer). The reply's own payload follows.

/// The fields of a relay as R is given it (the field `relay` of a reply event).
pub const RELAY_FIELDS: [&str; 2] = ["stdout", "conditions"];

/// A task's output and conditions, as the master reads them off a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay<'a> {
    pub stdout: &'a [u8],
    pub conditions: Vec<&'a [u8]>,
}

impl<'a> Relay<'a> {
    /// Writes a relay of `stdout` and `conditions` to `out`.
    pub fn write<C: AsRef<[u8]>>(out: &mut Vec<u8>, stdout: &[u8], conditions: &[C]) {
        out.extend_from_slice(&(stdout.len() as u64).to_ne_bytes());
        out.extend_from_slice(stdout);
        out.extend_from_slice(&(conditions.len() as u64).to_ne_bytes());
        for c in conditions {
            let c = c.as_ref();
            out.extend_from_slice(&(c.len() as u64).to_ne_bytes());
            out.extend_from_slice(c);
        }
    }

    /// The relay at the head of `payload`, and the reply's bytes after it.
    pub fn split(payload: &'a [u8]) -> Result<(Relay<'a>, &'a [u8]), WireError> {
        let mut r = ValueReader::new(payload);
        let len =
            |r: &mut ValueReader<'a>| usize::try_from(r.u64()?).map_err(|_| WireError("a relay's length out of range"));
        let n = len(&mut r)?;
        let stdout = r.take(n)?;
        let count = len(&mut r)?;
        // (each condition takes at least its length's 8 bytes)
        if count > r.left() / 8 {
            return Err(WireError("a relay with more conditions than its bytes"));
        }
        let mut conditions = Vec::with_capacity(count);
        for _ in 0..count {
            let n = len(&mut r)?;
            conditions.push(r.take(n)?);
        }
        Ok((Relay { stdout, conditions }, r.rest()))
    }

    pub fn is_empty(&self) -> bool {
        self.stdout.is_empty() && self.conditions.is_empty()
    }
}

// ---------------------------------------------------------------------------
// A plain call: the payload of a task with PLAIN. The function's bytes (R's
// serialization, made by R's serializer), the master's threshold, and the
// arguments: a list of values and their names (`Null` or a character vector)
// in the wire's encoding, or, where they are not simple, R's serialization of
// list(values, names).

/// A plain call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Args<'a> {
    /// A list item then its names, in the wire's encoding.
    Values(&'a [u8]),
    /// R's serialization of list(values, names).
    Serialized(&'a [u8]),
}

/// A plain call, as a worker reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlainCall<'a> {
    pub function: &'a [u8],
    pub threshold: f64,
    pub args: Args<'a>,
}

impl<'a> PlainCall<'a> {
    /// Writes a plain call's head to `out`; its arguments follow (as
    /// `values` says: the wire's encoding or R's serialization).
    pub fn write_head(out: &mut Vec<u8>, function: &[u8], threshold: f64, values: bool) {
        out.extend_from_slice(&(function.len() as u64).to_ne_bytes());
        out.extend_from_slice(function);
        out.extend_from_slice(&threshold.to_ne_bytes());
        out.push(if values { 0 } else { 1 });
    }

    pub fn decode(bytes: &'a [u8]) -> Result<PlainCall<'a>, WireError> {
        let mut r = ValueReader::new(bytes);
        let n = usize::try_from(r.u64()?).map_err(|_| WireError("a plain call's function out of range"))?;
        let function = r.take(n)?;
        let threshold = f64::from_bits(r.u64()?);
        let rest = r.rest();
        let (&kind, args) = rest.split_first().ok_or(WireError("a plain call without its arguments"))?;
        let args = match kind {
            0 => Args::Values(args),
            1 => Args::Serialized(args),
            _ => return Err(WireError("a plain call's arguments of an unknown kind")),
        };
        Ok(PlainCall { function, threshold, args })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip() {
        for f in [
            Frame::Wrap,
            Frame::Part { len: 0, tag: 1, start: true, more: false },
            Frame::Part { len: u32::MAX, tag: u64::MAX, start: false, more: true },
            Frame::Part { len: 17, tag: 5 | PLAIN, start: true, more: true },
        ] {
            let [w, t] = f.to_words();
            assert_eq!(Frame::from_words(w, t), Ok(f));
            assert_eq!(Frame::from_bytes(&f.to_bytes()), Ok(f));
        }
    }

    #[test]
    fn frames_no_sender_writes_are_errors() {
        assert!(Frame::from_words(8 << 32, 0).is_err(), "unknown flag");
        assert!(Frame::from_words((2 << 32) | 5, 0).is_err(), "wrap with a length");
        assert!(Frame::from_words(2 << 32, 9).is_err(), "wrap with a tag");
        assert!(Frame::from_words(3 << 32, 0).is_err(), "wrap with another flag");
        assert!(Frame::from_bytes(&[0; 15]).is_err(), "short");
    }

    #[test]
    fn headers_round_trip_and_keep_their_flags() {
        let mut t = Header::task(7);
        t.release = true;
        t.scan = true;
        let tag = t.encode().unwrap();
        assert_eq!(tag, 7 | RELEASE | SCAN);
        assert_eq!(Header::decode_task(tag), Ok(t));
        let r = Header::reply(MAX_NUMBER, true);
        assert_eq!(Header::decode_from_worker(r.encode().unwrap()), Ok(r));
        let c = Header::condition(3);
        assert_eq!(c.encode(), Ok(3 | CONDITION));
        assert_eq!(Header::decode_from_worker(3 | CONDITION), Ok(c));
    }

    #[test]
    fn headers_a_peer_should_not_send_are_errors() {
        assert!(Header::decode_task(0).is_err(), "number 0");
        assert!(Header::decode_task(MAX_NUMBER + 1).is_err(), "number too large");
        assert!(Header::decode_task(1 << 58).is_err(), "reserved bit");
        assert!(Header::decode_task(1 | VALUE).is_err(), "a task as a value");
        assert!(Header::decode_from_worker(1 | VALUE).is_err(), "a value reply that is not plain");
        assert!(Header::decode_from_worker(1 | VALUE | PLAIN | CONDITION).is_err(), "a value condition");
        let v = Header::value_reply(9);
        assert_eq!(Header::decode_from_worker(v.encode().unwrap()), Ok(v));
        assert!(Header::decode_task(1 | CONDITION).is_err(), "a task as a condition");
        assert!(Header::decode_from_worker(1 | RELEASE).is_err(), "release from a worker");
        assert!(Header::decode_from_worker(1 | SCAN).is_err(), "scan from a worker");
        assert!(Header::decode_from_worker(1 | CONDITION | PLAIN).is_err(), "a plain condition");
        assert!(Header { release: true, ..Header::reply(1, false) }.encode().is_err());
        assert!(Header::task(0).encode().is_err());
    }

    #[test]
    fn event_names_are_distinct_and_name_their_kind() {
        let names: std::collections::HashSet<_> = EventKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), EventKind::ALL.len());
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_name(k.name()), Some(k));
            assert_eq!(k.fields()[0], "event");
        }
        assert_eq!(EventKind::from_name("7"), None);
        let statuses: std::collections::HashSet<_> = Status::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(statuses.len(), Status::ALL.len());
    }

    fn sample_value() -> Value {
        Value::List(vec![
            Value::Null,
            Value::Atomic(ValueKind::Integer, 7i32.to_ne_bytes().to_vec()),
            Value::Atomic(ValueKind::Double, vec![]),
            Value::Strings(vec![
                None,
                Some((StringMark::Utf8, "\u{e9}t\u{e9}".as_bytes().to_vec())),
                Some((StringMark::Ascii, vec![])),
            ]),
            Value::List(vec![Value::Atomic(ValueKind::Raw, vec![1, 2, 3])]),
        ])
    }

    #[test]
    fn values_round_trip_and_reject_what_no_writer_writes() {
        let v = sample_value();
        let mut out = Vec::new();
        v.encode(&mut ValueWriter { out: &mut out });
        assert_eq!(Value::decode(&out), Ok(v));
        assert!(Value::decode(&out[..out.len() - 1]).is_err(), "short");
        let mut longer = out.clone();
        longer.push(0);
        assert!(Value::decode(&longer).is_err(), "trailing bytes");
        assert!(Value::decode(&[99]).is_err(), "unknown kind");
        let mut huge = vec![ValueKind::List.code()];
        huge.extend_from_slice(&u64::MAX.to_ne_bytes());
        assert!(Value::decode(&huge).is_err(), "a length beyond the bytes");
        let mut deep = Vec::new();
        for _ in 0..=MAX_DEPTH {
            ValueWriter { out: &mut deep }.list(1);
        }
        ValueWriter { out: &mut deep }.null();
        assert!(Value::decode(&deep).is_err(), "too deep");
    }

    #[test]
    fn plain_calls_round_trip() {
        let mut out = Vec::new();
        PlainCall::write_head(&mut out, b"fun", 0.5, true);
        out.extend_from_slice(b"args");
        assert_eq!(
            PlainCall::decode(&out),
            Ok(PlainCall { function: b"fun", threshold: 0.5, args: Args::Values(b"args") })
        );
        out[3 + 8 + 8] = 1;
        assert_eq!(PlainCall::decode(&out).map(|c| c.args), Ok(Args::Serialized(b"args")));
        out[3 + 8 + 8] = 2;
        assert!(PlainCall::decode(&out).is_err());
        assert!(PlainCall::decode(&out[..10]).is_err());
    }

    #[test]
    fn relays_round_trip_and_reject_what_no_writer_writes() {
        let mut out = Vec::new();
        Relay::write(&mut out, b"hello\n", &[&b"w1"[..], &b""[..], &b"m2"[..]]);
        out.extend_from_slice(b"reply");
        let (relay, rest) = Relay::split(&out).unwrap();
        assert_eq!(relay, Relay { stdout: b"hello\n", conditions: vec![&b"w1"[..], &b""[..], &b"m2"[..]] });
        assert_eq!(rest, b"reply");
        assert!(!relay.is_empty());
        let mut empty = Vec::new();
        Relay::write::<&[u8]>(&mut empty, b"", &[]);
        assert_eq!(Relay::split(&empty).map(|(r, rest)| (r.is_empty(), rest.len())), Ok((true, 0)));
        assert!(Relay::split(&out[..7]).is_err(), "short");
        let mut many = Vec::new();
        many.extend_from_slice(&0u64.to_ne_bytes());
        many.extend_from_slice(&u64::MAX.to_ne_bytes());
        assert!(Relay::split(&many).is_err(), "more conditions than bytes");
        let mut long = Vec::new();
        long.extend_from_slice(&u64::MAX.to_ne_bytes());
        assert!(Relay::split(&long).is_err(), "output longer than its bytes");
        // (a reply with a relay; a task or a condition never has one)
        let r = Header { relay: true, ..Header::value_reply(4) };
        assert_eq!(r.encode(), Ok(4 | PLAIN | VALUE | RELAY));
        assert_eq!(Header::decode_from_worker(4 | PLAIN | VALUE | RELAY), Ok(r));
        assert!(Header::decode_task(4 | RELAY).is_err());
        assert!(Header::decode_from_worker(4 | CONDITION | RELAY).is_err());
        assert!(Header { relay: true, ..Header::task(4) }.encode().is_err());
        assert!(Header { relay: true, ..Header::condition(4) }.encode().is_err());
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let mark = prop::sample::select(StringMark::ALL.to_vec());
        let atomic = (1usize..6, prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, len)| {
            let kind = ValueKind::ALL[k];
            let size = kind.element_size().unwrap_or(1);
            Value::Atomic(kind, (0..len.len() * size).map(|i| i as u8).collect())
        });
        let strings = prop::collection::vec(prop::option::of((mark, prop::collection::vec(1u8.., 0..5))), 0..4)
            .prop_map(Value::Strings);
        let leaf = prop_oneof![Just(Value::Null), atomic, strings];
        leaf.prop_recursive(4, 24, 4, |inner| prop::collection::vec(inner, 0..4).prop_map(Value::List))
    }

    proptest! {
        // Any 16 bytes are a frame header or an error, and a header that
        // decodes encodes back to the same bytes (no two readings of one header).
        #[test]
        fn any_bytes_are_a_frame_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = Frame::from_bytes(&bytes) {
                prop_assert_eq!(&f.to_bytes()[..], &bytes[..16]);
            } else {
                prop_assert!(bytes.len() < 16 || Frame::from_bytes(&bytes[..16]).is_err());
            }
        }

        // Any tag is a header or an error, either way; one that decodes
        // encodes back to itself.
        #[test]
        fn any_tag_is_a_header_or_an_error(tag in any::<u64>(), low in 0u64..4096, flags in 0u64..64) {
            for tag in [tag, low | (flags << 58)] {
                if let Ok(h) = Header::decode_task(tag) {
                    prop_assert_eq!(h.encode(), Ok(tag));
                }
                if let Ok(h) = Header::decode_from_worker(tag) {
                    prop_assert_eq!(h.encode(), Ok(tag));
                }
            }
        }

        // Every header that encodes decodes back to itself on its side.
        #[test]
        fn headers_that_encode_decode(number in 0u64..=MAX_NUMBER + 1, kind in 0u8..3,
                                      release: bool, plain: bool, scan: bool, value: bool, relay: bool) {
            let kind = [Kind::Task, Kind::Reply, Kind::Condition][kind as usize];
            let h = Header { kind, number, release, plain, scan, value, relay };
            if let Ok(tag) = h.encode() {
                let back = if kind == Kind::Task { Header::decode_task(tag) } else { Header::decode_from_worker(tag) };
                prop_assert_eq!(back, Ok(h));
            }
        }

        // Any bytes are a value or an error, never a panic; a value that
        // decodes encodes back to the same bytes.
        #[test]
        fn any_bytes_are_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(v) = Value::decode(&bytes) {
                let mut out = Vec::new();
                v.encode(&mut ValueWriter { out: &mut out });
                prop_assert_eq!(&out, &bytes);
            }
            let _ = PlainCall::decode(&bytes);
        }

        // Any bytes are a relay and the rest, or an error, never a panic; a
        // relay that decodes writes back to the bytes it was read from.
        #[test]
        fn any_bytes_are_a_relay_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..96)) {
            if let Ok((relay, rest)) = Relay::split(&bytes) {
                let mut out = Vec::new();
                Relay::write(&mut out, relay.stdout, &relay.conditions);
                out.extend_from_slice(rest);
                prop_assert_eq!(&out, &bytes);
            }
        }

        // A relay written, cut or changed anywhere, is a relay or an error.
        #[test]
        fn damaged_relays_are_relays_or_errors(stdout in prop::collection::vec(any::<u8>(), 0..24),
                                               conditions in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..4),
                                               at in any::<prop::sample::Index>(), byte: u8) {
            let mut out = Vec::new();
            Relay::write(&mut out, &stdout, &conditions);
            let (relay, rest) = Relay::split(&out).unwrap();
            prop_assert_eq!(relay.stdout, &stdout[..]);
            prop_assert_eq!(relay.conditions, conditions.iter().map(|c| &c[..]).collect::<Vec<_>>());
            prop_assert!(rest.is_empty());
            let i = at.index(out.len());
            let _ = Relay::split(&out[..i]);
            out[i] = byte;
            let _ = Relay::split(&out);
        }

        // Bytes of a value, cut or changed anywhere, are a value or an error.
        #[test]
        fn damaged_values_are_values_or_errors(v in arb_value(), at in any::<prop::sample::Index>(), byte: u8) {
            let mut out = Vec::new();
            v.encode(&mut ValueWriter { out: &mut out });
            prop_assert_eq!(Value::decode(&out), Ok(v));
            if !out.is_empty() {
                let i = at.index(out.len());
                let _ = Value::decode(&out[..i]);
                out[i] = byte;
                let _ = Value::decode(&out);
            }
        }
    }
}
