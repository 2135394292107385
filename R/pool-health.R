# A worker of pageshare's pool that dies (killed, out of memory, crashed) must
# not leave a pool whose every later call fails on its dead connection.
# with_pool_health() runs a call on the pool; if it fails and a pool worker is
# gone, the whole pool is stopped (the next call starts a new one) and a
# pageshare_worker_died error names the dead worker's pid and its task.

# Is each process of `pids` gone? A zombie (killed, not yet reaped: PSOCK
# workers are orphans, reaped late by PID 1) is gone too. One reading of
# /proc/<pid>/stat in Rust for each, the rule the watchdog uses.
process_gone <- function(pids) .Call(ps_processes_gone, pids)

# Waits up to `timeout` seconds until the processes `pids` are gone (every
# one, or with `all = FALSE` any one); returns process_gone(pids) then.
wait_processes_gone <- function(pids, timeout, all = TRUE) {
  deadline <- Sys.time() + timeout
  repeat {
    gone <- process_gone(pids)
    if ((if (all) base::all(gone) else any(gone)) || Sys.time() > deadline) return(gone)
    Sys.sleep(0.01)
  }
}

# Evaluate `expr`, a call on the nodes `cl` of the pool (nothing to do for a
# user's cluster: `on_pool` FALSE). `task_of(i)` describes the task sent to
# node i (for the message).
with_pool_health <- function(expr, cl, on_pool, task_of = function(i) "its task") {
  if (!on_pool) return(expr)
  tryCatch(expr, error = function(e) {
    if (inherits(e, "pageshare_error")) stop(e)
    pids <- psock_pool_pids()
    # A killed process closes its sockets before the kernel marks it dead:
    # give it a moment.
    dead <- which(wait_processes_gone(pids, 0.5, all = FALSE))
    if (!length(dead)) stop(e)
    stop_pool(pool)
    i <- dead[1L]
    pageshare_stop("worker_died", pids[i], if (i <= length(cl)) task_of(i) else "no task", conditionMessage(e))
  })
}
