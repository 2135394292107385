# How a foreach loop's iterations travel to the workers and run there.
#
# A task is a slice of the iteration columns (see rows_to_columns() in
# doshm-bulk.R) with the loop's id. The first task a worker receives in a loop
# also carries the loop's setup (body, export environment, packages), which the
# worker keeps for the loop's later tasks; any other task (of a later loop, a
# future, memApply()) makes it forget them. A loop thus costs one round of
# messages, like parLapply(), instead of set-up and clean-up rounds around it.

loop_counter <- new.env(parent = emptyenv())
loop_counter$n <- 0
loop_counter$session <- NULL

# A counter, with this session's pid and start time (a pool's worker could
# outlive a reloaded pageshare, whose counter starts again).
new_loop_id <- function() {
  if (is.null(loop_counter$session)) loop_counter$session <- c(Sys.getpid(), as.numeric(Sys.time()))
  loop_counter$n <- loop_counter$n + 1
  c(loop_counter$session, loop_counter$n)
}

# Whether the loop body contains a loop of its own: only then is compiling it
# worth its cost (the workers' JIT would otherwise compile such a loop anew in
# every iteration; the rest of a body runs as fast uncompiled).
has_loop <- function(expr) any(c("for", "while", "repeat") %in% all.names(expr))

# foreach gives the functions it exports the export environment as theirs (so
# that they see the other exported variables), and R's JIT does not compile a
# closure whose environment is not a top-level one: such a function would run
# uncompiled in every iteration, several times slower than the same function
# called by shm_map(). Those with a loop (the rule that chooses to compile the
# body) are compiled here, on the master, while the export environment has the
# parent it will have on the workers (`parent`), so that the compiler resolves
# base functions as there.
#
# Compiling takes milliseconds, and giving a compiled closure another
# environment makes it interpreted again, so a compiled function is kept with
# an environment of its own, empty, whose parent is the loop's export
# environment: the same function exported again (beside variables of the same
# names, under the same parent) reuses it and only that parent changes. Lookups
# from the function go through the export environment as foreach's do.
compiled_exports <- new.env(parent = emptyenv())
compiled_exports$entries <- list()
compiled_exports_kept <- 16L

# Returns a function that detaches the kept functions from `exportenv` (so that
# the cache holds no view of the loop once it has ended).
compile_exported_functions <- function(exportenv, parent) {
  old_parent <- parent.env(exportenv)
  parent.env(exportenv) <- parent
  on.exit(parent.env(exportenv) <- old_parent)
  names <- sort(ls(exportenv, all.names = TRUE))
  used <- list()
  for (sym in names) {
    if (identical(sym, "...")) next
    f <- get(sym, envir = exportenv, inherits = FALSE)
    if (typeof(f) != "closure" || !identical(environment(f), exportenv)) next
    if (!is.language(body(f)) || !has_loop(body(f))) next
    key <- list(formals(f), body(f), parent, names)
    entry <- NULL
    for (e in compiled_exports$entries) {
      if (identical(e$key, key)) { entry <- e; break }
    }
    if (is.null(entry)) {
      own <- new.env(parent = exportenv)
      environment(f) <- own
      compiled <- tryCatch(compiler::cmpfun(f, options = list(suppressAll = TRUE)),
                           error = function(e) NULL)
      if (is.null(compiled)) next
      entry <- list(key = key, compiled = compiled, own = own)
      kept <- c(list(entry), compiled_exports$entries)
      compiled_exports$entries <- kept[seq_len(min(length(kept), compiled_exports_kept))]
    }
    parent.env(entry$own) <- exportenv
    assign(sym, entry$compiled, envir = exportenv)
    used[[length(used) + 1L]] <- entry$own
  }
  function() for (own in used) parent.env(own) <- emptyenv()
}

# Functions that, called at a body's top level, see the context eval() makes
# for it (return() ends it, sys.call() and parent.frame() describe it). A body
# that names none of them is evaluated without that context (ps_run_iterations,
# in src/rust/pageshare-r/src/run_iterations.rs), which is what makes a tiny iteration cheap; the others go
# through eval() as foreach's own backends do.
context_functions <- c("return", "on.exit", "sys.call", "sys.calls", "sys.function", "sys.frame",
                       "sys.frames", "sys.nframe", "sys.parent", "sys.parents", "sys.on.exit",
                       "sys.status", "parent.frame", "eval.parent", "match.call", "match.arg",
                       "nargs", "missing", "Recall", "browser", "break", "next")

