# Every option of pageshare's (and the environment variable that sets it at
# load) is checked where it is used: a value that breaks its rule is a
# pageshare_bad_argument error naming the option, where the value came from,
# and the value; never silence, never a warning at load.

expect_option_error <- function(expr, option, shown) {
  e <- tryCatch({ force(expr); NULL }, error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), sprintf("option `%s`", option), fixed = TRUE)
  expect_match(conditionMessage(e), shown, fixed = TRUE)
}

with_option <- function(name, value, expr) {
  old <- options(stats::setNames(list(value), name))
  on.exit(options(old))
  force(expr)
}

test_that("a bad value of each option is an error naming it where the option is used", {
  big <- runif(2e5)   # (1.6 MB: above the default threshold)
  with_option("pageshare.cache_limit", "x", expect_option_error(share(big), "pageshare.cache_limit", '"x"'))
  with_option("pageshare.cache_limit", -1, expect_option_error(share(big), "pageshare.cache_limit", "-1"))
  with_option("pageshare.max_shared_bytes", "lots",
              expect_option_error(share(big), "pageshare.max_shared_bytes", '"lots"'))
  with_option("pageshare.release_source", "maybe",
              expect_option_error(share(big), "pageshare.release_source", '"maybe"'))
  with_option("pageshare.release_source", NA, expect_option_error(share(big), "pageshare.release_source", "NA"))
  with_option("pageshare.dir", "/no/such/dir", expect_option_error(sweep_shared(), "pageshare.dir", '"/no/such/dir"'))
  with_option("pageshare.threshold", "1MB",
              expect_option_error(memLapply(1:2, identity), "pageshare.threshold", '"1MB"'))
  with_option("pageshare.workers", 0, expect_option_error(start_workers(), "pageshare.workers", "0"))
  # good values pass
  with_option("pageshare.cache_limit", Inf, expect_true(is_shared(share(big))))
  with_option("pageshare.release_source", FALSE, expect_true(is_shared(share(runif(2e5)))))
})

test_that("a bad pageshare.share_results is an error when a future is launched", {
  skip_on_cran()
  skip_if_not_installed("future")
  old_plan <- future::plan(shm_multisession, workers = 2)   # (one worker would run sequentially)
  on.exit(future::plan(old_plan), add = TRUE)
  x <- runif(2e5)   # (a global above the threshold: the launch shares)
  e <- with_option("pageshare.share_results", "yes",
                   tryCatch({ future::value(future::future(sum(x))); NULL }, error = function(e) e))
  # (future >= 1.40 wraps an error of the launch in a FutureLaunchError that
  # names its class and keeps its message)
  if (inherits(e, "FutureLaunchError")) {
    expect_match(conditionMessage(e), "pageshare_bad_argument", fixed = TRUE)
  } else {
    expect_s3_class(e, "pageshare_bad_argument")
  }
  expect_match(conditionMessage(e), "option `pageshare.share_results`", fixed = TRUE)
  expect_match(conditionMessage(e), '"yes"', fixed = TRUE)
  expect_equal(future::value(future::future(sum(x))), sum(x))
})

test_that("an environment variable that does not parse is named at use, with no warning at load", {
  skip_on_cran()
  skip_if_not_installed("callr")
  got <- callr::r(function() {
    warned <- NULL
    withCallingHandlers(library(pageshare), warning = function(w) warned <<- conditionMessage(w))
    e <- tryCatch(share(runif(2e5)), error = function(e) e)
    list(warned = warned, class = class(e), message = conditionMessage(e), option = getOption("pageshare.threshold"))
  }, env = c(callr::rcmd_safe_env(), PAGESHARE_THRESHOLD = "1048576", PAGESHARE_CACHE_LIMIT = "abc",
             R_LIBS = paste(.libPaths(), collapse = ":")))
  expect_null(got$warned)
  expect_identical(got$option, 1048576)   # (a variable that parses sets the option as a number)
  expect_true("pageshare_bad_argument" %in% got$class)
  expect_match(got$message, "option `pageshare.cache_limit` (set by the environment variable PAGESHARE_CACHE_LIMIT)",
               fixed = TRUE)
  expect_match(got$message, '"abc"', fixed = TRUE)
})
