#!/usr/bin/env Rscript
# future.apply on plan(shm_multisession), 2 workers, side by side in one
# process tree, rounds interleaved, medians:
#   lapply   future_lapply() over 10,000 trivial elements (function(i) i):
#            this build, and (with LIB_BEFORE) another build of pageshare in a
#            child R session started for each round, plan(multisession), and
#            plan(sequential) (future.apply's own work);
#   colapply the column apply cor(X[, j], y) of an n x n double matrix
#            (shared beforehand) through future_sapply() and through
#            shm_map(), the pool's own map, in the same rounds.
#
#   Rscript inst/benchmarks/bench-future-apply.R [rounds = 7] [n = 8000] [LIB_BEFORE]
#
# (Install a build into a library of its own with
# `R CMD INSTALL --no-multiarch -l LIB_BEFORE .` from a checkout of that commit.)
suppressPackageStartupMessages({ library(future); library(future.apply); library(pageshare) })
args <- commandArgs(trailingOnly = TRUE)
rounds <- if (length(args) >= 1) as.integer(args[1]) else 7L
n <- if (length(args) >= 2) as.integer(args[2]) else 8000L
before_lib <- if (length(args) >= 3) args[3] else NA_character_
ms <- function(expr) { t0 <- Sys.time(); force(expr); as.numeric(Sys.time() - t0, units = "secs") * 1000 }

# One future_lapply() over 10,000 elements by the build in LIB_BEFORE, in a
# child R session (after one warm-up call), in milliseconds.
before_lapply <- function() {
  code <- sprintf(paste0(
    "suppressPackageStartupMessages({library(future); library(future.apply); library(pageshare, lib.loc = '%s')});",
    "plan(shm_multisession, workers = 2); invisible(future_lapply(1:10000, function(i) i));",
    "t0 <- Sys.time(); invisible(future_lapply(1:10000, function(i) i));",
    "cat(as.numeric(Sys.time() - t0, units = 'secs') * 1000, '\\n'); plan(sequential)"), before_lib)
  out <- system2(file.path(R.home("bin"), "Rscript"), c("-e", shQuote(code)), stdout = TRUE)
  suppressWarnings(as.numeric(utils::tail(out, 1)))
}

lapply_cases <- list(
  shm_multisession = function() { plan(shm_multisession, workers = 2); future_lapply(1:10, identity)
    t <- ms(future_lapply(1:10000, function(i) i)); plan(sequential); t },
  multisession = function() { plan(multisession, workers = 2); future_lapply(1:10, identity)
    t <- ms(future_lapply(1:10000, function(i) i)); plan(sequential); t },
  # (future.apply's own work: its globals search, chunking and per-element
  # evaluation, all in this process)
  sequential = function() { plan(sequential); future_lapply(1:10, identity)
    ms(future_lapply(1:10000, function(i) i)) })
if (!is.na(before_lib)) lapply_cases[["shm_multisession (LIB_BEFORE)"]] <- before_lapply

X <- share(matrix(rnorm(n * n), n))
y <- rnorm(n)
col_cases <- list(
  `future_sapply(), shm_multisession` = function() ms(future_sapply(seq_len(n), function(j) cor(X[, j], y))),
  `shm_map()` = function() ms(shm_map(seq_len(n), function(j, M, v) cor(M[, j], v), M = X, v = y)),
  serial = function() ms(for (j in seq_len(n)) cor(X[, j], y)))

cat(sprintf("Run: %s, R %s, future %s, future.apply %s, pageshare %s, %d rounds, %d cores, load average %s\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), getRversion(), packageVersion("future"),
            packageVersion("future.apply"), packageVersion("pageshare"), rounds, parallel::detectCores(),
            paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
lt <- matrix(NA_real_, rounds, length(lapply_cases), dimnames = list(NULL, names(lapply_cases)))
ct <- matrix(NA_real_, rounds, length(col_cases), dimnames = list(NULL, names(col_cases)))
for (r in seq_len(rounds)) {
  order <- if (r %% 2L) seq_along(lapply_cases) else rev(seq_along(lapply_cases))
  for (k in order) lt[r, k] <- lapply_cases[[k]]()
  plan(shm_multisession, workers = 2)
  start_workers(2)   # (the same pool: futures and shm_map() share it on future >= 1.40)
  invisible(future_sapply(1:2, function(j) cor(X[, j], y)))
  order <- if (r %% 2L) seq_along(col_cases) else rev(seq_along(col_cases))
  for (k in order) ct[r, k] <- col_cases[[k]]()
  plan(sequential)
}
med <- apply(lt, 2, median)
cat("\nfuture_lapply() over 10,000 trivial elements, 2 workers (ms, median of rounds):\n")
for (k in names(med)) cat(sprintf("  %-32s %9.1f   %5.2f x shm_multisession\n", k, med[[k]], med[[k]] / med[["shm_multisession"]]))
med <- apply(ct, 2, median)
cat(sprintf("\ncolumn apply cor(X[, j], y), X %d x %d (%.0f MB, shared), 2 workers (ms, median of rounds):\n",
            n, n, 8 * n * n / 1e6))
for (k in names(med)) cat(sprintf("  %-36s %9.1f   %5.2f x shm_map()\n", k, med[[k]], med[[k]] / med[["shm_map()"]]))
cat(sprintf("load average at the end: %s\n", paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
