#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points. Each is a thin shell: argument checks, then core
//! calls, all inside [`guard`] so errors and panics become R errors.

use crate::boundary::{guard, msg, ErrorKind, RError};
use crate::cache;
pub use crate::mutual_info::ps_mutual_info;
use crate::rapi::*;
use crate::source_pages;
use crate::view::{kind_of, make_view, view_of, HANDLE_SCOPE};
use pageshare_core::header::Kind;
use pageshare_core::segment::{Contents, Handover};
use pageshare_core::strings::{self, Encoding};
use pageshare_core::{index, naming, registry, segment};
use std::ffi::CStr;

// Entry points written in C (src/*.c) because they call R functions that may
// raise an R error, which must not unwind through Rust frames. (SEXP is a
// pointer to R's opaque SEXPREC: FFI-safe as a pointer.)
#[allow(improper_ctypes)]
extern "C" {
    pub fn ps_serialized_size(x: SEXP) -> SEXP;
    pub fn ps_binding(env: SEXP, name: SEXP) -> SEXP;
    pub fn ps_restore_binding(env: SEXP, name: SEXP, kind: SEXP, value: SEXP, saved: SEXP) -> SEXP;
    pub fn ps_unlock_binding(env: SEXP, name: SEXP) -> SEXP;
    pub fn ps_run_iterations(columns: SEXP, expr: SEXP, env: SEXP) -> SEXP;
}
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

// ---- small converters ---------------------------------------------------------

unsafe fn string_arg(x: SEXP, what: &str) -> Result<String, RError> {
    // SAFETY: type and length are checked before the element is read.
    unsafe {
        if TYPEOF(x) != SEXPTYPE::STRSXP || XLENGTH(x) != 1 || STRING_ELT(x, 0) == R_NaString {
            return Err(RError::argument(format!("`{what}` must be a single string")));
        }
        let c = CStr::from_ptr(Rf_translateCharUTF8(STRING_ELT(x, 0)));
        Ok(c.to_string_lossy().into_owned())
    }
}

unsafe fn dir_arg(x: SEXP) -> Result<PathBuf, RError> {
    // SAFETY: forwarded.
    let d = unsafe { string_arg(x, "pageshare.dir")? };
    if !d.starts_with('/') || !Path::new(&d).is_dir() {
        return Err(RError::argument(format!(
            "option `pageshare.dir` must name an existing directory by absolute path, not '{d}'"
        )));
    }
    Ok(PathBuf::from(d))
}

unsafe fn mk_string(s: &str) -> SEXP {
    // SAFETY: length-delimited, UTF-8 flagged.
    unsafe { Rf_mkCharLenCE(s.as_ptr().cast(), s.len() as i32, cetype_t::CE_UTF8) }
}

unsafe fn strings(v: &[String]) -> SEXP {
    // SAFETY: the vector is protected while its elements are created.
    unsafe {
        let out = Rf_protect(Rf_allocVector(SEXPTYPE::STRSXP, v.len() as R_xlen_t));
        for (i, s) in v.iter().enumerate() {
            SET_STRING_ELT(out, i as R_xlen_t, mk_string(s));
        }
        Rf_unprotect(1);
        out
    }
}

unsafe fn raw_vec(b: &[u8]) -> SEXP {
    // SAFETY: the new vector has b.len() bytes.
    unsafe {
        let out = Rf_allocVector(SEXPTYPE::RAWSXP, b.len() as R_xlen_t);
        std::ptr::copy_nonoverlapping(b.as_ptr(), RAW(out), b.len());
        out
    }
}

/// Named list from (name, value) pairs; values must already be protected or fresh.
unsafe fn named_list(items: &[(&str, SEXP)]) -> SEXP {
    // SAFETY: both vectors are protected while filled; each value is stored
    // immediately after it was created by the caller.
    unsafe {
        let out = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, items.len() as R_xlen_t));
        let names = Rf_protect(Rf_allocVector(SEXPTYPE::STRSXP, items.len() as R_xlen_t));
        for (i, (k, v)) in items.iter().enumerate() {
            SET_VECTOR_ELT(out, i as R_xlen_t, *v);
            SET_STRING_ELT(names, i as R_xlen_t, mk_string(k));
        }
        Rf_setAttrib(out, R_NamesSymbol, names);
        Rf_unprotect(2);
        out
    }
}

