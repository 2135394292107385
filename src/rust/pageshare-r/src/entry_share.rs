#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points of `share()`, `is_shared()`, `shared_info()` and
//! `with_handles()` (R/share.R, R/sharing-rule.R). Each is called by its C
//! shell in src/entry_points.c and runs its body through [`entry`].

use crate::args::{byte_limit_arg, flag_arg};
use crate::boundary::{entry, RError};
use crate::r_calls::{self, named_list, scalar_integer, scalar_logical, scalar_real, scalar_string, Protect};
use crate::r_sys::*;
use crate::share_pipeline;
use crate::view::{kind_of, view_of, HANDLE_SCOPE};
use pageshare_core::header::Kind;
use std::sync::atomic::Ordering;

/// share(x): the view of x (itself if x is a view; the cached one if x was shared).
#[no_mangle]
pub extern "C" fn ps_share_rs(x: SEXP, attrs: SEXP, cache_limit: SEXP, release_source: SEXP) -> SEXP {
    entry(|| {
        let limit = byte_limit_arg(cache_limit)?;
        let release = flag_arg(release_source)?;
        // SAFETY: a .Call entry point: R's main thread, valid SEXPs.
        unsafe { share_pipeline::share(x, attrs, limit, release) }
    })
}

/// share_packed(leaves, attrs): see `share_pipeline::share_packed`.
#[no_mangle]
pub extern "C" fn ps_share_packed_rs(leaves: SEXP, attrs: SEXP, cache_limit: SEXP) -> SEXP {
    entry(|| {
        let limit = byte_limit_arg(cache_limit)?;
        // SAFETY: a .Call entry point: R's main thread, valid SEXPs.
        unsafe { share_pipeline::share_packed(leaves, attrs, limit) }
    })
}

/// Could walking `x` share anything: is `x`, or a list element at any depth
/// (up to 50), a view, a received vector, or a vector of at least `threshold`
/// data bytes (character: 8 bytes per element plus the text), or a list whose
/// stored row names are one of these, or whose packable elements at any
/// depth ([`packable_bytes`]) reach `threshold` together? A prefilter for the
/// R-level walk, which costs ~10 us per element: a future_lapply chunk's list of 4000 indices took ~35 ms to walk,
/// on the master for every future and on the worker for every result. May say
/// yes where the walk then finds nothing; never says no where it would find
/// something.
#[no_mangle]
pub extern "C" fn ps_worth_walking_rs(x: SEXP, threshold: SEXP) -> SEXP {
    entry(|| {
        let threshold = r_calls::as_real(threshold)?;
        // SAFETY: a .Call entry point: R's main thread, valid SEXPs.
        scalar_logical(unsafe { worth_walking(x, threshold, 0) } as i32)
    })
}

/// The type number of S4 objects (R's S4SXP, OBJSXP from R 4.4).
const S4_OBJECT_TYPE: u32 = 25;

pub(crate) unsafe fn worth_walking(x: SEXP, threshold: f64, depth: u32) -> bool {
    // SAFETY: x is a valid SEXP; only types, lengths and the strings and
    // elements of ordinary vectors are read.
    unsafe {
        if view_of(x).is_some() {
            return true;
        }
        let n = vector_length(x);
        let bytes = |per: f64| n as f64 * per >= threshold;
        match TYPEOF(x) {
            SEXPTYPE::LGLSXP | SEXPTYPE::INTSXP => bytes(4.0),
            SEXPTYPE::REALSXP => bytes(8.0),
            SEXPTYPE::CPLXSXP => bytes(16.0),
            SEXPTYPE::RAWSXP => bytes(1.0),
            // (another class's ALTREP strings are not read here: the walk decides)
            SEXPTYPE::STRSXP if ALTREP(x) != 0 => true,
            SEXPTYPE::STRSXP => {
                bytes(8.0) || (0..n).map(|i| LENGTH(STRING_ELT(x, i)) as f64).sum::<f64>() + n as f64 * 8.0 >= threshold
            }
            SEXPTYPE::VECSXP => {
                depth < 50
                    && ((0..n).any(|i| worth_walking(VECTOR_ELT(x, i), threshold, depth + 1))
                        || match stored_row_names(x) {
                            Ok(rows) => rows.is_some_and(|rows| worth_walking(rows, threshold, depth + 1)),
                            // (R could not say: the walk will)
                            Err(_) => true,
                        }
                        || packable_bytes(x, threshold, 0.0, depth, threshold) >= threshold)
            }
            // (the walk decides: an environment's bindings are listed there)
            SEXPTYPE::ENVSXP => true,
            // (likewise an S4 object's slots, its attributes, which R's API has
            // no reader of here before R 4.5; its type is named S4SXP or, from
            // R 4.4 on, OBJSXP in the bindings, with the same number)
            t if t as u32 == S4_OBJECT_TYPE => true,
            _ => false,
        }
    }
}

