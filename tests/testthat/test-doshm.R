skip_if_not_installed("foreach")
skip_if_not_installed("iterators")
library(foreach)

seg_before <- segments_now()
opts_before <- pageshare_options()
old_opts <- options(pageshare.workers = 2L)
pool_pids_seen <- integer()

# Every test runs on pageshare's pool of 2 workers unless it says otherwise.
use_pool <- function() {
  registerDoShm(cores = 2)
}

test_that("registerDoShm registers a backend named doShm, sized by cores", {
  use_pool()
  expect_identical(getDoParName(), "doShm")
  expect_identical(getDoParWorkers(), 2L)
  expect_identical(getDoParVersion(), as.character(utils::packageVersion("pageshare")))
  expect_true(getDoParRegistered())
  registerDoShm(cores = 1)
  expect_identical(getDoParWorkers(), 1L)
  expect_error(registerDoShm(cores = 0), "`cores` must be a whole number of worker processes", class = "pageshare_bad_argument")
  expect_error(registerDoShm("a"), "`cl` must be a cluster")
  expect_warning(registerDoShm(cores = 2, bogus = TRUE), "bogus")
  use_pool()
  expect_identical(foreach(i = 1:4, .combine = c) %dopar% (i * 2), c(2, 4, 6, 8))
  pool_pids_seen <<- pageshare:::pool_pids()
  expect_length(pool_pids_seen, 2L)
})

test_that("large exports cross as views, shared once across iterations and loops", {
  use_pool()
  X <- matrix(as.double(1:(600 * 500)), 600)   # 2.4 MB > threshold
  small <- 1:10
  r1 <- foreach(j = 1:6) %dopar% list(shared = is_shared(X), name = shared_info(X)$name,
                                      s = sum(X[, j]), small = is_shared(small))
  expect_true(all(vapply(r1, `[[`, TRUE, "shared")))
  expect_false(any(vapply(r1, `[[`, TRUE, "small")))
  names1 <- unique(vapply(r1, `[[`, "", "name"))
  expect_length(names1, 1L)
  expect_equal(vapply(r1, `[[`, 0, "s"), colSums(X)[1:6])
  r2 <- foreach(j = 1:2, .combine = c) %dopar% shared_info(X)$name
  expect_identical(unique(r2), names1)
  # the master's identity cache holds the same segment
  expect_identical(shared_info(share(X))$name, names1)
  # the worker holds no view once the loop is over
  expect_identical(pageshare:::pool_pids(), pool_pids_seen)
})

test_that("large iteration values and list/data frame exports are shared", {
  use_pool()
  X <- rnorm(3e5)
  r <- foreach(m = list(X, X, X), .combine = c) %dopar% shared_info(m)$name
  expect_length(unique(r), 1L)
  df <- data.frame(a = rnorm(2e5), b = sample(letters, 2e5, TRUE))
  r <- foreach(i = 1:2) %dopar% c(is_shared(df$a), is_shared(df$b), nrow(df))
  expect_equal(r[[1]], c(1, 1, 2e5))   # character columns are shared too
  lst <- list(big = rnorm(2e5), f = function(x) x)
  r <- foreach(i = 1:2, .combine = c) %dopar% is_shared(lst$big)
  expect_identical(r, c(TRUE, TRUE))
  # the caller's ... travel too
  f <- function(...) foreach(i = 1:2, .combine = c) %dopar% sum(...)
  expect_identical(f(1, 2, 3), c(6, 6))
})

test_that("with a small threshold everything goes through shared memory", {
  use_pool()
  old <- options(pageshare.threshold = 0)
  on.exit(options(old))
  y <- c(1.5, 2.5)
  expect_identical(foreach(i = 1:2, .combine = c) %dopar% is_shared(y), c(TRUE, TRUE))
  expect_identical(foreach(v = list(1:3, 4:6), .combine = c) %dopar% is_shared(v), c(TRUE, TRUE))
})

