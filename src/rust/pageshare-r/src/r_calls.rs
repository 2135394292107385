#![allow(clippy::not_unsafe_ptr_arg_deref)] // SEXPs are R's handles, valid on its main thread by R's contract
//! R API calls that may raise an R error (allocation failure, a bad string, a
//! warning turned into an error, an ALTREP method of another package), made
//! so that the error never jumps over a Rust frame: each runs under
//! `R_UnwindProtect` in a C frame (`ps_try_r`, src/boundary.c) and comes
//! back as `Err(RError::r_jump())`, which the entry point's shell resumes as
//! R's own error once every Rust frame has returned (see boundary.rs).
//!
//! Calls that cannot raise (reading a vector's type or an element of an
//! ordinary vector, `R_altrep_data1`) are made directly.

use crate::boundary::RError;
use crate::r_sys::*;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

#[allow(improper_ctypes)] // SEXPREC is opaque: only pointers to it cross.
extern "C" {
    /// src/boundary.c: `body(data)` under R_UnwindProtect; `*jumped` set to 1
    /// if it raised an R error (stopped there, pending for the shell).
    fn ps_try_r(body: unsafe extern "C" fn(*mut c_void) -> SEXP, data: *mut c_void, jumped: *mut c_int) -> SEXP;
    /// src/boundary.c: did the user interrupt? (the interrupt is taken).
    fn ps_interrupt_pending() -> c_int;
}

/// Has the user interrupted (Ctrl-C) since R last looked? The interrupt is
/// taken: the caller ends what it waits for and lets R raise it (see R/pool.R).
pub fn interrupted() -> bool {
    // SAFETY: R's main thread (every caller is an entry point's body); the
    // check cannot jump out of ps_interrupt_pending.
    unsafe { ps_interrupt_pending() != 0 }
}

/// Run `f`, which calls R's API, so that an R error it raises comes back as
/// `Err`. `f` must be `Copy`: it owns nothing that needs dropping, so R's
/// jump out of it (to the C frame of `ps_try_r`) skips no destructor.
pub fn try_r<T: Copy, F: FnOnce() -> T + Copy>(f: F) -> Result<T, RError> {
    struct Call<F, T> {
        f: F,
        out: Option<T>,
    }
    unsafe extern "C" fn body<F: FnOnce() -> T + Copy, T: Copy>(data: *mut c_void) -> SEXP {
        // SAFETY: `data` is the `Call` below, alive for the whole call; this
        // frame holds only Copy values, so a jump out of `f` drops nothing.
        unsafe {
            let call = &mut *data.cast::<Call<F, T>>();
            call.out = Some((call.f)());
            R_NilValue
        }
    }
    let mut call = Call { f, out: None };
    let mut jumped: c_int = 0;
    // SAFETY: ps_try_r calls `body` once with our pointer, on R's main thread.
    unsafe { ps_try_r(body::<F, T>, (&mut call as *mut Call<F, T>).cast(), &mut jumped) };
    match call.out {
        Some(v) if jumped == 0 => Ok(v),
        _ => Err(RError::r_jump()),
    }
}

/// Objects protected from R's garbage collector until this guard is dropped
/// (instead of counting `Rf_unprotect(n)` on every return).
pub struct Protect {
    count: c_int,
}

impl Protect {
    pub fn new() -> Protect {
        Protect { count: 0 }
    }
    /// Protect `x` (a protection stack overflow is an R error).
    pub fn protect(&mut self, x: SEXP) -> Result<SEXP, RError> {
        // SAFETY: Rf_protect on the main thread; `x` is a valid SEXP.
        try_r(|| unsafe { Rf_protect(x) })?;
        self.count += 1;
        Ok(x)
    }
    /// A new vector, protected.
    pub fn alloc_vector(&mut self, t: SEXPTYPE, n: R_xlen_t) -> Result<SEXP, RError> {
        let x = alloc_vector(t, n)?;
        self.protect(x)
    }
}

impl Default for Protect {
    fn default() -> Protect {
        Protect::new()
    }
}

impl Drop for Protect {
    fn drop(&mut self) {
        if self.count > 0 {
            // SAFETY: unprotects exactly what this guard protected, in a
            // nested order (guards live in stack frames).
            unsafe { Rf_unprotect(self.count) };
        }
    }
}

pub fn alloc_vector(t: SEXPTYPE, n: R_xlen_t) -> Result<SEXP, RError> {
    // SAFETY: an R allocation on the main thread.
    try_r(|| unsafe { Rf_allocVector(t, n) })
}

/// An R string (CHARSXP) of `bytes` in encoding `enc`.
pub fn mk_char(bytes: &[u8], enc: cetype_t) -> Result<SEXP, RError> {
    let (ptr, len) = (bytes.as_ptr(), bytes.len());
    let len = i32::try_from(len).map_err(|_| RError::argument("a string is too long for R"))?;
    // SAFETY: `ptr` covers `len` bytes, alive across the call (R copies them).
    try_r(|| unsafe { Rf_mkCharLenCE(ptr.cast(), len, enc) })
}

