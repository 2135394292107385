# plan(shm_multisession): futures run on pageshare's own pool, on future
# >= 1.40 as a FutureBackend (R/future-pool.R), on future < 1.40 through the
# future's own methods (R/future-pool-legacy.R). Every test ends with
# plan(sequential) and no worker.

skip_if_not_installed("future")
skip_on_os(c("windows", "mac", "solaris"))

# future < 1.40: no cancel(), and a dead worker is a FutureError (as under its
# multisession), not a FutureInterruptError
legacy <- packageVersion("future") < "1.40.0"
died_class <- if (legacy) "FutureError" else "FutureInterruptError"

# The plan ends as at the end of a top-level call (future 1.31 has no hook
# when the plan changes: pageshare's task callback stops the pool and gives
# future.globals.maxSize back then).
end_plan <- function() {
  future::plan(future::sequential)
  pageshare:::watch_future_pool()
  pageshare:::watch_globals_limit()
}


local_pool_plan <- function(..., env = parent.frame()) {
  future::plan(pageshare::shm_multisession, ...)
  do.call(base::on.exit, list(quote(end_plan()), add = TRUE), envir = env)
  invisible()
}

test_that("futures run on the pool's workers, the pool shm_call() uses, sized by the plan", {
  local_pool_plan(workers = I(3))
  expect_length(pageshare:::shm_pool$pids, 3L)
  expect_identical(future::nbrOfWorkers(), 3L)
  expect_identical(future::nbrOfFreeWorkers(), 3L)
  pid <- future::value(future::future(Sys.getpid()))
  expect_true(pid %in% pageshare:::shm_pool$pids)
  expect_true(shm_value(shm_call(Sys.getpid)) %in% pageshare:::shm_pool$pids)
  f <- future::future({ Sys.sleep(0.2); 1 })
  expect_identical(future::nbrOfFreeWorkers(), 2L)      # until its result is collected
  expect_identical(future::value(f), 1)
  expect_identical(future::nbrOfFreeWorkers(), 3L)
  pids <- pageshare:::shm_pool$pids
  end_plan()
  expect_null(pageshare:::shm_pool$pids)
  expect_true(pids_gone(pids))
})

test_that("a workers count the plan refuses is an error when the plan is set (future.tests' check)", {
  local_pool_plan(workers = 2)
  current <- future::plan()
  for (w in list(TRUE, 0L, NA_integer_, "2", 2.5)) {
    expect_error(future::plan(current, workers = w), info = format(w))
  }
})

test_that("a workers count above the cores warns once, when the plan is set, not at every future", {
  n <- pageshare:::limit_cores() + 1L
  on.exit(end_plan(), add = TRUE)
  warned <- 0L
  withCallingHandlers({
    future::plan(pageshare::shm_multisession, workers = n)
    for (i in 1:3) expect_identical(future::value(future::future(i)), i)
    expect_identical(future::nbrOfWorkers(), n)
  }, pageshare_too_many_workers = function(w) {
    warned <<- warned + 1L
    invokeRestart("muffleWarning")
  })
  expect_identical(warned, 1L)
})

test_that("a plan set again starts fresh workers, as multisession's are", {
  # (nothing a worker loaded or left for itself carries over: furrr's suite
  # counts a package's once-per-session warnings that way)
  local_pool_plan(workers = 2)
  before <- pageshare:::shm_pool$pids
  expect_length(before, 2L)
  future::plan(pageshare::shm_multisession, workers = 1)
  future::plan(pageshare::shm_multisession, workers = 2)
  expect_identical(future::value(future::future(42)), 42)
  after <- pageshare:::shm_pool$pids
  expect_length(after, 2L)
  expect_length(intersect(before, after), 0L)
  expect_true(pids_gone(before))
})

