#!/usr/bin/env Rscript
# The cost of one trivial future, `value(future(1))`, under plan(sequential)
# (future's own work), plan(multisession) and plan(shm_multisession), side by
# side in one R session: rounds interleaved (each round sets each plan up and
# times `calls` futures one at a time), medians over every call of a plan.
# With a library holding another build of pageshare (LIB_BEFORE, installed
# with `R CMD INSTALL -l LIB_BEFORE .` at the commit to compare), the same
# rounds of shm_multisession also run in a child R session loading that
# build, at the same time of day (interleaved with ours).
#   Rscript inst/benchmarks/bench-future-value.R [calls = 200] [rounds = 5] [LIB_BEFORE]
suppressPackageStartupMessages({ library(future); library(pageshare) })
args <- commandArgs(trailingOnly = TRUE)
calls <- if (length(args) >= 1) as.integer(args[1]) else 200L
rounds <- if (length(args) >= 2) as.integer(args[2]) else 5L
before_lib <- if (length(args) >= 3) args[3] else NA_character_

time_calls <- function(n) {
  vapply(seq_len(n), function(i) {
    # (Sys.time(): microseconds; proc.time() counts milliseconds)
    t0 <- as.numeric(Sys.time())
    future::value(future::future(1))
    as.numeric(Sys.time()) - t0
  }, numeric(1))
}

# One round of shm_multisession from LIB_BEFORE, in a child R session.
before_round <- function(n) {
  code <- sprintf(paste0(
    "suppressPackageStartupMessages({library(future); library(pageshare, lib.loc = '%s')});",
    "plan(shm_multisession, workers = 2); invisible(value(future(1)));",
    "t <- vapply(seq_len(%d), function(i) { t0 <- as.numeric(Sys.time()); value(future(1));",
    "as.numeric(Sys.time()) - t0 }, 0); plan(sequential); cat(t, sep = '\\n')"), before_lib, n)
  out <- system2(file.path(R.home("bin"), "Rscript"), c("-e", shQuote(code)), stdout = TRUE)
  suppressWarnings(as.numeric(out[!is.na(suppressWarnings(as.numeric(out)))]))
}

source(file.path("inst", "benchmarks", "future-rounds.R"))
add_before <- function(times) {
  name <- "shm_multisession (before)"
  times[[name]] <- rbind(times[[name]], as.matrix(before_round(calls)))
  times
}
times <- interleave_future_plans(rounds, calls, time_calls, each_round = if (!is.na(before_lib)) add_before)
seq_ms <- 1000 * median(times$sequential)
cat(sprintf("R %s, future %s, pageshare %s; %d rounds x %d calls, medians; load average %s\n", getRversion(),
            packageVersion("future"), packageVersion("pageshare"), rounds, calls,
            paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
for (name in names(times)) {
  ms <- 1000 * median(times[[name]])
  cat(sprintf("  %-28s %7.3f ms  %5.2f x sequential\n", name, ms, ms / seq_ms))
}
