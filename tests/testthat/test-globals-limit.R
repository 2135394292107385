# future.globals.maxSize under plan(shm_multisession): shared globals count as
# their handles wherever future, future.apply and furrr check the limit; what
# is still serialized stays under it; the option comes back with the plan.

skip_if_not_installed("future")
skip_if_not_installed("future.apply")
skip_on_os(c("windows", "mac", "solaris"))

# future >= 1.40 gives a backend its own limit: pageshare never touches the option.
backend_api <- utils::packageVersion("future") >= "1.40.0"

limit_plan <- function(limit, env = parent.frame()) {
  old <- options(future.globals.maxSize = limit)     # the user's own value
  future::plan(pageshare::shm_multisession, workers = 2)
  withr_defer <- function() {
    future::plan(future::sequential)
    pageshare:::watch_globals_limit()   # what the end of the top-level call runs
    pageshare:::watch_future_pool()
    options(old)
  }
  do.call(base::on.exit, list(substitute(f(), list(f = withr_defer)), add = TRUE), envir = env)
}

test_that("with a lowered limit, shared globals pass every front door of the futureverse", {
  limit_plan(1e6)
  X <- matrix(as.double(seq_len(3e5)), ncol = 30)   # 2.4 MB > 1 MB: shared
  cs <- colSums(X)
  `%<-%` <- future::`%<-%`
  expect_equal(future::value(future::future(sum(X))), sum(X))
  s %<-% sum(X)
  expect_equal(s, sum(X))
  doors <- list(
    future_lapply = function() unlist(future.apply::future_lapply(seq_len(ncol(X)), function(j) sum(X[, j]))),
    future_sapply = function() future.apply::future_sapply(seq_len(ncol(X)), function(j) sum(X[, j])),
    future_apply = function() future.apply::future_apply(X, 2, sum),
    future_mapply = function() future.apply::future_mapply(function(j, k) sum(X[, j]) + k, seq_len(ncol(X)), 1) - 1,
    # code inside a function: X an argument, FUN a closure over it
    inside = function() (function(M) future.apply::future_sapply(seq_len(ncol(M)), function(j) sum(M[, j])))(X))
  if (requireNamespace("furrr", quietly = TRUE)) {
    doors$future_map_dbl <- function() furrr::future_map_dbl(seq_len(ncol(X)), function(j) sum(X[, j]))
  }
  for (door in names(doors)) {
    if (backend_api) {
      # future.apply and furrr check the globals of the function they apply
      # against the option itself, at full size, before any backend code runs;
      # from future 1.40 on pageshare leaves the option alone, so a limit the
      # user lowered stops them as under multisession (unset, they pass)
      expect_error(suppressWarnings(doors[[door]]()), "exceeds the maximum allowed size", info = door)
    } else {
      expect_equal(doors[[door]](), cs, info = door)
    }
  }
})

test_that("what is still serialized hits the user's limit as under multisession", {
  limit_plan(1e6)
  small <- lapply(1:4000, function(i) runif(50))     # 1.6 MB in pieces too small to pack
  e <- new.env()
  e$big <- runif(3e5)                                # 2.4 MB in an environment
  expect_error(future::value(future::future(length(small))), "exceeds the maximum allowed size")
  expect_error(future::value(future::future(length(e$big))), "exceeds the maximum allowed size")
  # (future.apply >= 1.20 also warns that it cancels the other futures)
  expect_error(suppressWarnings(future.apply::future_sapply(1:2, function(i) length(e$big))), "exceeds")
  # within the limit: fine
  part <- small[1:500]
  expect_identical(future::value(future::future(length(part))), 500L)
})

test_that("future >= 1.40: the option is never changed, through future, future.apply and furrr", {
  skip_if(!backend_api, "future < 1.40 has no backend limit: the option is lifted there")
  for (value in list(NULL, 123456789)) {
    old <- options(future.globals.maxSize = value)
    seen <- list()
    see <- function() seen[[length(seen) + 1L]] <<- getOption("future.globals.maxSize")
    future::plan(pageshare::shm_multisession, workers = 2)
    see()
    X <- matrix(as.double(seq_len(3e5)), ncol = 30)
    invisible(future::value(future::future(sum(X))))
    see()
    invisible(future.apply::future_sapply(seq_len(ncol(X)), function(j) sum(X[, j])))
    see()
    if (requireNamespace("furrr", quietly = TRUE)) {
      invisible(furrr::future_map_dbl(seq_len(ncol(X)), function(j) sum(X[, j])))
      see()
    }
    future::plan(future::sequential)
    see()
    options(old)
    for (v in seen) expect_identical(v, value)
  }
})

test_that("the user's value is back once the plan changes; a value set meanwhile is used as it is", {
  skip_if(backend_api, "future >= 1.40: the option is never lifted (test above)")
  old <- options(future.globals.maxSize = 123456789)
  on.exit(options(old), add = TRUE)
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  lifted <- getOption("future.globals.maxSize")
  expect_gt(lifted, 1e299)
  expect_identical(pageshare:::serialized_limit(), 123456789)
  # chunk scaling as future.apply does it: 5 elements, 5 times the limit
  withr_options(list(future.globals.maxSize = 5 * lifted),
                expect_identical(pageshare:::serialized_limit(), 5 * 123456789))
  options(future.globals.maxSize = 2e6)     # set while the plan is active: as is
  pageshare:::watch_globals_limit()
  expect_identical(getOption("future.globals.maxSize"), 2e6)
  expect_identical(pageshare:::serialized_limit(), 2e6)
  options(future.globals.maxSize = lifted)  # a value read earlier, set back
  expect_identical(pageshare:::serialized_limit(), 123456789)
  future::plan(future::sequential)
  pageshare:::watch_globals_limit()
  expect_identical(getOption("future.globals.maxSize"), 123456789)
})

test_that("in a real session the option comes back after the top-level call that changes the plan", {
  skip_if_not_installed("callr")
  out <- callr::r(function() {
    library(future)
    res <- list(before = getOption("future.globals.maxSize"))
    plan(pageshare::shm_multisession, workers = 2)
    res$during <- getOption("future.globals.maxSize")
    plan(sequential)
    res$same_call <- getOption("future.globals.maxSize")
    res
  })
  expect_null(out$before)
  if (backend_api) {
    expect_null(out$during)                           # never changed
    return(invisible())
  }
  expect_gt(out$during, 1e299)
  # future >= 1.32 call the plan's cleanup when it changes: back at once
  if (utils::packageVersion("future") >= "1.32.0") expect_null(out$same_call)
  # Rscript: each top-level expression is a task; the callback runs after it.
  script <- tempfile(fileext = ".R")
  writeLines(c(
    "library(future)",
    "options(future.globals.maxSize = 7e6)",
    "plan(pageshare::shm_multisession, workers = 2)",
    "during <- getOption('future.globals.maxSize')",
    "plan(multisession, workers = 2)",
    "after <- getOption('future.globals.maxSize')",
    "plan(sequential)",
    "cat(during > 1e299, after, '\\n')"), script)
  res <- system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE)
  expect_identical(trimws(tail(res, 1)), "TRUE 7e+06")
})
