#' Register pageshare's foreach backend
#'
#' A drop-in replacement for `doParallel::registerDoParallel()`: after
#' `registerDoShm()`, `foreach(...) %dopar% { ... }` runs on pageshare's worker
#' pool (or on a cluster you pass), and
#' every large value the loop sends (automatically detected and `.export`ed
#' variables, and iteration values; lists and data frames leaf by leaf) is
#' moved into shared memory once and crosses to the workers as a handle of a
#' few hundred bytes. All workers read the same pages, whatever the number of
#' workers, tasks or loops (an object shared once is shared again for free
#' while it lives).
#'
#' What is shared follows the one rule of every pageshare front door (the
#' same for [shm_multisession()] and [memApply()]): vectors whose data take at
#' least `getOption("pageshare.threshold")` bytes (see [pageshare_options]),
#' also inside lists and data frames, and such values bound in the frames an
#' exported closure carries (a function made inside another function; swapped
#' for views while the loop's tasks are sent and put back afterwards). If a
#' value cannot be shared (for instance because there is not enough memory for
#' a segment), it is sent by plain serialization with one warning.
#'
#' Iterations are grouped into tasks of consecutive iterations, by default
#' one task per worker (as doFuture and `parLapply()` do), so that many tiny
#' iterations do not each pay a round trip. Iterations of uneven cost balance
#' better with more, smaller tasks handed out as workers become free:
#' `.options.shm = list(scheduling = 4)` makes four per worker. A loop costs
#' one round of messages: the body and the exported variables travel with a
#' worker's first task and stay there for the loop's later tasks. Each
#' iteration binds its variables in the loop's environment and evaluates the
#' body there, as `eval()` does (a body that calls `return()`, `sys.call()`,
#' `parent.frame()` or the like at its top level is evaluated by `eval()`
#' itself). Results, their order, `.errorhandling` and doRNG's streams are per
#' iteration as before.
#' `.options.shm = list(chunk.size = 1)` (or `scheduling = Inf`) sends one
#' task per iteration; `chunk.size = k` sends `k` iterations per task;
#' `scheduling = s` makes about `s` tasks per worker.
#'
#' On pageshare's pool (no `cl`), what the loop body writes to the standard
#' output (`cat()`, `print()`) is written in the caller and the messages,
#' warnings and other conditions it signals are signalled there again, as
#' doFuture relays them: task by task in the order of the iterations (a
#' task's output first, then its conditions in their order), before the
#' loop's value is returned or its error raised, so that
#' `withCallingHandlers()`, `suppressWarnings()` and `capture.output()` around
#' the loop see them. Conditions of class `"immediateCondition"` (progressr's
#' updates) are signalled as they come. `.options.shm = list(stdout = FALSE)`
#' drops the output and `.options.shm = list(conditions = character())` the
#' conditions (`conditions`: the classes relayed, as future's `conditions`;
#' default `"condition"`, all). On a cluster passed as `cl` they stay in its
#' workers, as with doParallel.
#'
#' Supported foreach options: `.export`, `.noexport`, `.packages`,
#' `.errorhandling` (`"stop"`, `"remove"`, `"pass"`), `.verbose`,
#' `.options.shm = list(chunk.size = , scheduling = , stdout = , conditions = )`
#' (above), and
#' `.options.snow = list(preschedule = , attachExportEnv = )` as with doParallel
#' (`preschedule = TRUE`: one task per worker, assigned in advance;
#' `attachExportEnv = TRUE` attaches the exported variables on the workers
#' under the name `"exportEnv"`). Combining (`.combine`, `.init`, `.final`,
#' `.inorder`, `.multicombine`, `.maxcombine`), nested loops (`%:%`) and
#' `when()` are handled by foreach as usual.
#'
#' @section Errors:
#' An error in the loop's body is handled as `.errorhandling` says, as with
#' doParallel. Conditions of pageshare's own (see [pageshare_conditions]):
#' `pageshare_bad_argument` (`cl` not a cluster, a bad `cores`),
#' `pageshare_missing_package` (foreach is not installed),
#' `pageshare_worker_died` (a worker died during the loop; it is replaced),
#' `pageshare_worker_setup` (a worker cannot load pageshare or its
#' packages), and the warning `pageshare_fallback` when data that could not be
#' shared went by plain serialization.
#' @param cl A cluster made by `parallel::makePSOCKcluster()` on this machine
#'   (pageshare is loaded on its workers now), or a number of workers, or
#'   missing: then pageshare's own worker pool is used (started at the first
#'   loop, see [stop_workers()]). A cluster on another host is accepted but
#'   receives plain data.
#' @param cores Number of workers of pageshare's pool to use when `cl` is
#'   missing; default the option `pageshare.workers` (see [pageshare_options]). A whole number from 1
#'   to the connections R has free; anything else (`1.7`, `Inf`, `NA`, `"2"`)
#'   is a `pageshare_bad_argument` error before any worker starts.
#' @param ... Registration options; as in doParallel, only `nocompile`
#'   is recognised (`TRUE`: never byte-compile the loop body; by default a
#'   body that contains a loop of its own is compiled once, on the master).
#' @return `invisible(NULL)`; registers the backend (name `"doShm"`) with
#'   `foreach::setDoPar()`.
#' @seealso [stop_workers()], [share()], [memApply()]
#' @examples
#' \donttest{
#' library(foreach)
#' registerDoShm(cores = 2)
#' X <- matrix(rnorm(2e5), 500)            # 1.6 MB: crosses as a view
#' r <- foreach(j = 1:4, .combine = c) %dopar% is_shared(X)
#' r
#' getDoParName()
#' foreach::registerDoSEQ()
#' stop_workers()
#' }
#' @export
registerDoShm <- function(cl, cores = NULL, ...) {
  if (!requireNamespace("foreach", quietly = TRUE) || !requireNamespace("iterators", quietly = TRUE)) {
    pageshare_stop("need_foreach")
  }
  opts <- list(...)
  unknown <- setdiff(names(opts), "nocompile")
  if (!has_names(opts)) {
    unknown <- c(unknown, "<unnamed>")
  }
  if (length(unknown)) {
    warning(sprintf("ignoring unrecognised registration option(s): %s",
                    paste(unique(unknown), collapse = ", ")), call. = FALSE)
  }
  nocompile <- isTRUE(opts$nocompile)
  if (missing(cl) || is.null(cl) || is.numeric(cl)) {
    n <- if (!missing(cl) && is.numeric(cl)) worker_count(cl, "cl") else worker_count(cores, "cores")
    data <- list(cluster = NULL, cores = n, nocompile = nocompile, local = TRUE)
  } else if (inherits(cl, "cluster")) {
    load_on_workers(cl)
    data <- list(cluster = cl, cores = length(cl), nocompile = nocompile,
                 local = is_local_cluster(cl))
  } else {
    pageshare_stop("not_cluster", "cl", " (or a number of workers)", sprintf("an object of class %s", paste(class(cl), collapse = "/")))
  }
  foreach::setDoPar(doshm_backend, data, doshm_info)
  invisible(NULL)
}

