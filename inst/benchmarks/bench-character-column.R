#!/usr/bin/env Rscript
# A global data frame of 1e6 rows used by 10 futures in a row: with a
# character column against the same with an integer column, under
# plan(shm_multisession) (and multisession for reference), 2 workers. The
# first future shares the columns; the 2nd to 10th find them shared already.
# Reports the median time of futures 2-10 per case (cases interleaved, round
# after round) and whether any segment was made after the first future.
#
#   Rscript inst/benchmarks/bench-character-column.R [rounds, default 3]
suppressPackageStartupMessages({ library(future); library(pageshare) })
args <- commandArgs(trailingOnly = TRUE)
rounds <- if (length(args)) as.integer(args[[1L]]) else 3L
n <- 1e6
set.seed(1)
make <- function(kind) {
  data.frame(a = runif(n), s = if (kind == "character") sprintf("id%07d", sample(n)) else sample(n))
}
ms <- function(expr) { t0 <- Sys.time(); force(expr); as.numeric(Sys.time() - t0, units = "secs") * 1000 }
cat(sprintf("Run: %s, R %s, future %s, pageshare %s, %d round(s), load average %s\n",
            format(Sys.time(), "%Y-%m-%d %H:%M %Z"), getRversion(), packageVersion("future"),
            packageVersion("pageshare"), rounds, readLines("/proc/loadavg", warn = FALSE)))
later <- list()
new_segments <- list()
for (round in seq_len(rounds)) {
  for (strategy in c("shm_multisession", "multisession")) {
    backend <- if (strategy == "shm_multisession") shm_multisession else multisession
    plan(backend, workers = 2)
    invisible(value(lapply(1:2, function(i) future(i))))   # (workers warm)
    for (kind in c("character", "integer")) {
      df <- make(kind)
      key <- paste(strategy, kind)
      times <- numeric(10)
      for (i in 1:10) {
        times[i] <- ms(value(future(nrow(df))))
        if (i == 1L) first <- shared_segments()$name
      }
      later[[key]] <- c(later[[key]], times[-1L])
      new_segments[[key]] <- c(new_segments[[key]], length(setdiff(shared_segments()$name, first)))
      rm(df)
      invisible(gc())
    }
    plan(sequential)
  }
}
cat("\nFutures 2-10 using a 1e6-row data frame global (median ms), and segments made after the first future\n")
for (strategy in c("shm_multisession", "multisession")) {
  chr <- median(later[[paste(strategy, "character")]])
  int <- median(later[[paste(strategy, "integer")]])
  cat(sprintf("  %-17s character column %7.1f ms, integer column %7.1f ms: x%.2f; new segments: %s\n",
              strategy, chr, int, chr / int, paste(new_segments[[paste(strategy, "character")]], collapse = ",")))
}
