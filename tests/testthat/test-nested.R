# shm_multisession nested under a cluster-level plan, as on several hosts:
# outer workers (here on localhost, standing in for hosts) receive X as plain
# data, and each shares it once with its own inner workers. A handle never
# leaves the outer worker that made it, and nothing is left behind.

test_that("shm_multisession inside a cluster plan: right results, X shared once per outer worker", {
  skip_on_cran()
  skip_if_not_installed("future.apply")
  on.exit(future::plan(future::sequential), add = TRUE)
  future::plan(list(future::tweak(future::cluster, workers = rep("localhost", 2)),
                    future::tweak(shm_multisession, workers = 2)))
  X <- matrix(runif(3000 * 80), 3000)   # 1.9 MB: above the threshold
  halves <- list(1:40, 41:80)
  got <- future.apply::future_lapply(halves, function(cols) {
    inner <- future.apply::future_lapply(cols, function(j) {
      list(sum = sum(X[, j]), shared = pageshare::is_shared(X), pid = Sys.getpid())
    })
    list(outer = Sys.getpid(), inner = inner, segments = nrow(pageshare::shared_segments()),
         outer_has_view = pageshare::is_shared(X))
  })
  sums <- unlist(lapply(got, function(g) vapply(g$inner, `[[`, 0, "sum")))
  expect_equal(sums, colSums(X))
  # the outer workers got X as data (a handle means nothing on another host) ...
  expect_false(any(vapply(got, `[[`, TRUE, "outer_has_view")))
  # ... and each shared it with its own inner workers, once
  for (g in got) {
    expect_true(all(vapply(g$inner, `[[`, TRUE, "shared")))
    expect_false(any(vapply(g$inner, `[[`, 0L, "pid") == g$outer))
    expect_identical(g$segments, 1L)
  }
  expect_length(unique(vapply(got, `[[`, 0L, "outer")), 2L)
  outer_pids <- vapply(got, `[[`, 0L, "outer")
  inner_pids <- unique(unlist(lapply(got, function(g) vapply(g$inner, `[[`, 0L, "pid"))))
  future::plan(future::sequential)
  expect_true(pids_gone(c(outer_pids, inner_pids)))
  expect_length(own_segments(), 0L)
})

test_that("registerDoShm() inside an outer future shares with its own workers", {
  skip_on_cran()
  skip_if_not_installed("foreach")
  on.exit(future::plan(future::sequential), add = TRUE)
  future::plan(future::cluster, workers = "localhost")
  X <- matrix(runif(3000 * 60), 3000)
  f <- future::future({
    pageshare::registerDoShm(cores = 2)
    `%dopar%` <- foreach::`%dopar%`
    # (in a function, as foreach finds what to export in the caller's frames:
    # a global of the future itself is not found, under doParallel neither)
    colsums <- function(X) {
      foreach::foreach(j = seq_len(ncol(X)), .combine = c) %dopar% c(sum(X[, j]), pageshare::is_shared(X))
    }
    r <- colsums(X)
    pageshare::stop_workers()
    r
  }, packages = "foreach")
  r <- matrix(future::value(f), nrow = 2)
  expect_equal(r[1, ], colSums(X))
  expect_true(all(r[2, ] == 1))
})

test_that("shm_multisession inside future.batchtools' jobs: right results, X shared in each job", {
  skip_on_cran()
  skip_if_not_installed("future.batchtools")
  skip_if_not_installed("future.apply")
  # (batchtools keeps its registry in ./.future: here a folder of the test's own)
  wd <- tempfile("batchtools-")
  dir.create(wd)
  old_wd <- setwd(wd)
  on.exit({ future::plan(future::sequential); setwd(old_wd); unlink(wd, recursive = TRUE) }, add = TRUE)
  future::plan(list(future.batchtools::batchtools_local, future::tweak(shm_multisession, workers = 2)))
  X <- matrix(runif(3000 * 60), 3000)
  halves <- list(1:30, 31:60)
  got <- future.apply::future_lapply(halves, function(cols) {
    inner <- future.apply::future_sapply(cols, function(j) c(sum(X[, j]), pageshare::is_shared(X)))
    list(job = Sys.getpid(), inner = inner, job_has_view = pageshare::is_shared(X))
  })
  expect_equal(unlist(lapply(got, function(g) g$inner[1, ])), colSums(X))
  for (g in got) {
    expect_true(all(g$inner[2, ] == 1))   # shared with the job's own workers
    expect_false(g$job_has_view)          # the job got X as data
  }
  expect_false(any(vapply(got, `[[`, 0L, "job") == Sys.getpid()))   # each job in a process of its own
})