doshm_info <- function(data, item) {
  switch(item,
         workers = data$cores,
         name = "doShm",
         version = as.character(utils::packageVersion("pageshare")),
         NULL)
}

# Backend options from .options.snow (doParallel compatible) and .options.shm:
# preschedule and attachExportEnv (TRUE or FALSE), chunk.size (iterations per
# task, a whole number >= 1) and scheduling (tasks per worker, a number > 0,
# Inf for one task per iteration). A value that does not fit is ignored with a
# warning, as doParallel does.
doshm_options <- function(obj) {
  out <- list(preschedule = FALSE, attachExportEnv = FALSE, chunk.size = NULL,
              scheduling = default_scheduling, stdout = TRUE, conditions = "condition")
  given <- c(obj$options$snow, obj$options$shm)
  for (nm in names(given)) {
    val <- given[[nm]]
    ok <- switch(nm,
      preschedule = , attachExportEnv = , stdout = is_flag(val),
      conditions = is.null(val) || (is.character(val) && !anyNA(val)),
      chunk.size = is_number(val, min = 1) && val == round(val),
      scheduling = is_number(val) && val > 0,
      NA)
    if (is.na(ok)) {
      warning(sprintf("ignoring unknown foreach backend option %s", dQuote(nm, FALSE)), call. = FALSE)
    } else if (!ok) {
      warning(sprintf("foreach backend option %s must be %s; ignoring it", dQuote(nm, FALSE),
                      switch(nm, chunk.size = "a whole number >= 1", scheduling = "a number > 0",
                             conditions = "NULL or a character vector of condition classes",
                             "TRUE or FALSE")), call. = FALSE)
    } else {
      out[nm] <- list(val)
    }
  }
  out
}