evaluates_directly <- function(expr) !any(context_functions %in% all.names(expr))

# Run `chunks` (consecutive iteration indices, in order) of `columns` on `cl`:
# list(values = the results of all iterations in order, errors = the indices of
# those that are errors, as foreach's accumulator tells them apart).
# Balanced: tasks go to workers as they become free, and parallel's
# clusterApplyLB() sends the first task of each worker first, so the setup
# travels in those; a worker that gets a later task
# without having the setup (if that order ever changed) says so and the task
# is sent again with it. Not balanced: one task per worker, each with the
# setup (doParallel's preschedule).
run_loop_tasks <- function(cl, columns, chunks, setup, balance = TRUE) {
  if (!length(chunks)) return(list(values = list(), errors = integer()))
  loop <- new_loop_id()
  make_task <- function(i, with_setup) {
    list(loop = loop, setup = if (with_setup) setup, columns = slice_columns(columns, chunks[[i]]))
  }
  stub <- worker_stub("doshm_worker_task", keep_loop = TRUE)
  p <- min(length(cl), length(chunks))
  tasks <- lapply(seq_along(chunks), function(i) make_task(i, i <= p))
  res <- if (balance) parallel::clusterApplyLB(cl, tasks, stub)
         else parallel::clusterApply(cl[seq_len(p)], tasks, stub)
  resignal_remote_errors(res)
  again <- which(vapply(res, inherits, NA, "doshm_needs_setup"))
  if (length(again)) {
    res[again] <- parallel::clusterApplyLB(cl, lapply(again, make_task, with_setup = TRUE), stub)
    resignal_remote_errors(res[again])
  }
  failed <- Filter(function(r) inherits(r, "doshm_init_error"), res)
  if (length(failed)) pageshare_stop("worker_init", failed[[1L]]$message)
  errors <- unlist(lapply(seq_along(res), function(i) chunks[[i]][attr(res[[i]], "errors")]))
  list(values = do.call(c, res), errors = as.integer(errors))   # (c() drops the attribute)
}

# The same on pageshare's own pool (R/pool.R), using the workers in `slots`:
# tasks go to workers as they become free, the first task each worker gets
# carries the setup. What the tasks wrote and signalled is relayed here in
# the order of the chunks (`relay`: list(stdout, conditions), see
# relay_emit()).
run_loop_tasks_on_pool <- function(slots, columns, chunks, setup,
                                   relay = list(stdout = TRUE, conditions = "condition")) {
  if (!length(chunks)) return(list(values = list(), errors = integer()))
  loop <- new_loop_id()
  threshold <- share_threshold()
  res <- vector("list", length(chunks))
  relays <- vector("list", length(chunks))
  done <- 0L
  redo <- integer()   # chunks a dead worker never began
  job <- new_job(slots = slots, next_item = function(slot, first) {
    if (length(redo)) {
      i <- redo[1L]
      redo <<- redo[-1L]
    } else {
      if (done >= length(chunks)) return(NULL)
      done <<- done + 1L
      i <- done
    }
    task <- list(loop = loop, setup = if (first) setup, columns = slice_columns(columns, chunks[[i]]))
    list(payload = serialize(list(op = "loop", task = task, threshold = threshold), NULL, xdr = FALSE),
         info = list(chunk = i, pid = shm_pool$pids[slot]))
  }, requeue = function(sent) {
    redo <<- c(redo, sent$chunk)
  }, on_reply = function(sent, reply) {
    if (!is.null(reply$relay)) relays[[sent$chunk]] <<- c(relays[[sent$chunk]], list(reply$relay))
    if (identical(reply$status, "error")) {
      job$failure <- list(kind = "error", condition = reply$condition)
      return(invisible())
    }
    value <- reply$value
    if (inherits(value$values, "doshm_needs_setup")) {
      # (the worker lost the loop: its next task carries the setup again)
      job$seen <- setdiff(job$seen, sent$pid)
      redo <<- c(redo, sent$chunk)
      return(invisible())
    }
    res[[sent$chunk]] <<- structure(value$values, errors = value$errors)
  })
  pool_drive(job)
  for (r in relays) for (one in r) relay_emit(one, relay$stdout, relay$conditions)
  f <- job$failure
  if (identical(f$kind, "died")) pageshare_stop("pool_worker_died", f$pid, "a task", "a foreach loop")
  if (!is.null(f)) pageshare_stop("worker_init", conditionMessage(f$condition))
  failed <- Filter(function(r) inherits(r, "doshm_init_error"), res)
  if (length(failed)) pageshare_stop("worker_init", failed[[1L]]$message)
  errors <- unlist(lapply(seq_along(res), function(i) chunks[[i]][attr(res[[i]], "errors")]))
  list(values = do.call(c, res), errors = as.integer(errors))
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
  if (attach) attach(exportenv, name = "exportEnv", warn.conflicts = FALSE)
  for (p in packages) {
    ok <- tryCatch({
      suppressPackageStartupMessages(library(p, character.only = TRUE))
      NULL
    }, error = function(e) conditionMessage(e))
    if (!is.null(ok)) return(ok)
  }
  NULL
}

