# Launching a future of plan(shm_multisession): what happens between future's
# launch call and the moment future serializes the future for its worker. The
# workers are checked (they must have pageshare loaded), the expression is
# wrapped (task frame, watchdog, result sharing) and the large globals are
# swapped for views; everything is put back once the future has been sent.
# Called by the methods of both future APIs (future-methods-legacy.R for
# future < 1.40, future-methods.R for future >= 1.40).


# The globals of a future with what the sharing rule shares swapped for views
# (R/sharing-rule.R). Returns NULL when nothing is shared; otherwise the new
# globals with attributes "pageshare_views" (keep them alive until the result
# is in), "pageshare_restore" (bindings swapped in closure frames; put them
# back with restore_shared() once the future has been sent) and
# "pageshare_changed" (the names of the globals replaced). What cannot be
# shared is sent plainly, with the fallback warning once per set of workers
# (`plan_key`), and none without a key.
share_globals <- function(globals, plan_key = NULL) {
  # (a future without globals, such as the one future's plan() resolves to
  # set a backend up, has nothing to report)
  if (length(globals) == 0L) return(NULL)
  state <- share_state("a future")
  g <- globals
  changed <- character()
  for (i in seq_along(globals)) {
    el <- .subset2(globals, i)
    before <- length(state$views)
    swapped <- length(state$restore)
    new <- share_walk(el, state, name = names(globals)[i])
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

# Every future runs in a task frame on its worker: a handle the worker could
# not open when the future arrived fails the future with its classed error
# (the worker lives on), and the future's own unserialize() calls fail as
# usual (see task_begin() in cluster.R). The worker becomes a receiver here
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

# Prepares `future` for the caller's NextMethod() (future's own launch): its
# expression wrapped for result sharing, its large globals swapped for views
# (and, with `pack`, all globals packed into one). Returns a function that puts
# back the expression, the globals and swapped bindings, with attribute
# "shared" (TRUE when views were swapped in: send inside a handle scope). The
# views must outlive the launch: the worker maps them when it unserializes,
# possibly after the launch returned; they stay in future$pageshare_views until
# the result has been collected (result(), future-methods.R) or with the future.
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
