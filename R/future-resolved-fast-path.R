# The socket fast path of resolved() (resolved.ShmMultisessionFuture() in
# future-methods.R): answer "not yet" without running future's own method.

# future's id of this R session (futures record it as their owner).
session_uuid <- function() {
  foreign_internal("future", "session_uuid")()
}

# TRUE when `x` is running and its worker has sent nothing within the timeout
# future uses for the same select(). future 1.31's resolved() runs ~1-2 ms of
# R code (version and connection checks) before it looks at the socket, and a
# waiting resolve()/value() calls it for every future every ~20 ms: on a small
# machine that is CPU taken from the workers. Anything to read (a result, a
# condition, progress updates, a dead worker's EOF) or anything unusual goes
# to future's own method.
nothing_to_read <- function(x, timeout = NULL) {
  if (!identical(x$state, "running") || !is.null(x$result)) return(FALSE)
  # future 1.31 keeps the cluster in the future, >= 1.40 in its backend.
  workers <- if (!is.null(x$workers)) x$workers else x$backend$workers
  con <- tryCatch(workers[[x$node]]$con, error = function(e) NULL)
  if (!inherits(con, "sockconn")) return(FALSE)
  # future's checks that come before its select(): a connection closed since
  # (its index may now be another socket's) or a future of another session.
  if (!isTRUE(tryCatch(parallelly::isConnectionValid(con), error = function(e) FALSE))) return(FALSE)
  if (!identical(as.character(x$owner), as.character(session_uuid()))) return(FALSE)
  if (is.null(timeout)) {
    timeout <- getOption("future.cluster.resolved.timeout", getOption("future.resolved.timeout", 0.01))
  }
  if (!is_number(timeout, min = 0)) return(FALSE)
  ready <- tryCatch(socketSelect(list(con), write = FALSE, timeout = timeout), error = function(e) NA)
  identical(ready, FALSE)
}