/// The strings of a character vector as (bytes, encoding) items, None for NA.
unsafe fn string_items(x: SEXP) -> Vec<Option<(&'static [u8], Encoding)>> {
    // SAFETY: CHARSXPs live in R's global cache at least as long as `x`, which the
    // caller keeps alive while the items are used.
    unsafe {
        (0..XLENGTH(x))
            .map(|i| {
                let c = STRING_ELT(x, i);
                if c == R_NaString {
                    None
                } else {
                    let bytes = std::slice::from_raw_parts(R_CHAR(c).cast::<u8>(), LENGTH(c) as usize);
                    Some((bytes, Encoding::from_cetype(Rf_getCharCE(c))))
                }
            })
            .collect()
    }
}

/// Copy `x`'s data into a new segment called `name` and return a view of it. With
/// `release_source`, `x`'s own pages are then replaced by the segment's
/// (source_pages.rs), so that the data are held once.
unsafe fn copy_into_segment(
    x: SEXP,
    name: &str,
    attr_blob: &[u8],
    release_source: bool,
) -> Result<(SEXP, Option<Handover>, std::sync::Arc<segment::Segment>), RError> {
    // SAFETY: x is a vector of `kind`; its data pointer covers len * elem_size bytes.
    unsafe {
        let kind = kind_of(x)?;
        let mut handed = None;
        let seg = if kind == Kind::Character {
            let items = string_items(x);
            let total: u64 = items.iter().flatten().map(|(b, _)| b.len() as u64).sum();
            let data_len = strings::packed_len(items.len() as u64, total)
                .ok_or_else(|| RError::argument("the character vector is too large to share"))?;
            let contents = Contents { kind, length: items.len() as u64, data_len, attributes: attr_blob };
            registry::create(name, contents, |dst| strings::pack(items.iter().copied(), dst)).map_err(msg)?
        } else {
            let len = XLENGTH(x) as u64;
            let bytes = (len * kind.elem_size()) as usize;
            let data: &[u8] =
                if bytes > 0 { std::slice::from_raw_parts(DATAPTR_RO(x).cast::<u8>(), bytes) } else { &[] };
            // The phase only matters for a source whose pages can be released.
            let phase = if bytes > 0 && ALTREP(x) == 0 { source_pages::phase_of(x) } else { 0 };
            let contents = Contents { kind, length: len, data_len: bytes as u64, attributes: attr_blob };
            let handover = if release_source && ALTREP(x) == 0 { source_pages::handover(x, bytes) } else { None };
            // SAFETY: handed-over pages are x's own (checked by handover()); R is
            // single-threaded, so nothing writes them during the copy.
            let (seg, n) = registry::create_copy(name, contents, data, phase, handover).map_err(msg)?;
            handed = handover.filter(|_| n > 0).map(|h| Handover { lo: h.lo, hi: h.lo + n });
            seg
        };
        let len = seg.header().length;
        Ok((make_view(seg.clone(), kind, 0, len), handed, seg))
    }
}

const ATTRIBUTES_FAILED: &str =
    "the attributes of the object could not be given to its shared view (see the error above)";

// ---- entry points ---------------------------------------------------------------

/// share(x): the view of x (itself if x is a view; the cached one if x was shared).
#[no_mangle]
pub extern "C" fn ps_share(x: SEXP, attrs: SEXP, cache_limit: SEXP, release_source: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        if view_of(x).is_some() {
            return Ok(x);
        }
        if let Some(v) = cache::lookup(x, attrs) {
            return Ok(v);
        }
        let limit = Rf_asReal(cache_limit);
        let limit = if limit.is_finite() && limit >= 0.0 { limit as u64 } else { u64::MAX };
        let name = naming::anonymous().map_err(msg)?;
        let release = Rf_asInteger(release_source) == 1;
        let (view, handed, _) = copy_into_segment(x, &name, &[], release)?;
        let view = Rf_protect(view);
        if !set_attributes(view, attrs) {
            Rf_unprotect(1);
            return Err(RError::internal(ATTRIBUTES_FAILED));
        }
        // Marks x not mutable: an in-place write would make it differ from its
        // view, so R duplicates it first (see cache.rs).
        cache::insert(x, attrs, view, view_of(view).map_or(0, |v| v.bytes() as u64), handed);
        cache::trim_to(limit);
        Rf_unprotect(1);
        Ok(view)
    })
}

