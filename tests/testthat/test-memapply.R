seg_before <- segments_now()
opts_before <- pageshare_options()
old_opts <- options(pageshare.workers = 2L)
pool_pids_seen <- integer()

worker_globals <- function() {
  pageshare:::pool_call_each(function() sort(ls(globalenv(), all.names = TRUE)))
}

test_that("MARGIN = 1 iterates rows and MARGIN = 2 columns (non-square X)", {
  X <- matrix(as.double(1:15), 3, 5)
  r1 <- memApply(X, 1, function(v) sum(v))
  expect_length(r1, 3L)
  expect_equal(unlist(r1), rowSums(X))
  r2 <- memApply(X, 2, function(v) sum(v))
  expect_length(r2, 5L)
  expect_equal(unlist(r2), colSums(X))
  expect_equal(memApply(X, 1, function(v) v), lapply(1:3, function(i) X[i, ]))
  expect_error(memApply(X, 3, sum), "`MARGIN` must be 1 (rows) or 2 (columns)", fixed = TRUE)
  expect_error(memApply(X, c(1, 2), sum), "`MARGIN`", fixed = TRUE)
  pool_pids_seen <<- pageshare:::pool_pids()
  expect_length(pool_pids_seen, 2L)
})

test_that("integer, logical, double, complex and character matrices keep their type", {
  Xi <- matrix(1:12, 3)
  r <- memApply(Xi, 2, function(v) typeof(v))
  expect_identical(unique(unlist(r)), "integer")
  expect_identical(memApply(Xi, 2, sum), as.list(as.integer(colSums(Xi))))
  Xl <- matrix(c(TRUE, FALSE, TRUE, TRUE), 2)
  expect_identical(memApply(Xl, 1, function(v) typeof(v))[[1]], "logical")
  expect_identical(memApply(Xl, 2, sum), list(1L, 2L))
  Xc <- matrix(complex(real = 1:4, imaginary = 1), 2)
  expect_equal(memApply(Xc, 2, sum), list(sum(Xc[, 1]), sum(Xc[, 2])))
  Xs <- matrix(letters[1:6], 2)
  expect_identical(memApply(Xs, 1, function(v) paste(v, collapse = "")), list("ace", "bdf"))
  # large integer matrix: shared, still integer
  Xb <- matrix(1:(600 * 500), 600)
  expect_identical(unlist(memApply(Xb, 2, function(v) typeof(v)))[1], "integer")
  expect_equal(unlist(memApply(Xb, 2, sum)), colSums(Xb))
})

test_that("data frames: columns always, rows when all columns are numeric", {
  df <- data.frame(a = 1:3, b = c(2.5, 3.5, 4.5), s = c("x", "y", "z"))
  r <- memApply(df, 2, function(col) class(col))
  expect_identical(r, list(a = "integer", b = "numeric", s = "character"))
  num <- df[c("a", "b")]
  expect_equal(unlist(memApply(num, 1, sum)), c(3.5, 5.5, 7.5))
  expect_error(memApply(df, 1, sum), "non-numeric column(s) 's'", fixed = TRUE)
  expect_error(memApply(1:10, 2, sum), "`X` must be a matrix, a data frame", fixed = TRUE)
  expect_error(memApply(array(1:8, c(2, 2, 2)), 2, sum), "`X` must be a matrix", fixed = TRUE)
  expect_error(memApply(list(1, 2), 2, sum), "`X` must be a matrix", fixed = TRUE)
})

test_that("an error in FUN is an R error naming the failing index", {
  X <- matrix(1:12, 3, dimnames = list(NULL, c("a", "b", "c", "d")))
  f <- function(v) if (v[1] == 7L) stop("seven is bad") else 1
  expect_error(memApply(X, 2, f), "memApply: `FUN` failed on column 3 (\"c\"): seven is bad", fixed = TRUE,
               class = "pageshare_error")
  expect_error(memApply(unname(X), 1, function(v) if (v[1] == 2L) stop("row two") else 1),
               "failed on row 2: row two", fixed = TRUE)
  expect_error(memLapply(list(p = 1, q = "a"), function(x) x + 1),
               "memLapply: `FUN` failed on element 2 (\"q\")", fixed = TRUE)
})

test_that("no stale results: a call after a failing call computes afresh", {
  X <- matrix(as.double(1:6), 2)
  expect_error(memApply(X, 2, function(v) stop("fail")), "fail")
  expect_equal(memApply(X, 2, function(v) max(v)), list(2, 4, 6))
  Y <- matrix(as.double(11:16), 2)
  expect_equal(memApply(Y, 2, function(v) max(v)), list(12, 14, 16))
  expect_equal(memApply(X, 2, function(v) min(v)), list(1, 3, 5))
})

test_that("primitives and functions given by name work as FUN", {
  X <- matrix(1:6, 2)
  expect_identical(memApply(X, 2, sum), list(3L, 7L, 11L))
  expect_identical(memApply(X, 1, "max"), list(5L, 6L))
  expect_identical(memApply(X, 2, length), list(2L, 2L, 2L))
  expect_identical(memLapply(list(1:3, 4:6), sum), list(6L, 15L))
})

