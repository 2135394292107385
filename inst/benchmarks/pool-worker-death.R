#!/usr/bin/env Rscript
# What a dead worker and a dead master cost on pageshare's pool, in time:
# - kill -9 of a worker in the middle of a task: the time from the kill to
#   the pageshare_worker_died error in the master, whether the pool is back to
#   full size and the next map is correct;
# - kill -9 of a master whose workers are idle, and one whose worker is in a
#   long task: the time until every worker is gone.
# Medians over rounds.
#
#   Rscript inst/benchmarks/pool-worker-death.R [rounds, default 7]
suppressPackageStartupMessages(library(pageshare))
rounds <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)[1])); if (is.na(rounds)) rounds <- 7L
now <- function() as.numeric(Sys.time())
cat(sprintf("R %s, %d rounds, load average %s\n", getRversion(), rounds,
            paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))

# A worker killed mid-task; the killer notes when it sent the signal.
start_workers(2)
delays <- numeric()
ok <- TRUE
for (r in seq_len(rounds)) {
  stamp <- tempfile()
  task <- shm_call(function(f) { writeLines(format(Sys.getpid()), f); Sys.sleep(60) }, stamp)
  while (!file.exists(stamp) || !length(readLines(stamp, warn = FALSE))) Sys.sleep(0.005)
  pid <- as.integer(readLines(stamp))
  killed_at <- tempfile()
  system2("sh", c("-c", shQuote(sprintf("sleep 0.1; date +%%s.%%N > %s; kill -9 %d", killed_at, pid))), wait = FALSE)
  e <- tryCatch(shm_value(task), error = function(e) e)
  got_at <- now()
  delays <- c(delays, (got_at - as.numeric(readLines(killed_at))) * 1000)
  # (the next call finds the pool whole again: a new worker in the dead one's slot)
  ok <- ok && inherits(e, "pageshare_worker_died") && grepl(as.character(pid), conditionMessage(e)) &&
    identical(unlist(shm_map(1:100, function(i) i * 2L)), 1:100 * 2L) &&
    all(.Call(pageshare:::ps_pool_pids) > 0L) && !pid %in% .Call(pageshare:::ps_pool_pids)
  unlink(c(stamp, killed_at))
}
stop_workers()
cat(sprintf("worker killed mid-task: error after median %.1f ms (max %.1f); pool whole and next map right: %s\n",
            median(delays), max(delays), ok))

# A master killed: every worker gone within how long?
master_death <- function(busy) {
  pidfile <- tempfile()
  script <- tempfile(fileext = ".R")
  writeLines(c("library(pageshare)", "start_workers(2)",
               if (busy) "t <- shm_call(function() Sys.sleep(600))",
               sprintf("writeLines(format(.Call(pageshare:::ps_pool_pids)), '%s')", pidfile),
               "Sys.sleep(600)"), script)
  master <- system2(file.path(R.home("bin"), "Rscript"), script, wait = FALSE)
  while (!file.exists(pidfile) || length(readLines(pidfile, warn = FALSE)) < 2) Sys.sleep(0.01)
  Sys.sleep(0.3)   # (the long task has begun)
  workers <- as.integer(readLines(pidfile))
  # The master is the parent of its workers.
  mpid <- as.integer(strsplit(readLines(sprintf("/proc/%d/stat", workers[1])), " ")[[1]][4])
  t0 <- now()
  tools::pskill(mpid, tools::SIGKILL)
  while (!all(pageshare:::wait_processes_gone(workers, 0))) Sys.sleep(0.001)
  unlink(c(pidfile, script))
  (now() - t0) * 1000
}
for (busy in c(FALSE, TRUE)) {
  t <- vapply(seq_len(rounds), function(i) master_death(busy), 0)
  cat(sprintf("master killed, workers %s: all gone after median %.1f ms (max %.1f)\n",
              if (busy) "one in a long task" else "idle", median(t), max(t)))
}
