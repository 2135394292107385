# A worker of shm_multisession (future's PSOCK workers) whose master is gone
# exits at once, also in the middle of a task.
#
# A PSOCK worker notices that its master is gone only when it next reads from
# the master's socket, i.e. after its task: a long task outlives a master killed
# with kill -9 (or SIGTERM, or a crash) and keeps its shared-memory mappings
# until it ends. So such a worker watches its master from a background thread
# (src/rust/pageshare-r/src/watchdog.rs) that ends it within ~100 ms of the
# master being gone (a zombie counts as gone). It is armed through
# watch_master() at the start of every future the worker runs
# (prepare_launch()): future starts and restarts these workers itself, and a
# worker is at risk only while it runs a task (an idle one reads the closed
# socket and ends). pageshare's own pool needs none of this: its workers die
# with their master's socket (src/rust/pageshare-pool/src/worker.rs).
# Workers of a cluster the user made are left alone.

# This process as a worker's watchdog identifies it: pid and start time (the
# pair stays unique when pids are reused). NULL where /proc cannot tell it.
master_identity <- function() {
  pid <- Sys.getpid()
  start <- .Call(ps_process_start_time, pid)
  if (is.na(start)) NULL else list(pid = pid, start = start)
}

# Runs on a worker: end this process as soon as the master (pid, start time) is
# gone. Called again (every future), it only keeps watching. Never fails a task:
# FALSE when nothing is watched.
watch_master <- function(pid, start) {
  invisible(isTRUE(tryCatch(.Call(ps_watch_master, pid, start), error = function(e) FALSE)))
}

# `expr` preceded by the call that arms the worker's watchdog on this process.
watched_expr <- function(expr) {
  master <- master_identity()
  if (is.null(master)) return(expr)
  bquote({
    pageshare:::watch_master(.(master$pid), .(master$start))
    .(expr)
  })
}

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