/// share_packed(leaves, attrs): vectors of one element type (not character, not
/// views) copied one after the other into one new segment; returns their views,
/// each a slice of it with the attributes given for it. Small vectors (a list of
/// many columns, a data frame of many narrow columns) reach the workers as
/// handles this way, at the cost of one segment, one descriptor and one
/// mapping for all of them.
#[no_mangle]
pub extern "C" fn ps_share_packed(leaves: SEXP, attrs: SEXP, cache_limit: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let n = XLENGTH(leaves);
        if n == 0 || TYPEOF(leaves) != SEXPTYPE::VECSXP || XLENGTH(attrs) != n {
            return Err(RError::argument(
                "share_packed() needs a non-empty list of vectors and one attribute list per vector",
            ));
        }
        let kind = kind_of(VECTOR_ELT(leaves, 0))?;
        for i in 0..n {
            let el = VECTOR_ELT(leaves, i);
            if view_of(el).is_some() || kind_of(el)? != kind || kind == Kind::Character {
                return Err(RError::argument("share_packed() packs ordinary vectors of one non-character type"));
            }
        }
        let out = Rf_protect(Rf_allocVector(SEXPTYPE::VECSXP, n));
        // Share once: a vector packed before (and unchanged) keeps its view.
        let mut todo: Vec<(R_xlen_t, u64)> = Vec::with_capacity(n as usize);
        for i in 0..n {
            match cache::lookup(VECTOR_ELT(leaves, i), VECTOR_ELT(attrs, i)) {
                Some(v) => {
                    SET_VECTOR_ELT(out, i, v);
                }
                None => todo.push((i, XLENGTH(VECTOR_ELT(leaves, i)) as u64)),
            }
        }
        let limit = Rf_asReal(cache_limit);
        let limit = if limit.is_finite() && limit >= 0.0 { limit as u64 } else { u64::MAX };
        if todo.is_empty() {
            Rf_unprotect(1);
            return Ok(out);
        }
        let total: u64 = todo.iter().map(|(_, len)| len).sum();
        let elem = kind.elem_size();
        let Some(data_len) = total.checked_mul(elem) else {
            Rf_unprotect(1);
            return Err(RError::argument("the vectors are too large to pack"));
        };
        let made = (|| {
            let name = naming::anonymous().map_err(msg)?;
            let contents = Contents { kind, length: total, data_len, attributes: &[] };
            registry::create(&name, contents, |dst| {
                let mut at = 0usize;
                for (i, len) in &todo {
                    let bytes = (*len * elem) as usize;
                    if bytes > 0 {
                        // SAFETY: leaf i is an ordinary vector of `len` elements of
                        // `kind`; dst holds data_len bytes, the sum over the leaves.
                        let src = std::slice::from_raw_parts(DATAPTR_RO(VECTOR_ELT(leaves, *i)).cast::<u8>(), bytes);
                        dst[at..at + bytes].copy_from_slice(src);
                    }
                    at += bytes;
                }
            })
            .map_err(msg)
        })();
        let seg = match made {
            Ok(seg) => seg,
            Err(e) => {
                Rf_unprotect(1);
                return Err(e);
            }
        };
        let mut offset = 0u64;
        for (i, len) in &todo {
            let view = make_view(seg.clone(), kind, offset, *len);
            SET_VECTOR_ELT(out, *i, view);
            offset += len;
            let a = VECTOR_ELT(attrs, *i);
            if !set_attributes(view, a) {
                Rf_unprotect(1);
                return Err(RError::internal(ATTRIBUTES_FAILED));
            }
            cache::insert(VECTOR_ELT(leaves, *i), a, view, len * elem, None);
        }
        cache::trim_to(limit);
        Rf_unprotect(1);
        Ok(out)
    })
}

/// Could walking `x` share anything: is `x`, or a list element at any depth
/// (up to 50), a view, a received vector, or a vector of at least `threshold`
/// data bytes (character: 8 bytes per element plus the text), or a list whose
/// packable elements ([`packable_bytes`]) reach `threshold` together? A prefilter for
/// the R-level walk, which costs ~10 us per element: a future_lapply chunk's
/// list of 4000 indices took ~35 ms to walk, on the master for every future
/// and on the worker for every result. May say yes where the walk then finds
/// nothing; never says no where it would find something.
#[no_mangle]
pub extern "C" fn ps_worth_walking(x: SEXP, threshold: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarLogical(worth_walking(x, Rf_asReal(threshold), 0) as i32)) })
}

