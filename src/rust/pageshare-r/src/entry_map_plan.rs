#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points through which `shm_map()` (R/pool-map.R) asks
//! how to cut its elements into chunks: the rule itself is
//! [`pageshare_pool::map_plan`]. A map's plan lives here under the map's
//! number from its start to its end (R ends it on exit, also on an error).

use crate::boundary::{entry, RError};
use crate::r_calls::{alloc_vector, as_real};
use crate::r_sys::*;
use pageshare_pool::map_plan::{Chunk, MapPlan};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

static PLANS: Mutex<Option<HashMap<u64, MapPlan>>> = Mutex::new(None);

fn plans() -> MutexGuard<'static, Option<HashMap<u64, MapPlan>>> {
    PLANS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A whole number from 0 to 2^53 (an R double).
fn count_arg(x: SEXP, what: &str) -> Result<u64, RError> {
    let v = as_real(x)?;
    if !(v >= 0.0 && v.fract() == 0.0 && v <= 9.0e15) {
        return Err(RError::argument(format!("`{what}` must be a whole number >= 0")));
    }
    Ok(v as u64)
}

fn with_plan<T>(map: SEXP, f: impl FnOnce(&mut MapPlan) -> T) -> Result<Option<T>, RError> {
    let id = count_arg(map, "map")?;
    Ok(plans().get_or_insert_with(HashMap::new).get_mut(&id).map(f))
}

/// Begins the plan of map `map`: `n` elements over `workers` workers.
#[no_mangle]
pub extern "C" fn ps_map_begin_rs(map: SEXP, n: SEXP, workers: SEXP) -> SEXP {
    entry(|| {
        let id = count_arg(map, "map")?;
        let plan = MapPlan::new(count_arg(n, "n")?, count_arg(workers, "workers")?);
        plans().get_or_insert_with(HashMap::new).insert(id, plan);
        Ok(nil())
    })
}

/// The next chunk of map `map` as c(from, to), 1-based and inclusive, or
/// NULL when every element has gone out (or the map has ended).
#[no_mangle]
pub extern "C" fn ps_map_next_rs(map: SEXP) -> SEXP {
    entry(|| match with_plan(map, MapPlan::next_chunk)?.flatten() {
        None => Ok(nil()),
        Some(c) => {
            let out = alloc_vector(SEXPTYPE::REALSXP, 2)?;
            // SAFETY: a new double vector of 2 elements.
            unsafe {
                *REAL(out) = (c.start + 1) as f64;
                *REAL(out).add(1) = c.end as f64;
            }
            Ok(out)
        }
    })
}

/// A worker of map `map` measured `rate` seconds per element.
#[no_mangle]
pub extern "C" fn ps_map_rate_rs(map: SEXP, rate: SEXP) -> SEXP {
    entry(|| {
        let rate = as_real(rate)?;
        with_plan(map, |p| p.record_rate(rate))?;
        Ok(nil())
    })
}

/// Elements `from`..`to` (1-based, inclusive) of map `map` go out again:
/// their worker died before it began them.
#[no_mangle]
pub extern "C" fn ps_map_requeue_rs(map: SEXP, from: SEXP, to: SEXP) -> SEXP {
    entry(|| {
        let (from, to) = (count_arg(from, "from")?, count_arg(to, "to")?);
        if from == 0 || to < from {
            return Err(RError::argument("`from` and `to` must name elements 1-based, from <= to"));
        }
        with_plan(map, |p| p.requeue(Chunk { start: from - 1, end: to }))?;
        Ok(nil())
    })
}

/// Ends the plan of map `map` (nothing happens if it has none).
#[no_mangle]
pub extern "C" fn ps_map_end_rs(map: SEXP) -> SEXP {
    entry(|| {
        let id = count_arg(map, "map")?;
        if let Some(all) = plans().as_mut() {
            all.remove(&id);
        }
        Ok(nil())
    })
}
