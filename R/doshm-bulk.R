# foreach's iteration and combining, done in bulk for plain loops.
#
# foreach's own iterator and accumulator cost tens of microseconds per
# iteration on the master (its sequential `%do%` takes longer for 2000 tiny
# iterations than the whole parallel work), which caps any backend that uses
# them. For a plain loop, one whose iteration values are ordinary vectors or
# lists (no iterators, matrices, data frames, `%:%` or `when()`), the backend
# computes the same two things directly: the values of every iteration, and
# the combined result by foreach's own rule (groups of `.maxcombine`, error
# results dropped for "stop" and "remove", the same call objects evaluated in
# an environment holding `fun`, `accum` and `result.<i>`). Anything else goes
# through foreach's iterator and accumulator as before. Either way every
# argument is evaluated once.

# The iteration values of `obj` as columns (see rows_to_columns()) and what
# the combining needs, or, when the loop is not plain, list(obj = obj) with its
# arguments already evaluated (quoted), so that foreach's iterator does not
# evaluate them again.
foreach_in_bulk <- function(obj) {
  info <- obj$combineInfo
  fields <- c("fun", "in.order", "has.init", "init", "final", "max.combine")
  plain_object <- identical(class(obj), "foreach") && !isTRUE(obj$verbose) && is.list(info) &&
    all(fields %in% names(info)) && is.environment(obj$evalenv) && length(obj$args) > 0L
  if (!plain_object) return(list(obj = obj))
  values <- lapply(obj$args, eval, envir = list(), enclos = obj$evalenv)
  if (!all(vapply(values, is_plain_sequence, NA)) || !all(nzchar(obj$argnames))) {
    obj$args <- lapply(values, function(v) call("quote", v))
    return(list(obj = obj))
  }
  init <- if (isTRUE(info$has.init)) eval(info$init, envir = list(), enclos = obj$evalenv)
  n <- min(lengths(values))
  columns <- lapply(values, function(v) {
    if (length(v) != n) v <- v[seq_len(n)]
    if (is.null(names(v))) v else unname(v)
  })
  names(columns) <- obj$argnames
  list(columns = columns, init = init, info = info)
}

# The iterations of a loop as columns: a named list holding, for each
# iteration variable, a vector or list with its value in every iteration
# (iteration k binds each name to `column[[k]]`). Sent in slices, so that a
# task of 500 iterations is a few vectors rather than 500 small lists.
# `rows` is what foreach's iterator gives: one named list per iteration.
# (An iteration may bind no variable, as in foreach(icount(3)): the count is
# attribute "iterations".)
rows_to_columns <- function(rows) {
  nms <- unique(unlist(lapply(rows, names)))
  columns <- lapply(nms, function(nm) lapply(rows, function(r) r[[nm]]))
  names(columns) <- nms
  structure(columns, iterations = length(rows))
}

iteration_count <- function(columns) {
  n <- attr(columns, "iterations", exact = TRUE)
  if (!is.null(n)) n else if (length(columns)) length(columns[[1L]]) else 0L
}

slice_columns <- function(columns, idx) {
  structure(lapply(columns, function(col) col[idx]), iterations = length(idx))
}

# What iterators::iter() walks with `[[` and length(): an atomic vector or a
# list with no attributes other than names.
is_plain_sequence <- function(v) {
  (is.atomic(v) || (is.list(v) && !is.pairlist(v))) && !is.object(v) &&
    all(names(attributes(v)) %in% "names")
}

# foreach's result from the results of every iteration, in order (`failed`:
# the indices of those that are errors), as its accumulator would combine them
# (see callCombine() in foreach), with the first error a "stop" or "remove"
# loop records. A failing combine function is reported as foreach's backends
# do, and the results combined so far kept.
combine_in_bulk <- function(results, failed, bulk, error_handling) {
  info <- bulk$info
  n <- length(results)
  errors <- logical(n)
  if (error_handling %in% c("stop", "remove")) errors[failed] <- TRUE
  if (is_default_combine(info)) {
    # foreach's default combine only collects the results into a list
    keep <- results[!errors]
    names(keep) <- NULL
    accum <- c(bulk$init, keep)
    first_error <- which(errors)[1L]
    return(list(result = if (is.null(info$final)) accum else info$final(accum),
                error = if (is.na(first_error)) NULL else results[[first_error]],
                error_index = first_error))
  }
  state <- new.env(parent = emptyenv())
  state$fun <- info$fun
  state$accum <- bulk$init
  first <- !isTRUE(info$has.init)
  done <- 0L
  failed <- tryCatch({
    while (done < n) {
      group <- done + seq_len(min(if (first) info$max.combine else info$max.combine - 1, n - done))
      done <- done + length(group)
      use <- group[!errors[group]]
      if (!length(use)) next
      syms <- paste("result", use, sep = ".")
      list2env(stats::setNames(results[use], syms), envir = state)
      call <- if (!first) as.call(lapply(c("fun", "accum", syms), as.name))
              else if (length(syms) > 1L) as.call(lapply(c("fun", syms), as.name))
              else as.name(syms)
      first <- FALSE
      state$accum <- eval(call, state)
      rm(list = syms, envir = state)
    }
    FALSE
  }, error = function(e) {
    report_combine_error(e)
    TRUE
  })
  seen <- if (failed) seq_len(done) else seq_len(n)
  first_error <- which(errors[seen])[1L]
  accum <- state$accum
  list(result = if (is.null(info$final)) accum else info$final(accum),
       error = if (is.na(first_error)) NULL else results[[first_error]],
       error_index = first_error)
}

# Whether the loop combines with foreach's default, `function(a, ...) c(a,
# list(...))` from foreach's namespace with `.init` list() (a loop without
# `.combine`), which only collects the results in order.
is_default_combine <- function(info) {
  f <- info$fun
  is.function(f) && identical(body(f), quote(c(a, list(...)))) && isTRUE(info$has.init) &&
    identical(info$init, quote(list())) && identical(names(formals(f)), c("a", "...")) &&
    identical(environment(f), asNamespace("foreach"))
}

# A combine function that fails is reported, not raised, as foreach's own
# backends do; the results combined so far are kept.
report_combine_error <- function(e) {
  cat("error calling combine function:\n")
  print(e)
}
