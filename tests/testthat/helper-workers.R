# Helpers for tests that start workers: two workers, no option changed, no
# worker process and no new segment left behind.

# Segment names in the segment directory owned by this process (other R
# sessions on the machine may be using pageshare at the same time).
segments_now <- function() {
  all <- pageshare::shared_segments(all = TRUE)$name
  all[grepl(paste0(".", Sys.getpid(), "."), all, fixed = TRUE)]
}

# Wait until the processes `pids` are gone (TRUE) or the timeout passes (FALSE).
# A zombie is gone: killed workers are orphans, reaped late by PID 1.
pids_gone <- function(pids, timeout = 10) {
  all(pageshare:::wait_processes_gone(pids, timeout))
}

# Pids of the workers of a cluster (one round trip).
cluster_pids <- function(cl) unlist(parallel::clusterCall(cl, Sys.getpid))

full_gc <- function() for (i in 1:3) invisible(gc())

# Known core limitation (reported): the identity cache evicts an entry only when
# its source's reference count drops to 1, but R does not decrement reference
# counts when it garbage-collects an environment that was captured (e.g. a
# function frame referenced by a foreach object or a promise). Such entries --
# and their segments -- then live until the process exits. The end-of-file
# checks therefore clear the cache before looking for leftover segments.
clear_cache_and_gc <- function() {
  full_gc()
  pageshare::forget_shared()
  full_gc()
}

pageshare_options <- function() {
  o <- options()
  o[grepl("^pageshare\\.", names(o))]
}

# A foreach loop gives under the registered backend exactly what foreach's own
# `%do%` gives. `loop` is a function of the operator, so that both run the same
# code.
same_as_do <- function(loop) {
  expected <- loop(foreach::`%do%`)
  got <- loop(foreach::`%dopar%`)
  testthat::expect_identical(got, expected)
}

# plan(shm_multisession) until the calling test ends, then plan(sequential)
# with the user's future.globals.maxSize back (future 1.31 has no hook for it
# when the plan changes; see expect_clean() in test-future.R).
local_shm_plan <- function(workers = 2L, env = parent.frame()) {
  future::plan(pageshare::shm_multisession, workers = workers)
  undo <- function() {
    future::plan(future::sequential)
    # (what the end of a top-level call runs: future 1.31 has no hook when
    # the plan changes)
    pageshare:::watch_globals_limit()
    pageshare:::watch_future_pool()
  }
  do.call(base::on.exit, list(as.call(list(undo)), add = TRUE), envir = env)
  invisible()
}
