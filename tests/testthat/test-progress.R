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

# What a progressr handler sees of `run(dir)`: the type of every progress
# report it gets, with its amount and the time it got it, and the times at
# which the call's tasks ended (each task writes its end time into a file in
# `dir`). A handler that gets `finish` before the updates shows none of them:
# counting the updates signalled is not enough.
progress_seen <- function(run) {
  dir <- tempfile("task-ends-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  seen <- data.frame(type = character(), amount = numeric(), time = numeric())
  recorder <- progressr::make_progression_handler("recorder", enable = TRUE, handler = function(p) {
    if (p$type %in% c("initiate", "update", "finish")) {
      seen[nrow(seen) + 1L, ] <<- list(p$type, if (p$type == "update") p$amount else 0, as.numeric(Sys.time()))
    }
    # (progressr >= 1.0 reads what a handler returns: whether its bar finished)
    invisible(identical(p$type, "finish"))
  })
  progressr::with_progress(run(dir), handlers = recorder, enable = TRUE)
  ends <- vapply(list.files(dir, full.names = TRUE), function(f) as.numeric(readLines(f)), 0)
  list(seen = seen, ends = unname(ends))
}

# The bar opens, then the updates arrive (at least two, `steps` in all), then
# it closes; and with tasks that record their end, the first update arrives
# before the last task ends.
expect_progress_while_running <- function(got, steps, door) {
  types <- got$seen$type
  updates <- types == "update"
  expect_identical(types, c("initiate", rep("update", sum(updates)), "finish"), info = door)
  expect_gte(sum(updates), 2, label = sprintf("%s: updates", door))
  expect_equal(sum(got$seen$amount[updates]), steps, info = door)
  if (length(got$ends)) {
    expect_lt(min(got$seen$time[updates]), max(got$ends), label = sprintf("%s: first update", door))
  }
}

test_that("a progressr handler sees every door's updates between the bar's start and its end, as tasks end", {
  skip_if_not_installed("progressr")
  skip_if_not_installed("foreach")
  old <- options(progressr.enable = TRUE, pageshare.workers = 2L)
  on.exit({ options(old); foreach::registerDoSEQ(); stop_workers() }, add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  # a task of 0.3 s that records when it ended: 4 of them on 2 workers take
  # two rounds, so an update of the first round comes before the second ends
  ended <- function(dir, i) {
    Sys.sleep(0.3)
    writeLines(format(as.numeric(Sys.time()), digits = 17), file.path(dir, i))
    i
  }
  doors <- list(
    shm_map = function(dir) shm_map(1:4, ended, dir = dir, .progress = TRUE),
    memLapply = function(dir) {
      p <- progressr::progressor(4)
      memLapply(1:4, function(i, dir, p) { p(); ended(dir, i) }, VARS = list(dir = dir, p = p))
    },
    memApply = function(dir) {
      p <- progressr::progressor(4)
      memApply(matrix(1:8, 2), 2, function(v, dir, p) { p(); ended(dir, v[2] / 2) }, VARS = list(dir = dir, p = p))
    },
    foreach = function(dir) {
      registerDoShm(cores = 2)
      p <- progressr::progressor(4)
      foreach::foreach(i = 1:4, .export = "ended") %dopar% { p(); ended(dir, i) }
    })
  for (door in names(doors)) {
    expect_progress_while_running(progress_seen(doors[[door]]), 4, door)
  }
})

test_that("future_lapply() under shm_multisession: the same as every other door", {
  skip_if_not_installed("progressr")
  skip_if_not_installed("future.apply")
  old <- options(progressr.enable = TRUE)
  oplan <- future::plan(shm_multisession, workers = 2)
  on.exit({ future::plan(oplan); options(old) }, add = TRUE)
  ended <- function(dir, i) {
    Sys.sleep(0.3)
    writeLines(format(as.numeric(Sys.time()), digits = 17), file.path(dir, i))
    i
  }
  got <- progress_seen(function(dir) {
    p <- progressr::progressor(4)
    future.apply::future_lapply(1:4, function(i) { p(); ended(dir, i) }, future.chunk.size = 1)
  })
  expect_progress_while_running(got, 4, "future_lapply()")
})

test_that("mutual_information(): a handler sees its block updates between the bar's start and its end", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE, pageshare.workers = 2L)
  on.exit({ options(old); stop_workers() }, add = TRUE)
  set.seed(1)
  y <- rep(1:2, each = 50)
  X <- matrix(rnorm(100 * 600), 100)   # 3 blocks of at most 256 columns
  for (cores in 1:2) {
    got <- progress_seen(function(dir) mutual_information(X, y, cores = cores))
    expect_progress_while_running(got, 3, sprintf("mutual_information(cores = %d)", cores))
  }
})