/// An R string (CHARSXP) of UTF-8 text.
pub fn mk_string(s: &str) -> Result<SEXP, RError> {
    mk_char(s.as_bytes(), cetype_t::CE_UTF8)
}

pub fn scalar_string(s: &str) -> Result<SEXP, RError> {
    let c = mk_string(s)?;
    // SAFETY: `c` is a fresh CHARSXP; ScalarString allocates (may raise).
    try_r(|| unsafe { Rf_ScalarString(c) })
}

pub fn scalar_real(v: f64) -> Result<SEXP, RError> {
    // SAFETY: an R allocation on the main thread.
    try_r(|| unsafe { Rf_ScalarReal(v) })
}

pub fn scalar_integer(v: c_int) -> Result<SEXP, RError> {
    // SAFETY: an R allocation on the main thread.
    try_r(|| unsafe { Rf_ScalarInteger(v) })
}

/// `TRUE`/`FALSE`, or `NA` for `NA_LOGICAL`.
pub fn scalar_logical(v: c_int) -> Result<SEXP, RError> {
    // SAFETY: an R allocation on the main thread.
    try_r(|| unsafe { Rf_ScalarLogical(v) })
}

/// The arguments read as numbers or flags are numbers or flags: R would
/// parse a string, and raise its own error (not a pageshare one) for text it
/// cannot translate, such as a "bytes"-encoded string.
fn not_a_string(x: SEXP) -> Result<(), RError> {
    // SAFETY: reading the type of a valid SEXP cannot raise.
    if unsafe { TYPEOF(x) } == SEXPTYPE::STRSXP {
        return Err(RError::argument("a number or a flag was expected, not a string"));
    }
    Ok(())
}

pub fn as_real(x: SEXP) -> Result<f64, RError> {
    not_a_string(x)?;
    // SAFETY: coercion of a valid SEXP (may warn, and a warning may be an error).
    try_r(|| unsafe { Rf_asReal(x) })
}

pub fn as_integer(x: SEXP) -> Result<c_int, RError> {
    not_a_string(x)?;
    // SAFETY: as for as_real.
    try_r(|| unsafe { Rf_asInteger(x) })
}

pub fn as_logical(x: SEXP) -> Result<c_int, RError> {
    not_a_string(x)?;
    // SAFETY: as for as_real.
    try_r(|| unsafe { Rf_asLogical(x) })
}

/// `x` as a vector of type `t` (a number or flag type: strings are refused,
/// as by [`as_real`]).
pub fn coerce_vector(x: SEXP, t: SEXPTYPE) -> Result<SEXP, RError> {
    not_a_string(x)?;
    // SAFETY: coercion of a valid SEXP; allocates.
    try_r(|| unsafe { Rf_coerceVector(x, t) })
}

/// The data of a vector for reading. For an ALTREP vector of another class
/// this may run that class's code (expanding a compact sequence allocates).
pub fn dataptr_ro(x: SEXP) -> Result<*const c_void, RError> {
    // SAFETY: `x` is a vector (the callers check its type).
    try_r(|| unsafe { DATAPTR_RO(x) })
}

/// One string of a character vector (which may be another class's ALTREP).
pub fn string_elt(x: SEXP, i: R_xlen_t) -> Result<SEXP, RError> {
    // SAFETY: `x` is a character vector and `i` in range (the callers check).
    try_r(|| unsafe { STRING_ELT(x, i) })
}

pub fn set_attrib(x: SEXP, name: SEXP, value: SEXP) -> Result<(), RError> {
    // SAFETY: setting an attribute of a valid, protected object; R checks
    // dim, names and dimnames against the length and may raise an error.
    try_r(|| unsafe {
        Rf_setAttrib(x, name, value);
    })
}

/// Set the attributes of a fresh object (one nobody else holds yet) from a
/// pairlist, one by one through `Rf_setAttrib()` (R sets the object bit for a
/// class and checks `dim`, `names` and `dimnames` against the length).
///
/// # Safety
/// `x` fresh and protected; `attrs` a pairlist or R_NilValue.
pub unsafe fn set_attributes(x: SEXP, attrs: SEXP) -> Result<(), RError> {
    let mut p = attrs;
    // SAFETY: walking a valid pairlist; each value stays reachable from it.
    while unsafe { TYPEOF(p) } == SEXPTYPE::LISTSXP {
        // SAFETY: as above.
        let (tag, value, next) = unsafe { (TAG(p), CAR(p), CDR(p)) };
        set_attrib(x, tag, value)?;
        p = next;
    }
    Ok(())
}

