#!/usr/bin/env Rscript
# A pool of 150 workers (more than R's connection table allows PSOCK: the pool
# uses no R connection) starts, runs a map on all of them, stops, and leaves
# no process behind. Prints the times and exits non-zero if anything is left.
#
#   Rscript inst/benchmarks/pool-150-workers.R [workers, default 150]
suppressPackageStartupMessages(library(pageshare))
n <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)[1])); if (is.na(n)) n <- 150L
secs <- function(t0) as.numeric(Sys.time() - t0, units = "secs")
cat(sprintf("R %s, %d cores, load average %s\n", getRversion(), parallel::detectCores(),
            paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
t0 <- Sys.time()
# (far more workers than cores on purpose: I(n) skips parallelly's limit on
# local workers, which start_workers() applies)
pids <- start_workers(I(n))
cat(sprintf("started %d workers in %.1f s\n", length(pids), secs(t0)))
t0 <- Sys.time()
# (each element sleeps a little, so that every worker gets some)
seen <- unlist(shm_map(seq_len(10 * n), function(i) { Sys.sleep(0.02); Sys.getpid() }))
cat(sprintf("map of %d elements in %.1f s, run by %d distinct workers\n", 10 * n, secs(t0), length(unique(seen))))
t0 <- Sys.time()
stop_workers()
gone <- pageshare:::wait_processes_gone(pids, 30)
cat(sprintf("stopped in %.2f s; processes left: %d\n", secs(t0), sum(!gone)))
ok <- all(gone) && length(unique(seen)) == n && all(seen %in% pids)
cat(if (ok) "OK\n" else "FAILED\n")
quit(status = if (ok) 0L else 1L)
