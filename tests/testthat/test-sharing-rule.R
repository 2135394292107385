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

expected <- c(vec = TRUE, chr = TRUE, small_leaves = TRUE, df_column = TRUE, df_small = FALSE,
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
