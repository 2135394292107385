#' Apply a function over the rows or columns of a shared matrix (memshare API)
#'
#' Same names and arguments as memshare's `memApply()`: `FUN` is called on every
#' row (`MARGIN = 1`) or column (`MARGIN = 2`) of `X` on parallel workers, with
#' the row/column as first argument and the elements of `VARS` as further
#' arguments, by name. Large `X` and `VARS` are shared once (see [share()]) and
#' reach the workers as views, so every worker reads the same pages; repeated
#' calls on the same objects share nothing new. Large vectors captured in the
#' frame of `FUN` (a function made inside another function) are shared as well.
#'
#' Differences from memshare (its defects, fixed here): `MARGIN = 1` iterates
#' rows; integer, logical, double, complex and raw matrices (and character
#' matrices, sent plainly) work without coercion; a data frame works column-wise,
#' and row-wise when all its columns are numeric or logical; an error in `FUN`
#' is an R error naming the row/column that failed (never `NA`); there are no
#' results left over from an earlier call; primitives such as `sum` work as
#' `FUN`; the dimnames along `MARGIN` name the result; nothing is left in the
#' workers' global environments; without `CLUSTER`, pageshare's persistent
#' worker pool is reused (no cluster is started per call).
#'
#' @section Output and conditions:
#' On pageshare's pool (no `CLUSTER`), as future relays them: what `FUN`
#' writes to the standard output is written here, then the messages, warnings
#' and other conditions it signalled are signalled here again, in the order of
#' the rows, columns or elements (see [shm_map()], "Output and conditions"),
#' so that `withCallingHandlers()`, `suppressWarnings()` and
#' `capture.output()` around the call see them. `stdout = FALSE` drops the
#' output; `conditions` names the classes of the conditions relayed
#' (`character()` or `NULL`: none). On a `CLUSTER`, they stay in its workers
#' as with `parallel`.
#'
#' @section Errors:
#' Conditions (see [pageshare_conditions]): `pageshare_task_failed` when
#' `FUN` fails (its `parent` is `FUN`'s own condition; the message names the
#' row, column or element), `pageshare_worker_died` when a worker dies during
#' the call, `pageshare_bad_argument` for a bad `X`, `MARGIN`, `VARS` or
#' `CLUSTER`, `pageshare_not_registered` for a name not registered in
#' `NAMESPACE`, `pageshare_worker_setup` when a worker cannot load
#' pageshare; the warning `pageshare_fallback` when data went by plain
#' serialization.
#' @param X A matrix or data frame, or the name of a matrix registered with
#'   [registerVariables()] in `NAMESPACE`.
#' @param MARGIN `1` for rows, `2` for columns.
#' @param FUN A function (or the name of one); its first argument receives the
#'   row/column.
#' @param NAMESPACE Namespace of the variables named by `X` or `VARS`; needed
#'   only when they are given by name.
#' @param CLUSTER A `parallel` cluster to use (not stopped). Default: pageshare's
#'   worker pool (option `pageshare.workers`, see [stop_workers()]).
#' @param VARS A named list of further arguments for `FUN`, or the names of
#'   variables registered in `NAMESPACE`.
#' @param MAX.CORES The maximal number of workers used; default all the
#'   workers of `CLUSTER` or of the pool. Checked as `cores` of
#'   [registerDoShm()].
#' @param stdout `TRUE` (default) to write what `FUN` writes to its standard
#'   output here, `FALSE` to drop it, as future's `stdout` (see "Output and
#'   conditions").
#' @param conditions The classes of the conditions of `FUN` signalled here
#'   again, as future's `conditions`: `"condition"` (default) for all,
#'   `character()` or `NULL` for none.
#' @return A list with one element per row/column (`FUN`'s value), named by the
#'   dimnames of `X` along `MARGIN` when it has them.
#' @seealso [memLapply()], [registerVariables()], [registerDoShm()]
#' @examples
#' \donttest{
#' X <- matrix(rnorm(2000), 100, dimnames = list(NULL, paste0("c", 1:20)))
#' y <- rnorm(100)
#' r <- memApply(X, 2, function(v, y) cor(v, y), VARS = list(y = y), MAX.CORES = 2)
#' unlist(r)[1:3]
#' memApply(matrix(1:6, 2), 1, sum, MAX.CORES = 2)
#' stop_workers()
#' }
#' @export
memApply <- function(X, MARGIN, FUN, NAMESPACE = NULL, CLUSTER = NULL, VARS = NULL, MAX.CORES = NULL,
                     stdout = TRUE, conditions = "condition") {
  check_given("memApply", c(X = missing(X), MARGIN = missing(MARGIN), FUN = missing(FUN)))
  check_namespace_arg(NAMESPACE)
  check_relay(stdout, conditions, "stdout", "conditions")
  FUN <- as_function(FUN)
  if (!is_number(MARGIN) || !MARGIN %in% c(1, 2)) {
    pageshare_stop("margin", paste(format(MARGIN), collapse = " "))
  }
  MARGIN <- as.integer(MARGIN)
  held <- new.env(parent = emptyenv())   # views retrieved by name, released on exit
  on.exit(release_held(held), add = TRUE)
  if (is.character(X) && is.null(dim(X))) X <- by_name(X, NAMESPACE, "X", held)
  mode <- MARGIN
  if (is.data.frame(X)) {
    if (MARGIN == 2L) {
      mode <- 3L   # element-wise over the columns
    } else {
      bad <- non_numeric_columns(X)
      if (length(bad)) pageshare_stop("df_rows", or_none(bad))
      X <- as.matrix(X)
    }
  } else if (length(dim(X)) != 2L || !is.atomic(X)) {
    pageshare_stop("apply_x", describe_object(X))
  }
  n <- if (mode == 3L) length(X) else dim(X)[MARGIN]
  nms <- if (mode == 3L) names(X) else dimnames(X)[[MARGIN]]
  mem_run("memApply", X, mode, n, nms, FUN, NAMESPACE, CLUSTER, VARS, MAX.CORES, held,
          if (MARGIN == 1L) "row" else "column", list(stdout = stdout, conditions = conditions))
}

