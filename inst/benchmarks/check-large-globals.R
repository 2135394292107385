#!/usr/bin/env Rscript
# Every front door with a large global and no options() line: the results
# must equal the sequential ones. Not a test (it needs several GB of memory).
#
#   Rscript inst/benchmarks/check-large-globals.R [GB] [--out=FILE]
#
# GB: size of the double matrix X (default 2). Also checks that a global that
# cannot be shared (an environment holding 600 MB) stops at future's 500 MiB
# limit, as under multisession. Prints one line per door.
# --skip=DOOR[,DOOR]: leave out doors by the start of their label (e.g.
# --skip=future_apply: with future.apply 1.20 / globals 0.18 the globals scan
# of future_apply() converts X to character, minutes per 256 MB under
# multisession as well).
suppressPackageStartupMessages({
  library(future)
  library(future.apply)
  library(foreach)
  library(pageshare)
})
args <- commandArgs(trailingOnly = TRUE)
gb <- suppressWarnings(as.numeric(args[!startsWith(args, "--")]))
if (!length(gb) || is.na(gb[1])) gb <- 2
out <- sub("^--out=", "", grep("^--out=", args, value = TRUE))
skip <- unlist(strsplit(sub("^--skip=", "", grep("^--skip=", args, value = TRUE)), ","))
stopifnot(is.null(getOption("future.globals.maxSize")))   # no option set

ncol <- 200L
X <- matrix(runif(ceiling(gb * 2^30 / 8 / ncol) * ncol), ncol = ncol)
cat(sprintf("X: %d x %d doubles, %.2f GB; R %s, future %s, future.apply %s\n", nrow(X), ncol(X),
            object.size(X) / 2^30, getRversion(), packageVersion("future"), packageVersion("future.apply")))
ref <- colSums(X)
col_sum <- function(j) sum(X[, j])

plan(shm_multisession, workers = 2)
registerDoShm(cores = 2)
results <- list()
check <- function(door, expr) {
  if (any(startsWith(door, skip))) {
    results[[length(results) + 1L]] <<- sprintf("%-34s skipped (--skip)", door)
    return(cat(results[[length(results)]], "\n"))
  }
  t0 <- Sys.time()
  got <- tryCatch(expr, error = function(e) e)
  secs <- as.numeric(difftime(Sys.time(), t0, units = "secs"))
  ok <- !inherits(got, "error") && isTRUE(all.equal(as.numeric(unlist(got)), as.numeric(ref)))
  line <- sprintf("%-34s %s  %6.1f s%s", door, if (ok) "same as sequential" else "FAILED", secs,
                  if (inherits(got, "error")) paste(":", conditionMessage(got)) else "")
  cat(line, "\n")
  results[[length(results) + 1L]] <<- line
}
`%<-%` <- future::`%<-%`
check("future()", value(future(colSums(X))))
check("%<-%", { v %<-% colSums(X); v })
check("future_lapply()", future_lapply(seq_len(ncol), col_sum))
check("future_sapply()", future_sapply(seq_len(ncol), col_sum))
check("future_apply(X, 2, sum)", future_apply(X, 2, sum))
check("future_mapply()", future_mapply(function(j, k) sum(X[, j]) * k, seq_len(ncol), 1))
if (requireNamespace("furrr", quietly = TRUE)) {
  check("furrr::future_map_dbl()", furrr::future_map_dbl(seq_len(ncol), col_sum))
}
check("foreach %dopar% (registerDoShm)", foreach(j = seq_len(ncol), .combine = c) %dopar% sum(X[, j]))
inside <- function(M) future_sapply(seq_len(ncol(M)), function(j) sum(M[, j]))
check("future_sapply() inside a function", inside(X))

e <- new.env()
e$big <- runif(600 * 2^20 / 8)
unshareable <- tryCatch(value(future(length(e$big))), error = function(err) conditionMessage(err))
line <- sprintf("%-34s %s", "environment of 600 MB",
                if (grepl("exceeds the maximum allowed size", unshareable)) "stops at the 500 MiB limit, as multisession"
                else paste("DID NOT STOP:", substr(unshareable, 1, 80)))
cat(line, "\n")
results[[length(results) + 1L]] <- line
plan(sequential)
stop_workers()
cat(sprintf("option after plan(sequential): %s\n", format(getOption("future.globals.maxSize"))))
if (length(out)) writeLines(unlist(results), out)
