//! The ALTREP methods of views (one class per element type; the classes and
//! the methods' C shells are in src/view_methods.c). Methods left unset fall
//! back to R's defaults, which read through `Dataptr`. No method materializes a view for reading:
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

use crate::boundary::{method, RError};
use crate::faults::{none_armed, Site};
use crate::r_calls::{self, Protect};
use crate::r_sys::*;
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
//
// Each is called by its C shell in src/view_methods.c, which raises the error
// of a method that returns 1 (see boundary.rs). R calls Length, Dataptr,
// Dataptr_or_null and Elt once per element in range(), t(), split(): for a
// numeric view these answer first from the View at hand, on a path that
// calls nothing that can panic or raise (field reads and pointer
// arithmetic), and take the wrapper only for the rest (or when a test
// injects a fault).

/// # Safety
/// R calls the shells only on objects of our classes; `out` is the shell's.
#[no_mangle]
pub unsafe extern "C" fn ps_view_length(x: SEXP, out: *mut R_xlen_t) -> c_int {
    if none_armed() {
        // SAFETY: x is one of our views; out is the shell's (the fast path above).
        unsafe { out.write(view_for_elt(x).len as R_xlen_t) };
        return 0;
    }
    // SAFETY: x is one of our views.
    unsafe { method(Site::Length, out, || Ok(view_for_elt(x).len as R_xlen_t)) }
}

/// # Safety
/// As for [`ps_view_length`].
#[no_mangle]
pub unsafe extern "C" fn ps_view_dataptr(x: SEXP, writeable: Rboolean, out: *mut *mut c_void) -> c_int {
    if none_armed() {
        // SAFETY: x is one of our views; out is the shell's (the fast path above).
        let view = unsafe { view_for_elt(x) };
        if view.kind != Kind::Character {
            let p = if writeable == Rboolean::FALSE { view.data_ptr().cast_mut() } else { view.write_at.get() };
            if !p.is_null() {
                // SAFETY: as above.
                unsafe { out.write(p.cast::<c_void>()) };
                return 0;
            }
        }
    }
    // SAFETY: x is one of our views; data2 is NULL or its private plain copy.
    unsafe {
        method(Site::Dataptr, out, || {
            let view = view_for_elt(x);
            if view.kind != Kind::Character {
                // Answered from the View, without calling into R: read_at is the
                // private mapping or copy once there is one, and write_at is set
                // with either. R asks once per element in range(), t(), split().
                if writeable == Rboolean::FALSE {
                    return Ok(view.data_ptr() as *mut c_void);
                }
                let w = view.write_at.get();
                if !w.is_null() {
                    return Ok(w.cast::<c_void>());
                }
            }
            let d2 = R_altrep_data2(x);
            if d2 != nil() {
                return Ok(data_mut(d2));
            }
            if view.kind == Kind::Character {
                // R wants an array of R strings: only a full copy can give it.
                return Ok(data_mut(keep_private_copy(x, view)?));
            }
            match view.writeable_ptr() {
                Ok(p) => Ok(p.cast::<c_void>()),
                Err(_) => {
                    // No private mapping possible (address space): a full private copy.
                    let copy = keep_private_copy(x, view)?;
                    view.read_at.set(data_mut(copy).cast::<u8>());
                    view.write_at.set(data_mut(copy).cast::<u8>());
                    Ok(data_mut(copy))
                }
            }
        })
    }
}

/// A plain copy of the view kept as its data2, where every later read and
/// write goes.
///
/// # Safety
/// `x` is the view `view`, without a private copy yet.
unsafe fn keep_private_copy(x: SEXP, view: &View) -> Result<SEXP, RError> {
    // SAFETY: the copy is protected until data2 holds it.
    unsafe {
        let mut scope = Protect::new();
        let copy = scope.protect(plain_copy(x, view)?)?;
        R_set_altrep_data2(x, copy);
        Ok(copy)
    }
}

/// # Safety
/// As for [`ps_view_length`].
#[no_mangle]
pub unsafe extern "C" fn ps_view_dataptr_or_null(x: SEXP, out: *mut *const c_void) -> c_int {
    if none_armed() {
        // SAFETY: x is one of our views; out is the shell's (the fast path above).
        let view = unsafe { view_for_elt(x) };
        if view.kind != Kind::Character {
            // SAFETY: as above.
            unsafe { out.write(view.data_ptr().cast::<c_void>()) };
            return 0;
        }
    }
    // SAFETY: x is one of our views.
    unsafe {
        method(Site::DataptrOrNull, out, || {
            let view = view_for_elt(x);
            if view.kind == Kind::Character {
                let d2 = R_altrep_data2(x);
                // NULL tells R to read element by element (no materialization).
                return Ok(if d2 != nil() { DATAPTR_RO(d2) } else { std::ptr::null() });
            }
            Ok(read_ptr(x, view).cast::<c_void>())
        })
    }
}

