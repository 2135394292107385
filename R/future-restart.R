# Workers of plan(shm_multisession) that died or fell out of step are replaced
# before the next future is launched, so one dead worker (killed, out of
# memory) never breaks the futures that follow.
#
# future < 1.40 does not do this itself: a future whose worker died stays in
# future's registry of running futures (its FutureError is raised before it is
# removed), the dead node stays in the cluster, and a node whose future was
# never collected keeps an unread reply that the next call on it reads as its
# own answer. So before each launch (run(), future-methods-legacy.R), every
# node is checked:
# * a node that a registered future runs on and whose process is gone: the
#   future is dropped from the registry (its result() still fails with future's
#   FutureError naming the worker) and the node is replaced;
# * a node no future runs on whose socket has something to read (EOF of a dead
#   worker, or a reply nobody waits for) or whose connection is closed: the
#   node is replaced.
# The cluster keeps its name, which is the key of future's registry (future
# names an unnamed cluster by a digest of its nodes, which a new node would
# change). future >= 1.40 restarts a dead worker itself when it needs the node.

# The worker options a plan was set up with, by cluster name (future < 1.40).
plan_worker_options <- new.env(parent = emptyenv())

remember_worker_options <- function(cl, rscript_libs, rscript_args) {
  name <- attr(cl, "name", exact = TRUE)
  if (!is.null(name)) plan_worker_options[[name]] <- list(rscript_libs = rscript_libs, rscript_args = rscript_args)
  invisible()
}

# Replaces the dead and out-of-step workers of `future`'s cluster (future < 1.40).
heal_plan_workers <- function(future) {
  cl <- future[["workers"]]
  name <- attr(cl, "name", exact = TRUE)
  if (!inherits(cl, "cluster") || !is_string(name)) return(invisible())
  reg <- paste0("workers-", name)
  FutureRegistry <- foreign_internal("future", "FutureRegistry")
  busy <- integer()
  bad <- integer()
  for (f in FutureRegistry(reg, action = "list", earlySignal = FALSE)) {
    i <- f[["node"]]
    if (!is_number(i) || i > length(cl)) next
    if (node_process_gone(cl[[i]])) {
      FutureRegistry(reg, action = "remove", future = f, earlySignal = FALSE)
      bad <- c(bad, i)
    } else {
      busy <- c(busy, i)
    }
  }
  idle <- setdiff(seq_along(cl), c(busy, bad))
  bad <- sort(unique(c(bad, idle[nodes_out_of_step(cl[idle])])))
  if (!length(bad)) return(invisible())
  registry <- environment(foreign_internal("future", "ClusterRegistry"))
  registered <- get0("cluster", envir = registry, inherits = FALSE)
  for (i in bad) {
    new <- start_replacement_worker(name)
    if (is.null(new)) next
    end_worker(cl[[i]])
    cl[[i]] <- new
    if (inherits(registered, "cluster") && i <= length(registered)) registered[[i]] <- new
  }
  if (inherits(registered, "cluster")) {
    attr(registered, "name") <- name
    assign("cluster", registered, envir = registry)
  }
  future[["workers"]] <- cl
  invisible()
}

# For each node no future runs on: is it to be replaced? Its worker is gone
# (its process, or its socket's EOF: either can be seen first), or its socket
# has a reply nobody waits for, or its connection is closed. (One select() for
# all; `pids` as the nodes' worker pids where the nodes do not carry them.)
nodes_out_of_step <- function(nodes, pids = vapply(nodes, node_pid, integer(1))) {
  if (!length(nodes)) return(logical())
  gone <- process_gone(pids)
  cons <- lapply(nodes, function(node) node[["con"]])
  valid <- vapply(cons, function(con) {
    inherits(con, "connection") && isTRUE(tryCatch(parallelly::isConnectionValid(con), error = function(e) FALSE))
  }, logical(1))
  readable <- rep(FALSE, length(nodes))
  if (any(valid)) {
    ready <- tryCatch(socketSelect(cons[valid], write = FALSE, timeout = 0), error = function(e) rep(TRUE, sum(valid)))
    readable[valid] <- ready
  }
  gone | !valid | readable
}

node_pid <- function(node) {
  pid <- tryCatch(node[["session_info"]][["process"]][["pid"]], error = function(e) NULL)
  if (is_number(pid)) as.integer(pid) else NA_integer_
}

node_process_gone <- function(node) {
  process_gone(node_pid(node))
}

# A new worker for the plan whose cluster is named `name`, started the way the
# plan started its workers, with pageshare loaded (it may receive handles
# before its first future runs). NULL if it cannot be started: the node is
# then left for future to report.
start_replacement_worker <- function(name) {
  opts <- plan_worker_options[[name]]
  libs <- if (is.null(opts)) .libPaths() else opts$rscript_libs
  args <- if (is.null(opts)) worker_heap_args() else opts$rscript_args
  tryCatch({
    new <- nodelay_sockets(parallelly::makeClusterPSOCK(1L, rscript_libs = libs, rscript_args = args))
    load_on_workers(new)
    new[[1L]]
  }, error = function(e) NULL)
}

# Closes our end of a replaced node and ends its worker if it still runs (a
# worker of the plan, started by this session).
end_worker <- function(node) {
  tryCatch(close(node[["con"]]), error = function(e) NULL)
  pid <- node_pid(node)
  if (!is.na(pid) && !process_gone(pid)) tools::pskill(pid, tools::SIGTERM)
  invisible()
}
