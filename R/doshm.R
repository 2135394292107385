#' Register pageshare's foreach backend
#'
#' A drop-in replacement for `doParallel::registerDoParallel()`: after
#' `registerDoShm()`, `foreach(...) %dopar% { ... }` runs on PSOCK workers, and
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
#' value cannot be shared (for instance because the segment directory is
#' full), it is sent by plain serialization with one warning.
#'
#' Iterations are grouped into tasks of consecutive iterations, by default
#' two tasks per worker handed out as workers become free, so that many tiny
#' iterations do not each pay a round trip (as doFuture does). Results, their
#' order, `.errorhandling` and doRNG's streams are per iteration as before.
#' `.options.shm = list(chunk.size = 1)` (or `scheduling = Inf`) sends one
#' task per iteration; `chunk.size = k` sends `k` iterations per task;
#' `scheduling = s` makes about `s` tasks per worker.
#'
#' Supported foreach options: `.export`, `.noexport`, `.packages`,
#' `.errorhandling` (`"stop"`, `"remove"`, `"pass"`), `.verbose`,
#' `.options.shm = list(chunk.size = , scheduling = )` (above), and
#' `.options.snow = list(preschedule = , attachExportEnv = )` as with doParallel
#' (`preschedule = TRUE`: one task per worker, assigned in advance;
#' `attachExportEnv = TRUE` attaches the exported variables on the workers
#' under the name `"exportEnv"`). Combining (`.combine`, `.init`, `.final`,
#' `.inorder`, `.multicombine`, `.maxcombine`), nested loops (`%:%`) and
#' `when()` are handled by foreach as usual.
#'
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
#'   (`TRUE`: do not byte-compile the loop body) is recognised.
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
  if (length(opts) && (is.null(names(opts)) || any(!nzchar(names(opts))))) {
    unknown <- c(unknown, "<unnamed>")
  }
  if (length(unknown)) {
    warning(sprintf("ignoring unrecognised registration option(s): %s",
                    paste(unique(unknown), collapse = ", ")), call. = FALSE)
  }
  nocompile <- isTRUE(opts$nocompile)
  if (missing(cl) || is.null(cl) || is.numeric(cl)) {
    n <- if (!missing(cl) && is.numeric(cl)) check_worker_count(cl, "cl")
         else if (!is.null(cores)) check_worker_count(cores, "cores")
         else worker_count()
    data <- list(cluster = NULL, cores = n, nocompile = nocompile, local = TRUE)
  } else if (inherits(cl, "cluster")) {
    load_on_workers(cl)
    data <- list(cluster = cl, cores = length(cl), nocompile = nocompile,
                 local = is_local_cluster(cl))
  } else {
    pageshare_stop("not_cluster", sprintf("an object of class %s", paste(class(cl), collapse = "/")))
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
              scheduling = default_scheduling)
  given <- c(obj$options$snow, obj$options$shm)
  for (nm in names(given)) {
    val <- given[[nm]]
    ok <- switch(nm,
      preschedule = , attachExportEnv = is.logical(val) && length(val) == 1L && !is.na(val),
      chunk.size = is.numeric(val) && length(val) == 1L && !is.na(val) && val >= 1 && val == round(val),
      scheduling = is.numeric(val) && length(val) == 1L && !is.na(val) && val > 0,
      NA)
    if (is.na(ok)) {
      warning(sprintf("ignoring unknown foreach backend option %s", dQuote(nm, FALSE)), call. = FALSE)
    } else if (!ok) {
      warning(sprintf("foreach backend option %s must be %s; ignoring it", dQuote(nm, FALSE),
                      switch(nm, chunk.size = "a whole number >= 1", scheduling = "a number > 0",
                             "TRUE or FALSE")), call. = FALSE)
    } else {
      out[nm] <- list(val)
    }
  }
  out
}

# Tasks per worker when neither chunk.size nor scheduling is given: a few, so
# that tiny iterations do not each pay a round trip and uneven ones still
# balance (doFuture's default is one).
default_scheduling <- 2

