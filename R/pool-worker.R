# The worker's side of pageshare's pool (R/pool.R). A worker is
# `Rscript -e 'pageshare:::pool_worker_main()'`, started by its master with
# the pool's address and secret in its environment. It connects (from then
# on it ends with its master, also in the middle of a task), then runs
# messages until the pool stops.
#
# A message is a serialized list with `op`:
#   "call"   FUN(args...), once;
#   "loop"   a task of a foreach loop (doshm-tasks.R);
#   "chunk"  FUN over X[from:to] of map `map`; the first chunk of a map that
#            a worker gets also carries the map itself (`stage`: FUN, X, dots
#            and seed, serialized once for all workers), which the worker
#            keeps until the next map.
# A message reaches this loop as a named list (TASK_FIELDS in
# src/rust/pageshare-pool/src/wire.rs): `tag` (its number), `payload`, and
# three flags: `release`, the master holds every result this worker handed
# over before, so their segments can be let go; `plain`, a call with no handle inside (see plain_call() in R/pool.R),
# in the wire's own message (`PlainCall` in src/rust/pageshare-pool/src/wire.rs),
# run without R code on the way (entry_pool_plain.rs); `scan`, the master let
# go of segments since this worker's last message, so views of them may be
# stale; and `shared`, the value of a plain call run on the way whose result
# is worth sharing (else NULL).
# Every message carries `threshold`, the master's size from which a result
# travels as shared data.
# The reply is a serialized list(status = "ok", value) or
# list(status = "error", index, condition); a plain call's reply may instead
# be its value in the wire's own encoding (a flag of the reply says so). A
# reply whose task wrote to its standard output or signalled conditions
# carries them at its head (`Relay` in wire.rs, added in Rust).

pool_worker_main <- function() {
  # (attached, as on the workers of a cluster passed to registerDoShm(): loop
  # bodies call pageshare's functions without `pageshare::`)
  suppressPackageStartupMessages(library("pageshare", character.only = TRUE))
  .Call(ps_pool_worker_connect)
  become_receiver()
  maps <- new.env(parent = emptyenv())
  # (set-up code of shm_everywhere() that failed here fails every task)
  setup_error <- pool_worker_startup(maps)
  serve <- function() {
    repeat {
      # (plain calls are run and answered in Rust while no earlier message left
      # state to let go of; the first message it leaves is run here)
      msg <- .Call(ps_pool_worker_serve, is.null(setup_error) && pool_worker_clean(maps))
      if (is.null(msg)) return(TRUE)
      reply <- if (!is.null(setup_error)) {
        pool_error_reply(NA_integer_, setup_error)
      } else if (!is.null(msg$shared)) {
        pool_worker_shared_reply(msg$shared)
      } else if (msg$plain) {
        pool_worker_plain(msg$payload, msg$release, msg$scan, maps)
      } else {
        pool_worker_run(msg$payload, msg$release, msg$scan, maps)
      }
      if (!pool_worker_reply(msg$tag, reply)) return(TRUE)
    }
  }
  # One handler for many messages (setting one up per message would cost
  # more than a small task): after an error it is set up again. The error is
  # the reply to the message being run (the last one received). The other
  # conditions of a task go to the caller as future relays them (see
  # pool_worker_condition()).
  repeat {
    done <- tryCatch(withCallingHandlers(serve(), condition = pool_worker_condition), error = function(e) {
      .Call(ps_task_state, FALSE)
      !pool_worker_reply(.Call(ps_pool_worker_running), pool_error_reply(NA_integer_, e))
    })
    if (done) break
  }
  invisible()
}

# May the next plain calls run without R code? Not while an earlier message left a
# map's data, a foreach loop's state or an open handle scope (see
# pool_worker_begin() and pool_worker_forget()).
pool_worker_clean <- function(maps) {
  is.null(maps$id) && is.null(doshm_state$loop) && !isTRUE(worker_scope_open$open)
}

