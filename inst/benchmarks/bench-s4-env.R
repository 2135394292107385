#!/usr/bin/env Rscript
# Extra memory of the process tree when a ~100 MB S4 object (a sparse Matrix),
# an environment holding a 100 MB vector, or an R6 object holding one is a
# global of two tasks running at once, one per worker, through every door:
# plan(multisession) and doParallel (every worker receives a copy) against
# plan(shm_multisession), registerDoShm(), shm_map() and memApply(VARS =)
# (the workers read views of the shared slots and bindings). Each case runs in
# a fresh Rscript inside a memory cgroup of its own; the figure is the
# cgroup's peak during the two tasks minus its usage just before them (workers
# started and warm), as a multiple of the object's data size. Needs root and the cgroup v1
# memory controller.
#
#   Rscript inst/benchmarks/bench-s4-env.R [rounds, default 3] [kind ...]
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
args <- commandArgs(trailingOnly = TRUE)
rounds <- if (length(args)) as.integer(args[[1L]]) else 3L
# (a plain vector of the same size: the reference for what sharing costs)
kinds <- if (length(args) > 1L) args[-1L] else c("vector", "sparse", "environment", "R6")

case <- c(
  'suppressPackageStartupMessages({ library(pageshare); library(future) })',
  'kind <- Sys.getenv("CASE_KIND")',
  'set.seed(1)',
  'obj <- switch(kind,',
  '  sparse = Matrix::rsparsematrix(1e5, 1e4, nnz = 8.4e6),   # x (8 B) + i (4 B) per value: ~100 MB',
  '  vector = runif(12.5e6),',
  '  environment = { e <- new.env(); e$v <- runif(12.5e6); e },',
  '  R6 = { H <- R6::R6Class("H", public = list(v = NULL, total = function() sum(self$v)));',
  '         h <- H$new(); h$v <- runif(12.5e6); h })',
  'touch <- switch(kind,',
  '  sparse = function(o) sum(o@x) + sum(o@i),',
  '  vector = function(o) sum(o),',
  '  environment = function(o) sum(o$v),',
  '  R6 = function(o) o$total())',
  'mb <- switch(kind, sparse = (length(obj@x) * 8 + length(obj@i) * 4) / 2^20, 12.5e6 * 8 / 2^20)',
  'system <- Sys.getenv("CASE_SYSTEM")',
  'if (system %in% c("multisession", "shm_multisession")) {',
  '  strategy <- if (system == "shm_multisession") shm_multisession else multisession',
  '  plan(strategy, workers = 2)',
  '  invisible(value(lapply(1:2, function(i) future(i))))   # (workers started and warm)',
  '  run <- function() unlist(value(lapply(1:2, function(i) future(touch(obj)))))',
  '} else if (system == "doParallel") {',
  '  cl <- parallel::makePSOCKcluster(2); doParallel::registerDoParallel(cl)',
  '  run <- function() foreach::`%dopar%`(foreach::foreach(i = 1:2, .combine = c, .export = c("touch", "obj")), touch(obj))',
  '} else {',
  '  start_workers(2)',
  '  if (system == "registerDoShm") registerDoShm(cores = 2)',
  '  run <- switch(system,',
  '    registerDoShm = function() foreach::`%dopar%`(foreach::foreach(i = 1:2, .combine = c, .export = c("touch", "obj")), touch(obj)),',
  '    shm_map = function() unlist(shm_map(1:2, function(i, o, f) f(o), o = obj, f = touch)),',
  '    memApply = function() unlist(memApply(matrix(1:2, 1), 2, function(col, o, f) f(o), VARS = list(o = obj, f = touch))))',
  '}',
  'cg <- Sys.getenv("CASE_CGROUP")',
  'writeLines("0", file.path(cg, "memory.max_usage_in_bytes"))',
  'before <- as.numeric(readLines(file.path(cg, "memory.usage_in_bytes"))) / 2^20',
  'stopifnot(all.equal(run(), rep(touch(obj), 2)))',
  'peak <- as.numeric(readLines(file.path(cg, "memory.max_usage_in_bytes"))) / 2^20',
  'plan(sequential); stop_workers()',
  'cat("RESULT", mb, peak - before, "\\n")')

cat(sprintf("Run: %s, R %s, pageshare %s, future %s, %d round(s), load average %s\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), getRversion(), packageVersion("pageshare"),
            packageVersion("future"), rounds, readLines("/proc/loadavg", warn = FALSE)))
# Each door beside the same loop without pageshare: futures (multisession),
# foreach (doParallel on a PSOCK cluster), and pageshare's pool doors.
systems <- c("multisession", "shm_multisession", "doParallel", "registerDoShm", "shm_map", "memApply")
rows <- list()
for (round in seq_len(rounds)) {
  for (kind in kinds) {
    for (system in systems) {   # (interleaved)
      r <- run_in_cgroup(paste0("s4env-", kind), case, env = c(paste0("CASE_KIND=", kind), paste0("CASE_SYSTEM=", system)))
      rows[[length(rows) + 1L]] <- data.frame(kind = kind, system = system, data_mb = r[[1L]], extra_mb = r[[2L]])
    }
  }
}
res <- do.call(rbind, rows)
cat("\nExtra memory of the tree while both workers read the object (MB, and x its data size; median of rounds)\n")
cat(sprintf("  %-12s %8s %s\n", "object", "data MB", paste(sprintf("%18s", systems), collapse = "")))
for (kind in unique(res$kind)) {
  s <- res[res$kind == kind, ]
  med <- tapply(s$extra_mb, s$system, median)[systems]
  cells <- sprintf("%9.1f (x%5.2f)", med, med / s$data_mb[1])
  cat(sprintf("  %-12s %8.1f %s\n", kind, s$data_mb[1], paste(cells, collapse = "")))
}
