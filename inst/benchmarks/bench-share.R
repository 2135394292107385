# share() of 100 MB and 800 MB against a plain in-memory copy (x + 0) and
# against serialize(x, NULL): wall time (median of reps) and peak memory of the
# process measured as PSS (from /proc/PID/smaps_rollup, sampled every 10 ms by
# the parent while each case runs in its own fresh R process), and as the peak
# of a memory cgroup holding that process (cgroup-memory.R), which also counts
# shared-memory pages that no process maps (PSS does not).
#
# Run: Rscript inst/benchmarks/bench-share.R [sizes in MB, default 100 800] [reps, default 3]
args <- commandArgs(trailingOnly = TRUE)
sizes <- if (length(args) >= 1) as.numeric(strsplit(args[1], ",")[[1]]) else c(100, 800)
reps <- if (length(args) >= 2) as.integer(args[2]) else 3L

pss_kb <- function(pid) {
  f <- tryCatch(readLines(sprintf("/proc/%d/smaps_rollup", pid)), error = function(e) NULL, warning = function(w) NULL)
  if (is.null(f)) return(NA_real_)
  as.numeric(sub("^Pss:\\s+(\\d+) kB$", "\\1", grep("^Pss:", f, value = TRUE)))
}

# Run `op` on a fresh x of `mb` MB in a child R; returns c(seconds, cgroup
# extra MB, baseline MB, peak MB).
run_case <- function(op, mb) {
  out <- tempfile()
  cg_script <- normalizePath(file.path("inst", "benchmarks", "cgroup-memory.R"))
  proc <- callr::r_bg(function(op, mb, out, cg_script) {
    library(pageshare)
    source(cg_script, local = TRUE)
    cgroup_enter()
    x <- runif(mb * 2^20 / 8)
    invisible(gc())
    writeLines("ready", out)
    Sys.sleep(0.3)                     # the parent records the baseline
    cg_base <- cgroup_mb()
    cgroup_reset_peak()
    t <- system.time(y <- switch(op,
      share = share(x),
      copy = x + 0,
      serialize = serialize(x, NULL)))[["elapsed"]]
    cg_extra <- cgroup_peak_mb() - cg_base
    Sys.sleep(0.2)
    rm(y, x); forget_shared(); invisible(gc())
    cgroup_leave()
    c(t, cg_extra)
  }, args = list(op = op, mb = mb, out = out, cg_script = cg_script))
  while (!file.exists(out) && proc$is_alive()) Sys.sleep(0.01)
  Sys.sleep(0.15)
  base <- pss_kb(proc$get_pid())
  peak <- base
  while (proc$is_alive()) {
    peak <- max(peak, pss_kb(proc$get_pid()), na.rm = TRUE)
    Sys.sleep(0.01)
  }
  r <- proc$get_result()
  c(seconds = r[1], cg_extra_mb = r[2], base_mb = base / 1024, peak_mb = peak / 1024)
}

rows <- list()
for (mb in sizes) for (op in c("share", "copy", "serialize")) {
  r <- vapply(seq_len(reps), function(i) run_case(op, mb), numeric(4))
  rows[[length(rows) + 1]] <- data.frame(
    size_mb = mb, operation = op,
    median_s = round(median(r["seconds", ]), 3),
    extra_peak_mb = round(median(r["peak_mb", ] - r["base_mb", ]), 0),
    cg_extra_mb = round(median(r["cg_extra_mb", ]), 0))
  print(rows[[length(rows)]])
}
res <- do.call(rbind, rows)
res$vs_copy <- round(res$median_s / res$median_s[match(paste(res$size_mb, "copy"), paste(res$size_mb, res$operation))], 2)

md <- c(sprintf("# share() vs copy vs serialize (%s, %d reps, median)", format(Sys.time(), "%Y-%m-%d"), reps), "",
        "| size (MB) | operation | median time (s) | time vs `x + 0` | extra peak PSS (MB) | extra cgroup peak (MB) |",
        "|---:|---|---:|---:|---:|---:|",
        sprintf("| %g | %s | %.3f | %.2f | %.0f | %.0f |", res$size_mb,
                c(share = "`share(x)`", copy = "`x + 0`", serialize = "`serialize(x, NULL)`")[res$operation],
                res$median_s, res$vs_copy, res$extra_peak_mb, res$cg_extra_mb))
dir.create("inst/benchmarks/results", showWarnings = FALSE, recursive = TRUE)
writeLines(md, "inst/benchmarks/results/share.md")
cat(md, sep = "\n")
