#!/usr/bin/env Rscript
# Wall time only (no memory sampler: on 2 cores the PSS sampler process takes
# ~0.2-0.3 s of CPU from a ~1.5 s run), n = 8000 by default, median of 3:
# sequential vs shm_multisession with X shared on the fly and beforehand.
#   Rscript inst/benchmarks/bench-future-time.R [n]
suppressPackageStartupMessages({ library(future); library(future.apply); library(pageshare) })
n <- as.integer(commandArgs(trailingOnly = TRUE)[1]); if (is.na(n)) n <- 8000L
options(future.globals.maxSize = +Inf)
source(file.path("inst", "benchmarks", "warm-memory.R")); warm_memory(4096)
set.seed(1); X <- matrix(rnorm(as.double(n) * n), n); y <- rnorm(n)
run <- function() system.time(future_lapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))[["elapsed"]]
plan(sequential); seq_t <- median(replicate(3, run()))
plan(shm_multisession, workers = 2); invisible(future_lapply(1:4, identity))
fly_t <- median(replicate(3, { forget_shared(); invisible(gc()); run() }))   # includes copying X each time
Xs <- share(X); X0 <- X; X <- Xs; rm(X0); invisible(gc())
before_t <- median(replicate(3, run()))
plan(sequential)
cat(sprintf("n = %d: sequential %.2f s | shm_multisession on the fly %.2f s (%.2f x) | shared beforehand %.2f s (%.2f x)\n",
            n, seq_t, fly_t, fly_t / seq_t, before_t, before_t / seq_t))
