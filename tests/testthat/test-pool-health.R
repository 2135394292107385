# A pool worker killed in the middle of a call: a classed error naming its pid
# (how soon: inst/benchmarks), and the next call works without stop_workers(). A pool worker that
# died while idle: the next call names it in a warning and runs on a new pool.

skip_if_not_installed("foreach")

# The PSOCK pool (option pageshare.pool = "psock"); pageshare's own pool has
# the same tests in test-pool.R.
old_pool_option <- options(pageshare.pool = "psock")

# Kills the worker it runs in when `cond` holds, after writing its pid to `file`.
killer_writing_to <- function(file) {
  force(file)
  function(cond) if (cond) { writeLines(format(Sys.getpid()), file); tools::pskill(Sys.getpid(), tools::SIGKILL) }
}
no_killer <- function(cond) NULL

# Each front door on the pool, with a function of the element that may kill
# its worker (element 21 of M's columns, elements 7 of the lists).
M <- matrix(as.double(1:40), 4)
pool_calls <- list(
  memApply = function(killer) memApply(M, 2, function(v, k) { k(v[1] == 21); sum(v) }, VARS = list(k = killer), MAX.CORES = 2),
  memLapply = function(killer) unlist(memLapply(as.list(1:10), function(i, k) { k(i == 7); i }, VARS = list(k = killer), MAX.CORES = 2)),
  foreach = function(killer) {
    registerDoShm(cores = 2)
    `%dopar%` <- foreach::`%dopar%`
    foreach::foreach(i = 1:10, .combine = c) %dopar% { killer(i == 7); i }
  })
pool_results <- list(memApply = colSums(M), memLapply = 1:10, foreach = 1:10)

test_that("a pool worker killed during memApply(), memLapply() or foreach is reported and replaced", {
  stop_workers()
  on.exit(stop_workers(), add = TRUE)
  for (door in names(pool_calls)) {
    invisible(pool_calls[[door]](no_killer))            # the pool is up
    pids <- pageshare:::pool_pids()
    expect_length(pids, 2L)
    pidfile <- tempfile()
    e <- tryCatch(pool_calls[[door]](killer_writing_to(pidfile)), error = function(e) e)
    expect_s3_class(e, "pageshare_worker_died")
    dead <- as.integer(readLines(pidfile))
    unlink(pidfile)
    expect_true(dead %in% pids)
    expect_match(conditionMessage(e), sprintf("worker process %d ", dead), fixed = TRUE, info = door)
    expect_length(pageshare:::pool_pids(), 0L)          # the broken pool is gone ...
    expect_true(pids_gone(pids, timeout = 5), info = door)   # ... with all its processes
    again <- pool_calls[[door]](no_killer)              # the next call works
    expect_length(unlist(again), 10L)
    expect_false(any(pageshare:::pool_pids() %in% pids))
  }
})

test_that("a pool worker that died while idle is named as such and the next call runs on a new pool", {
  stop_workers()
  on.exit(stop_workers(), add = TRUE)
  for (signal in c(tools::SIGKILL, tools::SIGTERM)) {
    for (door in names(pool_calls)) {
      invisible(pool_calls[[door]](no_killer))          # the pool is up
      pids <- pageshare:::pool_pids()
      expect_length(pids, 2L)
      tools::pskill(pids[2L], signal)
      expect_true(pids_gone(pids[2L]), info = door)
      w <- NULL
      got <- withCallingHandlers(pool_calls[[door]](no_killer), pageshare_worker_replaced = function(cond) {
        w <<- cond
        invokeRestart("muffleWarning")
      })
      expect_s3_class(w, "pageshare_warning")
      expect_match(conditionMessage(w), sprintf("worker process %d .* died while it was idle", pids[2L]), info = door)
      expect_equal(unlist(got), pool_results[[door]], info = door)
      expect_false(any(pageshare:::pool_pids() %in% pids))
      expect_true(pids_gone(pids), info = door)         # the old pool's live worker ended too
    }
  }
})

options(old_pool_option)
