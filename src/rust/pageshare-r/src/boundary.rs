//! The Rust/R boundary. Every `.Call` entry point and every ALTREP callback runs
//! its body through [`guard`]: a Rust error becomes a classed R condition, a
//! panic becomes one too, and neither unwinds across the boundary.
//!
//! How an error reaches R: the body returns `Err(RError)`, every Rust value is
//! dropped, the message and the numbers of the condition are copied into
//! statics, and only then the condition object is built and signalled with R's
//! `stop()`, which jumps back into R over frames that hold nothing to drop. The
//! condition has class `c("pageshare_<kind>", "pageshare_error", "error",
//! "condition")`, as the ones R code raises (`R/messages.R`), so every fallback
//! catches both by class. The message is stored as an R string, never used as
//! a format.
//!
//! R API calls that may longjmp themselves (allocation failure) are made where no
//! lock is held; if one happens, at worst a Rust value is leaked (segments are
//! still unlinked at exit).

use crate::rapi::*;
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
    /// No variable of that name is registered in that namespace.
    NotRegistered,
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
    /// Any other failure of the operating system.
    System,
    /// A bug in pageshare (a panic).
    Internal,
}

impl ErrorKind {
    pub fn class(self) -> &'static str {
        match self {
            ErrorKind::NoSpace => "pageshare_no_space",
            ErrorKind::SegmentGone => "pageshare_segment_gone",
            ErrorKind::InvalidSegment => "pageshare_invalid_segment",
            ErrorKind::NameTaken => "pageshare_name_taken",
            ErrorKind::NotRegistered => "pageshare_not_registered",
            ErrorKind::Permission => "pageshare_permission",
            ErrorKind::TooManySegments => "pageshare_too_many_segments",
            ErrorKind::BadArgument => "pageshare_bad_argument",
            ErrorKind::UnsupportedType => "pageshare_unsupported_type",
            ErrorKind::UnsupportedEnvironment => "pageshare_unsupported_environment",
            ErrorKind::System => "pageshare_system",
            ErrorKind::Internal => "pageshare_internal",
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

/// Run `body`; on `Err` or panic, signal the classed R condition.
pub fn guard<T>(body: impl FnOnce() -> Result<T, RError>) -> T {
    let err = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            RError::internal(format!("internal error in pageshare (please report): {what}"))
        }
    };
    raise(err)
}

const MSG_MAX: usize = 4096;

/// What `raise` signals, kept outside every Rust frame that could be jumped over.
struct Pending {
    message: [u8; MSG_MAX],
    len: usize,
    class: &'static str,
    space: Option<(u64, u64)>,
}

/// The one `Pending`, in a static: R may jump out of `signal_pending`, so no
/// lock guard or other value with a destructor may hold it.
struct PendingCell(std::cell::UnsafeCell<Pending>);
// SAFETY: only R's main thread raises errors (every entry point and callback
// runs there), and `raise` finishes with the cell before signalling: there is
// never a second access at the same time.
unsafe impl Sync for PendingCell {}
static PENDING: PendingCell =
    PendingCell(std::cell::UnsafeCell::new(Pending { message: [0; MSG_MAX], len: 0, class: "", space: None }));

/// Signal `err` in R as a classed condition. Never returns.
pub fn raise(err: RError) -> ! {
    // Cut at a character boundary so the R string stays valid UTF-8.
    let mut n = err.message.len().min(MSG_MAX);
    while !err.message.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: R is single-threaded and only the main thread raises errors, so
    // nothing else touches PENDING.
    unsafe {
        let p = &mut *PENDING.0.get();
        p.message[..n].copy_from_slice(&err.message.as_bytes()[..n]);
        p.len = n;
        p.class = err.kind.class();
        p.space = err.space;
    }
    drop(err);
    // SAFETY: no Rust value with a destructor is alive in this frame; every
    // string comes from the statics above; the condition is protected until
    // stop() takes it (and never returns).
    unsafe { signal_pending() }
}

unsafe fn signal_pending() -> ! {
    // SAFETY: see `raise`; all calls are R's API on the main thread.
    unsafe {
        let p = &*PENDING.0.get();
        let fields: &[&str] =
            if p.space.is_some() { &["message", "call", "needed", "free"] } else { &["message", "call"] };
        let cond = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, fields.len() as R_xlen_t));
        let names = Rf_protect(Rf_allocVector(SEXPTYPE::STRSXP, fields.len() as R_xlen_t));
        for (i, f) in fields.iter().enumerate() {
            SET_STRING_ELT(names, i as R_xlen_t, Rf_mkCharLenCE(f.as_ptr().cast(), f.len() as i32, cetype_t::CE_UTF8));
        }
        let text = Rf_mkCharLenCE(p.message.as_ptr().cast(), p.len as i32, cetype_t::CE_UTF8);
        SET_VECTOR_ELT(cond, 0, Rf_ScalarString(text));
        if let Some((needed, free)) = p.space {
            SET_VECTOR_ELT(cond, 2, Rf_ScalarReal(needed as f64));
            SET_VECTOR_ELT(cond, 3, Rf_ScalarReal(free as f64));
        }
        Rf_setAttrib(cond, R_NamesSymbol, names);
        let classes = [p.class, "pageshare_error", "error", "condition"];
        let class = Rf_protect(Rf_allocVector(SEXPTYPE::STRSXP, classes.len() as R_xlen_t));
        for (i, c) in classes.iter().enumerate() {
            SET_STRING_ELT(class, i as R_xlen_t, Rf_mkCharLenCE(c.as_ptr().cast(), c.len() as i32, cetype_t::CE_UTF8));
        }
        Rf_setAttrib(cond, R_ClassSymbol, class);
        let call = Rf_protect(Rf_lang2(Rf_install(c"stop".as_ptr()), cond));
        Rf_eval(call, R_BaseEnv);
        // stop() does not return; should it ever, fail as R would.
        Rf_error(c"%s".as_ptr(), c"pageshare: an error could not be signalled".as_ptr())
    }
}
