# plan(shm_multisession): the transparent future backend.
#
# Every test starts its own plan, ends with plan(sequential) (no worker left),
# restores the options it touched and checks that no segment is left in the
# segment directory once the objects are gone.

skip_if_not_installed("future")
skip_on_os(c("windows", "mac", "solaris"))

# Segments of this test run: new since the file started, created by this
# process or by a process that is gone (our workers). Segments of unrelated
# live processes sharing the directory (other R sessions) are not ours.
segments_at_start <- pageshare::shared_segments(all = TRUE)$name
segments_left <- function() {
  # test_that() environments die without R decrementing reference counts, so
  # the identity cache cannot see that their objects are gone: forget them.
  pageshare::forget_shared()
  for (i in 1:4) invisible(gc())
  new <- setdiff(pageshare::shared_segments(all = TRUE)$name, segments_at_start)
  pid <- suppressWarnings(as.integer(sub("^pageshare\\.a\\.([0-9]+)\\..*$", "\\1", new)))
  ours <- !is.na(pid) & (pid == Sys.getpid() | !file.exists(sprintf("/proc/%d", pid)))
  new[ours]
}

# Run `code` under plan(shm_multisession, workers = 2); afterwards no worker,
# no option changed, no segment.
with_shm_plan <- function(code, workers = 2L, plan_spec = NULL) {
  opts <- options()
  if (is.null(plan_spec)) {
    future::plan(pageshare::shm_multisession, workers = workers)
  } else {
    future::plan(plan_spec)
  }
  on.exit(future::plan(future::sequential), add = TRUE)
  force(code)
}

expect_clean <- function(opts_before) {
  future::plan(future::sequential)
  # future 1.31 has no hook when the plan changes: the user's
  # future.globals.maxSize comes back, and the pool stops, when the top-level
  # call ends, from these functions (test-globals-limit.R and
  # test-future-pool.R check that path in a separate R process).
  pageshare:::watch_globals_limit()
  pageshare:::watch_future_pool()
  expect_identical(segments_left(), character(0))
  after <- options()
  keys <- union(names(opts_before), names(after))
  keys <- grep("^(pageshare|future)\\.", keys, value = TRUE)
  expect_identical(after[keys], opts_before[keys])
}

big <- function(n = 2e5) as.double(seq_len(n)) # 1.6 MB > 1 MiB threshold

test_that("futures, %<-%, futureCall give the same values as multisession", {
  opts <- options()
  with_shm_plan({
    expect_s3_class(future::plan("next"), "shm_multisession")
    expect_equal(future::nbrOfWorkers(), 2)
    expect_equal(future::nbrOfFreeWorkers(), 2)
    x <- 1:10
    f <- future::future(sum(x))
    # (on pageshare's pool: future-pool.R, future-pool-legacy.R before future 1.40)
    expect_s3_class(f, "ShmPoolFuture")
    expect_identical(future::value(f), 55L)
    `%<-%` <- future::`%<-%`
    y %<-% { x * 2L }
    expect_identical(y, x * 2L)
    g <- future::futureCall(function(a, b) a + sum(b), args = list(a = 1, b = big()))
    expect_equal(future::value(g), 1 + sum(big()))
    # the globals are restored exactly after launch
    expect_false(is_shared(g$globals$args$b))
    expect_identical(g$globals$args, list(a = 1, b = big()))
    lz <- future::future(x[3], lazy = TRUE)
    expect_identical(future::value(lz), 3L)
    expect_false(withVisible(future::value(future::future(invisible(1))))$visible)
    rm(f, g, lz)
  })
  expect_clean(opts)
})

