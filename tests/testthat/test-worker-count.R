test_that("every front door checks a worker count the same way, at once", {
  bad <- list(1e9, Inf, NA, 1.7, -1, 0, "2", c(2, 3), TRUE)
  heap <- function() sum(gc()[, 2])
  before <- heap()
  for (v in bad) {
    for (door in list(
      list(arg = "cores", f = function() registerDoShm(cores = v)),
      list(arg = "MAX.CORES", f = function() memLapply(1:2, identity, MAX.CORES = v)),
      list(arg = "workers", f = function() shm_multisession(workers = v)),
      list(arg = "workers", f = function() attr(shm_multisession, "factory")(workers = v)))) {
      e <- tryCatch(door$f(), error = function(e) e)
      label <- sprintf("%s = %s", door$arg, deparse(v))
      expect_s3_class(e, "pageshare_bad_argument")
      expect_match(conditionMessage(e), sprintf("`%s` must be a whole number of worker processes", door$arg),
                   fixed = TRUE, info = label)
    }
  }
  expect_lt(heap() - before, 5)                  # MB: nothing was started or allocated
  expect_length(pageshare:::pool_pids(), 0L)
  old <- options(pageshare.workers = 2.5)
  on.exit(options(old))
  e <- tryCatch(memLapply(1:2, identity), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), "`pageshare.workers`", fixed = TRUE)
})

test_that("the default worker count honours the cores this process may use", {
  skip_if_not_installed("parallelly")
  n <- pageshare:::default_worker_count()
  expect_identical(n, as.integer(max(1L, min(parallelly::availableCores(), parallelly::freeConnections() - 16L))))
  # A process limited to one CPU (taskset) gets one worker by default.
  skip_if(!nzchar(Sys.which("taskset")), "no taskset")
  one <- system2("taskset", c("-c", "0", file.path(R.home("bin"), "Rscript"), "-e",
                              shQuote("cat(pageshare:::default_worker_count())")), stdout = TRUE)
  expect_identical(one, "1")
})

test_that("the worker count is counted when a pool starts, so loading pageshare does not load parallelly", {
  # Every worker loads pageshare; parallelly (and tools, which it loads) cost
  # each process ~10 MB. PAGESHARE_WORKERS still sets the option at load.
  res <- callr::r(function() {
    library(pageshare)
    list(loaded = "parallelly" %in% loadedNamespaces(), option = getOption("pageshare.workers"),
         count = pageshare:::worker_count())
  }, env = c(callr::rcmd_safe_env(), PAGESHARE_WORKERS = ""))
  expect_false(res$loaded)
  expect_null(res$option)
  expect_gte(res$count, 1L)
  from_env <- callr::r(function() { library(pageshare); getOption("pageshare.workers") },
                       env = c(callr::rcmd_safe_env(), PAGESHARE_WORKERS = "3"))
  expect_identical(from_env, 3)
})