/// `x[i]` for a contiguous increasing run of indices: another view of the same
/// segment instead of a copy. Anything else: NULL, R's own subsetting (which
/// reads through Elt/Dataptr without copying the view).
///
/// # Safety
/// As for [`ps_view_length`]; `indx` is R's index vector (integer or double).
#[no_mangle]
pub unsafe extern "C" fn ps_view_extract_subset(x: SEXP, indx: SEXP, out: *mut SEXP) -> c_int {
    // SAFETY: x is one of our views; indx is R's index vector.
    unsafe { method(Site::ExtractSubset, out, || extract_subset(x, indx)) }
}

unsafe fn extract_subset(x: SEXP, indx: SEXP) -> Result<SEXP, RError> {
    // SAFETY: x is one of our views; data2 and the private mapping are only looked at.
    let view = unsafe { this(x) };
    // SAFETY: as above.
    let (k, d2) = unsafe { (XLENGTH(indx), R_altrep_data2(x)) };
    if d2 != nil() || view.private.borrow().is_some() || k < MIN_SLICE {
        return Ok(std::ptr::null_mut());
    }
    let len = view.len as i64;
    // (the index may be an ALTREP vector of another class, whose elements
    // are computed by its code)
    // SAFETY: reads k elements of an index vector of length k.
    let first = r_calls::try_r(|| unsafe { first_of_run(indx, k, len) })?;
    match first {
        // SAFETY: the run first..first+k-1 lies inside the view (checked).
        Some(first) => unsafe { make_view(view.seg.clone(), view.kind, view.offset + first as u64 - 1, k as u64) },
        None => Ok(std::ptr::null_mut()),
    }
}

/// The first index if `indx` (integer or double, length `k`) is a run of
/// consecutive indices inside 1..=len, else None.
///
/// # Safety
/// `indx` a vector of length `k`; may raise (an ALTREP index's own code).
unsafe fn first_of_run(indx: SEXP, k: R_xlen_t, len: i64) -> Option<i64> {
    let at = |i: R_xlen_t| -> Option<i64> {
        // SAFETY: the type is checked before each element is read.
        unsafe {
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
        }
    };
    let first = at(0)?;
    if first < 1 || first + k as i64 - 1 > len {
        return None;
    }
    (1..k).all(|i| at(i) == Some(first + i as i64)).then_some(first)
}

/// # Safety
/// As for [`ps_view_length`]; R passes 0 <= i < length(x) of a character view.
#[no_mangle]
pub unsafe extern "C" fn ps_view_string_elt(x: SEXP, i: R_xlen_t, out: *mut SEXP) -> c_int {
    // SAFETY: x is a character view; R passes 0 <= i < length(x).
    unsafe {
        method(Site::StringElt, out, || {
            let d2 = R_altrep_data2(x);
            if d2 != nil() {
                return Ok(STRING_ELT(d2, i));
            }
            string_elt(this(x), i as usize)
        })
    }
}

/// # Safety
/// As for [`ps_view_string_elt`]; `v` a CHARSXP.
#[no_mangle]
pub unsafe extern "C" fn ps_view_string_set_elt(x: SEXP, i: R_xlen_t, v: SEXP) -> c_int {
    let mut done = ();
    // SAFETY: x is a character view; writes go to its private copy.
    unsafe {
        method(Site::StringSetElt, &mut done, || {
            let view = this(x);
            if R_altrep_data2(x) == nil() {
                keep_private_copy(x, view)?;
            }
            SET_STRING_ELT(R_altrep_data2(x), i, v);
            Ok(())
        })
    }
}

/// A plain copy (counted); R copies the attributes (DuplicateEX default).
///
/// # Safety
/// As for [`ps_view_length`].
#[no_mangle]
pub unsafe extern "C" fn ps_view_duplicate(x: SEXP, out: *mut SEXP) -> c_int {
    // SAFETY: x is one of our views.
    unsafe { method(Site::Duplicate, out, || plain_copy(x, this(x))) }
}

/// # Safety
/// As for [`ps_view_length`].
#[no_mangle]
pub unsafe extern "C" fn ps_view_serialized_state(x: SEXP, out: *mut SEXP) -> c_int {
    // SAFETY: x is one of our views.
    unsafe { method(Site::SerializedState, out, || serialized_state(x)) }
}