# A condition that the running task signalled and that no handler of its own
# took: an error is the task's reply (the handler around the worker's loop);
# a condition meant to be seen at once (class "immediateCondition", as
# progressr's updates) goes to the master now; any other (a message, a
# warning, a condition of its own class) is kept for the task's reply, with
# what the task wrote to its standard output (src/rust/pageshare-r/src/relay.rs),
# and muffled here. The caller signals it again when it reads the reply
# (relay_emit() in R/pool-state.R).
pool_worker_condition <- function(cond) {
  if (inherits(cond, "error") || inherits(cond, "interrupt")) return(invisible())
  if (inherits(cond, "immediateCondition")) {
    return(pool_worker_relay(.Call(ps_pool_worker_running), cond))
  }
  kept <- .Call(ps_pool_worker_keep_condition, cond, pool_relay_condition_bytes)
  if (is.na(kept)) {
    # (a call that holds large values, such as the arguments of a call made
    # with do.call(): the condition goes without its call)
    cond$call <- NULL
    kept <- .Call(ps_pool_worker_keep_condition, cond, Inf)
  }
  if (isTRUE(kept)) pool_worker_muffle(cond)
  invisible()
}

# The most bytes a relayed condition takes with its call (see
# pool_worker_condition()).
pool_relay_condition_bytes <- 65536

pool_worker_muffle <- function(cond) {
  for (name in c("muffleProgression", "muffleMessage", "muffleWarning", "muffleCondition")) {
    restart <- findRestart(name, cond)
    if (!is.null(restart)) invokeRestart(restart)
  }
}

# Sends a condition the running task signalled (an "immediateCondition", as
# future calls those it relays at once: progressr's progress updates) to the
# master, which signals it again in the caller (pool_on_condition()); here it
# is then muffled. One that cannot be serialized stays here.
pool_worker_relay <- function(tag, cond) {
  # (a future's condition that future's handler relayed already: future-pool.R)
  if (!is.null(future_relayed$cond) && identical(future_relayed$cond, cond)) {
    future_relayed$cond <- NULL
    return(invisible())
  }
  bytes <- tryCatch(serialize(cond, NULL, xdr = FALSE), error = function(e) NULL)
  if (is.null(bytes)) return(invisible())
  .Call(ps_pool_worker_reply, tag, bytes, FALSE, TRUE)
  pool_worker_muffle(cond)
}

# Sends a reply; FALSE when the pool is stopping. A reply holds handles only
# while this worker's handle scope is open (see worker_result()): else it is
# plain, and the master reads it in one step.
pool_worker_reply <- function(tag, reply) {
  isTRUE(.Call(ps_pool_worker_reply, tag, reply, !isTRUE(worker_scope_open$open), FALSE))
}

# Before a message: the handle scope of the previous reply is closed, and
# with `release` the segments handed over with earlier replies are let go.
pool_worker_begin <- function(release) {
  if (isTRUE(worker_scope_open$open)) {
    .Call(ps_scope, -1L)
    worker_scope_open$open <- FALSE
  }
  if (release) .Call(ps_release_handoffs)
}

# What earlier messages left (a map's data, a foreach loop's state) goes when
# a message does not continue it (`op` "chunk" of the same map or "loop" of
# the same foreach loop, not `starting` a new one), before the views of
# segments released since are collected.
pool_worker_forget <- function(maps, op = "call", starting = TRUE) {
  if (!is.null(maps$id) && (op != "chunk" || starting)) {
    for (k in c("id", "run", "X", "seed")) maps[[k]] <- NULL
  }
  if (!is.null(doshm_state$loop) && (op != "loop" || starting)) doshm_forget()
}

# A plain call (no handle inside: see plain_call() in R/pool.R), run in one
# step (entry_pool_plain.rs); a value worth sharing is shared here.
pool_worker_plain <- function(payload, release, scan, maps) {
  pool_worker_begin(release)
  pool_worker_forget(maps)
  collect_stale_views(scan)
  out <- .Call(ps_pool_run_plain, payload)
  if (is.raw(out)) out else pool_worker_shared_reply(out)
}

