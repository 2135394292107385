# A pool worker killed in the middle of a call: a classed error naming its pid
# at once, and the next call works without stop_workers().

# Kills the worker it runs in when `cond` holds, after writing its pid to `file`.
killer_writing_to <- function(file) {
  force(file)
  function(cond) if (cond) { writeLines(format(Sys.getpid()), file); tools::pskill(Sys.getpid(), tools::SIGKILL) }
}

test_that("a pool worker killed during memApply(), memLapply() or foreach is reported and replaced", {
  skip_if_not_installed("foreach")
  stop_workers()
  on.exit(stop_workers(), add = TRUE)
  M <- matrix(as.double(1:40), 4)
  calls <- list(
    memApply = function(killer) memApply(M, 2, function(v, k) { k(v[1] == 21); sum(v) }, VARS = list(k = killer), MAX.CORES = 2),
    memLapply = function(killer) memLapply(as.list(1:10), function(i, k) { k(i == 7); i }, VARS = list(k = killer), MAX.CORES = 2),
    foreach = function(killer) {
      registerDoShm(cores = 2)
      `%dopar%` <- foreach::`%dopar%`
      foreach::foreach(i = 1:10, .combine = c) %dopar% { killer(i == 7); i }
    })
  for (door in names(calls)) {
    invisible(calls[[door]](function(cond) NULL))      # the pool is up
    pids <- pageshare:::pool_pids()
    expect_length(pids, 2L)
    pidfile <- tempfile()
    t0 <- Sys.time()
    e <- tryCatch(calls[[door]](killer_writing_to(pidfile)), error = function(e) e)
    took <- as.numeric(difftime(Sys.time(), t0, units = "secs"))
    expect_s3_class(e, "pageshare_worker_died")
    dead <- as.integer(readLines(pidfile))
    unlink(pidfile)
    expect_true(dead %in% pids)
    expect_match(conditionMessage(e), sprintf("worker process %d ", dead), fixed = TRUE, info = door)
    expect_lt(took, 1)
    expect_length(pageshare:::pool_pids(), 0L)          # the broken pool is gone ...
    for (p in pids) {                                   # ... with all its processes
      t1 <- Sys.time()
      while (!pageshare:::process_gone(p) && difftime(Sys.time(), t1, units = "secs") < 5) Sys.sleep(0.05)
      expect_true(pageshare:::process_gone(p), info = door)
    }
    again <- calls[[door]](function(cond) NULL)        # the next call works
    expect_length(unlist(again), if (door == "memApply") 10L else 10L)
    expect_false(any(pageshare:::pool_pids() %in% pids))
  }
})

test_that("a pool worker that died while idle is named as such and the next call runs on a new pool", {
  skip_if_not_installed("foreach")
  stop_workers()
  on.exit(stop_workers(), add = TRUE)
  M <- matrix(as.double(1:40), 4)
  calls <- list(
    memApply = function() memApply(M, 2, sum, MAX.CORES = 2),
    memLapply = function() unlist(memLapply(as.list(1:10), function(i) i * 2, MAX.CORES = 2)),
    foreach = function() {
      registerDoShm(cores = 2)
      `%dopar%` <- foreach::`%dopar%`
      foreach::foreach(i = 1:10, .combine = c) %dopar% (i * 2)
    })
  expected <- list(memApply = colSums(M), memLapply = (1:10) * 2, foreach = (1:10) * 2)
  for (signal in c(tools::SIGKILL, tools::SIGTERM)) {
    for (door in names(calls)) {
      invisible(calls[[door]]())                         # the pool is up
      pids <- pageshare:::pool_pids()
      expect_length(pids, 2L)
      tools::pskill(pids[2L], signal)
      t1 <- Sys.time()
      while (!pageshare:::process_gone(pids[2L]) && difftime(Sys.time(), t1, units = "secs") < 10) Sys.sleep(0.05)
      w <- NULL
      got <- withCallingHandlers(calls[[door]](), pageshare_worker_replaced = function(cond) {
        w <<- cond
        invokeRestart("muffleWarning")
      })
      expect_s3_class(w, "pageshare_warning")
      expect_match(conditionMessage(w), sprintf("worker process %d .* died while it was idle", pids[2L]), info = door)
      expect_equal(unlist(got), expected[[door]], info = door)
      expect_false(any(pageshare:::pool_pids() %in% pids))
      for (p in pids) {                                   # the old pool's live worker ended too
        t1 <- Sys.time()
        while (!pageshare:::process_gone(p) && difftime(Sys.time(), t1, units = "secs") < 10) Sys.sleep(0.05)
        expect_true(pageshare:::process_gone(p), info = door)
      }
    }
  }
})
