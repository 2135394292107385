/* The .Call entry points and their registration.
 *
 * Most are written in Rust (src/rust/pageshare-r): for each, a shell here
 * calls the Rust function `<name>_rs`, which returns NULL when it failed
 * (having dropped every Rust value and left the error pending), and raises
 * the error from this C frame (boundary.c). The rest are written in C
 * because they call R code that may raise errors of its own. */
#include <R_ext/Rdynload.h>
#include "boundary.h"

#define P0 (void)
#define P1 (SEXP a)
#define P2 (SEXP a, SEXP b)
#define P3 (SEXP a, SEXP b, SEXP c)
#define P4 (SEXP a, SEXP b, SEXP c, SEXP d)
#define P5 (SEXP a, SEXP b, SEXP c, SEXP d, SEXP e)
#define P6 (SEXP a, SEXP b, SEXP c, SEXP d, SEXP e, SEXP f)
#define P7 (SEXP a, SEXP b, SEXP c, SEXP d, SEXP e, SEXP f, SEXP g)
#define P8 (SEXP a, SEXP b, SEXP c, SEXP d, SEXP e, SEXP f, SEXP g, SEXP h)
#define P10 (SEXP a, SEXP b, SEXP c, SEXP d, SEXP e, SEXP f, SEXP g, SEXP h, SEXP i, SEXP j)
#define A0 ()
#define A1 (a)
#define A2 (a, b)
#define A3 (a, b, c)
#define A4 (a, b, c, d)
#define A5 (a, b, c, d, e)
#define A6 (a, b, c, d, e, f)
#define A7 (a, b, c, d, e, f, g)
#define A8 (a, b, c, d, e, f, g, h)
#define A10 (a, b, c, d, e, f, g, h, i, j)

/* name, number of arguments */
#define RUST_ENTRY_POINTS(X)                                                                       \
  X(ps_share, 4) X(ps_share_packed, 3) X(ps_is_view, 1) X(ps_view_info, 1) X(ps_scope, 1)          \
  X(ps_worth_walking, 2) X(ps_packable_bytes, 3) X(ps_sweep, 1) X(ps_register, 7) X(ps_retrieve, 3)                        \
  X(ps_is_current, 4) X(ps_set_attributes, 2) X(ps_release, 2) X(ps_held, 0)                       \
  X(ps_mapped_stale, 0) X(ps_release_all, 0) X(ps_cache_size, 0) X(ps_cache_evict, 1)              \
  X(ps_disown, 1) X(ps_adopt, 1) X(ps_namespace_variables, 2)               \
  X(ps_free_bytes, 0) X(ps_release_handoffs, 0) X(ps_set_budget, 1) X(ps_held_bytes, 0)            \
  X(ps_share_mark, 0) X(ps_share_rollback, 1) X(ps_shares_openable, 0)                             \
  X(ps_set_receiver_mode, 1) X(ps_take_receive_failures, 0) X(ps_task_state, 1)                    \
  X(ps_mutual_info, 10) X(ps_process_start_time, 1)                          \
  X(ps_processes_gone, 1) X(ps_inject_fault, 2) X(ps_handover_self_test, 0)                      \
  X(ps_segments_table, 2) X(ps_content_key, 2) X(ps_share_keyed, 7) X(ps_retrieve_keyed, 2)      \
  X(ps_release_key, 1)                                                                             \
  X(ps_pool_start, 8) X(ps_pool_stop, 0) X(ps_pool_pids, 0) X(ps_pool_submit, 4)                   \
  X(ps_pool_free_slot, 2) X(ps_pool_cancel, 1) X(ps_pool_has_room, 2) X(ps_pool_dispatch, 0)      \
  X(ps_pool_fill, 1) X(ps_pool_stderr, 1) X(ps_pool_worker_connect, 0)                            \
  X(ps_pool_worker_reply, 4) X(ps_pool_worker_running, 0) X(ps_rng_stream, 2)                    \
  X(ps_pool_worker_keep_condition, 2)                                                              \
  X(ps_plain_call, 3) X(ps_plain_message, 3) X(ps_pool_call_plain, 4) X(ps_pool_read_reply, 2)     \
  X(ps_pool_next_event_delivered, 2) X(ps_task_value_plain, 2) X(ps_pool_run_plain, 1)             \
  X(ps_pool_worker_serve, 1) X(ps_wire_value, 1) X(ps_wire_value_read, 1) X(ps_serialized_size, 1)             \
  X(ps_matrix_column, 2) X(ps_matrix_row, 2) X(ps_run_iterations, 6)                                  \
  X(ps_map_begin, 3) X(ps_map_next, 1) X(ps_map_rate, 2) X(ps_map_requeue, 3) X(ps_map_end, 1)

#define C_ENTRY_POINTS(X)                                                                          \
  X(ps_binding, 2) X(ps_frame_promises, 1) X(ps_restore_binding, 5) X(ps_unlock_binding, 2)       \


#define SHELL(name, n)                                                                             \
  SEXP name##_rs P##n;                                                                             \
  static SEXP name P##n {                                                                          \
    SEXP out = name##_rs A##n;                                                                     \
    if (out == NULL) ps_raise_pending();                                                           \
    return out;                                                                                    \
  }
RUST_ENTRY_POINTS(SHELL)

#define DECLARE(name, n) SEXP name P##n;
C_ENTRY_POINTS(DECLARE)

#define ENTRY(name, n) {#name, (DL_FUNC)&name, n},
static const R_CallMethodDef call_entries[] = {
    RUST_ENTRY_POINTS(ENTRY) C_ENTRY_POINTS(ENTRY){NULL, NULL, 0}};

void ps_register_entry_points(DllInfo *dll) {
  R_registerRoutines(dll, NULL, call_entries, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
}
