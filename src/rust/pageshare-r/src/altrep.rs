//! The ALTREP classes of views (one per element type), registered with R's own
//! ALTREP C API. Methods left unset fall back to R's defaults, which read through
//! `Dataptr`. No method materializes a view for reading:
//!
//! - `Dataptr(x, writeable)`: the read-only mapping for reads; for a writeable
//!   request, the view's private copy-on-write mapping (see `view.rs`), so that
//!   even code that writes into a not-mutable vector (data.table's `:=`) only
//!   changes this view, page by page, and never the shared pages.
//! - `Duplicate`: a plain copy (counted); R copies the attributes.
//! - `Serialized_state`: a handle inside `with_handles()`, otherwise `NULL`, which
//!   makes R serialize the plain data (so `saveRDS()` files never depend on a segment).
//! - `Unserialize`: maps the segment named by the handle in this process (one
//!   mapping per segment, shared by all its views here) and returns a view; R
//!   then gives it the attributes, object bit and levels it read.

use crate::boundary::{guard, RError};
use crate::rapi::*;
use crate::view::{in_handle_scope, make_view, plain_copy, read_ptr, string_elt, view_for_elt, view_unchecked, View};
use pageshare_core::handle::Handle;
use pageshare_core::header::Kind;
use pageshare_core::registry;
use std::os::raw::{c_int, c_void};

const KINDS: [Kind; 6] = [Kind::Double, Kind::Integer, Kind::Logical, Kind::Raw, Kind::Complex, Kind::Character];

/// Our ALTREP classes, one per kind (in the order of `KINDS`), made once by
/// [`register`] at package load.
struct Classes([R_altrep_class_t; 6]);
// SAFETY: a class is a pointer to an R object that R keeps for the life of the
// process; after load it is only compared or passed to R on R's main thread,
// never written, so sharing the values between threads cannot race.
unsafe impl Sync for Classes {}
// SAFETY: as for Sync: the values are never written after load.
unsafe impl Send for Classes {}
static CLASSES: std::sync::OnceLock<Classes> = std::sync::OnceLock::new();

fn classes() -> &'static [R_altrep_class_t; 6] {
    &CLASSES.get().expect("classes are registered at load").0
}

/// Slices shorter than this are copied (a view of a few elements would keep a
/// whole segment alive for nothing).
const MIN_SLICE: R_xlen_t = 4096;

fn slot(kind: Kind) -> usize {
    KINDS.iter().position(|k| *k == kind).expect("a fixed-width kind")
}

pub fn class_for(kind: Kind) -> R_altrep_class_t {
    classes()[slot(kind)]
}

/// Is `x` (an ALTREP object) of one of our classes?
///
/// # Safety
/// `x` must be a valid ALTREP SEXP.
pub unsafe fn is_view_class(x: SEXP) -> bool {
    let Some(classes) = CLASSES.get() else { return false };
    // SAFETY: x is a valid ALTREP SEXP (the caller's contract); R_altrep_inherits reads its class.
    classes.0.iter().any(|c| unsafe { R_altrep_inherits(x, *c) } != Rboolean::FALSE)
}

/// The view behind an object R hands to one of our methods.
unsafe fn this<'a>(x: SEXP) -> &'a View {
    // SAFETY: R only calls our methods on objects of our classes.
    unsafe { view_unchecked(x) }
}

// ---- altrep methods -------------------------------------------------------------

unsafe extern "C" fn length(x: SEXP) -> R_xlen_t {
    // SAFETY: x is one of our views. R asks once per element in range(), t(),
    // split(): the cached View answers without calling into R.
    unsafe { view_for_elt(x).len as R_xlen_t }
}

unsafe extern "C" fn dataptr(x: SEXP, writeable: Rboolean) -> *mut c_void {
    // SAFETY: x is one of our views; data2 is NULL or its private plain copy.
    unsafe {
        let view = view_for_elt(x);
        if view.kind != Kind::Character {
            // Answered from the View, without calling into R: read_at is the
            // private mapping or copy once there is one, and write_at is set
            // with either. R asks once per element in range(), t(), split().
            if writeable == Rboolean::FALSE {
                return view.data_ptr() as *mut c_void;
            }
            let w = view.write_at.get();
            if !w.is_null() {
                return w.cast::<c_void>();
            }
        }
        let d2 = R_altrep_data2(x);
        if d2 != nil() {
            return data_mut(d2);
        }
        if view.kind == Kind::Character {
            // R wants an array of R strings: only a full copy can give it.
            let copy = Rf_protect(plain_copy(x, view));
            R_set_altrep_data2(x, copy);
            Rf_unprotect(1);
            return data_mut(copy);
        }
        match view.writeable_ptr() {
            Ok(p) => p.cast::<c_void>(),
            Err(_) => {
                // No private mapping possible (address space): a full private copy.
                let copy = Rf_protect(plain_copy(x, view));
                R_set_altrep_data2(x, copy);
                Rf_unprotect(1);
                view.read_at.set(data_mut(copy).cast::<u8>());
                view.write_at.set(data_mut(copy).cast::<u8>());
                data_mut(copy)
            }
        }
    }
}

