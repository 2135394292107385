#' Options for pageshare
#'
#' Every option can also be set by an environment variable, read once when the
#' package is loaded (an option set explicitly wins).
#'
#' \describe{
#'  \item{`pageshare.dir`}{(character; env `PAGESHARE_DIR`; default `"/dev/shm"`)
#'    Where the index of named registrations ([registerVariables()]) lives:
#'    pageshare keeps it in a directory `pageshare-<uid>` there, which it creates
#'    with mode 0700 and checks before every use. Segments themselves are
#'    anonymous memory files (memfd) that have no name in any directory, so this
#'    option does not bound what can be shared (a 64 MB /dev/shm is no limit)
#'    and [share()] never uses it. Processes that look up the same names must
#'    use the same directory.}
#'  \item{`pageshare.threshold`}{(numeric bytes; env `PAGESHARE_THRESHOLD`;
#'    default `1048576`, 1 MiB) Objects smaller than this travel by plain
#'    serialization when the backends share automatically, unless the
#'    vectors of at least 512 bytes of one chunk (a global, an argument,
#'    `X` of a map, a foreach iteration variable, with the lists inside it)
#'    reach it together: those are then copied into one segment per type
#'    (a type under 64 KiB in total stays plain) and sent as handles too.
#'    [share()] itself always shares.}
#'  \item{`pageshare.workers`}{(whole number; env `PAGESHARE_WORKERS`; unset by
#'    default, which means `parallelly::availableCores()` when the pool starts
#'    (it honours cgroup limits and CPU affinity), less what leaves 16
#'    connections free) Number of processes in pageshare's own worker
#'    pool (see [shm_pool]), used by [shm_call()], [shm_map()],
#'    [registerDoShm()] without a cluster, [memApply()] / [memLapply()]
#'    without `CLUSTER` and [mutual_information()]. The pool is started on
#'    first use, reused by later calls, and stopped by [stop_workers()] or
#'    when R exits.}
#'  \item{`pageshare.cache_limit`}{(numeric bytes; env `PAGESHARE_CACHE_LIMIT`;
#'    default a quarter of the memory available when the package loads)
#'    The identity cache ("share once") keeps the view of each shared source
#'    (never the source itself) while the source is alive. The death of a large
#'    source is seen at the next garbage collection (its memory returns to the
#'    operating system); that of a small one may not be, so above this many
#'    cached bytes the least recently used entries are dropped (their views
#'    stay valid). `forget_shared()` drops them all.}
#'  \item{`pageshare.key_wait`}{(numeric seconds; env `PAGESHARE_KEY_WAIT`;
#'    default `10`) How long [share()] with a `key` waits for another process
#'    that is sharing under the same key at the same moment (it holds the key's
#'    lock while it copies its data, so that the two keep one copy). Ctrl-C
#'    ends the wait at once. When the wait ends, the object that a process
#'    holds already under the key is taken if it has the same contents; else,
#'    under a content key (`key = TRUE`), this process makes its own copy, and
#'    under a key given by hand it is a `pageshare_key_busy` error naming the
#'    process that holds the lock (a process that is stopped, say).}
#'  \item{`pageshare.max_shared_bytes`}{(numeric bytes; env
#'    `PAGESHARE_MAX_SHARED_BYTES`; default `Inf`) The most memory this session
#'    may hold in segments it made. A share beyond it is a `pageshare_no_space`
#'    error, and the backends send those data by plain serialization instead
#'    (with one warning), as when memory runs out. Use it to keep memory for the
#'    workers' own allocations, in a container with a memory limit for example.}
#'  \item{`pageshare.share_results`}{(logical; default `TRUE`) Whether the
#'    workers of [shm_multisession()] return large values (at least
#'    `pageshare.threshold` bytes) through a shared segment that the caller then
#'    owns, instead of through the socket. Read by the caller when a future is
#'    launched.}
#'  \item{`pageshare.release_source`}{(logical; env `PAGESHARE_RELEASE_SOURCE`;
#'    default `TRUE`) When a large ordinary vector is shared, its data are copied
#'    into a segment; with this option the vector's own memory is then given
#'    back to the system and its pages become (copy-on-write) mappings of the
#'    segment's pages, which hold the same bytes. The vector is unchanged for R
#'    (same object, same address, same values), but the data are held once
#'    instead of twice. Applies to vectors of at least 1 MiB that glibc's
#'    malloc() placed in a memory region of their own (the usual case for large
#'    vectors); others keep their memory. Set to `FALSE` to always keep it.
#'    The handover relies on R's and glibc's private memory layouts: a
#'    self-test at load checks them and switches it off, with one message,
#'    where they differ (another malloc() through `LD_PRELOAD`, musl, an R with
#'    another vector header).}
#'  \item{`pageshare.verbose`}{(logical; env `PAGESHARE_VERBOSE`; default
#'    `FALSE`) Report, for each future with globals, foreach loop,
#'    `memApply()`, `memLapply()`, `shm_map()` and `shm_call()` (one whose
#'    arguments are all small is not looked at), what it shares (each
#'    segment under the name of the global, argument or element it was found
#'    as, e.g. `cfg$weights` or `f's inside` for a value in the environment
#'    of a function `f`, with its size; the bytes each worker reads in place
#'    instead of receiving a copy; the time taken), that nothing reached the
#'    threshold, or why its data go plainly, as a message of class
#'    `pageshare_verbose`.}
#'  \item{`pageshare.worker_vsize`}{(numeric bytes; env
#'    `PAGESHARE_WORKER_VSIZE`; default `16777216`, 16 MiB) The size of vector
#'    heap at which the workers that pageshare starts ([shm_multisession()]'s
#'    and the pool's) first collect garbage: R's `--min-vsize`, 64 MB by
#'    default. Workers read shared data through views, so their heap holds
#'    mostly garbage (the columns a loop copies out, say), and with R's default
#'    each worker keeps up to ~50 MB more memory than it needs. R raises the
#'    limit by itself when a worker's live data grow. Read when workers start;
#'    `NA` keeps R's default, as do `R_VSIZE` set in the environment and a
#'    `--min-vsize` in `rscript_args`.}
#' }
#' @name pageshare_options
#' @aliases pageshare.options pageshare.dir pageshare.threshold pageshare.workers pageshare.cache_limit
#'   pageshare.max_shared_bytes pageshare.key_wait
#'   pageshare.share_results pageshare.release_source pageshare.worker_vsize
#'   pageshare.verbose
#' @examples
#' getOption("pageshare.dir")
#' old <- options(pageshare.threshold = 64 * 1024)
#' options(old)
NULL

