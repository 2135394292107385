# The validateFutureGlobals() method of the pool backend of future >= 1.40
# (its other methods are in future-pool.R; those of future < 1.40 in
# future-pool-legacy.R), and the registration of them all.

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
  register_future_pool_methods(ns)
  invisible()
}

hook_future_methods <- function() {
  if (isNamespaceLoaded("future")) {
    register_future_methods()
  } else {
    setHook(packageEvent("future", "onLoad"), register_future_methods)
  }
}