test_that("dimnames along MARGIN and list names are kept", {
  X <- matrix(1:6, 2, dimnames = list(c("r1", "r2"), c("A", "B", "C")))
  expect_named(memApply(X, 1, sum), c("r1", "r2"))
  expect_named(memApply(X, 2, sum), c("A", "B", "C"))
  expect_identical(memApply(X, 2, function(v) names(v))[["A"]], c("r1", "r2"))
  expect_null(names(memApply(unname(X), 2, sum)))
  expect_named(memLapply(list(a = 1, b = 2), function(x) x), c("a", "b"))
})

test_that("a row or column is exactly X[i, ] or X[, j]: every type, dimnames, size, views, objects, bad index", {
  column <- function(X, j) .Call(pageshare:::ps_matrix_column, X, j)
  row <- function(X, i) .Call(pageshare:::ps_matrix_row, X, i)
  same_as_bracket <- function(X, j) {
    info <- paste(typeof(X), paste(dim(X), collapse = "x"), format(j))
    want <- tryCatch(X[, j], error = function(e) conditionMessage(e))
    got <- tryCatch(column(X, j), error = function(e) conditionMessage(e))
    expect_identical(got, want, info = paste("column", info))
    want <- tryCatch(X[j, ], error = function(e) conditionMessage(e))
    got <- tryCatch(row(X, j), error = function(e) conditionMessage(e))
    expect_identical(got, want, info = paste("row", info))
  }
  set.seed(7)
  makers <- list(
    logical = function(n) sample(c(TRUE, FALSE, NA), n, TRUE),
    integer = function(n) sample(c(-5:5, NA), n, TRUE),
    double = function(n) sample(c(rnorm(5), NA, NaN, Inf), n, TRUE),
    complex = function(n) complex(real = rnorm(n), imaginary = rnorm(n)),
    raw = function(n) as.raw(sample(0:255, n, TRUE)),
    character = function(n) sample(c("a", "\u00e9", NA, ""), n, TRUE))
  for (type in names(makers)) {
    for (nr in c(0L, 1L, 2L, 7L)) for (nc in c(0L, 1L, 3L)) {
      base <- matrix(makers[[type]](nr * nc), nr, nc)
      rn <- if (nr) paste0("r", seq_len(nr)) else character()
      cn <- c("x", "y", "z")[seq_len(nc)]
      variants <- list(
        plain = base,
        rows = `dimnames<-`(base, list(rn, NULL)),
        cols = `dimnames<-`(base, list(NULL, cn)),
        both = `dimnames<-`(base, list(rows = rn, cols = cn)),
        extra = structure(base, note = "kept by nothing"))
      for (X in variants) {
        for (j in list(1L, 3, 2.0, 0L, 4L, 1.5, NA_integer_, -1L, "x", c(1L, 2L), TRUE)) same_as_bracket(X, j)
      }
    }
  }
  # a view of a matrix: its rows and columns are read as X[i, ] and X[, j]
  V <- share(matrix(rnorm(300 * 4), 300, dimnames = list(NULL, letters[1:4])))
  for (j in c(1:4, 150L, 300L)) same_as_bracket(V, j)
  same_as_bracket(V, "b")
  # an object dispatches to its own method
  obj <- structure(matrix(1:6, 2), class = "pageshare_test_mat")
  registerS3method("[", "pageshare_test_mat", function(x, i, j, ...) "the method", envir = globalenv())
  expect_identical(column(obj, 1L), "the method")
  expect_identical(row(obj, 1L), "the method")
  # not a matrix
  same_as_bracket(1:6, 1L)
  same_as_bracket(array(1:24, c(2, 3, 4)), 1L)
  rm(V); invisible(gc())
})

test_that("VARS: a named list (shared when large) or names of registered variables", {
  X <- matrix(rnorm(200), 20)
  y <- rnorm(20)
  r <- memApply(X, 2, function(v, y) cor(v, y), VARS = list(y = y))
  expect_equal(unlist(r), as.vector(cor(X, y)))
  big <- rnorm(3e5)
  r <- memApply(X, 2, function(v, big) is_shared(big), VARS = list(big = big))
  expect_identical(unique(unlist(r)), TRUE)
  expect_error(memApply(X, 2, sum, VARS = list(1)), "`VARS` must be a named list")
  registerVariables("ps_test_ns", list(M = X, w = y))
  on.exit(releaseVariables("ps_test_ns", c("M", "w")))
  r <- memApply("M", 2, function(v, w) sum(v * w), NAMESPACE = "ps_test_ns", VARS = "w")
  expect_equal(unlist(r), as.vector(crossprod(X, y)))
  expect_identical(viewList(), list())   # views retrieved for the call are released
  expect_error(memApply("M", 2, sum), "`X` names a registered variable, so `NAMESPACE` must be given")
  expect_error(memApply("nope", 2, sum, NAMESPACE = "ps_test_ns"), "not registered")
})

