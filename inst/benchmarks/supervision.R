#!/usr/bin/env Rscript
# How fast pageshare's pool notices what it must not be fooled by:
# - kill -9 of a master whose forked child (mcparallel()) is alive and holds
#   the master's ends of the workers' sockets: the time from the kill until
#   each worker is gone (a zombie counts as gone), one worker idle and one in
#   a long task, both mapping a shared object of 100 MB;
# - start_workers(2) alone, and with 30 silent connections of the same user
#   made to the pool's address while it starts.
# Medians and maxima over rounds.
#
#   Rscript inst/benchmarks/supervision.R [rounds, default 5]
suppressPackageStartupMessages(library(pageshare))
rounds <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)[1])); if (is.na(rounds)) rounds <- 5L
cat(sprintf("R %s, %d rounds, %d cores, load average %s\n", getRversion(), rounds,
            parallel::detectCores(), paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))

start_time <- function(pid) .Call(pageshare:::ps_process_start_time, as.integer(pid))
gone <- function(pid, start) {
  now <- start_time(pid)
  is.na(now) || now != start || pageshare:::process_gone(pid)
}

master <- function(dir, libs) {
  .libPaths(libs)
  suppressPackageStartupMessages(library(pageshare))
  x <- share(as.double(seq_len(100 * 2^17)))  # 100 MB
  start_workers(2L)
  invisible(shm_map(1:2, function(i, x) sum(x), x = x))
  busy <- shm_call(function(x) { s <- sum(x); Sys.sleep(60); s }, x)
  child <- parallel::mcparallel(Sys.sleep(60))
  Sys.sleep(0.5)
  writeLines(format(c(Sys.getpid(), pageshare:::pool_pids(), child$pid)), file.path(dir, "pids.tmp"))
  file.rename(file.path(dir, "pids.tmp"), file.path(dir, "pids"))
  Sys.sleep(60)
}
environment(master) <- globalenv()

delays <- numeric()
for (r in seq_len(rounds)) {
  dir <- tempfile("supervision-")
  dir.create(dir)
  p <- callr::r_bg(master, args = list(dir = dir, libs = .libPaths()), libpath = .libPaths())
  while (!file.exists(file.path(dir, "pids"))) Sys.sleep(0.02)
  pids <- as.integer(readLines(file.path(dir, "pids")))
  starts <- vapply(pids, start_time, 0)
  tools::pskill(pids[1], tools::SIGKILL)
  killed <- Sys.time()
  seen <- rep(NA_real_, 2)
  while (anyNA(seen) && Sys.time() < killed + 30) {
    for (i in which(is.na(seen))) if (gone(pids[i + 1], starts[i + 1])) seen[i] <- as.numeric(Sys.time() - killed)
    Sys.sleep(0.002)
  }
  if (!gone(pids[4], starts[4])) tools::pskill(pids[4], tools::SIGKILL)
  for (i in 2:3) if (!gone(pids[i], starts[i])) tools::pskill(pids[i], tools::SIGKILL)
  p$wait(5000)
  unlink(dir, recursive = TRUE)
  delays <- c(delays, seen)
}
cat(sprintf("workers gone after kill -9 of a master with a live fork: median %.0f ms, max %.0f ms (%d workers, %d not gone within 30 s)\n",
            1000 * median(delays, na.rm = TRUE), 1000 * max(delays, na.rm = TRUE), length(delays), sum(is.na(delays))))

# Silent connections while the pool starts: a helper finds the pool's
# abstract address in /proc/net/unix and connects `n` times without a word.
knocker <- function(n) {
  code <- sprintf(paste(
    "import socket, time",
    "prefix = '@pageshare-pool-%d-'",
    "held = []",
    "end = time.time() + 30",
    "while time.time() < end and len(held) < %d:",
    "    names = [w for l in open('/proc/net/unix') for w in l.split() if w.startswith(prefix)]",
    "    if names:",
    "        for i in range(%d):",
    "            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
    "            s.connect('\\0' + names[0][1:])",
    "            held.append(s)",
    "    time.sleep(0.001)",
    "print(len(held), flush=True)",
    "time.sleep(30)", sep = "\n"), Sys.getpid(), n, n)
  processx::process$new("python3", c("-c", code), stdout = "|")
}
have_python <- nzchar(Sys.which("python3"))
plain <- silent <- numeric()
for (r in seq_len(rounds)) {
  stop_workers()
  t <- Sys.time(); start_workers(2); plain <- c(plain, as.numeric(Sys.time() - t))
  if (!have_python) next
  stop_workers()
  k <- knocker(30)
  Sys.sleep(0.3)  # (python is running and scanning)
  t <- Sys.time(); start_workers(2); silent <- c(silent, as.numeric(Sys.time() - t))
  k$poll_io(5000)
  made <- as.integer(k$read_output_lines())
  k$kill()
  if (!identical(made, 30L)) cat("(round", r, ": the helper made", made, "connections)\n")
}
stop_workers()
cat(sprintf("start_workers(2): median %.2f s alone; %s with 30 silent connections\n", median(plain),
            if (length(silent)) sprintf("median %.2f s, max %.2f s", median(silent), max(silent)) else "(no python3)"))
