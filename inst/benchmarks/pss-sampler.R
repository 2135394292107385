# Peak memory for the benchmark scripts: the sum of PSS (proportional set size:
# a page shared by k processes counts 1/k in each) over this R process and the
# worker pids it names, read from /proc/PID/smaps_rollup every ~50 ms by a
# separate background R process. (Summed RSS would count shared pages once per
# process; bench::mark's mem_alloc sees only this process's R allocations.)
#
# source() this file, then: set_sampled_pids(pids); m <- measure(expr)
# (m$secs, m$peak_mb, m$base_mb); stop_sampler() at the end. If
# cgroup-memory.R was sourced and cgroup_enter() succeeded, m$cg_base_mb and
# m$cg_peak_mb are the cgroup's usage before and its peak during `expr`.

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
  Sys.sleep(as.numeric(Sys.getenv("PAGESHARE_BENCH_SAMPLE_MS", "50")) / 1000)
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
# (use_pss <- FALSE before source()ing this file: no sampler process, and the
# PSS fields of measure() are NA; the cgroup fields still work.)
if (!exists("use_pss") || isTRUE(use_pss)) {
  system2(file.path(R.home("bin"), "Rscript"),
          c("--vanilla", shQuote(samp_script), Sys.getpid(), shQuote(samp_log), shQuote(samp_stop),
            shQuote(samp_pids)),
          wait = FALSE, stdout = FALSE, stderr = FALSE)
  Sys.sleep(1)
}
read_pss <- function() {
  l <- readLines(samp_log, warn = FALSE)
  l <- l[nzchar(l)]
  if (!length(l)) return(data.frame(t = numeric(), kb = numeric(), n = numeric()))
  m <- do.call(rbind, lapply(strsplit(l, " "), as.numeric))
  data.frame(t = m[, 1], kb = m[, 2], n = m[, 3])
}

# Time `expr` and the peak PSS sum (MB) during it.
measure <- function(expr) {
  # twice: the identity cache lets go of a source at one collection, R frees it
  # at the next
  invisible(gc()); invisible(gc())
  Sys.sleep(0.15)
  cg_base <- if (exists("cgroup_mb")) cgroup_mb() else NA
  if (exists("cgroup_reset_peak")) cgroup_reset_peak()
  t0 <- as.numeric(Sys.time())
  el <- system.time(force(expr))[["elapsed"]]
  cg_peak <- if (exists("cgroup_peak_mb")) cgroup_peak_mb() else NA
  Sys.sleep(0.15)
  t1 <- as.numeric(Sys.time())
  d <- read_pss()
  w <- d[d$t >= t0 & d$t <= t1, ]
  base <- d[d$t < t0, ]
  list(secs = el,
       peak_mb = if (nrow(w)) max(w$kb) / 1024 else NA,
       base_mb = if (nrow(base)) utils::tail(base$kb, 1) / 1024 else NA,
       procs = if (nrow(w)) max(w$n) else NA,
       cg_base_mb = cg_base, cg_peak_mb = cg_peak)
}


# Tell the sampler which worker processes to add to this one.
set_sampled_pids <- function(pids) {
  writeLines(as.character(pids), samp_pids)
  Sys.sleep(0.2)
}

stop_sampler <- function() {
  file.create(samp_stop)
  Sys.sleep(0.2)
  unlink(samp_dir, recursive = TRUE)
}
