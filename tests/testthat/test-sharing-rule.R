# One sharing rule for every front door (R/sharing-rule.R), and closures in
# function frames shared like top-level code.

skip_if_not_installed("future")
skip_if_not_installed("foreach")
skip_on_os(c("windows", "mac", "solaris"))

big <- function(n = 2e5) as.double(seq_len(n)) + 0.5   # 1.6 MB > the 1 MiB threshold

# What a worker sees of the objects: which are views.
report <- function(objs) {
  c(vec = pageshare::is_shared(objs$vec),
    chr = pageshare::is_shared(objs$chr),
    small_leaves = any(vapply(objs$lst, pageshare::is_shared, NA)),
    df_column = pageshare::is_shared(objs$df$a),
    df_small = pageshare::is_shared(objs$df$b),
    closure_frame = pageshare::is_shared(environment(objs$clo)$data),
    closure_value = objs$clo() == sum(big()))
}

make_objects <- function() {
  make_closure <- function(data) { force(data); function() sum(data) }
  list(vec = big(),
       chr = sprintf("s%07d", seq_len(150000)),             # 1.2 MB of entries
       lst = lapply(1:300, function(i) runif(1000)),         # 2.4 MB of 8 KB leaves
       df = data.frame(a = big(), b = rep(1L, 2e5)),
       clo = make_closure(data_value))
}
data_value <- big()

# (df$b is below the threshold, but the small vectors of `objs`, one chunk,
# reach it together: packed with them)
expected <- c(vec = TRUE, chr = TRUE, small_leaves = TRUE, df_column = TRUE, df_small = TRUE,
              closure_frame = TRUE, closure_value = TRUE)

test_that("future, foreach and memLapply share the same objects", {
  objs <- make_objects()
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  via_future <- future::value(future::future(report(objs)))
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  via_foreach <- foreach::foreach(i = 1, .export = "report") %dopar% report(objs)
  via_memlapply <- memLapply(list(1), function(i, objs) report(objs), VARS = list(objs = objs),
                             MAX.CORES = 2)
  expect_identical(via_future, expected)
  expect_identical(via_foreach[[1]], expected)
  expect_identical(via_memlapply[[1]], expected)
  # every door put the closure's frame back as it was
  expect_false(is_shared(environment(objs$clo)$data))
  stop_workers()
})

test_that("closures in function frames: arguments, promises, missing arguments, locked and active bindings", {
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  M <- matrix(big(), ncol = 10)
  # X a forced argument, `abc` missing, FUN nested two closures deep
  outer <- function(X, abc) {
    ncol(X)
    make <- function() function(j) c(pageshare::is_shared(X), sum(X[, j]))
    f <- make()
    r <- future::value(future::future(f(2)))
    list(r = r, label = deparse(substitute(X)), shared_after = is_shared(X))
  }
  out <- outer(M)
  expect_identical(out$r, c(1, sum(M[, 2])))
  expect_identical(out$label, "M")               # still the promise of `M`
  expect_false(out$shared_after)

  # future.apply's suite: a missing argument in the caller's frame
  g <- function(x, abc) { h <- function(y) y; future::value(future::future(h(x))) }
  expect_identical(g(1:2), 1:2)

  # an unforced promise is never forced
  lazy <- function(X) { h <- function() 42; future::value(future::future(h())) }
  expect_identical(lazy(stop("this promise must not be forced")), 42)

  # a locked environment with locked bindings (R6-like objects)
  e <- new.env()
  e$X <- big()
  lockEnvironment(e, bindings = TRUE)
  f <- eval(quote(function() c(pageshare::is_shared(X), sum(X))), e)
  expect_identical(future::value(future::future(f())), c(1, sum(big())))
  expect_true(bindingIsLocked("X", e))
  expect_false(is_shared(e$X))

  # an active binding is left alone and still works
  a <- new.env()
  makeActiveBinding("A", function() sum(big()), a)
  fa <- eval(quote(function() A), a)
  expect_identical(future::value(future::future(fa())), sum(big()))
  expect_true(bindingIsActive("A", a))
})

test_that("code inside a function shares X like top-level code with future_sapply()", {
  skip_if_not_installed("future.apply")
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  M <- matrix(big(), ncol = 10)
  colstat <- function(X) future.apply::future_sapply(seq_len(ncol(X)), function(j) {
    c(pageshare::is_shared(X), sum(X[, j]))
  })
  r <- colstat(M)
  expect_identical(r[1, ], rep(1, 10))
  expect_equal(r[2, ], colSums(M))
})