test_that("a failure to share falls back to plain data with one warning", {
  use_pool()
  X <- rnorm(3e5)
  old <- options(pageshare.max_shared_bytes = 0)   # as when memory runs out
  on.exit(options(old))
  expect_warning(r <- foreach(i = 1:3, .combine = c) %dopar% is_shared(X),
                 "plain serialization", fixed = TRUE)
  expect_identical(r, c(FALSE, FALSE, FALSE))
  w <- 0
  withCallingHandlers(foreach(i = 1:3, x = list(X, X + 1, X + 2)) %dopar% sum(x),
                      warning = function(cnd) { w <<- w + 1; invokeRestart("muffleWarning") })
  expect_identical(w, 1)
})

test_that(".export, .noexport and .packages", {
  use_pool()
  helper <- function(i) i + offset
  offset <- 100
  big <- rnorm(3e5)
  g <- function() get("big")   # big is not a symbol of the body
  expect_identical(foreach(i = 1:2, .combine = c) %dopar% helper(i), c(101, 102))
  expect_error(foreach(i = 1:2) %dopar% length(get("big")), "task 1 failed")
  r <- foreach(i = 1:2, .export = "big", .combine = c) %dopar% c(is_shared(get("big")))
  expect_identical(r, c(TRUE, TRUE))
  expect_warning(foreach(i = 1:2, .export = "offset") %dopar% offset, "already exporting")
  expect_error(foreach(i = 1:2, .export = "no_such_variable_xyz") %dopar% i,
               "unable to find variable \"no_such_variable_xyz\"")
  z <- 5
  expect_error(foreach(i = 1:2, .noexport = "z") %dopar% (z + i), "object 'z' not found")
  expect_identical(foreach(i = 1:2, .combine = c) %dopar% (z + i), c(6, 7))
  r <- foreach(i = 1:2, .packages = "tools", .combine = c) %dopar% ("package:tools" %in% search())
  expect_identical(r, c(TRUE, TRUE))
  expect_error(foreach(i = 1:2, .packages = "noSuchPkgXyz") %dopar% i, "worker initialization failed")
})

test_that("exported functions with a loop arrive compiled, seeing the other exports", {
  use_pool()
  # foreach makes the export environment their environment, where R's JIT
  # would never compile them: each iteration would run them uncompiled.
  spin <- function(i) { x <- 0; for (k in 1:3) x <- x + k + offset; i + x }
  plain <- function(i) i + offset
  offset <- 1
  compiled <- function(f) !inherits(try(compiler::disassemble(f), silent = TRUE), "try-error")
  r <- foreach(i = 1:2) %dopar% list(spin(i), compiled(spin), compiled(plain))
  expect_identical(lapply(r, `[[`, 1L), list(10, 11))
  expect_identical(vapply(r, `[[`, NA, 2L), c(TRUE, TRUE))
  expect_identical(vapply(r, `[[`, NA, 3L), c(FALSE, FALSE))   # (no loop: left as it is)
  # `+` shadowed among the exports: the compiled function uses it.
  `+` <- function(e1, e2) base::`*`(e1, e2)
  expect_identical(foreach(i = 1, .combine = c) %dopar% spin(i), 0)
  rm("+")
  # The compiled function is kept for the next loop, but not the loop's
  # exports (views among them): once the loop is over, nothing kept leads to
  # its export environment.
  big <- rnorm(3e5)
  first_two <- function(i) { s <- 0; for (k in 1:2) s <- s + big[k]; s }
  for (round in 1:2) {
    r <- foreach(i = 1:2, .combine = c) %dopar% c(first_two(i), is_shared(big), compiled(first_two))
    expect_identical(r, rep(c(big[1] + big[2], 1, 1), 2))
  }
  kept <- pageshare:::compiled_exports$entries
  expect_true(length(kept) >= 2L)
  expect_true(all(vapply(kept, function(e) identical(parent.env(e$own), emptyenv()), NA)))
  registerDoShm(cores = 2, nocompile = TRUE)
  r <- foreach(i = 1:2) %dopar% compiled(spin)
  expect_identical(unlist(r), c(FALSE, FALSE))
})

