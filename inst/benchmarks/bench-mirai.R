#!/usr/bin/env Rscript
# mirai on one host: mirai_map() over the columns of X on 2 local daemons,
# X sent to each daemon once with everywhere(), as plain data (mirai's own
# way) against X shared and sent as a handle (share() once, everywhere()
# inside with_handles(), pageshare loaded on the daemons). Each case in a fresh R process in a memory
# cgroup (v1) of its own, interleaved over rounds: wall time of the map and
# the cgroup peak of the whole process tree (session and daemons) above the
# session with X made and the daemons started. Needs root (cgroups) and mirai.
#
#   Rscript inst/benchmarks/bench-mirai.R [MB of X, default 400] [rounds, default 3]
args <- suppressWarnings(as.numeric(commandArgs(trailingOnly = TRUE)))
mb <- if (length(args) >= 1 && !is.na(args[1])) args[1] else 400
rounds <- if (length(args) >= 2 && !is.na(args[2])) as.integer(args[2]) else 3L
if (!requireNamespace("mirai", quietly = TRUE)) stop("needs mirai")
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
invisible(cgroup_v1_base())

case_code <- function(shared) c(
  "suppressPackageStartupMessages({library(mirai); library(pageshare)})",
  "daemons(2); invisible(everywhere(library(pageshare)))",
  sprintf("n <- 4000L; p <- as.integer(%f * 2^20 / 8 / n); X <- matrix(rnorm(n * p), n)", mb),
  "y <- rnorm(n)",
  if (shared) "X <- share(X)",
  "invisible(gc())",
  "cg <- Sys.getenv('CASE_CGROUP')",
  "usage <- function(f) as.numeric(readLines(file.path(cg, f)))",
  "writeLines('0', file.path(cg, 'memory.max_usage_in_bytes')); before <- usage('memory.usage_in_bytes')",
  # X and y go to each daemon once, as mirai's documentation advises (everywhere());
  # mirai_map(.args = ) would send them with every element
  sprintf("send <- function() %s", if (shared) "with_handles(everywhere({}, X = X, y = y))" else "everywhere({}, X = X, y = y)"),
  "t <- system.time({ send(); r <- mirai_map(seq_len(p), function(j) cor(X[, j], y))[] })[['elapsed']]",
  "peak <- usage('memory.max_usage_in_bytes')",
  "stopifnot(isTRUE(all.equal(unlist(r), as.vector(cor(X, y)))))",
  "daemons(0)",
  "cat(sprintf('RESULT %.3f %.1f %.1f\\n', t, (peak - before) / 2^20, 8 * n * p / 2^20))")

run_case <- function(shared) {
  name <- if (shared) "shared" else "plain"
  v <- run_in_cgroup(paste0("mirai-", name), case_code(shared))
  data.frame(case = name, seconds = v[1], peak_mb = v[2], x_mb = v[3])
}

res <- NULL
for (round in seq_len(rounds)) {
  for (shared in if (round %% 2) c(FALSE, TRUE) else c(TRUE, FALSE)) res <- rbind(res, cbind(round = round, run_case(shared)))
}
med <- aggregate(cbind(seconds, peak_mb) ~ case, res, median)
cat(sprintf("Run: %s, %s, %d cores, R %s, mirai %s, pageshare %s; X %.0f MB; %d rounds, medians\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), utils::sessionInfo()$running, parallel::detectCores(),
            getRversion(), utils::packageVersion("mirai"), utils::packageVersion("pageshare"), res$x_mb[1], rounds))
cat("mirai_map() over the columns of X on 2 local daemons\n")
for (i in seq_len(nrow(med))) {
  cat(sprintf("  X %-8s %6.2f s   peak of the process tree +%6.0f MB (%.2f x X)\n", med$case[i], med$seconds[i],
              med$peak_mb[i], med$peak_mb[i] / res$x_mb[1]))
}
