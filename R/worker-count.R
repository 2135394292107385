# How many workers: one rule for every front door (shm_multisession's
# `workers`, registerDoShm()'s `cores`, memApply()'s `MAX.CORES`,
# start_workers()'s `n`, option `pageshare.workers`), parallelly's limit on
# local workers included.

# The number of workers to use: `n` when given (checked, naming `arg`), else
# option `pageshare.workers` (unset: default_worker_count()).
worker_count <- function(n = NULL, arg = "cores") {
  if (is.null(n)) check_worker_count(pageshare_option("pageshare.workers"), "pageshare.workers")
  else check_worker_count(n, arg)
}

#' The number of workers pageshare starts when none is given
#'
#' The cores this R session may use, as [parallelly::availableCores()] counts
#' them (cgroup limits, CPU affinity and the scheduler's settings honoured;
#' the machine's count where that fails, as on a `/proc` mounted with
#' `subset=pid`), leaving 16 of R's connections free as future does. It is
#' the default of `workers` in [shm_multisession] and of the pool's size when
#' option `pageshare.workers` is not set ([pageshare_options]).
#'
#' @return A single integer, at least 1.
#' @seealso [start_workers()], [pageshare_options]
#' @examples
#' default_worker_count()
#' @export
default_worker_count <- function() {
  as.integer(max(1L, min(default_cores(), parallelly::freeConnections() - 16L)))
}

# The cores this process may use (at least 1). Counted once per session:
# availableCores() may start a process (nproc) and read cgroup files, and
# every pool start and worker count asks.
default_cores <- function() {
  if (is.null(worker_count_cache$cores)) {
    cores <- tryCatch(parallelly::availableCores(), error = function(e) parallel::detectCores())
    if (!is_number(cores)) cores <- 1L
    worker_count_cache$cores <- as.integer(max(1L, cores))
  }
  worker_count_cache$cores
}

worker_count_cache <- new.env(parent = emptyenv())

# The cores parallelly's limit on localhost workers compares a count with:
# availableCores() without the methods named by option
# parallelly.maxWorkers.localhost.ignore (default: _R_CHECK_LIMIT_CORES_,
# whose 2 cores under R CMD check the limit does not apply). Counted once per
# session and value of that option.
limit_cores <- function() {
  ignore <- getOption("parallelly.maxWorkers.localhost.ignore", "_R_CHECK_LIMIT_CORES_")
  key <- paste(c("ignore:", sort(as.character(ignore))), collapse = "\r")
  if (is.null(worker_count_cache[[key]])) {
    cores <- tryCatch({
      methods <- setdiff(eval(formals(parallelly::availableCores)$methods), ignore)
      parallelly::availableCores(methods = methods)
    }, error = function(e) default_cores())
    if (!is_number(cores) || cores < 1) cores <- default_cores()
    worker_count_cache[[key]] <- as.integer(cores)
  }
  worker_count_cache[[key]]
}

percent <- function(x) sprintf("%.0f%%", 100 * x)

# Limits as R code: c(1, 500).
limits_format <- function(limits) sprintf("c(%s)", paste(format(limits, trim = TRUE), collapse = ", "))

# parallelly's rule for workers on this machine (option
# parallelly.maxWorkers.localhost, as parallelly >= 1.38 applies it when it
# starts local workers; the parallelly installed may be older): the option
# gives limits on workers per core, by default c(1, 3): above the first a
# warning, above the second an error, before anything is started. A count
# given with I() and an option of length 0 skip the rule, as in parallelly.
# `n` has passed check_worker_count()'s or pool_worker_count()'s checks.
check_local_workers <- function(n, arg, asis = FALSE) {
  if (asis) return(invisible(n))
  option <- "parallelly.maxWorkers.localhost"
  limits <- getOption(option, c(1, 3))
  if (length(limits) == 0L) return(invisible(n))
  if (!is.numeric(limits) || anyNA(limits) || any(limits <= 0)) {
    pageshare_stop("option_value", option, "", "numbers of workers per core above 0, e.g. c(1, 3)",
                   describe_value(limits), option)
  }
  cores <- limit_cores()
  load <- n / cores
  if (length(limits) >= 2L && load > limits[2L]) {
    pageshare_stop("too_many_workers", arg, n, cores, percent(load), "hard", percent(limits[2L]), option,
                   option, limits_format(c(limits[1L], ceiling(load))))
  }
  if (load > limits[1L]) {
    hard <- if (length(limits) >= 2L) limits[2L] else ceiling(load)
    pageshare_warn("too_many_workers", arg, n, cores, percent(load), "soft", percent(limits[1L]), option,
                   option, limits_format(c(ceiling(load), max(ceiling(load), hard))))
  }
  invisible(n)
}

# The most workers this session can have: each takes one connection, and R
# has a fixed number of them.
max_worker_count <- function() {
  max(1L, parallelly::freeConnections())
}

# `n` as an integer if it is a single whole number from 1 to
# max_worker_count(), else a pageshare_bad_argument error naming `arg` and the
# value; then parallelly's rule for local workers (check_local_workers()):
# all before anything is started or allocated.
check_worker_count <- function(n, arg) {
  ok <- is_whole_count(n)
  limit <- as.integer(max_worker_count())
  if (!ok || n > limit) {
    pageshare_stop("worker_count", arg, limit, describe_value(n))
  }
  check_local_workers(as.integer(n), arg, asis = inherits(n, "AsIs"))
  as.integer(n)
}

describe_value <- function(x) {
  if (is.character(x)) {
    # (a long string is shown by its start and its length)
    long <- !is.na(x) & nchar(x, type = "bytes") > 60L
    shown <- dQuote(x, FALSE)
    shown[long] <- sprintf("\"%s...\" (%s bytes)", substr(x[long], 1L, 40L),
                           format(nchar(x[long], type = "bytes"), big.mark = ","))
    return(paste(shown, collapse = " "))
  }
  if (is.function(x)) return("a function")
  if (is.environment(x)) return("an environment")
  if (is.list(x)) return(sprintf("a list of length %d", length(x)))
  if (!is.atomic(x)) return(sprintf("an object of type %s", typeof(x)))
  if (length(x) != 1L) return(sprintf("a %s vector of length %d", typeof(x), length(x)))
  paste(format(x), collapse = " ")
}
