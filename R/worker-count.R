# How many workers: one rule for every front door (shm_multisession's
# `workers`, registerDoShm()'s `cores`, memApply()'s `MAX.CORES`, option
# `pageshare.workers`).

# The number of workers to use: `n` when given (checked, naming `arg`), else
# option `pageshare.workers` (unset: default_worker_count()).
worker_count <- function(n = NULL, arg = "cores") {
  if (is.null(n)) check_worker_count(pageshare_option("pageshare.workers"), "pageshare.workers")
  else check_worker_count(n, arg)
}

# The default: the cores this process may use (parallelly::availableCores()
# honours cgroup limits, CPU affinity and the scheduler's settings, where
# detectCores() counts the machine's), leaving connections free for the user
# as future does. Where availableCores() fails (a /proc mounted with
# subset=pid has no cgroup files), the machine's count. (shm_multisession's
# `workers` default calls this with `pageshare:::`: future evaluates a plan's
# formals outside this namespace.)
default_worker_count <- function() {
  as.integer(max(1L, min(default_cores(), parallelly::freeConnections() - 16L)))
}

# The cores this process may use (at least 1).
default_cores <- function() {
  cores <- tryCatch(parallelly::availableCores(), error = function(e) parallel::detectCores())
  if (!is_number(cores)) cores <- 1L
  as.integer(max(1L, cores))
}

# The most workers this session can have: each takes one connection, and R
# has a fixed number of them.
max_worker_count <- function() {
  max(1L, parallelly::freeConnections())
}

# `n` as an integer if it is a single whole number from 1 to
# max_worker_count(), else a pageshare_bad_argument error naming `arg` and the
# value (before anything is started or allocated).
check_worker_count <- function(n, arg) {
  ok <- is_whole_count(n)
  limit <- as.integer(max_worker_count())
  if (!ok || n > limit) {
    pageshare_stop("worker_count", arg, limit, describe_value(n))
  }
  as.integer(n)
}

describe_value <- function(x) {
  if (is.character(x)) return(paste(dQuote(x, FALSE), collapse = " "))
  if (length(x) != 1L) return(sprintf("a %s vector of length %d", typeof(x), length(x)))
  paste(format(x), collapse = " ")
}
