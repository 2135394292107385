# The master's side of pageshare's pool (R/pool.R): its state, starting and
# stopping it, sending messages and handling what comes back (replies, dead
# workers, interrupts). The transport itself is Rust (src/rust/pageshare-pool,
# entry points in src/rust/pageshare-r/src/entry_pool.rs).

# shm_pool holds the master's view of the pool: $pids (one per slot),
# $generation (a new one per start: tasks of an earlier pool are lost),
# $inflight (tasks sent per slot), $queue (messages not yet sent: at most
# `pool_depth` tasks wait in a worker's ring, so that a worker blocked on a
# full result ring can never block the master on a full task ring),
# $pending (per slot, what to do with the replies to come, in the order the
# messages were sent: a worker answers them in that order), $next_tag.

shm_pool <- new.env(parent = emptyenv())

# How many tasks may wait for one worker at a time (one running, one ready).
pool_depth <- 2L

# Bytes of each ring, each way: small messages inline; larger ones stream.
pool_ring_bytes <- 262144

# How long the master spins for a reply before it sleeps (a wake-up from
# sleep costs tens of microseconds).
pool_spin_microseconds <- 50

# How long new workers may take to start R, load pageshare and connect: a
# minute, and a second more per worker (a hundred workers start on a few
# cores at once).
pool_connect_seconds <- function(n) 60 + n

pool_worker_count <- function(n, arg) {
  if (is.null(n)) n <- pageshare_option("pageshare.workers")
  if (is.null(n)) return(default_worker_count())
  if (!is_whole_count(n) || n > 4096) pageshare_stop("pool_size", arg, describe_value(n))
  as.integer(n)
}

pool_start <- function(n) {
  pool_stop()
  rscript <- file.path(R.home("bin"), "Rscript")
  args <- worker_heap_args(c("--no-echo", "--no-restore", "-e", "pageshare:::pool_worker_main()"))
  libs <- paste(.libPaths(), collapse = .Platform$path.sep)
  pids <- .Call(ps_pool_start, n, rscript, args, "R_LIBS", libs, pool_ring_bytes,
                pool_connect_seconds(n))
  shm_pool$pids <- pids
  shm_pool$cores <- default_cores()
  shm_pool$generation <- (shm_pool$generation %||% 0) + 1
  shm_pool$inflight <- integer(n)
  shm_pool$queue <- new_fifo()
  shm_pool$pending <- lapply(seq_len(n), function(i) new_fifo())
  shm_pool$next_tag <- shm_pool$next_tag %||% 0
  invisible(pids)
}

pool_stop <- function() {
  was <- .Call(ps_pool_stop)
  shm_pool$pids <- NULL
  shm_pool$generation <- (shm_pool$generation %||% 0) + 1
  shm_pool$pending <- NULL
  shm_pool$queue <- new_fifo()
  invisible(was)
}

# The first `n` slots of the pool, started (or restarted larger) as needed.
pool_slots <- function(n) {
  if (length(shm_pool$pids) < n) pool_start(n) else pool_fill_vacancies()
  seq_len(n)
}

# Do the front doors without a cluster of the user's run on this pool?
# Option pageshare.pool = "psock" selects the PSOCK pool instead (the path
# before this pool, kept for comparison).
use_own_pool <- function() !identical(pageshare_option("pageshare.pool"), "psock")

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

pool_next_tag <- function() {
  shm_pool$next_tag <- shm_pool$next_tag + 1
  shm_pool$next_tag
}

# Sends a message now if a worker has room, else queues it. `what` says what
# to do with the reply: list(kind = "call", task) or list(kind = "job", job,
# info) (see pool_drive()).
pool_submit <- function(tag, payload, what, slot = NULL) {
  what$generation <- shm_pool$generation
  if (!is.null(what$task)) what$task$generation <- shm_pool$generation
  if (is.null(slot)) {
    slot <- pool_free_slot(length(payload))
    if (is.na(slot)) {
      shm_pool$queue$push(list(tag = tag, payload = payload, what = what))
      return(invisible(FALSE))
    }
  }
  pool_send(slot, tag, payload, what)
  invisible(TRUE)
}

