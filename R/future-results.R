# ---- results: large values come back through shared memory -------------------
#
# On a worker of pageshare's pool, a future's value (future-pool.R) or a
# task's (pool-worker.R) that holds shareable vectors of at least the
# threshold is shared there: the new segments are disowned (this worker keeps
# their descriptors only until its next message) and the reply is written in
# the handle scope, so that it carries handles. The value comes back wrapped
# in a `pageshare_result` (value + worker pid); the master unwraps it and
# adopts the segments the worker disowned: it then holds them (its own
# descriptors) until it no longer uses them.

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
# the next message: pool_worker_begin()).
worker_open_scope <- function() {
  if (!isTRUE(worker_scope_open$open)) {
    .Call(ps_scope, 1L)
    worker_scope_open$open <- TRUE
  }
}

# Master side: the segments a worker handed over with a reply, taken over
# (reply_value() in pool-jobs.R).
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
