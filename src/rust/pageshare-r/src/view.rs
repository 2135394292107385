//! A view: an ALTREP vector whose elements live in a shared segment.
//!
//! `data1` of the ALTREP object is an external pointer to a boxed [`View`] (the
//! segment, the element type and the slice). Reads go to the segment's read-only
//! mapping. The first time R asks for a *writeable* pointer, the view gets its
//! own private copy-on-write mapping of the segment (`View::private`): reading
//! through it costs nothing extra, a write copies only the page it touches, and
//! no write can ever reach the shared pages (R 4.2 asks for writeable pointers
//! in many read-only operations; code such as data.table's `:=` really writes).
//! From then on every read of this view goes through its private mapping.
//! `data2` holds a full private copy only for character views (R needs an array
//! of R strings for a writeable pointer).

use crate::boundary::RError;
use crate::r_calls::{self, Protect};
use crate::r_sys::*;
use pageshare_core::header::Kind;
use pageshare_core::segment::MmapMut;
use pageshare_core::segment::Segment;
use std::cell::{Cell, RefCell};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

/// A view's state. `repr(C)` with its first five fields at the offsets of
/// `view_layout.h` (asserted below, and by the C side against the same file):
/// the C shells of the hottest methods (src/view_methods.c, `ps_hot_view`)
/// read them through [`LAST_VIEW`] to answer without calling into Rust.
#[repr(C)]
pub struct View {
    /// The R object whose data1 points here (set once by make_view): lets the
    /// one-entry cache check that a cached View belongs to the object asked about.
    object: SEXP,
    pub len: u64,
    /// Where reads go now (the shared mapping, then the private one): cached so
    /// that the per-element methods, which R calls in tight loops, stay cheap.
    pub read_at: Cell<*const u8>,
    /// The writeable pointer handed out (the private mapping, or the private
    /// copy in data2 where no mapping could be made); null until R first asks
    /// for one. Cached, like `read_at`, so that R's per-element Dataptr calls
    /// answer without calling into R.
    pub write_at: Cell<*mut u8>,
    /// 1 for a numeric view (its reads and writes go through read_at and
    /// write_at), 0 for a character view.
    numeric: std::os::raw::c_int,
    pub seg: Arc<Segment>,
    pub kind: Kind,
    /// First element within the segment.
    pub offset: u64,
    /// Full copies made of this view (duplicates, character copies).
    pub materializations: Cell<u64>,
    /// The private copy-on-write mapping, once a writeable pointer was asked for.
    pub private: RefCell<Option<MmapMut>>,
}

/// Are the bytes of `pat` in `text` at `i`?
const fn bytes_at(text: &[u8], i: usize, pat: &[u8]) -> bool {
    if i + pat.len() > text.len() {
        return false;
    }
    let mut k = 0;
    while k < pat.len() {
        if text[i + k] != pat[k] {
            return false;
        }
        k += 1;
    }
    true
}

/// The number `#define`d as `name` in view_layout.h (a compile-time error if
/// it is missing): the one list of the offsets that the C mirror reads.
const fn layout_constant(name: &str) -> usize {
    const HEADER: &[u8] = include_bytes!("view_layout.h");
    const DEFINE: &[u8] = b"#define ";
    let name = name.as_bytes();
    let mut line = 0;
    while line < HEADER.len() {
        let at = line + DEFINE.len();
        if bytes_at(HEADER, line, DEFINE) && bytes_at(HEADER, at, name) && bytes_at(HEADER, at + name.len(), b" ") {
            let start = at + name.len() + 1;
            let (mut j, mut value) = (start, 0);
            while j < HEADER.len() && HEADER[j].is_ascii_digit() {
                value = value * 10 + (HEADER[j] - b'0') as usize;
                j += 1;
            }
            assert!(j > start, "view_layout.h: a constant without a number");
            return value;
        }
        while line < HEADER.len() && HEADER[line] != b'\n' {
            line += 1;
        }
        line += 1;
    }
    panic!("view_layout.h lacks a constant that view.rs asks for")
}