pool_send <- function(slot, tag, payload, what) {
  for (attempt in 1:2) {
    # (nothing of this worker's is still on its way: it may let go of what it handed over)
    release <- shm_pool$inflight[slot] == 0L
    status <- .Call(ps_pool_send, slot, tag, payload, release, isTRUE(what$plain))
    if (status == 0L) {
      what$tag <- tag
      # (a task a dead worker never began is sent again: see pool_on_death())
      if (identical(what$kind, "call")) what$payload <- payload
      shm_pool$pending[[slot]]$push(what)
      shm_pool$inflight[slot] <- shm_pool$inflight[slot] + 1L
      return(invisible())
    }
    if (status == 2L) pool_interrupted()
    # The worker is gone (it died while idle, or with tasks): the replies it
    # sent before it died are taken, then its death (see pool_on_death()),
    # and this message goes to the new worker in its slot.
    while (!is.na(shm_pool$pids[slot])) pool_wait_event()
    pool_fill_vacancies()
  }
  pageshare_stop("pool_worker_died", shm_pool$pids[slot], sprintf("task %.0f", tag), "a worker just started")
}

# Waits for the next event of the pool and handles it.
pool_wait_event <- function(timeout = NA_real_) {
  # The master spins for a reply only while a core is free for it: with as
  # many busy workers as cores, its spinning would slow them down.
  spin <- if (sum(shm_pool$inflight > 0L) < shm_pool$cores) pool_spin_microseconds else 0
  ev <- .Call(ps_pool_receive, timeout, spin)
  switch(ev[[1L]] + 1L,
         pool_on_reply(ev[[2L]], ev[[3L]], ev[[4L]], ev[[5L]]),
         pool_on_death(ev[[2L]], ev[[4L]]),
         pool_interrupted(),
         NULL)
  invisible(ev[[1L]])
}

pool_on_reply <- function(slot, tag, payload, plain) {
  what <- shm_pool$pending[[slot]]$pop()
  if (!identical(what$tag, tag)) pageshare_stop("pool_out_of_step", slot, format(tag), format(what$tag))
  shm_pool$inflight[slot] <- shm_pool$inflight[slot] - 1L
  if (plain) {
    # A plain reply (no handle inside) is read in one step; should that fail
    # (no memory), its task fails and the error goes on to the caller.
    read <- FALSE
    on.exit({
      if (!read) pool_deliver(what, list(status = "error", index = NA_integer_,
                                         condition = simpleError("its reply could not be read")))
      pool_dispatch_queue()
    })
    reply <- .Call(ps_unserialize, payload)
    read <- TRUE
  } else {
    on.exit(pool_dispatch_queue())
    # (a reply that cannot be read, e.g. a handle of a worker that died since,
    # is its task's error; the segments of a value the worker handed over are
    # taken over now: the worker may let go of them with its next message)
    reply <- tryCatch({
      r <- unserialize(payload)
      if (identical(r$status, "ok")) r$value <- reply_value(r)
      r
    }, error = function(e) list(status = "error", index = NA_integer_, condition = e))
  }
  pool_deliver(what, reply)
}

pool_deliver <- function(what, reply) {
  if (identical(what$kind, "call")) {
    what$task$reply <- reply
  } else {
    job_reply(what$job, what$info, reply)
  }
}

