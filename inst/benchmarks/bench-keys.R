#!/usr/bin/env Rscript
# Two outer workers on one host, each holding X, as when two outer workers of
# a nested plan (or two jobs) land on the same machine: plan(list(cluster of 2
# on localhost, shm_multisession of 2)), X crossing to each outer worker as
# plain data. Each outer future shares X, either as it always does
# (share(X)) or with its content key (share(X, key = TRUE)), waits until both
# hold it, then runs future_sapply() over its half of the columns on its inner
# workers; a third case sends no X at all (the processes' own memory).
# Measured, in a memory cgroup (v1) of its own per case, in a fresh R process:
# the memory the whole process tree uses while both outer workers hold X
# (above the session with X made), and the peak. Cases interleaved over
# rounds. Needs root (cgroups); run from the package's source folder.
#
#   Rscript inst/benchmarks/bench-keys.R [MB of X, default 400] [rounds, default 3]
args <- suppressWarnings(as.numeric(commandArgs(trailingOnly = TRUE)))
mb <- if (length(args) >= 1 && !is.na(args[1])) args[1] else 400
rounds <- if (length(args) >= 2 && !is.na(args[2])) as.integer(args[2]) else 3L
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
invisible(cgroup_v1_base())

case_code <- function(mode) c(
  "suppressPackageStartupMessages({library(future); library(future.apply); library(pageshare)})",
  sprintf("n <- 4000L; p <- as.integer(%f * 2^20 / 8 / n); X <- matrix(rnorm(n * p), n)", mb),
  "y <- rnorm(n); invisible(gc())",
  "cg <- Sys.getenv('CASE_CGROUP'); sync <- Sys.getenv('CASE_SYNC')",
  "usage <- function(f) as.numeric(readLines(file.path(cg, f)))",
  "writeLines('0', file.path(cg, 'memory.max_usage_in_bytes')); before <- usage('memory.usage_in_bytes')",
  "plan(list(tweak(cluster, workers = rep('localhost', 2)), tweak(shm_multisession, workers = 2)))",
  "halves <- split(seq_len(p), rep(1:2, length.out = p))",
  "t0 <- Sys.time()",
  "fs <- lapply(halves, function(cols) future({",
  switch(mode, keyed = "  Xs <- pageshare::share(X, key = TRUE)", plain = "  Xs <- pageshare::share(X)",
         none = "  Xs <- matrix(0, 1, 1)"),
  "  file.create(file.path(sync, paste0('held-', Sys.getpid())))",
  "  while (!file.exists(file.path(sync, 'measured'))) Sys.sleep(0.02)",
  if (mode == "none") "  NULL" else "  future.apply::future_sapply(cols, function(j) cor(Xs[, j], y))",
  "}, packages = 'pageshare'))",
  "while (length(list.files(sync, '^held-')) < 2) Sys.sleep(0.02)",
  "held <- usage('memory.usage_in_bytes')",
  "file.create(file.path(sync, 'measured'))",
  "r <- lapply(fs, value)",
  "t <- as.numeric(Sys.time() - t0, units = 'secs')",
  "peak <- usage('memory.max_usage_in_bytes')",
  if (mode != "none") "stopifnot(isTRUE(all.equal(unname(unlist(r))[order(unlist(halves))], as.vector(cor(X, y)))))",
  "plan(sequential)",
  "cat(sprintf('RESULT %.3f %.1f %.1f %.1f\\n', t, (held - before) / 2^20, (peak - before) / 2^20, object.size(X) / 2^20))")

run_case <- function(label) {
  sync <- tempfile("keys-sync-")
  dir.create(sync)
  on.exit(unlink(sync, recursive = TRUE), add = TRUE)
  v <- run_in_cgroup(paste0("keys-", label), case_code(label), env = paste0("CASE_SYNC=", sync))
  data.frame(case = label, seconds = v[1], held_mb = v[2], peak_mb = v[3], x_mb = v[4])
}

res <- NULL
cases <- c("plain", "keyed", "none")
for (round in seq_len(rounds)) {
  for (label in cases[(seq_along(cases) + round - 2L) %% 3L + 1L]) res <- rbind(res, cbind(round = round, run_case(label)))
}
med <- aggregate(cbind(seconds, held_mb, peak_mb) ~ case, res, median)
cat(sprintf("Run: %s, %s, %d cores, R %s, future %s, pageshare %s; X %.0f MB; %d rounds, medians\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), utils::sessionInfo()$running, parallel::detectCores(),
            getRversion(), utils::packageVersion("future"), utils::packageVersion("pageshare"), res$x_mb[1], rounds))
cat("plan(list(tweak(cluster, workers = rep('localhost', 2)), tweak(shm_multisession, workers = 2))),\n")
cat("each outer future shares X and waits until both hold it, then future_sapply() over its half\n")
for (i in seq_len(nrow(med))) {
  m <- med[i, ]
  what <- c(keyed = "share(X, key = TRUE)", plain = "share(X)            ", none = "no X (their own)    ")[[m$case]]
  cat(sprintf("  %s  %6.2f s   both holding X: +%6.0f MB (%.2f x X)   peak +%6.0f MB (%.2f x X)\n", what,
              m$seconds, m$held_mb, m$held_mb / res$x_mb[1], m$peak_mb, m$peak_mb / res$x_mb[1]))
}