# The iterations 1..n grouped into tasks of consecutive iterations.
iteration_chunks <- function(n, workers, opt) {
  if (n == 0L) return(list())
  tasks <- if (!is.null(opt$chunk.size)) ceiling(n / opt$chunk.size)
           else if (is.infinite(opt$scheduling)) n
           else ceiling(opt$scheduling * workers)
  tasks <- max(1L, min(n, tasks))
  if (tasks == n) return(as.list(seq_len(n)))
  parallel::splitIndices(n, tasks)
}

# A frame holding the caller's `...` (if any), so that `...` used in the loop
# body works on the workers.
dots_frame <- function(...) environment()

doshm_backend <- function(obj, expr, envir, data) {
  if (!inherits(obj, "foreach")) stop("`obj` must be a foreach object")
  verbose <- isTRUE(obj$verbose)
  cl <- if (is.null(data$cluster)) pool_workers(data$cores) else data$cluster
  local <- isTRUE(data$local)
  state <- share_state()
  on.exit(restore_shared(state), add = TRUE)
  # A plain loop's iterations and combining are done in bulk (doshm-bulk.R);
  # any other goes through foreach's iterator and accumulator.
  bulk <- foreach_in_bulk(obj)
  if (is.null(bulk$args)) {
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
  if (local) {
    for (sym in setdiff(ls(exportenv, all.names = TRUE), "...")) {
      val <- get(sym, envir = exportenv, inherits = FALSE)
      # (exported functions' frames are walked too; exportenv is walked here)
      if (is.function(val) && identical(environment(val), exportenv)) next
      before <- length(state$views)
      shared <- share_walk(val, state)
      if (length(state$views) > before && !is.function(val)) assign(sym, shared, envir = exportenv)
    }
  }

  body <- if (isTRUE(data$nocompile)) expr
          else compiler::compile(expr, env = envir, options = list(suppressUndefined = TRUE))
  pkgname <- if (identical(envir, globalenv())) NULL else utils::packageName(envir)
  packages <- obj$packages
  if (verbose && length(packages)) {
    cat(sprintf("explicitly exporting package(s): %s\n", paste(packages, collapse = ", ")))
  }

  # Task arguments, evaluated on the master; large ones shared (identity
  # cached: the same object in many tasks is one segment).
  argsList <- if (is.null(bulk$args)) as.list(it) else bulk$args
  if (local && length(argsList)) {
    # One walk over all of them: a list too small to hold anything worth
    # sharing is passed over at once, instead of one walk per iteration.
    argsList <- share_walk(argsList, state)
  }
  if (local) warn_fallback(state)
  if (verbose) {
    cat(sprintf("pageshare: %d task(s) on %d worker(s); %d value(s) shared\n",
                length(argsList), length(cl), length(unique_views(state$views))))
  }

  # Every message to the workers is serialized inside the handle scope, so
  # views cross as handles. exportenv and argsList keep the views (and thus
  # the segments) alive until the loop has finished.
  results <- with_pool_health(with_handles_if(local, {
    if (opt$preschedule) {
      if (verbose) cat(sprintf("bundling all tasks into %d chunk(s)\n", min(length(cl), length(argsList))))
      chunks <- if (length(argsList)) {
        lapply(parallel::splitIndices(length(argsList), min(length(cl), length(argsList))),
               function(i) argsList[i])
      } else list()
      res <- if (length(chunks)) {
        parallel::clusterApply(cl[seq_along(chunks)], chunks, worker_stub("doshm_worker_chunk"), body, exportenv,
                               pkgname, packages, opt$attachExportEnv)
      } else list()
      bad <- Filter(function(r) inherits(r, "doshm_init_error"), res)
      if (length(bad)) pageshare_stop("worker_init", bad[[1L]]$message)
      do.call(c, res)
    } else {
      if (verbose && opt$attachExportEnv) cat("attaching export environment\n")
      init <- parallel::clusterCall(cl, worker_stub("doshm_worker_init"), body, exportenv, pkgname, packages,
                                    opt$attachExportEnv)
      msgs <- unlist(init)
      if (length(msgs)) pageshare_stop("worker_init", msgs[1L])
      chunks <- iteration_chunks(length(argsList), length(cl), opt)
      if (verbose) cat(sprintf("%d iteration(s) in %d task(s)\n", length(argsList), length(chunks)))
      res <- if (length(chunks)) {
        parallel::clusterApplyLB(cl, lapply(chunks, function(i) argsList[i]),
                                 worker_stub("doshm_worker_eval_chunk"))
      } else list()   # (clusterApplyLB() of nothing is NULL)
      parallel::clusterCall(cl, worker_stub("doshm_worker_done"))
      do.call(c, res)
    }
  }), cl, is.null(data$cluster), function(i) "tasks of a foreach loop")

  if (is.null(bulk$args)) {
    tryCatch(accumulator(results, seq_along(results)), error = report_combine_error)
    combined <- list(error = foreach::getErrorValue(it), error_index = foreach::getErrorIndex(it))
  } else {
    combined <- combine_in_bulk(results, bulk, obj$errorHandling)
  }
  if (identical(obj$errorHandling, "stop") && !is.null(combined$error)) {
    msg <- sprintf("task %d failed - \"%s\"", combined$error_index, conditionMessage(combined$error))
    stop(simpleError(msg, call = expr))
  }
  if (is.null(bulk$args)) foreach::getResult(it) else combined$result
}

# ---- Worker side (these run in the workers' pageshare namespace) ----

doshm_state <- new.env(parent = emptyenv())

# Parent for the export environment: the global environment, or the namespace
# of the package whose code runs the loop.
doshm_parent <- function(pkgname) {
  if (is.null(pkgname)) return(globalenv())
  tryCatch(asNamespace(pkgname), error = function(e) globalenv())
}

doshm_setup <- function(exportenv, pkgname, packages, attach) {
  parent.env(exportenv) <- doshm_parent(pkgname)
  if (attach) {
    while ("exportEnv" %in% search()) detach("exportEnv", character.only = TRUE)
    attach(exportenv, name = "exportEnv", warn.conflicts = FALSE)
  }
  for (p in packages) {
    ok <- tryCatch({
      suppressPackageStartupMessages(library(p, character.only = TRUE))
      NULL
    }, error = function(e) conditionMessage(e))
    if (!is.null(ok)) return(ok)
  }
  NULL
}

doshm_worker_init <- function(expr, exportenv, pkgname, packages, attach) {
  doshm_state$expr <- expr
  doshm_state$env <- exportenv
  doshm_state$attached <- attach
  doshm_setup(exportenv, pkgname, packages, attach)
}

# Evaluate the loop body for each iteration of a chunk; an iteration that
# fails gives its error condition as its result. One tryCatch() serves the
# iterations up to the next error (instead of one per iteration, which would
# cost more than a tiny body): after an error the loop resumes with the next
# iteration, so each is evaluated exactly once.
doshm_run_chunk <- function(chunk, expr, env) {
  out <- vector("list", length(chunk))
  k <- 0L
  while (k < length(chunk)) {
    k <- tryCatch({
      while (k < length(chunk)) {
        k <- k + 1L
        args <- chunk[[k]]
        for (nm in names(args)) assign(nm, args[[nm]], envir = env)
        out[k] <- list(eval(expr, envir = env))
      }
      k
    }, error = function(e) {
      out[k] <<- list(e)
      k
    })
  }
  out
}

doshm_worker_eval_chunk <- function(chunk) {
  doshm_run_chunk(chunk, doshm_state$expr, doshm_state$env)
}

# Drop the loop's state so that the worker holds no view after the loop.
doshm_worker_done <- function() {
  if (isTRUE(doshm_state$attached)) {
    while ("exportEnv" %in% search()) detach("exportEnv", character.only = TRUE)
  }
  rm(list = ls(doshm_state, all.names = TRUE), envir = doshm_state)
  NULL
}

doshm_worker_chunk <- function(chunk, expr, exportenv, pkgname, packages, attach) {
  on.exit(if (attach) while ("exportEnv" %in% search()) detach("exportEnv", character.only = TRUE))
  msg <- doshm_setup(exportenv, pkgname, packages, attach)
  if (!is.null(msg)) return(structure(list(message = msg), class = "doshm_init_error"))
  doshm_run_chunk(chunk, expr, exportenv)
}
