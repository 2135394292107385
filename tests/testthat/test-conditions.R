test_that("errors raised in Rust are classed conditions of their kind", {
  # They used to reach R as simpleError, so no fallback caught them by class.
  x <- rnorm(1e4)
  v <- share(x)
  h <- with_handles(serialize(v, NULL))
  rm(v); forget_shared(); invisible(gc()); invisible(gc())
  gone <- tryCatch(unserialize(h), error = function(e) e)
  expect_s3_class(gone, "pageshare_segment_gone")
  expect_s3_class(gone, "pageshare_error")
  expect_match(conditionMessage(gone), "could not be mapped in process")

  bad_dir <- tryCatch(withr_options(list(pageshare.dir = "relative/dir"),
                                    registerVariables("cond_ns", list(x = x))), error = function(e) e)
  expect_s3_class(bad_dir, "pageshare_bad_argument")

  not_view <- tryCatch(.Call(pageshare:::ps_adopt, x), error = function(e) e)
  expect_s3_class(not_view, "pageshare_bad_argument")
  expect_match(conditionMessage(not_view), "`x` is not a pageshare view")
})

test_that("a message with % in it reaches R unchanged", {
  e <- tryCatch(withr_options(list(pageshare.dir = "/no/such/%s%n%d"), registerVariables("cond_ns", list(y = 1:3 + 0))),
                error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), "/no/such/%s%n%d", fixed = TRUE)
})

test_that("every message R raises carries the class of its kind", {
  keys <- names(pageshare:::pageshare_messages)
  for (k in keys) {
    conv <- regmatches(pageshare:::pageshare_messages[[k]], gregexpr("%[sd]", pageshare:::pageshare_messages[[k]]))[[1]]
    args <- lapply(conv, function(cv) if (cv == "%d") 1L else "x")
    e <- tryCatch(do.call(pageshare:::pageshare_stop, c(list(k), args)), error = function(e) e)
    cls <- class(e)
    expect_identical(cls[2:4], c("pageshare_error", "error", "condition"), info = k)
    expect_match(cls[1], "^pageshare_[a-z_]+$", info = k)
  }
  e <- tryCatch(share(new.env()), error = function(e) e)
  expect_s3_class(e, "pageshare_unsupported_type")
})
