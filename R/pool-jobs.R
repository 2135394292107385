# Jobs: work items spread over the workers of pageshare's pool.
#
# A job (shm_map(), memApply(), a foreach loop) is an environment with
#   $next_item(slot, first)  the next message for the worker in `slot` as
#                            list(payload, info), or NULL when nothing is
#                            left; `first`: this worker has not had one of
#                            this job's messages yet (send it the job's stage);
#   $on_reply(info, reply)   takes the reply to the item described by `info`;
#   $requeue(info)           the item `info` must be sent again (its worker
#                            died before it began it);
#   $slots                   the slots it may use.
# pool_drive() keeps every usable worker busy (up to pool_depth items each)
# until every item has replied or one failed; $failure is then the first
# failure (list(kind = "died", pid, info) or set by on_reply).

new_job <- function(next_item, on_reply, requeue, slots = seq_along(shm_pool$pids)) {
  job <- new.env(parent = emptyenv())
  job$next_item <- next_item
  job$on_reply <- on_reply
  job$requeue <- requeue
  job$slots <- slots
  job$outstanding <- 0L
  job$failure <- NULL
  job$seen <- integer()   # pids that have had a message of this job
  job
}

pool_drive <- function(job) {
  repeat {
    # (items may be left while every worker is busy, also with the items of
    # an earlier job that ended early: then wait for a reply)
    left <- is.null(job$failure) && job_fill(job)
    if ((!left && job$outstanding == 0L) || !is.null(job$failure)) break
    if (identical(pool_wait_event(), "idle")) pageshare_stop("pool_out_of_step", 0L, "none", "a job's")
  }
  # Items that other workers still run finish in the background: their
  # replies are dropped (the job, held by their pending entries, keeps what
  # they read alive until then).
  invisible(job)
}

# Sends the job's items while its workers have room. TRUE if items may be
# left (no worker had room), FALSE when the job has no item left to send.
job_fill <- function(job) {
  repeat {
    slot <- pool_free_slot(0, job$slots)
    if (is.na(slot)) return(TRUE)
    pid <- shm_pool$pids[slot]
    item <- job$next_item(slot, !pid %in% job$seen)
    if (is.null(item)) return(FALSE)
    job$outstanding <- job$outstanding + 1L
    if (!.Call(ps_pool_has_room, slot, length(item$payload))) {
      # (too large for a busy worker's ring: it waits for an idle one)
      job_requeue(job, item$info)
      if (is.na(pool_free_slot(length(item$payload), job$slots))) return(TRUE)
      next
    }
    job$seen <- c(job$seen, pid)
    pool_submit(item$payload, list(job = job, info = item$info), slot = slot)
  }
}

job_reply <- function(job, info, reply) {
  job$outstanding <- job$outstanding - 1L
  if (!is.null(job$failure)) return(invisible())
  if (identical(reply$status, "died")) {
    job$failure <- list(kind = "died", pid = reply$pid, info = info)
    return(invisible())
  }
  if (identical(reply$status, "needs_stage")) {
    # (the worker lost the job's stage, e.g. to a call that came between its
    # chunks: the item goes again, with the stage)
    job$seen <- setdiff(job$seen, info$pid)
    job$requeue(info)
    return(invisible())
  }
  job$on_reply(info, reply)
}

job_requeue <- function(job, info) {
  job$outstanding <- job$outstanding - 1L
  if (is.null(job$failure)) job$requeue(info)
}

# A reply's value (a reply that says "ok"), with the segments of large results the worker handed over
# taken over by this process.
reply_value <- function(reply) {
  value <- reply$value
  if (inherits(value, "pageshare_result")) {
    adopt_views(value$value, value$pid)
    value <- value$value
  }
  value
}

# FUN(...) on every worker of the pool (one call each, in slot order): the
# list of their values. For checks of the workers' state.
pool_call_each <- function(FUN, ...) {
  lapply(pool_await_each(pool_submit_each(pool_call_each_message(FUN, list(...)))), shm_value)
}

# The message of pool_call_each(): FUN(args) on a worker, its value sent back whole.
pool_call_each_message <- function(FUN, args) {
  pool_ensure()
  serialize(list(op = "call", FUN = FUN, args = args, threshold = Inf), NULL, xdr = FALSE)
}
