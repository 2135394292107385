# future >= 1.40 replaces a multisession worker that died before it uses its
# node again. future < 1.40 does not: the dead node stays in the cluster, and
# every later future runs on the workers that are left. shm_multisession
# replaces it there too, right after the future that ran on it failed
# (result()), with a new worker started the way the plan started its workers.

# The worker options a plan was set up with, by cluster name (future < 1.40).
plan_worker_options <- new.env(parent = emptyenv())

remember_worker_options <- function(cl, rscript_libs, rscript_args) {
  name <- attr(cl, "name", exact = TRUE)
  if (!is.null(name)) plan_worker_options[[name]] <- list(rscript_libs = rscript_libs, rscript_args = rscript_args)
  invisible()
}

replace_dead_worker <- function(future) {
  if (utils::packageVersion("future") >= "1.40.0") return(invisible(FALSE))
  registry <- environment(foreign_internal("future", "ClusterRegistry"))
  cl <- get0("cluster", envir = registry, inherits = FALSE)
  i <- future[["node"]]
  if (!inherits(cl, "cluster") || !is.numeric(i) || length(i) != 1L || i > length(cl)) {
    return(invisible(FALSE))
  }
  pid <- cl[[i]]$session_info$process$pid
  if (!is.numeric(pid) || !dead_within(pid, 0.5)) return(invisible(FALSE))
  # The plan's options are kept under the name of the future's cluster: the
  # registry's copy carries no name.
  name <- attr(future[["workers"]], "name", exact = TRUE)
  opts <- if (is.character(name) && length(name) == 1L && nzchar(name)) plan_worker_options[[name]]
  libs <- if (is.null(opts)) .libPaths() else opts$rscript_libs
  args <- if (is.null(opts)) worker_heap_args() else opts$rscript_args
  new <- tryCatch(nodelay_sockets(parallelly::makeClusterPSOCK(1L, rscript_libs = libs, rscript_args = args)),
                  error = function(e) NULL)
  if (is.null(new)) return(invisible(FALSE))
  tryCatch(close(cl[[i]]$con), error = function(e) NULL)
  cl[[i]] <- new[[1L]]
  assign("cluster", cl, envir = registry)
  invisible(TRUE)
}

# Wait up to `timeout` seconds for `pid` to be gone (a killed process closes
# its sockets before the kernel marks it dead).
dead_within <- function(pid, timeout) {
  deadline <- Sys.time() + timeout
  repeat {
    if (process_gone(pid)) return(TRUE)
    if (Sys.time() > deadline) return(FALSE)
    Sys.sleep(0.01)
  }
}
