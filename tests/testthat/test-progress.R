# Progress updates (progressr) that a task signals in a worker of pageshare's
# pool reach the caller while the call runs, from every front door on the
# pool, as they do from future's workers.

# Runs `run(f)`, where f(i) signals one progress update and, for i == 1,
# waits (at most 5 s) until the caller has seen an update: TRUE only if the
# update crossed while the call was running.
relayed_while_running <- function(run, n = 4) {
  flag <- tempfile("progress-seen-")
  on.exit(unlink(flag), add = TRUE)
  steps <- 0
  p <- progressr::progressor(steps = n)
  f <- function(i) {
    p()
    if (i != 1) return(TRUE)
    for (k in 1:500) {
      if (file.exists(flag)) return(TRUE)
      Sys.sleep(0.01)
    }
    FALSE
  }
  got <- withCallingHandlers(run(f), progression = function(c) {
    if (identical(c$type, "update")) {
      steps <<- steps + c$amount
      file.create(flag)
    }
  })
  list(seen_while_running = all(unlist(got)), steps = steps)
}

test_that("progress updates cross from the pool's workers while the call runs", {
  skip_if_not_installed("progressr")
  skip_if_not_installed("foreach")
  old <- options(progressr.enable = TRUE, pageshare.workers = 2L)   # (progressr reports only in interactive sessions by default)
  on.exit({ options(old); foreach::registerDoSEQ(); stop_workers() }, add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  fronts <- list(
    memLapply = function(f) memLapply(1:4, f),
    memApply = function(f) memApply(matrix(1:8, 2), 2, function(v, f) f(v[2] / 2), VARS = list(f = f)),
    foreach = function(f) {
      registerDoShm(cores = 2)
      foreach::foreach(i = 1:4) %dopar% f(i)
    },
    shm_map = function(f) shm_map(1:4, f),
    shm_call = function(f) list(shm_value(shm_call(function(f) { for (i in 4:1) r <- f(i); r }, f))))
  for (front in names(fronts)) {
    got <- relayed_while_running(fronts[[front]])
    expect_true(got$seen_while_running, info = front)
    expect_equal(got$steps, 4, info = front)
  }
})

test_that("mutual_information() reports a progress step per block of columns as it goes", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE, pageshare.workers = 2L)
  on.exit({ options(old); stop_workers() }, add = TRUE)
  set.seed(1)
  y <- rep(1:2, each = 50)
  X <- matrix(rnorm(100 * 600), 100)   # 3 blocks of at most 256 columns
  expected <- mutual_information(X, y, cores = 1)
  for (way in c("this process", "pool")) {
    updates <- numeric()
    got <- withCallingHandlers(
      mutual_information(X, y, cores = if (way == "this process") 1 else 2),
      progression = function(c) if (identical(c$type, "update")) updates <<- c(updates, c$amount))
    expect_equal(got, expected, info = way)
    expect_equal(sum(updates), 3, info = way)
    expect_true(length(updates) >= 2, info = way)   # not all at the end
  }
})
