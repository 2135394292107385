# plan(shm_multisession) on future >= 1.40: a FutureBackend whose futures run
# on pageshare's own pool (R/pool*.R), the pool shm_call(), shm_map(),
# registerDoShm() and memApply() use (one per session), sized by the plan's
# `workers`. As future.mirai and future.callr do, the worker evaluates each
# future with future's own evaluator (future:::evalFuture()), so standard
# output, conditions, immediate conditions (progressr), RNG checks and
# globals stay future's; the future travels as one message of the pool:
#
#   master: launchFuture()  large globals swapped for views (sharing-rule.R),
#           future's getFutureData() serialized inside the handle scope, sent
#           to a worker that runs no other future of this plan;
#   worker: future_pool_evaluate(): evalFuture(), then a large value is
#           shared and handed over (worker_result() in future-results.R);
#           immediate conditions go to the master at once (future_pool_relay());
#   master: resolved() / result() read the pool's events; the FutureResult
#           arrives with the worker's segments adopted (reply_value()).
#
# A worker that dies mid-future: its slot is refilled by the pool at the next
# launch, the future fails with future's FutureInterruptError, as
# multisession's does on future >= 1.40. plan() changes call stopWorkers(),
# which stops the pool. future < 1.40 has no backend API: its futures run on
# the pool through their own run() method (future-pool-legacy.R), with
# resolved() and result() below.

# ---- the backend ------------------------------------------------------------

# Arguments of future's backend constructors that the plan may carry
# (tweak(shm_multisession, gc = TRUE), ...); others (makeClusterPSOCK()'s
# options beyond rscript_libs and rscript_args) have no meaning for the pool.
future_pool_backend_args <- c("earlySignal", "gc", "maxSizeOfObjects", "interrupts", "hooks",
                              "wait.timeout", "wait.interval", "wait.alpha")

shm_pool_future_backend <- function(workers, rscript_libs, rscript_args, ...) {
  args <- list(...)
  args <- args[intersect(names(args), future_pool_backend_args)]
  core <- do.call(future_export("MultiprocessFutureBackend"),
                  c(list(reg = sprintf("workers-pageshare-pool-%d", Sys.getpid()), workers = as.integer(workers)), args))
  core[["futureClasses"]] <- c("ShmPoolFuture", core[["futureClasses"]])
  class(core) <- c("ShmPoolFutureBackend", class(core))
  # (the pool starts now, as multisession's workers do when the plan is set)
  future_pool_ensure(workers, rscript_libs, rscript_args)
  shm_pool$future_owner <- core[["uuid"]]
  core
}

# The pool of the plan: `workers` workers started with the plan's
# rscript_libs and rscript_args (a pool of another size or options is
# restarted, without the set-up of shm_everywhere()); dead workers replaced.
future_pool_ensure <- function(workers, rscript_libs, rscript_args) {
  changed <- pool_set_worker_options(rscript_libs, rscript_args)
  if (changed || length(shm_pool$pids) != workers) {
    pool_forget_setup()
    pool_start(as.integer(workers))
  } else if (anyNA(shm_pool$pids)) {
    pool_fill_vacancies()
  }
  invisible()
}

launchFuture.ShmPoolFutureBackend <- function(backend, future, ...) {
  quiet <- future_pool_quiet()
  on.exit(future_pool_quiet(quiet), add = TRUE)
  reg <- backend[["reg"]]
  slot <- future_pool_slot(backend[["workers"]], reg)
  # (the fallback warning comes once per plan: sharing-rule.R)
  launch <- prepare_pool_launch(future, paste(reg, backend[["uuid"]]))
  on.exit(launch(), add = TRUE)
  getFutureData <- foreign_internal("future", "getFutureData")
  data <- getFutureData(future, mc.cores = 1L)
  threshold <- if (share_results_enabled()) share_threshold() else Inf
  msg <- list(op = "call", FUN = future_pool_stub(), args = list(data, threshold), threshold = Inf)
  data <- NULL
  future_pool_send(future, msg, launch, slot, reg)
}

