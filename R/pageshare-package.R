#' pageshare: zero-copy shared memory for R's parallel workers
#'
#' pageshare puts large vectors into sealed shared memory once; parallel
#' workers read the same pages through read-only ALTREP views that behave like
#' ordinary R vectors, instead of each receiving a serialized copy. Your code
#' changes in one line.
#'
#' @section Front doors:
#' * **future**: `plan(`[shm_multisession]`)` in place of
#'   `plan(multisession)`; `future()`, future.apply, furrr and doFuture code
#'   runs unchanged, and large globals and large results travel as shared
#'   segments.
#' * **foreach**: [registerDoShm()] in place of `registerDoParallel()`; loops
#'   run on pageshare's own pool, or on a PSOCK cluster you give it.
#' * **memshare's API**: [registerVariables()], [retrieveViews()],
#'   [releaseViews()], [releaseVariables()], [retrieveMetadata()],
#'   [pageList()], [memshare_gc()], and [memApply()] / [memLapply()], which
#'   apply a function over the rows, columns or elements of shared data.
#' * **pageshare's own pool**: [start_workers()], [shm_call()] /
#'   [shm_value()] and [shm_map()], tasks over shared-memory rings instead of
#'   sockets (see `vignette("worker-pool")`); [stop_workers()] stops it.
#'
#' @section Sharing by hand:
#' [share()] makes a view of a vector; [with_handles()] makes views serialize
#' as handles of a few hundred bytes; [is_shared()], [shared_info()] and
#' [shared_segments()] tell what is shared; [forget_shared()] and
#' [sweep_shared()] clean up.
#'
#' @section Options, errors and more:
#' [pageshare_options] lists the options (the threshold from which a vector is
#' shared, the pool, the worker count ...); [pageshare_conditions] lists the
#' classes of the conditions pageshare signals. [mutual_information()] is a
#' mutual-information screen of many features against classes, on shared
#' data. Vignettes: `vignette("worker-pool")`, `vignette("view-contract")`,
#' `vignette("mutual-information")`.
#'
#' @examples
#' X <- share(matrix(runif(2e5), ncol = 20))   # a view of shared pages
#' is_shared(X)
#' shared_info(X)$bytes
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
    # (a bad option is reported by the next share, not from inside a collection)
    limit <- tryCatch(cache_limit(), error = function(e) Inf)
    if (is.loaded("ps_cache_evict", PACKAGE = "pageshare")) .Call(ps_cache_evict, limit)
  })
  invisible()
}

rearm_after_task <- function(expr, value, ok, visible) {
  arm_gc_hook()
  watch_globals_limit()
  watch_future_pool()
  TRUE
}

.onUnload <- function(libpath) {
  removeTaskCallback("pageshare")
  restore_globals_limit()
  # Stop pageshare's own worker pool first: its workers may hold views.
  tryCatch(pool_stop(), error = function(e) NULL)
  # Unlink every segment this process owns. The DLL stays loaded: views that
  # are still alive must keep their ALTREP methods.
  tryCatch(.Call(ps_release_all), error = function(e) NULL)
  invisible()
}