// The C mirror's layout, asserted on the targets where the C side uses it.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(View, object) == layout_constant("PS_VIEW_OBJECT_OFFSET"));
    assert!(offset_of!(View, len) == layout_constant("PS_VIEW_LEN_OFFSET"));
    assert!(offset_of!(View, read_at) == layout_constant("PS_VIEW_READ_AT_OFFSET"));
    assert!(offset_of!(View, write_at) == layout_constant("PS_VIEW_WRITE_AT_OFFSET"));
    assert!(offset_of!(View, numeric) == layout_constant("PS_VIEW_NUMERIC_OFFSET"));
    // the types C reads them as: SEXP, uint64_t, two pointers, int
    assert!(size_of::<SEXP>() == 8 && size_of::<Cell<*const u8>>() == 8 && size_of::<Cell<*mut u8>>() == 8);
    assert!(size_of::<std::os::raw::c_int>() == 4);
};

impl View {
    /// Bytes of shared data this view reads (for strings: the whole packed table
    /// of its segment).
    pub fn bytes(&self) -> usize {
        if self.kind == Kind::Character {
            return self.seg.header().data_len as usize;
        }
        (self.len * self.kind.elem_size()) as usize
    }
    /// Start of this view's elements: in its private mapping if it has one, else
    /// in the shared read-only mapping.
    pub fn data_ptr(&self) -> *const u8 {
        self.read_at.get()
    }

    fn shared_ptr(&self) -> *const u8 {
        let start = (self.offset * self.kind.elem_size()) as usize;
        self.seg.data()[start..start + self.bytes()].as_ptr()
    }

    /// A writeable pointer to this view's elements, through its private
    /// copy-on-write mapping (made on first use).
    pub fn writeable_ptr(&self) -> Result<*mut u8, pageshare_core::Error> {
        if self.private.borrow().is_none() {
            let map = self.seg.private_map()?;
            *self.private.borrow_mut() = Some(map);
        }
        let start = (self.offset * self.kind.elem_size()) as usize;
        let d0 = self.seg.header().data_offset as usize;
        let mut p = self.private.borrow_mut();
        let map = p.as_mut().expect("made above");
        let ptr = map[d0 + start..d0 + start + self.bytes()].as_mut_ptr();
        self.read_at.set(ptr);
        self.write_at.set(ptr);
        Ok(ptr)
    }

