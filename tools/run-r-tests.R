# Run the testthat suite and print a final "R: N passed, N failed, N skipped"
# line (counting test_that() blocks). Exits non-zero on any failure.
Sys.setenv(NOT_CRAN = "true")   # run every test (skip_on_cran() guards only CRAN)
# processx (callr) replaces the SIGCHLD handler that parallel's mclapply()
# relies on; without this, parallel waits 10 s at exit for children it never
# sees reaped and prints "unable to terminate some child processes" after the
# results line (processx issue #236).
Sys.setenv(PROCESSX_NOTIFY_OLD_SIGCHLD = "true")
suppressPackageStartupMessages({ library(testthat); library(pageshare) })
results <- test_dir("tests/testthat", reporter = ProgressReporter$new(show_praise = FALSE),
                    stop_on_failure = FALSE, stop_on_warning = FALSE)
df <- as.data.frame(results)
# (a test fails if any of its results is a failure or an error: testthat's
# data frame flags an error only when it ended the test, and expect_error()
# that does not match lets the error be recorded and the test go on)
failed <- vapply(results, function(t) {
  any(vapply(t$results, inherits, TRUE, what = c("expectation_failure", "expectation_error")))
}, TRUE)
skipped <- !failed & df$skipped
passed <- !failed & !skipped
cat(sprintf("R: %d passed, %d failed, %d skipped\n", sum(passed), sum(failed), sum(skipped)))
# Each failed test in one line ("R failed: file: test: what"), which .ci/run
# gathers at the end of its output, where the stages' long logs are cut.
for (t in results[failed]) {
  bad <- Filter(function(r) inherits(r, c("expectation_failure", "expectation_error")), t$results)
  what <- gsub("\\s+", " ", conditionMessage(bad[[1L]]))
  cat(sprintf("R failed: %s: %s: %s\n", t$file, t$test, substr(what, 1L, 300L)))
}
quit(status = if (any(failed)) 1 else 0)
