#!/usr/bin/env Rscript
# plan(shm_multisession) vs plan(multisession) vs plan(sequential), 2 workers,
# side by side in one run.
#
#   Rscript inst/benchmarks/bench-future.R [n ...] [--out=FILE] [--skip-b] [--pss]
#
#   n       sizes of the n x n matrix for (a); default 2000 5000
#   --pss   also sample PSS (a background process; on by itself without a cgroup)
#   --out   markdown results file; default inst/benchmarks/results/future.md
#           (relative to the current directory; created if needed)
#
# (a) future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)) for an n x n X,
#     with X shared on the fly by the backend and with X <- share(X) beforehand;
#     the same with future_sapply() inside a function (X an argument), and
#     future_apply(X, 2, function(v) cor(v, y));
# (b) one 400 MB global used by 10 futures;
# (c) trivial future round trip (median of 30, ms).
#
# Memory is the peak over the measurement of the sum of PSS (proportional set
# size: a shared page counts 1/k in each of the k processes mapping it) of the
# master and its worker processes, read from /proc/PID/smaps_rollup every
# ~50 ms by a separate background R process.
# Summed RSS would count the shared pages once per process; bench::mark's
# mem_alloc sees only the master's R allocations.

suppressPackageStartupMessages({
  library(future)
  library(future.apply)
  library(pageshare)
})

args <- commandArgs(trailingOnly = TRUE)
ns <- suppressWarnings(as.integer(args[!startsWith(args, "--")]))
if (!length(ns) || anyNA(ns)) ns <- c(2000L, 5000L)
out <- sub("^--out=", "", grep("^--out=", args, value = TRUE))
if (!length(out)) out <- file.path("inst", "benchmarks", "results", "future.md")
skip_b <- "--skip-b" %in% args
workers <- 2L

old_opts <- options(future.globals.maxSize = +Inf, future.rng.onMisuse = "ignore")

# ---- the PSS sampler (a background process) ----------------------------------

source(file.path("inst", "benchmarks", "cgroup-memory.R"))
have_cgroup <- cgroup_enter()   # before any data is allocated: its pages are charged to it
# The PSS sampler is a second R process that takes ~0.2-0.3 s of CPU per
# second of a 2-core machine: with a cgroup to measure memory, it runs only
# when asked for (--pss), so that the times are not slowed down by it.
use_pss <- "--pss" %in% args || !have_cgroup
source(file.path("inst", "benchmarks", "pss-sampler.R"))

source(file.path("inst", "benchmarks", "plan-workers.R"))

set_plan <- function(kind) {
  old_pids <- plan_worker_pids()
  plan(sequential)
  # Let the previous plan's workers finish exiting (freeing hundreds of MB)
  # before anything is timed: on 2 cores their teardown would be measured too.
  deadline <- Sys.time() + 20
  while (any(file.exists(file.path("/proc", old_pids[!is.na(old_pids)]))) && Sys.time() < deadline) Sys.sleep(0.05)
  switch(kind,
    sequential = plan(sequential),
    multisession = plan(multisession, workers = workers),
    shm_multisession = plan(shm_multisession, workers = workers))
  # start the workers and load future.apply on them now, outside the measurements
  invisible(value(future(NULL)))
  invisible(future_lapply(1:4, function(i) i))
  # Tell the sampler the worker pids (PSOCK workers are not children of this
  # process: their launching shell exits and they are re-parented).
  set_sampled_pids(if (kind == "sequential") integer() else plan_worker_pids())
}

rows <- list()
add_row <- function(section, case, plan_name, m, extra = "") {
  rows[[length(rows) + 1L]] <<- data.frame(section = section, case = case, plan = plan_name,
    secs = round(m$secs, 2), peak_mb = round(m$peak_mb), base_mb = round(m$base_mb),
    cg_extra_mb = round(m$cg_peak_mb - m$cg_base_mb),
    procs = m$procs, note = extra, stringsAsFactors = FALSE)
  cat(sprintf("%-3s %-28s %-18s %7.2f s  peak %6.0f MB (before %5.0f MB, %d processes) cgroup +%5.0f MB  %s\n",
              section, case, plan_name, m$secs, m$peak_mb, m$base_mb, as.integer(m$procs),
              m$cg_peak_mb - m$cg_base_mb, extra))
}

source(file.path("inst", "benchmarks", "warm-memory.R"))
warm_memory(4096)

# ---- (a) column correlations --------------------------------------------------