unsafe fn worth_walking(x: SEXP, threshold: f64, depth: u32) -> bool {
    // SAFETY: x is a valid SEXP; only lengths and list elements are read.
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
            SEXPTYPE::STRSXP => {
                bytes(8.0) || (0..n).map(|i| LENGTH(STRING_ELT(x, i)) as f64).sum::<f64>() + n as f64 * 8.0 >= threshold
            }
            SEXPTYPE::VECSXP => {
                depth < 50
                    && ((0..n).any(|i| worth_walking(VECTOR_ELT(x, i), threshold, depth + 1))
                        || packable_bytes(x) >= threshold)
            }
            _ => false,
        }
    }
}

/// Data bytes of the elements of list `x` that can be packed together into one
/// segment (ordinary logical, integer, double, complex and raw vectors).
unsafe fn packable_bytes(x: SEXP) -> f64 {
    // SAFETY: x is a list; only its elements' types and lengths are read.
    unsafe {
        (0..XLENGTH(x))
            .map(|i| {
                let el = VECTOR_ELT(x, i);
                if view_of(el).is_some() {
                    return 0.0;
                }
                match kind_of(el) {
                    Ok(k) if k != Kind::Character => XLENGTH(el) as f64 * k.elem_size() as f64,
                    _ => 0.0,
                }
            })
            .sum()
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
pub extern "C" fn ps_is_view(x: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarLogical(view_of(x).is_some() as i32)) })
}

/// The segment behind a view.
unsafe fn segment_of(x: SEXP) -> Option<std::sync::Arc<pageshare_core::segment::Segment>> {
    // SAFETY: forwarded.
    unsafe { view_of(x).map(|v| v.seg.clone()) }
}

/// What shared_info() reports for a view.
struct Info<'a> {
    seg: &'a pageshare_core::segment::Segment,
    kind: Kind,
    bytes: usize,
    offset: u64,
    len: u64,
    materializations: u64,
    private_copy: bool,
}

/// shared_info(x): a list describing the view, or NULL.
#[no_mangle]
pub extern "C" fn ps_view_info(x: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let info = if let Some(v) = view_of(x) {
            Info {
                seg: &v.seg,
                kind: v.kind,
                bytes: v.bytes(),
                offset: v.offset,
                len: v.len,
                materializations: v.materializations.get(),
                private_copy: R_altrep_data2(x) != nil() || v.is_modified(),
            }
        } else {
            return Ok(nil());
        };
        Ok(info_list(&info))
    })
}

unsafe fn info_list(i: &Info<'_>) -> SEXP {
    // SAFETY: every value is protected until the list holds it.
    unsafe {
        let vals = [
            Rf_protect(Rf_ScalarString(mk_string(i.seg.name()))),
            Rf_protect(Rf_ScalarInteger(i.seg.locator().fd)),
            Rf_protect(Rf_ScalarReal(i.bytes as f64)),
            Rf_protect(Rf_ScalarReal(i.seg.total_size() as f64)),
            Rf_protect(Rf_ScalarInteger(i.seg.owner().0 as i32)),
            Rf_protect(Rf_ScalarLogical(i.seg.owned_here() as i32)),
            Rf_protect(Rf_ScalarString(mk_string(i.kind.name()))),
            Rf_protect(Rf_ScalarReal(i.offset as f64)),
            Rf_protect(Rf_ScalarReal(i.len as f64)),
            Rf_protect(Rf_ScalarReal(i.materializations as f64)),
            Rf_protect(Rf_ScalarLogical(i.private_copy as i32)),
            Rf_protect(Rf_ScalarString(mk_string(&i.seg.maps_path()))),
            Rf_protect(Rf_ScalarReal(i.seg.source_released() as f64)),
        ];
        let out = named_list(&[
            ("name", vals[0]),
            ("fd", vals[1]),
            ("bytes", vals[2]),
            ("segment_bytes", vals[3]),
            ("owner_pid", vals[4]),
            ("owned_here", vals[5]),
            ("type", vals[6]),
            ("offset", vals[7]),
            ("length", vals[8]),
            ("materializations", vals[9]),
            ("private_copy", vals[10]),
            ("memfd", vals[11]),
            ("source_released", vals[12]),
        ]);
        Rf_unprotect(vals.len() as i32);
        out
    }
}