# Each option, stated once: `must` (what its value must be, for messages)
# and `ok` (the check of a value set); `default` is set when the package
# loads (a function is called then; NULL sets nothing), unless the option is
# set already or its environment variable `env` is (read through `parse`);
# `unset` is what pageshare_option() answers while the option is unset
# (a function is called then), when it differs from `default`. An option
# without `env` is not set at load: it reads as its default.
is_byte_size <- function(v) is_number(v, min = 0)
option_defaults <- list(
  pageshare.cache_limit = list(env = "PAGESHARE_CACHE_LIMIT", parse = as.numeric,
                               default = function() tryCatch(0.25 * .Call(ps_free_bytes),
                                                             error = function(e) Inf),
                               unset = Inf, must = "a number of bytes >= 0 (Inf: no limit)", ok = is_byte_size),
  pageshare.dir = list(env = "PAGESHARE_DIR", default = "/dev/shm", parse = identity,
                       must = "an existing directory", ok = function(v) is_string(v) && dir.exists(v)),
  pageshare.key_wait = list(env = "PAGESHARE_KEY_WAIT", default = 10, parse = as.numeric,
                            must = "a number of seconds >= 0", ok = function(v) is_number(v, min = 0)),
  pageshare.max_shared_bytes = list(env = "PAGESHARE_MAX_SHARED_BYTES", default = Inf, parse = as.numeric,
                                    must = "a number of bytes >= 0 (Inf: no limit)", ok = is_byte_size),
  pageshare.release_source = list(env = "PAGESHARE_RELEASE_SOURCE", default = TRUE, parse = as.logical,
                                  must = "TRUE or FALSE", ok = is_flag),
  pageshare.share_results = list(default = TRUE, must = "TRUE or FALSE", ok = is_flag),
  pageshare.verbose = list(env = "PAGESHARE_VERBOSE", default = FALSE, parse = as.logical,
                           must = "TRUE or FALSE", ok = is_flag),
  pageshare.threshold = list(env = "PAGESHARE_THRESHOLD", default = 1048576, parse = as.numeric,
                             must = "a number of bytes >= 0", ok = is_byte_size),
  pageshare.worker_vsize = list(env = "PAGESHARE_WORKER_VSIZE", default = 16 * 2^20, parse = as.numeric,
                                must = "a number of bytes of at least 1 MiB (1048576), or NA for R's default",
                                ok = function(v) (length(v) == 1L && is.atomic(v) && is.na(v)) ||
                                  is_number(v, min = 2^20, finite = TRUE)),
  # Unset by default and counted when a pool starts (worker_count()): loading
  # parallelly in every process that loads pageshare, workers included, costs
  # each ~10 MB.
  pageshare.workers = list(env = "PAGESHARE_WORKERS", default = NULL, parse = as.numeric,
                           unset = function() default_worker_count(),
                           must = "a whole number of workers >= 1", ok = is_whole_count)
)