# Sends a future's message `msg` to the worker in `slot` (inside the handle
# scope when `launch` swapped views in), puts its globals back (`launch()`),
# and records the future as running there, in `reg`, as future's own
# backends do. Both future APIs launch through it.
future_pool_send <- function(future, msg, launch, slot, reg) {
  payload <- if (isTRUE(attr(launch, "shared"))) {
    with_handles(serialize(msg, NULL, xdr = FALSE))
  } else {
    serialize(msg, NULL, xdr = FALSE)
  }
  launch()
  task <- new.env(parent = emptyenv())
  class(task) <- "pageshare_task"
  task$generation <- shm_pool$generation
  task$keep <- future[["pageshare_views"]]
  # (kept until the reply: should the worker die before it reads the
  # message, the message goes again to its successor, future_pool_resend())
  task$payload <- payload
  task$future <- TRUE
  future[["pageshare_task"]] <- task
  future[["node"]] <- slot
  future[["pageshare_pid"]] <- shm_pool$pids[slot]
  task$tag <- pool_submit(payload, task, slot = slot)
  held <- future_slots_held()
  held$slots <- c(held$slots, slot)
  future[["state"]] <- "running"
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  FutureRegistry(reg, action = "add", future = future, earlySignal = FALSE)
  future[["pageshare_registered"]] <- TRUE
  invisible(future)
}

# Futures replace a worker that died while idle without a word, as future's
# multisession does (from future 1.40 on it restarts such a worker
# silently); the pool's warning of it (pool_on_death()) is for its other
# doors. Set while a future operation reads the pool's events; returns the
# setting before, for on.exit().
future_pool_quiet <- function(quiet = TRUE) {
  before <- isTRUE(shm_pool$quiet_idle_deaths)
  shm_pool$quiet_idle_deaths <- quiet
  before
}

# The function a future's message calls on its worker: a tiny closure of the
# global environment that calls future_pool_evaluate() there (the
# byte-compiled function itself would be serialized into every message,
# 6.6 kB), made once.
future_pool_stub <- function() {
  f <- stubs[["future_pool_evaluate"]]
  if (is.null(f)) {
    f <- eval(quote(function(data, threshold) pageshare:::future_pool_evaluate(data, threshold)), globalenv())
    stubs[["future_pool_evaluate"]] <- f
  }
  f
}

# The pool slots that futures hold from their launch until their result is
# collected (as a multisession future holds its worker), for the pool's
# current generation: kept here rather than asked of future's registry at
# every launch (a tenth of a millisecond a call).
future_slots_held <- function() {
  held <- shm_pool$future_slots
  if (is.null(held) || !identical(held$generation, shm_pool$generation)) {
    held <- new.env(parent = emptyenv())
    held$generation <- shm_pool$generation
    held$slots <- integer()
    shm_pool$future_slots <- held
  }
  held
}

future_slot_release <- function(slot, generation) {
  held <- shm_pool$future_slots
  if (is.null(held) || !identical(held$generation, generation)) return(invisible())
  i <- match(slot, held$slots)
  if (!is.na(i)) held$slots <- held$slots[-i]
  invisible()
}

# The future's large globals swapped for views (sharing-rule.R) while
# getFutureData() reads them; returns the function that puts them back, with
# attributes "shared" and "changed" (the names of the globals swapped). The
# views stay in future$pageshare_views until its result is in.
prepare_pool_launch <- function(future, plan_key) {
  orig <- future[["globals"]]
  shared <- share_globals(orig, plan_key)
  if (is.null(shared)) return(structure(function() invisible(), shared = FALSE))
  future[["pageshare_views"]] <- attr(shared, "pageshare_views")
  restore <- attr(shared, "pageshare_restore")
  changed <- attr(shared, "pageshare_changed")
  for (a in c("pageshare_views", "pageshare_restore", "pageshare_changed")) attr(shared, a) <- NULL
  future[["globals"]] <- shared
  done <- FALSE
  undo <- function() {
    if (done) return(invisible())
    done <<- TRUE
    future[["globals"]] <- orig
    restore_shared(restore)
  }
  structure(undo, shared = TRUE, changed = changed)
}

# The pool slot for a new future: one no registered future of this plan runs
# on (so that n futures in flight run on n distinct workers), among the
# plan's `workers` first slots; waits, collecting finished futures, while
# every one is busy. Dead workers are replaced here.
future_pool_slot <- function(n, reg) {
  n <- as.integer(n)
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  repeat {
    if (is.null(shm_pool$pids)) pool_start(n) else if (anyNA(shm_pool$pids)) pool_fill_vacancies()
    slots <- seq_len(min(n, length(shm_pool$pids)))
    free <- slots[!slots %in% future_slots_held()$slots]
    if (length(free)) {
      slot <- pool_free_slot(0, free)
      return(if (is.na(slot)) free[[1L]] else slot)
    }
    FutureRegistry(reg, action = "collect-first", earlySignal = TRUE)
    if (length(future_slots_held()$slots) >= n) pool_wait_event(timeout = 0.5)
  }
}