test_that("small vectors that reach the threshold together are packed into one segment", {
  skip_if_not_installed("future.apply")
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  L <- lapply(1:300, function(i) runif(1000))             # 300 x 8 KB
  seg_of <- function(L) vapply(L[c(1, 150, 300)], function(v) pageshare::shared_info(v)$name, "")
  a <- future::value(future::future(seg_of(L)))
  b <- future::value(future::future(seg_of(L)))
  expect_length(unique(a), 1L)                             # one segment for all
  expect_identical(a, b)                                    # and the same one next time
  # future_apply()'s chunks are lists of columns: they travel as views
  X <- matrix(runif(3e5), nrow = 1000)                      # 300 columns of 8 KB
  r <- future.apply::future_apply(X, 2, function(v) c(pageshare::is_shared(v), sum(v)))
  expect_identical(r[1, ], rep(1, 300))
  expect_equal(r[2, ], colSums(X))
  # a data frame of many narrow columns keeps names, classes and values
  df <- data.frame(matrix(runif(2e5), ncol = 200), f = factor(rep(c("a", "b"), 500)))
  got <- future::value(future::future(list(n = sum(vapply(df, pageshare::is_shared, NA)), df = df)))
  expect_identical(got$n, 200L)
  expect_identical(got$df, df)
  # a small list stays plain
  small <- lapply(1:10, function(i) runif(1000))
  expect_false(future::value(future::future(any(vapply(small, pageshare::is_shared, NA)))))
})

# split() of a data frame into pieces none of which reaches the threshold,
# nor any of their columns: a chunk of pieces does, together.
split_pieces <- function() {
  set.seed(42)
  n <- 2e5
  df <- data.frame(g = sample(20L, n, TRUE), x = rnorm(n), y = runif(n))
  split(df, df$g)          # 20 pieces of ~200 KB: 2 double columns and 1 integer column each
}

# What a worker sees of a piece: whether each column is a view, the segment
# of each column, and the piece's values.
piece_report <- function(p) {
  list(shared = c(vapply(p, pageshare::is_shared, NA), row.names = pageshare::is_shared(.row_names_info(p, 0L))),
       segments = vapply(p, function(v) if (pageshare::is_shared(v)) pageshare::shared_info(v)$name else "", ""),
       value = list(sums = vapply(p, sum, 0), rows = rownames(p)[c(1, nrow(p))], piece = p))
}

test_that("the pieces of split() in one chunk are packed together, through every door", {
  skip_if_not_installed("future.apply")
  skip_if_not_installed("furrr")
  pieces <- split_pieces()
  expect_true(all(vapply(pieces, function(p) sum(vapply(p, function(v) length(v) * 8, 0)), 0) < 2^20))
  future::plan(future::sequential)
  expected <- lapply(future.apply::future_lapply(pieces, piece_report), `[[`, "value")
  before <- segments_now()
  `%dopar%` <- foreach::`%dopar%`
  local_shm_plan()
  got <- list(
    future_lapply = future.apply::future_lapply(pieces, piece_report),
    future_map = furrr::future_map(pieces, piece_report))
  future::plan(future::sequential)
  start_workers(2)
  on.exit(stop_workers(), add = TRUE)
  got$shm_map <- shm_map(pieces, piece_report)
  got$memLapply <- memLapply(pieces, piece_report)
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  got$foreach <- foreach::foreach(p = pieces, .export = "piece_report") %dopar% piece_report(p)
  for (door in names(got)) {
    r <- got[[door]]
    # every column of every piece, and its row names, is a view in the worker
    expect_true(all(vapply(r, function(x) all(x$shared), NA)), info = door)
    # (foreach's list has no names)
    expect_identical(lapply(r, `[[`, "value"), if (door == "foreach") unname(expected) else expected,
                     info = door)
    # one segment per type and chunk (each door cuts the 20 pieces into at
    # most 2 chunks here, or sends X whole), not one per piece or per column
    segments <- unique(unlist(lapply(r, `[[`, "segments")))
    expect_lte(length(segments), 4L, label = door)
  }
  rm(got, r)
  stop_workers()
  clear_cache_and_gc()
  expect_length(setdiff(segments_now(), before), 0L)   # (no segment of the chunks left)
})

