#!/usr/bin/env Rscript
# The pool of two builds of pageshare side by side: the code before a change
# (installed into one library) against the code after it (another library),
# in one process tree. Each build runs in its own long-lived R session with its
# own 2-worker pool; rounds are interleaved (before, after, after, before, ...)
# and every case runs in both sessions in each round. PSOCK's clusterCall() runs
# in this process, in the same rounds, as the reference the issue asks for.
#
#   Rscript inst/benchmarks/bench-pool-versions.R LIB_BEFORE LIB_AFTER [rounds, default 7]
#
# On a machine busy with other work, run it at a real-time priority
# (`chrt -f 10 Rscript ...`, as root; the workers inherit it): the other
# processes then wait while a case runs, and the figures are close to a quiet
# machine's. Each run takes well under a minute.
#
# (Install a build into a library of its own with
# `R CMD INSTALL --no-multiarch -l LIB .` from a checkout of that commit.)
# Prints, per case, the median of each build over the rounds and the ratio
# after / before, and the trivial round trip as a ratio to PSOCK.
suppressPackageStartupMessages({
  library(callr)
  library(parallel)
})
args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 2L) stop("usage: bench-pool-versions.R LIB_BEFORE LIB_AFTER [rounds]")
libs <- c(before = normalizePath(args[[1L]]), after = normalizePath(args[[2L]]))
rounds <- if (length(args) >= 3L) as.integer(args[[3L]]) else 7L
cat(sprintf("Run: %s, R %s, %d rounds, %d cores, load average %s\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), getRversion(), rounds,
            parallel::detectCores(), paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))

# One R session per build, its library first on the path (its workers inherit it).
sessions <- lapply(libs, function(lib) {
  s <- r_session$new(r_session_options(env = c(R_LIBS = lib), libpath = c(lib, .libPaths())))
  s$run(function() {
    suppressPackageStartupMessages(library(pageshare))
    start_workers(2)
    registerDoShm(cores = 2)
    # (the cases run here call glob(): see below)
    assign("glob", function(f) { environment(f) <- globalenv(); f }, envir = globalenv())
    invisible()
  })
  s
})
on.exit(for (s in sessions) { try(s$run(function() pageshare::stop_workers()), silent = TRUE); s$close() }, add = TRUE)
for (b in names(libs)) {
  v <- sessions[[b]]$run(function() c(format(packageVersion("pageshare")), find.package("pageshare")))
  cat(sprintf("  %-6s pageshare %s from %s\n", b, v[[1L]], v[[2L]]))
}

