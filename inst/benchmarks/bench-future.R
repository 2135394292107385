#!/usr/bin/env Rscript
# plan(shm_multisession) vs plan(multisession) vs plan(sequential), 2 workers,
# side by side in one run.
#
#   Rscript inst/benchmarks/bench-future.R [n ...] [--out=FILE] [--skip-b]
#
#   n       sizes of the n x n matrix for (a); default 2000 5000
#   --out   markdown results file; default inst/benchmarks/results/future.md
#           (relative to the current directory; created if needed)
#
# (a) future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)) for an n x n X,
#     with X shared on the fly by the backend and with X <- share(X) beforehand;
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

sampler_code <- '
args <- commandArgs(trailingOnly = TRUE)
master <- as.integer(args[1]); logf <- args[2]; stopf <- args[3]; pidf <- args[4]
pss_of <- function(pid) {
  l <- tryCatch(readLines(sprintf("/proc/%s/smaps_rollup", pid), warn = FALSE), error = function(e) character())
  l <- grep("^Pss:", l, value = TRUE)
  if (!length(l)) 0 else as.numeric(strsplit(trimws(sub("^Pss:", "", l[1])), " ")[[1]][1])
}
con <- file(logf, open = "a")
while (!file.exists(stopf) && file.exists(sprintf("/proc/%d", master))) {
  workers <- tryCatch(as.integer(readLines(pidf, warn = FALSE)), error = function(e) integer())
  pids <- unique(c(master, workers[!is.na(workers)]))
  total <- sum(vapply(pids, pss_of, 0))
  writeLines(sprintf("%.3f %.0f %d", as.numeric(Sys.time()), total, length(pids)), con)
  flush(con)
  Sys.sleep(0.05)
}
close(con)
'
samp_dir <- tempfile("pss-sampler")
dir.create(samp_dir)
samp_script <- file.path(samp_dir, "sampler.R")
writeLines(sampler_code, samp_script)
samp_log <- file.path(samp_dir, "pss.log")
samp_stop <- file.path(samp_dir, "stop")
samp_pids <- file.path(samp_dir, "pids")
invisible(file.create(samp_log))
writeLines(character(), samp_pids)
system2(file.path(R.home("bin"), "Rscript"),
        c("--vanilla", shQuote(samp_script), Sys.getpid(), shQuote(samp_log), shQuote(samp_stop),
          shQuote(samp_pids)),
        wait = FALSE, stdout = FALSE, stderr = FALSE)

Sys.sleep(1)

read_pss <- function() {
  l <- readLines(samp_log, warn = FALSE)
  l <- l[nzchar(l)]
  m <- do.call(rbind, lapply(strsplit(l, " "), as.numeric))
  data.frame(t = m[, 1], kb = m[, 2], n = m[, 3])
}

# Time `expr` and the peak PSS sum (MB) during it.
measure <- function(expr) {
  # twice: the identity cache lets go of a source at one collection, R frees it
  # at the next
  invisible(gc()); invisible(gc())
  Sys.sleep(0.15)
  t0 <- as.numeric(Sys.time())
  el <- system.time(force(expr))[["elapsed"]]
  Sys.sleep(0.15)
  t1 <- as.numeric(Sys.time())
  d <- read_pss()
  w <- d[d$t >= t0 & d$t <= t1, ]
  base <- d[d$t < t0, ]
  list(secs = el,
       peak_mb = if (nrow(w)) max(w$kb) / 1024 else NA,
       base_mb = if (nrow(base)) utils::tail(base$kb, 1) / 1024 else NA,
       procs = if (nrow(w)) max(w$n) else NA)
}

