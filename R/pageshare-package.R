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
  # Reclaim segments left by processes that died without cleaning up (kill -9).
  # A load must never fail because of this, hence the tryCatch.
  tryCatch(.Call(ps_sweep, segment_dir()), error = function(e) NULL)
  arm_gc_hook()
  arm_pool_finalizer()
  # S3 methods for future (a suggested package), registered when it is loaded.
  hook_future_methods()
  invisible()
}

# After every garbage collection, drop identity-cache entries whose source object
# nobody references any more (R offers no finalizers on vectors). The hook is an
# environment whose finalizer re-arms a new one.
arm_gc_hook <- function() {
  hook <- new.env(parent = emptyenv())
  reg.finalizer(hook, function(e) {
    if (is.loaded("ps_cache_evict", PACKAGE = "pageshare")) {
      .Call(ps_cache_evict, cache_limit())
      arm_gc_hook()
    }
  })
  invisible()
}

.onUnload <- function(libpath) {
  # Stop pageshare's own worker pool first: its workers may hold views.
  tryCatch(stop_pool(pool), error = function(e) NULL)
  # Unlink every segment this process owns. The DLL stays loaded: views that
  # are still alive must keep their ALTREP methods.
  tryCatch(.Call(ps_release_all), error = function(e) NULL)
  invisible()
}
