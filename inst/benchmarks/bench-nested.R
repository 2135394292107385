#!/usr/bin/env Rscript
# Nested plans, as on several hosts: 2 outer workers x 2 inner workers each,
# future_lapply() over the columns of X (each outer worker takes half of the
# columns and spreads them over its inner workers). Outer level: a `cluster`
# plan on localhost (standing in for 2 hosts), or future.batchtools' local
# backend (a job per outer future, as on a scheduler); inner level
# multisession against shm_multisession. Cases interleaved over rounds, each
# in a fresh R process in a memory cgroup (v1) of its own: wall time and the
# cgroup peak of the whole process tree above the session with X made (X
# crosses to each outer worker as plain data in every case). Needs root
# (cgroups).
#
#   Rscript inst/benchmarks/bench-nested.R [MB of X, default 400] [rounds, default 3]
args <- suppressWarnings(as.numeric(commandArgs(trailingOnly = TRUE)))
mb <- if (length(args) >= 1 && !is.na(args[1])) args[1] else 400
rounds <- if (length(args) >= 2 && !is.na(args[2])) as.integer(args[2]) else 3L
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
invisible(cgroup_v1_base())

outers <- c(cluster = "tweak(cluster, workers = rep('localhost', 2))")
if (requireNamespace("future.batchtools", quietly = TRUE)) outers["batchtools"] <- "future.batchtools::batchtools_local"

case_code <- function(outer, inner) c(
  "suppressPackageStartupMessages({library(future); library(future.apply); library(pageshare)})",
  sprintf("n <- 4000L; p <- as.integer(%f * 2^20 / 8 / n); X <- matrix(rnorm(n * p), n)", mb),
  "y <- rnorm(n); invisible(gc())",
  "cg <- Sys.getenv('CASE_CGROUP')",
  "usage <- function(f) as.numeric(readLines(file.path(cg, f)))",
  "writeLines('0', file.path(cg, 'memory.max_usage_in_bytes')); before <- usage('memory.usage_in_bytes')",
  sprintf("plan(list(%s, tweak(%s, workers = 2)))", outers[[outer]], inner),
  "halves <- split(seq_len(p), rep(1:2, length.out = p))",
  "t <- system.time(r <- future_lapply(halves, function(cols) future_sapply(cols, function(j) cor(X[, j], y))))[['elapsed']]",
  "peak <- usage('memory.max_usage_in_bytes')",
  "stopifnot(isTRUE(all.equal(unname(unlist(r))[order(unlist(halves))], as.vector(cor(X, y)))))",
  "plan(sequential)",
  "cat(sprintf('RESULT %.3f %.1f %.1f\\n', t, (peak - before) / 2^20, object.size(X) / 2^20))")

run_case <- function(outer, inner) {
  # (in a folder of its own: batchtools keeps its registry in ./.future)
  wd <- tempfile("nested-case-")
  dir.create(wd)
  on.exit(unlink(wd, recursive = TRUE), add = TRUE)
  v <- run_in_cgroup(paste("nested", outer, inner, sep = "-"), case_code(outer, inner), dir = wd)
  data.frame(outer = outer, inner = inner, seconds = v[1], peak_mb = v[2], x_mb = v[3])
}

res <- NULL
for (round in seq_len(rounds)) {
  inners <- if (round %% 2) c("multisession", "shm_multisession") else c("shm_multisession", "multisession")
  for (outer in names(outers)) for (inner in inners) res <- rbind(res, cbind(round = round, run_case(outer, inner)))
}
med <- aggregate(cbind(seconds, peak_mb) ~ outer + inner, res, median)
cat(sprintf("Run: %s, %s, %d cores, R %s, future %s, pageshare %s; X %.0f MB; %d rounds, medians\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), utils::sessionInfo()$running, parallel::detectCores(),
            getRversion(), utils::packageVersion("future"), utils::packageVersion("pageshare"), res$x_mb[1], rounds))
cat("plan(list(<outer>, tweak(<inner>, workers = 2))), 2 outer futures, future_lapply() over the columns of X in each\n")
for (outer in names(outers)) {
  m <- med[med$outer == outer, ]
  cat(sprintf("outer: %s\n", outers[[outer]]))
  for (i in seq_len(nrow(m))) {
    cat(sprintf("  inner %-17s %6.2f s   peak of the process tree +%6.0f MB (%.2f x X)\n", m$inner[i],
                m$seconds[i], m$peak_mb[i], m$peak_mb[i] / res$x_mb[1]))
  }
  cat(sprintf("  peak, shm_multisession / multisession inside: %.2f\n",
              m$peak_mb[m$inner == "shm_multisession"] / m$peak_mb[m$inner == "multisession"]))
}
