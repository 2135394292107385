# The master's side of pageshare's pool (R/pool.R): its state, starting and
# stopping it, sending messages and handling what comes back (replies, dead
# workers, interrupts). The transport and the bookkeeping of messages (which
# worker has which, which wait for room) are Rust (src/rust/pageshare-pool,
# entry points in src/rust/pageshare-r/src/entry_pool*.rs).

# shm_pool holds the master's view of the pool: $pids (one per slot, NA for
# a slot whose worker died, filled again when the pool is next used),
# $generation (a new one per start: tasks of an earlier pool are lost),
# $next_map (the number of the last map).

shm_pool <- new.env(parent = emptyenv())

# How many messages a worker has at a time (one running, one ready): a worker
# blocked on a full result ring can then never block the master on a full
# task ring. Further messages wait their turn.
pool_depth <- 2L

# Bytes of each ring, each way: small messages inline; larger ones stream.
pool_ring_bytes <- 262144

# How long the master spins for a reply before it sleeps (a wake-up from
# sleep costs tens of microseconds); it spins only while fewer workers than
# cores are busy. Long enough to cover a call whose both ends run R code
# (sharing an argument, a reply with a view): shorter, each end would sleep
# and be woken once per call, which costs more time and more CPU than the
# spinning (inst/benchmarks/bench-pool.R, vector section).
pool_spin_microseconds <- 150

# How long new workers may take to start R, load pageshare and connect: a
# minute, and a second more per worker (a hundred workers start on a few
# cores at once).
pool_connect_seconds <- function(n) 60 + n

pool_worker_count <- function(n, arg) {
  if (is.null(n)) {
    n <- pageshare_option("pageshare.workers")
    arg <- "pageshare.workers"
  }
  if (is.null(n)) return(default_worker_count())
  if (!is_whole_count(n) || n > 4096) pageshare_stop("pool_size", arg, describe_value(n))
  check_local_workers(as.integer(n), arg, asis = inherits(n, "AsIs"))
  as.integer(n)
}

# The workers' library paths and further Rscript options are this session's
# .libPaths() and none, unless plan(shm_multisession) set them
# (`rscript_libs`, `rscript_args`; pool_set_worker_options()): then they hold
# for every start of this pool, also restarts after an interrupt and workers
# that replace dead ones, until stop_workers().
pool_start <- function(n) {
  pool_stop()
  rscript <- file.path(R.home("bin"), "Rscript")
  args <- worker_heap_args(c(shm_pool$rscript_args, "--no-echo", "--no-restore", "-e", "pageshare:::pool_worker_main()"))
  libs <- paste(shm_pool$rscript_libs %||% .libPaths(), collapse = .Platform$path.sep)
  limits <- as.numeric(c(pool_depth, default_cores(), pool_spin_microseconds))
  # (PAGESHARE_POOL_SETUP: the set-up calls a worker runs first, see pool_keep_setup())
  pids <- .Call(ps_pool_start, n, rscript, args, c("R_LIBS", "TMPDIR", "PAGESHARE_POOL_SETUP"),
                c(libs, pool_worker_tmpdir(), pool_setup_file()),
                pool_ring_bytes, pool_connect_seconds(n), limits)
  shm_pool$pids <- pids
  shm_pool$generation <- (shm_pool$generation %||% 0) + 1
  shm_pool$next_map <- shm_pool$next_map %||% 0
  invisible(pids)
}

# Where the workers make their R temporary directories: inside this session's,
# so that one of a worker killed before it could remove its own (kill -9, the
# OOM killer) goes when this session ends.
pool_worker_tmpdir <- function() {
  dir <- file.path(tempdir(), "pool-workers")
  dir.create(dir, showWarnings = FALSE, mode = "0700")
  dir
}

pool_stop <- function() {
  was <- .Call(ps_pool_stop)
  shm_pool$pids <- NULL
  shm_pool$generation <- (shm_pool$generation %||% 0) + 1
  invisible(was)
}

# Sets the worker options of pool_start() (NULL: the defaults); TRUE when
# they differ from those the running pool (if any) was started with.
pool_set_worker_options <- function(rscript_libs = NULL, rscript_args = NULL) {
  libs <- if (is.null(rscript_libs)) NULL else unique(rscript_libs[rscript_libs != "*"])
  changed <- !identical(libs, shm_pool$rscript_libs) || !identical(rscript_args, shm_pool$rscript_args)
  shm_pool$rscript_libs <- libs
  shm_pool$rscript_args <- rscript_args
  changed
}

