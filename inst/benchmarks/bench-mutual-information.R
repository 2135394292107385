# Mutual information of every gene of the synthetic stand-in for the memshare
# paper's data (standin-data.R: 19,637 genes x 10,446 cases, 1.6 GB of
# doubles, 32 classes) with the diagnosis, on pageshare's pool:
#   1. X is shared once (time, cgroup memory);
#   2. all MIs on 2 workers with method = "memshare" and with "pde": wall
#      time and extra cgroup peak memory (over the baseline with X built),
#      MI distribution;
#   3. the same results on 1 worker (this process) for a spread subset of
#      the genes, and on 2 workers with another block layout;
#   4. side by side on 200 genes: memshare's R reference (its R/mutualinfo.R
#      with DataVisualizations and ScatterDensity, if installed in the library
#      named by PAGESHARE_REFLIB and memshare's sources in MEMSHARE_SRC) against
#      pageshare's mutualinfo(), one pair at a time: time per gene, ratio, and
#      agreement (on the first 10,000 cases: above 10,000 memshare draws a
#      random sample for its radius).
# Results: inst/benchmarks/results/mutual-information.md (and a PNG of the MI
# distribution next to it).
#
#   PAGESHARE_REFLIB=/path/to/reflib MEMSHARE_SRC=/path/to/memshare \
#     Rscript inst/benchmarks/bench-mutual-information.R [genes, default 19637] [side-by-side genes, default 200]
args <- commandArgs(trailingOnly = TRUE)
p <- if (length(args) >= 1) as.integer(args[1]) else 19637L
n_side <- if (length(args) >= 2) as.integer(args[2]) else 200L
suppressPackageStartupMessages(library(pageshare))
source(file.path("inst", "benchmarks", "cgroup-memory.R"))
source(file.path("inst", "benchmarks", "standin-data.R"))
cgroup_enter()

t_gen <- system.time(d <- standin_data(p = p))[["elapsed"]]
X <- d$X
y <- d$y
d$X <- NULL
size_mb <- as.numeric(object.size(X)) / 2^20
cat(sprintf("stand-in: %d x %d doubles, %.0f MB, made in %.0f s\n", nrow(X), ncol(X), size_mb, t_gen))
warm <- round(seq(1, nrow(X), length.out = 200))
invisible(mutual_information(X[warm, 1:2], y[warm], cores = 2))   # start the pool (2 workers)
invisible(gc())
base_mb <- cgroup_mb()
cgroup_reset_peak()

t_share <- system.time(X <- share(X))[["elapsed"]]
runs <- list()
for (method in c("memshare", "pde")) {
  invisible(gc())
  t <- system.time(mi <- mutual_information(X, y, method = method, cores = 2))[["elapsed"]]
  runs[[method]] <- list(mi = mi, seconds = t, peak_extra_mb = cgroup_peak_mb() - base_mb)
  cat(sprintf("%s: %.1f s on 2 workers, extra cgroup peak so far %.0f MB\n", method, t, runs[[method]]$peak_extra_mb))
}
peak_extra_mb <- cgroup_peak_mb() - base_mb
stopifnot(shared_info(X)$materializations == 0)

# The same numbers whatever the number of workers.
sub <- unique(round(seq(1, p, length.out = min(p, 1000L))))
same <- vapply(names(runs), function(method) {
  one <- mutual_information(X[, sub], y, method = method, cores = 1)
  two <- mutual_information(X[, rev(sub)], y, method = method, cores = 2)
  identical(one, runs[[method]]$mi[sub]) && identical(rev(two), one)
}, logical(1))
cat("identical on 1 and 2 workers:", same, "\n")

# Side by side with memshare's R code on n_side genes.
side <- round(seq(1, p, length.out = n_side))
reflib <- Sys.getenv("PAGESHARE_REFLIB")
src <- Sys.getenv("MEMSHARE_SRC")
ref <- NULL
if (nzchar(reflib) && nzchar(src) && file.exists(file.path(src, "R", "mutualinfo.R"))) {
  .libPaths(c(.libPaths(), reflib))
  if (requireNamespace("ScatterDensity", quietly = TRUE) && requireNamespace("DataVisualizations", quietly = TRUE)) {
    ref <- new.env()
    sys.source(file.path(src, "R", "mutualinfo.R"), envir = ref)
  }
}
pair_time <- function(f, cols, rows) {
  v <- numeric(length(cols))
  t <- system.time(for (i in seq_along(cols)) v[i] <- suppressWarnings(f(X[rows, cols[i]], y[rows])))[["elapsed"]]
  list(values = v, per_gene_ms = 1000 * t / length(cols))
}
all_rows <- seq_len(nrow(X))
first <- seq_len(min(nrow(X), 10000L))
ps_pair <- function(x, y) mutualinfo(x, y, isYDiscrete = TRUE)
side_rows <- list(pageshare = pair_time(ps_pair, side, all_rows),
                  pageshare_10000 = pair_time(ps_pair, side, first))
side_rows$block <- list(per_gene_ms = 1000 * system.time(
  mutual_information(X[, side], y, method = "memshare", cores = 1))[["elapsed"]] / n_side)
