# Whether processes have ended, by the rule the pool's supervision uses.

# Is each process of `pids` gone? A zombie (killed, not yet reaped: a
# cluster's workers are orphans, reaped late by PID 1) is gone too. One
# reading of /proc/<pid>/stat in Rust for each.
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