unsafe fn serialized_state(x: SEXP) -> Result<SEXP, RError> {
    let none = Ok(std::ptr::null_mut()); // R writes the plain data
    if !in_handle_scope() {
        return none;
    }
    // SAFETY: x is one of our views.
    let view = unsafe { this(x) };
    // SAFETY: as above; data2 is read only.
    if unsafe { R_altrep_data2(x) } != nil() || view.is_modified() {
        return none; // written here: no longer the segment's data
    }
    if !view.seg.is_current() {
        // Nobody holds the segment any more (released, its owner gone): a
        // receiver could not open it, so it gets the data instead.
        return none;
    }
    let handle = Handle {
        locator: view.seg.locator(),
        name: view.seg.name().to_string(),
        kind: view.kind,
        offset: view.offset,
        length: view.len,
    }
    .encode();
    r_calls::raw_vec(&handle)
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
///
/// # Safety
/// R calls the shell with one of our classes and the state serialized_state wrote.
#[no_mangle]
pub unsafe extern "C" fn ps_view_unserialize(class: SEXP, state: SEXP, out: *mut SEXP) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        method(Site::Unserialize, out, || match open_handle(state) {
            Err(e)
                if RECEIVER_MODE.load(std::sync::atomic::Ordering::Relaxed)
                    && !IN_TASK.load(std::sync::atomic::Ordering::Relaxed) =>
            {
                RECEIVE_FAILURES.lock().unwrap_or_else(|p| p.into_inner()).push((e.kind.class(), e.message));
                // An empty vector of the class's type (R sets the attributes
                // it read on whatever is returned).
                r_calls::alloc_vector(type_of_class(class), 0)
            }
            other => other,
        })
    }
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
        unsafe { make_view(seg, h.kind, h.offset, h.length) }
    }
}

/// R's .Internal(inspect()) line for a view.
///
/// # Safety
/// As for [`ps_view_length`].
#[no_mangle]
pub unsafe extern "C" fn ps_view_inspect(x: SEXP) -> c_int {
    let mut done = ();
    // SAFETY: x is one of our views; the line is NUL-terminated and passed via %s.
    unsafe {
        method(Site::Inspect, &mut done, || {
            let v = this(x);
            let line = format!(
                " pageshare view of {} [{} {}, offset {}{}]\n\0",
                v.seg.name().replace('\0', "?"),
                v.len,
                v.kind.name(),
                v.offset,
                if R_altrep_data2(x) != nil() { ", private copy" } else { "" }
            );
            Rprintf(c"%s".as_ptr(), line.as_ptr().cast::<std::os::raw::c_char>());
            Ok(())
        })
    }
}

// ---- element access for the numeric classes ------------------------------------

macro_rules! elt_methods {
    ($elt:ident, $region:ident, $t:ty) => {
        /// # Safety
        /// R calls the shell on one of our views with 0 <= i < length(x).
        #[no_mangle]
        pub unsafe extern "C" fn $elt(x: SEXP, i: R_xlen_t, out: *mut $t) -> c_int {
            if none_armed() {
                // SAFETY: as below; out is the shell's (the fast path).
                unsafe { out.write(*view_for_elt(x).data_ptr().cast::<$t>().add(i as usize)) };
                return 0;
            }
            // SAFETY: R passes 0 <= i < length(x); data_ptr() covers length(x)
            // elements (numeric views never use data2 unless the private mapping
            // failed, and then read_at points into data2 as well).
            unsafe { method(Site::Elt, out, || Ok(*view_for_elt(x).data_ptr().cast::<$t>().add(i as usize))) }
        }
        /// # Safety
        /// R calls the shell on one of our views with a buffer of `n` elements.
        #[no_mangle]
        pub unsafe extern "C" fn $region(x: SEXP, i: R_xlen_t, n: R_xlen_t, buf: *mut $t, out: *mut R_xlen_t) -> c_int {
            // SAFETY: copies min(n, length - i) elements into R's buffer of n elements.
            unsafe {
                method(Site::GetRegion, out, || {
                    let v = view_for_elt(x);
                    let len = v.len as R_xlen_t;
                    if i < 0 || i >= len || n <= 0 {
                        return Ok(0);
                    }
                    let k = n.min(len - i);
                    std::ptr::copy_nonoverlapping(read_ptr(x, v).cast::<$t>().add(i as usize), buf, k as usize);
                    Ok(k)
                })
            }
        }
    };
}
elt_methods!(ps_view_real_elt, ps_view_real_region, f64);
elt_methods!(ps_view_int_elt, ps_view_int_region, c_int);
elt_methods!(ps_view_raw_elt, ps_view_raw_region, Rbyte);
elt_methods!(ps_view_complex_elt, ps_view_complex_region, Rcomplex);

/// Called once by `ps_register_view_classes()` (src/view_methods.c) with the
/// classes it made, in the order of `KINDS`.
///
/// # Safety
/// `classes` points at 6 classes; at load, on R's main thread.
#[no_mangle]
pub unsafe extern "C" fn ps_set_view_classes(classes: *const R_altrep_class_t) {
    // SAFETY: the caller's contract.
    let made = unsafe { std::ptr::read(classes.cast::<[R_altrep_class_t; 6]>()) };
    // (a second load in the same process finds the classes already there)
    let _ = CLASSES.set(Classes(made));
}
