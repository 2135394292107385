//! The Rust/R boundary. Every `.Call` entry point and every ALTREP callback runs
//! its body through [`guard`]: a Rust error becomes an R error, a panic becomes an
//! R error, and neither unwinds across the boundary.
//!
//! How an error reaches R: the body returns `Err`, every Rust value is dropped, the
//! message is copied into a static buffer, and only then `Rf_error("%s", buf)`
//! jumps back into R, over frames that hold nothing to drop. The message goes
//! through `"%s"` so a `%` in it can never be read as a format.
//!
//! R API calls that may longjmp themselves (allocation failure) are made where no
//! lock is held; if one happens, at worst a Rust value is leaked (segments are
//! still unlinked at exit).

use crate::rapi::{Rf_error, SEXP};
use std::panic::{catch_unwind, AssertUnwindSafe};

const MSG_MAX: usize = 4096;
static mut MESSAGE: [u8; MSG_MAX] = [0; MSG_MAX];

/// Run `body`; on `Err` or panic, raise an R error with the message.
pub fn guard<T>(body: impl FnOnce() -> Result<T, String>) -> T {
    let msg = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => return v,
        Ok(Err(m)) => m,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            format!("internal error in pageshare (please report): {what}")
        }
    };
    raise(msg)
}

/// Raise an R error carrying `msg`. Never returns.
pub fn raise(msg: String) -> ! {
    let bytes = msg.as_bytes();
    let n = bytes.len().min(MSG_MAX - 1);
    // SAFETY: R is single-threaded and only the main thread raises errors, so
    // nothing else touches MESSAGE; it is NUL-terminated below.
    unsafe {
        let buf = &mut *std::ptr::addr_of_mut!(MESSAGE);
        buf[..n].copy_from_slice(&bytes[..n]);
        buf[n] = 0;
    }
    drop(msg);
    // SAFETY: no Rust value with a destructor is alive in this frame; the format
    // is a literal "%s" and the argument a NUL-terminated static buffer.
    unsafe { Rf_error(c"%s".as_ptr(), std::ptr::addr_of!(MESSAGE).cast::<std::os::raw::c_char>()) }
}

/// Convert a core error to the R-facing message.
pub fn msg(e: pageshare_core::Error) -> String {
    e.to_string()
}

pub type RResult = Result<SEXP, String>;
