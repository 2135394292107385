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

/// The segments that exist for this process's user as far as it can tell: the
/// ones it holds, and the registered ones some live process holds (from the
/// index under `dir`). Sorted, for diagnostics and tests.
#[no_mangle]
pub extern "C" fn ps_list_segments_rs(dir: SEXP) -> SEXP {
    entry(|| {
        let dir = dir_arg(dir)?;
        let mut names = registry::owned();
        names.extend(index::live_names(&dir).map_err(msg)?);
        names.sort();
        names.dedup();
        strings(&names)
    })
}

/// Segments mapped in this process.
#[no_mangle]
pub extern "C" fn ps_mapped_rs() -> SEXP {
    entry(|| strings(&registry::mapped()))
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

/// The identity cache's entries: list(address, bytes, alive), for diagnostics.
#[no_mangle]
pub extern "C" fn ps_cache_entries_rs() -> SEXP {
    entry(|| {
        let d = cache::describe();
        let addr: Vec<String> = d.iter().map(|e| format!("{:#x}", e.0)).collect();
        let mut scope = Protect::new();
        let a = scope.protect(strings(&addr)?)?;
        let b = scope.alloc_vector(SEXPTYPE::REALSXP, d.len() as R_xlen_t)?;
        let c = scope.alloc_vector(SEXPTYPE::LGLSXP, d.len() as R_xlen_t)?;
        for (i, e) in d.iter().enumerate() {
            // SAFETY: both vectors were just made with d.len() elements.
            unsafe {
                *REAL(b).add(i) = e.1 as f64;
                *LOGICAL(c).add(i) = e.2 as i32;
            }
        }
        named_list(&[("address", a), ("bytes", b), ("alive", c)])
    })
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
