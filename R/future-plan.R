#' A multisession future backend that shares large globals
#'
#' `plan(shm_multisession)` behaves like `plan(multisession)` (the same
#' background R sessions on this machine, the same arguments, [future::tweak()],
#' `nbrOfWorkers()`, `nbrOfFreeWorkers()`, workers stopped when the plan
#' changes) with one difference: when a future is launched, each of its globals
#' that is a shareable vector of at least `getOption("pageshare.threshold")`
#' bytes (also inside lists, data frame columns and the row names a data
#' frame stores; the smaller vectors of one global, lists inside it included,
#' are packed together when they reach the threshold together, so the pieces
#' of `split(df, g)` in a chunk of `future_lapply()` travel as handles) is
#' copied once
#' into POSIX shared memory ([share()]), and the worker receives a handle of a few
#' hundred bytes instead of the data (the rule is the same for [registerDoShm()]
#' and [memApply()]). Every worker reads the same pages through a
#' read-only view; the next future (for example the next chunk of a
#' `future_lapply()`) that uses the same object reuses the same segment.
#' Globals that are already views (`X <- share(X)`) are sent as handles too.
#' Large vectors that a function global reaches through its environment (for
#' example `X` in `future_lapply(idx, function(j) f(X[, j]))` run inside a
#' function that received `X` as an argument) are shared as well: while the
#' future is sent, their bindings (plain values and forced promises, also
#' locked ones) are swapped for views (equal values) and put back right after,
#' as they were. Unforced promises are never forced (on R 4.5, which cannot
#' tell them apart, a promise of a variable is read), missing arguments and
#' active bindings are left alone.
#'
#' Results travel the same way in reverse: a value of at least the threshold
#' computed by a worker is written into a segment there and the caller receives
#' a handle and becomes the segment's owner (option `pageshare.share_results`,
#' see [pageshare_options]). `value()` then returns a view.
#'
#' Existing code runs unchanged: replace `plan(multisession)` by
#' `plan(shm_multisession)`.
#'
#' The futures run on pageshare's own worker pool (see [shm_pool]), the pool
#' [shm_call()], [shm_map()], [registerDoShm()] and [memApply()] use: one pool
#' per session, started with `workers` workers when the plan is set (a pool of
#' another size is restarted) and stopped when the plan changes (on future
#' 1.31, which tells a plan nothing when it changes, after the top-level call
#' that changed it). Futures and results travel on the pool's rings in shared
#' memory instead of sockets (no R connection per worker), and each worker
#' evaluates its futures with future's own evaluator, so standard output,
#' conditions, immediate conditions (progressr updates, relayed while the
#' future runs), RNG checks and globals behave as under `multisession`. `n`
#' futures in flight run on `n` distinct workers. A worker that dies while
#' running a future (killed, crashed, out of memory) fails that future as
#' `multisession` does (a `FutureInterruptError` on future >= 1.40, a
#' `FutureError` before; also of class `pageshare_worker_died`), and a new
#' worker takes its place for the next future. A future stopped by
#' `cancel()` (future >= 1.40) ends its worker the same way and fails with a
#' `FutureCanceledError`, as under `multisession`. A worker whose master (the R
#' session that set the plan) is gone, killed or crashed, ends within a
#' fraction of a second, also in the middle of a future, instead of running on
#' with its shared memory mapped until the future ends.
#'
#' @section Globals size limit:
#' The limit on a future's globals (option `future.globals.maxSize`) exists to
#' stop a large object from being copied to every worker, which
#' `shm_multisession` does not do for what it shares, so no `options()` line is
#' needed. On future >= 1.40 the backend has its own limit (the option's value
#' when the plan is set, no limit when unset): `shm_multisession` keeps it and
#' counts each shared global at the size of its handle; the option itself is
#' never changed. (future.apply and furrr check the globals of the function
#' they apply against the option itself, at their full size: with a limit you
#' lowered they stop as under `multisession`; unset, the default, they pass.)
#' On future < 1.40, future (before any backend code runs),
#' future.apply and furrr check every global at its full size against the
#' option itself, and no hook lets a backend take part, so there, and only
#' there, pageshare changes another package's option:
#' * While `shm_multisession` is the plan, the option holds a huge value, so
#'   that future (before any backend code runs, on future < 1.40), future.apply
#'   and furrr let globals pass at their full size.
#' * When a future is launched, what it still sends by serialization (anything
#'   the sharing rule does not share, such as an environment holding large
#'   data) is checked against *your* limit: the value the option had when the
#'   plan was set, scaled by the
#'   number of elements of a chunk as future.apply and furrr scale it. Above
#'   it, the future stops with future's own error, as under `multisession`.
#'   Shared globals count at the size of their handles.
#' * Your value comes back when the plan changes (on future 1.31, which has no
#'   hook for this, at the end of the top-level call that changes it) and when
#'   pageshare is unloaded. A value you set while the plan is active is used
#'   as it is, as under `multisession` (shared globals then count at their full
#'   size too, until the plan is set again).
#'
#' @section Fallback:
#' If a global cannot be put into shared memory (for example because there is
#' not enough memory for a segment), the future is sent by plain serialization, as
#' `multisession` would send it, with one warning. `shm_multisession` never
#' fails where `multisession` would succeed.
#'
#' @section Errors:
#' A future's own errors come back as under `multisession`. Conditions of
#' pageshare's (see [pageshare_conditions]): `pageshare_worker_setup` when
#' the workers cannot load pageshare (the message names the library paths),
#' `pageshare_bad_argument` for a bad `workers`; the warning
#' `pageshare_fallback` when a global went by plain serialization.
#'
#' @section The pool's workers:
#' The function also carries a `"factory"` attribute for the `FutureBackend`
#' API of future 1.40 and later; on earlier versions its futures bring their
#' own methods. On future >= 1.40, `cancel(f, interrupt = TRUE)` ends the
#' worker running `f` (a new one takes its place). `rscript_libs` and
#' `rscript_args` start the pool's workers (also those that replace dead ones)
#' until the plan changes; further [parallelly::makeClusterPSOCK()] options
#' have no meaning for the pool and are ignored. What a future assigns in its
#' worker's global environment is removed when it is done (`multisession`
#' empties the global environment before each future); what
#' [shm_everywhere()] set up there stays, and futures see it.
#' This package's tests pass with future 1.31 (Debian 12), 1.34 (Debian 13)
#' and 1.75 (Debian unstable).
#'
#' @param ... Further arguments of a future, as for [future::multisession()]
#'   (for example `gc` or `earlySignal` through [future::tweak()]);
#'   [parallelly::makeClusterPSOCK()]'s options have no meaning for the pool.
#' @param workers Number of background R sessions (or a function returning
#'   it), as for [future::multisession()]: the size of pageshare's pool, which
#'   is not bound by R's connections (up to parallelly's limit on local
#'   workers, raised by `I(n)` or its option). The default is the number of
#'   available cores (`parallelly::availableCores()`, or the machine's count
#'   where that fails), but at most the number of free connections less 16,
#'   as multisession's default from future 1.40 on.
#' @param lazy If `TRUE`, the future is not launched until its value is needed.
#' @param rscript_libs Library paths of the workers; pageshare must be
#'   installed in one of them.
#' @param rscript_args Further command-line arguments of the workers' `Rscript`,
#'   as for [parallelly::makeClusterPSOCK()]. pageshare puts
#'   `--min-vsize` (option `pageshare.worker_vsize`) before them.
#' @param envir The environment from which globals are taken.
#' @return A future (when called by the future framework); use it through
#'   `future::plan(shm_multisession)`.
#' @seealso [share()], [future::multisession()], [pageshare_options]
#' @examples
#' \donttest{
#' if (requireNamespace("future", quietly = TRUE)) {
#'   old <- future::plan(shm_multisession, workers = 2)
#'   X <- matrix(rnorm(2e5), ncol = 20)      # 1.6 MB: shared once
#'   f <- future::future(c(is_shared(X), sum(X[, 1])))
#'   future::value(f)
#'   future::plan(old)
#' }
#' }
#' @export
shm_multisession <- function(...,
                             workers = pageshare::default_worker_count(),
                             lazy = FALSE, rscript_libs = .libPaths(), rscript_args = NULL,
                             envir = parent.frame()) {
  # (the pool's workers hold no R connection: their number is the pool's
  # rule, not R's 125 connections; future < 1.40 calls this function for
  # every future, so the count is checked, and warned about, when the plan
  # is set and when it changes)
  fresh <- identical(list(...)[["label"]], "future-plan-test")
  workers <- legacy_checked_workers(workers, fresh)
  check_flag(lazy, "lazy")
  check_strings(rscript_libs, "rscript_libs", "a character vector of library paths")
  if (!is.null(rscript_args)) check_strings(rscript_args, "rscript_args", "NULL or a character vector of Rscript options")
  if (!is.environment(envir)) pageshare_stop("not_environment", "envir", describe_value(envir))
  # (future >= 1.40 sets the plan up through the "factory" below and never
  # calls this function: called by hand there, it says how to use it)
  if (!"MultisessionFuture" %in% getNamespaceExports("future")) {
    pageshare_stop("plan_called_directly", format(utils::packageVersion("future")))
  }
  if (workers == 1L && !inherits(workers, "AsIs")) {
    return(future::sequential(..., lazy = TRUE, envir = envir))
  }
  # future < 1.40 sets a plan up by launching a test future with this label
  lift_globals_limit(fresh = fresh)
  # (future < 1.40 only: from 1.40 on future uses the "factory" below; the
  # futures run on the pool either way, future-pool-legacy.R)
  invisible(shm_pool_future_legacy(..., workers = workers, lazy = lazy, envir = envir,
                                   rscript_libs = rscript_libs, rscript_args = rscript_args, fresh = fresh))
}
class(shm_multisession) <- c("shm_multisession", "multisession", "cluster",
                             "multiprocess", "future", "function")