/// Open (+1) or close (-1) a handle scope; returns the new depth.
#[no_mangle]
pub extern "C" fn ps_scope(delta: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let d = Rf_asInteger(delta);
        let depth = if d > 0 {
            HANDLE_SCOPE.fetch_add(1, Ordering::Relaxed) + 1
        } else if d < 0 {
            let cur = HANDLE_SCOPE.load(Ordering::Relaxed);
            let new = cur.saturating_sub(1);
            HANDLE_SCOPE.store(new, Ordering::Relaxed);
            new
        } else {
            HANDLE_SCOPE.load(Ordering::Relaxed)
        };
        Ok(Rf_ScalarInteger(depth as i32))
    })
}

/// Remove stale index entries (their holder is gone) under `dir`.
#[no_mangle]
pub extern "C" fn ps_sweep(dir: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let dir = dir_arg(dir)?;
        Ok(strings(&index::sweep(&dir).map_err(msg)?))
    })
}

/// The segments that exist for this process's user as far as it can tell: the
/// ones it holds, and the registered ones some live process holds (from the
/// index under `dir`). Sorted, for diagnostics and tests.
#[no_mangle]
pub extern "C" fn ps_list_segments(dir: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let dir = dir_arg(dir)?;
        let mut names = registry::owned();
        names.extend(index::live_names(&dir).map_err(msg)?);
        names.sort();
        names.dedup();
        Ok(strings(&names))
    })
}

/// Variables registered in `namespace` by any live process of this user.
#[no_mangle]
pub extern "C" fn ps_namespace_variables(ns: SEXP, dir: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let ns = string_arg(ns, "namespace")?;
        let dir = dir_arg(dir)?;
        let vars: Vec<String> = index::live_names(&dir)
            .map_err(msg)?
            .iter()
            .filter_map(|n| naming::parse_named(n))
            .filter(|(n, _)| *n == ns)
            .map(|(_, v)| v)
            .collect();
        Ok(strings(&vars))
    })
}

/// registerVariables: a named segment held by this process until released.
#[no_mangle]
pub extern "C" fn ps_register(
    ns: SEXP,
    var: SEXP,
    x: SEXP,
    attrs: SEXP,
    blob: SEXP,
    dir: SEXP,
    release_source: SEXP,
) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let ns = string_arg(ns, "namespace")?;
        let var = string_arg(var, "variable name")?;
        let dir = dir_arg(dir)?;
        let name = naming::named(&ns, &var).map_err(msg)?;
        let blob: &[u8] = if TYPEOF(blob) == SEXPTYPE::RAWSXP {
            std::slice::from_raw_parts(RAW(blob), XLENGTH(blob) as usize)
        } else {
            &[]
        };
        let release = Rf_asInteger(release_source) == 1;
        let context = |e: RError| e.context(&format!("variable '{var}'"));
        // Refuse a held name before copying anything; publishing checks again.
        index::check_free(&dir, &name).map_err(|e| context(RError::from(e)))?;
        let (view, _, seg) = copy_into_segment(x, &name, blob, release).map_err(context)?;
        let view = Rf_protect(view);
        if let Err(e) = registry::register(&dir, seg) {
            Rf_unprotect(1);
            return Err(context(RError::from(e)));
        }
        let set = set_attributes(view, attrs);
        Rf_unprotect(1);
        if set {
            Ok(view)
        } else {
            Err(RError::internal(ATTRIBUTES_FAILED))
        }
    })
}

/// A view of a named segment, bare, plus its attribute blob: list(view, blob).
#[no_mangle]
pub extern "C" fn ps_retrieve(ns: SEXP, var: SEXP, dir: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let ns_s = string_arg(ns, "namespace")?;
        let var_s = string_arg(var, "variable name")?;
        let dir = dir_arg(dir)?;
        let name = naming::named(&ns_s, &var_s).map_err(msg)?;
        let seg = registry::open_registered(&dir, &name).map_err(|e| match e {
            pageshare_core::Error::Missing { .. } => RError::new(
                ErrorKind::NotRegistered,
                format!("variable '{var_s}' is not registered in namespace '{ns_s}'"),
            ),
            other => RError::from(other),
        })?;
        let h = seg.header().clone();
        let blob = Rf_protect(raw_vec(seg.attributes()));
        let view = Rf_protect(make_view(seg, h.kind, 0, h.length));
        let out = named_list(&[("view", view), ("attributes", blob)]);
        Rf_unprotect(2);
        Ok(out)
    })
}