# The first `n` slots of the pool, started (or restarted larger) as needed.
pool_slots <- function(n) {
  if (length(shm_pool$pids) < n) pool_start(n) else pool_fill_vacancies()
  seq_len(n)
}

# Process ids of the pool's workers (integer(0) when no pool runs).
pool_pids <- function() .Call(ps_pool_pids)

# Stops the pool when R exits (its workers would end with this process
# anyway; this ends them in order). Called from .onLoad: a finalizer
# registered while the package is built would not survive into the installed
# namespace.
arm_pool_finalizer <- function() {
  reg.finalizer(shm_pool, function(e) tryCatch(pool_stop(), error = function(e) NULL), onexit = TRUE)
  invisible()
}

pool_ensure <- function() {
  pids <- shm_pool$pids
  if (is.null(pids)) pool_start(pool_worker_count(NULL, "pageshare.workers")) else if (anyNA(pids)) pool_fill_vacancies()
  invisible()
}

# Starts workers in the slots whose workers died (see pool_on_death()).
pool_fill_vacancies <- function() {
  for (slot in which(is.na(shm_pool$pids))) shm_pool$pids[slot] <- .Call(ps_pool_fill, slot)
  invisible()
}

# Sends `payload` (`plain`: it holds no handle) to the worker in `slot`, or
# (slot NA) to the least busy worker with room, else it waits its turn (then
# it goes to another worker should its worker die before reading it; one
# sent to a slot is "unread" then, pool_on_death()). `what` says what to do
# with the reply: the task of a call (an environment), or list(job, info)
# (see pool_drive()). Returns its tag.
pool_submit <- function(payload, what, plain = FALSE, slot = NA_integer_) {
  for (attempt in 1:2) {
    tag <- .Call(ps_pool_submit, slot, payload, plain, what)
    if (tag > 0) return(tag)
    if (tag == -2) pool_interrupted()
    # The worker is gone (it died while idle, or with tasks): the replies it
    # sent before it died are taken, then its death (see pool_on_death()),
    # and this message goes to the new worker in its slot.
    while (!is.na(shm_pool$pids[slot])) pool_wait_event(idle = TRUE)
    pool_fill_vacancies()
  }
  pageshare_stop("pool_worker_died", shm_pool$pids[slot], "a message", "a worker just started")
}

# Messages for every worker, one each (set-up code, checks of each worker):
# the message of each slot goes to the worker in that slot, and should that
# worker die before reading it, to the worker that takes the slot next (not
# to another slot's worker, which has its own); see pool_await_each().
# Returns the tasks, in slot order.
pool_submit_each <- function(payload, keep = NULL) {
  lapply(seq_along(shm_pool$pids), function(slot) {
    task <- new.env(parent = emptyenv())
    class(task) <- "pageshare_task"
    task$generation <- shm_pool$generation
    task$keep <- keep
    task$slot <- slot
    # (kept until the reply: pool_on_death() says "unread" of a message that
    # a task keeps and its worker never read)
    task$payload <- payload
    task$pid <- shm_pool$pids[slot]
    task$tag <- pool_submit(payload, task, slot = slot)
    task
  })
}

# Waits until every task of pool_submit_each() has its reply (read it with
# shm_value()), sending a message its worker died before reading to the
# slot's next worker. Returns the tasks.
pool_await_each <- function(tasks) {
  for (task in tasks) {
    repeat {
      pool_wait_reply(task)
      if (!identical(task$reply$status, "unread")) break
      pool_send_again(task, task$slot)
      task$pid <- shm_pool$pids[task$slot]
    }
    task$payload <- NULL
  }
  tasks
}

# Sends the message a task keeps (`task$payload`) again, to the worker now in
# `slot`: the one it went to died before reading it.
pool_send_again <- function(task, slot) {
  task$reply <- NULL
  if (anyNA(shm_pool$pids)) pool_fill_vacancies()
  task$tag <- pool_submit(task$payload, task, slot = slot)
  invisible(task)
}

# Waits until `task` has its reply; a task of a pool stopped since, or one
# that no message carries any more, is an error (pool_lost_task()).
pool_wait_reply <- function(task) {
  while (is.null(task$reply)) {
    if (!identical(task$generation, shm_pool$generation) || identical(pool_wait_event(), "idle")) {
      pool_lost_task(task)
    }
  }
  invisible(task)
}