/// The R walk's chunk rule (R/sharing-rule.R, `pack_chunk()`): data bytes of
/// the vectors in list `x` and in the lists inside it (up to depth 50, as the
/// walk descends) that packing may take: ordinary logical, integer, double,
/// complex and raw vectors, not views, of at least `min` and less than
/// `threshold` bytes, and the lists' integer row names of that size
/// ([`stored_row_names`]). Stops counting once `enough` is reached.
#[no_mangle]
pub extern "C" fn ps_packable_bytes_rs(x: SEXP, threshold: SEXP, min: SEXP) -> SEXP {
    entry(|| {
        let threshold = r_calls::as_real(threshold)?;
        let min = r_calls::as_real(min)?;
        // SAFETY: a .Call entry point: R's main thread, valid SEXPs.
        let bytes = unsafe {
            if TYPEOF(x) == SEXPTYPE::VECSXP {
                packable_bytes(x, threshold, min, 0, f64::INFINITY)
            } else {
                0.0
            }
        };
        scalar_real(bytes)
    })
}

/// Data bytes of the packable vectors of list `x` at depth `depth` and of the
/// lists inside it (see [`ps_packable_bytes_rs`]); stops once `enough` is reached.
unsafe fn packable_bytes(x: SEXP, threshold: f64, min: f64, depth: u32, enough: f64) -> f64 {
    // SAFETY: x is a list; only its elements' types and lengths are read.
    unsafe {
        let mut sum = 0.0;
        for i in 0..XLENGTH(x) {
            let el = VECTOR_ELT(x, i);
            if view_of(el).is_some() {
                continue;
            }
            if TYPEOF(el) == SEXPTYPE::VECSXP {
                if depth + 1 < 50 {
                    sum += packable_bytes(el, threshold, min, depth + 1, enough - sum);
                }
            } else if let Ok(k) = kind_of(el) {
                let b = XLENGTH(el) as f64 * k.elem_size() as f64;
                if k != Kind::Character && b >= min && b < threshold {
                    sum += b;
                }
            }
            if sum >= enough {
                return sum;
            }
        }
        // (after the elements: the walk meets a list's row names last)
        if let Ok(Some(rows)) = stored_row_names(x) {
            if view_of(rows).is_none() && TYPEOF(rows) == SEXPTYPE::INTSXP {
                let b = XLENGTH(rows) as f64 * 4.0;
                if b >= min && b < threshold {
                    sum += b;
                }
            }
        }
        sum
    }
}

/// The row names that list `x`, an object (a data frame), keeps as a vector
/// of their own (after subsetting or split(); not R's compact form of 1:n,
/// which getAttrib() gives as an ALTREP sequence), or None. The walk shares
/// them as it shares the list's elements (R/sharing-rule.R,
/// `stored_row_names()`).
///
/// # Safety
/// `x` is a valid list, on R's main thread.
unsafe fn stored_row_names(x: SEXP) -> Result<Option<SEXP>, RError> {
    // SAFETY: the class bit and the attribute of a valid object are read;
    // getAttrib allocates for compact row names (a small ALTREP sequence, not
    // kept, only looked at), so it runs under try_r, and what the caller holds
    // is reachable from protected values.
    unsafe {
        if Rf_isObject(x) == Rboolean::FALSE {
            return Ok(None);
        }
        let rows = r_calls::try_r(|| Rf_getAttrib(x, R_RowNamesSymbol))?;
        let stored = rows != nil() && (ALTREP(rows) == 0 || view_of(rows).is_some());
        Ok(stored.then_some(rows))
    }
}