#' Apply a function over the elements of a shared list (memshare API)
#'
#' Same names and arguments as memshare's `memLapply()`: `FUN` is called on
#' every element of `X` on parallel workers, with the element as first argument
#' and the elements of `VARS` by name. Large elements (and `VARS`) are shared
#' once and reach the workers as views. Names of `X` are kept on the result; an
#' error in `FUN` is an R error naming the element.
#'
#' @section Output and conditions:
#' As for [memApply()]: on pageshare's pool, what `FUN` writes and signals is
#' written and signalled here again, in the order of the elements.
#'
#' @section Errors:
#' As for [memApply()]: `pageshare_task_failed` (naming the element, with
#' `FUN`'s condition as `parent`), `pageshare_worker_died`,
#' `pageshare_bad_argument`, `pageshare_not_registered`,
#' `pageshare_worker_setup`; the warning `pageshare_fallback`.
#' @param X A list (or data frame, or atomic vector), or the name of a vector
#'   registered with [registerVariables()] in `NAMESPACE`.
#' @inheritParams memApply
#' @param FUN A function (or the name of one); its first argument receives the
#'   element.
#' @return A list with one element per element of `X`, with the names of `X`.
#' @seealso [memApply()]
#' @examples
#' \donttest{
#' L <- list(a = matrix(rnorm(20), 4), b = matrix(rnorm(20), 4))
#' w <- rnorm(5)
#' memLapply(L, function(el, w) el %*% w, VARS = list(w = w), MAX.CORES = 2)
#' stop_workers()
#' }
#' @export
memLapply <- function(X, FUN, NAMESPACE = NULL, CLUSTER = NULL, VARS = NULL, MAX.CORES = NULL,
                      stdout = TRUE, conditions = "condition") {
  check_given("memLapply", c(X = missing(X), FUN = missing(FUN)))
  check_namespace_arg(NAMESPACE)
  check_relay(stdout, conditions, "stdout", "conditions")
  FUN <- as_function(FUN)
  held <- new.env(parent = emptyenv())
  on.exit(release_held(held), add = TRUE)
  if (is.character(X) && is.null(dim(X)) && length(X) == 1L && !is.null(NAMESPACE)) {
    X <- by_name(X, NAMESPACE, "X", held)
  }
  if (!(is.list(X) || is.atomic(X)) || is.null(X) || isS4(X)) {
    pageshare_stop("lapply_x", describe_object(X))
  }
  mem_run("memLapply", X, 3L, length(X), names(X), FUN, NAMESPACE, CLUSTER, VARS, MAX.CORES, held,
          "element", list(stdout = stdout, conditions = conditions))
}

