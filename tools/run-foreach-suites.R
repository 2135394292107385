# Run foreach's own testthat suite and doParallel's RUnit options tests against
# pageshare's foreach backend, registerDoShm(), both ways: on pageshare's own
# pool (registerDoShm(cores = 2), the default) and on a PSOCK cluster
# (registerDoShm(cl)).
#
# Usage:
#   Rscript tools/run-foreach-suites.R [FOREACH_SRC_DIR] [DOPARALLEL_SRC_DIR_OR_INSTALLED]
#     FOREACH_SRC_DIR: an unpacked foreach source package (it has tests/testthat);
#       default: the first match of $PAGESHARE_SUITES_DIR/r-cran-foreach-*/ or
#       $PAGESHARE_SUITES_DIR/foreach (PAGESHARE_SUITES_DIR defaults to
#       "suites"). Get the sources with, e.g., `cd suites && apt-get source
#       r-cran-foreach r-cran-doparallel` (deb-src lines must be enabled).
#     The doParallel tests are taken from the given source dir
#     (inst/unitTests/options.R), else from the installed doParallel.
#   Environment: PAGESHARE_SUITE_THRESHOLD (bytes, default 0: every exported
#   variable and task argument goes through shared memory).
#
# A suite whose sources or packages are absent is skipped with a message.
# The exit status is 1 if any suite that ran had a failure.

args <- commandArgs(trailingOnly = TRUE)
suppressPackageStartupMessages(library(pageshare))
threshold <- as.numeric(Sys.getenv("PAGESHARE_SUITE_THRESHOLD", "0"))

first_dir <- function(cands) {
  cands <- cands[dir.exists(cands)]
  if (length(cands)) normalizePath(cands[1L]) else NA_character_
}
suites_dir <- Sys.getenv("PAGESHARE_SUITES_DIR", "suites")
foreach_src <- if (length(args) >= 1L) args[[1L]] else
  first_dir(c(Sys.glob(file.path(suites_dir, "r-cran-foreach-*")), file.path(suites_dir, "foreach")))
doparallel_src <- if (length(args) >= 2L) args[[2L]] else
  first_dir(c(Sys.glob(file.path(suites_dir, "r-cran-doparallel-*")), file.path(suites_dir, "doParallel")))

failed <- FALSE
summary_lines <- character()

## ---- foreach testthat suite ----
# `backend`: "pool" registers registerDoShm(cores = 2) (pageshare's own
# pool), "cluster" registerDoShm(cl) on the setup file's cluster, "doParallel"
# runs the suite as its authors do (doParallel on that cluster), the
# baseline: expectations counted inside loops show whether every loop gave all
# its results.
run_foreach <- function(backend = "pool") {
  tdir <- file.path(foreach_src, "tests", "testthat")
  if (is.na(foreach_src) || !dir.exists(tdir)) {
    message("foreach suite skipped: no tests/testthat in foreach source dir ", foreach_src)
    return(NULL)
  }
  for (p in c("testthat", "foreach", "doParallel", "iterators")) {
    if (!requireNamespace(p, quietly = TRUE)) {
      message("foreach suite skipped: package ", p, " is not installed")
      return(NULL)
    }
  }
  work <- tempfile("foreach-suite-")
  dir.create(work)
  # (the copy is removed with R's temporary directory at exit: PSOCK workers
  # started by the suite's setup file run inside it)
  file.copy(tdir, work, recursive = TRUE)
  tcopy <- file.path(work, "testthat")
  # Sorts after setup_cluster.R (which makes `cl` and registers doParallel):
  # register pageshare's backend instead.
  if (backend != "doParallel") writeLines(c(
    sprintf("options(pageshare.threshold = %s)", format(threshold)),
    if (backend == "pool") "pageshare::registerDoShm(cores = 2)" else "pageshare::registerDoShm(cl)",
    "stopifnot(foreach::getDoParName() == 'doShm')",
    "cat('backend:', foreach::getDoParName(), 'workers:', foreach::getDoParWorkers(), '\\n')"
  ), file.path(tcopy, "setup_zz_doshm.R"))
  old <- Sys.setenv(FOREACH_BACKEND = "PAR")
  on.exit(Sys.unsetenv("FOREACH_BACKEND"), add = TRUE)
  res <- testthat::test_dir(tcopy, package = "foreach", load_package = "installed",
                            reporter = testthat::SummaryReporter$new(), stop_on_failure = FALSE)
  df <- as.data.frame(res)
  counts <- c(files = length(unique(df$file)), tests = nrow(df), expectations = sum(df$nb),
              failed = sum(df$failed), errors = sum(df$error), skipped = sum(df$skipped))
  counts
}

