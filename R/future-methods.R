# The methods future calls on a ShmMultisessionFuture (future < 1.40:
# result() and resolved(); run() is in future-methods-legacy.R), the
# validateFutureGlobals() method of the pool backend of future >= 1.40 (its
# other methods are in future-pool.R), and their registration.

result.ShmMultisessionFuture <- function(future, ...) {
  # Once result() returns or fails (e.g. the worker died), the worker will not
  # map the globals any more: drop the views (future may keep a failed future
  # referenced for a long time).
  on.exit(future$pageshare_views <- NULL, add = TRUE)
  # (future >= 1.40 may restart a dead worker here; future < 1.40 leaves that
  # to the next launch, see future-restart.R)
  res <- nodelay_sockets(NextMethod())
  if (inherits(res, "FutureResult") && inherits(res$value, "pageshare_result")) {
    if (is.null(future$result)) future$result <- res
    adopt_result(future)
    res <- future$result
  }
  future$pageshare_views <- NULL
  res
}

resolved.ShmMultisessionFuture <- function(x, timeout = NULL, ...) {
  if (nothing_to_read(x, timeout)) return(FALSE)
  ans <- nodelay_sockets(NextMethod()) # future >= 1.40 may restart a dead worker
  if (isTRUE(ans)) adopt_result(x)
  ans
}

# ---- future >= 1.40: validateFutureGlobals() of the pool backend (future-pool.R) --

# future >= 1.40 checks the globals' total size against the backend's own
# limit (future.globals.maxSize when the plan was set, +Inf when unset)
# before launchFuture(). The limit
# guards against copying large objects to workers; what shm_multisession sends
# as a handle is therefore counted as the handle: future's own check runs on
# the globals as they will be sent (shared here; launchFuture() then finds the
# same segments in the identity cache), measured inside the handle scope. A
# future still above it gets future's own error.
validateFutureGlobals.ShmPoolFutureBackend <- function(backend, future, ...) {
  if (is.infinite(backend[["maxSizeOfObjects"]])) return(NextMethod())
  orig <- future[["globals"]]
  shared <- share_globals(orig)
  if (is.null(shared)) return(NextMethod())
  restore <- attr(shared, "pageshare_restore")
  on.exit({
    future[["globals"]] <- orig
    restore_shared(restore)
  }, add = TRUE)
  attr(shared, "pageshare_views") <- NULL
  attr(shared, "pageshare_restore") <- NULL
  attr(shared, "pageshare_changed") <- NULL
  attr(shared, "total_size") <- NA_real_
  future[["globals"]] <- shared
  with_handles(NextMethod())
}

# ---- registration -------------------------------------------------------------

# future is in Suggests: the methods are registered when (and if) the future
# namespace is loaded, without loading it ourselves (workers unserializing a
# handle load pageshare and should not pay for future).
register_future_methods <- function(...) {
  ns <- asNamespace("future")
  check_foreign_internals("future")
  registerS3method("run", "ShmMultisessionFuture", run.ShmMultisessionFuture, envir = ns)
  registerS3method("result", "ShmMultisessionFuture", result.ShmMultisessionFuture, envir = ns)
  registerS3method("resolved", "ShmMultisessionFuture", resolved.ShmMultisessionFuture, envir = ns)
  if (exists("launchFuture", envir = ns, inherits = FALSE)) register_future_pool_methods(ns) # future >= 1.40
  invisible()
}

hook_future_methods <- function() {
  if (isNamespaceLoaded("future")) {
    register_future_methods()
  } else {
    setHook(packageEvent("future", "onLoad"), register_future_methods)
  }
}
