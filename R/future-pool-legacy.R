# plan(shm_multisession) on future < 1.40 (1.31-1.3x): futures run on
# pageshare's own pool there too. Those versions have no FutureBackend API:
# the plan function makes each future (future's run() calls it with the
# future's expression, globals and options), and the future's class brings
# the methods that launch it and read its result. shm_multisession() makes a
# MultiprocessFuture of class "ShmPoolFuture":
#
#   master: run() below: a slot no other future of the plan holds, large
#           globals swapped for views (sharing-rule.R), the expression
#           future's getExpression() makes for a multisession worker, sent
#           as one message of the pool with the globals' values;
#   worker: future_pool_evaluate_expr(): the globals assigned in the global
#           environment (as multisession assigns them), the expression
#           evaluated there; a large value shared and handed over;
#           immediate conditions (progressr) go to the master at once;
#   master: resolved() / result() are those of future >= 1.40
#           (future-pool.R).
#
# The plan's workers stop when the plan changes: through the plan's
# "cleanup" (future 1.32-1.3x) or, on future 1.31, which has no such hook,
# after the top-level call that changed it (watch_future_pool()).

legacy_future <- function() !exists("launchFuture", envir = asNamespace("future"), inherits = FALSE)

# The registry of the plan's futures, which also gives future's
# nbrOfFreeWorkers() its count (it reads `attr(future$workers, "name")`).
legacy_pool_name <- function() sprintf("pageshare-pool-%d", Sys.getpid())

# The plan's `workers`, checked by check_future_workers() when the plan is
# set (`fresh`) or the value changes, else as checked before: the plan
# function runs for every future, and neither the count of cores nor a
# warning belongs there.
legacy_checked_workers <- function(workers, fresh) {
  seen <- shm_pool$legacy_workers
  if (!fresh && !is.null(seen) && identical(seen$given, workers)) return(seen$n)
  n <- check_future_workers(workers)
  shm_pool$legacy_workers <- list(given = workers, n = n)
  n
}

shm_pool_future_legacy <- function(..., workers, lazy, envir, rscript_libs, rscript_args, fresh = FALSE) {
  # A plan set anew (`fresh`: future's test future) starts fresh workers, as
  # multisession's cluster does: nothing a worker loaded or left for itself
  # (a package's once-per-session warning, an option) carries over.
  if (fresh && identical(shm_pool$future_owner, "future < 1.40")) stop_legacy_future_pool()
  # (each plan set anew is a plan of its own: its fallback warning comes once)
  if (fresh || is.null(shm_pool$legacy_plan)) shm_pool$legacy_plan <- (shm_pool$legacy_plan %||% 0) + 1
  future_pool_ensure(workers, rscript_libs, rscript_args)
  shm_pool$future_owner <- "future < 1.40"
  f <- future_export("MultiprocessFuture")(..., envir = envir, lazy = TRUE)
  f[["workers"]] <- structure(as.integer(workers), name = legacy_pool_name())
  f[["node"]] <- NA_integer_
  f[["pageshare_reg"]] <- sprintf("workers-%s", legacy_pool_name())
  class(f) <- c("ShmPoolFuture", class(f))
  if (!lazy) f <- future::run(f)
  f
}

run.ShmPoolFuture <- function(future, ...) {
  if (!identical(future[["state"]], "created")) {
    stop(future::FutureError(sprintf("A future ('%s') can only be launched once.", future[["label"]] %||% "<none>"),
                             future = future))
  }
  quiet <- future_pool_quiet()
  on.exit(future_pool_quiet(quiet), add = TRUE)
  reg <- future[["pageshare_reg"]]
  slot <- future_pool_slot(future[["workers"]], reg)
  orig <- future[["globals"]]
  launch <- prepare_pool_launch(future, paste(reg, shm_pool$legacy_plan))
  on.exit(launch(), add = TRUE)
  # (what is still serialized meets the user's future.globals.maxSize, as
  # under multisession: globals-limit.R)
  check_serialized_size(orig, structure(future[["globals"]], pageshare_changed = attr(launch, "changed")),
                        future[["expr"]])
  # (immediateConditions: future records those relayed as signalled, so that
  # value() does not signal them again)
  expr <- future::getExpression(future, expr = relay_immediate_expr(future[["expr"]]), mc.cores = 1L,
                                immediateConditions = TRUE)
  # (the values only: a Globals object carries the environments they came from)
  globals <- future[["globals"]]
  values <- unclass(globals)
  attributes(values) <- list(names = names(globals))
  threshold <- if (share_results_enabled()) share_threshold() else Inf
  msg <- list(op = "call", FUN = future_pool_stub_legacy(), args = list(expr, values, threshold), threshold = Inf)
  values <- globals <- NULL
  future_pool_send(future, msg, launch, slot, reg)
}