# Drop the state of the last loop (and its attached export environment), so
# that the worker holds no view of it and later tasks do not see it.
doshm_forget <- function() {
  if (isTRUE(doshm_state$attached)) {
    while ("exportEnv" %in% search()) detach("exportEnv", character.only = TRUE)
  }
  rm(list = ls(doshm_state, all.names = TRUE), envir = doshm_state)
  invisible()
}

doshm_worker_task <- function(task) {
  if (!is.null(task$setup)) {
    doshm_forget()
    collect_stale_views()   # (the views the forgotten loop held)
    s <- task$setup
    msg <- doshm_setup(s$exportenv, s$pkgname, s$packages, s$attach)
    if (!is.null(msg)) return(structure(list(message = msg), class = "doshm_init_error"))
    doshm_state$loop <- task$loop
    doshm_state$expr <- s$expr
    doshm_state$env <- s$exportenv
    doshm_state$attached <- s$attach
    doshm_state$direct <- isTRUE(s$direct)
  } else if (!identical(doshm_state$loop, task$loop)) {
    return(structure(list(), class = "doshm_needs_setup"))
  }
  doshm_run_chunk(task$columns, doshm_state$expr, doshm_state$env, doshm_state$direct)
}

# Evaluate the loop body for each iteration of a chunk; an iteration that
# fails gives its error condition as its result and the others go on, so each
# is evaluated exactly once. The indices of the results that are errors
# (raised, or returned by the body) are attribute "errors". `direct` (see
# evaluates_directly()): the iterations run in Rust (run_iterations.rs),
# which writes their results into `out` and their kinds into `kinds` (0 a
# value, 1 an error returned, 2 an error raised, 3 running); else in R with
# eval(). Either way one tryCatch() serves the iterations up to the next
# error (one per iteration would cost more than a tiny body).
doshm_run_chunk <- function(columns, expr, env, direct = FALSE) {
  if (direct && length(columns)) {
    n <- length(columns[[1L]])
    out <- vector("list", n)
    kinds <- integer(n)
    k <- 0L
    while (k < n) {
      k <- tryCatch(.Call(ps_run_iterations, columns, expr, env, out, kinds, k), error = function(e) {
        failed <- match(3L, kinds)
        if (is.na(failed)) stop(e)
        out[failed] <<- list(e)
        kinds[failed] <<- 2L
        failed
      })
    }
    errors <- which(kinds > 0L)
    # An error raised at the body's top level names the call eval() would
    # have, whichever way the body was evaluated.
    for (k in which(kinds == 2L)) {
      if (is_handler_call(conditionCall(out[[k]]))) {
        out[[k]]$call <- quote(eval(expr, env))
      }
    }
    attr(out, "errors") <- errors
    return(out)
  }
  n <- iteration_count(columns)
  nms <- names(columns)
  vars <- seq_along(columns)
  out <- vector("list", n)
  errors <- integer()
  k <- 0L
  while (k < n) {
    k <- tryCatch({
      while (k < n) {
        k <- k + 1L
        for (j in vars) env[[nms[[j]]]] <- columns[[j]][[k]]
        value <- eval(expr, env)
        if (!is.null(value)) {
          out[[k]] <- value   # (out holds NULL already)
          if (is.object(value) && inherits(value, "error")) errors[[length(errors) + 1L]] <- k
        }
      }
      k
    }, error = function(e) {
      out[k] <<- list(e)
      errors[[length(errors) + 1L]] <<- k
      k
    })
  }
  attr(out, "errors") <- errors
  out
}

# The call of the frame in which tryCatch() evaluates its expression (what an
# error raised directly in C-evaluated code names).
is_handler_call <- function(call) {
  is.call(call) && identical(call[[1L]], as.name("doTryCatch"))
}