unsafe extern "C" fn dataptr_or_null(x: SEXP) -> *const c_void {
    // SAFETY: x is one of our views.
    unsafe {
        let view = view_for_elt(x);
        if view.kind == Kind::Character {
            let d2 = R_altrep_data2(x);
            // NULL tells R to read element by element (no materialization).
            return if d2 != nil() { DATAPTR_RO(d2) } else { std::ptr::null() };
        }
        read_ptr(x, view).cast::<c_void>()
    }
}

/// `x[i]` for a contiguous increasing run of indices: another view of the same
/// segment instead of a copy. Anything else: NULL, R's own subsetting (which
/// reads through Elt/Dataptr without copying the view).
unsafe extern "C" fn extract_subset(x: SEXP, indx: SEXP, _call: SEXP) -> SEXP {
    // SAFETY: x is one of our views; indx is R's index vector (integer or double).
    unsafe {
        let view = this(x);
        let k = XLENGTH(indx);
        if R_altrep_data2(x) != nil() || view.private.borrow().is_some() || k < MIN_SLICE {
            return std::ptr::null_mut();
        }
        let at = |i: R_xlen_t| -> Option<i64> {
            match TYPEOF(indx) {
                SEXPTYPE::INTSXP => {
                    let v = INTEGER_ELT(indx, i);
                    (v != i32::MIN).then_some(v as i64)
                }
                SEXPTYPE::REALSXP => {
                    let v = REAL_ELT(indx, i);
                    (v.is_finite() && v.fract() == 0.0).then_some(v as i64)
                }
                _ => None,
            }
        };
        let Some(first) = at(0) else { return std::ptr::null_mut() };
        if first < 1 || first + k as i64 - 1 > view.len as i64 {
            return std::ptr::null_mut();
        }
        for i in 1..k {
            if at(i) != Some(first + i as i64) {
                return std::ptr::null_mut();
            }
        }
        make_view(view.seg.clone(), view.kind, view.offset + first as u64 - 1, k as u64)
    }
}

unsafe extern "C" fn string_elt_method(x: SEXP, i: R_xlen_t) -> SEXP {
    // SAFETY: x is a character view; R passes 0 <= i < length(x).
    unsafe {
        let d2 = R_altrep_data2(x);
        if d2 != nil() {
            return STRING_ELT(d2, i);
        }
        string_elt(this(x), i as usize)
    }
}

unsafe extern "C" fn string_set_elt(x: SEXP, i: R_xlen_t, v: SEXP) {
    // SAFETY: x is a character view; writes go to its private copy.
    unsafe {
        let view = this(x);
        if R_altrep_data2(x) == nil() {
            let copy = Rf_protect(plain_copy(x, view));
            R_set_altrep_data2(x, copy);
            Rf_unprotect(1);
        }
        SET_STRING_ELT(R_altrep_data2(x), i, v);
    }
}

unsafe extern "C" fn duplicate(x: SEXP, _deep: Rboolean) -> SEXP {
    // SAFETY: x is one of our views; R copies the attributes (DuplicateEX default).
    unsafe { plain_copy(x, this(x)) }
}

unsafe extern "C" fn serialized_state(x: SEXP) -> SEXP {
    if !in_handle_scope() {
        return std::ptr::null_mut(); // R writes the plain data
    }
    // SAFETY: x is one of our views; the raw vector is filled before it is returned.
    unsafe {
        let view = this(x);
        if R_altrep_data2(x) != nil() || view.is_modified() {
            return std::ptr::null_mut(); // written here: no longer the segment's data
        }
        if !view.seg.is_current() {
            // Nobody holds the segment any more (released, its owner gone): a
            // receiver could not open it, so it gets the data instead.
            return std::ptr::null_mut();
        }
        let handle = Handle {
            locator: view.seg.locator(),
            name: view.seg.name().to_string(),
            kind: view.kind,
            offset: view.offset,
            length: view.len,
        }
        .encode();
        let raw = Rf_allocVector(SEXPTYPE::RAWSXP, handle.len() as R_xlen_t);
        std::ptr::copy_nonoverlapping(handle.as_ptr(), RAW(raw), handle.len());
        raw
    }
}

