# The workers of a cluster the user passes (registerDoShm(cl),
# memApply(CLUSTER = cl)). The sessions' side: loading pageshare on them, the message a task is sent as,
# errors that keep their class across parallel's connections. The workers'
# side: what they do around each task (also on pageshare's pool, see
# pool-worker.R).

# Runs on a worker. Its environment is the global environment so that it can be
# unserialized by a worker that does not have pageshare (yet).
worker_load_pageshare <- function(paths) {
  err <- tryCatch({
    suppressPackageStartupMessages(
      library("pageshare", lib.loc = unique(c(.libPaths(), paths)), character.only = TRUE))
    ns <- asNamespace("pageshare")
    receive <- get0("become_receiver", envir = ns, inherits = FALSE)
    if (is.function(receive)) receive()
    ""
  }, error = function(e) conditionMessage(e))
  list(err = err, pid = Sys.getpid(), host = Sys.info()[["nodename"]])
}
environment(worker_load_pageshare) <- globalenv()

# Loads pageshare on every worker of `cl` (rule: a worker that receives a handle
# has pageshare loaded); a clear error names the worker that cannot load it.
load_on_workers <- function(cl) {
  res <- parallel::clusterCall(cl, worker_load_pageshare, .libPaths())
  bad <- which(vapply(res, function(r) nzchar(r$err), logical(1)))
  if (length(bad)) pageshare_stop("worker_load", bad[1L], res[[bad[1L]]]$err)
  list(pid = vapply(res, function(r) as.integer(r$pid), integer(1)),
       host = vapply(res, function(r) r$host, ""))
}

# Are all nodes of `cl` on this machine? Views may only travel as handles to
# processes that can map this machine's /dev/shm (DESIGN rule 2). Decided from
# the node's host field, without a round trip.
is_local_cluster <- function(cl) {
  here <- c("localhost", "127.0.0.1", "::1", Sys.info()[["nodename"]])
  all(vapply(cl, function(node) {
    h <- node$host
    is.null(h) || as.character(h)[1L] %in% here
  }, logical(1)))
}

# Evaluate `expr` inside the handle scope when the cluster is local, else plainly.
with_handles_if <- function(local, expr) {
  if (local) with_handles(expr) else expr
}

# 1..n in k runs of consecutive indices of nearly equal length, the same as
# parallel::splitIndices(n, k) (which takes longer than a tiny foreach loop).
split_range <- function(n, k) {
  if (n == 0L) return(list())
  if (k <= 1L || n == 1L) return(list(seq_len(n)))
  fuzz <- min((n - 1) / 1000, 0.4 * n / k)
  from <- 1 - fuzz
  to <- n + fuzz
  breaks <- c(from, from + seq_len(k - 1L) * ((to - from) / k), to)   # (as seq(from, to, length.out = k + 1))
  ends <- pmin(floor(breaks[-1L]), n)
  starts <- c(1, ends[-k] + 1)
  lapply(seq_len(k), function(j) if (ends[j] >= starts[j]) seq.int(starts[j], ends[j]) else integer())
}

`%||%` <- function(a, b) if (is.null(a)) b else a

# A tiny uncompiled closure (environment: the global environment) that calls
# pageshare's internal function `name` on the worker (after letting go of views
# of segments that were released since, see collect_stale_views(), and
# reporting handles it could not open, see task_begin()). Sending this instead of
# the byte-compiled function keeps small task messages small: a message larger
# than R's 4 KiB connection buffer is written in pieces, and on R 4.2's sockets
# (no TCP_NODELAY) the second piece waits ~40 ms for a delayed ACK.
worker_stub <- function(name, keep_loop = FALSE) {
  key <- paste(name, keep_loop)
  if (!is.null(stubs[[key]])) return(stubs[[key]])
  internal <- function(f) as.call(list(as.name(":::"), "pageshare", f))
  begin <- as.call(list(internal("task_begin_checked"), keep_loop))
  # (a pageshare error before the task, such as a handle the worker cannot
  # open, comes back as a value: parallel would keep only its message)
  check <- call("if", call("!", call("is.null", call("<-", as.name(".failed"), begin))),
                call("return", as.name(".failed")))
  end <- call("on.exit", as.call(list(internal("task_end"))))
  body <- as.call(list(as.name("{"), end, check, as.call(list(internal(name), as.name("...")))))
  f <- eval(call("function", as.pairlist(alist(... = )), body), globalenv())
  attr(f, "srcref") <- NULL
  stubs[[key]] <- f
  f
}
stubs <- new.env(parent = emptyenv())

# An idle R process does not collect garbage, so a worker keeps the views of
# its earlier tasks mapped; once their owner has released a segment, only those
# views keep its pages alive. Run at the start of every task a pageshare backend
# sends: a full collection when (and only when) a mapped segment is stale (a
# full collection for every task or future cost ~30 ms). Looking costs a
# check of each mapped segment's holder in /proc: the pool's workers look
# only when their master says it let go of segments since (`scan`).
collect_stale_views <- function(scan = TRUE) {
  if (scan && .Call(ps_mapped_stale) > 0L) invisible(gc(verbose = FALSE))
  check_received_handles()
  invisible()
}

# A worker of pageshare's backends (whose tasks arrive by unserialize() in a
# loop that an error would end) takes a handle it cannot open, outside a task,
# as an empty vector and remembers why; the task then fails with that classed
# error, reported to the master, and the worker lives on for the next task.
# Inside a task (task_begin() .. task_end()) the task's own unserialize()
# calls fail as usual.
become_receiver <- function() invisible(.Call(ps_set_receiver_mode, TRUE))
task_begin <- function(keep_loop = FALSE) {
  .Call(ps_task_state, TRUE)
  # (a foreach loop's state lives only until the worker's next other task,
  # see doshm-tasks.R)
  if (!keep_loop) doshm_forget()
  collect_stale_views()
}
task_end <- function() invisible(.Call(ps_task_state, FALSE))

# task_begin(), with a pageshare error turned into a value for the master
# (remote_error()); NULL when the task may run.
task_begin_checked <- function(keep_loop = FALSE) {
  tryCatch({
    task_begin(keep_loop)
    NULL
  }, pageshare_error = remote_error)
}

# A pageshare error on a worker of a PSOCK cluster, as a value that keeps its
# class (parallel passes on only an error's message); resignal_remote_errors()
# signals it again in the master.
remote_error <- function(e) {
  structure(list(message = conditionMessage(e), class = class(e)), class = "pageshare_remote_error")
}

resignal_remote_errors <- function(results) {
  for (r in results) {
    if (inherits(r, "pageshare_remote_error")) stop(structure(class = r$class, list(message = r$message, call = NULL)))
  }
  invisible(results)
}

check_received_handles <- function() {
  failed <- .Call(ps_take_receive_failures)
  if (!length(failed$message)) return(invisible())
  key <- if (identical(failed$class[[1]], "pageshare_permission")) "received_handle_denied" else "received_handle"
  stop(structure(class = c(failed$class[[1]], "pageshare_error", "error", "condition"),
                 list(message = sprintf(pageshare_messages[[key]], Sys.getpid(), length(failed$message),
                                        failed$message[[1]]),
                      call = NULL)))
}