if (!is.null(ref)) {
  ref_pair <- function(x, y) ref$mutualinfo(x, y, isYDiscrete = TRUE)
  side_rows$reference <- pair_time(ref_pair, side, all_rows)
  side_rows$reference_10000 <- pair_time(ref_pair, side, first)
  agree <- max(abs(side_rows$reference_10000$values - side_rows$pageshare_10000$values))
  agree_full <- max(abs(side_rows$reference$values - side_rows$pageshare$values))
}

# Figure: the MI distribution of all genes (both methods).
png_file <- file.path("inst", "benchmarks", "results", "mutual-information.png")
dir.create(dirname(png_file), showWarnings = FALSE, recursive = TRUE)
png(png_file, width = 1000, height = 420)
op <- par(mfrow = c(1, 2))
for (method in names(runs)) {
  hist(runs[[method]]$mi, breaks = 80, main = sprintf("method = \"%s\": %d genes, %.0f s on 2 workers", method, p,
       runs[[method]]$seconds), xlab = "I(X_j; Y) (nats)", col = "grey80", border = "grey40")
}
par(op)
invisible(dev.off())

q <- function(v) paste(sprintf("%.4f", quantile(v, c(0.1, 0.25, 0.5, 0.75, 0.9))), collapse = " / ")
md <- c(sprintf("# Mutual information of the synthetic stand-in (%s)", format(Sys.time(), "%Y-%m-%d")), "",
  sprintf("Machine: %d cores, %s; %s. Data: `standin-data.R`, %d genes x %d cases (%.0f MB of doubles), 32 classes, made in %.0f s.",
          parallel::detectCores(), "Debian 12", R.version.string, ncol(X), nrow(X), size_mb, t_gen), "",
  "Command: `PAGESHARE_REFLIB=... MEMSHARE_SRC=... Rscript inst/benchmarks/bench-mutual-information.R` in the package source.", "",
  "## All genes on 2 workers", "",
  sprintf("`share(X)`: %.1f s. Baseline: the cgroup with X built and the pool of 2 workers started; extra peak = cgroup peak - baseline.", t_share), "",
  "| method | wall time (s) | per gene (ms, both workers) | extra cgroup peak so far (MB) | x size(X) | MI quantiles 10/25/50/75/90% (nats) |",
  "|---|---:|---:|---:|---:|---|",
  vapply(names(runs), function(m) sprintf("| `%s` | %.1f | %.2f | %.0f | %.2f | %s |", m, runs[[m]]$seconds,
         1000 * runs[[m]]$seconds / p, runs[[m]]$peak_extra_mb, runs[[m]]$peak_extra_mb / size_mb, q(runs[[m]]$mi)), ""),
  "",
  sprintf("Extra cgroup peak over the whole run (share + both methods): %.0f MB = %.2f x size(X). Views materialized in this process: %d.",
          peak_extra_mb, peak_extra_mb / size_mb, shared_info(X)$materializations), "",
  sprintf("Identical results on 1 worker (this process) and on 2 workers with another block layout, %d genes spread over X: %s.",
          length(sub), paste(sprintf("%s %s", names(same), same), collapse = ", ")), "",
  "Median MI by kind of gene:", "",
  "| kind | genes | memshare | pde |", "|---|---:|---:|---:|",
  vapply(c("null", "weak", "moderate", "marker"), function(k) sprintf("| %s | %d | %.4f | %.4f |", k, sum(d$kind == k),
         median(runs$memshare$mi[d$kind == k]), median(runs$pde$mi[d$kind == k])), ""),
  "", "![MI distribution](mutual-information.png)", "",
  sprintf("## Side by side, %d genes, one pair at a time, one process", n_side), "",
  "| implementation | cases | ms per gene |", "|---|---:|---:|",
  sprintf("| pageshare `mutualinfo(x, y, isYDiscrete = TRUE)` | %d | %.2f |", nrow(X), side_rows$pageshare$per_gene_ms),
  sprintf("| pageshare `mutual_information(X[, genes], y, method = \"memshare\", cores = 1)` | %d | %.2f |", nrow(X), side_rows$block$per_gene_ms),
  if (!is.null(ref)) c(
    sprintf("| memshare 1.0.3.1 R/mutualinfo.R (DataVisualizations %s, ScatterDensity %s) | %d | %.1f |",
            utils::packageVersion("DataVisualizations"), utils::packageVersion("ScatterDensity"), nrow(X), side_rows$reference$per_gene_ms),
    "",
    sprintf("Ratio (reference / pageshare `mutualinfo()`): %.0f x; on the first 10,000 cases %.1f ms vs %.2f ms per gene.",
            side_rows$reference$per_gene_ms / side_rows$pageshare$per_gene_ms,
            side_rows$reference_10000$per_gene_ms, side_rows$pageshare_10000$per_gene_ms), "",
    sprintf("Largest |difference| of the MIs on the first 10,000 cases (where memshare's radius is deterministic): %.2e nats. On all %d cases (memshare samples 10,000 points with replacement for its radius, pageshare uses all): %.2e nats.",
            agree, nrow(X), agree_full))
  else "(memshare's reference was not available: set PAGESHARE_REFLIB and MEMSHARE_SRC.)")
writeLines(md, file.path("inst", "benchmarks", "results", "mutual-information.md"))
cat(md, sep = "\n")
rm(X); stop_workers(); forget_shared(); invisible(gc())
cgroup_leave()