# Waits for the next event of the pool and handles it; returns its name (see
# `Event` in src/rust/pageshare-pool/src/wire.rs, and event_to_r in
# entry_pool_messages.rs; "delivered": a plain reply read and delivered on the
# way, see entry_pool_plain.rs): "idle" when no message is out (unless `idle`,
# which waits for a death).
pool_wait_event <- function(timeout = NA_real_, idle = FALSE) {
  pool_on_event(.Call(ps_pool_next_event_delivered, timeout, idle))
}

# Handles an event as ps_pool_next_event_delivered gives it (a named list:
# its name in `event`, its fields by name); returns its name.
pool_on_event <- function(ev) {
  switch(ev$event,
         reply = pool_on_reply(ev$what, ev$payload, ev$plain, ev$value, ev$relay),
         died = pool_on_death(ev$slot, ev$pid, ev$begun, ev$unread, ev$waiting, ev$damaged, ev$last_words),
         interrupted = pool_interrupted(),
         out_of_step = pageshare_stop("pool_out_of_step", ev$slot, format(ev$tag), format(ev$expected)),
         condition = pool_on_condition(ev$payload),
         timed_out = , idle = , delivered = NULL,
         pageshare_stop("pool_unknown_event", format(ev$event)))
  ev$event
}

# A condition a worker's task signalled (see pool_worker_relay()), signalled
# again here, in the caller, while it waits: a progressr handler around the
# call sees the update now; a message or warning is shown as R shows its own.
pool_on_condition <- function(payload) {
  cond <- tryCatch(unserialize(payload), error = function(e) NULL)
  if (!inherits(cond, "condition")) return(invisible())
  pool_signal(cond)
}

# Signals `cond` (a condition of a task) here as the task signalled it: a
# message or a warning is shown as R shows its own unless a handler muffles
# it; any other condition reaches the handlers around the caller.
pool_signal <- function(cond) {
  withRestarts({
    if (inherits(cond, "message")) {
      message(cond)
    } else if (inherits(cond, "warning")) {
      warning(cond)
    } else {
      signalCondition(cond)
    }
  }, muffleProgression = function(...) NULL, muffleCondition = function(...) NULL)
  invisible()
}

# A reply's payload: R's serialization of the reply, or, with `value`, the
# task's value in the wire's own encoding (see wire.rs). `relay`: NULL, or
# what the task wrote to its standard output and the conditions it signalled
# (list(stdout, conditions)), kept in the reply as `relay` for the door that
# reads it (relay_emit()).
pool_on_reply <- function(what, payload, plain, value = FALSE, relay = NULL) {
  if (plain) {
    # A plain reply (no handle inside) is read in one step; should that fail
    # (no memory), its task fails and the error goes on to the caller.
    read <- FALSE
    on.exit(if (!read) pool_deliver(what, pool_unreadable_reply))
    reply <- .Call(ps_pool_read_reply, payload, value)
    read <- TRUE
  } else {
    # (the messages waiting go once this reply is read: see entry_pool_messages.rs)
    on.exit(.Call(ps_pool_dispatch))
    # A reply that cannot be read (e.g. a handle of a worker that died since)
    # is its task's error; the segments of a value the worker handed over are
    # taken over now: the worker may let go of them with its next message.
    reply <- tryCatch({
      r <- unserialize(payload)
      if (identical(r$status, "ok")) r$value <- reply_value(r)
      r
    }, error = function(e) list(status = "error", index = NA_integer_, condition = e))
  }
  if (!is.null(relay)) reply$relay <- relay
  pool_deliver(what, reply)
}

# Emits a task's relay (see pool_on_reply()) in the caller, as future's
# value() does: first its standard output (when `stdout`), then its
# conditions of the classes `conditions`, in the order the task signalled
# them.
relay_emit <- function(relay, stdout = TRUE, conditions = "condition") {
  if (is.null(relay)) return(invisible())
  if (isTRUE(stdout) && !is.null(relay$stdout)) cat(relay$stdout)
  if (length(conditions)) {
    for (cond in relay$conditions) if (inherits(cond, conditions)) pool_signal(cond)
  }
  invisible()
}

# The arguments of a door that say what of its tasks' output and conditions
# it relays (named as future's `stdout` and `conditions`, with the door's
# prefix): TRUE or FALSE, and NULL or a character vector of condition classes.
check_relay <- function(stdout, conditions, stdout_arg, conditions_arg) {
  check_flag(stdout, stdout_arg)
  if (!is.null(conditions)) check_strings(conditions, conditions_arg, "NULL or a character vector of condition classes")
  invisible()
}

