# Sharing a large ordinary vector gives its own pages back: they become
# copy-on-write mappings of the segment (option pageshare.release_source).
# Where the self-test at load switched the handover off (another malloc()
# through LD_PRELOAD, musl...), the tests that assert it skip, saying why;
# test-page-handover.R checks the self-test itself (skips: helper-page-handover.R).

test_that("share() of a large vector holds its data once, and the vector is unchanged", {
  skip_unless_handover()
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

# The handover needs a block of the vector's own, which glibc gives a large
# vector in a fresh process; a long session's heap may serve it from a free
# chunk instead (see the next test). These checks run in a new R process so
# that the tests before them in this one cannot decide which it gets.
test_that("an in-place write into a released vector never reaches the segment", {
  skip_unless_handover()
  skip_if_not_installed("data.table")
  res <- callr::r(function(own_kb) {
    library(pageshare)
    x <- as.double(seq_len(5e6)) + 0                         # 40 MB, an ordinary vector
    invisible(gc()); before <- own_kb(Sys.getpid())
    v <- share(x)
    released_kb <- before - own_kb(Sys.getpid())
    dt <- data.table::setDT(list(a = x))                     # a column over x's memory
    data.table::set(dt, 1L, "a", -42)                        # writes in place
    h <- with_handles(serialize(v, NULL))
    got <- callr::r(function(h) { library(pageshare); unserialize(h)[1:2] }, list(h = h))
    list(released_kb = released_kb, info_released = shared_info(v)$source_released,
         dt1 = dt$a[1], v1 = v[1], received = got)
  }, args = list(own_kb = own_kb))
  expect_gt(res$released_kb, 30 * 1024)                      # x's pages were released
  expect_gt(res$info_released, 30 * 2^20)                    # and shared_info() says so
  expect_identical(res$dt1, -42)
  expect_identical(res$v1, 1)                                # the segment is untouched
  expect_identical(res$received, c(1, 2))
})

test_that("a vector glibc served from its heap is copied, kept, and shared_info() says so", {
  skip_if_not_installed("data.table")
  # Two freed 24 MB blocks below a live one leave a 48 MB free chunk in the
  # heap (the mmap threshold pinned at 32 MB, no trimming), which then serves
  # the 40 MB vector: its memory is not a mapping of its own, so it is not
  # handed over (the heap reuses it), and the share is an ordinary copy.
  res <- callr::r(function(own_kb) {
    library(pageshare)
    a <- numeric(3e6) + 1; b <- numeric(3e6) + 2           # 24 MB each, from the heap
    pin <- lapply(1:2000, function(i) runif(100))
    rm(a, b); invisible(gc())
    x <- as.double(seq_len(5e6)) + 0
    # (where glibc put x: inside the heap's mapping, or, should the freed
    # chunks not have served it, a mapping of its own)
    at <- as.numeric(paste0("0x", sub("^0x", "", data.table::address(x))))
    maps <- strsplit(readLines("/proc/self/maps"), " +")
    lo <- vapply(maps, function(f) as.numeric(paste0("0x", sub("-.*", "", f[1]))), 0)
    hi <- vapply(maps, function(f) as.numeric(paste0("0x", sub(".*-", "", f[1]))), 0)
    in_heap <- any(lo <= at & at < hi & vapply(maps, function(f) identical(f[6], "[heap]"), TRUE))
    invisible(gc()); before <- own_kb(Sys.getpid())
    v <- share(x)
    kept_kb <- own_kb(Sys.getpid()) - before
    x[1] <- -1                                               # an ordinary copy-on-modify
    list(in_heap = in_heap, info_released = shared_info(v)$source_released, kept_kb = kept_kb,
         same = identical(v[2:5e6], as.double(2:5e6)), v1 = v[1])
  }, args = list(own_kb = own_kb),
  env = c(callr::rcmd_safe_env(), MALLOC_MMAP_THRESHOLD_ = "33554432", MALLOC_TRIM_THRESHOLD_ = "1073741824"))
  skip_if(!res$in_heap, "glibc gave the vector a mapping of its own this time (the freed chunks did not serve it)")
  expect_identical(res$info_released, 0)
  expect_gt(res$kept_kb, -4 * 1024)                          # nothing was given back
  expect_true(res$same)
  expect_identical(res$v1, 1)
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
  skip_unless_handover()
  # Its pages map the first segment (released by forget_shared()); sharing it
  # again hands them over to the new one, so the old pages are freed instead
  # of the data being held twice. (A new process: see above.)
  res <- callr::r(function() {
    library(pageshare)
    maps_of <- function(memfd) any(grepl(memfd, readLines("/proc/self/maps"), fixed = TRUE))
    x <- as.double(seq_len(5e6)) + 0.5                      # 40 MB
    first <- shared_info(share(x))
    first_mapped <- maps_of(first$memfd)                     # x's pages are the segment's
    forget_shared(); for (i in 1:3) invisible(gc())
    first_gone <- !first$name %in% shared_segments(all = TRUE)$name  # nobody holds it any more
    second <- shared_info(v <- share(x))
    list(first_mapped = first_mapped, first_gone = first_gone,
         first_released = first$source_released, second_released = second$source_released,
         renamed = !identical(first$name, second$name),
         first_still_mapped = maps_of(first$memfd), second_mapped = maps_of(second$memfd),
         x_last = x[5e6], v1 = v[1])
  })
  expect_true(res$first_mapped)
  expect_gt(res$first_released, 30 * 2^20)
  expect_true(res$first_gone)
  expect_true(res$renamed)
  expect_false(res$first_still_mapped)                       # nothing maps the old pages
  expect_true(res$second_mapped)
  expect_gt(res$second_released, 30 * 2^20)
  expect_identical(res$x_last, 5e6 + 0.5)
  expect_identical(res$v1, 1.5)
})
