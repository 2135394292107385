#' pageshare: zero-copy shared memory for R's parallel workers
#'
#' pageshare moves large vectors into POSIX shared memory once; parallel workers
#' read the same pages through read-only ALTREP views that behave like ordinary R
#' vectors. See [share()] for the low-level interface, [with_handles()] for when
#' views travel as handles, [pageshare_options] for the options, and
#' [registerVariables()] for the memshare-compatible API.
#'
#' @keywords internal
#' @useDynLib pageshare, .registration = TRUE
"_PACKAGE"

.onLoad <- function(libname, pkgname) {
  load_option_defaults()
  check_page_handover()
  # Remove index entries of names registered by processes that died (kill -9);
  # segments themselves cannot be left behind. A load must never fail because
  # of this, hence the tryCatch.
  tryCatch(.Call(ps_sweep, segment_dir()), error = function(e) NULL)
  arm_gc_hook()
  addTaskCallback(rearm_after_task, name = "pageshare")
  arm_pool_finalizer()
  # S3 methods for future (a suggested package), registered when it is loaded.
  hook_future_methods()
  invisible()
}

.onAttach <- function(libname, pkgname) {
  announce_page_handover()
}

# After a garbage collection, drop identity-cache entries whose source is gone
# (R offers no finalizers on vectors). The hook is an environment with a
# finalizer: it fires once, after the first collection that finds it, and is
# re-armed after every top-level task and at every share(). (A hook re-armed
# from inside its own finalizer is never collected again, so that is avoided.)
gc_hook <- new.env(parent = emptyenv())
gc_hook$armed <- FALSE

arm_gc_hook <- function() {
  if (isTRUE(gc_hook$armed)) return(invisible())
  gc_hook$armed <- TRUE
  reg.finalizer(new.env(parent = emptyenv()), function(e) {
    gc_hook$armed <- FALSE
    if (is.loaded("ps_cache_evict", PACKAGE = "pageshare")) .Call(ps_cache_evict, cache_limit())
  })
  invisible()
}

rearm_after_task <- function(expr, value, ok, visible) {
  arm_gc_hook()
  watch_globals_limit()
  TRUE
}

.onUnload <- function(libpath) {
  removeTaskCallback("pageshare")
  restore_globals_limit()
  # Stop pageshare's own worker pool first: its workers may hold views.
  tryCatch(stop_all_workers(pool), error = function(e) NULL)
  # Unlink every segment this process owns. The DLL stays loaded: views that
  # are still alive must keep their ALTREP methods.
  tryCatch(.Call(ps_release_all), error = function(e) NULL)
  invisible()
}
