#!/usr/bin/env Rscript
# Run the Future API conformance suite (future.tests) against
# plan(pageshare::shm_multisession) and, for comparison, plan(multisession).
#
#   Rscript tools/run-future-tests.R [--only-shm] [--workers=2] [--threshold=BYTES]
#
# Each plan runs in its own R process (running two plans in one process makes
# the data.table options test fail for the second one, whatever the plans).
# --threshold sets option pageshare.threshold for the shm_multisession run: the
# suite's globals and values are small, so with the default (1 MiB) nothing is
# shared; --threshold=0 makes every numeric global and value travel through
# shared memory. Both are run by default.
#
# Use future.tests 0.8.0 with future < 1.40 (0.9.0 and later import future
# >= 1.40) and future.tests 1.0.0 with future >= 1.40. Skips with a message when
# it is not installed. Exits with status 1 if any test errors or a segment is
# left. To check future >= 1.40 here, install future, parallelly, globals and
# future.tests from their public repositories into a private library and run
# with R_LIBS=<that library> (DEVELOPING.md, "Versions verified").
args <- commandArgs(trailingOnly = TRUE)
if (!requireNamespace("future.tests", quietly = TRUE)) {
  message("future.tests is not installed: skipping the Future API conformance tests")
  quit(status = 0)
}
opt <- function(name, default) {
  a <- grep(sprintf("^--%s=", name), args, value = TRUE)
  if (length(a)) sub(sprintf("^--%s=", name), "", a[length(a)]) else default
}
workers <- as.integer(opt("workers", "2"))

one <- opt("plan", NA)
if (!is.na(one)) {
  # Child: run one plan.
  th <- opt("threshold", NA)
  if (!is.na(th)) options(pageshare.threshold = as.numeric(th))
  spec <- switch(one,
    shm_multisession = sprintf("pageshare::shm_multisession, workers = %d", workers),
    multisession = sprintf("future::multisession, workers = %d", workers))
  home <- setwd(tempdir()) # some tests plot (Rplots.pdf)
  res <- future.tests::check(plan = spec, exit_value = FALSE, session_info = FALSE)
  setwd(home) # R removes tempdir() at exit; not from inside it
  quit(status = if (identical(as.integer(attr(res, "exit_code")), 0L)) 0L else 1L)
}

# Parent: one child per plan.
script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
runs <- list(
  list(plan = "shm_multisession", threshold = NA),
  list(plan = "shm_multisession", threshold = "0"))
if (!"--only-shm" %in% args) runs <- c(runs, list(list(plan = "multisession", threshold = NA)))
th <- opt("threshold", NA)
if (!is.na(th)) runs <- list(list(plan = "shm_multisession", threshold = th))
rscript <- file.path(R.home("bin"), "Rscript")
# Leak check: new segments whose owner (the pid in an anonymous name) is gone
# once a run has exited. Segments of other live processes are not ours.
seg_dir <- getOption("pageshare.dir", "/dev/shm")
list_segs <- function() list.files(seg_dir, pattern = "^pageshare\\.")
leaked <- function(before) {
  new <- setdiff(list_segs(), before)
  pid <- suppressWarnings(as.integer(sub("^pageshare\\.a\\.([0-9]+)\\..*$", "\\1", new)))
  new[is.na(pid) | !file.exists(sprintf("/proc/%d", pid))]
}
exit <- 0L
summary <- character()
for (r in runs) {
  a <- c(shQuote(script), sprintf("--plan=%s", r$plan), sprintf("--workers=%d", workers))
  if (!is.na(r$threshold)) a <- c(a, sprintf("--threshold=%s", r$threshold))
  t0 <- proc.time()[["elapsed"]]
  before <- list_segs()
  out <- suppressWarnings(system2(rscript, a, stdout = TRUE, stderr = TRUE))
  status <- attr(out, "status"); if (is.null(status)) status <- 0L
  writeLines(out)
  clean <- gsub("\033\\[[0-9;]*m", "", unlist(strsplit(out, "\r", fixed = TRUE)))
  counts <- grep("^Results:", clean, value = TRUE)
  label <- if (is.na(r$threshold)) r$plan else sprintf("%s (pageshare.threshold = %s)", r$plan, r$threshold)
  summary <- c(summary, sprintf("%-45s %s  [status %d, %.0f s]", label,
    if (length(counts)) sub("^Results: ", "", counts[length(counts)]) else "no results",
    status, proc.time()[["elapsed"]] - t0))
  Sys.sleep(1) # let the workers of the run exit
  left <- leaked(before)
  if (length(left)) {
    summary <- c(summary, sprintf("  %d segment(s) left by this run: %s", length(left), paste(left, collapse = " ")))
    exit <- 1L
  }
  if (status != 0L) exit <- 1L
}
cat("\n==== future.tests summary ====\n")
cat(summary, sep = "\n")
quit(status = exit)
