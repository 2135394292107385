test_that("a worker reads a 200 MB view with < 5% private memory growth", {
  skip_if_not(file.exists(sprintf("/proc/%d/smaps_rollup", Sys.getpid())), "no smaps_rollup")
  n <- 25e6                                  # 200 MB of doubles
  v <- share(as.double(seq_len(n)) * 1.5)
  cl <- local_cluster(1L)
  wpid <- parallel::clusterEvalQ(cl, Sys.getpid())[[1]]
  parallel::clusterEvalQ(cl, invisible(gc()))
  before <- private_kb(wpid)
  got <- with_handles(parallel::clusterCall(cl, function(v) {
    assign("v", v, envir = globalenv())
    c(is_shared = is_shared(v), sum = sum(v), first = v[1], last = v[length(v)])
  }, v))[[1]]
  grown_kb <- private_kb(wpid) - before
  expect_true(as.logical(got[["is_shared"]]))
  expect_identical(got[["sum"]], sum(v))
  expect_lt(grown_kb * 1024, 0.05 * 8 * n)
  # the bytes equal the original
  ok <- parallel::clusterEvalQ(cl, identical(v, as.double(seq_len(length(v))) * 1.5))[[1]]
  expect_true(ok)
  parallel::clusterEvalQ(cl, rm(v))
})

test_that("a write in a worker never changes what the owner or another worker reads", {
  x <- as.double(1:1e5)
  v <- share(x)
  cl <- local_cluster(2L)
  parallel::clusterExport(cl, character())
  res <- with_handles(parallel::clusterApply(cl, 1:2, function(i, v) {
    if (i == 1L) {
      v[1:10] <- -1                         # private copy in this worker
      v[[50]] <- 0
      c(v[1], v[50])
    } else {
      Sys.sleep(0.2)
      c(v[1], v[50])
    }
  }, v))
  expect_identical(res[[1]], c(-1, 0))
  expect_identical(res[[2]], c(1, 50))
  expect_identical(v, x)
  again <- with_handles(parallel::clusterCall(cl, function(v) v[1:10], v))
  expect_identical(again[[1]], as.double(1:10))
  expect_identical(again[[2]], as.double(1:10))
})

test_that("a worker that cannot map a view fails loudly", {
  cl <- local_cluster(1L)
  h <- local({
    v <- share(as.double(1:10))
    h <- with_handles(serialize(v, NULL))
    # forget the view and its source: the segment goes away
    h
  })
  invisible(gc()); invisible(gc())
  expect_error(parallel::clusterCall(cl, function(h) unserialize(h), h), "could not be mapped|does not exist")
})
