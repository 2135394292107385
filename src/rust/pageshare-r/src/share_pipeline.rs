//! What `share()` and `share_packed()` do with an object, in order: a view is
//! returned as it is; an object shared before (and unchanged) gets its cached
//! view; anything else is copied into a new segment (a character vector packed
//! as strings; another vector byte for byte, its own pages handed over to the
//! segment where that is safe: source_pages.rs), a view of it is made, given
//! the object's attributes, and remembered in the identity cache.

use crate::boundary::{msg, RError};
use crate::cache;
use crate::r_calls::{self, Protect};
use crate::r_sys::*;
use crate::source_pages;
use crate::view::{kind_of, make_view, view_of};
use pageshare_core::header::Kind;
use pageshare_core::segment::{Contents, Handover, Segment};
use pageshare_core::strings::{self, Encoding};
use pageshare_core::{naming, registry};
use std::sync::Arc;

/// The view of `x` with attributes `attrs` (a pairlist): `x` itself if it is a
/// view, the cached view if `x` was shared before, else a new one. The cache
/// then keeps at most `limit` bytes.
///
/// # Safety
/// Main R thread; `x` a valid SEXP, `attrs` a pairlist or R_NilValue.
pub unsafe fn share(x: SEXP, attrs: SEXP, limit: u64, release_source: bool) -> Result<SEXP, RError> {
    // SAFETY: forwarded.
    unsafe {
        if view_of(x).is_some() {
            return Ok(x);
        }
        if let Some(v) = cache::lookup(x, attrs)? {
            return Ok(v);
        }
        let name = naming::anonymous().map_err(msg)?;
        let mut scope = Protect::new();
        let (view, handed, _) = copy_into_segment(x, &name, &[], release_source)?;
        scope.protect(view)?;
        r_calls::set_attributes(view, attrs)?;
        // Marks x not mutable: an in-place write would make it differ from its
        // view, so R duplicates it first (see cache.rs).
        cache::insert(x, attrs, view, view_of(view).map_or(0, |v| v.bytes() as u64), handed)?;
        cache::trim_to(limit);
        Ok(view)
    }
}