/// Is `view` (retrieved earlier) a view of the segment the index publishes
/// under the name now? TRUE, FALSE (the name was released and registered
/// again: another segment), or NA (no live registration of the name). A view
/// cached by name is used only while this holds: its segment stays readable
/// after a release, so only the index can tell that the name moved on.
#[no_mangle]
pub extern "C" fn ps_is_current(view: SEXP, ns: SEXP, var: SEXP, dir: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let ns = string_arg(ns, "namespace")?;
        let var = string_arg(var, "variable name")?;
        let dir = dir_arg(dir)?;
        let name = naming::named(&ns, &var).map_err(msg)?;
        let Some(seg) = segment_of(view) else { return Ok(Rf_ScalarLogical(0)) };
        Ok(match index::lookup(&dir, &name) {
            Ok(loc) => Rf_ScalarLogical((loc.token == seg.token()) as i32),
            Err(pageshare_core::Error::Missing { .. }) => Rf_ScalarLogical(R_NaInt),
            Err(e) => return Err(RError::from(e)),
        })
    })
}

#[no_mangle]
pub extern "C" fn ps_set_attributes(view: SEXP, attrs: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        if view_of(view).is_none() {
            return Err(RError::internal("internal: ps_set_attributes needs a view"));
        }
        if set_attributes(view, attrs) {
            Ok(view)
        } else {
            Err(RError::internal(ATTRIBUTES_FAILED))
        }
    })
}

#[no_mangle]
pub extern "C" fn ps_release(ns: SEXP, var: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let ns = string_arg(ns, "namespace")?;
        let var = string_arg(var, "variable name")?;
        let name = naming::named(&ns, &var).map_err(msg)?;
        Ok(Rf_ScalarLogical(registry::release(&name) as i32))
    })
}

/// Registered (namespace, variable) pairs held by this process: a 2-column character matrix as a list.
#[no_mangle]
pub extern "C" fn ps_held() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let pairs: Vec<(String, String)> = registry::held().iter().filter_map(|n| naming::parse_named(n)).collect();
        Ok(string_columns(("namespace", "variable"), pairs))
    })
}

/// list(<a> = first strings, <b> = second strings) of `rows`.
unsafe fn string_columns(names: (&str, &str), rows: Vec<(String, String)>) -> SEXP {
    let (first, second): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
    // SAFETY: both vectors are protected until the list holds them.
    unsafe {
        let a = Rf_protect(strings(&first));
        let b = Rf_protect(strings(&second));
        let out = named_list(&[(names.0, a), (names.1, b)]);
        Rf_unprotect(2);
        out
    }
}

/// Segments mapped in this process.
#[no_mangle]
pub extern "C" fn ps_mapped() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(strings(&registry::mapped())) })
}

/// The number of mapped segments no live process holds any more.
#[no_mangle]
pub extern "C" fn ps_mapped_stale() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarInteger(registry::stale().len() as i32)) })
}

/// Release everything this process holds or owns (package unload).
#[no_mangle]
pub extern "C" fn ps_release_all() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let n = cache::clear() + registry::release_all() + segment::release_handoffs();
        Ok(Rf_ScalarInteger(n as i32))
    })
}

#[no_mangle]
pub extern "C" fn ps_cache_size() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarInteger(cache::len() as i32)) })
}

/// The identity cache's entries: list(address, bytes, alive), for diagnostics.
#[no_mangle]
pub extern "C" fn ps_cache_entries() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let d = cache::describe();
        let addr: Vec<String> = d.iter().map(|e| format!("{:#x}", e.0)).collect();
        let a = Rf_protect(strings(&addr));
        let b = Rf_protect(Rf_allocVector(SEXPTYPE::REALSXP, d.len() as R_xlen_t));
        let c = Rf_protect(Rf_allocVector(SEXPTYPE::LGLSXP, d.len() as R_xlen_t));
        for (i, e) in d.iter().enumerate() {
            *REAL(b).add(i) = e.1 as f64;
            *LOGICAL(c).add(i) = e.2 as i32;
        }
        let out = named_list(&[("address", a), ("bytes", b), ("alive", c)]);
        Rf_unprotect(3);
        Ok(out)
    })
}

/// Evict cache entries whose source is no longer referenced or that exceed
/// `limit` bytes (after each GC); with `limit = 0`, forget every entry.
#[no_mangle]
pub extern "C" fn ps_cache_evict(limit: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let l = Rf_asReal(limit);
        let n = if l <= 0.0 {
            cache::clear()
        } else {
            cache::evict_unused(if l.is_finite() { l as u64 } else { u64::MAX })
        };
        Ok(Rf_ScalarInteger(n as i32))
    })
}