test_that("a data frame's stored row names are shared with it, once, and automatic ones stay compact", {
  local_shm_plan()
  before <- segments_now()
  df <- data.frame(x = runif(4e5))[-1, , drop = FALSE]     # row names 2..4e5 stored: 1.6 MB
  seen <- function(d) {
    rows <- .row_names_info(d, 0L)
    list(shared = pageshare::is_shared(rows),
         segment = if (pageshare::is_shared(rows)) pageshare::shared_info(rows)$name else "",
         d = d)
  }
  a <- future::value(future::future(seen(df)))
  after_first <- segments_now()
  b <- future::value(future::future(seen(df)))
  expect_true(a$shared)
  expect_identical(a$segment, b$segment)                     # shared once: the same segment
  expect_length(setdiff(segments_now(), after_first), 0L)   # and no new one
  expect_identical(a$d, df)
  expect_identical(b$d, df)
  # names as text
  named <- df
  rownames(named) <- sprintf("r%07d", seq_len(nrow(named)))
  got <- future::value(future::future(seen(named)))
  expect_true(got$shared)
  expect_identical(got$d, named)
  # automatic row names stay R's compact c(NA, -n) on the worker
  auto <- data.frame(x = runif(4e5))
  got <- future::value(future::future(list(info = .row_names_info(auto, 1L), d = auto,
                                           matrix_rows = rownames(as.matrix(auto)))))
  expect_identical(got$info, -400000L)
  expect_null(got$matrix_rows)                               # (as under multisession)
  expect_identical(got$d, auto)
  rm(a, b, got)
  clear_cache_and_gc()
  expect_length(setdiff(segments_now(), before), 0L)
})

test_that("a chunk packs what is below the threshold alone, and leaves small types and other chunks alone", {
  local_shm_plan()
  seen <- function(x) vapply(x, pageshare::is_shared, NA)
  # 200 KB pieces of a list inside a list: together 2 MB
  nested <- list(a = lapply(1:5, function(i) runif(25000)), b = list(list(runif(25000)), 1:10))
  got <- future::value(future::future(list(seen(nested$a), seen(nested$b[[1]]), seen(nested$b[2]))))
  expect_identical(got, list(rep(TRUE, 5), TRUE, FALSE))      # (1:10 is below 512 bytes)
  # a type whose small vectors take less than 64 KiB together stays plain
  mixed <- list(lapply(1:6, function(i) runif(25000)), lapply(1:3, function(i) rep(TRUE, 1000)))
  got <- future::value(future::future(list(seen(mixed[[1]]), seen(mixed[[2]]))))
  expect_identical(got, list(rep(TRUE, 6), rep(FALSE, 3)))
  # two chunks below the threshold each are not packed together
  half <- lapply(1:2, function(i) runif(50000))               # 800 KB
  other <- lapply(1:2, function(i) runif(50000))
  got <- future::value(future::future(c(seen(half), seen(other))))
  expect_identical(got, rep(FALSE, 4))
  # a closure's frame is a chunk of its own: its lists are packed, put back after
  make <- function() {
    parts <- lapply(1:6, function(i) runif(25000))
    function() c(all(vapply(parts, pageshare::is_shared, NA)), sum(vapply(parts, sum, 0)))
  }
  f <- make()
  expect_identical(future::value(future::future(list(f(), seen(nested$a)))),
                   list(c(1, sum(vapply(environment(f)$parts, sum, 0))), rep(TRUE, 5)))
  expect_false(any(vapply(environment(f)$parts, is_shared, NA)))
})

test_that("an argument given as an expression is shared once forced", {
  skip_if(getRversion() >= "4.5.0" && getRversion() < "4.6.0",
          "R 4.5 has no API to tell a forced promise from an unforced one")
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  f <- function(X) {
    force(X)
    g <- function() c(pageshare::is_shared(X), sum(X))
    future::value(future::future(g()))
  }
  expect_identical(f(big() + 1), c(1, sum(big() + 1)))
})

# `f(...)` called from the global environment, as a user's script calls it:
# its arguments are promises whose environment is the global environment.
# The arguments are bound there for the call and removed after.
call_from_top <- function(f, ...) {
  args <- list(...)
  names <- sprintf(".pageshare_test_arg%d", seq_along(args))
  for (i in seq_along(args)) assign(names[i], args[[i]], envir = globalenv())
  on.exit(rm(list = names, envir = globalenv()), add = TRUE)
  eval(as.call(c(list(f), lapply(names, as.name))), globalenv())
}

