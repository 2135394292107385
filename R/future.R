#' A multisession future backend that shares large globals
#'
#' `plan(shm_multisession)` behaves like `plan(multisession)` (the same
#' background R sessions on this machine, the same arguments, [future::tweak()],
#' `nbrOfWorkers()`, `nbrOfFreeWorkers()`, workers stopped when the plan
#' changes) with one difference: when a future is launched, each of its globals
#' that is a shareable vector of at least `getOption("pageshare.threshold")`
#' bytes (also inside lists and data frame columns; small vectors of one list
#' are packed together when they reach the threshold together) is copied once
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
#' A worker whose master (the R session that set the plan) is gone, killed or
#' crashed, ends within a fraction of a second, also in the middle of a future,
#' instead of running on with its shared memory mapped until the future ends.
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
#' If a global cannot be put into shared memory (for example because the
#' segment directory is full), the future is sent by plain serialization, as
#' `multisession` would send it, with one warning. `shm_multisession` never
#' fails where `multisession` would succeed.
#'
#' @section future >= 1.40:
#' The function also carries a `"factory"` attribute for the `FutureBackend`
#' API of future 1.40 and later: a `MultisessionFutureBackend` whose futures
#' get the same treatment of globals and results in `launchFuture()`.
#' Verified with future 1.70.0 (future.tests 1.0.0 gives the same result as for
#' `multisession`, and this package's tests pass); see the README.
#'
#' @param ... Further arguments passed on as to [future::multisession()]
#'   (for example `rscript_startup`).
#' @param workers Number of background R sessions (or a function returning
#'   it), as for [future::multisession()]. The default is the number of
#'   available cores (`parallelly::availableCores()`, or the machine's count
#'   where that fails), but at most the number of free connections less 16
#'   (each worker holds a connection; R has 128), as multisession does from
#'   future 1.40 on.
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
                             workers = pageshare:::default_worker_count(),
                             lazy = FALSE, rscript_libs = .libPaths(), rscript_args = NULL,
                             envir = parent.frame()) {
  workers <- check_future_workers(workers)
  if (workers == 1L && !inherits(workers, "AsIs")) {
    return(future::sequential(..., lazy = TRUE, envir = envir))
  }
  # future < 1.40 sets a plan up by launching a test future with this label
  lift_globals_limit(fresh = identical(list(...)[["label"]], "future-plan-test"))
  # (future < 1.40 only: from 1.40 on future uses the "factory" below)
  # The workers start here (when the plan is set up): see nodelay_sockets().
  rscript_args <- worker_heap_args(rscript_args)
  f <- nodelay_sockets(future_export("MultisessionFuture")(..., workers = workers, lazy = TRUE,
                                                  rscript_libs = rscript_libs, rscript_args = rscript_args,
                                                  envir = envir))
  class(f) <- c("ShmMultisessionFuture", class(f))
  remember_worker_options(f$workers, rscript_libs, rscript_args)
  if (!lazy) f <- future::run(f)
  invisible(f)
}
class(shm_multisession) <- c("shm_multisession", "multisession", "cluster",
                             "multiprocess", "future", "function")
attr(shm_multisession, "init") <- TRUE
attr(shm_multisession, "untweakable") <- "persistent"
# future >= 1.32 call a plan's "cleanup" attribute when the plan changes: the
# user's future.globals.maxSize comes back (globals-limit.R), and the workers,
# which are multisession's, are stopped by multisession's own cleanup (future
# 1.32-1.3x; future 1.31 has none and stops them itself, from 1.40 the backend
# does).
attr(shm_multisession, "cleanup") <- function() {
  restore_globals_limit()
  cleanup <- attr(future::multisession, "cleanup", exact = TRUE)
  if (is.function(cleanup)) cleanup()
  invisible()
}