# ---- the worker's side --------------------------------------------------------

# Runs on a worker: future's own evaluator; a value holding data worth
# sharing (at least `threshold` bytes) comes back through shared memory.
future_pool_evaluate <- function(data, threshold) {
  evalFuture <- foreign_internal("future", "evalFuture")
  future_pool_run(function() evalFuture(data), threshold)
}

# Runs `evaluate()` (it returns the future's FutureResult) on a worker; a
# value holding data worth sharing (at least `threshold` bytes) comes back
# through shared memory.
future_pool_run <- function(evaluate, threshold) {
  # What the future leaves in the worker's global environment goes with it
  # (multisession's workers are emptied before each future); what
  # shm_everywhere() set up there stays, for futures and calls alike.
  genv <- globalenv()
  before <- names(genv)
  on.exit({
    added <- setdiff(names(genv), c(before, ".Random.seed"))
    if (length(added)) rm(list = added, envir = genv)
  }, add = TRUE)
  res <- evaluate()
  if (!inherits(res, "FutureResult") || is.null(res[["value"]]) || !is.finite(threshold)) return(res)
  value <- worker_result(list(value = res[["value"]], visible = TRUE), threshold)
  if (inherits(value, "pageshare_result")) {
    res["value"] <- list(value$value)
    # (the master adopts the segments this worker handed over as it reads
    # the reply: reply_value() in pool-jobs.R)
    return(structure(list(value = res, pid = value$pid), class = "pageshare_result"))
  }
  res["value"] <- list(value)
  res
}

# Runs on a worker, as future's handler of immediate conditions (progressr's
# updates): the condition goes to the master at once, which signals it while
# it waits (pool_on_condition()); future records it as signaled.
future_pool_relay <- function(cond) {
  bytes <- tryCatch(serialize(cond, NULL, xdr = FALSE), error = function(e) NULL)
  if (!is.null(bytes)) .Call(ps_pool_worker_reply, .Call(ps_pool_worker_running), bytes, FALSE, TRUE)
  # (future muffles it next; one signalled without a muffle restart goes on to
  # the worker loop's own relay, pool_worker_main(), which must not send it again)
  future_relayed$cond <- cond
  TRUE
}
future_relayed <- new.env(parent = emptyenv())

getFutureBackendConfigs.ShmPoolFuture <- function(future, ...) {
  classes <- future[["conditions"]]
  if (is.null(classes)) return(list())
  immediate <- attr(classes, "immediateConditionClasses", exact = TRUE)
  if (is.null(immediate)) immediate <- "immediateCondition"
  if (!length(immediate)) return(list())
  handlers <- rep(list(future_pool_relay), length(immediate))
  names(handlers) <- immediate
  list(capture = list(immediateConditionHandlers = handlers))
}

# ---- resolved(), result() -------------------------------------------------------

resolved.ShmPoolFuture <- function(x, ...) {
  if (!identical(x[["state"]], "running") && !identical(x[["state"]], "canceled") ||
      !is.null(x[["result"]]) || is.null(x[["pageshare_task"]])) {
    return(NextMethod())
  }
  task <- x[["pageshare_task"]]
  if (is.null(task$reply)) {
    quiet <- future_pool_quiet()
    on.exit(future_pool_quiet(quiet), add = TRUE)
    tryCatch(pool_await(task, 0), pageshare_error = function(e) future_pool_lost(task, e))
    if (future_pool_unread(x)) future_pool_resend(x)
  }
  if (is.null(task$reply)) return(FALSE)
  future_pool_collect(x)
  NextMethod()
}

result.ShmPoolFuture <- function(future, ...) {
  res <- future[["result"]]
  if (is.null(res)) {
    quiet <- future_pool_quiet()
    on.exit(future_pool_quiet(quiet), add = TRUE)
    if (identical(future[["state"]], "created")) future <- future::run(future)
    task <- future[["pageshare_task"]]
    repeat {
      if (future_pool_unread(future)) future_pool_resend(future)
      if (!is.null(task$reply)) break
      if (!identical(task$generation, shm_pool$generation)) {
        future_pool_lost(task, NULL)
      } else if (identical(pool_wait_event(), "idle") && is.null(task$reply)) {
        future_pool_lost(task, NULL)
      }
    }
    future_pool_collect(future)
    res <- future[["result"]]
  }
  if (inherits(res, "FutureError")) stop(res)
  res
}