# A worker died: its slot is emptied (a new worker takes it when the pool is
# next used, see pool_fill_vacancies()); the messages it never began go out
# again, and the tasks it was running fail naming its pid. One that died
# running nothing (killed while idle, or by the out-of-memory killer) is named
# in a warning.
pool_on_death <- function(slot, pid) {
  force(pid)   # (the caller may pass shm_pool$pids[slot], changed below)
  unread <- .Call(ps_pool_vacate, slot)
  # (the slot stays empty until the pool is next used, so that the error
  # reaches the caller without waiting for a new R to start)
  shm_pool$pids[slot] <- NA_integer_
  shm_pool$inflight[slot] <- 0L
  begun <- FALSE
  again <- list()
  for (what in shm_pool$pending[[slot]]$drain()) {
    if (what$tag %in% unread) {
      if (identical(what$kind, "call")) {
        again[[length(again) + 1L]] <- list(tag = what$tag, payload = what$payload, what = what)
      } else {
        job_requeue(what$job, what$info)
      }
      next
    }
    begun <- TRUE
    pool_deliver(what, list(status = "died", pid = pid))
  }
  for (q in rev(again)) shm_pool$queue$push(q, front = TRUE)
  if (!begun) pageshare_warn("pool_worker_replaced", pid)
  pool_dispatch_queue()
}

pool_dispatch_queue <- function() {
  while (shm_pool$queue$size()) {
    slot <- pool_free_slot(length(shm_pool$queue$peek()$payload))
    if (is.na(slot)) break
    q <- shm_pool$queue$pop()
    pool_send(slot, q$tag, q$payload, q$what)
  }
}

# The least busy slot among `slots` with a live worker and room for a message
# of `bytes`, or NA. (Empty slots, whose workers died, are filled only when
# none is live.)
pool_free_slot <- function(bytes, slots = NULL) {
  # (the messages each slot's worker has, NA for an empty slot or one not in `slots`)
  load <- shm_pool$inflight
  load[is.na(shm_pool$pids)] <- NA_integer_
  if (!is.null(slots)) load[-slots] <- NA_integer_
  slot <- which.min(load)
  if (!length(slot)) {
    pool_fill_vacancies()
    load <- shm_pool$inflight
    if (!is.null(slots)) load[-slots] <- NA_integer_
    slot <- which.min(load)
  }
  if (load[slot] < if (pool_fits_busy(bytes)) pool_depth else 1L) slot else NA_integer_
}

# Can a message of `bytes` go to a worker that is busy? Only if it fits its
# ring beside the other one waiting there: a larger message streams through
# the ring as the worker reads, and a busy worker reads only after it has sent
# its reply, which the master, still sending, would never read.
pool_fits_busy <- function(bytes) bytes <= pool_ring_bytes / 4

# The user interrupted a wait: the workers' tasks are abandoned (the pool is
# restarted, so no late reply can be mistaken for a later task's), then R's
# interrupt is raised as Ctrl-C raises it.
pool_interrupted <- function() {
  n <- length(shm_pool$pids)
  pool_stop()
  if (n) tryCatch(pool_start(n), error = function(e) NULL)
  signalCondition(structure(class = c("interrupt", "condition"), list(message = "", call = NULL)))
  invokeRestart("abort")
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

# A first-in first-out queue: list(push, pop, peek, size, drain). Push and pop
# take constant time: the items live in the function's own frame, changed in
# place by `<<-` (a list held in an environment is copied by every change of
# one of its elements, and rm() of a binding takes microseconds).
new_fifo <- function() {
  items <- vector("list", 8L)
  head <- 1L   # the next to pop
  tail <- 0L   # the last pushed
  compact <- function() {
    live <- if (tail >= head) items[head:tail] else list()
    items <<- c(live, vector("list", max(8L, length(live))))
    tail <<- length(live)
    head <<- 1L
  }
  list(
    push = function(x, front = FALSE) {
      if (front) {
        if (head == 1L) {
          items <<- c(list(NULL), items)
          tail <<- tail + 1L
        } else {
          head <<- head - 1L
        }
        items[head] <<- list(x)
      } else {
        if (tail == length(items)) compact()
        tail <<- tail + 1L
        items[tail] <<- list(x)
      }
      invisible()
    },
    pop = function() {
      x <- items[[head]]
      items[head] <<- list(NULL)
      head <<- head + 1L
      x
    },
    peek = function() items[[head]],
    size = function() tail - head + 1L,
    drain = function() {
      out <- if (tail >= head) items[head:tail] else list()
      items <<- vector("list", 8L)
      head <<- 1L
      tail <<- 0L
      out
    })
}