# future >= 1.40 (FutureBackend API): future() creates a plain Future and run()
# gives it the backend's futureClasses before launchFuture(), so the run()
# method above never runs there; launchFuture() below does the same work.
# future 1.31 never reads this attribute.
attr(shm_multisession, "factory") <- function(workers = pageshare:::default_worker_count(),
                                              rscript_libs = .libPaths(), rscript_args = NULL, ...,
                                              lazy = NULL, envir = NULL) {
  # `lazy` and `envir` are shm_multisession()'s own (future passes the plan
  # function's formals on); they are no backend fields.
  workers <- check_future_workers(workers)
  # (future.globals.maxSize is left alone: from future 1.40 on, a backend has
  # its own limit, maxSizeOfObjects; see validateFutureGlobals() below)
  core <- nodelay_sockets(
    future_export("MultisessionFutureBackend")(workers = workers, rscript_libs = rscript_libs,
                                               rscript_args = worker_heap_args(rscript_args), ...))
  if (!inherits(core, "ClusterFutureBackend")) return(core) # workers == 1: sequential
  core[["futureClasses"]] <- c("ShmMultisessionFuture", core[["futureClasses"]])
  class(core) <- c("ShmMultisessionFutureBackend", class(core))
  core
}

# An exported function of the installed future that exists only in some of its
# versions (MultisessionFuture up to 1.3x, MultisessionFutureBackend from 1.40),
# looked up when the plan is used, on the version that has it.
future_export <- function(name) getExportedValue("future", name)

# `workers` (a number or a function returning one, as future allows) checked
# by the rule of every front door, keeping a class such as "AsIs".
check_future_workers <- function(workers) {
  if (is.function(workers)) workers <- workers()
  structure(check_worker_count(workers, "workers"), class = class(workers))
}

# ---- the globals of a future ------------------------------------------------

# The globals of a future with what the sharing rule shares swapped for views
# (R/sharing-rule.R). Returns NULL when nothing is shared; otherwise the new
# globals with attributes "pageshare_views" (keep them alive until the result
# is in), "pageshare_restore" (bindings swapped in closure frames; put them
# back with restore_shared() once the future has been sent) and
# "pageshare_changed" (the names of the globals replaced). What cannot be
# shared is sent plainly, with the fallback warning once per set of workers
# (`plan_key`), and none without a key.
share_globals <- function(globals, plan_key = NULL) {
  if (length(globals) == 0L) return(NULL)
  state <- share_state()
  g <- globals
  changed <- character()
  for (i in seq_along(globals)) {
    el <- .subset2(globals, i)
    before <- length(state$views)
    swapped <- length(state$restore)
    new <- share_walk(el, state)
    if (length(state$views) > before && typeof(el) != "closure") {
      g[[names(globals)[i]]] <- new
    }
    # (a closure is changed when values in its frames were swapped)
    if (length(state$views) > before || length(state$restore) > swapped) {
      changed <- c(changed, names(globals)[i])
    }
  }
  if (fall_back(state, plan_key, warn = !is.null(plan_key)) || length(state$views) == 0L) {
    restore_shared(state)
    return(NULL)
  }
  attr(g, "pageshare_views") <- state$views
  attr(g, "pageshare_restore") <- state$restore
  attr(g, "pageshare_changed") <- changed
  g
}

# Workers must have pageshare loaded before they receive a handle (an ALTREP
# object whose class cannot be found becomes a zero-length vector with only a
# warning). unserialize() loads the namespace by itself; this checks once per
# cluster, while all its workers are idle, that they can.
checked_clusters <- new.env(parent = emptyenv())

check_workers_have_pageshare <- function(cl, reg) {
  name <- attr(cl, "name", exact = TRUE)
  if (is.null(name) || isTRUE(checked_clusters[[name]])) return(invisible())
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  if (length(FutureRegistry(reg, action = "list")) > 0L) return(invisible()) # busy: next time
  # (A failing call, e.g. a dead worker, is left for future to report.)
  ok <- tryCatch(unlist(parallel::clusterCall(cl, function() {
    requireNamespace("pageshare", quietly = TRUE) && { pageshare:::become_receiver(); TRUE }
  })), error = function(e) NULL)
  if (is.null(ok)) return(invisible())
  if (!all(ok)) pageshare_stop("future_no_pageshare", paste(.libPaths(), collapse = ", "))
  checked_clusters[[name]] <- TRUE
  invisible()
}

