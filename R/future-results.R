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
  # (a view this worker received, such as an argument returned as it came,
  # goes back as its handle, as the walk below would send it, without the walk)
  if (.Call(ps_is_view, value) && !isTRUE(.Call(ps_view_info, value)$owned_here) &&
      isTRUE(.Call(ps_shares_openable))) {
    worker_open_scope()
    return(if (isTRUE(res$visible)) value else invisible(value))
  }
  shared <- NULL
  # (a worker whose descriptors its master cannot open sends its value plainly)
  if (!is.null(value) && (is_shareable_vector(value) || typeof(value) == "list") &&
      isTRUE(.Call(ps_worth_walking, value, threshold)) && isTRUE(.Call(ps_shares_openable))) {
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
    worker_open_scope()
    value <- if (length(mine)) {
      structure(list(value = shared, pid = Sys.getpid()), class = "pageshare_result")
    } else {
      shared
    }
  }
  if (isTRUE(res$visible)) value else invisible(value)
}

# The handle scope of this worker's reply, opened once (closed again before
# the next message: worker_result_begin(), pool_worker_begin()).
worker_open_scope <- function() {
  if (!isTRUE(worker_scope_open$open)) {
    .Call(ps_scope, 1L)
    worker_scope_open$open <- TRUE
  }
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
  # master has released since may still be mapped here (see cluster.R).
  collect_stale_views()
  invisible()
}

wrap_expr <- function(expr) {
  bquote({
    pageshare:::worker_result_begin()
    pageshare:::worker_result(withVisible(.(expr)), .(share_threshold()))
  })
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
