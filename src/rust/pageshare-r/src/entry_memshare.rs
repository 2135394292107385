#![allow(clippy::not_unsafe_ptr_arg_deref)] // the .Call entry points receive SEXPs from R by design
//! The `.Call` entry points of the memshare-compatible functions
//! (`registerVariables()`, `retrieveViews()`, `releaseVariables()`, ...:
//! R/memshare.R): segments registered under a name in the index. Each is
//! called by its C shell in src/entry_points.c and runs its body through [`entry`].

use crate::args::{dir_arg, flag_arg, string_arg};
use crate::boundary::{entry, msg, ErrorKind, RError};
use crate::r_calls::{self, named_list, raw_vec, scalar_logical, strings, Protect};
use crate::r_sys::*;
use crate::share_pipeline::copy_into_segment;
use crate::view::{make_view, view_of};
use pageshare_core::{index, naming, registry};

/// Variables registered in `namespace` by any live process of this user.
#[no_mangle]
pub extern "C" fn ps_namespace_variables_rs(ns: SEXP, dir: SEXP) -> SEXP {
    entry(|| {
        let ns = string_arg(ns, "namespace")?;
        let dir = dir_arg(dir)?;
        let vars: Vec<String> = index::live_names(&dir)
            .map_err(msg)?
            .iter()
            .filter_map(|n| naming::parse_named(n))
            .filter(|(n, _)| *n == ns)
            .map(|(_, v)| v)
            .collect();
        strings(&vars)
    })
}

/// registerVariables: a named segment held by this process until released.
#[no_mangle]
pub extern "C" fn ps_register_rs(
    ns: SEXP,
    var: SEXP,
    x: SEXP,
    attrs: SEXP,
    blob: SEXP,
    dir: SEXP,
    release_source: SEXP,
) -> SEXP {
    entry(|| {
        let ns = string_arg(ns, "namespace")?;
        let var = string_arg(var, "variable name")?;
        let dir = dir_arg(dir)?;
        let release = flag_arg(release_source)?;
        let name = naming::named(&ns, &var).map_err(msg)?;
        // SAFETY: R holds `blob` (an argument).
        let blob = unsafe { crate::args::raw_or_empty(blob)? };
        let context = |e: RError| e.context(&format!("variable '{var}'"));
        // (an error about the name itself names the variable already)
        let index_error = |e: pageshare_core::Error| match e {
            pageshare_core::Error::Taken { .. } => RError::from(e),
            e => context(RError::from(e)),
        };
        // Refuse a held name before copying anything; publishing checks again.
        index::check_free(&dir, &name).map_err(index_error)?;
        let mut scope = Protect::new();
        // SAFETY: a .Call entry point: R's main thread, valid SEXPs.
        let (view, _, seg) = unsafe { copy_into_segment(x, &name, blob, release) }.map_err(context)?;
        scope.protect(view)?;
        registry::register(&dir, seg).map_err(index_error)?;
        // SAFETY: `view` is fresh and protected; `attrs` a pairlist.
        unsafe { r_calls::set_attributes(view, attrs)? };
        Ok(view)
    })
}

/// A view of a named segment, bare, plus its attribute blob: list(view, blob).
#[no_mangle]
pub extern "C" fn ps_retrieve_rs(ns: SEXP, var: SEXP, dir: SEXP) -> SEXP {
    entry(|| {
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
        let mut scope = Protect::new();
        let blob = scope.protect(raw_vec(seg.attributes())?)?;
        // SAFETY: the whole segment.
        let view = scope.protect(unsafe { make_view(seg, h.kind, 0, h.length) }?)?;
        named_list(&[("view", view), ("attributes", blob)])
    })
}

/// Is `view` (retrieved earlier) a view of the segment the index publishes
/// under the name now? TRUE, FALSE (the name was released and registered
/// again: another segment), or NA (no live registration of the name). A view
/// cached by name is used only while this holds: its segment stays readable
/// after a release, so only the index can tell that the name moved on.
#[no_mangle]
pub extern "C" fn ps_is_current_rs(view: SEXP, ns: SEXP, var: SEXP, dir: SEXP) -> SEXP {
    entry(|| {
        let ns = string_arg(ns, "namespace")?;
        let var = string_arg(var, "variable name")?;
        let dir = dir_arg(dir)?;
        let name = naming::named(&ns, &var).map_err(msg)?;
        // SAFETY: a .Call entry point: R's main thread, a valid SEXP.
        let Some(v) = (unsafe { view_of(view) }) else { return scalar_logical(0) };
        match index::lookup(&dir, &name) {
            Ok(loc) => scalar_logical((loc.token == v.seg.token()) as i32),
            // SAFETY: R_NaInt is a constant of R's.
            Err(pageshare_core::Error::Missing { .. }) => scalar_logical(unsafe { R_NaInt }),
            Err(e) => Err(RError::from(e)),
        }
    })
}

#[no_mangle]
pub extern "C" fn ps_release_rs(ns: SEXP, var: SEXP) -> SEXP {
    entry(|| {
        let ns = string_arg(ns, "namespace")?;
        let var = string_arg(var, "variable name")?;
        let name = naming::named(&ns, &var).map_err(msg)?;
        scalar_logical(registry::release(&name) as i32)
    })
}

/// Registered (namespace, variable) pairs held by this process: a 2-column character matrix as a list.
#[no_mangle]
pub extern "C" fn ps_held_rs() -> SEXP {
    entry(|| {
        let pairs: Vec<(String, String)> = registry::held().iter().filter_map(|n| naming::parse_named(n)).collect();
        string_columns(("namespace", "variable"), pairs)
    })
}

/// list(<a> = first strings, <b> = second strings) of `rows`.
pub fn string_columns(names: (&str, &str), rows: Vec<(String, String)>) -> Result<SEXP, RError> {
    let (first, second): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
    let mut scope = Protect::new();
    let a = scope.protect(strings(&first)?)?;
    let b = scope.protect(strings(&second)?)?;
    named_list(&[(names.0, a), (names.1, b)])
}
