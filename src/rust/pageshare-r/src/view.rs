//! A view: an ALTREP vector whose elements live in a shared segment.
//!
//! `data1` of the ALTREP object is an external pointer to a boxed [`View`] (the
//! segment, the element type and the slice); `data2` is `NULL` until R asks for a
//! writeable pointer to a view that is not shared, in which case it holds the
//! view's private copy and every later read goes there.

use crate::rapi::*;
use pageshare_core::header::Kind;
use pageshare_core::segment::Segment;
use std::cell::Cell;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub struct View {
    pub seg: Arc<Segment>,
    pub kind: Kind,
    /// First element within the segment.
    pub offset: u64,
    pub len: u64,
    /// Full copies made of this view (private copy on write, duplicates).
    pub materializations: Cell<u64>,
}

impl View {
    pub fn bytes(&self) -> usize {
        (self.len * self.kind.elem_size()) as usize
    }
    /// Start of this view's elements in the read-only mapping.
    pub fn data_ptr(&self) -> *const u8 {
        let start = (self.offset * self.kind.elem_size()) as usize;
        self.seg.data()[start..start + self.bytes()].as_ptr()
    }
}

/// Nesting depth of `with_handles()`: views serialize as handles only while > 0.
pub static HANDLE_SCOPE: AtomicUsize = AtomicUsize::new(0);

pub fn in_handle_scope() -> bool {
    HANDLE_SCOPE.load(Ordering::Relaxed) > 0
}

pub fn sexptype(kind: Kind) -> SEXPTYPE {
    match kind {
        Kind::Logical => SEXPTYPE::LGLSXP,
        Kind::Integer => SEXPTYPE::INTSXP,
        Kind::Double => SEXPTYPE::REALSXP,
        Kind::Complex => SEXPTYPE::CPLXSXP,
        Kind::Character => SEXPTYPE::STRSXP,
        Kind::Raw => SEXPTYPE::RAWSXP,
    }
}

/// The kind of a vector pageshare can share, or an error naming what it got.
///
/// # Safety
/// `x` must be a valid SEXP.
pub unsafe fn kind_of(x: SEXP) -> Result<Kind, String> {
    // SAFETY: forwarded from the caller.
    let t = unsafe { TYPEOF(x) };
    Ok(match t {
        SEXPTYPE::LGLSXP => Kind::Logical,
        SEXPTYPE::INTSXP => Kind::Integer,
        SEXPTYPE::REALSXP => Kind::Double,
        SEXPTYPE::CPLXSXP => Kind::Complex,
        SEXPTYPE::RAWSXP => Kind::Raw,
        other => {
            return Err(format!(
                "cannot share an object of type {}: pageshare shares logical, integer, double, \
                 complex and raw vectors",
                type_name(other)
            ))
        }
    })
}

pub fn type_name(t: SEXPTYPE) -> &'static str {
    match t {
        SEXPTYPE::NILSXP => "NULL",
        SEXPTYPE::CLOSXP => "closure",
        SEXPTYPE::ENVSXP => "environment",
        SEXPTYPE::EXTPTRSXP => "externalptr",
        SEXPTYPE::STRSXP => "character",
        SEXPTYPE::VECSXP => "list",
        SEXPTYPE::SPECIALSXP | SEXPTYPE::BUILTINSXP => "builtin",
        SEXPTYPE::LANGSXP => "language",
        SEXPTYPE::SYMSXP => "symbol",
        SEXPTYPE::S4SXP => "S4",
        _ => "unsupported",
    }
}

/// The [`View`] behind `x`, if `x` is a pageshare view.
///
/// # Safety
/// `x` must be a valid SEXP; the reference must not outlive `x`.
pub unsafe fn view_of<'a>(x: SEXP) -> Option<&'a View> {
    // SAFETY: ALTREP() and the class test only read the object header.
    unsafe {
        if ALTREP(x) == 0 || !crate::altrep::is_view_class(x) {
            return None;
        }
        let p = R_ExternalPtrAddr(R_altrep_data1(x)).cast::<View>();
        p.as_ref()
    }
}

unsafe extern "C" fn finalize_view(ptr: SEXP) {
    // SAFETY: the external pointer was made by `make_view` from Box::into_raw and
    // is cleared here, so the box is freed exactly once.
    unsafe {
        let p = R_ExternalPtrAddr(ptr).cast::<View>();
        if !p.is_null() {
            R_ClearExternalPtr(ptr);
            drop(Box::from_raw(p));
        }
    }
}

/// Make a new (not mutable) view of `len` elements of `seg` from `offset`.
///
/// # Safety
/// Main R thread only. The caller must check that the slice lies in the segment.
pub unsafe fn make_view(seg: Arc<Segment>, kind: Kind, offset: u64, len: u64) -> SEXP {
    debug_assert!(offset + len <= seg.header().length);
    let raw = Box::into_raw(Box::new(View { seg, kind, offset, len, materializations: Cell::new(0) }));
    // SAFETY: main thread; every new object is protected while the next allocates.
    unsafe {
        let ptr = Rf_protect(R_MakeExternalPtr(raw.cast::<c_void>(), nil(), nil()));
        // onexit = TRUE: mappings are released (and owned segments unlinked) at exit.
        R_RegisterCFinalizerEx(ptr, Some(finalize_view), Rboolean::TRUE);
        let x = R_new_altrep(crate::altrep::class_for(kind), ptr, nil());
        MARK_NOT_MUTABLE(x);
        Rf_unprotect(1);
        x
    }
}

/// A plain (non-ALTREP) copy of the view's current contents; counts a
/// materialization.
///
/// # Safety
/// `x` must be a view; main R thread only.
pub unsafe fn plain_copy(x: SEXP, view: &View) -> SEXP {
    // SAFETY: the new vector has exactly view.bytes() bytes of storage.
    unsafe {
        let ans = Rf_allocVector(sexptype(view.kind), view.len as R_xlen_t);
        if view.bytes() > 0 {
            std::ptr::copy_nonoverlapping(read_ptr(x, view), DATAPTR(ans).cast::<u8>(), view.bytes());
        }
        view.materializations.set(view.materializations.get() + 1);
        ans
    }
}

/// Where reads of `x` come from: its private copy if it has one, else the mapping.
///
/// # Safety
/// `x` must be the view `view`.
pub unsafe fn read_ptr(x: SEXP, view: &View) -> *const u8 {
    // SAFETY: data2 is either NULL or a plain vector of the same type and length.
    unsafe {
        let d2 = R_altrep_data2(x);
        if d2 != nil() {
            DATAPTR_RO(d2).cast::<u8>()
        } else {
            view.data_ptr()
        }
    }
}
