#!/usr/bin/env Rscript
# The per-call costs the test suite checks by their causes (TCP_NODELAY, no
# process start on a warm call, an O(1) identity-cache check per share), as
# times: medians of interleaved rounds in one process, 2 workers.
#
#   Rscript inst/benchmarks/bench-overheads.R [rounds, default 15]
#
# - a trivial future (value(future(1))), plan(shm_multisession) and
#   plan(multisession), alternating;
# - a warm memApply() of a 10 x 10 matrix;
# - a 16 KB reply from a pool worker;
# - share() of a small vector with 1000 and with 4000 entries in the identity
#   cache (the cost must not grow with the cache);
# - share() of a new vector of 1 MiB (the default threshold, so the smallest
#   that is shared alone: its fixed costs weigh most).
suppressPackageStartupMessages({ library(pageshare); library(future) })
rounds <- as.integer(commandArgs(trailingOnly = TRUE)[1]); if (is.na(rounds)) rounds <- 15L
ms <- function(expr) { t0 <- proc.time()[["elapsed"]]; force(expr); (proc.time()[["elapsed"]] - t0) * 1000 }
cat(sprintf("R %s, future %s, %d rounds, load average %s\n", getRversion(), packageVersion("future"), rounds,
            paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))

# Trivial futures, the two plans interleaved (a plan change starts new
# workers: three untimed futures warm them first).
times <- list(shm_multisession = numeric(), multisession = numeric())
for (r in seq_len(rounds)) {
  for (p in names(times)) {
    if (p == "shm_multisession") plan(shm_multisession, workers = 2) else plan(multisession, workers = 2)
    for (i in 1:3) value(future(1))
    times[[p]] <- c(times[[p]], median(vapply(1:5, function(i) ms(value(future(1))), 0)))
  }
}
plan(sequential)
for (p in names(times)) cat(sprintf("trivial future, %-16s median %6.2f ms\n", p, median(times[[p]])))
cat(sprintf("ratio shm_multisession / multisession: %.2f\n", median(times$shm_multisession) / median(times$multisession)))

# The pool: a warm memApply() and a 16 KB reply.
X <- matrix(rnorm(100), 10)
for (i in 1:5) memApply(X, 2, sum, MAX.CORES = 2)
cat(sprintf("warm memApply() of 10 x 10: median %.2f ms\n",
            median(replicate(rounds, ms(memApply(X, 2, sum, MAX.CORES = 2))))))
cat(sprintf("16 KB reply from a pool worker: median %.2f ms\n",
            median(replicate(rounds, ms(shm_value(shm_call(function(n) runif(n), 2000)))))))
stop_workers()

# share() with a small and a large identity cache.
forget_shared(); invisible(gc())
src <- lapply(seq_len(4000), function(i) as.double(i + 1:16))
views <- vector("list", length(src))
per_share <- function(idx) ms(for (i in idx) views[[i]] <<- share(src[[i]])) / length(idx) * 1000
first <- per_share(1:1000)
invisible(per_share(1001:3000))
last <- per_share(3001:4000)
cat(sprintf("share() of a small vector: %.1f us with < 1000 cached, %.1f us with 3000-4000 cached (ratio %.2f)\n",
            first, last, last / first))
rm(views, src); forget_shared(); invisible(gc())

# share() of new 1 MiB vectors (made before the clock starts), 50 per round.
per_new <- replicate(rounds, {
  vs <- lapply(1:50, function(i) runif(2^17))
  t <- ms(for (v in vs) share(v)) / 50 * 1000
  rm(vs); invisible(gc())
  t
})
cat(sprintf("share() of a new 1 MiB vector: median %.0f us\n", median(per_new)))
