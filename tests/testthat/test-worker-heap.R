# Workers that pageshare starts collect garbage at a smaller vector heap than
# R's default (option pageshare.worker_vsize): they read shared data through
# views, so what their heap holds is mostly garbage.

test_that("worker_heap_args() puts --min-vsize first, and the user's choice wins", {
  args <- pageshare:::worker_heap_args
  with_r_vsize <- function(value, code) {
    old <- Sys.getenv("R_VSIZE", unset = NA)
    on.exit(if (is.na(old)) Sys.unsetenv("R_VSIZE") else Sys.setenv(R_VSIZE = old))
    if (is.na(value)) Sys.unsetenv("R_VSIZE") else Sys.setenv(R_VSIZE = value)
    code
  }
  old <- options(pageshare.worker_vsize = NULL)
  on.exit(options(old))
  with_r_vsize(NA, {
    expect_identical(args(), "--min-vsize=16777216")
    expect_identical(args(c("-e", "1")), c("--min-vsize=16777216", "-e", "1"))
    expect_identical(args(c("--min-vsize=32M", "-e", "1")), c("--min-vsize=32M", "-e", "1"))
    options(pageshare.worker_vsize = 8 * 2^20)
    expect_identical(args(), "--min-vsize=8388608")
    for (off in list(NA, NA_real_)) {
      options(pageshare.worker_vsize = off)
      expect_null(args())
      expect_identical(args("-e"), "-e")
    }
  })
  options(pageshare.worker_vsize = NULL)
  with_r_vsize("32M", expect_identical(args("-e"), "-e"))
  for (bad in list("16M", 1000, -1, Inf, c(2^24, 2^25), TRUE)) {
    options(pageshare.worker_vsize = bad)
    e <- tryCatch(args(), error = function(e) e)
    expect_s3_class(e, "pageshare_bad_argument")
    expect_match(conditionMessage(e), "`pageshare.worker_vsize`", fixed = TRUE, info = deparse(bad))
  }
})

test_that("the pool's workers start with the smaller vector heap, or R's default when asked", {
  on.exit({ options(pageshare.worker_vsize = NULL); stop_workers() }, add = TRUE)
  stop_workers()
  trigger <- function() unlist(memLapply(1:2, function(i) gc()[2, 4], MAX.CORES = 2))
  expect_equal(trigger(), c(16, 16))              # MB at which a worker first collects
  stop_workers()
  options(pageshare.worker_vsize = NA)
  expect_equal(trigger(), c(64, 64))              # R's own default
  stop_workers()
  options(pageshare.worker_vsize = "x")
  e <- tryCatch(trigger(), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_length(pageshare:::pool_pids(), 0L)
})

test_that("shm_multisession's workers start with it too, with the user's rscript_args kept", {
  skip_if_not_installed("future")
  on.exit(future::plan(future::sequential), add = TRUE)
  future::plan(shm_multisession, workers = 2)
  got <- future::value(future::future(list(trigger = gc()[2, 4], args = commandArgs())))
  expect_equal(got$trigger, 16)
  expect_true("--min-vsize=16777216" %in% got$args)
  # A --min-vsize of the user's own wins, and their other arguments are kept.
  future::plan(shm_multisession, workers = 2, rscript_args = c("--min-vsize=32M", "--no-init-file"))
  got <- future::value(future::future(list(trigger = gc()[2, 4], args = commandArgs())))
  expect_equal(got$trigger, 32)
  expect_true("--no-init-file" %in% got$args)
  expect_false("--min-vsize=16777216" %in% got$args)
})

test_that("a worker that replaces a dead one (future < 1.40) starts with the plan's arguments", {
  skip_if_not_installed("future")
  skip_if(utils::packageVersion("future") >= "1.40.0", "future >= 1.40 replaces dead workers itself")
  on.exit(future::plan(future::sequential), add = TRUE)
  future::plan(shm_multisession, workers = 2, rscript_args = "--no-init-file")
  expect_error(future::value(future::future(tools::pskill(Sys.getpid(), tools::SIGKILL))),
               class = "FutureError")
  args <- lapply(1:2, function(i) future::value(future::future(commandArgs())))
  for (a in args) {
    expect_true("--no-init-file" %in% a)
    expect_true("--min-vsize=16777216" %in% a)
  }
})