base <- run_foreach("doParallel")
for (backend in c("pool", "cluster")) {
  fe <- run_foreach(backend)
  if (is.null(fe)) next
  line <- sprintf("foreach testthat suite on registerDoShm, %s (threshold %s): %s",
                  if (backend == "pool") "pageshare's pool" else "a PSOCK cluster", format(threshold),
                  paste(names(fe), fe, sep = " ", collapse = ", "))
  summary_lines <- c(summary_lines, line)
  if (fe[["failed"]] > 0 || fe[["errors"]] > 0) failed <- TRUE
  if (!identical(fe[["expectations"]], base[["expectations"]])) {
    summary_lines <- c(summary_lines, "  expectations differ from doParallel's: a loop gave other results")
    failed <- TRUE
  }
}
if (!is.null(base)) {
  summary_lines <- c(summary_lines, sprintf("foreach testthat suite on doParallel: %s",
                                            paste(names(base), base, sep = " ", collapse = ", ")))
}

## ---- doParallel RUnit options.R ----
run_doparallel <- function(backend = "pool") {
  file <- if (!is.na(doparallel_src)) file.path(doparallel_src, "inst", "unitTests", "options.R") else ""
  if (!file.exists(file)) file <- system.file("unitTests", "options.R", package = "doParallel")
  if (!nzchar(file) || !file.exists(file)) {
    message("doParallel suite skipped: inst/unitTests/options.R not found")
    return(NULL)
  }
  for (p in c("RUnit", "foreach", "doParallel")) {
    if (!requireNamespace(p, quietly = TRUE)) {
      message("doParallel suite skipped: package ", p, " is not installed")
      return(NULL)
    }
  }
  suppressPackageStartupMessages({
    library(foreach)
    library(doParallel)
    library(RUnit)
  })
  old <- options(pageshare.threshold = threshold)
  on.exit(options(old), add = TRUE)
  if (backend == "pool") {
    registerDoShm(cores = 2)
  } else {
    cl <- parallel::makePSOCKcluster(2)
    on.exit(parallel::stopCluster(cl), add = TRUE)
    registerDoShm(cl)
  }
  stopifnot(getDoParName() == "doShm")
  rng <- RNGkind()
  on.exit(do.call(RNGkind, as.list(rng)), add = TRUE)
  tr <- suppressWarnings(RUnit::runTestFile(file, verbose = 0L))
  e <- RUnit::getErrors(tr)
  foreach::registerDoSEQ()
  c(functions = e$nTestFunc, failures = e$nFail, errors = e$nErr, deactivated = e$nDeactivated)
}

for (backend in c("pool", "cluster")) {
  dp <- run_doparallel(backend)
  if (is.null(dp)) next
  ok <- dp[["functions"]] - dp[["failures"]] - dp[["errors"]]
  summary_lines <- c(summary_lines, sprintf(
    "doParallel RUnit options.R on registerDoShm, %s (threshold %s): %d/%d test functions pass (%s)",
    if (backend == "pool") "pageshare's pool" else "a PSOCK cluster",
    format(threshold), ok, dp[["functions"]], paste(names(dp), dp, sep = " ", collapse = ", ")))
  if (dp[["failures"]] > 0 || dp[["errors"]] > 0) failed <- TRUE
}

stop_workers()
cat("\n", paste(summary_lines, collapse = "\n"), "\n", sep = "")
if (failed) quit(status = 1L)