for (n in ns) {
  set.seed(1)
  X <- matrix(rnorm(as.double(n) * n), n, n)
  y <- rnorm(n)
  ref <- NULL
  for (kind in c("sequential", "multisession", "shm_multisession")) {
    case <- sprintf("n=%d, X %.0f MB", n, n * n * 8 / 2^20)
    fly <- if (kind == "shm_multisession") "shared on the fly" else ""
    set_plan(kind)
    m <- measure(r <- future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))
    if (is.null(ref)) ref <- r else stopifnot(isTRUE(all.equal(unlist(r), unlist(ref))))
    add_row("a", case, kind, m, fly)
    # The same inside a function, as package code is written: X an argument,
    # FUN a closure over it (fresh workers and no cached segment, as above).
    # A fresh ordinary X for each form (as a user's session has): after a
    # share(), X's pages are mappings of the (now forgotten) segment.
    fresh_x <- function() { X <<- X + 0; invisible(gc()) }
    rm(r); forget_shared(); fresh_x(); set_plan(kind)
    colcor <- function(X, y) future_sapply(seq_len(ncol(X)), function(j) cor(X[, j], y))
    m <- measure(r <- colcor(X, y))
    stopifnot(isTRUE(all.equal(r, unlist(ref))))
    add_row("a", case, kind, m, paste(c("inside a function", if (nzchar(fly)) fly), collapse = ", "))
    # future.apply's own column apply: its chunks are lists of columns.
    rm(r); forget_shared(); fresh_x(); set_plan(kind)
    m <- measure(r <- future_apply(X, 2, function(v) cor(v, y)))
    stopifnot(isTRUE(all.equal(r, unlist(ref))))
    add_row("a", case, kind, m, paste(c("future_apply(X, 2, f)", if (nzchar(fly)) fly), collapse = ", "))
    rm(r); forget_shared(); fresh_x()
    if (kind == "shm_multisession") {
      # X <- share(X) beforehand: a fresh segment (forget the on-the-fly one),
      # and the private copy of X dropped, as `X <- share(X)` would.
      # fresh workers: idle workers keep the views of the last future mapped
      plan(sequential)
      invisible(gc())
      ms <- measure(X <- share(X))
      set_plan(kind)
      m2 <- measure(r <- future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))
      stopifnot(isTRUE(all.equal(unlist(r), unlist(ref))))
      add_row("a", case, kind, m2,
              sprintf("X <- share(X) beforehand (share() took %.2f s)", ms$secs))
      rm(r)
    }
    plan(sequential)
  }
  rm(X, y, ref)
  forget_shared()
  invisible(gc())
}

# ---- (b) one 400 MB global, 10 futures ---------------------------------------

if (!skip_b) {
  G <- rnorm(5e7) # 400 MB
  for (kind in c("sequential", "multisession", "shm_multisession")) {
    set_plan(kind)
    m <- measure({
      fs <- lapply(1:10, function(i) future(sum(G[seq(i, length(G), by = 1000)])))
      v <- value(fs)
    })
    add_row("b", "400 MB global, 10 futures", kind, m)
    rm(fs, v)
    plan(sequential)
  }
  rm(G)
  invisible(gc())
}

# ---- (c) trivial round trip -----------------------------------------------------

for (kind in c("sequential", "multisession", "shm_multisession")) {
  set_plan(kind)
  for (i in 1:3) value(future(1))
  ts <- vapply(1:30, function(i) system.time(value(future(1)))[["elapsed"]], 0)
  med <- stats::median(ts) * 1000
  rows[[length(rows) + 1L]] <- data.frame(section = "c", case = "value(future(1))", plan = kind,
    secs = NA, peak_mb = NA, base_mb = NA, cg_extra_mb = NA, procs = NA,
    note = sprintf("median %.1f ms (min %.1f, max %.1f)", med, min(ts) * 1000, max(ts) * 1000))
  cat(sprintf("c   round trip %-18s median %.1f ms\n", kind, med))
  plan(sequential)
}

stop_sampler()
cgroup_leave()
options(old_opts)

# ---- report ---------------------------------------------------------------------------

res <- do.call(rbind, rows)
dir.create(dirname(out), recursive = TRUE, showWarnings = FALSE)
md <- c(
  "# future backends: shm_multisession vs multisession vs sequential",
  "",
  sprintf("Run: %s, %s, %d workers, %d cores, R %s, future %s, pageshare %s.",
          format(Sys.time(), "%Y-%m-%d %H:%M %Z"), utils::sessionInfo()$running, workers,
          parallel::detectCores(), getRversion(), utils::packageVersion("future"),
          utils::packageVersion("pageshare")),
  "",
  "Memory: peak over the measurement of the sum of PSS of the master and its worker",
  "processes (/proc/PID/smaps_rollup, sampled every ~50 ms by a background process;",
  "only with --pss or without a cgroup, empty otherwise, since the sampler takes CPU",
  "from the runs); `before` is that sum just before the measurement (master holding",
  "the data, idle workers). `cgroup extra` is the peak of a memory cgroup holding the master and",
  "its workers during the measurement minus its usage just before (kernel-kept",
  "peak; counts shared-memory pages that no process maps, which PSS misses). Times are",
  "wall clock; 4 GB of memory are pre-faulted first (see warm-memory.R).",
  "",
  "| section | case | plan | time (s) | peak PSS (MB) | before (MB) | cgroup extra (MB) | note |",
  "|---|---|---|---:|---:|---:|---:|---|",
  sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |", res$section, res$case, res$plan,
          ifelse(is.na(res$secs), "", format(res$secs)),
          ifelse(is.na(res$peak_mb), "", format(res$peak_mb)),
          ifelse(is.na(res$base_mb), "", format(res$base_mb)),
          ifelse(is.na(res$cg_extra_mb), "", format(res$cg_extra_mb)), res$note),
  "",
  "(a) `future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y))`, X n x n double;",
  "\"inside a function\": `colcor <- function(X, y) future_sapply(seq_len(ncol(X)), function(j) cor(X[, j], y))`;",
  "`future_apply(X, 2, function(v) cor(v, y))`.",
  "(b) `lapply(1:10, function(i) future(sum(G[seq(i, length(G), by = 1000)])))`, G 400 MB.",
  "    (b) runs in the process that ran (a): where (a) has grown the C library's heap enough to serve G",
  "    from it, G is copied into its segment rather than handing its pages over (about size(G) more).",
  "(c) `value(future(1))`, median of 30 after 3 warm-up calls."
)
writeLines(md, out)
cat("Results written to", out, "\n")