# The reply of a message whose reply cannot be read (e.g. no memory for it).
pool_unreadable_reply <- list(status = "error", index = NA_integer_,
                              condition = simpleError("its reply could not be read"))

pool_deliver <- function(what, reply) {
  if (is.environment(what)) {
    what$reply <- reply
  } else {
    job_reply(what$job, what$info, reply)
  }
}

# The worker in `slot` died: its slot is emptied (a new worker takes it when
# the pool is next used, see pool_fill_vacancies(), so that the error reaches
# the caller without waiting for a new R to start). The messages it had begun
# fail naming its pid; of those it never began, calls for any worker wait
# again (in Rust), job items go back to their jobs, and messages for its slot
# are "unread" to their tasks. One that died running nothing (killed while
# idle, or by the out-of-memory killer) is named in a warning, except for
# futures (future_pool_quiet(), R/future-pool.R). Messages `waiting` with no
# live worker left get new workers now.
pool_on_death <- function(slot, pid, begun, unread, waiting, damaged = "", last_words = "") {
  shm_pool$pids[slot] <- NA_integer_
  # (what it wrote to its standard error before it died goes into every
  # message that reports its death: last_words_note())
  remember_last_words(pid, last_words)
  # (a worker the pool ended for writing what no worker writes: said once,
  # here; its tasks fail as a dead worker's do)
  if (nzchar(damaged)) pageshare_warn("pool_worker_damaged", pid, damaged)
  # (a message for its slot that it never read goes again to the slot's next
  # worker: future_pool_resend() in R/future-pool.R, pool_await_each())
  for (what in unread) {
    if (!is.environment(what)) {
      job_requeue(what$job, what$info)
    } else {
      pool_deliver(what, list(status = if (is.null(what$payload)) "died" else "unread", pid = pid))
    }
  }
  for (what in begun) pool_deliver(what, list(status = "died", pid = pid))
  cancelled <- pid %in% shm_pool$cancelled_pids   # (ended by shm_cancel())
  shm_pool$cancelled_pids <- setdiff(shm_pool$cancelled_pids, pid)
  if (!nzchar(damaged) && !length(begun) && !cancelled && !any(vapply(unread, function(w) isTRUE(w$future), NA)) &&
      !isTRUE(shm_pool$quiet_idle_deaths)) {
    pageshare_warn("pool_worker_replaced", pid)
  }
  if (waiting && all(is.na(shm_pool$pids))) pool_fill_vacancies()
}

# The least busy slot among `slots` (NULL: all) with a live worker and room
# for a message of `bytes`, or NA. (Empty slots, whose workers died, are
# filled only when none is live.)
pool_free_slot <- function(bytes, slots = NULL) {
  slot <- .Call(ps_pool_free_slot, bytes, slots)
  if (identical(slot, 0L)) {
    pool_fill_vacancies()
    slot <- .Call(ps_pool_free_slot, bytes, slots)
  }
  if (identical(slot, 0L)) NA_integer_ else slot
}

# The user interrupted a wait: the workers' tasks are abandoned (the pool is
# restarted, so no late reply can be mistaken for a later task's), then R's
# interrupt is raised as Ctrl-C raises it.
pool_interrupted <- function() {
  n <- length(shm_pool$pids)
  # (the tasks of this generation are lost to the interrupt, not to a dead
  # worker: shm_value() says so, see pool_lost_task())
  shm_pool$interrupted <- c(shm_pool$interrupted, shm_pool$generation)
  pool_stop()
  if (n) tryCatch(pool_start(n), error = function(e) NULL)
  signalCondition(structure(class = c("interrupt", "condition"), list(message = "", call = NULL)))
  invokeRestart("abort")
}

# The error of a task no message carries any more: its pool was restarted by
# an interrupt (pool_interrupted()), or stopped.
pool_lost_task <- function(task) {
  if (!is.null(task$generation) && task$generation %in% shm_pool$interrupted) {
    pageshare_stop("task_interrupted", format(task$tag))
  }
  pageshare_stop("task_lost", format(task$tag))
}

pool_task_failed <- function(what, cond) {
  task_failed_error(sprintf(pageshare_messages$pool_task_failed, what, conditionMessage(cond)), cond)
}

# A pageshare_task_failed error with message `msg` whose parent is FUN's own
# condition `cond`.
task_failed_error <- function(msg, cond) {
  stop(structure(class = c("pageshare_task_failed", "pageshare_error", "error", "condition"),
                 list(message = msg, call = NULL, parent = cond)))
}