# The options set from environment variables when the package loaded
# (name -> list(variable, value)), named in the messages about them.
options_from_env <- new.env(parent = emptyenv())

load_option_defaults <- function() {
  for (name in names(option_defaults)) {
    spec <- option_defaults[[name]]
    if (is.null(spec$env) || !is.null(getOption(name))) next
    env <- Sys.getenv(spec$env, "")
    value <- if (nzchar(env)) {
      # (text that does not parse is kept as it is: its use is an error naming it)
      parsed <- suppressWarnings(spec$parse(env))
      if (length(parsed) == 1L && is.na(parsed) && env != "NA") env else parsed
    } else if (is.function(spec$default)) spec$default() else spec$default
    if (nzchar(env)) options_from_env[[name]] <- list(variable = spec$env, value = value)
    if (!is.null(value)) options(stats::setNames(list(value), name))
  }
}

# The value of pageshare's option `name`, or its default while it is unset.
# A value that breaks the option's rule is a pageshare_bad_argument error
# naming the option, where its value came from, and the value.
pageshare_option <- function(name) {
  value <- getOption(name)
  spec <- option_defaults[[name]]
  if (is.null(value)) {
    unset <- if ("unset" %in% names(spec)) spec$unset else spec$default
    return(if (is.function(unset)) unset() else unset)
  }
  if (!spec$ok(value)) {
    from <- options_from_env[[name]]
    origin <- if (!is.null(from) && identical(from$value, value)) {
      sprintf(" (set by the environment variable %s)", from$variable)
    } else ""
    pageshare_stop("option_value", name, origin, spec$must, describe_value(value), name)
  }
  value
}

segment_dir <- function() normalizePath(pageshare_option("pageshare.dir"), mustWork = TRUE)

share_threshold <- function() {
  # (read for every task: the option as set, checked, is the quick answer)
  value <- getOption("pageshare.threshold")
  if (is_byte_size(value)) value else pageshare_option("pageshare.threshold")
}

cache_limit <- function() pageshare_option("pageshare.cache_limit")

release_source <- function() pageshare_option("pageshare.release_source") && isTRUE(page_handover_enabled())

share_results_enabled <- function() pageshare_option("pageshare.share_results")

# Hand option pageshare.max_shared_bytes to the Rust side, which checks it at
# every segment it makes; called before each call that may make one.
sync_shared_budget <- function() {
  .Call(ps_set_budget, as.double(pageshare_option("pageshare.max_shared_bytes")))
}

# The Rscript arguments that set the vector heap of a worker pageshare starts
# (option pageshare.worker_vsize), put before `rscript_args` (the user's,
# which win: R reads its command line left to right). None when the user
# chose otherwise: R_VSIZE in the environment, or --min-vsize of their own.
worker_heap_args <- function(rscript_args = NULL) {
  v <- pageshare_option("pageshare.worker_vsize")
  off <- length(v) == 1L && is.atomic(v) && is.na(v)
  if (off || nzchar(Sys.getenv("R_VSIZE")) ||
      any(grepl("^--min-vsize", as.character(rscript_args)))) {
    return(rscript_args)
  }
  c(sprintf("--min-vsize=%.0f", ceiling(v)), rscript_args)
}