test_that("n futures in flight run on n distinct workers", {
  n <- 3L
  local_pool_plan(workers = I(n))
  dir <- tempfile("barrier")
  dir.create(dir)
  # Each future checks in and waits until all n have: futures queued on a
  # busy worker could never all check in (each would give up after 30 s and
  # report fewer than n).
  fs <- lapply(seq_len(n), function(i) future::future({
    file.create(file.path(dir, Sys.getpid()))
    deadline <- Sys.time() + 30
    while (length(list.files(dir)) < n && Sys.time() < deadline) Sys.sleep(0.01)
    c(Sys.getpid(), length(list.files(dir)))
  }))
  got <- vapply(fs, future::value, numeric(2))
  expect_identical(sort(unique(got[1, ])), sort(as.numeric(pageshare:::shm_pool$pids)))
  expect_true(all(got[2, ] == n))
  unlink(dir, recursive = TRUE)
})

test_that("values larger than a ring, polled by resolved(), and split() pieces through future_lapply()", {
  # resolved() reads without waiting: a value streaming through its ring must
  # survive polls that end in its middle (a worker was reported dead and the
  # next call hung on a damaged ring before).
  local_pool_plan(workers = 2)
  pids <- pageshare:::shm_pool$pids
  value_of <- function(i) lapply(seq_len(2e5), function(k) k + i)
  for (round in 1:3) {
    fs <- lapply(1:2, function(i) future::future(value_of(i)))
    while (!all(vapply(fs, future::resolved, NA))) NULL
    for (i in 1:2) expect_identical(future::value(fs[[i]]), value_of(i))
  }
  skip_if_not_installed("future.apply")
  set.seed(42)
  n <- 2e5
  df <- data.frame(g = sample(20L, n, TRUE), x = rnorm(n), y = runif(n))
  pieces <- split(df, df$g)
  got <- future.apply::future_lapply(pieces, function(p) list(piece = p))
  expect_identical(got, lapply(pieces, function(p) list(piece = p)))
  expect_identical(pageshare:::shm_pool$pids, pids)
})

test_that("kill -9 of a worker mid-future: a FutureError; 20 futures and chunked calls run without plan() again", {
  skip_if_not_installed("future.apply")
  local_pool_plan(workers = 2)
  X <- as.double(seq_len(2e5))
  began <- tempfile("began")
  f <- future::future({ file.create(began); Sys.sleep(30); sum(X) })
  # (the worker running f: its pid is in the future once launched)
  victim <- f[["pageshare_pid"]]
  expect_true(victim %in% pageshare:::shm_pool$pids)
  # Killed mid-future, once the future runs: killed before it read the
  # future, the worker's successor runs it (the test after next).
  wait_for_file(began)
  tools::pskill(victim, tools::SIGKILL)
  err <- tryCatch(future::value(f), error = function(e) e)
  expect_s3_class(err, died_class)
  expect_s3_class(err, "pageshare_worker_died")
  expect_match(conditionMessage(err), sprintf("pid %d", victim), fixed = TRUE)
  vals <- vapply(1:20, function(i) future::value(future::future(sum(X) + i)), 0)
  expect_equal(vals, sum(X) + 1:20)
  expect_equal(unlist(future.apply::future_lapply(1:6, function(i) sum(X[1:i]), future.chunk.size = 2)),
               cumsum(X[1:6]))
  expect_false(victim %in% pageshare:::shm_pool$pids)
  expect_false(anyNA(pageshare:::shm_pool$pids))
})

test_that("a worker that died between futures is replaced without a warning, as under multisession", {
  local_pool_plan(workers = 2)
  pids <- unlist(future::value(lapply(1:2, function(i) future::future({ Sys.sleep(0.2); Sys.getpid() }))))
  expect_setequal(pids, pageshare:::shm_pool$pids)
  # (the first slot's: the one a launch tries first, which finds it dead)
  victim <- pageshare:::shm_pool$pids[[1L]]
  tools::pskill(victim, tools::SIGKILL)
  expect_true(pids_gone(victim))
  warnings <- list()
  got <- withCallingHandlers(
    vapply(1:4, function(i) future::value(future::future(Sys.getpid())), 0L),
    warning = function(w) {
      warnings[[length(warnings) + 1L]] <<- w
      invokeRestart("muffleWarning")
    })
  expect_length(warnings, 0L)
  expect_false(victim %in% got)
  expect_false(victim %in% pageshare:::shm_pool$pids)
  expect_false(anyNA(pageshare:::shm_pool$pids))
  # (the pool's other doors still say so)
  victim <- pageshare:::shm_pool$pids[[1L]]
  tools::pskill(victim, tools::SIGKILL)
  expect_true(pids_gone(victim))
  expect_warning(lapply(1:6, function(i) shm_value(shm_call(Sys.getpid))), sprintf("worker process %d .* died while it was idle", victim),
                 class = "pageshare_worker_replaced")
})