test_that("a large X is shared once and reaches the workers as a view", {
  X <- matrix(rnorm(600 * 500), 600)
  before <- shared_segments()$name
  r1 <- memApply(X, 2, function(v) sum(v))
  r2 <- memApply(X, 1, function(v) sum(v))
  new <- setdiff(shared_segments()$name, before)
  expect_length(new, 1L)
  expect_identical(new, shared_info(share(X))$name)
  expect_equal(unlist(r1), colSums(X))
  expect_equal(unlist(r2), rowSums(X))
  L <- list(a = X, b = X[1:10, 1:2])
  r <- memLapply(L, function(el) c(is_shared(el), nrow(el)))
  expect_equal(r, list(a = c(1, 600), b = c(0, 10)))  # a 160-byte leaf is not worth a segment
})

test_that("pool workers let go of a segment the caller unlinked at their next task", {
  X <- matrix(rnorm(600 * 500), 600)
  name <- shared_info(share(X))$name
  r <- memApply(X, 2, function(v) sum(v))
  mapped_on_workers <- function() {
    unlist(memLapply(list(1, 2), function(i, name) { Sys.sleep(0.2); name %in% pageshare::shared_segments()$name },
                     VARS = list(name = name)))
  }
  rm(X, r)
  forget_shared()
  for (i in 1:3) invisible(gc())
  expect_false(name %in% shared_segments(all = TRUE)$name)     # unlinked by the caller
  expect_identical(mapped_on_workers(), c(FALSE, FALSE))  # and no longer mapped there
})

test_that("workers are left clean and the pool is reused (no cluster per call)", {
  g0 <- worker_globals()
  X <- matrix(rnorm(100), 10)
  for (i in 1:3) memApply(X, 2, function(v, k) sum(v) * k, VARS = list(k = 2))
  try(memApply(X, 2, function(v) stop("x")), silent = TRUE)
  memLapply(list(1, 2, 3), function(x) x)
  expect_identical(worker_globals(), g0)
  expect_identical(pageshare:::pool_pids(), pool_pids_seen)
})

test_that("an explicit CLUSTER is used, not stopped, and left clean; MAX.CORES caps workers", {
  cl <- parallel::makePSOCKcluster(2)
  pids <- cluster_pids(cl)
  on.exit({
    parallel::stopCluster(cl)
    expect_true(pids_gone(pids))
  })
  g0 <- parallel::clusterEvalQ(cl, ls(globalenv(), all.names = TRUE))
  X <- matrix(as.double(1:40), 4)
  expect_equal(unlist(memApply(X, 2, sum, CLUSTER = cl)), colSums(X))
  r <- memApply(X, 2, function(v) Sys.getpid(), CLUSTER = cl, MAX.CORES = 1)
  expect_length(unique(unlist(r)), 1L)
  r <- memApply(X, 2, function(v) Sys.getpid(), CLUSTER = cl)
  expect_setequal(unique(unlist(r)), pids)
  expect_identical(parallel::clusterEvalQ(cl, ls(globalenv(), all.names = TRUE)), g0)
  expect_error(memApply(X, 2, sum, MAX.CORES = 0), "`MAX.CORES`")
  expect_error(memApply(X, 2, sum, CLUSTER = "x"), "`CLUSTER` must be a cluster", class = "pageshare_bad_argument")
})

test_that("a call on warm workers starts no process and counts no cores", {
  # (the per-call time: inst/benchmarks/bench-share.R; parallelly's
  # availableCores() runs `nproc` and cost 5-9 ms per call)
  X <- matrix(rnorm(100), 10)
  for (i in 1:3) memApply(X, 2, sum)
  expect_identical(count_calls("parallelly", "availableCores", parallelly::availableCores()), 1L)
  processes <- NA
  cores <- count_calls("parallelly", "availableCores",
    processes <- count_calls("base", c("system", "system2"),
      for (i in 1:5) memApply(X, 2, sum)))
  expect_identical(c(cores = cores, processes = processes), c(cores = 0L, processes = 0L))
})

test_that("memLapply: lists, vectors, VARS, names", {
  L <- list(a = matrix(1:4, 2), b = matrix(5:8, 2))
  w <- c(1, 2)
  expect_equal(memLapply(L, function(el, w) el %*% w, VARS = list(w = w)), lapply(L, function(el) el %*% w))
  expect_identical(memLapply(1:3, function(x) x * 2L), list(2L, 4L, 6L))
  expect_identical(memLapply(list(), sum), list())
  expect_error(memLapply(new.env(), sum), "`X` must be a list")
})

test_that("no worker, option or segment is left behind", {
  pids <- pageshare:::pool_pids()
  expect_true(stop_workers())
  expect_false(stop_workers())
  expect_true(pids_gone(c(pids, pool_pids_seen)))
  options(old_opts)
  expect_identical(pageshare_options(), opts_before)
  clear_cache_and_gc()
  expect_identical(setdiff(segments_now(), seg_before), character())
})
