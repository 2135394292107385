#' Apply a function to every element, on pageshare's worker pool
#'
#' `shm_map(X, FUN, ...)` is `lapply(X, FUN, ...)` run by the workers of
#' pageshare's pool (see [shm_pool]): the result is a list in the order of
#' `X`, with its names. `X`, the arguments in `...` and data in the frame of
#' `FUN` are sent to each worker once per call (large vectors as shared
#' views, read in place); arguments of the function that made `FUN` that
#' `FUN` reads are evaluated first, as future does with the globals it sends.
#' The workers then take the elements in chunks whose
#' size adapts as the call runs (cheap elements are batched, expensive ones
#' spread one by one over the workers), so that all workers finish together.
#'
#' @section Random numbers:
#' With `.seed`, element `i` is computed with the `i`-th L'Ecuyer-CMRG stream
#' after the seed (the streams of [parallel::nextRNGStream()]): the results are
#' the same for any number of workers and any schedule. `.seed = TRUE` draws
#' the seed from this session's random-number generator (so `set.seed()`
#' before the call makes it reproducible); a number is used as in
#' `set.seed(.seed, kind = "L'Ecuyer-CMRG")`; a `.Random.seed` of kind
#' L'Ecuyer-CMRG (7 integers) is used as it is. This session's generator is
#' left as it was except for the one draw of `.seed = TRUE`.
#'
#' @section Output and conditions:
#' As `future_lapply()` relays them: what `FUN` writes to the standard output
#' (`cat()`, `print()`) is captured in the workers and written here, then the
#' messages, warnings and other conditions `FUN` signalled are signalled here
#' again, chunk by chunk in the order of the elements (within a chunk, its
#' output first, then its conditions in the order they were signalled), so
#' that `withCallingHandlers()`, `suppressWarnings()`, `suppressMessages()`
#' and `capture.output()` around the call see them. Conditions of class
#' `"immediateCondition"` (progressr's progress updates) are signalled as they
#' come, while the call runs, whatever `.conditions` says. `.stdout = FALSE`
#' drops the output; `.conditions` names the classes of the other conditions
#' relayed (`character()` or `NULL`: none). When an element fails, what the
#' elements up to it relayed comes before its error.
#'
#' @section Errors:
#' The first error of `FUN` ends the call with a `pageshare_task_failed`
#' condition naming the element, whose `parent` is the original condition.
#' A worker that dies during the call ends it with `pageshare_worker_died`
#' (naming its process id and elements); the pool replaces it. Elements that
#' other workers were running meanwhile finish in the background and are
#' discarded.
#'
#' @param X A vector or list (a data frame: its columns).
#' @param FUN A function (or the name of one), called as `FUN(X[[i]], ...)`.
#' @param ... Further arguments for `FUN`, the same for every element.
#' @param .seed `FALSE` (the workers' own random numbers), `TRUE`, a number, or
#'   an L'Ecuyer-CMRG `.Random.seed`: see "Random numbers".
#' @param .progress `TRUE` to report progress through the progressr package
#'   (one step per element, as chunks finish; wrap the call in
#'   `progressr::with_progress()` or set `progressr::handlers(global = TRUE)`).
#' @param .stdout `TRUE` (default) to write what `FUN` writes to its standard
#'   output here, `FALSE` to drop it (see "Output and conditions"), as
#'   future's `stdout`.
#' @param .conditions The classes of the conditions of `FUN` signalled here
#'   again, as future's `conditions`: `"condition"` (default) for all,
#'   `character()` or `NULL` for none.
#' @return A list of `length(X)` values, named as `X`.
#' @seealso [shm_pool], [memLapply()]
#' @examples
#' start_workers(2)
#' shm_map(1:5, function(i) i^2)
#' set.seed(1)
#' a <- shm_map(1:3, function(i) runif(1), .seed = TRUE)
#' set.seed(1)
#' b <- shm_map(1:3, function(i) runif(1), .seed = TRUE)
#' identical(a, b)
#' stop_workers()
#' @export
shm_map <- function(X, FUN, ..., .seed = FALSE, .progress = FALSE, .stdout = TRUE, .conditions = "condition") {
  check_given("shm_map", c(X = missing(X), FUN = missing(FUN)))
  FUN <- as_function(FUN)
  if (is.null(X)) X <- list()
  if (!(is.list(X) || is.atomic(X)) || is.environment(X)) pageshare_stop("map_x", describe_object(X))
  check_flag(.progress, ".progress")
  check_relay(.stdout, .conditions, ".stdout", ".conditions")
  n <- length(X)
  nms <- names(X)
  seed <- map_seed(.seed)
  if (n == 0L) return(stats::setNames(list(), nms))
  pool_ensure()
  progress <- if (.progress) map_progressor(n)
  job <- pool_map(X, FUN, list(...), seed = seed, progress = progress)
  f <- job$failure
  map_relay_emit(job, .stdout, .conditions)
  if (!is.null(f)) {
    if (identical(f$kind, "died")) {
      pageshare_stop("pool_worker_died", f$pid, describe_items("element", seq.int(f$info$from, f$info$to)),
                     "shm_map()")
    }
    pool_task_failed(sprintf("element %s", element_label(f$index, nms)), f$condition)
  }
  out <- job$out
  names(out) <- nms
  out
}