# The cases, each a function run in a build's session, returning milliseconds
# (per task where it says so). Sys.time() counts microseconds; proc.time() only
# milliseconds. The functions sent are made global (`glob()`), as a user's
# top-level functions are: a function whose environment is a frame takes the
# pool's general path (its frame is walked for data to share), timed apart in
# the "closure" case.
glob <- function(f) { environment(f) <- globalenv(); f }
cases <- list(
  `trivial round trip, per task (us)` = function() {
    f0 <- glob(function() NULL)
    n <- 2000
    t0 <- Sys.time(); for (i in seq_len(n)) pageshare::shm_value(pageshare::shm_call(f0))
    as.numeric(Sys.time() - t0, units = "secs") * 1e6 / n
  },
  `a closure's round trip (its frame walked), per task (us)` = function() {
    y <- 1
    f0 <- function() y
    n <- 2000
    t0 <- Sys.time(); for (i in seq_len(n)) pageshare::shm_value(pageshare::shm_call(f0))
    as.numeric(Sys.time() - t0, units = "secs") * 1e6 / n
  },
  `pipelined calls with an argument, per task (us)` = function() {
    f1 <- glob(function(i) i)
    n <- 20000
    t0 <- Sys.time()
    tasks <- lapply(seq_len(n), function(i) pageshare::shm_call(f1, i))
    for (t in tasks) pageshare::shm_value(t)
    as.numeric(Sys.time() - t0, units = "secs") * 1e6 / n
  },
  `map of 2000 x sqrt(i) (ms)` = function() {
    t0 <- Sys.time(); pageshare::shm_map(seq_len(2000), glob(function(i) sqrt(i)))
    as.numeric(Sys.time() - t0, units = "secs") * 1e3
  },
  `map of 2000 x ~10 us (ms)` = function() {
    spin <- glob(function(i) { x <- 0; for (k in 1:120) x <- x + k; i })
    t0 <- Sys.time(); pageshare::shm_map(seq_len(2000), spin)
    as.numeric(Sys.time() - t0, units = "secs") * 1e3
  },
  `foreach of 2000 x sqrt(i) on the pool (ms)` = function() {
    `%dopar%` <- foreach::`%dopar%`
    t0 <- Sys.time(); foreach::foreach(i = seq_len(2000)) %dopar% sqrt(i)
    as.numeric(Sys.time() - t0, units = "secs") * 1e3
  },
  `memLapply of 200 x sum (ms)` = function() {
    L <- as.list(seq_len(200))
    t0 <- Sys.time(); pageshare::memLapply(L, sum)
    as.numeric(Sys.time() - t0, units = "secs") * 1e3
  },
  `8 MB there and back, the same vector, per call (ms)` = function() {
    if (is.null(.GlobalEnv$.bench_same)) assign(".bench_same", runif(1e6), envir = .GlobalEnv)
    back <- glob(function(v) v)
    same <- .GlobalEnv$.bench_same
    t0 <- Sys.time(); for (i in 1:10) pageshare::shm_value(pageshare::shm_call(back, same))
    as.numeric(Sys.time() - t0, units = "secs") * 1e3 / 10
  },
  `8 MB there and back, a new vector each time, per call (ms)` = function() {
    back <- glob(function(v) v)
    vs <- lapply(1:10, function(i) runif(1e6))
    t0 <- Sys.time(); for (v in vs) pageshare::shm_value(pageshare::shm_call(back, v))
    as.numeric(Sys.time() - t0, units = "secs") * 1e3 / 10
  })

cl <- makePSOCKcluster(2)
on.exit(stopCluster(cl), add = TRUE)
psock_trip <- function() {
  f0 <- glob(function() NULL)
  n <- 100
  t0 <- Sys.time(); for (i in seq_len(n)) clusterCall(cl[1], f0)
  as.numeric(Sys.time() - t0, units = "secs") * 1e6 / n
}

settle <- function(s) s$run(function() { invisible(gc()); invisible(pageshare::shm_map(1:2, function(i) invisible(gc()))) })
times <- array(NA_real_, c(rounds, length(cases), 2L), list(NULL, names(cases), names(libs)))
psock <- rep(NA_real_, rounds)
for (s in sessions) for (case in cases) s$run(case)   # (warm: code loaded, workers started)
invisible(psock_trip())
for (r in seq_len(rounds)) {
  order <- if (r %% 2L) names(libs) else rev(names(libs))
  for (k in seq_along(cases)) {
    for (b in order) {
      settle(sessions[[b]])
      times[r, k, b] <- sessions[[b]]$run(cases[[k]])
    }
  }
  psock[r] <- psock_trip()
}

cat(sprintf("\n%-58s %10s %10s %8s\n", "case (median of rounds)", "before", "after", "after/before"))
for (k in names(cases)) {
  m <- apply(times[, k, , drop = FALSE], 3, median)
  cat(sprintf("%-58s %10.3f %10.3f %8.2f\n", k, m[["before"]], m[["after"]], m[["after"]] / m[["before"]]))
}
trip <- apply(times[, 1L, , drop = FALSE], 3, median)
cat(sprintf("\nPSOCK clusterCall(cl[1]) round trip: %.1f us; pool's trivial round trip / PSOCK: before %.3f, after %.3f\n",
            median(psock), trip[["before"]] / median(psock), trip[["after"]] / median(psock)))
cat(sprintf("load average at the end: %s\n", paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