test_that(".combine with .init, .final, .multicombine, .maxcombine and .inorder", {
  use_pool()
  expect_identical(foreach(i = 1:10, .combine = "+", .init = 100, .final = function(x) x * 2) %dopar% i,
                   310)
  calls <- integer()
  comb <- function(...) {
    calls <<- c(calls, ...length())
    sum(...)
  }
  r <- foreach(i = 1:10, .combine = comb, .multicombine = TRUE, .maxcombine = 4) %dopar% i
  expect_identical(r, 55L)
  expect_true(all(calls <= 4))
  expect_true(any(calls > 2))
  m <- foreach(i = 1:3, .combine = rbind) %dopar% c(i, i^2)
  expect_equal(unname(m), cbind(1:3, (1:3)^2))
  r <- foreach(i = 1:8, .combine = c, .inorder = FALSE) %dopar% { Sys.sleep((9 - i) / 200); i }
  expect_setequal(r, 1:8)
  expect_identical(foreach(i = 1:8, .combine = c, .inorder = TRUE) %dopar% i, 1:8)
})

test_that(".errorhandling stop, remove and pass", {
  use_pool()
  body_fails <- function(i) if (i == 3) stop("three is bad") else i
  expect_error(foreach(i = 1:5, .errorhandling = "stop") %dopar% body_fails(i),
               "task 3 failed - \"three is bad\"")
  expect_identical(foreach(i = 1:5, .errorhandling = "remove", .combine = c) %dopar% body_fails(i),
                   c(1L, 2L, 4L, 5L))
  r <- foreach(i = 1:5, .errorhandling = "pass") %dopar% body_fails(i)
  expect_s3_class(r[[3]], "error")
  expect_identical(conditionMessage(r[[3]]), "three is bad")
  expect_identical(r[[5]], 5L)
  # the next loop is not affected by the failure
  expect_identical(foreach(i = 1:3, .combine = c) %dopar% i, 1:3)
})

test_that("iterations are grouped into a few tasks per worker; .options.shm changes that", {
  use_pool()
  expect_equal(pageshare:::iteration_chunks(2000L, 2L, pageshare:::doshm_options(list())),
               parallel::splitIndices(2000L, 2L))
  expect_output(r <- foreach(i = 1:100, .combine = c, .verbose = TRUE) %dopar% sqrt(i),
                "100 iteration\\(s\\) in 2 task\\(s\\)")
  expect_output(foreach(i = 1:100, .verbose = TRUE, .options.shm = list(scheduling = 4)) %dopar% i,
                "100 iteration\\(s\\) in 8 task\\(s\\)")
  expect_identical(r, sqrt(1:100))
  expect_output(foreach(i = 1:10, .verbose = TRUE, .options.shm = list(chunk.size = 1)) %dopar% i,
                "10 iteration\\(s\\) in 10 task\\(s\\)")
  expect_output(foreach(i = 1:10, .verbose = TRUE, .options.shm = list(scheduling = Inf)) %dopar% i,
                "10 iteration\\(s\\) in 10 task\\(s\\)")
  expect_output(foreach(i = 1:10, .verbose = TRUE, .options.shm = list(chunk.size = 3)) %dopar% i,
                "10 iteration\\(s\\) in 4 task\\(s\\)")
  expect_warning(foreach(i = 1:2, .options.shm = list(chunk.size = 0)) %dopar% i, "chunk.size")
  # per-iteration semantics inside a task: errors, order, uneven work
  body_fails <- function(i) if (i %% 7 == 0) stop("seven") else i
  expect_identical(foreach(i = 1:30, .errorhandling = "remove", .combine = c) %dopar% body_fails(i),
                   setdiff(1:30, c(7L, 14L, 21L, 28L)))
  expect_error(foreach(i = 1:30) %dopar% body_fails(i), "task 7 failed - \"seven\"")
  r <- foreach(i = 1:12, .combine = c) %dopar% { Sys.sleep(if (i < 3) 0.05 else 0); i }
  expect_identical(r, 1:12)
})