# ---- results: large values come back through shared memory -------------------
#
# future has no hook between the evaluation of a future on the worker and the
# serialization of its FutureResult. So the expression is wrapped (only while
# the future is launched; future$expr is restored afterwards):
#
#   { pageshare:::worker_result_begin()
#     pageshare:::worker_result(withVisible(<expr>), <threshold>) }
#
# On the worker, worker_result_begin() closes a handle scope left open by the
# previous future; the expression is evaluated; if its value holds shareable
# vectors >= threshold, shares them, disowns the new segments (this worker
# keeps their descriptors only until its next future) and opens the handle scope, so that the FutureResult
# carries handles. The worker talks only to its master, and the scope is closed
# again at the start of the next future. The value comes back wrapped in a
# `pageshare_result` (value + worker pid); result() and resolved() on the master
# unwrap it and adopt the segments the worker disowned: the master then holds
# them (its own descriptors) until it no longer uses them. A segment nobody
# adopts (its future was never collected) goes when the worker starts its next
# future or exits.

worker_scope_open <- new.env(parent = emptyenv())

worker_result <- function(res, threshold) {
  value <- res$value
  shared <- NULL
  # (a worker whose descriptors its master cannot open sends its value plainly)
  if (!is.null(value) && (is_shareable_vector(value) || typeof(value) == "list") &&
      isTRUE(.Call(ps_shares_openable))) {
    state <- share_state()
    state$threshold <- threshold
    state$frames <- FALSE
    shared <- tryCatch(share_walk(value, state), error = function(e) NULL)
    if (fall_back(state, warn = FALSE) || is.null(shared) || length(state$views) == 0L) {
      shared <- NULL
    }
  }
  if (!is.null(shared)) {
    # Views this worker received (its master's) go back as handles too; the
    # ones it made itself are handed over.
    mine <- Filter(function(v) isTRUE(shared_info(v)$owned_here), state$views)
    for (v in mine) .Call(ps_disown, v)
    # A handed-over segment is the master's to unlink: this worker must not
    # hand out the same view again for the same source (identity cache).
    if (length(mine)) forget_shared()
    if (!isTRUE(worker_scope_open$open)) {
      .Call(ps_scope, 1L)
      worker_scope_open$open <- TRUE
    }
    value <- if (length(mine)) {
      structure(list(value = shared, pid = Sys.getpid()), class = "pageshare_result")
    } else {
      shared
    }
  }
  if (isTRUE(res$visible)) value else invisible(value)
}

worker_result_begin <- function() {
  # The master has received the previous result by now: the segments handed
  # over with it need not be held here any more.
  .Call(ps_release_handoffs)
  if (isTRUE(worker_scope_open$open)) {
    .Call(ps_scope, -1L)
    worker_scope_open$open <- FALSE
  }
  # future removed the previous future's globals, but views of segments the
  # master has released since may still be mapped here (see workers.R).
  collect_stale_views()
  invisible()
}

wrap_expr <- function(expr) {
  bquote({
    pageshare:::worker_result_begin()
    pageshare:::worker_result(withVisible(.(expr)), .(share_threshold()))
  })
}

# Every future runs in a task frame on its worker: a handle the worker could
# not open when the future arrived fails the future with its classed error
# (the worker lives on), and the future's own unserialize() calls fail as
# usual (see task_begin() in workers.R). The worker becomes a receiver here
# too, for workers future started or restarted by itself. The frame ends
# whatever fails, task_begin() included: a worker left "in a task" would let
# the next unopenable handle end it inside future's unserialize().
task_expr <- function(expr) {
  bquote(tryCatch({
    pageshare:::future_task_begin()
    .(expr)
  }, finally = pageshare:::task_end()))
}

future_task_begin <- function() {
  become_receiver()
  task_begin()
}