test_that("a future whose worker dies before reading it runs on the worker's successor", {
  # (set without this file's source references, which future 1.31 puts into
  # every future's message with the plan's call: a message that small waits
  # whole in the worker's ring, where a large one waits for the worker)
  eval(parse(text = "future::plan(pageshare::shm_multisession, workers = 2)", keep.source = FALSE))
  on.exit(end_plan(), add = TRUE)
  pids <- pageshare:::shm_pool$pids
  # Both workers stopped: the future's message waits, unread, in the ring of
  # the one it goes to, which is then killed (as a worker killed while idle
  # whose death is read only after a future was sent to it).
  for (pid in pids) tools::pskill(pid, tools::SIGSTOP)
  f <- future::future(Sys.getpid())
  victim <- f[["pageshare_pid"]]
  expect_true(victim %in% pids)
  tools::pskill(victim, tools::SIGKILL)
  for (pid in setdiff(pids, victim)) tools::pskill(pid, tools::SIGCONT)
  expect_true(pids_gone(victim))
  got <- future::value(f)
  expect_false(got %in% pids)
  expect_identical(got, pageshare:::shm_pool$pids[[f[["node"]]]])
  expect_identical(f[["pageshare_pid"]], got)
  expect_identical(vapply(1:5, function(i) future::value(future::future(i)), 0L), 1:5)
})

test_that("immediate conditions (progressr) reach the caller while the future runs", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE)   # (progressr reports only in interactive sessions by default)
  on.exit(options(old), add = TRUE)
  local_pool_plan(workers = 2)
  dir <- tempfile("seen")
  dir.create(dir)
  # The future signals a progress update, then waits for the caller to have
  # seen it (a file the caller's handler makes): were updates only relayed
  # with the result, it would wait in vain and report FALSE.
  f <- future::future({
    options(progressr.enable = TRUE)
    p <- progressr::progressor(2)
    p()
    deadline <- Sys.time() + 30
    while (!file.exists(file.path(dir, "1")) && Sys.time() < deadline) Sys.sleep(0.01)
    seen <- file.exists(file.path(dir, "1"))
    p()
    seen
  })
  n <- 0L
  v <- withCallingHandlers(future::value(f), progression = function(cond) {
    n <<- n + 1L
    if (identical(cond$type, "update")) file.create(file.path(dir, sum(file.exists(file.path(dir, 1:2))) + 1L))
  })
  expect_true(v)
  # future relays each one once: while the future runs, not again with value()
  expect_identical(n, 4L)                                # initiate, 2 updates, finish
  # a plain immediateCondition (no muffle restart) arrives once too
  k <- 0L
  withCallingHandlers(future::value(future::future({
    signalCondition(structure(class = c("immediateCondition", "condition"), list(message = "x", call = NULL)))
    1
  })), immediateCondition = function(cond) k <<- k + 1L)
  expect_identical(k, 1L)
  expect_output(expect_message(future::value(future::future({ message("m"); cat("out\n"); 1 })), "m"), "out")
  unlink(dir, recursive = TRUE)
})

