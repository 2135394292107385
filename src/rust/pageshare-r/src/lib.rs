//! pageshare-r: the R side of pageshare. Views (ALTREP classes over shared
//! segments), the identity cache, and the bodies of the `.Call` entry points.
//! The C files in `src/` register the entry points and the view classes (their
//! shells call the Rust bodies and raise their errors: see [`boundary`]).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod altrep;
pub mod args;
pub mod boundary;
pub mod cache;
pub mod entry_keys;
pub mod entry_map_plan;
pub mod entry_memshare;
pub mod entry_pool;
pub mod entry_pool_messages;
pub mod entry_pool_plain;
pub mod entry_process;
pub mod entry_share;
pub mod entry_tasks;
pub mod faults;
pub mod matrix_margins;
pub mod mutual_info;
pub mod pool_master;
pub mod r_calls;
pub mod r_serialize;
pub mod r_store;
pub mod r_sys;
pub mod relay;
pub mod run_iterations;
pub mod share_pipeline;
pub mod source_pages;
pub mod view;
pub mod watchdog;
pub mod wire_r;
pub mod wire_values;

extern "C" fn withdraw_at_exit() {
    // A normal exit leaves no index entry (kill -9 leaves a stale one, removed
    // by the next lookup or sweep). Never panics: errors are ignored.
    let _ = std::panic::catch_unwind(pageshare_core::registry::withdraw_at_exit);
}

/// What `R_init_pageshare` (src/init.c) asks of Rust at load, after the entry
/// points and view classes are registered. Never panics.
#[no_mangle]
pub extern "C" fn ps_init_rust() {
    let _ = std::panic::catch_unwind(|| {
        // Each segment this process holds takes a descriptor (see pageshare-core's os.rs).
        pageshare_core::os::raise_open_files_limit();
        // SAFETY: registers a function without arguments that never unwinds.
        unsafe { libc::atexit(withdraw_at_exit) };
    });
}
