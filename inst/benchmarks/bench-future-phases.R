#!/usr/bin/env Rscript
# Where the time of one trivial future, `value(future(1))`, goes under
# plan(sequential), plan(multisession) and plan(shm_multisession), side by
# side in one R session (rounds interleaved; medians over every call of a
# plan). Each future is split at four instants: before future(), when
# future() returns (the future created and launched), and the start and end
# of its evaluation as future's evaluator records them (FutureResult's
# `started` and `finished`, the same clock on a worker of this machine):
#
#   future()       creating the future (its globals) and launching it
#   to start       from future()'s return to the start of its evaluation
#                  (negative when the evaluation runs inside future(), as
#                  under plan(sequential))
#   evaluation     future's evaluator, on the worker or in this session
#   to value()     from the end of the evaluation to value()'s return (the
#                  result sent, read and collected)
#
# Then the evaluation alone: future's evaluator run on one future's data in
# this session, and on a worker of the pool (through shm_call()) called back
# to back or after this session kept busy for 2 or 20 ms, as it is while it
# creates the next future: how much slower a worker that waited for its work
# evaluates (future >= 1.40).
#
#   Rscript inst/benchmarks/bench-future-phases.R [calls = 300] [rounds = 5]
suppressPackageStartupMessages({ library(future); library(pageshare) })
args <- commandArgs(trailingOnly = TRUE)
calls <- if (length(args) >= 1) as.integer(args[1]) else 300L
rounds <- if (length(args) >= 2) as.integer(args[2]) else 5L

phases <- c("future()", "to start", "evaluation", "to value()", "total")

time_phases <- function(n) {
  t(vapply(seq_len(n), function(i) {
    t0 <- as.numeric(Sys.time())
    f <- future::future(1)
    t1 <- as.numeric(Sys.time())
    future::value(f)
    t2 <- as.numeric(Sys.time())
    r <- future::result(f)
    started <- as.numeric(r[["started"]])
    finished <- as.numeric(r[["finished"]])
    c(t1 - t0, started - t1, finished - started, t2 - finished, t2 - t0)
  }, numeric(length(phases))))
}

source(file.path("inst", "benchmarks", "future-rounds.R"))
times <- interleave_future_plans(rounds, calls, time_phases, warm = 10L)
cat(sprintf("R %s, future %s, pageshare %s; %d rounds x %d calls, medians (ms); load average %s\n",
            getRversion(), packageVersion("future"), packageVersion("pageshare"), rounds, calls,
            paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
out <- t(vapply(times, function(m) 1000 * apply(m, 2, median), numeric(length(phases))))
colnames(out) <- phases
print(round(out, 3))
seq_total <- out["sequential", "total"]
cat(sprintf("\ntotal / sequential: %s\n",
            paste(sprintf("%s %.2f x", rownames(out), out[, "total"] / seq_total), collapse = ", ")))

# ---- the evaluation alone ------------------------------------------------------
# (future >= 1.40: future < 1.40 evaluates an expression of its own instead)
if (packageVersion("future") < "1.40.0") quit(save = "no")
evalFuture <- pageshare:::foreign_internal("future", "evalFuture")
getFutureData <- pageshare:::foreign_internal("future", "getFutureData")
evaluate_once <- function(data, evalFuture) {
  t0 <- as.numeric(Sys.time())
  evalFuture(data)
  as.numeric(Sys.time()) - t0
}
busy <- function(seconds) {
  t0 <- as.numeric(Sys.time())
  while (as.numeric(Sys.time()) - t0 < seconds) NULL
}
plan(shm_multisession, workers = 2)
data <- getFutureData(future(1, lazy = TRUE), mc.cores = 1L)
gaps <- c(0, 0.002, 0.02)
eval_times <- list()
for (r in seq_len(rounds)) {
  eval_times[["in this session"]] <- c(eval_times[["in this session"]],
                                       vapply(seq_len(calls), function(i) evaluate_once(data, evalFuture), 0))
  for (gap in gaps) {
    name <- sprintf("on a worker, %g ms after the last", 1000 * gap)
    eval_times[[name]] <- c(eval_times[[name]], vapply(seq_len(calls), function(i) {
      busy(gap)
      shm_value(shm_call(evaluate_once, data, evalFuture))
    }, 0))
  }
}
plan(sequential)
cat("\nfuture's evaluator on one future's data (ms, medians):\n")
for (name in names(eval_times)) cat(sprintf("  %-36s %6.3f\n", name, 1000 * median(eval_times[[name]])))
