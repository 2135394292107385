#!/usr/bin/env Rscript
# Run future.apply's, furrr's or doFuture's own test suite under
# plan(shm_multisession) and, for comparison, plan(multisession), and report
# every difference.
#
#   Rscript tools/run-futureverse-suites.R --suite=future.apply --source=DIR [--plans=shm_multisession,multisession]
#   Rscript tools/run-futureverse-suites.R --suite=furrr --source=DIR
#   Rscript tools/run-futureverse-suites.R --suite=doFuture --source=DIR
#
# DIR is the package's source tree at the version installed (its tests/
# directory is used; e.g. the public repository at the release tag, or the
# Debian source package). The suites choose their plans themselves: the copy
# of their test helpers run here is told to use only the plan under test
# (future.apply: supportedStrategies() in tests/incl/start,load-only.R, or
# from 1.20 on in the prologue of its inst/testme scripts; furrr:
# supported_strategies() in tests/testthat/helper-furrr-test-that.R;
# doFuture: the same file as future.apply's, and its scripts' own calls of
# future:::supportedStrategies() are pointed at it).
# future.apply's and doFuture's scripts run one R process each; furrr's testthat files run in
# one process per plan. Exits with status 1 when shm_multisession fails where
# multisession passes, and skips (status 0) when DIR has no such suite.
# doFuture is not packaged by Debian: install it from its public repository
# at a release tag into a library of its own (0.12.2 runs on future 1.31,
# 1.0.x needs future >= 1.32) and pass that tree as DIR.
# furrr's `_dfr`/`_dfc` tests need dplyr (Debian: r-cran-dplyr): without it
# those files end in errors under every plan.
args <- commandArgs(trailingOnly = TRUE)
opt <- function(name, default = NA) {
  a <- grep(sprintf("^--%s=", name), args, value = TRUE)
  if (length(a)) sub(sprintf("^--%s=", name), "", a[length(a)]) else default
}
suite <- opt("suite")
source_dir <- opt("source")
plans <- strsplit(opt("plans", "shm_multisession,multisession"), ",")[[1]]
if (!suite %in% c("future.apply", "furrr", "doFuture") || is.na(source_dir)) {
  stop("usage: run-futureverse-suites.R --suite=future.apply|furrr|doFuture --source=DIR")
}
tests <- file.path(source_dir, "tests")
testme <- file.path(source_dir, "inst", "testme")
if (!dir.exists(tests) || !requireNamespace(suite, quietly = TRUE)) {
  message(sprintf("no %s suite in %s (or %s not installed): skipping", suite, source_dir, suite))
  quit(status = 0)
}
rscript <- file.path(R.home("bin"), "Rscript")
lib_env <- paste0("R_LIBS=", paste(.libPaths(), collapse = ":"))
cat(sprintf("%s %s (tests from %s), future %s, R %s\n", suite, utils::packageVersion(suite), source_dir,
            utils::packageVersion("future"), getRversion()))

# Lines that redefine the suite's plan list `fun` as the plan under test
# (saying `say` each time it is asked, when given).
plan_override <- function(plan, fun, say = NULL) {
  target <- if (plan == "shm_multisession") "pageshare::shm_multisession" else "future::multisession"
  body <- if (is.null(say)) deparse(plan) else sprintf("{ message(%s); %s }", deparse(say), deparse(plan))
  c("", "## run-futureverse-suites.R: only the plan under test",
    sprintf("%s <- function(...) %s", fun, body),
    # plan("shm_multisession") looks the name up from the caller
    if (plan == "shm_multisession") "shm_multisession <- pageshare::shm_multisession",
    sprintf("invisible(%s)", target))
}

copy_tests <- function() {
  dir <- tempfile("suite-")
  dir.create(dir)
  file.copy(tests, dir, recursive = TRUE)
  file.path(dir, "tests")
}

# future.apply >= 1.20 keeps its tests as "testme" scripts (inst/testme/test-*.R,
# run by its run.R with a prologue that defines supportedStrategies()); the
# files under tests/ only call the installed package's copy. Here the
# source's copy runs, its prologue told to use only the plan under test; a
# script that never asks for the plans says so in its log (no marker).
run_future_apply_testme <- function(plan) {
  dir <- file.path(tempfile("testme-"), "testme")
  dir.create(dir, recursive = TRUE)
  file.copy(list.files(testme, full.names = TRUE), dir, recursive = TRUE)
  prologue <- list.files(file.path(dir, "_prologue"), full.names = TRUE)
  defines <- prologue[vapply(prologue, function(f) any(grepl("supportedStrategies", readLines(f, warn = FALSE))), NA)]
  if (length(defines) != 1L) stop("future.apply's testme prologue: no single file defines supportedStrategies()")
  marker <- "run-futureverse-suites.R: plan under test"
  cat(plan_override(plan, "supportedStrategies", say = paste(marker, plan)), file = defines, sep = "\n", append = TRUE)
  names <- sub("^test-(.*)[.]R$", "\\1", sort(list.files(dir, pattern = "^test-.*[.]R$")))
  status <- vapply(names, function(n) {
    out <- file.path(dirname(dir), paste0(n, ".", plan, ".log"))
    code <- sprintf("Sys.setenv(R_TESTME_PATH = %s, R_TESTME_PACKAGE = 'future.apply', R_TESTME_NAME = %s); %s source(%s)",
                    deparse(dir), deparse(n),
                    if (plan == "shm_multisession") "shm_multisession <- pageshare::shm_multisession;" else "",
                    deparse(file.path(dir, "run.R")))
    rc <- system2(rscript, c("--vanilla", "-e", shQuote(code)), stdout = out, stderr = out,
                  env = lib_env, timeout = 600)
    log <- readLines(out, warn = FALSE)
    if (rc != 0) {
      cat(sprintf("  [%s] %s failed (status %d); last lines:\n%s\n", plan, n, rc,
                  paste0("    ", utils::tail(log, 8), collapse = "\n")))
    } else if (!any(grepl(marker, log, fixed = TRUE))) {
      cat(sprintf("  [%s] %s passed without asking for the plans (it sets its own, or none)\n", plan, n))
    }
    rc == 0
  }, logical(1))
  unlink(dirname(dir), recursive = TRUE)
  status
}

