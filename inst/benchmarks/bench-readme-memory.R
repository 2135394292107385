#!/usr/bin/env Rscript
# Peak memory of README's "30 seconds" with a large X, in a container's
# setting: a 64 MB /dev/shm (Docker's default) in a private mount namespace,
# each case in a fresh R process and a fresh memory cgroup (v1) holding it and
# its workers. Needs root. Not a test: it needs ~5 x size(X) of free memory.
#
#   Rscript inst/benchmarks/bench-readme-memory.R [n] [reps]
#
# n: X is n x n doubles (default 11586: 1 GB); reps: rounds, cases interleaved
# (default 2). Prints, per case, the median over rounds of the cgroup peak
# divided by size(X) and of each step's time. Cases:
#   readme        the example as README has it (futures, plan(sequential), foreach)
#   both-alive    the same without plan(sequential): both pools hold workers
#   both-alive-8M the same with options(pageshare.worker_vsize = 8 * 2^20)
#   apply-shm     future_apply(X, 2, f) under shm_multisession
#   apply-multi   future_apply(X, 2, f) under multisession (the peer)
args <- suppressWarnings(as.numeric(commandArgs(trailingOnly = TRUE)))
n <- if (length(args) >= 1 && !is.na(args[1])) as.integer(args[1]) else 11586L
reps <- if (length(args) >= 2 && !is.na(args[2])) as.integer(args[2]) else 2L
if (!identical(unname(Sys.info()[["effective_user"]]), "root") || !nzchar(Sys.which("unshare"))) {
  stop("needs root and unshare (a private mount namespace with a 64 MB /dev/shm)")
}
# The cgroup (v1) this process is in, below which each case gets its own.
cgroup_base <- local({
  line <- grep("^[0-9]+:([^:]*,)?memory(,[^:]*)?:", readLines("/proc/self/cgroup"), value = TRUE)
  if (!length(line)) stop("needs the cgroup v1 memory controller")
  file.path("/sys/fs/cgroup/memory", sub("^[^:]*:[^:]*:/?", "", line[1]))
})

setup <- c(
  "suppressPackageStartupMessages({library(pageshare); library(future.apply); library(foreach)})",
  "options(future.globals.maxSize = Inf)   # for multisession's case only",
  sprintf("n <- %dL; X <- rnorm(n * n); dim(X) <- c(n, n)   # made without a second copy", n),
  "y <- rnorm(n); secs <- numeric(0)",
  "step <- function(name, expr) secs[[name]] <<- system.time(expr)[['elapsed']]")
futures <- c(
  "plan(shm_multisession, workers = 2)",
  "step('future_sapply', r1 <- future_sapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))")
doshm <- c(
  "registerDoShm(cores = 2)",
  "step('foreach', r2 <- foreach(j = seq_len(ncol(X)), .combine = c) %dopar% cor(X[, j], y))",
  "stop_workers()")
apply_case <- function(plan) c(
  sprintf("plan(%s, workers = 2)", plan),
  "step('future_apply', r3 <- future_apply(X, 2, function(v) cor(v, y)))")
cases <- list(
  readme = c(futures, "plan(sequential)", doshm),
  `both-alive` = c(futures, doshm),
  `both-alive-8M` = c("options(pageshare.worker_vsize = 8 * 2^20)", futures, doshm),
  `apply-shm` = apply_case("shm_multisession"),
  `apply-multi` = apply_case("multisession"))

# One case: a fresh R process, moved into a fresh cgroup before R starts (so
# that R's own memory counts too), in a mount namespace with a 64 MB /dev/shm.
run_case <- function(body) {
  code <- tempfile(fileext = ".R"); out <- tempfile(fileext = ".rds")
  cg <- file.path(cgroup_base, sprintf("pageshare-bench-%d", Sys.getpid()))
  stopifnot(dir.create(cg))
  on.exit({
    unlink(c(code, out))
    for (i in 1:50) if (suppressWarnings(file.remove(cg)) || !dir.exists(cg)) break else Sys.sleep(0.1)
  })
  writeLines(c(setup, body, "plan(sequential)",
               sprintf("peak <- as.numeric(readLines(%s))", deparse(file.path(cg, "memory.max_usage_in_bytes"))),
               sprintf("saveRDS(c(peak = peak / (8 * n * n), secs), %s)", deparse(out))), code)
  sh <- sprintf(paste("echo $$ > %s/cgroup.procs && mount --make-private /dev/shm &&",
                      "mount -t tmpfs -o size=64m tmpfs /dev/shm && exec %s --vanilla %s"),
                cg, shQuote(file.path(R.home("bin"), "Rscript")), shQuote(code))
  system2("unshare", c("--mount", "--propagation", "unchanged", "sh", "-c", shQuote(sh)))
  if (file.exists(out)) readRDS(out) else c(peak = NA_real_)
}

cat(sprintf("X: %d x %d doubles (%.2f GB); R %s, future %s, future.apply %s, pageshare %s; %d round(s)\n",
            n, n, 8 * n * n / 2^30, getRversion(), packageVersion("future"), packageVersion("future.apply"),
            packageVersion("pageshare"), reps))
res <- setNames(vector("list", length(cases)), names(cases))
for (r in seq_len(reps)) for (name in names(cases)) res[[name]][[r]] <- run_case(cases[[name]])
for (name in names(cases)) {
  fields <- unique(unlist(lapply(res[[name]], names)))
  med <- vapply(fields, function(f) stats::median(vapply(res[[name]], function(v) v[f], 0)), 0)
  cat(sprintf("%-14s peak / size(X) %.3f%s\n", name, med[["peak"]],
              paste(sprintf(", %s %.2f s", fields[-1], med[-1]), collapse = "")))
}