set_plan <- function(kind) {
  switch(kind,
    sequential = plan(sequential),
    multisession = plan(multisession, workers = workers),
    shm_multisession = plan(shm_multisession, workers = workers))
  # start the workers and load future.apply on them now, outside the measurements
  invisible(value(future(NULL)))
  invisible(future_lapply(1:4, function(i) i))
  # Tell the sampler the worker pids (PSOCK workers are not children of this
  # process: their launching shell exits and they are re-parented).
  pids <- if (kind == "sequential") integer() else {
    cl <- future:::ClusterRegistry("get")
    vapply(cl, function(node) as.integer(node$session_info$process$pid), 0L)
  }
  writeLines(as.character(pids), samp_pids)
  Sys.sleep(0.2)
}

rows <- list()
add_row <- function(section, case, plan_name, m, extra = "") {
  rows[[length(rows) + 1L]] <<- data.frame(section = section, case = case, plan = plan_name,
    secs = round(m$secs, 2), peak_mb = round(m$peak_mb), base_mb = round(m$base_mb),
    procs = m$procs, note = extra, stringsAsFactors = FALSE)
  cat(sprintf("%-3s %-28s %-18s %7.2f s  peak %6.0f MB (before %5.0f MB, %d processes)  %s\n",
              section, case, plan_name, m$secs, m$peak_mb, m$base_mb, as.integer(m$procs), extra))
}

# ---- (a) column correlations --------------------------------------------------

for (n in ns) {
  set.seed(1)
  X <- matrix(rnorm(as.double(n) * n), n, n)
  y <- rnorm(n)
  ref <- NULL
  for (kind in c("sequential", "multisession", "shm_multisession")) {
    set_plan(kind)
    m <- measure(r <- future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))
    if (is.null(ref)) ref <- r else stopifnot(isTRUE(all.equal(unlist(r), unlist(ref))))
    add_row("a", sprintf("n=%d, X %.0f MB", n, n * n * 8 / 2^20), kind, m,
            if (kind == "shm_multisession") "shared on the fly" else "")
    if (kind == "shm_multisession") {
      # X <- share(X) beforehand: a fresh segment (forget the on-the-fly one),
      # and the private copy of X dropped, as `X <- share(X)` would.
      rm(r)
      forget_shared()
      # fresh workers: idle workers keep the views of the last future mapped
      plan(sequential)
      invisible(gc())
      ms <- measure(X <- share(X))
      set_plan(kind)
      m2 <- measure(r <- future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))
      stopifnot(isTRUE(all.equal(unlist(r), unlist(ref))))
      add_row("a", sprintf("n=%d, X %.0f MB", n, n * n * 8 / 2^20), kind, m2,
              sprintf("X <- share(X) beforehand (share() took %.2f s)", ms$secs))
    }
    rm(r)
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
    secs = NA, peak_mb = NA, base_mb = NA, procs = NA,
    note = sprintf("median %.1f ms (min %.1f, max %.1f)", med, min(ts) * 1000, max(ts) * 1000))
  cat(sprintf("c   round trip %-18s median %.1f ms\n", kind, med))
  plan(sequential)
}

invisible(file.create(samp_stop))
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
  "processes (/proc/PID/smaps_rollup, sampled every ~50 ms by a background process);",
  "`before` is that sum just before the measurement (master holding the data, idle",
  "workers). Times are wall clock.",
  "",
  "| section | case | plan | time (s) | peak PSS (MB) | before (MB) | note |",
  "|---|---|---|---:|---:|---:|---|",
  sprintf("| %s | %s | %s | %s | %s | %s | %s |", res$section, res$case, res$plan,
          ifelse(is.na(res$secs), "", format(res$secs)),
          ifelse(is.na(res$peak_mb), "", format(res$peak_mb)),
          ifelse(is.na(res$base_mb), "", format(res$base_mb)), res$note),
  "",
  "(a) `future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y))`, X n x n double.",
  "(b) `lapply(1:10, function(i) future(sum(G[seq(i, length(G), by = 1000)])))`, G 400 MB.",
  "(c) `value(future(1))`, median of 30 after 3 warm-up calls."
)
writeLines(md, out)
cat("Results written to", out, "\n")
unlink(samp_dir, recursive = TRUE)