attr(shm_multisession, "init") <- TRUE
attr(shm_multisession, "untweakable") <- "persistent"
# future 1.32-1.3x call a plan's "cleanup" attribute when the plan changes:
# the user's future.globals.maxSize comes back (globals-limit.R) and the
# plan's pool stops (future-pool-legacy.R). future 1.31 has none (pageshare's
# task callback does both after the top-level call); from 1.40 on, the
# backend's stopWorkers() stops the pool.
attr(shm_multisession, "cleanup") <- function() {
  restore_globals_limit()
  stop_legacy_future_pool()
  invisible()
}

# future >= 1.40 (FutureBackend API): the plan's backend runs its futures on
# pageshare's own pool (future-pool.R), one pool per session sized by
# `workers`; future 1.31 never reads this attribute.
attr(shm_multisession, "factory") <- function(workers = pageshare::default_worker_count(),
                                              rscript_libs = .libPaths(), rscript_args = NULL, ...,
                                              lazy = NULL, envir = NULL) {
  # `lazy` and `envir` are shm_multisession()'s own (future passes the plan
  # function's formals on); they are no backend fields. (The pool's workers
  # hold no R connection: their number is the pool's rule, not R's 125
  # connections.)
  workers <- check_future_workers(workers)
  check_strings(rscript_libs, "rscript_libs", "a character vector of library paths")
  if (!is.null(rscript_args)) check_strings(rscript_args, "rscript_args", "NULL or a character vector of Rscript options")
  # (future.globals.maxSize is left alone: from future 1.40 on, a backend has
  # its own limit, maxSizeOfObjects; see validateFutureGlobals() in
  # future-methods.R)
  if (workers == 1L && !inherits(workers, "AsIs")) {
    args <- list(...)
    return(do.call(future_export("SequentialFutureBackend"), args[intersect(names(args), future_pool_backend_args)]))
  }
  shm_pool_future_backend(workers, rscript_libs, rscript_args, ...)
}

# An exported function of the installed future that exists only in some of its
# versions (MultisessionFuture up to 1.3x, MultisessionFutureBackend from 1.40),
# looked up when the plan is used, on the version that has it.
future_export <- function(name) getExportedValue("future", name)

# `workers` (a number or a function returning one, as future allows) checked
# by the rule of the pool's front doors (pool_worker_count(): the pool's
# workers hold no R connection), keeping a class such as "AsIs".
check_future_workers <- function(workers) {
  if (is.function(workers)) workers <- workers()
  structure(pool_worker_count(workers, "workers"), class = class(workers))
}
