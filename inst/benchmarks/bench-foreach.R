# Benchmark: pageshare's foreach backend and memApply against serial apply,
# parApply and doParallel, 2 workers.
#
# (a) column-wise cor(v, y) over an n x n double matrix: wall time and peak
#     extra memory, measured as the sum of PSS (proportional set size: a shared
#     page mapped by k processes counts 1/k in each) over the master and all
#     workers, sampled every 50 ms from /proc/PID/smaps_rollup by a background
#     shell loop; "extra" = peak during the call minus the sum just before it.
# (b) per-call overhead of memApply on a 10 x 10 matrix with warm workers vs
#     parApply.
#
# Usage: Rscript inst/benchmarks/bench-foreach.R [n,n,...] [reps] [out.md]
#   defaults: 1000,3000,5000,8000; reps 3 (repetitions after the first call,
#   only for n <= 3000); inst/benchmarks/results/foreach.md
# Needs: pageshare, foreach, doParallel, iterators; Linux (/proc).

args <- commandArgs(trailingOnly = TRUE)
ns <- if (length(args) >= 1L) as.integer(strsplit(args[[1L]], ",")[[1L]]) else c(1000L, 3000L, 5000L, 8000L)
reps <- if (length(args) >= 2L) as.integer(args[[2L]]) else 3L
out_file <- if (length(args) >= 3L) args[[3L]] else file.path("inst", "benchmarks", "results", "foreach.md")
workers <- 2L

suppressPackageStartupMessages({
  library(pageshare)
  library(foreach)
  library(doParallel)
  library(iterators)
})
options(pageshare.workers = workers)
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
cgroup_enter()   # before any data is allocated: its pages are charged to the cgroup

