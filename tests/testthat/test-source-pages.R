# Sharing a large ordinary vector gives its own pages back: they become
# copy-on-write mappings of the segment (option pageshare.release_source).

test_that("share() of a large vector holds its data once, and the vector is unchanged", {
  skip_if_not(file.exists("/proc/self/smaps_rollup"), "no smaps_rollup")
  res <- callr::r(function(release) {
    library(pageshare)
    own_mb <- function() {
      f <- readLines("/proc/self/smaps_rollup")
      as.numeric(sub("^[^:]+:\\s+(\\d+) kB$", "\\1", grep("^Anonymous:", f, value = TRUE))) / 1024
    }
    options(pageshare.release_source = release)
    x <- matrix(as.double(seq_len(8e6)) / 7, 4000)         # 64 MB
    ref <- sum(x[, 17]) + x[4000, 2000]
    invisible(gc()); before <- own_mb()
    v <- share(x)
    invisible(gc()); after <- own_mb()
    same <- identical(x, v) && identical(sum(x[, 17]) + x[4000, 2000], ref)
    x2 <- x; x2[1, 1] <- -1                                   # R copies first
    list(released_mb = before - after, same = same, v11 = v[1, 1], x11 = x[1, 1], x2_11 = x2[1, 1],
         dim = dim(x))
  }, args = list(release = TRUE))
  expect_gt(res$released_mb, 60)
  expect_true(res$same)
  expect_identical(res$x11, 1 / 7)
  expect_identical(res$v11, 1 / 7)
  expect_identical(res$x2_11, -1)
  expect_identical(res$dim, c(4000L, 2000L))

  kept <- callr::r(function() {
    library(pageshare)
    options(pageshare.release_source = FALSE)
    own_mb <- function() {
      f <- readLines("/proc/self/smaps_rollup")
      as.numeric(sub("^[^:]+:\\s+(\\d+) kB$", "\\1", grep("^Anonymous:", f, value = TRUE))) / 1024
    }
    x <- as.double(seq_len(8e6)); invisible(gc()); before <- own_mb()
    v <- share(x); invisible(gc())
    before - own_mb()
  })
  expect_lt(kept, 8)
})

test_that("an in-place write into a released vector never reaches the segment", {
  skip_if_not_installed("data.table")
  x <- as.double(seq_len(5e6)) + 0                           # 40 MB, an ordinary vector
  invisible(gc()); before <- own_kb(Sys.getpid())
  v <- share(x)
  expect_gt(before - own_kb(Sys.getpid()), 30 * 1024)        # x's pages were released
  dt <- data.table::setDT(list(a = x))                       # a column over x's memory
  data.table::set(dt, 1L, "a", -42)                          # writes in place
  expect_identical(dt$a[1], -42)
  expect_identical(v[1], 1)                                  # the segment is untouched
  h <- with_handles(serialize(v, NULL))
  expect_identical(callr::r(function(h) { library(pageshare); unserialize(h)[1:2] }, list(h = h)), c(1, 2))
  rm(dt, x, v); invisible(gc())
})

test_that("a forked child reads a released vector and the parent frees it cleanly", {
  skip_on_os("windows")
  x <- as.double(seq_len(5e6)) * 3
  v <- share(x)
  got <- parallel::mclapply(1:2, function(i) c(sum(x), x[5e6]), mc.cores = 2)[[2]]
  expect_identical(got, c(sum(as.double(seq_len(5e6)) * 3), 15e6))
  rm(x); invisible(gc())
  expect_identical(v[5e6], 15e6)
  rm(v); invisible(gc())
})

test_that("a source shared again after forget_shared() moves onto the new segment", {
  # Its pages map the first segment (released by forget_shared()); sharing it
  # again hands them over to the new one, so the old pages are freed instead
  # of the data being held twice.
  maps_of <- function(memfd) any(grepl(memfd, readLines("/proc/self/maps"), fixed = TRUE))
  x <- as.double(seq_len(5e6)) + 0.5                        # 40 MB
  first <- shared_info(share(x))
  expect_true(maps_of(first$memfd))                          # x's pages are the segment's
  forget_shared(); for (i in 1:3) invisible(gc())
  expect_false(first$name %in% shared_segments(all = TRUE))  # nobody holds it any more
  second <- shared_info(v <- share(x))
  expect_false(identical(first$name, second$name))
  expect_false(maps_of(first$memfd))                         # nothing maps the old pages
  expect_true(maps_of(second$memfd))
  expect_identical(x[5e6], 5e6 + 0.5)
  expect_identical(v[1], 1.5)
  rm(x, v); invisible(gc())
})