# Did the future's worker die before it read the future's message (a worker
# killed while idle, its death read only after the message was written)?
# Then the future has not begun: it goes to the worker that takes the slot,
# as multisession launches on a restarted worker. (A future cancelled
# meanwhile is not sent again: it fails as interrupted, future_pool_collect().)
future_pool_unread <- function(future) {
  task <- future[["pageshare_task"]]
  identical(task$reply$status, "unread") && identical(future[["state"]], "running") &&
    identical(task$generation, shm_pool$generation)
}

future_pool_resend <- function(future) {
  task <- future[["pageshare_task"]]
  tryCatch({
    pool_send_again(task, future[["node"]])
    future[["pageshare_pid"]] <- shm_pool$pids[future[["node"]]]
  }, pageshare_error = function(e) future_pool_lost(task, e))
  invisible()
}

# A task no message carries any more (its pool was stopped or restarted).
future_pool_lost <- function(task, cond) {
  task$reply <- list(status = "lost", condition = cond)
  invisible()
}

# The future's reply, in: its FutureResult (or error) stored as future stores
# it, the future out of the registry, its views let go of.
future_pool_collect <- function(future) {
  task <- future[["pageshare_task"]]
  reply <- task$reply
  task$keep <- NULL
  task$payload <- NULL
  future[["pageshare_views"]] <- NULL
  future_slot_release(future[["node"]], task$generation)
  if (isTRUE(future[["pageshare_registered"]])) {
    future[["pageshare_registered"]] <- FALSE
    # (one that stopWorkers() dropped from the registry since is not there)
    FutureRegistry <- foreign_internal("future", "FutureRegistry")
    on.exit(tryCatch(FutureRegistry(future_pool_registry(future), action = "remove", future = future, earlySignal = FALSE),
                     FutureError = function(e) NULL), add = TRUE)
  }
  status <- reply$status
  value <- reply$value
  if (identical(status, "ok") && inherits(value, "FutureResult")) {
    future[["result"]] <- value
    future[["state"]] <- "finished"
  } else if (identical(status, "ok") && inherits(value, "FutureError")) {
    # (evalFuture()'s own failure, a FutureLaunchError)
    future[["result"]] <- value
    future[["state"]] <- "failed"
  } else if (identical(status, "error") && inherits(reply$condition, "pageshare_error")) {
    # A handle the worker could not open: the future fails with that classed
    # error, as if its expression had raised it (the worker lives on), saying
    # what to do (as check_received_handles() says it on other workers).
    cond <- reply$condition
    key <- if (inherits(cond, "pageshare_permission")) "received_handle_denied" else "received_handle"
    cond$message <- sprintf(pageshare_messages[[key]], as.integer(future[["pageshare_pid"]]), 1L, conditionMessage(cond))
    future[["result"]] <- future::FutureResult(conditions = list(list(condition = cond, signaled = 0L)),
                                               uuid = future[["uuid"]])
    future[["state"]] <- "finished"
  } else if (status %in% c("died", "unread", "lost")) {
    state <- future[["state"]]
    pid <- reply$pid %||% future[["pageshare_pid"]]
    key <- if (state %in% c("canceled", "interrupted")) "future_worker_interrupted" else "future_worker_died"
    msg <- paste0(sprintf(pageshare_messages[[key]], future_label(future), class(future)[1], state, pid),
                  last_words_note(pid))
    ex <- future_interrupt_error(msg, future, canceled = identical(state, "canceled"))
    class(ex) <- c(class(ex)[1L], "pageshare_worker_died", class(ex)[-1L])
    future[["result"]] <- ex
    # (a canceled future stays canceled, as multisession's does)
    if (!identical(state, "canceled")) future[["state"]] <- "interrupted"
  } else {
    why <- if (inherits(reply$condition, "condition")) conditionMessage(reply$condition) else "an unexpected reply"
    future[["result"]] <- future::FutureError(sprintf(pageshare_messages$future_pool_failed, future_label(future), why),
                                              future = future)
    future[["state"]] <- "failed"
  }
  invisible(future)
}