## ---- PSS sampler ----------------------------------------------------------
pss_kb <- function(pids) {
  sum(vapply(pids, function(p) {
    f <- sprintf("/proc/%d/smaps_rollup", p)
    l <- tryCatch(readLines(f, warn = FALSE), error = function(e) character())
    v <- grep("^Pss:", l, value = TRUE)
    if (length(v)) as.numeric(strsplit(trimws(sub("^Pss:", "", v[1L])), " +")[[1L]][1L]) else 0
  }, 0))
}
samp_dir <- tempfile("pss-")
dir.create(samp_dir)
pid_file <- file.path(samp_dir, "pids")
ctl_file <- file.path(samp_dir, "run")
samples_file <- file.path(samp_dir, "samples")
writeLines(as.character(Sys.getpid()), pid_file)
invisible(file.create(ctl_file))
sampler <- sprintf('
while [ -e "%s" ]; do
  tot=0
  for p in $(cat "%s"); do
    v=$(awk \'/^Pss:/{print $2; exit}\' /proc/$p/smaps_rollup 2>/dev/null)
    tot=$((tot + ${v:-0}))
  done
  echo "$(date +%%s.%%N) $tot" >> "%s"
  sleep 0.05
done', ctl_file, pid_file, samples_file)
sampler_file <- file.path(samp_dir, "sampler.sh")
writeLines(sampler, sampler_file)
system2("sh", sampler_file, wait = FALSE)


set_pids <- function(pids) writeLines(as.character(unique(pids)), pid_file)
read_samples <- function(t0, t1) {
  if (!file.exists(samples_file)) return(numeric())
  s <- tryCatch(utils::read.table(samples_file, colClasses = c("numeric", "numeric")),
                error = function(e) NULL)
  if (is.null(s)) return(numeric())
  s[[2L]][s[[1L]] >= t0 & s[[1L]] <= t1]
}

# Run expr once: wall seconds and peak extra PSS (MB) over `pids`.
measure <- function(expr, pids) {
  expr <- substitute(expr)
  env <- parent.frame()
  set_pids(pids)
  invisible(gc())
  Sys.sleep(0.15)
  base <- pss_kb(pids)
  cg_base <- cgroup_mb()
  cgroup_reset_peak()
  t0 <- as.numeric(Sys.time())
  el <- system.time(val <- eval(expr, env))[["elapsed"]]
  cg_extra <- cgroup_peak_mb() - cg_base
  t1 <- as.numeric(Sys.time())
  Sys.sleep(0.1)
  peak <- max(c(read_samples(t0, t1 + 0.05), pss_kb(pids)))
  list(wall = el, extra_mb = (peak - base) / 1024, cg_extra_mb = cg_extra, value = val)
}

## ---- workers ---------------------------------------------------------------
# Every method gets fresh, idle workers (a PSOCK cluster, or pageshare's pool
# restarted), so that memory a previous method left in a worker's heap does not
# hide in the baseline. Start-up is not timed.
fresh_workers <- function(kind) {
  if (kind == "none") return(list(cl = NULL, pids = integer()))
  if (kind == "pool") {
    stop_workers()
    start_workers(workers)
    return(list(cl = NULL, pids = pageshare:::pool_pids()))
  }
  cl <- parallel::makePSOCKcluster(workers)
  list(cl = cl, pids = unlist(parallel::clusterCall(cl, Sys.getpid)))
}
release_workers <- function(w, kind) {
  if (kind == "psock") parallel::stopCluster(w$cl)
  if (kind == "pool") stop_workers()
}

clear_shares <- function() {
  # Drop the identity cache so that each method pays for its own sharing.
  invisible(gc())
  pageshare::forget_shared()
  for (i in 1:3) invisible(gc())
}

methods <- list(
  "serial apply" = list(kind = "none", f = function(X, y, cl) apply(X, 2, function(v) cor(v, y))),
  "parApply" = list(kind = "psock", f = function(X, y, cl)
    parallel::parApply(cl, X, 2, function(v, y) cor(v, y), y = y)),
  "doParallel foreach" = list(kind = "psock", f = function(X, y, cl) {
    registerDoParallel(cl)
    foreach(cols = parallel::splitIndices(ncol(X), 4 * workers), .combine = c) %dopar%
      vapply(cols, function(j) cor(X[, j], y), 0)
  }),
  "registerDoShm foreach" = list(kind = "pool", f = function(X, y, cl) {
    registerDoShm(cores = workers)
    foreach(cols = parallel::splitIndices(ncol(X), 4 * workers), .combine = c) %dopar%
      vapply(cols, function(j) cor(X[, j], y), 0)
  }),
  "registerDoShm foreach, one iteration per column" = list(kind = "pool", f = function(X, y, cl) {
    registerDoShm(cores = workers)
    foreach(j = seq_len(ncol(X)), .combine = c) %dopar% cor(X[, j], y)
  }),
  "memApply" = list(kind = "pool", f = function(X, y, cl)
    unlist(memApply(X, 2, function(v, y) cor(v, y), VARS = list(y = y))))
)

source(file.path("inst", "benchmarks", "warm-memory.R"))
warm_memory(4096)

rows <- list()
for (n in ns) {
  set.seed(1)
  X <- matrix(rnorm(n * n), n)
  y <- rnorm(n)
  size_mb <- 8 * n * n / 2^20
  ref <- NULL
  for (m in names(methods)) {
    clear_shares()
    # A fresh ordinary X for every method, as a user's session would have: an
    # earlier method's share() re-mapped X's pages onto its (now dropped) segment.
    X <- X + 0
    invisible(gc())
    f <- methods[[m]]$f
    kind <- methods[[m]]$kind
    w <- fresh_workers(kind)
    cl <- w$cl
    first <- measure(f(X, y, cl), c(Sys.getpid(), w$pids))
    if (is.null(ref)) ref <- first$value
    ok <- isTRUE(all.equal(as.vector(first$value), as.vector(ref)))
    walls <- first$wall
    if (n <= 3000L && reps > 0L) {
      for (r in seq_len(reps)) walls <- c(walls, system.time(f(X, y, cl))[["elapsed"]])
    }
    foreach::registerDoSEQ()
    release_workers(w, kind)
    rows[[length(rows) + 1L]] <- data.frame(
      n = n, method = m, size_mb = size_mb, first_s = first$wall,
      median_s = stats::median(walls), reps = length(walls),
      extra_mb = first$extra_mb, extra_x = first$extra_mb / size_mb,
      cg_extra_mb = first$cg_extra_mb, cg_extra_x = first$cg_extra_mb / size_mb, correct = ok)
    cat(sprintf("n=%d %-22s first %.3fs median %.3fs (%d) extra %.0f MB (%.2f x X) cgroup %.0f MB (%.2f x X) %s\n",
                n, m, first$wall, stats::median(walls), length(walls), first$extra_mb,
                first$extra_mb / size_mb, first$cg_extra_mb, first$cg_extra_mb / size_mb,
                if (ok) "" else "WRONG RESULT"))
  }
  foreach::registerDoSEQ()
  rm(X, y, ref)
  clear_shares()
}
res <- do.call(rbind, rows)
for (n in unique(res$n)) {
  ser <- res$median_s[res$n == n & res$method == "serial apply"]
  res$x_serial[res$n == n] <- res$median_s[res$n == n] / ser
}

## ---- (b) per-call overhead -----------------------------------------------
Xs <- matrix(rnorm(100), 10)
invisible(fresh_workers("pool"))
cl <- fresh_workers("psock")$cl
per_call <- function(expr, N = 300L) {
  expr <- substitute(expr)
  env <- parent.frame()
  for (i in 1:20) eval(expr, env)
  t <- vapply(1:5, function(k) system.time(for (i in seq_len(N)) eval(expr, env))[["elapsed"]] / N, 0)
  stats::median(t) * 1000
}
ov <- data.frame(
  call = c("memApply(X10, 2, sum), pageshare pool",
           "parApply(cl, X10, 2, sum), parallel cluster"),
  ms = c(per_call(memApply(Xs, 2, sum)),
         per_call(parallel::parApply(cl, Xs, 2, sum))))
print(ov)

## ---- (c) many tiny iterations ----------------------------------------------
# foreach(i = 1:2000) %dopar% sqrt(i) against shm_map() on the same workers
# (pageshare's pool) and against doParallel on a PSOCK cluster, interleaved.
registerDoShm(cores = workers)
tiny <- list(
  "foreach %dopar%, registerDoShm" = function() foreach(i = 1:2000) %dopar% sqrt(i),
  "shm_map, same pool" = function() shm_map(1:2000, sqrt),
  "foreach %dopar%, registerDoShm, chunk.size = 1" = function()
    foreach(i = 1:2000, .options.shm = list(chunk.size = 1)) %dopar% sqrt(i),
  "foreach %dopar%, doParallel" = function() {
    registerDoParallel(cl)
    on.exit(registerDoShm(cores = workers))
    foreach(i = 1:2000) %dopar% sqrt(i)
  })
for (f in tiny) invisible(f())
# (a clock with microsecond resolution: system.time()'s milliseconds are too
# coarse for calls of a few)
elapsed <- function(f) { t0 <- Sys.time(); f(); as.numeric(Sys.time() - t0, units = "secs") }
tiny_runs <- 21L
tiny_t <- matrix(NA_real_, tiny_runs, length(tiny), dimnames = list(NULL, names(tiny)))
for (r in seq_len(tiny_runs)) for (k in names(tiny)) tiny_t[r, k] <- elapsed(tiny[[k]])
tiny_med <- apply(tiny_t, 2, stats::median)
print(tiny_med)
foreach::registerDoSEQ()

## ---- report -------------------------------------------------------------
fmt <- function(x, d = 3) formatC(x, format = "f", digits = d)
lines <- c(
  "# foreach / memApply benchmark",
  "",
  sprintf("Generated by `inst/benchmarks/bench-foreach.R` on %s; R %s, %d workers, %d cores, load average at start %s.",
          format(Sys.time(), "%Y-%m-%d %H:%M"), getRversion(), workers, parallel::detectCores(),
          paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")),
  "",
  "(a) `cor(X[, j], y)` for every column j of an n x n double matrix. foreach variants iterate",
  "over 8 column chunks (`splitIndices`) with X exported automatically. `first` = first call",
  "(for pageshare it includes copying X into shared memory; the identity cache is cleared",
  "before each method), `median` = median over the first call and repetitions (only n <= 3000).",
  "`extra` = peak of the sum of PSS over master + all worker processes during the first call,",
  "minus that sum just before it (sampled every 50 ms from /proc/PID/smaps_rollup).",
  "`cgroup extra` = peak usage of a memory cgroup holding master and workers during the first",
  "call minus its usage just before (kernel-kept peak; also counts shared-memory pages that no",
  "process maps, which PSS misses). 4 GB of memory are pre-faulted first (warm-memory.R).",
  "",
  "| n | X (MB) | method | first (s) | median (s) | runs | median / serial | extra PSS (MB) | extra PSS / size(X) | cgroup extra (MB) | cgroup extra / size(X) | same result |",
  "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
  sprintf("| %d | %.0f | %s | %s | %s | %d | %s | %.0f | %s | %.0f | %s | %s |", res$n, res$size_mb, res$method,
          fmt(res$first_s), fmt(res$median_s), res$reps, fmt(res$x_serial, 2), res$extra_mb,
          fmt(res$extra_x, 2), res$cg_extra_mb, fmt(res$cg_extra_x, 2), ifelse(res$correct, "yes", "NO")),
  "",
  "(b) Per-call overhead, 10 x 10 double matrix, warm workers (median of 5 x 300 calls):",
  "",
  "| call | ms per call |",
  "|---|---:|",
  sprintf("| %s | %s |", ov$call, fmt(ov$ms, 2)),
  "",
  sprintf("(c) 2000 tiny iterations (`sqrt(i)`), 2 workers, median of %d interleaved runs:", tiny_runs),
  "",
  "| call | ms | / shm_map on the same pool |",
  "|---|---:|---:|",
  sprintf("| %s | %s | %s |", names(tiny_med), fmt(tiny_med * 1000, 1),
          fmt(tiny_med / tiny_med[["shm_map, same pool"]], 1)),
  ""
)
dir.create(dirname(out_file), recursive = TRUE, showWarnings = FALSE)
writeLines(lines, out_file)
cat(lines, sep = "\n")

## ---- cleanup (on.exit does not run at top level of a script) ----------------
unlink(ctl_file)                      # stops the sampler loop
foreach::registerDoSEQ()
parallel::stopCluster(cl)
stop_workers()
clear_shares()
cgroup_leave()
