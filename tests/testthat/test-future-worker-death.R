# A worker of plan(shm_multisession) that dies (kill -9, SIGTERM: the OOM
# killer, an administrator) in the middle of a chunked call or while idle: the
# call in flight fails with an error naming the worker, and every later future
# and chunked call works without the plan being set again.

skip_if_not_installed("future")
skip_if_not_installed("future.apply")

# Kills the process whose pid appears in `pidfile` with `signal`, from a shell
# in the background (the test's own R process is busy waiting for the call).
kill_when_written <- function(pidfile, signal) {
  system2("sh", c("-c", shQuote(sprintf(
    "i=0; while [ ! -s %s ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; kill -%s $(cat %s)",
    pidfile, signal, pidfile))), wait = FALSE)
}

# One element of `n` sleeps after writing its worker's pid, until it is killed.
victim_fun <- function(pidfile, victim) {
  force(pidfile)
  force(victim)
  function(i) {
    if (i == victim) {
      writeLines(as.character(Sys.getpid()), pidfile)
      Sys.sleep(60)
    }
    i
  }
}

chunked_calls <- list(
  future_sapply = function(n, f) future.apply::future_sapply(seq_len(n), f),
  future_lapply = function(n, f) unlist(future.apply::future_lapply(seq_len(n), f)),
  future_map = function(n, f) unlist(furrr::future_map(seq_len(n), f))
)

# After a death: 20 futures and 20 chunked calls that use a shared global.
expect_plan_works <- function(X) {
  results <- vector("list", 40L)
  for (k in 1:20) {
    results[[k]] <- tryCatch(future::value(future::future(sum(X) + k)), error = identity)
    results[[20 + k]] <- tryCatch(future.apply::future_sapply(1:4, function(i) sum(X) + i), error = identity)
  }
  failed <- Filter(function(r) inherits(r, "error"), results)
  expect_length(failed, 0L)
  if (length(failed)) fail(conditionMessage(failed[[1L]]))
  expect_identical(results[1:20], as.list(sum(X) + 1:20))
  for (r in results[21:40]) expect_identical(r, sum(X) + 1:4)
}

for (signal in c("KILL", "TERM")) {
  for (call in names(chunked_calls)) {
    test_that(sprintf("a worker killed (SIG%s) inside %s(): that call fails naming it, the plan goes on", signal, call), {
      if (call == "future_map") skip_if_not_installed("furrr")
      local_shm_plan(workers = 2)
      X <- as.double(seq_len(2e5))                       # shared
      pidfile <- tempfile()
      on.exit(unlink(pidfile), add = TRUE)
      kill_when_written(pidfile, signal)
      f <- victim_fun(pidfile, victim = 4L)
      err <- tryCatch(chunked_calls[[call]](4L, f), error = identity)
      expect_s3_class(err, "error")
      pid <- readLines(pidfile)
      expect_true(pids_gone(as.integer(pid)))
      expect_true(inherits(err, "FutureError") || inherits(err, "pageshare_error"), info = paste(class(err), collapse = " "))
      expect_match(conditionMessage(err), pid, fixed = TRUE)
      expect_plan_works(X)
    })
  }
  test_that(sprintf("a worker killed (SIG%s) while idle is replaced before the next future", signal), {
    local_shm_plan(workers = 2)
    X <- as.double(seq_len(2e5))
    pids <- unique(unlist(future.apply::future_lapply(1:2, function(i) { Sys.sleep(0.2); Sys.getpid() })))
    expect_length(pids, 2L)
    tools::pskill(pids[2L], if (signal == "KILL") tools::SIGKILL else tools::SIGTERM)
    expect_true(pids_gone(pids[2L]))
    expect_plan_works(X)
  })
}