/// In a worker (receiver mode), a handle that cannot be opened must not end the
/// process: R's unserialize() runs inside the worker's loop, and an error
/// there kills the worker. Its failures wait here for the task to report them
/// (`ps_take_receive_failures`); the task sees an empty vector in their place.
pub static RECEIVER_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Is a task running (its code's own unserialize() calls fail as usual)?
pub static IN_TASK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
pub static RECEIVE_FAILURES: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// R's unserialize() of a handle: a view of the segment the handle names. R
/// sets the attributes, object bit and levels it read after it.
unsafe extern "C" fn unserialize(class: SEXP, state: SEXP) -> SEXP {
    guard(|| {
        // SAFETY: forwarded.
        match unsafe { open_handle(state) } {
            Err(e)
                if RECEIVER_MODE.load(std::sync::atomic::Ordering::Relaxed)
                    && !IN_TASK.load(std::sync::atomic::Ordering::Relaxed) =>
            {
                RECEIVE_FAILURES.lock().unwrap_or_else(|p| p.into_inner()).push((e.kind.class(), e.message));
                // SAFETY: an empty vector of the class's type (R sets the
                // attributes it read on whatever is returned).
                Ok(unsafe { Rf_allocVector(type_of_class(class), 0) })
            }
            other => other,
        }
    })
}

/// The vector type of one of our classes (given as R passes it to methods).
fn type_of_class(class: SEXP) -> SEXPTYPE {
    let kind = KINDS.iter().zip(classes().iter()).find(|(_, c)| c.ptr == class).map(|(k, _)| *k);
    match kind.unwrap_or(Kind::Raw) {
        Kind::Double => SEXPTYPE::REALSXP,
        Kind::Integer => SEXPTYPE::INTSXP,
        Kind::Logical => SEXPTYPE::LGLSXP,
        Kind::Raw => SEXPTYPE::RAWSXP,
        Kind::Complex => SEXPTYPE::CPLXSXP,
        Kind::Character => SEXPTYPE::STRSXP,
    }
}

/// The view a handle (`state`) names, or why it cannot be made.
unsafe fn open_handle(state: SEXP) -> Result<SEXP, RError> {
    {
        // SAFETY: state is the raw vector written by serialized_state (checked below).
        let bytes = unsafe {
            if TYPEOF(state) != SEXPTYPE::RAWSXP {
                return Err(RError::invalid("a pageshare handle must be a raw vector"));
            }
            std::slice::from_raw_parts(RAW(state), XLENGTH(state) as usize).to_vec()
        };
        let h = Handle::decode(&bytes).map_err(|e| RError::from(e).context("a pageshare handle could not be read"))?;
        let seg = registry::open(&h.locator, &h.name).map_err(|e| {
            RError::from(e).context(&format!("a pageshare view could not be mapped in process {}", std::process::id()))
        })?;
        let hdr = seg.header();
        if hdr.kind != h.kind || h.offset.checked_add(h.length).is_none_or(|end| end > hdr.length) {
            return Err(RError::invalid(format!("the handle of segment '{}' does not match its contents", h.name)));
        }
        // SAFETY: the slice was checked to lie inside the segment.
        Ok(unsafe { make_view(seg, h.kind, h.offset, h.length) })
    }
}

unsafe extern "C" fn inspect(
    x: SEXP,
    _pre: c_int,
    _deep: c_int,
    _pvec: c_int,
    _subtree: Option<unsafe extern "C" fn(SEXP, c_int, c_int, c_int)>,
) -> Rboolean {
    // SAFETY: x is one of our views; the string is NUL-terminated and passed via %s.
    unsafe {
        let v = this(x);
        let line = format!(
            " pageshare view of {} [{} {}, offset {}{}]\n\0",
            v.seg.name(),
            v.len,
            v.kind.name(),
            v.offset,
            if R_altrep_data2(x) != nil() { ", private copy" } else { "" }
        );
        Rprintf(c"%s".as_ptr(), line.as_ptr().cast::<std::os::raw::c_char>());
    }
    Rboolean::TRUE
}

// ---- element access for the numeric classes ------------------------------------

macro_rules! elt_methods {
    ($elt:ident, $region:ident, $t:ty) => {
        unsafe extern "C" fn $elt(x: SEXP, i: R_xlen_t) -> $t {
            // SAFETY: R passes 0 <= i < length(x); data_ptr() covers length(x)
            // elements (numeric views never use data2 unless the private mapping
            // failed, and then read_at points into data2 as well).
            unsafe { *view_for_elt(x).data_ptr().cast::<$t>().add(i as usize) }
        }
        unsafe extern "C" fn $region(x: SEXP, i: R_xlen_t, n: R_xlen_t, buf: *mut $t) -> R_xlen_t {
            // SAFETY: copies min(n, length - i) elements into R's buffer of n elements.
            unsafe {
                let v = view_for_elt(x);
                let len = v.len as R_xlen_t;
                if i < 0 || i >= len || n <= 0 {
                    return 0;
                }
                let k = n.min(len - i);
                std::ptr::copy_nonoverlapping(read_ptr(x, v).cast::<$t>().add(i as usize), buf, k as usize);
                k
            }
        }
    };
}
elt_methods!(real_elt, real_region, f64);
elt_methods!(int_elt, int_region, c_int);
elt_methods!(raw_elt, raw_region, Rbyte);
elt_methods!(complex_elt, complex_region, Rcomplex);

// ---- registration ----------------------------------------------------------------

/// Create the classes; called from `R_init_pageshare`.
///
/// # Safety
/// Once, from the package's init routine, with R's DllInfo.
pub unsafe fn register(dll: *mut DllInfo) {
    let pkg = c"pageshare";
    let mut made: [Option<R_altrep_class_t>; 6] = [None; 6];
    // SAFETY: R's class constructors and setters, called at load on the main thread.
    unsafe {
        for kind in KINDS {
            let cls = match kind {
                Kind::Double => R_make_altreal_class(c"pageshare_double".as_ptr(), pkg.as_ptr(), dll),
                Kind::Integer => R_make_altinteger_class(c"pageshare_integer".as_ptr(), pkg.as_ptr(), dll),
                Kind::Logical => R_make_altlogical_class(c"pageshare_logical".as_ptr(), pkg.as_ptr(), dll),
                Kind::Raw => R_make_altraw_class(c"pageshare_raw".as_ptr(), pkg.as_ptr(), dll),
                Kind::Complex => R_make_altcomplex_class(c"pageshare_complex".as_ptr(), pkg.as_ptr(), dll),
                Kind::Character => R_make_altstring_class(c"pageshare_character".as_ptr(), pkg.as_ptr(), dll),
            };
            R_set_altrep_Length_method(cls, Some(length));
            R_set_altrep_Duplicate_method(cls, Some(duplicate));
            R_set_altrep_Serialized_state_method(cls, Some(serialized_state));
            R_set_altrep_Unserialize_method(cls, Some(unserialize));
            R_set_altrep_Inspect_method(cls, Some(inspect));
            R_set_altvec_Dataptr_method(cls, Some(dataptr));
            R_set_altvec_Dataptr_or_null_method(cls, Some(dataptr_or_null));
            R_set_altvec_Extract_subset_method(cls, Some(extract_subset));
            match kind {
                Kind::Double => {
                    R_set_altreal_Elt_method(cls, Some(real_elt));
                    R_set_altreal_Get_region_method(cls, Some(real_region));
                }
                Kind::Integer => {
                    R_set_altinteger_Elt_method(cls, Some(int_elt));
                    R_set_altinteger_Get_region_method(cls, Some(int_region));
                }
                Kind::Logical => {
                    R_set_altlogical_Elt_method(cls, Some(int_elt));
                    R_set_altlogical_Get_region_method(cls, Some(int_region));
                }
                Kind::Character => {
                    R_set_altstring_Elt_method(cls, Some(string_elt_method));
                    R_set_altstring_Set_elt_method(cls, Some(string_set_elt));
                }
                // Without these, R's defaults read an element through a writeable
                // Dataptr, which would give the view a private mapping.
                Kind::Raw => {
                    R_set_altraw_Elt_method(cls, Some(raw_elt));
                    R_set_altraw_Get_region_method(cls, Some(raw_region));
                }
                Kind::Complex => {
                    R_set_altcomplex_Elt_method(cls, Some(complex_elt));
                    R_set_altcomplex_Get_region_method(cls, Some(complex_region));
                }
            }
            made[slot(kind)] = Some(cls);
        }
    }
    // (a second load in the same process finds the classes already there)
    let _ = CLASSES.set(Classes(made.map(|c| c.expect("every kind has a class"))));
}