test_that("the worker's global environment holds the same globals as under multisession", {
  # future 1.31 sends globals one call each; shm_multisession sends them as one
  # list that the expression unpacks first: the expression must not see a
  # difference (names, NULL values, functions, shared values).
  a <- 1; b <- NULL; X <- big(); f <- function() a + 1
  probe <- function() future::value(future::future({
    list(ls(globalenv(), all.names = TRUE), is.null(b), sum(X), f(), environmentName(environment(f)))
  }))
  opts <- options()
  future::plan(future::multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  expected <- probe()
  with_shm_plan({
    expect_identical(probe(), expected)
    expect_identical(probe(), expected)       # and again on a used worker
  })
  rm(X)
  expect_clean(opts)
})

test_that("a large global arrives as a view, shared once across chunks", {
  opts <- options()
  with_shm_plan({
    X <- matrix(big(4e5), ncol = 40)
    small <- 1:10
    f <- future::future(list(is_shared(X), shared_info(X)$name, is_shared(small), sum(X)))
    v <- future::value(f)
    expect_true(v[[1]])
    expect_false(v[[3]])
    expect_equal(v[[4]], sum(X))
    expect_false(is_shared(X))                 # the caller's X is untouched
    names <- future.apply::future_lapply(seq_len(6), function(j) {
      c(shared = is_shared(X), name = shared_info(X)$name, s = sum(X[, j]))
    }, future.chunk.size = 1)
    nm <- vapply(names, `[[`, "", "name")
    expect_identical(unique(nm), v[[2]])      # one segment for all six futures
    expect_true(all(vapply(names, `[[`, "", "shared") == "TRUE"))
    # lists and data frame columns are walked; character columns are shared too
    df <- data.frame(a = big(), b = as.character(seq_len(2e5)))
    expect_identical(future::value(future::future(c(is_shared(df$a), is_shared(df$b)))),
                     c(TRUE, TRUE))
    # a view shared beforehand travels as a handle too
    S <- share(big())
    expect_identical(future::value(future::future(shared_info(S)$name)), shared_info(S)$name)
    rm(f, X, df, S, names)
  })
  expect_clean(opts)
})

test_that("future_apply and furrr::future_map work", {
  skip_if_not_installed("future.apply")
  skip_if_not_installed("furrr")
  opts <- options()
  with_shm_plan({
    X <- matrix(big(4e5), ncol = 8)
    expect_equal(future.apply::future_apply(X, 2, sum), colSums(X))
    expect_equal(furrr::future_map_dbl(1:8, function(j) sum(X[, j])), colSums(X))
    rm(X)
  })
  expect_clean(opts)
})

test_that("a large result comes back through a segment the caller owns", {
  opts <- options()
  with_shm_plan({
    f <- future::future(as.double(seq_len(3e5)))
    v <- future::value(f)
    expect_true(is_shared(v))
    expect_true(shared_info(v)$owned_here)
    expect_identical(v[], as.double(seq_len(3e5)))
    l <- future::value(future::future(list(a = as.double(1:3e5), b = letters)))
    expect_true(is_shared(l$a))
    expect_identical(l$b, letters)
    # resolved() first, then value()
    g <- future::future(rep(1, 3e5))
    while (!future::resolved(g)) Sys.sleep(0.01)
    expect_true(shared_info(future::value(g))$owned_here)
    # small results are unchanged
    expect_identical(future::value(future::future(1:3)), 1:3)
    rm(f, v, l, g)
  })
  expect_clean(opts)
})

test_that("a worker returning a large global it received sends a handle, not the data", {
  opts <- options()
  with_shm_plan({
    X <- share(as.double(seq_len(5e5)))
    back <- future::value(future::future(X, globals = list(X = X)))
    expect_true(is_shared(back))
    expect_identical(shared_info(back)$name, shared_info(X)$name)   # the same segment
    expect_identical(back[5e5], 5e5)
    l <- future::value(future::future(list(a = X, n = 1), globals = list(X = X)))
    expect_identical(shared_info(l$a)$name, shared_info(X)$name)
    rm(X, back, l)
  })
  expect_clean(opts)
})

test_that("a worker returning the same large object twice hands over a new segment each time", {
  opts <- options()
  # Z is kept in an environment attached on the worker (future empties the
  # worker's global environment between futures).
  with_shm_plan(workers = I(1L), {
    v1 <- future::value(future::future({
      e <- new.env()
      assign("Z", as.double(seq_len(3e5)), envir = e)
      get("attach", baseenv())(e, name = "pageshare_test_z")
      get("Z", pos = "pageshare_test_z")
    }, globals = FALSE))
    n1 <- shared_info(v1)$name
    rm(v1)
    for (i in 1:3) invisible(gc())           # the caller unlinks the first segment
    v2 <- future::value(future::future(get("Z", pos = "pageshare_test_z"), globals = FALSE))
    expect_true(is_shared(v2))
    expect_false(identical(shared_info(v2)$name, n1))
    expect_identical(v2[], as.double(seq_len(3e5)))
    rm(v2)
  })
  expect_clean(opts)
})

test_that("conditions, stdout and errors are relayed as with multisession", {
  opts <- options()
  with_shm_plan({
    X <- big()
    f <- future::future({ cat("hello\n"); message("msg"); warning("careful"); sum(X) })
    expect_output(expect_message(expect_warning(v <- future::value(f), "careful"), "msg"), "hello")
    expect_equal(v, sum(X))
    e <- future::future(stop("boom ", length(X)))
    expect_error(future::value(e), "boom 2e\\+05|boom 200000")
    rm(f, e, X)
  })
  expect_clean(opts)
})

test_that("future.seed = 42 gives the same numbers as multisession", {
  skip_if_not_installed("future.apply")
  opts <- options()
  X <- big()
  run <- function() future.apply::future_lapply(1:4, function(i) runif(2) + X[i], future.seed = 42)
  with_shm_plan(a <- run())
  with_shm_plan(b <- run(), plan_spec = future::tweak(future::multisession, workers = 2))
  expect_identical(a, b)
  rm(X)
  expect_clean(opts)
})

test_that("a global that cannot be shared falls back to serialization with one warning", {
  opts <- options()
  with_shm_plan({
    X <- big(); Y <- big() + 1
    old <- options(pageshare.max_shared_bytes = 0)   # as when memory runs out
    on.exit(options(old), add = TRUE)
    w <- 0
    v <- withCallingHandlers(
      future::value(future::future(c(is_shared(X), is_shared(Y), sum(X) + sum(Y)))),
      pageshare_fallback = function(c) { w <<- w + 1; invokeRestart("muffleWarning") })
    options(old)
    expect_identical(w, 1)
    expect_equal(v, c(0, 0, sum(X) + sum(Y)))
    rm(X, Y)
  })
  expect_clean(opts)
})

test_that("each plan set anew gives its own fallback warning once", {
  opts <- options()
  for (round in 1:2) {
    with_shm_plan({
      X <- big()
      old <- options(pageshare.max_shared_bytes = 0)   # as when memory runs out
      w <- 0
      withCallingHandlers(
        for (i in 1:2) expect_equal(future::value(future::future(sum(X) + i)), sum(X) + i),
        pageshare_fallback = function(c) { w <<- w + 1; invokeRestart("muffleWarning") })
      options(old)
      expect_identical(w, 1, info = paste("plan", round))
      rm(X)
    })
    pageshare:::watch_future_pool()   # (what the end of the top-level call runs on future 1.31)
  }
  expect_clean(opts)
})

test_that("a worker lets go of a segment the caller unlinked at its next future", {
  # Workers collect garbage at the start of a future only when a segment they
  # map has been unlinked (a full collection for every future cost ~30 ms);
  # the pages of such a segment are then freed.
  opts <- options()
  with_shm_plan({
    A <- share(big(5e5))
    name <- shared_info(A)$name
    fs <- lapply(1:2, function(i) future::future({ Sys.sleep(0.3); c(Sys.getpid(), length(A)) },
                                                 globals = list(A = A)))
    first <- do.call(rbind, future::value(fs))
    expect_equal(first[, 2], c(5e5, 5e5))
    rm(fs, A)
    pageshare::forget_shared()
    for (i in 1:3) invisible(gc())
    expect_false(name %in% pageshare::shared_segments(all = TRUE)$name)   # unlinked here
    fs <- lapply(1:2, function(i) future::future({
      Sys.sleep(0.3)
      c(Sys.getpid(), name %in% pageshare::shared_segments()$name)        # mapped there?
    }, globals = list(name = name)))
    second <- do.call(rbind, future::value(fs))
    expect_setequal(second[, 1], first[, 1])      # the same two workers
    expect_identical(second[, 2], c(0L, 0L))
  })
  expect_clean(opts)
})

test_that("futures that use the same shared data reuse a worker's mapping", {
  skip_if_not(file.exists("/proc/self/maps"), "no /proc/self/maps")
  # A new mapping for every future would pay a page fault per 64 KiB read
  # again (~25 ms per 256 MB here); the views a worker receives for the same
  # segment share the mapping it already has.
  opts <- options()
  with_shm_plan({
    A <- share(big(5e5))
    name <- shared_info(A)$memfd
    probe <- function(i) future::future({
      c(pid = Sys.getpid(), sum = sum(A),
        maps = sum(grepl(name, readLines("/proc/self/maps"), fixed = TRUE)))
    }, globals = list(A = A, name = name))
    got <- as.data.frame(do.call(rbind, lapply(1:6, function(i) future::value(probe(i)))))
    expect_true(all(got$sum == sum(A)))
    for (pid in unique(got$pid)) {
      mine <- got[got$pid == pid, ]
      expect_identical(unique(mine$maps), 1)       # one mapping for all futures there
    }
    rm(A)
  })
  expect_clean(opts)
})

test_that("switching plans leaves no worker and no segment", {
  opts <- options()
  with_shm_plan({
    X <- big()
    pids <- unlist(future.apply::future_lapply(1:2, function(i) { Sys.sleep(0.2); c(Sys.getpid(), length(X)) }))
    pids <- unique(pids[pids != length(X)])
    expect_true(length(pids) >= 1)
    future::plan(future::sequential)
    pageshare:::watch_future_pool()   # (what the end of the top-level call runs on future 1.31)
    expect_true(pids_gone(pids))
    rm(X)
  })
  expect_clean(opts)
})

test_that("a worker killed mid-future gives a FutureError and the next future runs", {
  opts <- options()
  with_shm_plan({
    X <- big()
    pid <- future::value(future::future(Sys.getpid()))
    f <- future::future({ tools::pskill(Sys.getpid(), tools::SIGKILL); Sys.sleep(5); sum(X) })
    expect_error(future::value(f), class = "FutureError")
    expect_equal(future::value(future::future(sum(X))), sum(X))
    rm(f, X)
  })
  expect_clean(opts)
})

test_that("future >= 1.40: cancel(interrupt = TRUE) stops a future using a view; the next one runs", {
  skip_if_not(exists("cancel", envir = asNamespace("future")), "this future has no cancel()")
  opts <- options()
  with_shm_plan({
    X <- big()
    f <- future::future({ Sys.sleep(30); sum(X) })
    Sys.sleep(1)                                   # running on a worker, X mapped there
    pid <- f[["pageshare_pid"]]
    f <- future::cancel(f, interrupt = TRUE)
    expect_error(future::value(f), class = "FutureInterruptError")
    expect_true(pids_gone(pid))                    # ended, not waited for (it sleeps 30 s)
    expect_equal(future::value(future::future(sum(X))), sum(X))
    expect_equal(future::nbrOfFreeWorkers(), 2)
    rm(f, X)
  })
  expect_clean(opts)
})

test_that("an invalid workers argument gives an error naming it", {
  opts <- options()
  on.exit(future::plan(future::sequential), add = TRUE)
  for (bad in list(0, -1, 2.5, NA_real_, "two", c(1, 2)))
    expect_error(future::plan(pageshare::shm_multisession, workers = bad), "`workers` must be")
  expect_error(future::plan(pageshare::shm_multisession, workers = function() 0), "`workers` must be")
  future::plan(future::sequential)
  expect_clean(opts)
})

test_that("the default number of workers leaves 16 connections free, as multisession >= 1.40", {
  default <- eval(formals(pageshare::shm_multisession)$workers, globalenv())
  expect_identical(default, as.integer(max(1L, min(parallelly::availableCores(), parallelly::freeConnections() - 16L))))
  expect_identical(eval(formals(attr(pageshare::shm_multisession, "factory"))$workers, globalenv()), default)
  expect_identical(pageshare:::default_worker_count(), as.integer(default))   # the other front doors
})

test_that("a worker its future killed is replaced in the pool; the next futures run there", {
  opts <- options()
  with_shm_plan(workers = I(1L), {
    first <- future::value(future::future(Sys.getpid()))
    expect_identical(pageshare:::shm_pool$pids, first)
    # (future < 1.40 has no FutureInterruptError: a FutureError, as its multisession gives)
    expect_error(future::value(future::future(tools::pskill(Sys.getpid(), tools::SIGKILL))),
                 class = if (packageVersion("future") >= "1.40.0") "FutureInterruptError" else "FutureError")
    expect_true(pids_gone(first))
    again <- vapply(1:3, function(i) future::value(future::future(Sys.getpid())), 0)
    expect_length(unique(again), 1L)                   # one new worker, in the same slot
    expect_false(first %in% again)
    expect_identical(pageshare:::shm_pool$pids, as.integer(again[1]))
  })
  expect_clean(opts)
})

test_that("a worker killed while running a future is replaced; no process and no segment left", {
  opts <- options()
  with_shm_plan({
    X <- big()
    fs0 <- lapply(1:2, function(i) future::future({ Sys.sleep(0.3); Sys.getpid() }))
    pids0 <- vapply(fs0, future::value, 0)
    began <- tempfile("began")
    slow <- future::future({ file.create(began); Sys.sleep(30); length(X) })
    idle <- future::value(future::future(Sys.getpid()))   # the other worker
    busy <- setdiff(pids0, idle)
    expect_length(busy, 1L)
    # (killed once it runs `slow`: one killed before reading it would give it
    # to its successor)
    wait_for_file(began)
    tools::pskill(busy, tools::SIGKILL)
    expect_error(future::value(slow), class = "FutureError")
    # two futures at once: two live workers, the dead one not among them
    fs <- lapply(1:2, function(i) future::future({ Sys.sleep(0.5); c(Sys.getpid(), length(X)) }))
    got <- vapply(fs, future::value, numeric(2))
    expect_equal(got[2, ], c(length(X), length(X)))
    expect_length(unique(got[1, ]), 2L)
    expect_false(busy %in% got[1, ])
    pids <- got[1, ]
    rm(X, slow, fs, fs0)
  })
  expect_clean(opts)
  expect_true(pids_gone(pids))
})

test_that("nested plan: a view sent to a plain cluster worker arrives as data", {
  opts <- options()
  with_shm_plan(plan_spec = list(future::tweak(future::cluster, workers = 1L),
                                 future::tweak(pageshare::shm_multisession, workers = 2L)), {
    X <- share(big())
    f <- future::future({
      inner <- future::value(future::future(is_shared(X)))
      c(outer_view = pageshare::is_shared(X), inner_view = inner, s = sum(X))
    })
    # future >= 1.40 warns (as it does for a nested multisession) that the
    # inner plan starts 2 workers where mc.cores is 1 and that the outer
    # future opened connections (the inner workers'); nothing else may warn.
    v <- withCallingHandlers(future::value(f), warning = function(w) {
      if (grepl("localhost parallel workers|added, removed, or modified connections|parallelly.maxWorkers.localhost",
                conditionMessage(w))) invokeRestart("muffleWarning")
    })
    expect_identical(unname(v[1:2]), c(0, 1))   # data in the cluster worker, a view one level down
    expect_equal(unname(v[3]), sum(X))
    rm(f, X)
  })
  expect_clean(opts)
})

test_that("progressr updates from future_lapply reach the caller", {
  skip_if_not_installed("progressr")
  skip_if_not_installed("future.apply")
  opts <- options()
  with_shm_plan({
    old <- options(progressr.enable = TRUE) # FALSE by default when not interactive
    on.exit(options(old), add = TRUE)
    X <- big()
    n <- 0
    progressr::with_progress({
      p <- progressr::progressor(steps = 4)
      withCallingHandlers(
        r <- future.apply::future_lapply(1:4, function(i) { p(); sum(X[i]) }),
        progression = function(c) n <<- n + 1)
    }, handlers = progressr::handler_void())
    options(old)
    expect_identical(n, 4)
    expect_equal(unlist(r), X[1:4])
    rm(X, p, r)
  })
  expect_clean(opts)
})

test_that("the globals walk skips lists with nothing to share, and never misses one", {
  # The R-level walk costs ~10 us per element: a future_lapply chunk's list of
  # 4000 indices took ~35 ms, on the master per future and on the worker per
  # result. A C prefilter decides whether a list is worth walking.
  worth <- function(x, t = 1048576) .Call(pageshare:::ps_worth_walking, x, t)
  expect_false(worth(as.list(seq_len(4000))))
  expect_false(worth(list(a = 1:10, b = list(letters, list(rnorm(10))))))
  v <- share(rnorm(10))                                  # a view, even a small one
  expect_true(worth(list(1, list(2, list(v)))))
  expect_true(worth(list(list(list(rnorm(2e5))))))       # 1.6 MB deep down
  expect_true(worth(list(rep(strrep("x", 300), 4000))))  # 1.2 MB of text
  # Never says no where the walk would share something (random structures).
  set.seed(42)
  make <- function(depth) {
    k <- sample(0:4, 1)
    lapply(seq_len(k), function(i) switch(sample(4, 1),
      rnorm(sample(c(1, 10, 2e5), 1)), as.character(1:sample(c(1, 2e5), 1)),
      if (depth < 3) make(depth + 1) else NULL, sample(c(TRUE, FALSE), sample(c(1, 3e5), 1), TRUE)))
  }
  # reference: what the R walk shares, found without the prefilter
  finds <- function(x, depth = 0L) {
    if (is_shared(x)) return(TRUE)
    if (pageshare:::is_shareable_vector(x)) return(pageshare:::data_bytes(x) >= 1048576)
    typeof(x) == "list" && depth < 50L && any(vapply(x, finds, NA, depth = depth + 1L))
  }
  seen <- c(0, 0)
  for (i in 1:80) {
    x <- make(0)
    f <- finds(x)
    seen[f + 1] <- seen[f + 1] + 1
    if (f) expect_true(worth(x))
  }
  expect_true(all(seen > 0))                             # both kinds were drawn
})

test_that("a view whose holder is gone is sent to a worker as data", {
  future::plan(future::sequential); pageshare:::watch_globals_limit()   # the user's options back first
  opts <- options()
  owner <- background_owner(1L)
  on.exit(owner$proc$kill(), add = TRUE)
  with_shm_plan({
    v <- unserialize(owner$handle)          # a view of the background process's segment
    expected <- sum(as.double(seq_len(1000) + 1))
    fs <- lapply(1:2, function(i) future::future({ Sys.sleep(0.5); Sys.getpid() }))
    pids <- unlist(future::value(fs))
    expect_length(unique(pids), 2L)
    # The sender checks: once nobody holds the segment, the view travels as data.
    tools::pskill(owner$proc$get_pid(), tools::SIGKILL)
    owner$proc$wait(5000)
    r <- future::value(future::future(c(Sys.getpid(), is_shared(v), sum(v))))
    expect_true(r[1] %in% pids)
    expect_identical(r[2:3], c(0, expected))
    rm(v)
  })
  expect_clean(opts)
})
