#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points about what this process holds: its segments, the
//! index entries of the user, the identity cache, the byte budget and the
//! marks that a failed share rolls back to (R/segments.R, R/cache.R,
//! R/options.R, ...). Each is called by its C shell in src/entry_points.c and
//! runs its body through [`entry`].

use crate::args::{byte_limit_arg, dir_arg};
use crate::boundary::{entry, msg, RError};
use crate::cache;
use crate::r_calls::{self, named_list, scalar_integer, scalar_real, strings, Protect};
use crate::r_sys::*;
use pageshare_core::{index, registry, segment};

/// Remove stale index entries (their holder is gone) under `dir`.
#[no_mangle]
pub extern "C" fn ps_sweep_rs(dir: SEXP) -> SEXP {
    entry(|| {
        let dir = dir_arg(dir)?;
        strings(&index::sweep(&dir).map_err(msg)?)
    })
}

/// The segments that exist for this process's user as far as it can tell
/// (`all`: the ones it holds, and the registered ones some live process holds,
/// from the index under `dir`), or the ones this process maps, as columns: name, type, length, bytes, owner_pid, owned_here, views
/// (a named segment another process holds and this one does not map has NA
/// type and length, and no views).
#[no_mangle]
pub extern "C" fn ps_segments_table_rs(dir: SEXP, all: SEXP) -> SEXP {
    entry(|| {
        let all = crate::args::flag_arg(all)?;
        let mut rows = registry::details();
        if all {
            rows.retain(|d| d.owned_here);
            let dir = dir_arg(dir)?;
            for name in index::live_names(&dir).map_err(msg)? {
                if rows.iter().any(|d| d.name == name) {
                    continue;
                }
                // (an entry whose holder ended since the listing is left out)
                let Ok(loc) = index::lookup(&dir, &name) else { continue };
                let mapped = registry::details().into_iter().find(|d| d.name == name);
                rows.push(match mapped {
                    Some(d) => d,
                    None => registry::Details {
                        name,
                        kind: pageshare_core::header::Kind::Raw,
                        length: u64::MAX,
                        bytes: loc.size,
                        owner_pid: loc.pid,
                        owned_here: false,
                        views: 0,
                    },
                });
            }
            rows.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let n = rows.len() as R_xlen_t;
        let mut scope = Protect::new();
        let names = scope.protect(strings(&rows.iter().map(|d| d.name.clone()).collect::<Vec<_>>())?)?;
        let types = scope.alloc_vector(SEXPTYPE::STRSXP, n)?;
        let length = scope.alloc_vector(SEXPTYPE::REALSXP, n)?;
        let bytes = scope.alloc_vector(SEXPTYPE::REALSXP, n)?;
        let owner = scope.alloc_vector(SEXPTYPE::INTSXP, n)?;
        let owned = scope.alloc_vector(SEXPTYPE::LGLSXP, n)?;
        let views = scope.alloc_vector(SEXPTYPE::INTSXP, n)?;
        for (i, d) in rows.iter().enumerate() {
            let known = d.length != u64::MAX;
            // SAFETY: R's NA string is a constant of R's; the CHARSXP is fresh.
            let t = if known { r_calls::mk_string(d.kind.name())? } else { unsafe { R_NaString } };
            // SAFETY: each vector is protected and has n elements; i < n.
            unsafe {
                SET_STRING_ELT(types, i as R_xlen_t, t);
                *REAL(length).add(i) = if known { d.length as f64 } else { R_NaReal };
                *REAL(bytes).add(i) = d.bytes as f64;
                *INTEGER(owner).add(i) = d.owner_pid as i32;
                *LOGICAL(owned).add(i) = d.owned_here as i32;
                *INTEGER(views).add(i) = d.views as i32;
            }
        }
        named_list(&[
            ("name", names),
            ("type", types),
            ("length", length),
            ("bytes", bytes),
            ("owner_pid", owner),
            ("owned_here", owned),
            ("views", views),
        ])
    })
}

/// The number of mapped segments no live process holds any more.
#[no_mangle]
pub extern "C" fn ps_mapped_stale_rs() -> SEXP {
    entry(|| scalar_integer(registry::stale().len() as i32))
}

/// Release everything this process holds or owns (package unload).
#[no_mangle]
pub extern "C" fn ps_release_all_rs() -> SEXP {
    entry(|| {
        // SAFETY: a .Call entry point: R's main thread.
        let cleared = unsafe { cache::clear() };
        scalar_integer((cleared + registry::release_all() + segment::release_handoffs()) as i32)
    })
}

#[no_mangle]
pub extern "C" fn ps_cache_size_rs() -> SEXP {
    entry(|| scalar_integer(cache::len() as i32))
}

/// Evict cache entries whose source is no longer referenced or that exceed
/// `limit` bytes (after each GC); with `limit = 0`, forget every entry.
#[no_mangle]
pub extern "C" fn ps_cache_evict_rs(limit: SEXP) -> SEXP {
    entry(|| {
        let l = r_calls::as_real(limit)?;
        let limit = byte_limit_arg(limit)?;
        // SAFETY: a .Call entry point: R's main thread.
        let n = unsafe {
            if l <= 0.0 {
                cache::clear()
            } else {
                cache::evict_unused(limit)
            }
        };
        scalar_integer(n as i32)
    })
}

/// Memory a new segment could take now (MemAvailable, or the cgroup's limit).
#[no_mangle]
pub extern "C" fn ps_free_bytes_rs() -> SEXP {
    entry(|| scalar_real(pageshare_core::os::available_memory() as f64))
}

/// Set the most bytes this process may hold in segments (Inf or NA: no limit).
#[no_mangle]
pub extern "C" fn ps_set_budget_rs(bytes: SEXP) -> SEXP {
    entry(|| {
        registry::set_budget(byte_limit_arg(bytes)?);
        Ok(nil())
    })
}

/// Bytes of the segments this process holds.
#[no_mangle]
pub extern "C" fn ps_held_bytes_rs() -> SEXP {
    entry(|| scalar_real(registry::held_bytes() as f64))
}

/// A point to roll sharing back to: c(segments made, identity cache clock).
#[no_mangle]
pub extern "C" fn ps_share_mark_rs() -> SEXP {
    entry(|| {
        let out = r_calls::alloc_vector(SEXPTYPE::REALSXP, 2)?;
        // SAFETY: a fresh double vector of 2 elements.
        unsafe {
            *REAL(out) = registry::mark() as f64;
            *REAL(out).add(1) = cache::mark() as f64;
        }
        Ok(out)
    })
}

/// Undo the sharing since `mark` (ps_share_mark()): the identity cache forgets
/// the views made since and this process stops holding the segments made
/// since. Returns the number of segments let go.
#[no_mangle]
pub extern "C" fn ps_share_rollback_rs(mark: SEXP) -> SEXP {
    entry(|| {
        // SAFETY: the type and length are checked before the elements are read.
        let (made, clock) = unsafe {
            if TYPEOF(mark) != SEXPTYPE::REALSXP || XLENGTH(mark) != 2 || ALTREP(mark) != 0 {
                return Err(RError::internal("internal: ps_share_rollback needs a mark made by ps_share_mark"));
            }
            (*REAL(mark) as u64, *REAL(mark).add(1) as u64)
        };
        // SAFETY: a .Call entry point: R's main thread.
        unsafe { cache::forget_since(clock) };
        scalar_integer(registry::release_made_since(made) as i32)
    })
}
