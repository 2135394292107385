#!/usr/bin/env Rscript
# Reading a view in the session that called share(): the same operations on an
# ordinary n x n matrix and on its view, median of 5 each.
#   Rscript inst/benchmarks/bench-view-access.R [n]
# R 4.2 extracts X[, j] and X[i, ] element by element through the ALTREP Elt
# method; whole-vector operations read through Dataptr at full speed. Workers
# receive views too, so the same holds there.
suppressPackageStartupMessages(library(pageshare))
n <- as.integer(commandArgs(trailingOnly = TRUE)[1]); if (is.na(n)) n <- 4000L
set.seed(1)
X <- matrix(rnorm(as.double(n) * n), n)
V <- share(X)
v <- rnorm(n)
ops <- list(
  "M[, j] for every j" = quote(for (j in seq_len(n)) M[, j]),
  "M[i, ] for 200 rows" = quote(for (i in 1:200) M[i, ]),
  "sum(M)" = quote(sum(M)),
  "colSums(M)" = quote(colSums(M)),
  "M %*% v" = quote(M %*% v),
  "M[M > 3]" = quote(M[M > 3]),
  "mean(M[1:1e6])" = quote(mean(M[1:1e6])),
  "M * 2" = quote(M * 2))
time_op <- function(M, op) median(replicate(5, system.time(eval(op))[["elapsed"]]))
cat(sprintf("n = %d, R %s\n\n| operation | ordinary (s) | view (s) | view / ordinary |\n|---|---:|---:|---:|\n",
            n, getRversion()))
for (name in names(ops)) {
  a <- time_op(X, ops[[name]])
  b <- time_op(V, ops[[name]])
  cat(sprintf("| `%s` | %.3f | %.3f | %.2f |\n", name, a, b, b / a))
}