describe_object <- function(x) {
  if (is.null(x)) return("NULL")
  d <- dim(x)
  sprintf("%s %s%s", if (is.object(x)) paste(class(x), collapse = "/") else typeof(x),
          if (length(d)) "array with dim " else "of length ",
          if (length(d)) paste(d, collapse = "x") else length(x))
}

# `NAMESPACE` of memApply()/memLapply(): NULL or a namespace's name.
check_namespace_arg <- function(NAMESPACE) {
  if (!is.null(NAMESPACE)) {
    if (!is_string(NAMESPACE)) pageshare_stop("namespace_arg", describe_value(NAMESPACE))
    check_name_bytes(NAMESPACE, "NAMESPACE")
  }
}

# View of a registered variable named `name`; retrieved views are released on exit.
by_name <- function(name, namespace, arg, held) {
  check_name(name, arg)
  check_string(namespace, arg, "name_needs_namespace")
  key <- view_key(namespace, name)
  already <- exists(key, envir = views_held, inherits = FALSE)
  v <- retrieveViews(namespace, name)[[1L]]
  if (!already) assign(key, c(namespace, name), envir = held)
  v
}

release_held <- function(held) {
  for (k in ls(held, all.names = TRUE)) {
    nv <- get(k, envir = held)
    tryCatch(releaseViews(nv[1L], nv[2L]), error = function(e) NULL)
  }
}

resolve_vars <- function(VARS, NAMESPACE, held) {
  if (is.null(VARS)) return(list())
  if (is.character(VARS) && is.null(dim(VARS))) {
    check_string(NAMESPACE, "VARS", "name_needs_namespace")
    out <- lapply(VARS, by_name, namespace = NAMESPACE, arg = "VARS", held = held)
    names(out) <- VARS
    return(out)
  }
  nms <- names(VARS)
  if (!is.list(VARS) || is.data.frame(VARS) || !has_names(VARS)) {
    pageshare_stop("vars_format")
  }
  VARS
}

# The common path of memApply/memLapply. mode: 1 rows, 2 columns, 3 elements.
mem_run <- function(caller, X, mode, n, nms, FUN, NAMESPACE, CLUSTER, VARS, MAX.CORES, held, what,
                    relay = list(stdout = TRUE, conditions = "condition")) {
  VARS <- resolve_vars(VARS, NAMESPACE, held)
  if (!is.null(MAX.CORES)) MAX.CORES <- check_worker_count(MAX.CORES, "MAX.CORES")
  if (n == 0L) return(stats::setNames(list(), nms))
  if (is.null(CLUSTER)) {
    return(mem_run_pool(caller, X, mode, n, nms, FUN, VARS, MAX.CORES, what, relay))
  }
  if (!inherits(CLUSTER, "cluster")) {
    pageshare_stop("not_cluster", "CLUSTER", " (or NULL: pageshare's own pool)", describe_object(CLUSTER))
  }
  cl <- CLUSTER
  local <- is_local_cluster(cl)
  k <- min(length(cl), n, if (is.null(MAX.CORES)) Inf else MAX.CORES)
  state <- share_state(sprintf("%s()", caller))
  force_sent_promises(state, FUN, VARS)
  if (local) {
    X <- share_walk(X, state, name = "X")
    for (i in seq_along(VARS)) VARS[i] <- list(share_walk(VARS[[i]], state, name = names(VARS)[i]))
    # data in the frames FUN carries (a function made inside another) too
    share_walk(FUN, state, name = "FUN")
    on.exit(restore_shared(state), add = TRUE)
    if (fall_back(state)) local <- FALSE
  }
  chunks <- if (k == 1L) list(seq_len(n)) else split_range(n, k)
  # One message per worker: X and VARS (views travel as handles) and a chunk of
  # indices. X and VARS stay referenced here until every result is back.
  # The handle scope only when a view is actually sent (it costs a little).
  local <- local && length(state$views) > 0L
  res <- with_handles_if(local, parallel::clusterApply(cl[seq_len(k)], chunks, worker_stub("mem_worker"), X, mode, FUN, VARS))
  resignal_remote_errors(res)
  failed <- Filter(function(r) inherits(r, "pageshare_task_error"), res)
  if (length(failed)) {
    first <- failed[[which.min(vapply(failed, function(f) f$index, numeric(1)))]]
    label <- sprintf("%s %d%s", what, first$index,
                     if (!is.null(nms) && !is.na(nms[first$index]) && nzchar(nms[first$index])) sprintf(" (%s)", dQuote(nms[first$index], FALSE)) else "")
    pageshare_stop("fun_failed", caller, label, first$message)
  }
  out <- do.call(c, res)
  names(out) <- nms
  out
}