    /// Has this process written into the view's private mapping? (Then the view
    /// no longer equals its segment and must not travel as a handle.)
    pub fn is_modified(&self) -> bool {
        match self.private.borrow().as_ref() {
            None => false,
            Some(_) => {
                let ptr = self.data_ptr();
                pageshare_core::os::has_private_pages(ptr, self.bytes()).unwrap_or_else(|| {
                    // No pagemap: compare with the shared pages instead.
                    // SAFETY: both pointers cover bytes() readable bytes.
                    let mine = unsafe { std::slice::from_raw_parts(ptr, self.bytes()) };
                    // SAFETY: the segment's mapping covers bytes() readable bytes while self lives.
                    let shared = unsafe { std::slice::from_raw_parts(self.shared_ptr(), self.bytes()) };
                    mine != shared
                })
            }
        }
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
pub unsafe fn kind_of(x: SEXP) -> Result<Kind, crate::boundary::RError> {
    // SAFETY: forwarded from the caller.
    let t = unsafe { TYPEOF(x) };
    Ok(match t {
        SEXPTYPE::LGLSXP => Kind::Logical,
        SEXPTYPE::INTSXP => Kind::Integer,
        SEXPTYPE::REALSXP => Kind::Double,
        SEXPTYPE::CPLXSXP => Kind::Complex,
        SEXPTYPE::RAWSXP => Kind::Raw,
        SEXPTYPE::STRSXP => Kind::Character,
        other => {
            return Err(crate::boundary::RError::new(
                crate::boundary::ErrorKind::UnsupportedType,
                format!(
                    "cannot share an object of type {}: pageshare shares logical, integer, double, \
                     complex, raw and character vectors",
                    type_name(other)
                ),
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
        SEXPTYPE::VECSXP => "list",
        SEXPTYPE::SPECIALSXP | SEXPTYPE::BUILTINSXP => "builtin",
        SEXPTYPE::LANGSXP => "language",
        SEXPTYPE::SYMSXP => "symbol",
        // S4SXP, named OBJSXP from R 4.4 on (extendr-ffi follows the headers).
        other if other as u32 == 25 => "S4",
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
            let _ = LAST_VIEW.compare_exchange(p, std::ptr::null_mut(), Ordering::Release, Ordering::Relaxed);
            R_ClearExternalPtr(ptr);
            let view = Box::from_raw(p);
            // (called by R's garbage collector: a panic must not leave this frame)
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(view)));
        }
    }
}

/// Make a new (not mutable) view of `len` elements of `seg` from `offset`.
///
/// # Safety
/// Main R thread only. The caller must check that the slice lies in the segment.
pub unsafe fn make_view(seg: Arc<Segment>, kind: Kind, offset: u64, len: u64) -> Result<SEXP, RError> {
    debug_assert!(offset + len <= seg.header().length);
    let view = View {
        seg,
        kind,
        offset,
        len,
        materializations: Cell::new(0),
        private: RefCell::new(None),
        read_at: Cell::new(std::ptr::null()),
        write_at: Cell::new(std::ptr::null_mut()),
        object: std::ptr::null_mut(),
        numeric: (kind != Kind::Character) as std::os::raw::c_int,
    };
    view.read_at.set(if kind == Kind::Character { std::ptr::null() } else { view.shared_ptr() });
    let mut view = Some(Box::new(view));
    let raw: *mut View = view.as_deref_mut().map_or(std::ptr::null_mut(), |v| v as *mut View);
    let mut scope = Protect::new();
    // SAFETY: R allocations on the main thread; `raw` stays owned by `view`
    // (dropped on an error) until the external pointer holds it.
    let ptr = scope.protect(r_calls::try_r(|| unsafe { R_MakeExternalPtr(raw.cast::<c_void>(), nil(), nil()) })?)?;
    // onexit = FALSE: at exit, other exit finalizers (the user's) may still
    // read this view, so its View must outlive them; the process's end
    // unmaps it and closes its descriptors, which frees the segments.
    // SAFETY: `ptr` is the protected external pointer just made.
    r_calls::try_r(|| unsafe { R_RegisterCFinalizerEx(ptr, Some(finalize_view), Rboolean::FALSE) })?;
    // From here on the external pointer owns the View: its finalizer frees it.
    std::mem::forget(view.take());
    let class = crate::altrep::class_for(kind);
    // SAFETY: our class, with the protected external pointer as data1.
    let x = r_calls::try_r(|| unsafe { R_new_altrep(class, ptr, nil()) })?;
    // SAFETY: the View lives until the finalizer; no reference to it exists
    // yet, and Elt cannot run before we return.
    unsafe {
        (*raw).object = x;
        // x may have a collected view's address: drop a View cached for it.
        forget_last_view();
        MARK_NOT_MUTABLE(x);
    }
    Ok(x)
}

/// Element `i` of a character view, made into an R string (NA_character_ for NA).
///
/// # Safety
/// `view` is a character view and `i < view.len`; main R thread.
pub unsafe fn string_elt(view: &View, i: usize) -> Result<SEXP, RError> {
    let table = view.seg.strings();
    match table.get(view.offset as usize + i) {
        // SAFETY: R_NaString is initialised before package code runs.
        None => Ok(unsafe { R_NaString }),
        Some((bytes, enc)) => r_calls::mk_char(bytes, cetype(enc)),
    }
}

fn cetype(e: pageshare_core::strings::Encoding) -> cetype_t {
    use pageshare_core::strings::Encoding::*;
    match e {
        Native => cetype_t::CE_NATIVE,
        Utf8 => cetype_t::CE_UTF8,
        Latin1 => cetype_t::CE_LATIN1,
        Bytes => cetype_t::CE_BYTES,
    }
}

/// A plain (non-ALTREP) copy of the view's current contents; counts a
/// materialization.
///
/// # Safety
/// `x` must be a view; main R thread only.
pub unsafe fn plain_copy(x: SEXP, view: &View) -> Result<SEXP, RError> {
    let mut scope = Protect::new();
    let ans = scope.alloc_vector(sexptype(view.kind), view.len as R_xlen_t)?;
    if view.kind == Kind::Character {
        // SAFETY: data2 is NULL or the view's plain copy; `ans` is protected
        // while its strings are made.
        unsafe {
            let d2 = R_altrep_data2(x);
            for i in 0..view.len as usize {
                let s = if d2 != nil() { STRING_ELT(d2, i as R_xlen_t) } else { string_elt(view, i)? };
                SET_STRING_ELT(ans, i as R_xlen_t, s);
            }
        }
    } else if view.bytes() > 0 {
        // SAFETY: the new vector has exactly view.bytes() bytes of storage.
        unsafe { std::ptr::copy_nonoverlapping(read_ptr(x, view), data_mut(ans).cast::<u8>(), view.bytes()) };
    }
    view.materializations.set(view.materializations.get() + 1);
    Ok(ans)
}

/// The `View` of the last view a per-element method (Elt, Length, Dataptr,
/// Dataptr_or_null, Get_region) was called on. R 4.2 extracts `X[, j]` element
/// by element through `Elt`, and `range()`, `t()`, `split()` ask for the length
/// and the data pointer once per element; finding the View costs two calls into
/// R (data1, then the external pointer's address) each time, about a third of
/// the extra time over an ordinary vector.
///
/// A cached View is used only for the object it names (`View::object`). Sound
/// because a live view's View never moves; a View is freed only by its
/// finalizer, which empties the cache if it holds it; and a new view can take
/// a collected view's address (whose View may await its finalizer) only
/// through make_view(), which empties the cache. One atomic pointer, so that
/// code calling Elt from several threads (against R's rules, but harmless for
/// ordinary vectors) can never pair one object with another's View.
///
/// The C shells read it too (`ps_last_view`, a C11 atomic pointer there, which
/// has AtomicPtr's layout), on R's main thread only. A View is published with
/// Release and read with Acquire (here and in C), so that a reader on any
/// thread that finds a View also sees the fields written before it was cached.
#[no_mangle]
#[allow(non_upper_case_globals)]
static ps_last_view: AtomicPtr<View> = AtomicPtr::new(std::ptr::null_mut());
use ps_last_view as LAST_VIEW;

fn forget_last_view() {
    LAST_VIEW.store(std::ptr::null_mut(), Ordering::Release);
}

/// `view_unchecked(x)` through the one-entry cache above: for the methods R
/// calls once per element (`Elt`, and `Length` and `Dataptr` in `range()`,
/// `t()`, `split()`, `tapply()`, `apply()`).
///
/// # Safety
/// `x` must be a live view.
#[inline]
pub unsafe fn view_for_elt<'a>(x: SEXP) -> &'a View {
    let cached = LAST_VIEW.load(Ordering::Acquire);
    // SAFETY: a non-null cached pointer is a live View (see LAST_VIEW).
    if !cached.is_null() && unsafe { (*cached).object } == x {
        // SAFETY: as above: the cached View is live, and it is the view of `x`.
        return unsafe { &*cached };
    }
    // SAFETY: the caller's contract.
    let v = unsafe { view_unchecked(x) };
    LAST_VIEW.store(std::ptr::from_ref(v).cast_mut(), Ordering::Release);
    v
}

/// The view behind an object of one of our classes, without checking the class:
/// for the ALTREP methods, which R only calls on our objects, in tight loops.
///
/// # Safety
/// `x` must be a live view.
pub unsafe fn view_unchecked<'a>(x: SEXP) -> &'a View {
    // SAFETY: data1 of our objects is the external pointer made by make_view.
    unsafe { &*R_ExternalPtrAddr(R_altrep_data1(x)).cast::<View>() }
}

/// Where reads of `x` come from: its private copy if it has one, else the mapping.
/// A numeric view's `read_at` already points into its private copy when it has
/// one (data2 is set only together with it), so only character views ask R.
///
/// # Safety
/// `x` must be the view `view`.
pub unsafe fn read_ptr(x: SEXP, view: &View) -> *const u8 {
    if view.kind != Kind::Character {
        return view.data_ptr();
    }
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