# Tasks per worker when neither chunk.size nor scheduling is given: one, as
# doFuture's default, so that a loop of tiny iterations costs one round of
# messages (a second round costs about as much as the first).
default_scheduling <- 1

# The iterations 1..n grouped into tasks of consecutive iterations.
iteration_chunks <- function(n, workers, opt) {
  if (n == 0L) return(list())
  tasks <- if (!is.null(opt$chunk.size)) ceiling(n / opt$chunk.size)
           else if (is.infinite(opt$scheduling)) n
           else ceiling(opt$scheduling * workers)
  tasks <- max(1L, min(n, tasks))
  if (tasks == n) return(as.list(seq_len(n)))
  split_range(n, tasks)
}

# A frame holding the caller's `...` (if any), so that `...` used in the loop
# body works on the workers.
dots_frame <- function(...) environment()

doshm_backend <- function(obj, expr, envir, data) {
  if (!inherits(obj, "foreach")) stop("`obj` must be a foreach object")
  verbose <- isTRUE(obj$verbose)
  on_pool <- is.null(data$cluster)
  cl <- data$cluster
  slots <- if (on_pool) pool_slots(data$cores)
  workers <- if (on_pool) length(slots) else length(cl)
  local <- isTRUE(data$local)
  state <- share_state("a foreach loop")
  on.exit(restore_shared(state), add = TRUE)
  # A plain loop's iterations and combining are done in bulk (doshm-bulk.R);
  # any other goes through foreach's iterator and accumulator.
  bulk <- foreach_in_bulk(obj)
  if (is.null(bulk$columns)) {
    it <- iterators::iter(bulk$obj)
    accumulator <- foreach::makeAccum(it)
  }
  opt <- doshm_options(obj)

  # Export environment: the caller's dots (large ones shared), then the
  # variables the body uses, then .export.
  dots <- tryCatch(eval(quote(list(...)), envir), error = function(e) NULL)
  exportenv <- if (is.null(dots)) {
    new.env(parent = emptyenv())
  } else {
    if (local) dots <- lapply(dots, share_walk, state = state)
    do.call(dots_frame, dots)
  }
  noexport <- union(obj$noexport, obj$argnames)
  foreach::getexports(expr, exportenv, envir, bad = noexport)
  auto <- setdiff(ls(exportenv, all.names = TRUE), "...")
  if (verbose) {
    cat(sprintf("automatically exporting the following variables from the foreach environment:\n  %s\n",
                if (length(auto)) paste(auto, collapse = ", ") else "(none)"))
  }
  export <- unique(obj$export)
  dup <- intersect(export, auto)
  if (length(dup)) {
    warning(sprintf("already exporting variable(s): %s", paste(dup, collapse = ", ")))
    export <- setdiff(export, dup)
  }
  if (length(export)) {
    if (verbose) cat(sprintf("explicitly exporting variables(s): %s\n", paste(export, collapse = ", ")))
    for (sym in export) {
      if (!exists(sym, envir = envir, inherits = TRUE)) {
        stop(sprintf("unable to find variable \"%s\"", sym))
      }
      val <- get(sym, envir = envir, inherits = TRUE)
      if (is.function(val)) {
        fenv <- environment(val)
        if (identical(fenv, envir) || identical(fenv, globalenv())) environment(val) <- exportenv
      }
      assign(sym, val, envir = exportenv)
    }
  }
  exported <- setdiff(ls(exportenv, all.names = TRUE), "...")
  force_sent_promises(state, NULL, mget(exported, envir = exportenv))
  if (local) {
    for (sym in exported) {
      val <- get(sym, envir = exportenv, inherits = FALSE)
      # (exported functions' frames are walked too; exportenv is walked here)
      if (is.function(val) && identical(environment(val), exportenv)) next
      before <- length(state$views)
      shared <- share_walk(val, state, name = sym)
      if (length(state$views) > before && !is.function(val)) assign(sym, shared, envir = exportenv)
    }
  }

  body <- if (isTRUE(data$nocompile) || !has_loop(expr)) expr
          else compiler::compile(expr, env = envir, options = list(suppressUndefined = TRUE))
  pkgname <- if (identical(envir, globalenv())) NULL else utils::packageName(envir)
  if (!isTRUE(data$nocompile)) {
    detach_compiled <- compile_exported_functions(exportenv, doshm_parent(pkgname))
    on.exit(detach_compiled(), add = TRUE)
  }
  packages <- obj$packages
  if (verbose && length(packages)) {
    cat(sprintf("explicitly exporting package(s): %s\n", paste(packages, collapse = ", ")))
  }

  # Task arguments, evaluated on the master, as columns; large values in list
  # columns shared (identity cached: the same object in many tasks is one
  # segment). Atomic columns hold one element per iteration and are sent in
  # slices.
  columns <- if (is.null(bulk$columns)) rows_to_columns(as.list(it)) else bulk$columns
  n <- iteration_count(columns)
  if (local) {
    lists <- vapply(columns, is.list, NA)
    columns[lists] <- lapply(columns[lists], share_walk, state = state)
    if (fall_back(state)) local <- FALSE
  }
  if (verbose) {
    cat(sprintf("pageshare: %d task(s) on %d worker(s); %d value(s) shared\n",
                n, workers, length(unique_views(state$views))))
  }

  # Every message to the workers is serialized inside the handle scope, so
  # views cross as handles. exportenv and columns keep the views (and thus
  # the segments) alive until the loop has finished.
  setup <- list(expr = body, exportenv = exportenv, pkgname = pkgname, packages = packages,
                attach = opt$attachExportEnv, direct = evaluates_directly(expr))
  chunks <- if (opt$preschedule) {
    if (verbose) cat(sprintf("bundling all tasks into %d chunk(s)\n", min(workers, n)))
    split_range(n, min(workers, n))
  } else {
    iteration_chunks(n, workers, opt)
  }
  if (verbose) {
    if (opt$attachExportEnv) cat("attaching export environment\n")
    cat(sprintf("%d iteration(s) in %d task(s)\n", n, length(chunks)))
  }
  results <- if (on_pool) {
    with_handles_if(local, run_loop_tasks_on_pool(slots, columns, chunks, setup, opt))
  } else {
    with_handles_if(local, run_loop_tasks(cl, columns, chunks, setup, balance = !opt$preschedule))
  }

  if (is.null(bulk$columns)) {
    tryCatch(accumulator(results$values, seq_along(results$values)), error = report_combine_error)
    combined <- list(error = foreach::getErrorValue(it), error_index = foreach::getErrorIndex(it))
  } else {
    combined <- combine_in_bulk(results$values, results$errors, bulk, obj$errorHandling)
  }
  if (identical(obj$errorHandling, "stop") && !is.null(combined$error)) {
    msg <- sprintf("task %d failed - \"%s\"", combined$error_index, conditionMessage(combined$error))
    stop(simpleError(msg, call = expr))
  }
  if (is.null(bulk$columns)) foreach::getResult(it) else combined$result
}
