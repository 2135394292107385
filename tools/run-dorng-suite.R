# Run doRNG's own testthat suite with pageshare's foreach backend in place of
# doParallel: its tests register doParallel (registerDoParallel(cl) or
# registerDoParallel(cores = 2)); a helper file makes that call register
# registerDoShm() instead, on pageshare's own pool (`pool`, the default) or on
# the cluster the test made (`cluster`). What the suite checks is
# reproducibility: the same seed gives the same streams, loop after loop.
#
# Usage:
#   Rscript tools/run-dorng-suite.R [DORNG_SRC_DIR]
#     DORNG_SRC_DIR: doRNG's unpacked sources (it has tests/testthat); default
#       $PAGESHARE_SUITES_DIR/doRNG (PAGESHARE_SUITES_DIR defaults to
#       "suites"): the Debian source package r-cran-dorng or doRNG's public
#       repository at the tag of the installed version.
#   Environment: PAGESHARE_SUITE_THRESHOLD (bytes, default 0: every exported
#   variable goes through shared memory).
#
# One test of the suite checks the warning doRNG gives when a backend changes
# the RNG kind, and names the backend "doParallelSNOW" in its expectation: under
# registerDoShm() the warning names "doShm", so that expectation fails by name
# on every backend but doParallel's. The summary counts it apart.
# The exit status is 1 if any other expectation failed.

args <- commandArgs(trailingOnly = TRUE)
suppressPackageStartupMessages(library(pageshare))
threshold <- as.numeric(Sys.getenv("PAGESHARE_SUITE_THRESHOLD", "0"))
src <- if (length(args)) args[[1L]] else file.path(Sys.getenv("PAGESHARE_SUITES_DIR", "suites"), "doRNG")
tdir <- file.path(src, "tests", "testthat")
if (!dir.exists(tdir)) {
  message("doRNG suite skipped: no tests/testthat in ", src)
  quit(status = 0L)
}
for (p in c("testthat", "foreach", "doParallel", "doRNG", "rngtools")) {
  if (!requireNamespace(p, quietly = TRUE)) {
    message("doRNG suite skipped: package ", p, " is not installed")
    quit(status = 0L)
  }
}

# The test that names doParallel's backend in what it expects.
named_backend_test <- "RNG warnings"

run_dorng <- function(backend) {
  work <- tempfile("dorng-suite-")
  dir.create(work)
  file.copy(tdir, work, recursive = TRUE)
  tcopy <- file.path(work, "testthat")
  if (backend != "doParallel") writeLines(c(
    sprintf("options(pageshare.threshold = %s)", format(threshold)),
    "registerDoParallel <- function(cl, cores = NULL, ...) {",
    if (backend == "pool") "  pageshare::registerDoShm(cores = 2)"
    else c("  if (!missing(cl) && inherits(cl, 'cluster')) pageshare::registerDoShm(cl)",
           "  else pageshare::registerDoShm(cores = 2)"),
    "  stopifnot(foreach::getDoParName() == 'doShm')",
    "}"
  ), file.path(tcopy, "helper-zz-doshm.R"))
  res <- testthat::test_dir(tcopy, package = "doRNG", load_package = "installed",
                            reporter = testthat::SummaryReporter$new(), stop_on_failure = FALSE)
  df <- as.data.frame(res)
  named <- df$test == named_backend_test
  c(tests = nrow(df), expectations = sum(df$nb), failed = sum(df$failed[!named]),
    errors = sum(df$error), skipped = sum(df$skipped),
    failed_by_backend_name = sum(df$failed[named]))
}

summary_lines <- character()
failed <- FALSE
for (backend in c("doParallel", "pool", "cluster")) {
  r <- run_dorng(backend)
  summary_lines <- c(summary_lines, sprintf("doRNG %s testthat suite on %s (threshold %s): %s",
    utils::packageVersion("doRNG"),
    switch(backend, doParallel = "doParallel (as its authors run it)",
           pool = "registerDoShm(), pageshare's pool", cluster = "registerDoShm(cl), the test's cluster"),
    format(threshold), paste(names(r), r, sep = " ", collapse = ", ")))
  if (r[["failed"]] > 0 || r[["errors"]] > 0) failed <- TRUE
}
stop_workers()
cat("\n", paste(summary_lines, collapse = "\n"), "\n", sep = "")
if (failed) quit(status = 1L)
