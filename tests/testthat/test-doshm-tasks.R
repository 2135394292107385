# How a loop's iterations travel and run (R/doshm-tasks.R): columns sliced into
# tasks, the setup sent with a worker's first task and kept for the loop, the
# body evaluated without eval()'s context when it does not look at it.

skip_if_not_installed("foreach")
library(foreach)

test_that("tasks are split as parallel::splitIndices() splits", {
  cases <- expand.grid(n = 1:150, k = 1:25)
  differ <- Filter(function(i) !identical(pageshare:::split_range(cases$n[i], cases$k[i]),
                                          parallel::splitIndices(cases$n[i], cases$k[i])), seq_len(nrow(cases)))
  expect_identical(cases[differ, ], cases[integer(), ])
  expect_identical(pageshare:::split_range(0, 3), list())
})

test_that("a body evaluated directly gives what eval() gives, errors included", {
  run <- function(expr, direct, columns = list(i = 1:4)) {
    env <- new.env(parent = globalenv())
    env$y <- 10
    res <- pageshare:::doshm_run_chunk(columns, expr, env, direct)
    list(res = res, env = mget(sort(ls(env)), envir = env))
  }
  bodies <- list(
    quote(sqrt(i)),
    quote({ x <- i * y; x }),                                  # assignments land in the loop's environment
    quote(if (i == 2) NULL else i),                            # NULL results
    quote(if (i %% 2 == 0) stop("even ", i) else i),           # errors at the body's top level
    quote((function(v) if (v == 3) stop("three") else v)(i)),  # and inside a function
    quote(if (i == 1) simpleError("returned") else i),         # an error object returned, not raised
    quote(list(i, NULL)),
    compiler::compile(quote({ s <- 0; for (k in seq_len(i)) s <- s + k; s }))
  )
  for (b in bodies) {
    expect_identical(run(b, TRUE), run(b, FALSE), info = paste(deparse(b), collapse = " "))
  }
  two <- list(a = 1:3, b = list("x", NULL, 3))
  expect_identical(run(quote(list(a, b)), TRUE, two), run(quote(list(a, b)), FALSE, two))
  # which results are errors (raised or returned) is reported with them
  res <- run(bodies[[4]], TRUE)$res
  expect_identical(attr(res, "errors"), c(2L, 4L))
  expect_identical(attr(run(bodies[[6]], TRUE)$res, "errors"), 1L)
  expect_identical(conditionCall(res[[2]]), quote(eval(expr, env)))
})

test_that("bodies that look at their context are evaluated by eval()", {
  expect_true(pageshare:::evaluates_directly(quote(sqrt(i) + f(x))))
  for (b in list(quote(return(i)), quote({ if (i > 1) return(0); i }), quote(sys.call()), quote(parent.frame()),
                 quote(on.exit(cat("x"))), quote(function(x) missing(x)))) {
    expect_false(pageshare:::evaluates_directly(b), info = deparse(b))
  }
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  same_as_do(function(`%op%`) foreach(i = 1:6) %op% { if (i %% 2 == 0) return(-i); i })
  same_as_do(function(`%op%`) foreach(i = 1:6, .combine = c) %op% { f <- function() sys.function(); is.function(f()) })
})

test_that("a returned error object is an error to .errorhandling, as in foreach", {
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  same_as_do(function(`%op%`) foreach(i = 1:6, .errorhandling = "remove") %op% (if (i == 4) simpleError("r") else i))
  msg <- function(op) tryCatch(op, error = conditionMessage)
  expect_identical(msg(foreach(i = 1:6) %dopar% (if (i == 4) simpleError("r") else i)),
                   msg(foreach(i = 1:6) %do% (if (i == 4) simpleError("r") else i)))
})

test_that("a worker without the loop's setup gets it sent again", {
  task <- list(loop = "not-this-one", setup = NULL, columns = list(i = 1:2))
  expect_s3_class(pageshare:::doshm_worker_task(task), "doshm_needs_setup")
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  # a worker that forgets the loop in its first task has its later ones refused
  # and sent again with the setup; every iteration runs once
  k <- 40
  got <- foreach(i = 1:k, .combine = c, .options.shm = list(chunk.size = 5)) %dopar% {
    if (i %% 5 == 1) pageshare:::doshm_forget()
    i
  }
  expect_identical(got, 1:k)
})

test_that("a worker forgets the loop at its next other task", {
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  r <- foreach(i = 1:4, .combine = c, .options.snow = list(attachExportEnv = TRUE)) %dopar% ("exportEnv" %in% search())
  expect_identical(r, rep(TRUE, 4))
  left <- memLapply(1:4, function(i) c("exportEnv" %in% search(), length(ls(pageshare:::doshm_state))))
  expect_identical(unique(unlist(left)), 0L)
})

test_that("iterations that bind no variable all run", {
  skip_if_not_installed("iterators")
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  same_as_do(function(`%op%`) foreach(iterators::icount(10), .combine = "c") %op% (3 + 8))
  same_as_do(function(`%op%`) foreach(iterators::icount(3), i = 1:3) %op% i)
})