test_that("every door sends a closure's unforced arguments forced, as future does", {
  skip_if_not_installed("future.apply")
  old <- options(pageshare.workers = 2L)
  future::plan(pageshare::shm_multisession, workers = 2)
  registerDoShm(cores = 2)
  on.exit({ future::plan(future::sequential); foreach::registerDoSEQ(); stop_workers(); options(old) },
          add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  M <- matrix(c(1, 4, 2, 8, 5, 7, 3, 6, 9, 2, 4, 1, 7, 3, 5, 8, 6, 2, 9, 1), 4)
  v <- c(1, 3, 2, 5)
  want <- vapply(seq_len(ncol(M)), function(j) cor(M[, j], v), 0)
  # (the column function made by another function: its frame holds the promises)
  make <- function(X, y) function(j) cor(X[, j], y)
  doors <- list(
    shm_map = function(X, y) shm_map(seq_len(ncol(X)), function(j) cor(X[, j], y)),
    shm_call = function(X, y) lapply(seq_len(ncol(X)), function(j) shm_value(shm_call(function(j) cor(X[, j], y), j))),
    memLapply = function(X, y) memLapply(seq_len(ncol(X)), function(j) cor(X[, j], y)),
    memApply = function(X, y) memApply(X, 2, function(col, w) w * cor(col, y), VARS = list(w = 1)),
    foreach = function(X, y) foreach::foreach(j = seq_len(ncol(X))) %dopar% cor(X[, j], y),
    foreach_made = function(X, y) {
      g <- make(X, y)
      foreach::foreach(j = seq_len(ncol(X))) %dopar% g(j)
    },
    future_sapply = function(X, y) future.apply::future_sapply(seq_len(ncol(X)), function(j) cor(X[, j], y)),
    future_sapply_made = function(X, y) {
      g <- make(X, y)
      future.apply::future_sapply(seq_len(ncol(X)), function(j) g(j))
    })
  for (door in names(doors)) {
    got <- tryCatch(call_from_top(doors[[door]], M, v), error = conditionMessage)
    expect_equal(unlist(got), want, info = door)
  }
})

test_that("forcing the promises a closure sends spares missing arguments and promises it does not read", {
  old <- options(pageshare.workers = 2L)
  on.exit({ stop_workers(); options(old) }, add = TRUE)
  M <- matrix(as.double(1:20), 4)
  # `v` is read only for j > 10: passed on missing, it is not forced (the
  # launch does not fail, nor does R warn of an interrupted promise later)
  inner <- function(X, v) shm_map(seq_len(ncol(X)), function(j) if (j > 10) v else sum(X[, j]))
  outer <- function(X, val) inner(X, val)
  expect_silent(got <- outer(M))
  expect_equal(unlist(got), colSums(M))
  # a promise the closure does not read is never forced
  touched <- FALSE
  lazy <- function(X, y, other) shm_map(seq_len(ncol(X)), function(j) sum(X[, j]) + y)
  got <- lazy(M, 1, { touched <- TRUE; stop("this promise must not be forced") })
  expect_equal(unlist(got), colSums(M) + 1)
  expect_false(touched)
  # one whose forcing fails is left as it was: the element that reads it fails
  failing <- function(X, y) shm_map(1:2, function(j) if (j == 2) y else j)
  # (the worker forcing that promise again gets R's warning "restarting
  # interrupted promise evaluation", which the task's warnings reach the caller
  # with, as future relays them)
  err <- suppressWarnings(tryCatch(failing(M, stop("boom")), error = function(e) e))
  expect_s3_class(err, "pageshare_task_failed")
})

test_that("an argument given as an expression is forced before it leaves, and shared", {
  skip_if(getRversion() >= "4.5.0" && getRversion() < "4.6.0",
          "R 4.5 has no API to tell a forced promise from an unforced one")
  old <- options(pageshare.workers = 2L)
  on.exit({ stop_workers(); options(old) }, add = TRUE)
  f <- function(X) shm_map(1:2, function(j) c(pageshare::is_shared(X), sum(X)))
  assign(".pageshare_test_big", big(), envir = globalenv())
  on.exit(rm(".pageshare_test_big", envir = globalenv()), add = TRUE)
  got <- eval(as.call(list(f, quote(.pageshare_test_big + 1))), globalenv())
  expect_identical(got[[1]], c(1, sum(big() + 1)))
})