test_that("doRNG gives the same numbers as with doParallel, chunked or not", {
  skip_if_not_installed("doRNG")
  skip_if_not_installed("doParallel")
  `%dorng%` <- doRNG::`%dorng%`
  cl <- parallel::makePSOCKcluster(2)
  on.exit(parallel::stopCluster(cl), add = TRUE)
  doParallel::registerDoParallel(cl)
  set.seed(42)
  ref <- foreach(i = 1:25, .combine = c) %dorng% runif(1)
  use_pool()
  set.seed(42)
  ours <- foreach(i = 1:25, .combine = c) %dorng% runif(1)
  set.seed(42)
  ours1 <- foreach(i = 1:25, .combine = c, .options.shm = list(chunk.size = 1)) %dorng% runif(1)
  expect_identical(unname(ours), unname(ref))
  expect_identical(unname(ours1), unname(ref))
})

test_that(".verbose prints what the backend does", {
  use_pool()
  aa <- 1
  expect_output(foreach(i = 1:2, .verbose = TRUE) %dopar% (i + aa), "automatically exporting")
  expect_output(foreach(i = 1:2, .verbose = TRUE) %dopar% (i + aa), "aa")
})

test_that("nested loops, when() and iterators", {
  use_pool()
  m <- foreach(a = 1:3, .combine = rbind) %:% foreach(b = 1:2, .combine = c) %dopar% (a * 10 + b)
  expect_equal(unname(m), rbind(c(11, 12), c(21, 22), c(31, 32)))
  r <- foreach(a = 1:10, .combine = c) %:% when(a %% 2 == 0) %dopar% a
  expect_identical(r, c(2L, 4L, 6L, 8L, 10L))
  M <- matrix(1:12, 3)
  r <- foreach(row = iterators::iter(M, by = "row"), .combine = c) %dopar% sum(row)
  expect_equal(r, rowSums(M))
  r <- foreach(i = iterators::icount(4), .combine = c) %dopar% i^2
  expect_identical(r, c(1, 4, 9, 16))
  r <- foreach(x = iterators::isplit(1:6, rep(1:2, 3)), .combine = c) %dopar% sum(x$value)
  expect_identical(r, c(9L, 12L))
})

test_that(".options.snow preschedule and attachExportEnv", {
  use_pool()
  X <- rnorm(3e5)
  r <- foreach(i = 1:6, .combine = c, .options.snow = list(preschedule = TRUE)) %dopar% (i + is_shared(X))
  expect_equal(r, 2:7)
  f1 <- function(k) k * 2
  r <- foreach(i = 1:4, .combine = c, .export = "f1", .options.snow = list(attachExportEnv = TRUE)) %dopar%
    c("exportEnv" %in% search() && exists("f1", where = 2))
  expect_identical(r, rep(TRUE, 4))
  expect_warning(foreach(i = 1:2, .options.snow = list(bogus = TRUE)) %dopar% i, "bogus")
  # attached environments are detached after the loop
  expect_identical(foreach(i = 1:2, .combine = c) %dopar% ("exportEnv" %in% search()), c(FALSE, FALSE))
})

test_that("an explicit PSOCK cluster gets pageshare and receives views", {
  cl <- parallel::makePSOCKcluster(2)
  pids <- cluster_pids(cl)
  on.exit({
    parallel::stopCluster(cl)
    expect_true(pids_gone(pids))
  })
  registerDoShm(cl)
  expect_identical(getDoParWorkers(), 2L)
  loaded <- unlist(parallel::clusterEvalQ(cl, "pageshare" %in% loadedNamespaces()))
  expect_identical(loaded, c(TRUE, TRUE))
  X <- rnorm(3e5)
  r <- foreach(i = 1:4, .combine = c) %dopar% is_shared(X)
  expect_identical(r, rep(TRUE, 4))
  foreach::registerDoSEQ()
})

test_that("no worker, option or segment is left behind", {
  foreach::registerDoSEQ()
  pids <- pageshare:::pool_pids()
  expect_true(stop_workers() || !length(pids))
  expect_true(pids_gone(c(pids, pool_pids_seen)))
  expect_identical(pageshare:::pool_pids(), integer())
  options(old_opts)
  expect_identical(pageshare_options(), opts_before)
  clear_cache_and_gc()
  expect_identical(setdiff(segments_now(), seg_before), character())
})
