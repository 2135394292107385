#' Set-up code, status and waiting with a limit, for pageshare's pool
#'
#' Controls for the worker pool of [shm_call()] and [shm_map()] (see
#' [shm_pool]), in the spirit of mirai's `everywhere()` and `status()`:
#'
#' * `shm_everywhere(expr, ...)` evaluates `expr` in the global environment of
#'   every worker of the pool (starting the pool if it is not running), after
#'   assigning the named values in `...` there. Use it to attach packages or
#'   to give every worker the same data once: large values in `...` are shared
#'   once and read by the workers in place. Set-up calls accumulate; a worker
#'   started later in the same pool (one that replaces a worker that died)
#'   runs them all, in order, before its first task; should a worker die
#'   before it reads `expr`, its replacement runs it, so `expr` runs once on
#'   each worker. A new pool
#'   ([stop_workers()], or [start_workers()] with another size) starts
#'   without them.
#' * `shm_resolved(task)` says whether a task's value is in, without waiting.
#' * `shm_cancel(task)` cancels a task: one still waiting for a worker is
#'   taken back and never runs; one that its worker runs (or reads next) ends
#'   with that worker, which is killed and replaced (the other tasks it had
#'   not begun go to other workers); one sent to a worker behind another task
#'   runs there, and its value is dropped. [shm_value()] of a cancelled task
#'   is an error of class `pageshare_task_cancelled`.
#' * `shm_status()` describes the pool: its workers (process id, memory),
#'   the set-up calls they ran and the segments this session shares.
#'
#' [shm_value()] takes a `timeout` to wait at most that long.
#'
#' @param expr An expression, evaluated (unevaluated here) on each worker.
#' @param ... Named values to assign in each worker's global environment
#'   before `expr` runs.
#' @param task A task returned by [shm_call()].
#' @return `shm_everywhere()`: the process ids of the workers, invisibly. If
#'   `expr` fails on a worker, a `pageshare_task_failed` error naming that
#'   worker (the set-up is then not kept for later workers).
#'   `shm_resolved()`: `TRUE` or `FALSE` (`TRUE` for a cancelled task).
#'   `shm_cancel()`: `TRUE` if the task was cancelled, `FALSE` if there was
#'   nothing to cancel (its value is in, or it was cancelled before),
#'   invisibly. `shm_status()`: a list of class
#'   `pageshare_status` with `workers` (a data frame: `pid`, `rss_bytes`),
#'   `setup` (the number of set-up calls kept) and `segments` (what
#'   [shared_segments()] gives), printed as a summary.
#' @examples
#' start_workers(2)
#' big <- runif(2e5)
#' shm_everywhere(library(stats), ref = big)
#' task <- shm_call(function() sum(ref))
#' shm_resolved(task)            # perhaps not yet
#' shm_value(task, timeout = 30) == sum(big)
#' slow <- shm_call(function() Sys.sleep(60))
#' shm_cancel(slow)
#' try(shm_value(slow))
#' shm_status()
#' stop_workers()
#' @name shm_controls
NULL

#' @rdname shm_controls
#' @export
shm_everywhere <- function(expr, ...) {
  if (missing(expr)) pageshare_stop("missing_argument", "expr", "shm_everywhere", "shm_controls")
  values <- list(...)
  if (length(values) && (is.null(names(values)) || !all(nzchar(names(values))) || anyDuplicated(names(values)))) {
    pageshare_stop("everywhere_names")
  }
  pool_ensure()
  setups <- c(shm_pool$setup, list(list(expr = substitute(expr), values = values)))
  sent <- pool_setup_message(setups[length(setups)])
  tasks <- pool_await_each(pool_submit_each(sent$payload, keep = sent$keep))
  for (task in tasks) {
    tryCatch(shm_value(task), pageshare_task_failed = function(e) {
      task_failed_error(sprintf(pageshare_messages$everywhere_failed, task$pid, conditionMessage(e$parent)), e$parent)
    })
  }
  pool_keep_setup(setups)
  invisible(shm_pool$pids)
}

#' @rdname shm_controls
#' @export
shm_resolved <- function(task) {
  check_given("shm_resolved", c(task = missing(task)))
  check_task(task)
  isTRUE(task$cancelled) || pool_await(task, 0)
}

#' @rdname shm_controls
#' @export
shm_cancel <- function(task) {
  check_given("shm_cancel", c(task = missing(task)))
  check_task(task)
  if (!is.null(task$reply) || isTRUE(task$cancelled)) return(invisible(FALSE))
  if (!identical(task$generation, shm_pool$generation)) return(invisible(FALSE))
  where <- .Call(ps_pool_cancel, task$tag)
  # ("none": its reply has arrived, and is read with the next event)
  if (identical(where$place, "none")) return(invisible(FALSE))
  task$cancelled <- TRUE
  task$keep <- NULL
  if (identical(where$place, "running")) pool_end_worker_of(task, where$slot)
  invisible(TRUE)
}

# Ends the worker in `slot`, which runs (or reads next) the cancelled `task`,
# and waits for its death (handled as any, see pool_on_death(): the tasks it
# had not begun go to other workers); should `task` be among those, it is taken
# back; a new worker takes the slot.
pool_end_worker_of <- function(task, slot) {
  pid <- shm_pool$pids[slot]
  shm_pool$cancelled_pids <- c(shm_pool$cancelled_pids, pid)
  tools::pskill(pid, tools::SIGKILL)
  while (identical(shm_pool$pids[slot], pid)) pool_wait_event(idle = TRUE)
  .Call(ps_pool_cancel, task$tag)
  pool_fill_vacancies()
  invisible()
}

