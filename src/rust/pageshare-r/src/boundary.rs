//! The Rust/R boundary. Nothing unwinds across it, by construction:
//!
//! - Every `.Call` entry point runs its body through [`entry`] and every ALTREP
//!   method through [`method`]: a Rust error or a panic becomes a pending
//!   error, every Rust value is dropped, and the function returns to its C
//!   shell (`src/entry_points.c`, `src/view_methods.c`), which raises the
//!   pending error from a C frame (`src/boundary.c`). Rust code never calls
//!   R's `stop()` or `Rf_error()`.
//! - R API calls that may raise an R error are made through
//!   [`crate::r_calls`], under `R_UnwindProtect`: the R error stops in C,
//!   comes back as an [`RError`] of kind [`ErrorKind::RJump`], travels up like
//!   any error, and the shell resumes R's own error once the Rust frames are gone.
//!
//! The condition has class `c("pageshare_<kind>", "pageshare_error", "error",
//! "condition")`, as the ones R code raises (`R/messages.R`), so every fallback
//! catches both by class. The message reaches R as a length-delimited string,
//! never as a format.

use crate::r_sys::*;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What went wrong, as the class of the R condition (documented in
/// `?pageshare_conditions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not enough space for a segment (carries the bytes needed and free).
    NoSpace,
    /// The segment a view or name refers to is gone.
    SegmentGone,
    /// A file or handle that is not a valid segment of ours (damaged, foreign, stale).
    InvalidSegment,
    /// A name already registered by another live process.
    NameTaken,
    /// No variable of that name is registered in that namespace (or no
    /// process shares an object under that key).
    NotRegistered,
    /// A key under which other data are shared already.
    KeyConflict,
    /// A key whose creation lock another process held for longer than
    /// `pageshare.key_wait` seconds.
    KeyBusy,
    /// The user interrupted a wait (Ctrl-C): the shell raises R's own
    /// interrupt, not an error.
    Interrupted,
    /// The operating system refused access, or a file pageshare must trust is
    /// not safe to use (another user's, a link, open to others).
    Permission,
    /// Too close to the limit on open files to hold one more segment.
    TooManySegments,
    /// A bad argument or option.
    BadArgument,
    /// An object of a type that cannot be shared.
    UnsupportedType,
    /// An environment where segments cannot pass between processes (no /proc).
    UnsupportedEnvironment,
    /// A worker process of the pool could not be started or admitted.
    WorkerSetup,
    /// Any other failure of the operating system.
    System,
    /// A bug in pageshare (a panic).
    Internal,
    /// An R error raised by an R API call (see [`crate::r_calls`]): R's own
    /// condition, resumed once the Rust frames have returned.
    RJump,
}

impl ErrorKind {
    pub fn class(self) -> &'static str {
        match self {
            ErrorKind::NoSpace => "pageshare_no_space",
            ErrorKind::SegmentGone => "pageshare_segment_gone",
            ErrorKind::InvalidSegment => "pageshare_invalid_segment",
            ErrorKind::NameTaken => "pageshare_name_taken",
            ErrorKind::NotRegistered => "pageshare_not_registered",
            ErrorKind::KeyConflict => "pageshare_key_conflict",
            ErrorKind::KeyBusy => "pageshare_key_busy",
            ErrorKind::Interrupted => "interrupt",
            ErrorKind::Permission => "pageshare_permission",
            ErrorKind::TooManySegments => "pageshare_too_many_segments",
            ErrorKind::BadArgument => "pageshare_bad_argument",
            ErrorKind::UnsupportedType => "pageshare_unsupported_type",
            ErrorKind::UnsupportedEnvironment => "pageshare_unsupported_environment",
            ErrorKind::WorkerSetup => "pageshare_worker_setup",
            ErrorKind::System => "pageshare_system",
            ErrorKind::Internal => "pageshare_internal",
            ErrorKind::RJump => "",
        }
    }
}

/// An error on its way to R.
#[derive(Debug)]
pub struct RError {
    pub kind: ErrorKind,
    pub message: String,
    /// For [`ErrorKind::NoSpace`]: bytes needed and bytes free.
    pub space: Option<(u64, u64)>,
}

impl RError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RError {
        RError { kind, message: message.into(), space: None }
    }
    pub fn argument(message: impl Into<String>) -> RError {
        RError::new(ErrorKind::BadArgument, message)
    }
    pub fn invalid(message: impl Into<String>) -> RError {
        RError::new(ErrorKind::InvalidSegment, message)
    }
    pub fn system(message: impl Into<String>) -> RError {
        RError::new(ErrorKind::System, message)
    }
    pub fn internal(message: impl Into<String>) -> RError {
        RError::new(ErrorKind::Internal, message)
    }
    /// An R error stopped by `r_calls::try_r`, to be resumed by the shell.
    pub fn r_jump() -> RError {
        RError::new(ErrorKind::RJump, "")
    }
    /// The same kind, with `prefix: ` before the message.
    pub fn context(mut self, prefix: &str) -> RError {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl From<pageshare_core::Error> for RError {
    fn from(e: pageshare_core::Error) -> RError {
        use pageshare_core::Error as E;
        let kind = match &e {
            E::NoSpace { .. } | E::OverBudget { .. } => ErrorKind::NoSpace,
            E::Missing { .. } => ErrorKind::SegmentGone,
            E::Taken { .. } => ErrorKind::NameTaken,
            E::Invalid { .. } => ErrorKind::InvalidSegment,
            E::Argument(_) => ErrorKind::BadArgument,
            E::Descriptors { .. } => ErrorKind::TooManySegments,
            E::Unsafe { .. } | E::Unreachable { .. } => ErrorKind::Permission,
            E::Unsupported { .. } => ErrorKind::UnsupportedEnvironment,
            E::Os { source, .. } => match source.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => ErrorKind::Permission,
                Some(libc::ENOSPC) => ErrorKind::NoSpace,
                _ => ErrorKind::System,
            },
        };
        let space = match &e {
            E::NoSpace { needed, free, .. } => Some((*needed, *free)),
            E::OverBudget { needed, held, budget } => Some((*needed, budget.saturating_sub(*held))),
            _ => None,
        };
        RError { kind, message: e.to_string(), space }
    }
}