/// Memory a new segment could take now (MemAvailable, or the cgroup's limit).
#[no_mangle]
pub extern "C" fn ps_free_bytes() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarReal(pageshare_core::os::available_memory() as f64)) })
}

/// Set the most bytes this process may hold in segments (Inf or NA: no limit).
#[no_mangle]
pub extern "C" fn ps_set_budget(bytes: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let b = Rf_asReal(bytes);
        registry::set_budget(if b.is_finite() && b >= 0.0 { b as u64 } else { u64::MAX });
        Ok(nil())
    })
}

/// Receiver mode on or off (see `altrep::RECEIVER_MODE`).
#[no_mangle]
pub extern "C" fn ps_set_receiver_mode(on: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        crate::altrep::RECEIVER_MODE.store(Rf_asLogical(on) == 1, Ordering::Relaxed);
        Ok(nil())
    })
}

/// A pageshare task starts (TRUE) or ends (FALSE) on a worker.
#[no_mangle]
pub extern "C" fn ps_task_state(running: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        crate::altrep::IN_TASK.store(Rf_asLogical(running) == 1, Ordering::Relaxed);
        Ok(nil())
    })
}

/// The handles this process could not open since the last call, as
/// list(class = <chr>, message = <chr>); forgets them.
#[no_mangle]
pub extern "C" fn ps_take_receive_failures() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let taken: Vec<(&'static str, String)> =
            std::mem::take(&mut *crate::altrep::RECEIVE_FAILURES.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(string_columns(("class", "message"), taken.into_iter().map(|(c, m)| (c.to_string(), m)).collect()))
    })
}

/// Can receivers open what this process shares (see
/// `os::descriptors_openable_by_others`)?
#[no_mangle]
pub extern "C" fn ps_shares_openable() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarLogical(pageshare_core::os::descriptors_openable_by_others() as i32)) })
}

/// A point to roll sharing back to: c(segments made, identity cache clock).
#[no_mangle]
pub extern "C" fn ps_share_mark() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let out = Rf_protect(Rf_allocVector(SEXPTYPE::REALSXP, 2));
        *REAL(out) = registry::mark() as f64;
        *REAL(out).add(1) = cache::mark() as f64;
        Rf_unprotect(1);
        Ok(out)
    })
}

/// Undo the sharing since `mark` (ps_share_mark()): the identity cache forgets
/// the views made since and this process stops holding the segments made
/// since. Returns the number of segments let go.
#[no_mangle]
pub extern "C" fn ps_share_rollback(mark: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        if TYPEOF(mark) != SEXPTYPE::REALSXP || XLENGTH(mark) != 2 {
            return Err(RError::internal("internal: ps_share_rollback needs a mark made by ps_share_mark"));
        }
        let (made, clock) = (*REAL(mark) as u64, *REAL(mark).add(1) as u64);
        cache::forget_since(clock);
        Ok(Rf_ScalarInteger(registry::release_made_since(made) as i32))
    })
}

/// Bytes of the segments this process holds.
#[no_mangle]
pub extern "C" fn ps_held_bytes() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarReal(registry::held_bytes() as f64)) })
}

/// A worker starting a task: close the descriptors of results handed to the
/// master before (it has received them by now).
#[no_mangle]
pub extern "C" fn ps_release_handoffs() -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe { Ok(Rf_ScalarInteger(segment::release_handoffs() as i32)) })
}

/// A worker handing a view to its master: stop holding it (see `Segment::disown`).
#[no_mangle]
pub extern "C" fn ps_disown(x: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let seg = segment_of(x).ok_or_else(|| RError::argument("`x` is not a pageshare view"))?;
        seg.disown();
        Ok(x)
    })
}

/// A master receiving a view from a worker: hold it from now on.
#[no_mangle]
pub extern "C" fn ps_adopt(x: SEXP) -> SEXP {
    // SAFETY: a .Call entry point: R calls it on its main thread with valid SEXPs, where R's API may be used.
    guard(|| unsafe {
        let seg = segment_of(x).ok_or_else(|| RError::argument("`x` is not a pageshare view"))?;
        seg.adopt().map_err(msg)?;
        Ok(x)
    })
}