/// XLENGTH of a vector, 0 for anything else.
unsafe fn vector_length(x: SEXP) -> R_xlen_t {
    // SAFETY: XLENGTH is defined for every vector type checked here.
    unsafe {
        match TYPEOF(x) {
            SEXPTYPE::LGLSXP
            | SEXPTYPE::INTSXP
            | SEXPTYPE::REALSXP
            | SEXPTYPE::CPLXSXP
            | SEXPTYPE::RAWSXP
            | SEXPTYPE::STRSXP
            | SEXPTYPE::VECSXP => XLENGTH(x),
            _ => 0,
        }
    }
}

#[no_mangle]
pub extern "C" fn ps_is_view_rs(x: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R's main thread, a valid SEXP.
    entry(|| scalar_logical(unsafe { view_of(x) }.is_some() as i32))
}

/// shared_info(x): a list describing the view, or NULL.
#[no_mangle]
pub extern "C" fn ps_view_info_rs(x: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: a .Call entry point: R's main thread, a valid SEXP.
        let Some(v) = (unsafe { view_of(x) }) else { return Ok(nil()) };
        // SAFETY: x is a view; data2 is only compared.
        let private_copy = unsafe { R_altrep_data2(x) } != nil() || v.is_modified();
        let seg = &v.seg;
        let mut scope = Protect::new();
        // (each value is protected as soon as it is made)
        let mut kept = |v: Result<SEXP, RError>| scope.protect(v?);
        let values = [
            ("name", kept(scalar_string(seg.name()))?),
            ("fd", kept(scalar_integer(seg.locator().fd))?),
            ("bytes", kept(scalar_real(v.bytes() as f64))?),
            ("segment_bytes", kept(scalar_real(seg.total_size() as f64))?),
            ("owner_pid", kept(scalar_integer(seg.owner().0 as i32))?),
            ("owned_here", kept(scalar_logical(seg.owned_here() as i32))?),
            ("type", kept(scalar_string(v.kind.name()))?),
            ("offset", kept(scalar_real(v.offset as f64))?),
            ("length", kept(scalar_real(v.len as f64))?),
            ("materializations", kept(scalar_real(v.materializations.get() as f64))?),
            ("private_copy", kept(scalar_logical(private_copy as i32))?),
            ("memfd", kept(scalar_string(&seg.maps_path()))?),
            ("source_released", kept(scalar_real(seg.source_released() as f64))?),
        ];
        named_list(&values)
    })
}

/// Open (+1) or close (-1) a handle scope; returns the new depth.
#[no_mangle]
pub extern "C" fn ps_scope_rs(delta: SEXP) -> SEXP {
    entry(|| {
        let d = r_calls::as_integer(delta)?;
        let depth = if d > 0 {
            HANDLE_SCOPE.fetch_add(1, Ordering::Relaxed) + 1
        } else if d < 0 {
            let new = HANDLE_SCOPE.load(Ordering::Relaxed).saturating_sub(1);
            HANDLE_SCOPE.store(new, Ordering::Relaxed);
            new
        } else {
            HANDLE_SCOPE.load(Ordering::Relaxed)
        };
        scalar_integer(depth as i32)
    })
}

/// Give a view (fresh, made by retrieveViews) its attributes.
#[no_mangle]
pub extern "C" fn ps_set_attributes_rs(view: SEXP, attrs: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: a .Call entry point: R's main thread, valid SEXPs.
        if unsafe { view_of(view) }.is_none() {
            return Err(RError::internal("internal: ps_set_attributes needs a view"));
        }
        // SAFETY: `view` is a view R holds (an argument), `attrs` a pairlist.
        unsafe { r_calls::set_attributes(view, attrs)? };
        Ok(view)
    })
}