# The reply to a plain call whose value holds data worth sharing
# (ps_pool_run_plain()'s list(value, threshold)), shared here.
pool_worker_shared_reply <- function(out) {
  pool_ok_reply(worker_result(list(value = out[[1L]], visible = TRUE), out[[2L]]))
}

pool_worker_run <- function(payload, release, scan, maps) {
  pool_worker_begin(release)
  .Call(ps_task_state, TRUE)
  on.exit(.Call(ps_task_state, FALSE))
  msg <- unserialize(payload)
  pool_worker_forget(maps, msg$op, !is.null(msg$stage) || !is.null(msg$task$setup))
  collect_stale_views(scan)
  switch(msg$op,
         call = pool_worker_call(msg),
         chunk = pool_worker_chunk(msg, maps),
         loop = pool_worker_loop(msg),
         pool_error_reply(NA_integer_, simpleError(sprintf("unknown message '%s'", msg$op))))
}

pool_worker_call <- function(msg) {
  # (quote: the arguments are values, evaluated on the master; a symbol or a
  # call among them is data, not code to run here)
  pool_ok_reply(worker_result(withVisible(do.call(msg$FUN, msg$args, quote = TRUE)), msg$threshold))
}

pool_worker_chunk <- function(msg, maps) {
  if (!is.null(msg$stage)) {
    stage <- unserialize(msg$stage)
    maps$id <- msg$map
    maps$run <- pool_runner(stage$FUN, stage$dots)
    maps$X <- stage$X
    maps$seed <- stage$seed
  } else if (!identical(maps$id, msg$map)) {
    # (this worker let go of the map for a message that came between its
    # chunks: the master sends the chunk again, with the map)
    return(serialize(list(status = "needs_stage"), NULL, xdr = FALSE))
  }
  run <- maps$run
  X <- maps$X
  seed <- maps$seed
  from <- msg$from
  to <- msg$to
  out <- vector("list", to - from + 1)
  # One handler for the whole chunk (one per element would cost more than a
  # cheap element): the first error ends the chunk, and `i` names it.
  i <- from
  # The rate of FUN, timed with Sys.time() (microseconds; proc.time() counts
  # milliseconds): in a worker's first chunk of a map, from its second
  # element on (the first call of a closure compiles it).
  timed_from <- if (!is.null(msg$stage) && to > from) from + 1 else from
  started <- NULL
  failed <- tryCatch({
    genv <- globalenv()
    for (i in seq.int(from, to)) {
      if (i == timed_from) started <- Sys.time()
      if (!is.null(seed)) assign(".Random.seed", .Call(ps_rng_stream, seed, i), envir = genv)
      r <- run(X[[i]])
      if (!is.null(r)) out[[i - from + 1]] <- r
    }
    NULL
  }, error = function(e) e)
  if (!is.null(failed)) return(pool_error_reply(i, failed))
  rate <- (as.numeric(Sys.time()) - as.numeric(started)) / (to - timed_from + 1)
  pool_ok_reply(worker_result(list(value = out, visible = TRUE), msg$threshold), rate)
}

pool_worker_loop <- function(msg) {
  res <- doshm_worker_task(msg$task)
  errors <- attr(res, "errors")
  attr(res, "errors") <- NULL
  pool_ok_reply(worker_result(list(value = list(values = res, errors = errors), visible = TRUE), msg$threshold))
}

# FUN(x, <dots>) as a function of x alone (the dots bound once per map).
pool_runner <- function(FUN, dots) {
  if (!length(dots)) return(FUN)
  force(FUN)
  do.call(function(...) function(x) FUN(x, ...), dots, quote = TRUE)
}

pool_ok_reply <- function(value, rate = NULL) {
  serialize(list(status = "ok", value = value, rate = rate), NULL, xdr = FALSE)
}

pool_error_reply <- function(index, cond) {
  # (a condition that cannot be serialized is sent as a simple error with its message)
  tryCatch(serialize(list(status = "error", index = index, condition = cond), NULL, xdr = FALSE),
           error = function(e) serialize(list(status = "error", index = index,
                                              condition = simpleError(conditionMessage(cond))), NULL, xdr = FALSE))
}
