//! pageshare-r: the R side of pageshare. Views (ALTREP classes over shared
//! segments), the identity cache, and the `.Call` entry points registered in
//! [`R_init_pageshare_rust`], which `src/init.c` calls from `R_init_pageshare`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod altrep;
pub mod boundary;
pub mod cache;
pub mod mutual_info;
pub mod r_api;
pub mod rapi;
pub mod source_pages;
pub mod view;
pub mod watchdog;

use rapi::*;
use std::os::raw::c_int;

/// Where the call table finds its routines: r_api's, and those of modules of their own.
mod calls {
    pub use crate::r_api::*;
    pub use crate::source_pages::ps_handover_self_test;
    pub use crate::watchdog::{ps_process_start_time, ps_processes_gone, ps_watch_master};
}

macro_rules! call_entries {
    ($($name:ident / $n:expr),* $(,)?) => {
        [
            $(R_CallMethodDef {
                name: concat!(stringify!($name), "\0").as_ptr().cast(),
                // SAFETY: R calls the routine with exactly $n SEXP arguments.
                fun: Some(unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn() -> *mut std::os::raw::c_void>(calls::$name as *const ()) }),
                numArgs: $n,
            },)*
            R_CallMethodDef { name: std::ptr::null(), fun: None, numArgs: 0 },
        ]
    };
}

extern "C" fn withdraw_at_exit() {
    // A normal exit leaves no index entry (kill -9 leaves a stale one, removed
    // by the next lookup or sweep). Never panics: errors are ignored.
    let _ = std::panic::catch_unwind(pageshare_core::registry::withdraw_at_exit);
}

/// # Safety
/// Called once by R (through `R_init_pageshare`) with the package's DllInfo.
#[no_mangle]
pub unsafe extern "C" fn R_init_pageshare_rust(dll: *mut DllInfo) {
    let entries = call_entries![
        ps_share / 4,
        ps_is_view / 1,
        ps_view_info / 1,
        ps_scope / 1,
        ps_sweep / 1,
        ps_list_segments / 1,
        ps_register / 7,
        ps_retrieve / 3,
        ps_is_current / 4,
        ps_set_attributes / 2,
        ps_release / 2,
        ps_held / 0,
        ps_mapped / 0,
        ps_mapped_stale / 0,
        ps_worth_walking / 2,
        ps_release_all / 0,
        ps_cache_size / 0,
        ps_cache_evict / 1,
        ps_cache_entries / 0,
        ps_disown / 1,
        ps_adopt / 1,
        ps_namespace_variables / 2,
        ps_free_bytes / 0,
        ps_release_handoffs / 0,
        ps_set_budget / 1,
        ps_held_bytes / 0,
        ps_share_mark / 0,
        ps_share_rollback / 1,
        ps_shares_openable / 0,
        ps_set_receiver_mode / 1,
        ps_take_receive_failures / 0,
        ps_task_state / 1,
        ps_share_packed / 3,
        ps_serialized_size / 1,
        ps_binding / 2,
        ps_restore_binding / 5,
        ps_unlock_binding / 2,
        ps_run_iterations / 3,
        ps_mutual_info / 10,
        ps_watch_master / 2,
        ps_process_start_time / 1,
        ps_processes_gone / 1,
        ps_handover_self_test / 0,
    ];
    // Each segment this process holds takes a descriptor (see pageshare-core's os.rs).
    pageshare_core::os::raise_open_files_limit();
    // R keeps the pointer: leak the table for the life of the process.
    let table: &'static [R_CallMethodDef] = Box::leak(Box::new(entries));
    // SAFETY: R's registration API, at load, on the main thread.
    unsafe {
        R_registerRoutines(dll, std::ptr::null(), table.as_ptr(), std::ptr::null(), std::ptr::null());
        R_useDynamicSymbols(dll, Rboolean::FALSE);
        altrep::register(dll);
        libc::atexit(withdraw_at_exit);
    }
    let _: c_int = 0;
}
