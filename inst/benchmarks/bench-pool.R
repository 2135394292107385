#!/usr/bin/env Rscript
# pageshare's own pool (tasks over shared memory) side by side with plain
# PSOCK (parallel's parLapply() / clusterCall()), the reference, and, where it
# is installed, mirai. One process tree, 2 workers each, rounds interleaved (every system
# once per round, in turn); medians over rounds and ratios to the pool.
#
#   Rscript inst/benchmarks/bench-pool.R [rounds, default 7] [section ...]
#
# Sections (all by default): trip, throughput, idle, map, foreach, vector,
# colapply. mirai is looked for in the library path (R_LIBS).
suppressPackageStartupMessages({
  library(pageshare)
  library(parallel)
})
args <- commandArgs(trailingOnly = TRUE)
rounds <- suppressWarnings(as.integer(args[1])); if (is.na(rounds)) rounds <- 7L
sections <- args[-1]
if (!length(sections)) sections <- c("trip", "throughput", "idle", "map", "foreach", "vector", "colapply")
has_mirai <- requireNamespace("mirai", quietly = TRUE)
ms <- function(expr) { t0 <- Sys.time(); force(expr); as.numeric(Sys.time() - t0, units = "secs") * 1000 }   # (microseconds: proc.time() counts milliseconds)
cat(sprintf("Run: %s, %s, R %s, pageshare %s, mirai %s, %d rounds, %d cores, load average %s\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), utils::sessionInfo()$running, getRversion(),
            packageVersion("pageshare"), if (has_mirai) format(packageVersion("mirai")) else "not installed",
            rounds, parallel::detectCores(), paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))

# Every system, started once, 2 workers each.
start_workers(2)
cl <- makePSOCKcluster(2)
if (has_mirai) mirai::daemons(2)
on.exit({ stop_workers(); stopCluster(cl); if (has_mirai) mirai::daemons(0) }, add = TRUE)

# Untimed, before each measurement, so that no system pays for the garbage of
# the one before it: a collection here, then one in each pool worker (of the
# views of segments let go of, whose pages the kernel frees then).
settle <- function() {
  invisible(gc())
  if (length(pageshare:::shm_pool$pids)) invisible(pageshare:::pool_call_each(function() invisible(gc())))
}

# Runs each function of `systems` once per round, in turn, each round starting
# one system further on (so that no system always follows the same other);
# prints medians (in `unit`) and ratios to the first.
compare <- function(title, systems, unit = "ms", scale = 1) {
  for (f in systems) f()   # (warm: workers started, code loaded)
  times <- matrix(NA_real_, rounds, length(systems), dimnames = list(NULL, names(systems)))
  k <- length(systems)
  for (r in seq_len(rounds)) {
    for (s in names(systems)[(seq_len(k) + r - 2L) %% k + 1L]) {
      settle()
      times[r, s] <- systems[[s]]() * scale
    }
  }
  med <- apply(times, 2, median)
  cat(sprintf("\n%s (median of %d rounds)\n", title, rounds))
  for (s in names(med)) {
    cat(sprintf("  %-34s %10.3f %s  x%.2f\n", s, med[[s]], unit, med[[s]] / med[[1]]))
  }
  invisible(med)
}

f0 <- function() NULL
f1 <- function(i) i
if ("trip" %in% sections) {
  n <- 2000
  systems <- list(
    `pool: shm_value(shm_call())` = function() ms(for (i in seq_len(n)) shm_value(shm_call(f0))) / n,
    `PSOCK: clusterCall(cl[1])` = function() ms(for (i in seq_len(n / 20)) clusterCall(cl[1], f0)) / (n / 20))
  if (has_mirai) systems$`mirai: mirai()[]` <- function() ms(for (i in seq_len(n / 4)) mirai::mirai(NULL)[]) / (n / 4)
  compare("trivial round trip, submit + collect, per task", systems, "us", 1000)
}

if ("throughput" %in% sections) {
  n <- 20000
  start_workers(1)
  systems <- list(`pool (1 worker): shm_call x n, then shm_value x n` = function() {
    ms({ tasks <- lapply(seq_len(n), function(i) shm_call(f0)); for (t in tasks) shm_value(t) }) / n
  }, `pool (1 worker): the same with an argument, shm_call(f1, i)` = function() {
    ms({ tasks <- lapply(seq_len(n), function(i) shm_call(f1, i)); for (t in tasks) shm_value(t) }) / n
  }, `pool (1 worker): shm_map(1:n, f)` = function() ms(shm_map(seq_len(n), function(i) NULL)) / n)
  med <- compare("pipelined tasks on one worker, per task", systems, "us", 1000)
  cat(sprintf("  tasks/s: %s\n", paste(sprintf("%s %.0f", c("calls", "calls with an argument", "map"), 1e6 / med), collapse = ", ")))
  start_workers(2)
}

if ("idle" %in% sections) {
  cpu <- function(pids) sum(vapply(pids, function(p) {
    f <- strsplit(sub("^.*\\) ", "", readLines(sprintf("/proc/%d/stat", p))), " ")[[1]]
    sum(as.numeric(f[12:13]))
  }, 0)) / 100
  shm_map(1:100, sqrt)
  pids <- .Call(pageshare:::ps_pool_pids)
  before <- cpu(pids)
  self0 <- proc.time()
  Sys.sleep(10)
  used <- cpu(pids) - before
  cat(sprintf("\nidle pool of %d workers over 10 s: %.3f s of CPU (%.2f%% of one core)\n",
              length(pids), used, used / 10 * 100))
}

