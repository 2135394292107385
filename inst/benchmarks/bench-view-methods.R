#!/usr/bin/env Rscript
# What a view costs over the least any ALTREP class costs. R calls a vector's
# Length and Dataptr methods once per element in range(), t(), split(),
# tapply() and apply() (R 4.2 and 4.6 alike), so those methods must answer from
# data at hand. The floor is a minimal ALTREP double class written in C and
# built here with R CMD SHLIB: data1 is the plain vector; Length, Dataptr,
# Dataptr_or_null, Elt and Get_region forward to it, the least any class does.
#
#   Rscript inst/benchmarks/bench-view-methods.R [rounds, default 9] [MB, default 50]
#
# The same data (a double vector of MB megabytes, or a square matrix for t()
# and apply()) as an ordinary vector, as the floor class and as a view from
# share(). Each round times every operation on the three in turn (the order
# rotates between rounds), CPU time (user + system) after a gc(); the table
# gives medians and the ratios. Run it on an idle machine, or compare the
# ratios of runs made side by side.
suppressPackageStartupMessages(library(pageshare))
args <- as.integer(commandArgs(trailingOnly = TRUE))
rounds <- if (length(args) >= 1 && !is.na(args[1])) args[1] else 9L
mb <- if (length(args) >= 2 && !is.na(args[2])) args[2] else 50L

# ---- the floor: a minimal ALTREP class ----------------------------------------
tmp <- tempfile("bench-view-methods-")
dir.create(tmp)
writeLines(r"(
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Altrep.h>
#include <R_ext/Rdynload.h>

static R_altrep_class_t floor_class;

static R_xlen_t floor_length(SEXP x) { return XLENGTH(R_altrep_data1(x)); }
static void *floor_dataptr(SEXP x, Rboolean writeable) { return REAL(R_altrep_data1(x)); }
static const void *floor_dataptr_or_null(SEXP x) { return REAL_RO(R_altrep_data1(x)); }
static double floor_elt(SEXP x, R_xlen_t i) { return REAL_RO(R_altrep_data1(x))[i]; }
static R_xlen_t floor_region(SEXP x, R_xlen_t i, R_xlen_t n, double *buf) {
    SEXP d = R_altrep_data1(x);
    R_xlen_t len = XLENGTH(d), k = n < len - i ? n : len - i;
    const double *p = REAL_RO(d);
    for (R_xlen_t j = 0; j < k; j++) buf[j] = p[i + j];
    return k;
}

/* The floor object over a plain double vector, with dim set here (dim<- in R
   would duplicate it into an ordinary vector), not mutable like a view. */
SEXP floor_make(SEXP data, SEXP dim) {
    SEXP ans = PROTECT(R_new_altrep(floor_class, data, R_NilValue));
    if (dim != R_NilValue) setAttrib(ans, R_DimSymbol, dim);
    MARK_NOT_MUTABLE(ans);
    UNPROTECT(1);
    return ans;
}
SEXP floor_is_altrep(SEXP x) { return ScalarLogical(ALTREP(x) != 0); }

void R_init_benchfloor(DllInfo *dll) {
    floor_class = R_make_altreal_class("floor_double", "benchfloor", dll);
    R_set_altrep_Length_method(floor_class, floor_length);
    R_set_altvec_Dataptr_method(floor_class, floor_dataptr);
    R_set_altvec_Dataptr_or_null_method(floor_class, floor_dataptr_or_null);
    R_set_altreal_Elt_method(floor_class, floor_elt);
    R_set_altreal_Get_region_method(floor_class, floor_region);
}
)", file.path(tmp, "benchfloor.c"))
so <- file.path(tmp, paste0("benchfloor", .Platform$dynlib.ext))
out <- system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", shQuote(so), shQuote(file.path(tmp, "benchfloor.c"))),
               stdout = TRUE, stderr = TRUE)
if (!file.exists(so)) stop("R CMD SHLIB failed:\n", paste(out, collapse = "\n"))
dll <- dyn.load(so)
floor_make <- function(x) .Call(getNativeSymbolInfo("floor_make", dll), x, dim(x))
is_altrep <- function(x) .Call(getNativeSymbolInfo("floor_is_altrep", dll), x)

# ---- the data ---------------------------------------------------------------------
set.seed(1)
n <- as.integer(mb * 2^20 / 8)
side <- as.integer(floor(sqrt(n)))
x <- rnorm(n)
M <- matrix(rnorm(side * side), side)
f <- factor(sample.int(100L, n, replace = TRUE))
fc <- factor(sample.int(100L, side, replace = TRUE))
data <- list(
  ordinary = list(x = x, M = M),
  floor = list(x = floor_make(x + 0), M = floor_make(M + 0)),
  view = list(x = share(x + 0), M = share(M + 0)))
stopifnot(is_altrep(data$floor$x), is_altrep(data$floor$M), is_shared(data$view$x), is_shared(data$view$M),
          identical(dim(data$floor$M), dim(M)), identical(dim(data$view$M), dim(M)))

ops <- list(
  "range(x)" = function(d) range(d$x),
  "t(M)" = function(d) t(d$M),
  "split(x, f)" = function(d) split(d$x, f),
  "tapply(x, f, sum)" = function(d) tapply(d$x, f, sum),
  "apply(M, 2, sum)" = function(d) apply(d$M, 2, sum))
for (op in names(ops)) { # same answers, and every method warmed once
  a <- ops[[op]](data$ordinary)
  for (k in c("floor", "view")) stopifnot(isTRUE(all.equal(ops[[op]](data[[k]]), a, check.attributes = FALSE)))
}
rm(a)

cpu <- function(fun, d) {
  t <- system.time(fun(d), gcFirst = TRUE)
  t[["user.self"]] + t[["sys.self"]]
}
kinds <- names(data)
times <- array(NA_real_, c(length(ops), length(kinds), rounds), list(names(ops), kinds, NULL))
for (r in seq_len(rounds)) {
  order <- kinds[(seq_along(kinds) + r - 2L) %% length(kinds) + 1L]
  for (op in names(ops)) for (k in order) times[op, k, r] <- cpu(ops[[op]], data[[k]])
}
med <- apply(times, c(1, 2), median)

cat(sprintf("R %s, %d MB (x: %d doubles, M: %d x %d), %d rounds, CPU s (median), load average %s\n\n",
            getRversion(), mb, n, side, side, rounds, paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
cat("| operation | ordinary | floor | view | floor / ordinary | view / ordinary | view / floor |\n")
cat("|---|---:|---:|---:|---:|---:|---:|\n")
for (op in names(ops)) {
  m <- med[op, ]
  cat(sprintf("| `%s` | %.3f | %.3f | %.3f | %.2f | %.2f | %.2f |\n", op, m[["ordinary"]], m[["floor"]], m[["view"]],
              m[["floor"]] / m[["ordinary"]], m[["view"]] / m[["ordinary"]], m[["view"]] / m[["floor"]]))
}

# ---- clean up: no segment, mapping or file left -------------------------------------
rm(data, x, M)
forget_shared()
invisible(gc())
left <- shared_segments()$name
# (the DLL stays loaded: R keeps its class registered until the process ends)
unlink(tmp, recursive = TRUE)
if (length(left)) warning("segments still mapped: ", paste(left, collapse = ", "))
