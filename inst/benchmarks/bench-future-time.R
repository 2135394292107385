#!/usr/bin/env Rscript
# Wall time only (no memory sampler: on 2 cores the PSS sampler process takes
# ~0.2-0.3 s of CPU from a ~1.5 s run), n = 8000 by default, median of 5:
# sequential vs shm_multisession with X shared on the fly and beforehand.
#   Rscript inst/benchmarks/bench-future-time.R [n]
suppressPackageStartupMessages({ library(future); library(future.apply); library(pageshare) })
n <- as.integer(commandArgs(trailingOnly = TRUE)[1]); if (is.na(n)) n <- 8000L
options(future.globals.maxSize = +Inf)
source(file.path("inst", "benchmarks", "warm-memory.R")); warm_memory(4096)
set.seed(1); X <- matrix(rnorm(as.double(n) * n), n); y <- rnorm(n)
run <- function() system.time(future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))[["elapsed"]]
plan(sequential); seq_t <- median(replicate(5, run()))
plan(shm_multisession, workers = 2); invisible(future_lapply(1:4, identity))
# On the fly: X is an ordinary matrix each time (a fresh copy: the previous
# run's share() re-mapped X's pages onto its segment), and its copy into
# shared memory is part of the time.
# Two ways: the same warm workers each time (they still map the previous run's
# segment and free it at the start of their next future), and fresh workers
# each time (a first call: nothing to free; started outside the timing).
X1 <- X
fly_t <- median(replicate(5, { forget_shared(); X <<- X1 + 0; invisible(gc()); run() }))
fresh_t <- median(replicate(5, {
  plan(sequential); forget_shared(); X <<- X1 + 0; invisible(gc())
  plan(shm_multisession, workers = 2); invisible(future_lapply(1:4, identity))
  run()
}))
rm(X1); X <- X + 0; forget_shared(); invisible(gc())
Xs <- share(X); X0 <- X; X <- Xs; rm(X0); invisible(gc())
before_t <- median(replicate(5, run()))
plan(sequential)
cat(sprintf(paste("n = %d: sequential %.2f s | shm_multisession on the fly %.2f s (%.2f x),",
                  "with fresh workers %.2f s (%.2f x) | shared beforehand %.2f s (%.2f x)\n"),
            n, seq_t, fly_t, fly_t / seq_t, fresh_t, fresh_t / seq_t, before_t, before_t / seq_t))
