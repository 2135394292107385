#!/usr/bin/env Rscript
# The split-apply pattern: split() of a data frame into 20 pieces, then
# future_lapply() or furrr::future_map() over the pieces, 2 workers (so 2
# chunks of 10 pieces, one per worker). Two shapes:
#   wide:   1e6 rows x 25 double columns + an integer group (~200 MB); each
#           piece ~10 MB, each of its columns ~400 KB (below the 1 MiB threshold)
#   narrow: 1e6 rows x 2 double columns + an integer group (~20 MB); each
#           piece ~1 MB, below the threshold even as a whole
# under plan(multisession) and plan(shm_multisession) (and, when
# PAGESHARE_OLD_LIB names a library holding an older pageshare, that one too).
# Each case runs in a fresh Rscript inside a memory cgroup of its own. Reports:
#   extra    the cgroup's peak during the map minus its usage just before it
#            (pieces made, workers started and warm), MB and x multisession's
#   sent     bytes the master sent to the workers during the map: bytes_sent
#            of its TCP sockets (`ss -tip`: multisession's workers are PSOCK
#            nodes) plus the messages it put on pageshare's pool (the
#            payloads of pool_submit(), where futures run on the pool), MB
#            per chunk
#   time     of the map, seconds
#   shared   the share of columns the workers saw as views
# Needs root and the cgroup v1 memory controller.
#
#   Rscript inst/benchmarks/bench-split-apply.R [rounds, default 3] [shape ...]
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
args <- commandArgs(trailingOnly = TRUE)
rounds <- if (length(args)) as.integer(args[[1L]]) else 3L
shapes <- if (length(args) > 1L) args[-1L] else c("wide", "narrow")
old_lib <- Sys.getenv("PAGESHARE_OLD_LIB")

case <- c(
  'suppressPackageStartupMessages({ library(pageshare); library(future); library(future.apply); library(furrr) })',
  'shape <- Sys.getenv("CASE_SHAPE"); door <- Sys.getenv("CASE_DOOR"); system <- Sys.getenv("CASE_SYSTEM")',
  'set.seed(1); n <- 1e6',
  'df <- as.data.frame(matrix(runif(n * if (shape == "wide") 25 else 2), n))',
  'df$g <- sample(20L, n, TRUE)',
  'mb <- sum(vapply(df, function(v) length(v) * if (is.integer(v)) 4 else 8, 0)) / 2^20',
  'pieces <- split(df, df$g); rm(df); invisible(gc())',
  'f <- function(p) c(shared = mean(vapply(p, pageshare::is_shared, NA)), sum = sum(vapply(p, sum, 0)))',
  'strategy <- if (system == "multisession") multisession else shm_multisession',
  'plan(strategy, workers = 2)',
  'invisible(value(lapply(1:2, function(i) future(i))))   # (workers started and warm)',
  'map <- if (door == "future_lapply") future_lapply else future_map',
  'tcp_sent <- function() {   # (bytes_sent of this process\'s TCP sockets, from ss)',
  '  out <- system2("ss", c("-tinpH"), stdout = TRUE)',
  '  mine <- grep(sprintf("pid=%d,", Sys.getpid()), out, fixed = TRUE)',
  '  sum(as.numeric(sub(".*bytes_sent:([0-9]+).*", "\\\\1", grep("bytes_sent:", out[mine + 1L], value = TRUE))))',
  '}',
  '# (and the bytes of the messages it sends through pageshare\'s pool, whose',
  '# futures travel as pool messages: the payloads given to pool_submit())',
  'pool_sent <- 0',
  'if (exists("pool_submit", asNamespace("pageshare"), inherits = FALSE)) {',
  '  trace("pool_submit", quote(pool_sent <<- pool_sent + length(payload)), where = asNamespace("pageshare"), print = FALSE)',
  '}',
  'cg <- Sys.getenv("CASE_CGROUP")',
  'invisible(gc())',
  'writeLines("0", file.path(cg, "memory.max_usage_in_bytes"))',
  'before <- as.numeric(readLines(file.path(cg, "memory.usage_in_bytes"))) / 2^20',
  'w0 <- tcp_sent(); pool_sent <- 0; t0 <- Sys.time()',
  'r <- map(pieces, f)',
  'secs <- as.numeric(Sys.time() - t0, units = "secs"); sent <- (tcp_sent() - w0 + pool_sent) / 2^20',
  'peak <- as.numeric(readLines(file.path(cg, "memory.max_usage_in_bytes"))) / 2^20',
  'stopifnot(isTRUE(all.equal(unname(vapply(r, `[[`, 0, "sum")), unname(vapply(pieces, function(p) sum(vapply(p, sum, 0)), 0)))))',
  'plan(sequential)',
  'cat("RESULT", mb, peak - before, sent / 2, secs, mean(vapply(r, `[[`, 0, "shared")), "\\n")')

cat(sprintf("Run: %s, R %s, pageshare %s, future %s, future.apply %s, furrr %s, %d round(s), load average %s\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), getRversion(), packageVersion("pageshare"),
            packageVersion("future"), packageVersion("future.apply"), packageVersion("furrr"), rounds,
            readLines("/proc/loadavg", warn = FALSE)))
systems <- c("multisession", "shm_multisession", if (nzchar(old_lib)) "shm_multisession (old)")
if (nzchar(old_lib)) {
  cat(sprintf("old: pageshare %s from %s\n", utils::packageDescription("pageshare", lib.loc = old_lib)$Version, old_lib))
}
rows <- list()
for (round in seq_len(rounds)) {
  for (shape in shapes) {
    for (door in c("future_lapply", "future_map")) {
      for (system in systems) {   # (interleaved)
        env <- c(paste0("CASE_SHAPE=", shape), paste0("CASE_DOOR=", door),
                 paste0("CASE_SYSTEM=", sub(" (old)", "", system, fixed = TRUE)),
                 if (grepl("(old)", system, fixed = TRUE)) paste0("R_LIBS=", old_lib))
        r <- run_in_cgroup("split-apply", case, env = env)
        rows[[length(rows) + 1L]] <- data.frame(shape = shape, door = door, system = system, data_mb = r[[1L]],
                                                extra_mb = r[[2L]], sent_mb = r[[3L]], secs = r[[4L]], shared = r[[5L]])
      }
    }
  }
}
res <- do.call(rbind, rows)
cat("\nMedian of rounds; extra memory also as x multisession's in the same shape and door\n\n")
cat("| shape (data) | door | plan | extra memory | sent per chunk | time | columns seen as views |\n|---|---|---|---|---|---|---|\n")
for (shape in unique(res$shape)) for (door in unique(res$door)) {
  s <- res[res$shape == shape & res$door == door, ]
  ref <- median(s$extra_mb[s$system == "multisession"])
  for (system in systems) {
    x <- s[s$system == system, ]
    cat(sprintf("| %s (%.0f MB) | %s | %s | %.1f MB (x%.2f) | %.2f MB | %.2f s | %.0f%% |\n", shape, x$data_mb[1], door,
                system, median(x$extra_mb), median(x$extra_mb) / ref, median(x$sent_mb), median(x$secs),
                100 * median(x$shared)))
  }
}
