#' pageshare's worker pool: tasks over shared memory
#'
#' pageshare runs its own pool of background R processes. Tasks and results
#' travel between this session and its workers on rings in shared memory (no
#' socket, no connection per worker); large values travel as shared segments
#' and arrive as views. A worker waits for work by spinning briefly and then
#' sleeping on a futex, so an idle pool uses no CPU. A worker that dies is
#' seen at once (the kernel closes its socket), reported and replaced; when
#' this R session ends, however it ends, its workers end with it.
#'
#' The pool starts on first use with `pageshare.workers` workers (see
#' [pageshare_options]), or with `n` by `start_workers()`, and is stopped by
#' [stop_workers()] or when R exits.
#'
#' * `shm_call(FUN, ...)` sends `FUN(...)` to a worker and returns a task at
#'   once; `shm_value(task)` waits for its value. Arguments are evaluated here;
#'   large vectors among them are shared once and read by the worker in place.
#'   A worker holds two calls at a time; further calls wait in this session
#'   and go to the first worker free, as this session reads replies: whenever
#'   it sends another call or waits for a value.
#' * [shm_map()] applies a function to every element of a vector or list on
#'   all workers.
#'
#' @section Output and conditions:
#' As future relays them: what `FUN` writes to the standard output (`cat()`,
#' `print()`) is captured in the worker and written here by `shm_value()`,
#' then the messages, warnings and other conditions `FUN` signalled are
#' signalled here again, in their order, so that `withCallingHandlers()`,
#' `suppressWarnings()`, `suppressMessages()` and `capture.output()` around
#' `shm_value()` see them (each time it is called, as future's `value()`).
#' Conditions of class `"immediateCondition"` (progressr's progress updates)
#' are signalled here as the task signals them, while the caller waits,
#' whatever `.conditions` says. `.stdout = FALSE` drops the output;
#' `.conditions` names the classes of the other conditions relayed (default
#' `"condition"`: all; `character()` or `NULL`: none). An error is not relayed as a condition: it is
#' the task's error (below), raised after the output and conditions that
#' came before it.
#'
#' @section Errors:
#' An error in `FUN` is re-raised by `shm_value()` as a `pageshare_task_failed`
#' condition whose `parent` is the original condition (so `conditionCall()`
#' and classes of the original survive), naming the task. A worker that dies
#' while running a task (killed, crashed, out of memory) gives a
#' `pageshare_worker_died` error naming its process id and the task; the pool
#' replaces it and the next task runs normally.
#'
#' @param n Number of workers (default: option `pageshare.workers`, else the
#'   cores this R session may use). A running pool of another size is
#'   stopped and a new one started.
#' @param FUN A function (or the name of one).
#' @param ... Arguments for `FUN`, evaluated in this session.
#' @param .stdout `TRUE` (default) to write what `FUN` writes to its standard
#'   output here, `FALSE` to drop it (see "Output and conditions").
#' @param .conditions The classes of the conditions of `FUN` signalled here
#'   again: `"condition"` (default) for all, `character()` or `NULL` for
#'   none (see "Output and conditions").
#' @param task A task returned by `shm_call()`.
#' @param timeout `NULL` (wait as long as it takes) or the most seconds to
#'   wait; a task with no value by then is a `pageshare_timeout` error, and
#'   goes on running (see [shm_resolved()]).
#' @return `start_workers()`: the workers' process ids, invisibly.
#'   `shm_call()`: a task (class `pageshare_task`). `shm_value()`: the value
#'   of `FUN(...)`.
#' @seealso [shm_map()], [stop_workers()]
#' @examples
#' start_workers(2)
#' task <- shm_call(function(x) sum(sqrt(x)), 1:10)
#' shm_value(task)
#' tasks <- lapply(1:4, function(i) shm_call(Sys.getpid))
#' unique(vapply(tasks, shm_value, 1L))
#' stop_workers()
#' @name shm_pool
NULL

#' @rdname shm_pool
#' @export
start_workers <- function(n = NULL) {
  n <- pool_worker_count(n, "n")
  if (length(shm_pool$pids) != n) {
    pool_forget_setup()
    pool_start(n)
  } else {
    pool_fill_vacancies()
  }
  invisible(shm_pool$pids)
}