# FUN(X[[i]], <dots>) for i in 1..length(X) on the workers in `slots`: the
# finished job (its $out, or its $failure: list(kind = "error", index,
# condition) or list(kind = "died", pid, info = list(from, to))). X, dots and
# the frames of FUN are shared by the rule of every front door and sent to
# each worker once, with its first chunk.
pool_map <- function(X, FUN, dots, seed = NULL, progress = NULL, slots = seq_along(shm_pool$pids),
                     door = "shm_map()") {
  n <- length(X)
  state <- share_state(door)
  force_sent_promises(state, FUN, dots)
  X <- share_walk(X, state, name = "X")
  dots <- share_walk(dots, state)
  share_walk(FUN, state, name = "FUN")
  on.exit(restore_shared(state), add = TRUE)
  handles <- !fall_back(state) && length(state$views) > 0L
  stage <- list(FUN = FUN, X = X, dots = dots, seed = seed)
  stage <- if (handles) with_handles(serialize(stage, NULL, xdr = FALSE)) else serialize(stage, NULL, xdr = FALSE)
  id <- shm_pool$next_map <- (shm_pool$next_map %||% 0) + 1
  threshold <- share_threshold()
  # (how the elements are cut into chunks: map_plan.rs in the pool crate)
  .Call(ps_map_begin, id, n, length(slots))
  on.exit(.Call(ps_map_end, id), add = TRUE)
  job <- new_job(slots = slots, next_item = function(slot, first) {
    chunk <- .Call(ps_map_next, id)
    if (is.null(chunk)) return(NULL)
    from <- chunk[[1L]]
    to <- chunk[[2L]]
    msg <- list(op = "chunk", map = id, from = from, to = to, threshold = threshold, stage = if (first) stage)
    list(payload = serialize(msg, NULL, xdr = FALSE), info = list(from = from, to = to, pid = shm_pool$pids[slot]))
  }, on_reply = function(info, reply) {
    if (!is.null(reply$relay)) job$relays[[length(job$relays) + 1L]] <- list(from = info$from, relay = reply$relay)
    if (identical(reply$status, "error")) {
      job$failure <- list(kind = "error", index = if (is.na(reply$index)) info$from else reply$index,
                          condition = reply$condition)
      return(invisible())
    }
    len <- info$to - info$from + 1
    job$out[seq.int(info$from, info$to)] <- reply$value
    if (!is.null(reply$rate)) .Call(ps_map_rate, id, reply$rate)
    if (!is.null(progress)) progress(amount = len)
  }, requeue = function(info) {
    .Call(ps_map_requeue, id, info$from, info$to)
  })
  job$out <- vector("list", n)
  job$relays <- list()
  job$keep <- state$views   # (until the job and its pending items are gone)
  pool_drive(job)
}

# Emits what the map's chunks relayed (see relay_emit()), in the order of
# their elements: up to the element that failed, or, when a worker died, up to
# the chunk it was running.
map_relay_emit <- function(job, stdout = TRUE, conditions = "condition") {
  r <- job$relays
  if (!length(r)) return(invisible())
  f <- job$failure
  upto <- if (is.null(f)) Inf else if (identical(f$kind, "died")) f$info$from - 1 else f$index
  from <- vapply(r, function(x) x$from, 0)
  for (k in order(from)) if (from[k] <= upto) relay_emit(r[[k]]$relay, stdout, conditions)
  invisible()
}

element_label <- function(i, nms) {
  sprintf("%d%s", i, if (!is.null(nms) && !is.na(nms[i]) && nzchar(nms[i])) sprintf(" (%s)", dQuote(nms[i], FALSE)) else "")
}

# The L'Ecuyer-CMRG .Random.seed the streams of a map start from, or NULL.
# The caller's generator is restored afterwards (after the one draw of TRUE).
map_seed <- function(seed) {
  if (isFALSE(seed) || is.null(seed)) return(NULL)
  if (is.numeric(seed) && length(seed) == 7L && all(is.finite(seed)) && seed[1L] %% 100L == 7L) {
    return(as.integer(seed))
  }
  if (!isTRUE(seed) && !(is.numeric(seed) && length(seed) == 1L && is.finite(seed))) {
    pageshare_stop("map_seed", describe_value(seed))
  }
  if (isTRUE(seed)) seed <- sample.int(.Machine$integer.max, 1L)
  genv <- globalenv()
  old <- get0(".Random.seed", envir = genv, inherits = FALSE)
  old_kind <- RNGkind()
  on.exit({
    do.call(RNGkind, as.list(old_kind))
    if (is.null(old)) rm(".Random.seed", envir = genv) else assign(".Random.seed", old, envir = genv)
  })
  set.seed(seed, kind = "L'Ecuyer-CMRG")
  get(".Random.seed", envir = genv)
}

# A progressr progressor of `n` steps whose bar closes when the caller
# (shm_map()) returns. It is tied to the caller's frame through `envir`:
# evaluated there with eval.parent() instead, it would be tied to eval()'s own
# frame, and close before the first update.
map_progressor <- function(n) {
  if (!requireNamespace("progressr", quietly = TRUE)) pageshare_stop("need_progressr")
  progressr::progressor(steps = n, envir = parent.frame())
}
