#!/usr/bin/env Rscript
# A 2-million-row data frame (numeric, character and factor columns) split by a
# factor and summarised group by group with future_lapply(): multisession vs
# shm_multisession, 2 workers, side by side in one run. Results must be
# identical; wall time and peak memory (sum of PSS over master + workers, see
# pss-sampler.R) are reported.
#
#   Rscript inst/benchmarks/bench-dataframe.R [rows, default 2e6] [--out=FILE]

suppressPackageStartupMessages({
  library(future)
  library(future.apply)
  library(pageshare)
})
args <- commandArgs(trailingOnly = TRUE)
rows <- suppressWarnings(as.numeric(args[!startsWith(args, "--")][1]))
if (is.na(rows)) rows <- 2e6
out <- sub("^--out=", "", grep("^--out=", args, value = TRUE))
if (!length(out)) out <- file.path("inst", "benchmarks", "results", "dataframe.md")
workers <- 2L
old_opts <- options(future.globals.maxSize = +Inf)
source(file.path("inst", "benchmarks", "pss-sampler.R"))
source(file.path("inst", "benchmarks", "plan-workers.R"))

set.seed(42)
df <- data.frame(
  x = rnorm(rows),
  y = runif(rows),
  s = sprintf("id%07d", sample.int(rows)),
  g = factor(sample(sprintf("group%02d", 1:40), rows, replace = TRUE)),
  stringsAsFactors = FALSE
)
size_mb <- as.numeric(object.size(df)) / 2^20
groups <- split(seq_len(nrow(df)), df$g)
summarise <- function(idx) {
  d <- df[idx, ]
  c(n = nrow(d), mean_x = mean(d$x), cor_xy = cor(d$x, d$y), chars = sum(nchar(d$s)))
}

results <- list()
table_rows <- list()
for (kind in c("multisession", "shm_multisession")) {
  if (kind == "multisession") plan(multisession, workers = workers) else plan(shm_multisession, workers = workers)
  invisible(future_lapply(1:4, function(i) i))
  set_sampled_pids(plan_worker_pids())
  m <- measure(r <- future_lapply(groups, summarise))
  results[[kind]] <- r
  table_rows[[kind]] <- sprintf("| %s | %.2f | %.0f | %.0f |", kind, m$secs, m$peak_mb, m$base_mb)
  cat(kind, sprintf("%.2f s, peak %.0f MB, before %.0f MB\n", m$secs, m$peak_mb, m$base_mb))
  plan(sequential)
  forget_shared()
}
same <- identical(results$multisession, results$shm_multisession)
stop_sampler()
options(old_opts)

md <- c(
  sprintf("# future_lapply over a %s-row data frame split by a factor", format(rows, big.mark = ",", scientific = FALSE)),
  "",
  sprintf("Run %s, %d workers; the data frame (numeric, numeric, character, factor columns) is %.0f MB in R;",
          format(Sys.time(), "%Y-%m-%d %H:%M"), workers, size_mb),
  "40 groups, `future_lapply(split(seq_len(nrow(df)), df$g), summarise)`.",
  sprintf("Results identical between the two plans: %s.", if (same) "yes" else "NO"),
  "",
  "| plan | wall (s) | peak PSS, master + workers (MB) | before (MB) |",
  "|---|---:|---:|---:|",
  unlist(table_rows)
)
dir.create(dirname(out), recursive = TRUE, showWarnings = FALSE)
writeLines(md, out)
cat(md, sep = "\n")
if (!same) quit(status = 1)
