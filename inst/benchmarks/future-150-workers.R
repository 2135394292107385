#!/usr/bin/env Rscript
# plan(shm_multisession, workers = 150) on future >= 1.40 (more workers than
# R's connection table allows multisession: the pool uses no R connection):
# 150 futures in flight run on 150 distinct workers (each checks in and waits
# until all have: futures queued behind others could never all check in),
# and plan(sequential) leaves no process. Prints the times; exits non-zero if
# anything fails or is left.
#
#   Rscript inst/benchmarks/future-150-workers.R [workers, default 150]
suppressPackageStartupMessages({ library(future); library(pageshare) })
if (packageVersion("future") < "1.40.0") stop("needs future >= 1.40 (the FutureBackend API)")
n <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)[1])); if (is.na(n)) n <- 150L
secs <- function(t0) as.numeric(Sys.time() - t0, units = "secs")
cat(sprintf("R %s, future %s, %d cores, load average %s\n", getRversion(), packageVersion("future"),
            parallel::detectCores(), paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
t0 <- Sys.time()
# (I(n): far more workers than cores on purpose, past parallelly's limit on
# local workers, as a user of a large machine would)
plan(shm_multisession, workers = I(n))
pids <- pageshare:::shm_pool$pids
cat(sprintf("plan set, %d workers started in %.1f s\n", length(pids), secs(t0)))
dir <- tempfile("checked-in")
dir.create(dir)
t0 <- Sys.time()
fs <- lapply(seq_len(n), function(i) future({
  file.create(file.path(dir, Sys.getpid()))
  deadline <- Sys.time() + 120
  while (length(list.files(dir)) < n && Sys.time() < deadline) Sys.sleep(0.05)
  c(pid = Sys.getpid(), seen = length(list.files(dir)))
}))
got <- do.call(rbind, lapply(fs, value))
cat(sprintf("%d futures in %.1f s, on %d distinct workers, each saw %d check-ins at least\n",
            n, secs(t0), length(unique(got[, "pid"])), min(got[, "seen"])))
t0 <- Sys.time()
plan(sequential)
gone <- pageshare:::wait_processes_gone(pids, 30)
cat(sprintf("plan(sequential): stopped in %.2f s; processes left: %d\n", secs(t0), sum(!gone)))
unlink(dir, recursive = TRUE)
ok <- all(gone) && length(unique(got[, "pid"])) == n && all(got[, "pid"] %in% pids) && all(got[, "seen"] == n)
cat(if (ok) "OK\n" else "FAILED\n")
quit(status = if (ok) 0L else 1L)