test_that("every front door follows parallelly's limit on local workers, before starting anything", {
  skip_if_not_installed("parallelly")
  stop_workers()
  old <- options(parallelly.maxWorkers.localhost = NULL, pageshare.workers = NULL)
  on.exit(options(old), add = TRUE)
  cores <- pageshare:::limit_cores()
  children <- function() {
    kids <- list.files(sprintf("/proc/%d/task", Sys.getpid()), full.names = TRUE)
    length(unlist(lapply(file.path(kids, "children"), function(f) scan(f, quiet = TRUE))))
  }
  before <- children()
  # start_workers(1000) on a machine of fewer than 334 cores: an error naming
  # the option, and no process started.
  if (1000 > 3 * cores) {
    e <- tryCatch(start_workers(1000), error = function(e) e)
    expect_s3_class(e, "pageshare_too_many_workers")
    expect_s3_class(e, "pageshare_error")
    expect_match(conditionMessage(e), "`n` = 1000 workers", fixed = TRUE)
    expect_match(conditionMessage(e), "options(parallelly.maxWorkers.localhost = c(1, ", fixed = TRUE)
  }
  too_many <- 3L * cores + 1L
  doors <- list(
    n = function(v) start_workers(v),
    cores = function(v) registerDoShm(cores = v),
    MAX.CORES = function(v) memLapply(1:2, identity, MAX.CORES = v),
    workers = function(v) shm_multisession(workers = v),
    workers = function(v) attr(shm_multisession, "factory")(workers = v),
    pageshare.workers = function(v) { o <- options(pageshare.workers = v); on.exit(options(o)); start_workers() })
  for (i in seq_along(doors)) {
    e <- tryCatch(doors[[i]](too_many), error = function(e) e)
    expect_s3_class(e, "pageshare_too_many_workers")
    expect_match(conditionMessage(e), sprintf("`%s` = %d workers", names(doors)[i], too_many), fixed = TRUE,
                 info = names(doors)[i])
    expect_match(conditionMessage(e), "parallelly.maxWorkers.localhost", fixed = TRUE)
  }
  expect_identical(children(), before)
  expect_length(pageshare:::pool_pids(), 0L)
  # Above the cores: a warning of the same class. (The counts that pass are
  # checked by check_future_workers(), the check shm_multisession() and its
  # factory make before anything else: calling the plan function itself would
  # start the pool, and on future >= 1.40 it is only reached through the
  # factory.)
  check <- pageshare:::check_future_workers
  w <- tryCatch(check(cores + 1L), warning = function(w) w)
  expect_s3_class(w, "pageshare_too_many_workers")
  expect_s3_class(w, "pageshare_warning")
  expect_match(conditionMessage(w), "soft limit of 100%", fixed = TRUE)
  w <- tryCatch(shm_multisession(workers = cores + 1L), warning = function(w) w)
  expect_s3_class(w, "pageshare_too_many_workers")
  expect_silent(check(cores))
  # The option as parallelly reads it: one number is a soft limit only, none
  # switches the rule off; I(n) skips it; a bad value is named.
  options(parallelly.maxWorkers.localhost = 2)
  expect_warning(check(too_many), class = "pageshare_too_many_workers")
  options(parallelly.maxWorkers.localhost = c(1, 4))
  expect_warning(check(too_many), class = "pageshare_too_many_workers")
  expect_error(check(4L * cores + 1L), class = "pageshare_too_many_workers")
  expect_error(shm_multisession(workers = 4L * cores + 1L), class = "pageshare_too_many_workers")
  options(parallelly.maxWorkers.localhost = numeric(0))
  expect_silent(check(too_many))
  options(parallelly.maxWorkers.localhost = NULL)
  expect_silent(check(I(too_many)))
  options(parallelly.maxWorkers.localhost = "lots")
  e <- tryCatch(shm_multisession(workers = 1L), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), "parallelly.maxWorkers.localhost", fixed = TRUE)
})

test_that("the cores are counted once per session, not per worker count", {
  skip_if_not_installed("parallelly")
  calls <- 0L
  counted <- function() calls <<- calls + 1L
  pageshare:::default_cores()
  pageshare:::limit_cores()
  # (a counting wrapper in parallelly's namespace, where `parallelly::`
  # finds it: trace() cannot wrap the classed function of parallelly >= 1.4x)
  ns <- asNamespace("parallelly")
  original <- get("availableCores", envir = ns)
  wrapper <- function(...) { counted(); original(...) }
  unlockBinding("availableCores", ns)
  assign("availableCores", wrapper, envir = ns)
  on.exit({ assign("availableCores", original, envir = ns); lockBinding("availableCores", ns) }, add = TRUE)
  for (i in 1:20) {
    pageshare:::check_worker_count(1L, "cores")
    pageshare:::pool_worker_count(1L, "n")
    pageshare:::default_worker_count()
  }
  expect_identical(calls, 0L)
})

test_that("shm_multisession on the pool is not bound by R's connections", {
  skip_if_not_installed("parallelly")
  many <- parallelly::freeConnections() + 25L
  # (the pool's workers hold no R connection, on every version of future)
  expect_identical(unclass(pageshare:::check_future_workers(I(many))), many)
  expect_s3_class(pageshare:::check_future_workers(I(many)), "AsIs")
  expect_error(pageshare:::check_future_workers(I(5000)), class = "pageshare_bad_argument")
})
