# Exact peak memory of this process tree from a memory cgroup (v1), as a second
# measure beside the sampled PSS sum: a cgroup counts anonymous memory and
# shared-memory (memfd, tmpfs) pages alike, including segment pages no process maps at the
# moment (PSS misses those), and its peak is kept by the kernel, so nothing is
# sampled. The benchmark process moves itself into a fresh cgroup before it
# allocates its data; workers it starts inherit the cgroup. Needs root and the
# cgroup v1 memory controller; otherwise every value is NA.
#   source("inst/benchmarks/cgroup-memory.R"); cgroup_enter()
#   cgroup_reset_peak(); before <- cgroup_mb(); ...; peak <- cgroup_peak_mb()
#   cgroup_leave() at the end
cg_state <- new.env()

cgroup_enter <- function() {
  root <- "/sys/fs/cgroup/memory"
  if (!file.exists(file.path(root, "memory.max_usage_in_bytes"))) return(invisible(FALSE))
  dir <- file.path(root, sprintf("pageshare-bench-%d", Sys.getpid()))
  ok <- tryCatch({
    dir.create(dir, showWarnings = FALSE)
    writeLines(as.character(Sys.getpid()), file.path(dir, "cgroup.procs"))
    TRUE
  }, error = function(e) FALSE, warning = function(w) FALSE)
  if (ok) {
    cg_state$dir <- dir
    cg_state$root <- root
  }
  invisible(ok)
}

cg_read <- function(file) {
  if (is.null(cg_state$dir)) return(NA_real_)
  as.numeric(readLines(file.path(cg_state$dir, file), warn = FALSE)[1]) / 2^20
}
cgroup_mb <- function() cg_read("memory.usage_in_bytes")
cgroup_peak_mb <- function() cg_read("memory.max_usage_in_bytes")
cgroup_reset_peak <- function() {
  if (!is.null(cg_state$dir)) writeLines("0", file.path(cg_state$dir, "memory.max_usage_in_bytes"))
}

# Move back to the parent cgroup and remove ours (call after the workers are gone).
cgroup_leave <- function() {
  if (is.null(cg_state$dir)) return(invisible())
  try(writeLines(as.character(Sys.getpid()), file.path(cg_state$root, "cgroup.procs")), silent = TRUE)
  Sys.sleep(0.2)
  for (i in 1:20) if (suppressWarnings(file.remove(cg_state$dir)) || !dir.exists(cg_state$dir)) break else Sys.sleep(0.1)
  cg_state$dir <- NULL
  invisible()
}

# The directory of this process's memory cgroup (v1). Stops where there is
# none, or without root (a case is run in a cgroup made below it).
cgroup_v1_base <- function() {
  if (!identical(unname(Sys.info()[["effective_user"]]), "root")) stop("needs root (memory cgroups)")
  line <- grep("^[0-9]+:([^:]*,)?memory(,[^:]*)?:", readLines("/proc/self/cgroup"), value = TRUE)
  if (!length(line)) stop("needs the cgroup v1 memory controller")
  file.path("/sys/fs/cgroup/memory", sub("^[^:]*:[^:]*:/?", "", line[1]))
}

# Run the R code `lines` in a fresh Rscript inside a memory cgroup of its own
# (made below this process's, removed after), so that the case and every
# process it starts are counted; the case finds its cgroup's directory in
# CASE_CGROUP. `env`: more NAME=value settings; `dir`: where it runs (as in a
# folder of its own: batchtools keeps its registry in ./.future). Returns the
# numbers of the line "RESULT ..." that the case prints (stops with its output
# when there is none).
run_in_cgroup <- function(label, lines, env = character(), dir = NULL) {
  cg <- file.path(cgroup_v1_base(), sprintf("pageshare-%s-%d", label, Sys.getpid()))
  dir.create(cg, showWarnings = FALSE)
  on.exit({ Sys.sleep(0.5); suppressWarnings(file.remove(cg)) }, add = TRUE)
  script <- tempfile(fileext = ".R")
  writeLines(lines, script)
  on.exit(unlink(script), add = TRUE)
  # (the shell enters the cgroup first, so that R and every process it starts are in it)
  cd <- if (is.null(dir)) "" else sprintf("cd %s && ", shQuote(dir))
  vars <- paste(c(paste0("CASE_CGROUP=", cg), env), collapse = " ")
  out <- system2("bash", c("-c", shQuote(sprintf("echo $$ > %s/cgroup.procs && %s%s exec %s %s", cg, cd, vars,
                                                   file.path(R.home("bin"), "Rscript"), script))),
                 stdout = TRUE, stderr = TRUE)
  line <- grep("^RESULT", out, value = TRUE)
  if (!length(line)) stop(paste(out, collapse = "\n"))
  as.numeric(strsplit(line, " ")[[1]][-1])
}