#' @rdname shm_controls
#' @export
shm_status <- function() {
  pids <- shm_pool$pids %||% integer()
  rss <- vapply(pids, process_rss_bytes, numeric(1))
  structure(list(workers = data.frame(pid = pids, rss_bytes = rss),
                 setup = length(shm_pool$setup),
                 segments = shared_segments()),
            class = "pageshare_status")
}

#' @export
print.pageshare_status <- function(x, ...) {
  w <- x$workers
  if (nrow(w) == 0L) {
    cat("pageshare pool: not running\n")
  } else {
    live <- !is.na(w$pid)
    cat(sprintf("pageshare pool: %d worker(s)%s, set-up calls: %d\n", sum(live),
                if (all(live)) "" else sprintf(" (%d to be restarted)", sum(!live)), x$setup))
    cat(sprintf("  worker %d: %s\n", w$pid[live], format_bytes(w$rss_bytes[live])), sep = "")
  }
  s <- x$segments
  cat(sprintf("segments shared by this session: %d, %s\n", sum(s$owned_here), format_bytes(sum(s$bytes[s$owned_here]))))
  invisible(x)
}

check_task <- function(task) {
  if (!inherits(task, "pageshare_task")) pageshare_stop("not_task", describe_object(task))
  invisible(task)
}

# Handles the pool's events until `task`'s reply is in (TRUE) or `timeout`
# seconds have passed (FALSE); with 0, only what has arrived is handled.
pool_await <- function(task, timeout) {
  deadline <- Sys.time() + timeout
  repeat {
    if (!is.null(task$reply)) return(TRUE)
    if (!identical(task$generation, shm_pool$generation)) pool_lost_task(task)
    left <- max(0, as.numeric(deadline - Sys.time(), units = "secs"))
    ev <- pool_wait_event(timeout = left)
    if (identical(ev, "idle")) pool_lost_task(task)
    if (identical(ev, "timed_out") && is.null(task$reply) && left == 0) return(FALSE)
  }
}

# The message that runs `setups` (each list(expr, values)) on a worker, with
# large values shared: list(payload, keep = the views to keep alive).
pool_setup_message <- function(setups) {
  state <- share_state("shm_everywhere()")
  sent <- share_walk(setups, state)
  on.exit(restore_shared(state), add = TRUE)
  handles <- !fall_back(state) && length(state$views) > 0L
  msg <- list(op = "call", FUN = pool_worker_setup, args = list(sent), threshold = Inf)
  # (serialized inside with_handles(): views travel as handles)
  payload <- if (handles) with_handles(serialize(msg, NULL, xdr = FALSE)) else serialize(msg, NULL, xdr = FALSE)
  list(payload = payload, keep = state$views)
}

# Keeps the set-up calls for workers started later in this pool: they read
# them from the file named in their environment (see pool_start()) before
# their first task.
pool_keep_setup <- function(setups) {
  sent <- pool_setup_message(setups)
  path <- pool_setup_file()
  tmp <- paste0(path, ".new")
  writeBin(sent$payload, tmp)
  file.rename(tmp, path)
  shm_pool$setup <- setups
  shm_pool$setup_keep <- sent$keep
  invisible()
}

pool_forget_setup <- function() {
  unlink(pool_setup_file())
  shm_pool$setup <- NULL
  shm_pool$setup_keep <- NULL
}

pool_setup_file <- function() file.path(pool_worker_tmpdir(), "setup.bin")

# On a worker: the set-up calls, in order, in the global environment.
pool_worker_setup <- function(setups) {
  genv <- globalenv()
  for (s in setups) {
    list2env(s$values, envir = genv)
    eval(s$expr, genv)
  }
  invisible(NULL)
}

# On a worker, before its first task: the set-up calls its pool kept (see
# pool_keep_setup()). NULL, or the error they gave, which every task of this
# worker then gives.
pool_worker_startup <- function(maps) {
  path <- Sys.getenv("PAGESHARE_POOL_SETUP")
  if (!nzchar(path) || !file.exists(path)) return(NULL)
  reply <- tryCatch(unserialize(pool_worker_run(readBin(path, "raw", file.size(path)), FALSE, FALSE, maps)),
                    error = function(e) list(status = "error", condition = e))
  if (identical(reply$status, "ok")) return(NULL)
  structure(class = c("pageshare_worker_setup", "pageshare_error", "error", "condition"),
            list(message = sprintf(pageshare_messages$setup_failed, Sys.getpid(), conditionMessage(reply$condition)),
                 call = NULL))
}

# Resident memory of process `pid`, in bytes (NA when it cannot be read).
process_rss_bytes <- function(pid) {
  if (is.na(pid)) return(NA_real_)
  status <- tryCatch(readLines(sprintf("/proc/%d/status", pid), warn = FALSE), error = function(e) character())
  kb <- sub("^VmRSS:\\s*([0-9]+) kB$", "\\1", grep("^VmRSS:", status, value = TRUE))
  if (length(kb) == 1L) as.numeric(kb) * 1024 else NA_real_
}

format_bytes <- function(b) {
  vapply(b, function(x) {
    if (is.na(x)) "memory unknown" else format(structure(x, class = "object_size"), units = "auto", standard = "IEC")
  }, character(1))
}
