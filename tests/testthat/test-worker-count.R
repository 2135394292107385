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