if ("map" %in% sections) {
  n <- 2000
  sq <- function(i) sqrt(i)
  spin <- function(i) { t <- proc.time()[[3L]]; x <- 0; for (k in 1:120) x <- x + k; i }   # (~10 us)
  for (task in c("sqrt", "10us")) {
    f <- if (task == "sqrt") sq else spin
    systems <- list(
      `pool: shm_map()` = function() ms(shm_map(seq_len(n), f)),
      `pool: memLapply()` = function() ms(memLapply(seq_len(n), f)),
      `PSOCK: parLapply()` = function() ms(parLapply(cl, seq_len(n), f)),
      `PSOCK: clusterApplyLB()` = function() ms(clusterApplyLB(cl, seq_len(n), f)))
    if (has_mirai) systems$`mirai: mirai_map()[]` <- function() ms(mirai::mirai_map(seq_len(n), f)[])
    compare(sprintf("map of %d x %s", n, if (task == "sqrt") "sqrt(i)" else "a ~10 us task"), systems)
  }
}

if ("foreach" %in% sections && requireNamespace("foreach", quietly = TRUE)) {
  `%dopar%` <- foreach::`%dopar%`
  n <- 2000
  # The loop body calls a function of the caller's, as loops do: foreach
  # exports it with the export environment as its environment.
  tiny <- function(i) sqrt(i)
  spin6 <- function(i) { x <- 0; for (k in 1:60) x <- x + k; i }   # (~6 us)
  for (task in c("sqrt", "6us")) {
    f <- if (task == "sqrt") tiny else spin6
    systems <- list(
      `pool: shm_map()` = function() ms(shm_map(seq_len(n), f)),
      `pool: foreach on registerDoShm()` = function() {
        registerDoShm(cores = 2)
        g <- f   # (a variable of the loop's frame: foreach exports it)
        ms(foreach::foreach(i = seq_len(n)) %dopar% g(i))
      })
    if (requireNamespace("doParallel", quietly = TRUE)) {
      systems$`doParallel on the same PSOCK cluster` <- function() {
        doParallel::registerDoParallel(cl)
        g <- f
        ms(foreach::foreach(i = seq_len(n)) %dopar% g(i))
      }
    }
    compare(sprintf("foreach(i = 1:%d) %%dopar%% g(i), g a %s", n,
                    if (task == "sqrt") "sqrt(i)" else "~6 us function with a loop"), systems)
  }
  foreach::registerDoSEQ()
}

if ("vector" %in% sections) {
  # (per call, over 10 calls in a row, as for the round trip: one call alone
  # would time a worker waking from sleep more than the call)
  k <- 10
  same <- runif(1e6)   # 8 MB
  back <- function(v) v
  fresh <- function() lapply(seq_len(k), function(i) runif(1e6))   # (made before the clock starts)
  systems <- list(
    `pool: same vector` = function() ms(for (i in seq_len(k)) shm_value(shm_call(back, same))) / k,
    `pool: a new vector each time` = function() { vs <- fresh(); ms(for (v in vs) shm_value(shm_call(back, v))) / k },
    `PSOCK: clusterCall(), new vector` = function() { vs <- fresh(); ms(for (v in vs) clusterCall(cl[1], back, v)) / k })
  if (has_mirai) {
    systems$`mirai: new vector` <- function() { vs <- fresh(); ms(for (v in vs) mirai::mirai(v, v = v)[]) / k }
  }
  compare("an 8 MB double vector there and back, per call of 10 in a row", systems)
  # (the same vector is found again cheaply when its pages were handed over to
  # its segment; a vector served from R's heap, as happens after the sections
  # before have grown it, is compared with its segment byte for byte: ?share)
  cat(sprintf("  the same vector's pages handed over to its segment: %s\n",
              shared_info(share(same))$source_released > 0))
}

if ("colapply" %in% sections) {
  rows <- 8000; cols <- 4000
  X <- matrix(rnorm(rows * cols), rows)
  y <- rnorm(rows)
  X <- share(X)   # (shared beforehand)
  f <- function(v, y) cor(v, y)
  serial <- function() ms(for (j in seq_len(cols)) f(X[, j], y))
  systems <- list(
    `pool: memApply()` = function() ms(memApply(X, 2, f, VARS = list(y = y))),
    `pool: foreach, an iteration per column` = function() {
      registerDoShm(cores = 2)
      ms(foreach::foreach(j = seq_len(cols), .export = c("f", "X", "y")) %dopar% f(X[, j], y))
    },
    `shm_multisession: future_sapply()` = function() ms(future.apply::future_sapply(seq_len(cols), function(j) f(X[, j], y))),
    serial = serial,
    # (the machine's own limit: the serial loop over each half of the columns
    # in two forked processes at once)
    `two halves at once (forked)` = function() ms(parallel::mclapply(1:2, function(h) {
      for (j in seq.int(h, cols, by = 2)) f(X[, j], y)
    }, mc.cores = 2)))
  `%dopar%` <- foreach::`%dopar%`
  future::plan(shm_multisession, workers = 2)
  compare(sprintf("column apply cor(X[, j], y) of a %d x %d matrix", rows, cols), systems)
  future::plan(future::sequential)
  foreach::registerDoSEQ()
}