# Master side: unwrap a pageshare_result and adopt what the worker disowned.
adopt_result <- function(future) {
  res <- future$result
  if (!inherits(res, "FutureResult") || !inherits(res$value, "pageshare_result")) return(invisible())
  wrapped <- res$value
  adopt_views(wrapped$value, wrapped$pid)
  res["value"] <- list(wrapped$value)
  future$result <- res
  invisible()
}

adopt_views <- function(x, pid, depth = 0L) {
  if (is_shared(x)) {
    info <- shared_info(x)
    if (!isTRUE(info$owned_here) && identical(as.integer(info$owner_pid), as.integer(pid))) {
      tryCatch(.Call(ps_adopt, x), error = function(e) {
        warning(sprintf("pageshare: could not take over segment %s from worker %d: %s",
                        info$name, pid, conditionMessage(e)), call. = FALSE)
      })
    }
  } else if (typeof(x) == "list" && depth < 50L) {
    for (el in x) adopt_views(el, pid, depth + 1L)
  }
  invisible()
}

share_results_enabled <- function() {
  isTRUE(getOption("pageshare.share_results", TRUE))
}


# ---- future 1.31: the run() method --------------------------------------------

run.ShmMultisessionFuture <- function(future, ...) {
  if (!identical(future$state, "created")) return(NextMethod())
  heal_plan_workers(future)
  cl <- future$workers
  key <- sprintf("workers-%s", attr(cl, "name", exact = TRUE))
  check_workers_have_pageshare(cl, key)
  undo <- prepare_launch(future, key, pack = TRUE, check_size = TRUE)
  on.exit(undo(), add = TRUE)
  if (isTRUE(attr(undo, "shared"))) with_handles(NextMethod()) else NextMethod()
}

# Prepares `future` for the caller's NextMethod() (future's own launch): its
# expression wrapped for result sharing, its large globals swapped for views
# (and, with `pack`, all globals packed into one). Returns a function that puts
# back the expression, the globals and swapped bindings, with attribute
# "shared" (TRUE when views were swapped in: send inside a handle scope). The
# views must outlive the launch: the worker maps them when it unserializes,
# possibly after the launch returned; they stay in future$pageshare_views until
# the result has been collected (result() below) or with the future.
prepare_launch <- function(future, plan_key, pack = FALSE, check_size = FALSE) {
  orig_expr <- future[["expr"]]
  orig <- future[["globals"]]
  expr <- task_expr(if (share_results_enabled()) wrap_expr(orig_expr) else orig_expr)
  # The worker ends if this process is gone while it runs the future (watchdog.R).
  expr <- watched_expr(expr)
  globals <- orig
  restore <- list()
  shared <- share_globals(orig, plan_key)
  if (!is.null(shared)) {
    future[["pageshare_views"]] <- attr(shared, "pageshare_views")
    restore <- attr(shared, "pageshare_restore")
    attr(shared, "pageshare_views") <- NULL
    attr(shared, "pageshare_restore") <- NULL
    globals <- shared
  }
  if (check_size) {
    ok <- FALSE
    on.exit(if (!ok) {
      restore_shared(restore)
      future[["pageshare_views"]] <- NULL
    }, add = TRUE)
    check_serialized_size(orig, globals, future[["expr"]])
    ok <- TRUE
  }
  attr(globals, "pageshare_changed") <- NULL
  if (pack && length(globals) >= 2L) {
    globals <- pack_globals(globals)
    expr <- unpack_globals_expr(expr)
  }
  future[["expr"]] <- expr
  future[["globals"]] <- globals
  undo <- function() {
    future[["expr"]] <- orig_expr
    future[["globals"]] <- orig
    restore_shared(restore)
  }
  structure(undo, shared = !is.null(shared))
}

# future 1.31 sends each global to the worker in a call of its own and waits
# for the reply (~0.3 ms each here; a future_lapply() chunk has 7 globals).
# shm_multisession sends them as one list, which the expression first unpacks
# into the worker's global environment, where future would have assigned them
# (as future >= 1.40 sends all globals in one message). future$globals itself
# is restored after the launch.
packed_globals_name <- "...pageshare.globals"