#' @rdname shm_pool
#' @export
shm_call <- function(FUN, ..., .stdout = TRUE, .conditions = "condition") {
  if (missing(FUN)) pageshare_stop("missing_argument", "FUN", "shm_call", "shm_call")
  args <- list(...)
  # (what the task relays, when not all: kept in the task for shm_value())
  relay <- if (!missing(.stdout) || !missing(.conditions)) {
    check_relay(.stdout, .conditions, ".stdout", ".conditions")
    list(stdout = .stdout, conditions = .conditions)
  }
  # (a plain call to a running pool is made and sent in one step, in Rust;
  # not one with a closure among its arguments)
  task <- .Call(ps_pool_call_plain, FUN, args, shm_pool$pids, shm_pool$generation)
  if (is.environment(task)) {
    if (!is.null(relay)) task$relay <- relay
    return(task)
  }
  if (identical(task, -2)) pool_interrupted()
  # (a closure among the arguments has the promises it reads forced on the
  # plain path too: see force_sent_promises())
  for (a in args) if (typeof(a) == "closure") {
    force_sent_promises(new.env(parent = emptyenv()), NULL, args)
    break
  }
  FUN <- as_function(FUN)
  pool_ensure()
  threshold <- share_threshold()
  keep <- NULL
  handles <- FALSE
  if (!plain_call(FUN, args, threshold)) {
    state <- share_state("shm_call()")
    force_sent_promises(state, FUN, args)
    args <- share_walk(args, state, name = "...")
    share_walk(FUN, state, name = "FUN")
    on.exit(restore_shared(state), add = TRUE)
    handles <- !fall_back(state) && length(state$views) > 0L
    keep <- state$views
  }
  payload <- if (handles) {
    with_handles(serialize(list(op = "call", FUN = FUN, args = args, threshold = threshold), NULL, xdr = FALSE))
  } else {
    .Call(ps_plain_message, FUN, args, threshold)
  }
  task <- new.env(parent = emptyenv())
  # (the shared arguments stay referenced until the worker has its result)
  task$keep <- keep
  task$relay <- relay
  task$generation <- shm_pool$generation
  class(task) <- "pageshare_task"
  task$tag <- pool_submit(payload, task, plain = !handles)
  task
}

#' @rdname shm_pool
#' @export
shm_value <- function(task, timeout = NULL) {
  if (missing(task)) pageshare_stop("missing_argument", "task", "shm_value", "shm_value")
  # (a call's value read in one step, in Rust, while its reply says "ok" or while
  # nothing but such replies arrive, unless the task was cancelled; the rest here)
  if (is.null(timeout)) {
    got <- .Call(ps_task_value_plain, task, shm_pool$generation)
    if (length(got) == 1L) return(got[[1L]])
    if (length(got) == 2L) pool_on_event(got[[2L]])
  }
  if (is.environment(task) && isTRUE(task$cancelled)) pageshare_stop("task_cancelled", format(task$tag))
  if (!is.null(timeout)) {
    check_task(task)
    if (!is.numeric(timeout) || length(timeout) != 1L || is.na(timeout) || timeout < 0) {
      pageshare_stop("number", "timeout", "of seconds, at least 0 (or NULL: no limit)", describe_value(timeout))
    }
    if (!pool_await(task, timeout)) pageshare_stop("task_timeout", format(task$tag), format(timeout))
    got <- .Call(ps_task_value_plain, task, shm_pool$generation)
    if (length(got) == 1L) return(got[[1L]])
    if (length(got) == 2L) pool_on_event(got[[2L]])
  }
  if (!inherits(task, "pageshare_task")) {
    pageshare_stop("not_task", describe_object(task))
  }
  pool_wait_reply(task)
  reply <- task$reply
  if (!is.null(reply$relay)) {
    relay_emit(reply$relay, task$relay$stdout %||% TRUE, if (is.null(task$relay)) "condition" else task$relay$conditions)
  }
  if (identical(reply$status, "died")) {
    pageshare_stop("pool_worker_died", reply$pid, sprintf("task %s", format(task$tag)), "shm_call()")
  }
  if (identical(reply$status, "error")) {
    pool_task_failed(sprintf("task %s", format(task$tag)), reply$condition)
  }
  task$keep <- NULL
  reply$value
}

#' @export
print.pageshare_task <- function(x, ...) {
  state <- if (isTRUE(x$cancelled)) "cancelled" else if (is.null(x$reply)) "running" else "done"
  cat(sprintf("<pageshare task %s: %s>\n", format(x$tag), state))
  invisible(x)
}

# Nothing to share: no argument reaches the threshold (nor holds a view) and
# FUN carries no frame of its own (its environment is the global environment
# or a namespace). Then a task skips the sharing walk.
plain_call <- function(FUN, args, threshold) .Call(ps_plain_call, environment(FUN), args, threshold)

#' Stop pageshare's worker pool
#'
#' pageshare keeps a pool of background R processes (see [shm_pool]) for
#' [shm_call()], [shm_map()], [registerDoShm()] without a cluster,
#' [memApply()] / [memLapply()] without `CLUSTER` and [mutual_information()].
#' The pool is started on first use and reused afterwards; it is stopped when
#' R exits, or earlier by `stop_workers()`. The next call that needs workers
#' starts a new pool. A worker whose master R session is gone (killed or
#' crashed) ends at once, also in the middle of a task.
#'
#' @return `TRUE` if a pool was running (and is now stopped), else `FALSE`,
#'   invisibly.
#' @seealso [shm_pool], [pageshare_options] (option `pageshare.workers`)
#' @examples
#' stop_workers()
#' @export
stop_workers <- function() {
  pool_forget_setup()
  pool_set_worker_options()
  invisible(isTRUE(tryCatch(pool_stop(), error = function(e) FALSE)))
}