# The error of a future whose worker was ended, of future's class for it as
# multisession raises it: a FutureCanceledError when cancel() ended it (on
# the versions of future that have it), else a FutureInterruptError; a
# FutureError on future < 1.40, which has neither.
future_interrupt_error <- function(msg, future, canceled) {
  error <- if (legacy_future()) {
    future::FutureError
  } else if (canceled && "FutureCanceledError" %in% getNamespaceExports("future")) {
    future_export("FutureCanceledError")
  } else {
    future_export("FutureInterruptError")
  }
  error(msg, future = future)
}

# The registry of the plan's futures (future's FutureRegistry): the
# backend's on future >= 1.40, the plan's own on future < 1.40.
future_pool_registry <- function(future) {
  future[["pageshare_reg"]] %||% future[["backend"]][["reg"]]
}

future_label <- function(future) {
  label <- future[["label"]]
  if (is.null(label)) "<none>" else sQuote(label, q = FALSE)
}

# ---- interrupts, workers ----------------------------------------------------------

# cancel(interrupt = TRUE): the worker running the future is ended (the pool
# starts another in its slot at the next launch); the future then fails with
# a FutureInterruptError.
interruptFuture.ShmPoolFutureBackend <- function(backend, future, ...) {
  if (!isTRUE(backend[["interrupts"]])) return(future)
  task <- future[["pageshare_task"]]
  pid <- future[["pageshare_pid"]]
  slot <- future[["node"]]
  if (identical(future[["state"]], "running") && !is.null(task) && is.null(task$reply) &&
      identical(task$generation, shm_pool$generation) && is_number(pid) &&
      identical(shm_pool$pids[slot], pid)) {
    tools::pskill(pid, tools::SIGKILL)
    # (the death is read now, so that the slot is free for the next launch)
    while (is.null(task$reply) && identical(task$generation, shm_pool$generation)) {
      if (identical(pool_wait_event(timeout = 5), "idle")) break
    }
  }
  future[["state"]] <- "interrupted"
  future
}

# plan() changes: the futures of this plan are dropped and the pool stopped
# (unless another plan has started its own pool since).
stopWorkers.ShmPoolFutureBackend <- function(backend, interrupt = TRUE, ...) {
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  reg <- backend[["reg"]]
  for (f in FutureRegistry(reg, action = "list", earlySignal = FALSE)) {
    if (interrupt && identical(f[["state"]], "running")) f[["state"]] <- "canceled"
  }
  FutureRegistry(reg, action = "reset")
  shm_pool$future_slots <- NULL
  if (identical(shm_pool$future_owner, backend[["uuid"]])) {
    shm_pool$future_owner <- NULL
    stop_workers()
  }
  TRUE
}

nbrOfWorkers.ShmPoolFutureBackend <- function(evaluator) {
  as.integer(evaluator[["workers"]])
}

# The plan's workers less its futures that have not been collected (as
# multisession counts: a finished future holds its worker until its result
# is read).
nbrOfFreeWorkers.ShmPoolFutureBackend <- function(evaluator, background = FALSE, ...) {
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  used <- length(FutureRegistry(evaluator[["reg"]], action = "list", earlySignal = FALSE))
  max(0L, as.integer(evaluator[["workers"]]) - used)
}

# The methods above, registered in future's namespace: a future's own on
# every version (run() on future < 1.40, future-pool-legacy.R), the
# backend's on future >= 1.40.
register_future_pool_methods <- function(ns) {
  for (m in c("resolved", "result")) {
    registerS3method(m, "ShmPoolFuture", get(paste0(m, ".ShmPoolFuture")), envir = ns)
  }
  if (legacy_future()) {
    registerS3method("run", "ShmPoolFuture", run.ShmPoolFuture, envir = ns)
    for (m in c("nbrOfWorkers", "nbrOfFreeWorkers")) {
      registerS3method(m, "shm_multisession", get(paste0(m, ".shm_multisession")), envir = ns)
    }
    return(invisible())
  }
  for (m in c("launchFuture", "interruptFuture", "stopWorkers", "nbrOfWorkers", "nbrOfFreeWorkers")) {
    registerS3method(m, "ShmPoolFutureBackend", get(paste0(m, ".ShmPoolFutureBackend")), envir = ns)
  }
  registerS3method("validateFutureGlobals", "ShmPoolFutureBackend",
                   validateFutureGlobals.ShmPoolFutureBackend, envir = ns)
  registerS3method("getFutureBackendConfigs", "ShmPoolFuture", getFutureBackendConfigs.ShmPoolFuture, envir = ns)
  invisible()
}