# nbrOfWorkers() and nbrOfFreeWorkers() of the plan function (future < 1.40
# dispatches them on its class): the plan's `workers`, less the futures
# launched and not yet collected (as multisession counts: a finished future
# holds its worker until its result is read).
nbrOfWorkers.shm_multisession <- function(evaluator) {
  workers <- eval(formals(evaluator)$workers, baseenv())
  if (is.function(workers)) workers <- workers()
  # (a count the plan would refuse is an error here too, as multisession's)
  if (!is_whole_count(workers) || workers > 4096) pageshare_stop("pool_size", "workers", describe_value(workers))
  as.integer(workers)
}

nbrOfFreeWorkers.shm_multisession <- function(evaluator, background = FALSE, ...) {
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  used <- length(FutureRegistry(sprintf("workers-%s", legacy_pool_name()), action = "list", earlySignal = FALSE))
  max(0L, nbrOfWorkers.shm_multisession(evaluator) - used)
}

# The future's expression with its immediate conditions (progressr's
# updates) sent to the master as they are signalled, then muffled: the
# master signals each once while it waits (pool_on_condition()), as
# multisession's workers send them on their socket.
relay_immediate_expr <- function(expr) {
  classes <- getOption("future.relay.immediate", "immediateCondition")
  handlers <- rep(list(quote(pageshare:::future_pool_relay_muffle)), length(classes))
  names(handlers) <- classes
  as.call(c(list(quote(base::withCallingHandlers), expr), handlers))
}

future_pool_relay_muffle <- function(cond) {
  future_pool_relay(cond)
  for (r in computeRestarts(cond)) {
    name <- r$name
    if (is.character(name) && startsWith(name, "muffle")) invokeRestart(r)
  }
}

# The function a future's message calls on its worker (see future_pool_stub()).
future_pool_stub_legacy <- function() {
  f <- stubs[["future_pool_evaluate_expr"]]
  if (is.null(f)) {
    f <- eval(quote(function(expr, globals, threshold) pageshare:::future_pool_evaluate_expr(expr, globals, threshold)),
              globalenv())
    stubs[["future_pool_evaluate_expr"]] <- f
  }
  f
}

# Runs on a worker: the globals where multisession puts them, then the
# expression future made for the future.
future_pool_evaluate_expr <- function(expr, globals, threshold) {
  future_pool_run(function() {
    genv <- globalenv()
    if (length(globals)) list2env(globals, envir = genv)
    eval(expr, envir = genv)
  }, threshold)
}

# The pool of a plan of future < 1.40 stops once shm_multisession is no
# longer the plan: future 1.32-1.3x call the plan's "cleanup" (future-plan.R),
# future 1.31 calls nothing of ours, so this runs after every top-level call
# (pageshare's task callback).
stop_legacy_future_pool <- function() {
  if (!identical(shm_pool$future_owner, "future < 1.40")) return(invisible())
  shm_pool$future_owner <- NULL
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  reg <- sprintf("workers-%s", legacy_pool_name())
  for (f in FutureRegistry(reg, action = "list", earlySignal = FALSE)) {
    if (identical(f[["state"]], "running")) f[["state"]] <- "interrupted"
  }
  FutureRegistry(reg, action = "reset")
  shm_pool$future_slots <- NULL
  stop_workers()
  invisible()
}

watch_future_pool <- function() {
  if (identical(shm_pool$future_owner, "future < 1.40") && !plan_is_shm_multisession()) stop_legacy_future_pool()
  invisible()
}
