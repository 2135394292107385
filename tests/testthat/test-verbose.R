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
  # (names what it shares, and what is not copied)
  expect_true(any(grepl(paste0("^pageshare: a future shares 1 segment as handles, [0-9.]+ ms: X \\(2\\.3 MiB\\); ",
                               "2\\.3 MiB that each worker reads in place instead of receiving a copy"), msgs)),
              info = paste(msgs, collapse = " | "))
  cfg <- list(weights = runif(2e5), label = "w")
  f <- local({ inside <- runif(2e5); function() sum(inside) })
  msgs <- verbose_messages(future::value(future::future(sum(cfg$weights) + f() + X[1])))
  expect_true(any(grepl("shares 3 segments as handles.*cfg\\$weights \\(1\\.[0-9] MiB\\)", msgs)), info = paste(msgs, collapse = " | "))
  expect_true(any(grepl("f's inside \\(1\\.[0-9] MiB\\)", msgs)), info = paste(msgs, collapse = " | "))
  expect_true(any(grepl("; 5\\.[0-9] MiB that each worker reads in place", msgs)), info = paste(msgs, collapse = " | "))
  msgs <- verbose_messages(future::value(future::future(sum(small))))
  expect_true(any(grepl("^pageshare: a future has nothing that reaches the threshold \\(1\\.0 MiB\\)", msgs)),
              info = paste(msgs, collapse = " | "))
  `%dopar%` <- foreach::`%dopar%`
  registerDoShm(cores = 2)
  msgs <- verbose_messages(r <- foreach::foreach(i = 1:2, .combine = c) %dopar% X[i])
  expect_identical(r, X[1:2])
  expect_true(any(grepl("^pageshare: a foreach loop shares 1 segment as handles, [0-9.]+ ms: X \\(2\\.3 MiB\\)", msgs)), info = paste(msgs, collapse = " | "))
  msgs <- verbose_messages(memLapply(list(X), sum))
  expect_true(any(grepl("^pageshare: memLapply\\(\\) shares 1 segment as handles, [0-9.]+ ms: \\.X\\[\\[1\\]\\] \\(2\\.3 MiB\\)", msgs)), info = paste(msgs, collapse = " | "))
  msgs <- verbose_messages(shm_map(1:2, function(i, v) v[i], v = X))   # (FUN's frame is walked too)
  expect_true(any(grepl("^pageshare: shm_map\\(\\) shares [0-9] segments as handles, [0-9.]+ ms: v \\(2\\.3 MiB\\); .*FUN's cfg\\$weights", msgs)), info = paste(msgs, collapse = " | "))
  options(pageshare.verbose = FALSE)
  expect_length(verbose_messages(future::value(future::future(sum(X)))), 0L)
  expect_length(verbose_messages(foreach::foreach(i = 1:2) %dopar% X[i]), 0L)
})