# The scripts of tests/ (future.apply before 1.20, doFuture), each in an R
# process of its own; tests/incl/start,load-only.R, which they all source,
# defines the plan list. doFuture's scripts also ask future for it
# (future:::supportedStrategies()): those calls are pointed at that list.
# Where a script expects what happens on workers that are other R sessions
# by the plan's name (`strategy %in% c("cluster", "multisession")`: a `...`
# not exported is then an error, as it is under shm_multisession too),
# shm_multisession joins that list.
run_test_scripts <- function(plan) {
  dir <- copy_tests()
  start <- file.path(dir, "incl", "start,load-only.R")
  cat(plan_override(plan, "supportedStrategies"), file = start, sep = "\n", append = TRUE)
  files <- sort(list.files(dir, pattern = "[.]R$"))
  for (f in file.path(dir, files)) {
    code <- readLines(f, warn = FALSE)
    new <- gsub("future:::supportedStrategies(", "supportedStrategies(", code, fixed = TRUE)
    by_name <- grepl("strategy %in% c(", new, fixed = TRUE)
    new[by_name] <- gsub('"multisession")', '"multisession", "shm_multisession")', new[by_name], fixed = TRUE)
    if (!identical(new, code)) writeLines(new, f)
  }
  home <- setwd(dir)   # the scripts source incl/ relative to tests/
  on.exit(setwd(home))
  status <- vapply(files, function(f) {
    out <- file.path(dir, paste0(f, ".", plan, ".log"))
    rc <- system2(rscript, c("--vanilla", f), stdout = out, stderr = out,
                  env = lib_env, timeout = 600)
    if (rc != 0) {
      log <- readLines(out, warn = FALSE)
      cat(sprintf("  [%s] %s failed (status %d); last lines:\n%s\n", plan, f, rc,
                  paste0("    ", utils::tail(log, 8), collapse = "\n")))
    }
    rc == 0
  }, logical(1))
  setwd(home)
  unlink(dirname(dir), recursive = TRUE)
  status
}

run_furrr <- function(plan) {
  dir <- copy_tests()
  helper <- file.path(dir, "testthat", "helper-furrr-test-that.R")
  cat(plan_override(plan, "supported_strategies"), file = helper, sep = "\n", append = TRUE)
  out <- tempfile(fileext = ".rds")
  code <- sprintf(paste0(
    "library(testthat); res <- as.data.frame(test_dir(%s, package = 'furrr', reporter = 'silent', ",
    "stop_on_failure = FALSE, load_package = 'installed')); saveRDS(res, %s)"),
    deparse(file.path(dir, "testthat")), deparse(out))
  system2(rscript, c("--vanilla", "-e", shQuote(code)), stdout = FALSE, stderr = FALSE,
          env = lib_env, timeout = 1800)
  res <- if (file.exists(out)) readRDS(out) else NULL
  unlink(dirname(dir), recursive = TRUE)
  if (is.null(res)) return(c(`<suite>` = FALSE))
  ok <- tapply(res$failed == 0 & !res$error, res$file, all)
  cat(sprintf("  [%s] %d expectations, %d failed, %d skipped\n", plan, sum(res$nb),
              sum(res$failed), sum(res$skipped)))
  ok
}

run_future_apply <- function(plan) {
  if (dir.exists(testme)) run_future_apply_testme(plan) else run_test_scripts(plan)
}

results <- lapply(stats::setNames(plans, plans), function(p) {
  cat(sprintf("== %s under plan(%s)\n", suite, p))
  switch(suite, future.apply = run_future_apply(p), furrr = run_furrr(p), doFuture = run_test_scripts(p))
})
files <- sort(unique(unlist(lapply(results, names))))
tab <- vapply(results, function(r) ifelse(is.na(r[files]), "-", ifelse(r[files], "ok", "FAIL")), character(length(files)))
tab <- matrix(tab, nrow = length(files), dimnames = list(files, plans))
print(noquote(tab))
for (p in plans) cat(sprintf("%s: %d of %d files pass\n", p, sum(tab[, p] == "ok"), nrow(tab)))
bad <- if (all(c("shm_multisession", "multisession") %in% plans)) {
  files[tab[, "shm_multisession"] != "ok" & tab[, "multisession"] == "ok"]
} else character()
if (length(bad)) {
  cat("shm_multisession fails where multisession passes:", paste(bad, collapse = ", "), "\n")
  quit(status = 1)
}