/// The one string of `x` as UTF-8, or an error naming the argument `what`.
pub fn string_arg(x: SEXP, what: &str) -> Result<String, RError> {
    // SAFETY: type and length are checked before the element is read, and
    // `x` is then an ordinary or ALTREP character vector, whose element is
    // read through string_elt (another class's Elt may raise).
    let ok = unsafe { TYPEOF(x) == SEXPTYPE::STRSXP && XLENGTH(x) == 1 };
    let c = if ok { string_elt(x, 0)? } else { nil() };
    // SAFETY: R_NaString is initialised before package code runs.
    if !ok || c == unsafe { R_NaString } {
        return Err(RError::argument(format!("`{what}` must be a single string")));
    }
    utf8_text(c, what)
}

/// The text of the R string (CHARSXP, not NA) `c` as UTF-8, or an argument
/// error naming `what`. What R's translation would refuse with an R error (a
/// string marked "bytes") is refused here first, and text that is not valid
/// UTF-8 once translated (invalid bytes marked UTF-8 or native) is refused
/// too rather than altered: it may name a file or a variable, where a
/// replacement character would name another one.
pub fn utf8_text(c: SEXP, what: &str) -> Result<String, RError> {
    // SAFETY: `c` is a CHARSXP (the callers took it from a character vector);
    // reading its encoding cannot raise.
    if unsafe { Rf_getCharCE(c) } == cetype_t::CE_BYTES as c_int {
        return Err(RError::argument(format!(
            "`{what}` must be text: a string of \"bytes\" encoding cannot be read as UTF-8"
        )));
    }
    // SAFETY: translating a CHARSXP that is not "bytes"-encoded; should R
    // raise all the same (out of memory), the error stops in try_r.
    let p = try_r(|| unsafe { Rf_translateCharUTF8(c) })?;
    // SAFETY: R returns a NUL-terminated string that lives at least until the
    // next allocation; it is copied at once.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(RError::argument(format!("`{what}` must be text: it is not valid UTF-8"))),
    }
}

/// The data of an atomic vector argument for reading, as a slice of `T` (the
/// caller checked that `x` has that type): through `dataptr_ro`, since `x`
/// may be another class's ALTREP vector, whose data pointer may allocate or
/// raise.
///
/// # Safety
/// `T` must be the element type of `x`'s SEXP type; the slice must not
/// outlive the entry point's call (R holds `x` until then).
pub unsafe fn vector_data<'a, T>(x: SEXP) -> Result<&'a [T], RError> {
    // SAFETY: reading the length of a vector cannot raise.
    let n = unsafe { XLENGTH(x) } as usize;
    if n == 0 {
        return Ok(&[]);
    }
    let p = dataptr_ro(x)?;
    // SAFETY: the caller's contract: `n` elements of `T` from `p`, alive for the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<T>(), n) })
}

/// A character vector of `v`.
pub fn strings(v: &[String]) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let out = scope.alloc_vector(SEXPTYPE::STRSXP, v.len() as R_xlen_t)?;
    for (i, s) in v.iter().enumerate() {
        let c = mk_string(s)?;
        // SAFETY: `out` is a protected character vector of v.len() elements.
        unsafe { SET_STRING_ELT(out, i as R_xlen_t, c) };
    }
    Ok(out)
}

/// A raw vector holding `b`.
pub fn raw_vec(b: &[u8]) -> Result<SEXP, RError> {
    let out = alloc_vector(SEXPTYPE::RAWSXP, b.len() as R_xlen_t)?;
    // SAFETY: the new vector has b.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), RAW(out), b.len()) };
    Ok(out)
}

/// An unnamed list of `items`; they must be protected by the caller.
pub fn list_of(items: &[SEXP]) -> Result<SEXP, RError> {
    let out = alloc_vector(SEXPTYPE::VECSXP, items.len() as R_xlen_t)?;
    for (i, v) in items.iter().enumerate() {
        // SAFETY: a new list of items.len() elements; setting an element
        // allocates nothing, so `out` needs no protection meanwhile.
        unsafe { SET_VECTOR_ELT(out, i as R_xlen_t, *v) };
    }
    Ok(out)
}

/// A named list of `(name, value)` pairs; the values must be protected by the caller.
pub fn named_list(items: &[(&str, SEXP)]) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let out = scope.alloc_vector(SEXPTYPE::VECSXP, items.len() as R_xlen_t)?;
    let names = scope.alloc_vector(SEXPTYPE::STRSXP, items.len() as R_xlen_t)?;
    for (i, (k, v)) in items.iter().enumerate() {
        let name = mk_string(k)?;
        // SAFETY: both vectors are protected and have items.len() elements.
        unsafe {
            SET_VECTOR_ELT(out, i as R_xlen_t, *v);
            SET_STRING_ELT(names, i as R_xlen_t, name);
        }
    }
    // SAFETY: R_NamesSymbol is initialised before package code runs.
    set_attrib(out, unsafe { R_NamesSymbol }, names)?;
    Ok(out)
}