/// Vectors of one element type (not character, not views) copied one after
/// the other into one new segment; returns their views, each a slice of it
/// with the attributes given for it. Small vectors (a list of many columns, a
/// data frame of many narrow columns) reach the workers as handles this way,
/// at the cost of one segment, one descriptor and one mapping for all of them.
///
/// # Safety
/// Main R thread; `leaves` a list, `attrs` a list of pairlists.
pub unsafe fn share_packed(leaves: SEXP, attrs: SEXP, limit: u64) -> Result<SEXP, RError> {
    // SAFETY: lengths and types are checked before elements are read.
    unsafe {
        // (the types first: XLENGTH of anything but a vector is an R error)
        let lists = TYPEOF(leaves) == SEXPTYPE::VECSXP && TYPEOF(attrs) == SEXPTYPE::VECSXP;
        let n = if lists { XLENGTH(leaves) } else { 0 };
        if n == 0 || XLENGTH(attrs) != n {
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
        let mut scope = Protect::new();
        let out = scope.alloc_vector(SEXPTYPE::VECSXP, n)?;
        // Share once: a vector packed before (and unchanged) keeps its view.
        let mut todo: Vec<(R_xlen_t, u64)> = Vec::with_capacity(n as usize);
        for i in 0..n {
            match cache::lookup(VECTOR_ELT(leaves, i), VECTOR_ELT(attrs, i))? {
                Some(v) => {
                    SET_VECTOR_ELT(out, i, v);
                }
                None => todo.push((i, XLENGTH(VECTOR_ELT(leaves, i)) as u64)),
            }
        }
        if todo.is_empty() {
            return Ok(out);
        }
        let total: u64 = todo.iter().map(|(_, len)| len).sum();
        let elem = kind.elem_size();
        let data_len = total.checked_mul(elem).ok_or_else(|| RError::argument("the vectors are too large to pack"))?;
        // The data of each leaf, read before the copy (another class's ALTREP
        // vector may have to be expanded, which allocates and may raise).
        let mut sources: Vec<&[u8]> = Vec::with_capacity(todo.len());
        for (i, len) in &todo {
            let bytes = (*len * elem) as usize;
            sources.push(if bytes > 0 {
                std::slice::from_raw_parts(r_calls::dataptr_ro(VECTOR_ELT(leaves, *i))?.cast::<u8>(), bytes)
            } else {
                &[]
            });
        }
        let name = naming::anonymous().map_err(msg)?;
        let contents = Contents { kind, length: total, data_len, attributes: &[] };
        let seg = registry::create(&name, contents, |dst| {
            let mut at = 0usize;
            for src in &sources {
                dst[at..at + src.len()].copy_from_slice(src);
                at += src.len();
            }
        })
        .map_err(msg)?;
        let mut offset = 0u64;
        for (i, len) in &todo {
            let view = make_view(seg.clone(), kind, offset, *len)?;
            SET_VECTOR_ELT(out, *i, view);
            offset += len;
            let a = VECTOR_ELT(attrs, *i);
            r_calls::set_attributes(view, a)?;
            cache::insert(VECTOR_ELT(leaves, *i), a, view, len * elem, None)?;
        }
        cache::trim_to(limit);
        Ok(out)
    }
}

/// Copy `x`'s data into a new segment called `name` and return a view of it,
/// the pages handed over (if any) and the segment. With `release_source`,
/// `x`'s own pages are then replaced by the segment's (source_pages.rs), so
/// that the data are held once.
///
/// # Safety
/// Main R thread; `x` a valid SEXP.
pub unsafe fn copy_into_segment(
    x: SEXP,
    name: &str,
    attr_blob: &[u8],
    release_source: bool,
) -> Result<(SEXP, Option<Handover>, Arc<Segment>), RError> {
    // SAFETY: x is a vector of `kind`; its data pointer covers len * elem_size bytes.
    unsafe {
        let kind = kind_of(x)?;
        let mut handed = None;
        let seg = if kind == Kind::Character {
            let items = string_items(x)?;
            let total: u64 = items.iter().flatten().map(|(b, _)| b.len() as u64).sum();
            let data_len = strings::packed_len(items.len() as u64, total)
                .ok_or_else(|| RError::argument("the character vector is too large to share"))?;
            let contents = Contents { kind, length: items.len() as u64, data_len, attributes: attr_blob };
            registry::create(name, contents, |dst| strings::pack(items.iter().copied(), dst)).map_err(msg)?
        } else {
            let len = XLENGTH(x) as u64;
            let bytes = (len * kind.elem_size()) as usize;
            let data: &[u8] =
                if bytes > 0 { std::slice::from_raw_parts(r_calls::dataptr_ro(x)?.cast::<u8>(), bytes) } else { &[] };
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
        Ok((make_view(seg.clone(), kind, 0, len)?, handed, seg))
    }
}

/// What a segment of `x` would hold: its kind, length and data bytes (a
/// character vector's strings packed as in a segment, see
/// pageshare_core::strings; other vectors' own bytes, borrowed).
///
/// # Safety
/// Main R thread; `x` a shareable vector, kept alive by the caller while the
/// bytes are used.
pub unsafe fn vector_contents(x: SEXP) -> Result<(Kind, u64, std::borrow::Cow<'static, [u8]>), RError> {
    // SAFETY: x is a vector of `kind`; its data pointer covers len * elem_size bytes.
    unsafe {
        let kind = kind_of(x)?;
        let len = XLENGTH(x) as u64;
        if kind == Kind::Character {
            let items = string_items(x)?;
            let total: u64 = items.iter().flatten().map(|(b, _)| b.len() as u64).sum();
            let n = strings::packed_len(items.len() as u64, total)
                .ok_or_else(|| RError::argument("the character vector is too large to share"))?;
            let mut packed = vec![0u8; n as usize];
            strings::pack(items.iter().copied(), &mut packed);
            return Ok((kind, len, std::borrow::Cow::Owned(packed)));
        }
        let bytes = (len * kind.elem_size()) as usize;
        let data: &'static [u8] =
            if bytes > 0 { std::slice::from_raw_parts(r_calls::dataptr_ro(x)?.cast::<u8>(), bytes) } else { &[] };
        Ok((kind, len, std::borrow::Cow::Borrowed(data)))
    }
}

/// A string's bytes and encoding; None for NA.
type StringItem = Option<(&'static [u8], Encoding)>;

/// The strings of a character vector as (bytes, encoding) items, None for NA.
///
/// # Safety
/// `x` a character vector, kept alive by the caller while the items are used.
unsafe fn string_items(x: SEXP) -> Result<Vec<StringItem>, RError> {
    // SAFETY: CHARSXPs live in R's global cache at least as long as `x`.
    unsafe {
        // Another class's ALTREP strings are expanded first (which may raise),
        // so that every string read below is held by that array.
        let array: *const SEXP = if ALTREP(x) != 0 { r_calls::dataptr_ro(x)?.cast() } else { STRING_PTR_RO(x) };
        (0..XLENGTH(x) as usize)
            .map(|i| {
                let c = *array.add(i);
                Ok(if c == R_NaString {
                    None
                } else {
                    let bytes = std::slice::from_raw_parts(R_CHAR(c).cast::<u8>(), LENGTH(c) as usize);
                    Some((bytes, Encoding::from_cetype(Rf_getCharCE(c))))
                })
            })
            .collect()
    }
}