/// Convert a core error (for `map_err`).
pub fn msg(e: pageshare_core::Error) -> RError {
    RError::from(e)
}

pub type RResult = Result<SEXP, RError>;

/// Run `body`; a panic becomes an [`ErrorKind::Internal`] error.
fn run<T>(site: crate::faults::Site, body: impl FnOnce() -> Result<T, RError>) -> Result<T, RError> {
    catch_unwind(AssertUnwindSafe(|| {
        crate::faults::inject(site)?;
        body()
    }))
    .unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        Err(RError::internal(format!("internal error in pageshare (please report): {what}")))
    })
}

/// The body of a `.Call` entry point: its result, or NULL with the error
/// pending for the C shell to raise (never a valid SEXP: R_NilValue is not NULL).
pub fn entry(body: impl FnOnce() -> Result<SEXP, RError>) -> SEXP {
    match run(crate::faults::Site::Entry, body) {
        Ok(v) => v,
        Err(e) => {
            set_pending(e);
            std::ptr::null_mut()
        }
    }
}

/// The body of an ALTREP method: 0 with the answer written to `out`, or 1 with
/// the error pending for the C shell to raise.
///
/// # Safety
/// `out` must be valid for a write of `T`.
pub unsafe fn method<T>(site: crate::faults::Site, out: *mut T, body: impl FnOnce() -> Result<T, RError>) -> c_int {
    match run(site, body) {
        Ok(v) => {
            // SAFETY: the caller's contract.
            unsafe { out.write(v) };
            0
        }
        Err(e) => {
            set_pending(e);
            1
        }
    }
}

const MSG_MAX: usize = 4096;

/// The error waiting for a C shell to raise it.
struct Pending {
    message: [u8; MSG_MAX],
    len: usize,
    kind: ErrorKind,
    space: Option<(u64, u64)>,
}

/// The one `Pending`, in a static so that the shell can read it after every
/// Rust frame has returned.
struct PendingCell(std::cell::UnsafeCell<Pending>);
// SAFETY: only R's main thread runs entry points and ALTREP methods, and each
// access (set_pending, ps_take_pending) finishes before the next starts: there
// is never a second access at the same time.
unsafe impl Sync for PendingCell {}
static PENDING: PendingCell = PendingCell(std::cell::UnsafeCell::new(Pending {
    message: [0; MSG_MAX],
    len: 0,
    kind: ErrorKind::Internal,
    space: None,
}));

fn set_pending(err: RError) {
    // Cut at a character boundary so the R string stays valid UTF-8.
    let mut n = err.message.len().min(MSG_MAX);
    while !err.message.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: main thread only, no other access meanwhile (see PendingCell).
    let p = unsafe { &mut *PENDING.0.get() };
    p.message[..n].copy_from_slice(&err.message.as_bytes()[..n]);
    // R strings cannot hold NUL.
    p.message[..n].iter_mut().filter(|b| **b == 0).for_each(|b| *b = b'?');
    p.len = n;
    p.kind = err.kind;
    p.space = err.space;
}

/// What `ps_raise_pending()` (src/boundary.c) raises; mirrors its `ps_pending_t`.
#[repr(C)]
pub struct PendingForC {
    message: *const c_char,
    message_len: c_int,
    kind: *const c_char,
    kind_len: c_int,
    has_space: c_int,
    needed: f64,
    free: f64,
    resume_r_error: c_int,
}

/// Called by `ps_raise_pending()` (C) to read the pending error. The strings
/// point into statics, valid after this returns.
///
/// # Safety
/// `out` must be valid for a write; main R thread.
#[no_mangle]
pub unsafe extern "C" fn ps_take_pending(out: *mut PendingForC) {
    // SAFETY: main thread only, no other access meanwhile (see PendingCell).
    let p = unsafe { &*PENDING.0.get() };
    let class = p.kind.class();
    let (needed, free) = p.space.unwrap_or((0, 0));
    let value = PendingForC {
        message: p.message.as_ptr().cast(),
        message_len: p.len as c_int,
        kind: class.as_ptr().cast(),
        kind_len: class.len() as c_int,
        has_space: p.space.is_some() as c_int,
        needed: needed as f64,
        free: free as f64,
        resume_r_error: (p.kind == ErrorKind::RJump) as c_int,
    };
    // SAFETY: the caller's contract.
    unsafe { out.write(value) };
}
