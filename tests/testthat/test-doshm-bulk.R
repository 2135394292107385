# A plain loop's iterations and combining are computed in bulk by the backend
# (R/doshm-bulk.R); they must give exactly what foreach's own iterator and
# accumulator give, which `%do%` uses.

skip_if_not_installed("foreach")
library(foreach)

test_that("plain loops combine exactly as foreach does", {
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  same_as_do(function(`%op%`) foreach(i = 1:250) %op% sqrt(i))
  same_as_do(function(`%op%`) foreach(i = integer(0)) %op% i)                                # no iteration at all
  same_as_do(function(`%op%`) foreach(i = 1:250, .combine = c) %op% c(i, -i))
  same_as_do(function(`%op%`) foreach(i = 1:7, .combine = cbind) %op% c(a = i, b = i^2))   # colnames result.<i>
  same_as_do(function(`%op%`) foreach(i = 1:7, .combine = rbind, .maxcombine = 3) %op% i)
  same_as_do(function(`%op%`) foreach(i = 1:9, .combine = "+", .init = 10) %op% i)
  same_as_do(function(`%op%`) foreach(i = 1:9, .combine = "-") %op% i)                       # left fold, no init
  # the grouping is visible to a combine function that records its calls
  rec <- function(...) list(call = deparse(sys.call()), args = list(...))
  same_as_do(function(`%op%`) foreach(i = 1:11, .combine = rec, .multicombine = TRUE, .maxcombine = 4) %op% i)
  same_as_do(function(`%op%`) foreach(i = 1:11, .combine = rec, .init = 0, .multicombine = TRUE, .maxcombine = 4) %op% i)
  same_as_do(function(`%op%`) foreach(i = 1:5, .combine = rec, .maxcombine = 5) %op% i)      # not multicombine
  same_as_do(function(`%op%`) foreach(i = 1:1, .combine = rec) %op% i)                       # one result: no call
  same_as_do(function(`%op%`) foreach(i = 1:20, .combine = c, .final = function(x) sum(x) * 2) %op% i)
  same_as_do(function(`%op%`) foreach(i = 1:20, .combine = c, .inorder = FALSE) %op% i)
  same_as_do(function(`%op%`) foreach(a = 1:5, b = letters[1:3]) %op% paste(a, b))           # shortest argument
  same_as_do(function(`%op%`) foreach(x = c(p = 1, q = 2)) %op% names(x))                    # names dropped
  same_as_do(function(`%op%`) foreach(x = list(1, NULL, "a"), .combine = c) %op% is.null(x))
  same_as_do(function(`%op%`) foreach(x = list(u = 1:3, v = 4:6), .combine = "+") %op% x)
})

test_that("errors in plain loops are handled as foreach handles them", {
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  same_as_do(function(`%op%`) foreach(i = 1:10, .combine = c, .errorhandling = "remove") %op% (if (i %% 3 == 0) stop("bad ", i) else i))
  same_as_do(function(`%op%`) foreach(i = 3:3, .combine = c, .errorhandling = "remove") %op% (if (i %% 3 == 0) stop("bad ", i) else i))  # nothing left
  # errors in the first group: the first combine happens later
  rec <- function(...) list(call = deparse(sys.call()), args = list(...))
  same_as_do(function(`%op%`) foreach(i = c(3, 6, 1, 2, 4), .combine = rec, .multicombine = TRUE,
                                      .maxcombine = 2, .errorhandling = "remove") %op% (if (i %% 3 == 0) stop("bad ", i) else i))
  msg <- function(op) tryCatch(op, error = conditionMessage)
  expect_identical(msg(foreach(i = 1:10) %dopar% (if (i %% 3 == 0) stop("bad ", i) else i)), msg(foreach(i = 1:10) %do% (if (i %% 3 == 0) stop("bad ", i) else i)))
  expect_match(msg(foreach(i = 1:10) %dopar% (if (i %% 3 == 0) stop("bad ", i) else i)), 'task 3 failed - "bad 3"', fixed = TRUE)
  passed <- foreach(i = 1:4, .errorhandling = "pass") %dopar% (if (i %% 3 == 0) stop("bad ", i) else i)
  expect_identical(passed[c(1, 2, 4)], list(1L, 2L, 4L))
  expect_s3_class(passed[[3]], "error")
  expect_identical(conditionMessage(passed[[3]]), "bad 3")
})

test_that("other loops still go through foreach's iterator, and every argument is evaluated once", {
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  same_as_do(function(`%op%`) foreach(m = matrix(1:6, 2), .combine = c) %op% sum(m))
  same_as_do(function(`%op%`) foreach(d = data.frame(a = 1:2, b = 3:4), .combine = c) %op% sum(d))
  same_as_do(function(`%op%`) foreach(f = factor(c("x", "y")), .combine = c) %op% as.character(f))
  same_as_do(function(`%op%`) foreach(i = iterators::icount(4), .combine = c) %op% i)
  same_as_do(function(`%op%`) foreach(i = 1:3, .combine = rbind) %:% foreach(j = 1:2, .combine = c) %op% (10 * i + j))
  same_as_do(function(`%op%`) foreach(i = 1:10, .combine = c) %:% when(i %% 2 == 0) %op% i)
  count <- new.env(); count$n <- 0
  tick <- function(v) { count$n <- count$n + 1; v }
  invisible(foreach(i = tick(1:3)) %dopar% i)                         # plain
  invisible(foreach(i = tick(matrix(1:4, 2))) %dopar% i)              # not plain: handed to foreach's iterator
  invisible(foreach(i = 1:2, .combine = c, .init = tick(0)) %dopar% i)
  expect_identical(count$n, 3)
})

test_that("doRNG streams over a plain loop are those of doParallel", {
  skip_if_not_installed("doRNG")
  skip_if_not_installed("doParallel")
  library(doRNG)
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  a <- foreach(i = 1:20, .options.RNG = 123, .combine = c) %dorng% runif(1)
  cl <- parallel::makePSOCKcluster(2)
  on.exit(parallel::stopCluster(cl), add = TRUE)
  doParallel::registerDoParallel(cl)
  b <- foreach(i = 1:20, .options.RNG = 123, .combine = c) %dorng% runif(1)
  expect_identical(as.vector(a), as.vector(b))
  expect_identical(attr(a, "rng"), attr(b, "rng"))
})

test_that("a failing combine function is reported and what was combined kept, as with doParallel", {
  skip_if_not_installed("doParallel")
  fails_late <- function(a, ...) if (length(a) >= 5) stop("combine gave up") else c(a, ...)
  run <- function() {
    out <- utils::capture.output(r <- foreach(i = 1:9, .combine = fails_late, .init = 0) %dopar% i)
    list(result = r, printed = any(grepl("error calling combine function", out, fixed = TRUE)))
  }
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  shm <- run()
  cl <- parallel::makePSOCKcluster(2)
  on.exit(parallel::stopCluster(cl), add = TRUE)
  doParallel::registerDoParallel(cl)
  dopar <- run()
  expect_true(shm$printed)
  expect_identical(shm$result, dopar$result)
  expect_identical(shm$result, c(0, 1, 2, 3, 4))
})