pack_globals <- function(globals) {
  values <- unclass(globals)
  attributes(values) <- list(names = names(globals))
  structure(list(values), names = packed_globals_name)
}

unpack_globals_expr <- function(expr) {
  bquote({
    base::list2env(base::get(.(packed_globals_name), envir = base::globalenv()),
                   envir = base::globalenv())
    base::rm(list = .(packed_globals_name), envir = base::globalenv())
    .(expr)
  })
}

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

# future's id of this R session (futures record it as their owner).
session_uuid <- function() {
  foreign_internal("future", "session_uuid")()
}

# TRUE when `x` is running and its worker has sent nothing within the timeout
# future uses for the same select(). future 1.31's resolved() runs ~1-2 ms of
# R code (version and connection checks) before it looks at the socket, and a
# waiting resolve()/value() calls it for every future every ~20 ms: on a small
# machine that is CPU taken from the workers. Anything to read (a result, a
# condition, progress updates, a dead worker's EOF) or anything unusual goes
# to future's own method.
nothing_to_read <- function(x, timeout = NULL) {
  if (!identical(x$state, "running") || !is.null(x$result)) return(FALSE)
  # future 1.31 keeps the cluster in the future, >= 1.40 in its backend.
  workers <- if (!is.null(x$workers)) x$workers else x$backend$workers
  con <- tryCatch(workers[[x$node]]$con, error = function(e) NULL)
  if (!inherits(con, "sockconn")) return(FALSE)
  # future's checks that come before its select(): a connection closed since
  # (its index may now be another socket's) or a future of another session.
  if (!isTRUE(tryCatch(parallelly::isConnectionValid(con), error = function(e) FALSE))) return(FALSE)
  if (!identical(as.character(x$owner), as.character(session_uuid()))) return(FALSE)
  if (is.null(timeout)) {
    timeout <- getOption("future.cluster.resolved.timeout", getOption("future.resolved.timeout", 0.01))
  }
  if (!is.numeric(timeout) || length(timeout) != 1L || is.na(timeout) || timeout < 0) return(FALSE)
  ready <- tryCatch(socketSelect(list(con), write = FALSE, timeout = timeout), error = function(e) NA)
  identical(ready, FALSE)
}

# ---- future >= 1.40: the launchFuture() and validateFutureGlobals() methods --

launchFuture.ShmMultisessionFutureBackend <- function(backend, future, ...) {
  check_workers_have_pageshare(backend[["workers"]], backend[["reg"]])
  undo <- prepare_launch(future, backend[["reg"]])
  on.exit(undo(), add = TRUE)
  # (future restarts a dead worker when it needs a node: nodelay_sockets().)
  nodelay_sockets(if (isTRUE(attr(undo, "shared"))) with_handles(NextMethod()) else NextMethod())
}

# future >= 1.40 checks the globals' total size against the backend's own
# limit (future.globals.maxSize when the plan was set, +Inf when unset)
# before launchFuture(). The limit
# guards against copying large objects to workers; what shm_multisession sends
# as a handle is therefore counted as the handle: future's own check runs on
# the globals as they will be sent (shared here; launchFuture() then finds the
# same segments in the identity cache), measured inside the handle scope. A
# future still above it gets future's own error.
validateFutureGlobals.ShmMultisessionFutureBackend <- function(backend, future, ...) {
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
  if (exists("launchFuture", envir = ns, inherits = FALSE)) { # future >= 1.40
    registerS3method("launchFuture", "ShmMultisessionFutureBackend",
                     launchFuture.ShmMultisessionFutureBackend, envir = ns)
    registerS3method("validateFutureGlobals", "ShmMultisessionFutureBackend",
                     validateFutureGlobals.ShmMultisessionFutureBackend, envir = ns)
  }
  invisible()
}

hook_future_methods <- function() {
  if (isNamespaceLoaded("future")) {
    register_future_methods()
  } else {
    setHook(packageEvent("future", "onLoad"), register_future_methods)
  }
}
