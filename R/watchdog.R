# A worker whose master is gone exits at once, also in the middle of a task.
#
# A PSOCK worker notices that its master is gone only when it next reads from
# the master's socket, i.e. after its task: a long task outlives a master killed
# with kill -9 (or SIGTERM, or a crash) and keeps its shared-memory mappings
# until it ends. So every worker pageshare sets up watches its master from a
# background thread (src/rust/pageshare-r/src/watchdog.rs) that ends the worker
# within ~100 ms of the master being gone (a zombie counts as gone).
#
# Both kinds of workers arm it through watch_master():
# * the pool's workers (registerDoShm() without a cluster, memApply(),
#   mutual_information()) when the pool starts (load_on_workers());
# * shm_multisession's workers at the start of every future they run
#   (prepare_launch()): future starts and restarts these workers itself, and a
#   worker is at risk only while it runs a task (an idle one reads the closed
#   socket and ends).
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