# The same on pageshare's own pool: a map over the indices, each element
# reading its row, column or element of X (sent once per worker, shared by
# the rule of every front door).
mem_run_pool <- function(caller, X, mode, n, nms, FUN, VARS, MAX.CORES, what,
                         relay = list(stdout = TRUE, conditions = "condition")) {
  if (is.null(MAX.CORES)) pool_ensure()
  slots <- pool_slots(min(n, MAX.CORES %||% length(shm_pool$pids)))
  element <- switch(mode, mem_row, mem_column, mem_element)
  job <- pool_map(seq_len(n), element, c(list(.X = X, .FUN = FUN), VARS), slots = slots, door = sprintf("%s()", caller))
  f <- job$failure
  map_relay_emit(job, relay$stdout, relay$conditions)
  if (identical(f$kind, "died")) {
    pageshare_stop("pool_worker_died", f$pid,
                   describe_items(what, seq.int(f$info$from, f$info$to)), sprintf("%s()", caller))
  }
  if (!is.null(f)) {
    label <- sprintf("%s %s", what, element_label(f$index, nms))
    cond <- f$condition
    task_failed_error(sprintf(pageshare_messages$fun_failed, caller, label, conditionMessage(cond)), cond)
  }
  out <- job$out
  names(out) <- nms
  out
}

# Run on a worker: FUN on row, column or element i of X, with VARS as the
# further arguments (bound once per call, see pool_runner()). A row or column
# is X[i, ] or X[, i], copied in C where that is certain to be the same
# (src/matrix_margins.c).
mem_row <- function(i, .X, .FUN, ...) .FUN(.Call(ps_matrix_row, .X, i), ...)
mem_column <- function(i, .X, .FUN, ...) .FUN(.Call(ps_matrix_column, .X, i), ...)
mem_element <- function(i, .X, .FUN, ...) .FUN(.X[[i]], ...)

# Runs on a worker: FUN over its chunk. Returns a list of results, or a
# pageshare_task_error naming the first failing index. Assigns nothing global.
mem_worker <- function(idx, X, mode, FUN, VARS) {
  out <- vector("list", length(idx))
  novars <- !length(VARS)
  # Each row/column is a fresh vector that becomes garbage; collect the young
  # generation every ~8 MB of them so that a worker's heap stays small.
  garbage <- 0
  for (j in seq_along(idx)) {
    i <- idx[j]
    v <- switch(mode, .Call(ps_matrix_row, X, i), .Call(ps_matrix_column, X, i), X[[i]])
    if (mode != 3L) {
      garbage <- garbage + 8 * length(v)
      if (garbage > 8388608) {
        gc(verbose = FALSE, full = FALSE)
        garbage <- 0
      }
    }
    r <- tryCatch(if (novars) FUN(v) else do.call(FUN, c(list(v), VARS)),
                  error = function(e) structure(list(index = i, message = conditionMessage(e)),
                                                class = "pageshare_task_error"))
    if (inherits(r, "pageshare_task_error")) return(r)
    if (!is.null(r)) out[[j]] <- r
  }
  out
}

# "element 3", "elements 3 to 9": `what` is the singular.
describe_items <- function(what, idx) {
  if (length(idx) == 1L) sprintf("%s %s", what, format(idx)) else sprintf("%ss %d to %d", what, min(idx), max(idx))
}