test_that("rscript_args and rscript_libs start the pool's workers, also its replacements, until the plan ends", {
  lib <- tempfile("lib")
  dir.create(lib)
  local_pool_plan(workers = I(1), rscript_args = "--no-site-file", rscript_libs = c(lib, .libPaths()))
  probe <- function() list(args = commandArgs(), libs = normalizePath(.libPaths()))
  got <- future::value(future::future(probe()))
  expect_true("--no-site-file" %in% got$args)
  expect_true(normalizePath(lib) %in% got$libs)
  pid <- future::value(future::future(Sys.getpid()))
  tools::pskill(pid, tools::SIGKILL)
  expect_true(pids_gone(pid))
  got <- future::value(future::future(probe()))
  expect_true("--no-site-file" %in% got$args)
  expect_true(normalizePath(lib) %in% got$libs)
  end_plan()
  start_workers(1)
  on.exit(stop_workers(), add = TRUE)
  got <- shm_value(shm_call(probe))
  expect_false("--no-site-file" %in% got$args)
  expect_false(normalizePath(lib) %in% got$libs)
})

test_that("cancel() of a queued and of a running future; lazy futures; errors keep their class", {
  local_pool_plan(workers = 2)
  lz <- future::future(2 * 21, lazy = TRUE)
  expect_identical(lz[["state"]], "created")
  expect_identical(future::value(lz), 42)
  err <- tryCatch(future::value(future::future(stop(structure(class = c("my_error", "error", "condition"),
                                                               list(message = "mine", call = NULL))))),
                  error = function(e) e)
  expect_s3_class(err, "my_error")
  skip_if(legacy, "future < 1.40 has no cancel()")
  f <- future::future({ Sys.sleep(30); 1 })
  pid <- f[["pageshare_pid"]]
  f <- future::cancel(f, interrupt = TRUE)
  # (of the class multisession gives a canceled future: a FutureCanceledError
  # where future has it, else a FutureInterruptError; the future stays
  # canceled)
  err <- tryCatch(future::value(f), error = function(e) e)
  canceled <- "FutureCanceledError" %in% getNamespaceExports("future")
  expect_s3_class(err, if (canceled) "FutureCanceledError" else "FutureInterruptError")
  expect_s3_class(err, "pageshare_worker_died")
  expect_match(conditionMessage(err), "was canceled", fixed = TRUE)
  expect_identical(f[["state"]], "canceled")
  expect_true(pids_gone(pid))
  expect_identical(future::nbrOfFreeWorkers(), 2L)
  expect_identical(future::value(future::future(3)), 3)
})

test_that("futures see shm_everywhere()'s set-up; what a future leaves in the global environment goes", {
  local_pool_plan(workers = I(1))
  on.exit(pageshare:::pool_forget_setup(), add = TRUE)
  shm_everywhere(NULL, setup_value = 41)
  seen <- function(name) exists(name, envir = globalenv(), inherits = FALSE)
  expect_true(shm_value(shm_call(seen, "setup_value")))
  expect_identical(future::value(future::future(get("setup_value", envir = globalenv()) + 1)), 42)
  expect_identical(future::value(future::future({ left_over <<- 1; 2 })), 2)
  expect_false(shm_value(shm_call(seen, "left_over")))
  expect_false(future::value(future::future(exists("left_over", envir = globalenv(), inherits = FALSE))))
  expect_true(shm_value(shm_call(seen, "setup_value")))
})

test_that("a plan change stops the pool: at once on future >= 1.32, after the top-level call on 1.31", {
  # Rscript: each top-level expression is a task; pageshare's callback runs
  # after it (future 1.31 calls nothing of the plan's when it changes).
  script <- tempfile(fileext = ".R")
  writeLines(c(
    "library(future)",
    "plan(pageshare::shm_multisession, workers = 2)",
    "pids <- pageshare:::shm_pool$pids",
    "same_call <- { plan(sequential); length(pageshare:::shm_pool$pids) }",
    "after <- length(pageshare:::shm_pool$pids)",
    "cat(length(pids), same_call, after, pids, '\\n')"), script)
  res <- system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE)
  got <- as.integer(strsplit(trimws(tail(res, 1)), " +")[[1]])
  expect_identical(got[1:3], c(2L, if (packageVersion("future") >= "1.32.0") 0L else 2L, 0L))
  expect_true(pids_gone(got[4:5]))
})
