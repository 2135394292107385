# Option pageshare.verbose: each front door says what it shared, or why it
# sent its data plainly.

verbose_messages <- function(expr) {
  got <- character()
  withCallingHandlers(force(expr), pageshare_verbose = function(m) {
    got <<- c(got, conditionMessage(m))
    invokeRestart("muffleMessage")
  })
  got
}

test_that("verbose mode says what a future and a foreach loop shared, and nothing without it", {
  skip_if_not_installed("future")
  skip_if_not_installed("foreach")
  old <- options(pageshare.verbose = TRUE, pageshare.workers = 2L)
  on.exit({ options(old); foreach::registerDoSEQ(); stop_workers() }, add = TRUE)
  old_plan <- future::plan(shm_multisession, workers = 2)
  on.exit(future::plan(old_plan), add = TRUE)
  X <- runif(3e5)   # 2.3 MiB
  small <- 1:10
  msgs <- verbose_messages(v <- future::value(future::future(sum(X))))
  expect_equal(v, sum(X))
  expect_true(any(grepl("^pageshare: a future shares 1 segment \\(2\\.3 MiB, [0-9.]+ ms\\) as handles", msgs)),
              info = paste(msgs, collapse = " | "))
  msgs <- verbose_messages(future::value(future::future(sum(small))))
  expect_true(any(grepl("^pageshare: a future has nothing that reaches the threshold \\(1\\.0 MiB\\)", msgs)),
              info = paste(msgs, collapse = " | "))
  `%dopar%` <- foreach::`%dopar%`
  registerDoShm(cores = 2)
  msgs <- verbose_messages(r <- foreach::foreach(i = 1:2, .combine = c) %dopar% X[i])
  expect_identical(r, X[1:2])
  expect_true(any(grepl("^pageshare: a foreach loop shares 1 segment \\(2\\.3 MiB", msgs)), info = paste(msgs, collapse = " | "))
  msgs <- verbose_messages(memLapply(list(X), sum))
  expect_true(any(grepl("^pageshare: memLapply\\(\\) shares 1 segment", msgs)), info = paste(msgs, collapse = " | "))
  options(pageshare.verbose = FALSE)
  expect_length(verbose_messages(future::value(future::future(sum(X)))), 0L)
  expect_length(verbose_messages(foreach::foreach(i = 1:2) %dopar% X[i]), 0L)
})
