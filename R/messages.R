# All user-facing error messages in one place. Each names the argument in
# backticks and says what is expected. Raised through pageshare_stop() so that
# every error carries the class of its kind below "pageshare_error" (the kinds
# are documented in ?pageshare_conditions; errors raised in Rust carry the same
# classes, see src/rust/pageshare-r/src/boundary.rs).

pageshare_messages <- list(
  share_type = "cannot share %s: %s. pageshare shares logical, integer, double, complex, raw and character vectors (with any attributes), and lists of them",
  not_string = "`%s` must be a single non-empty string",
  not_character = "`%s` must be a character vector of variable names",
  not_named_list = "`variableList` must be a named list of vectors, e.g. list(X = X)",
  unknown_variable = "%s not registered in namespace '%s'; it holds: %s",
  not_viewed = "no view of %s is held in namespace '%s'; views held: %s",
  option_value = "option `%s`%s must be %s, not %s; set it with options(%s = ...)",
  worker_count = "`%s` must be a whole number of worker processes from 1 to %d (the connections this R session has free), not %s",
  not_cluster = "`%s` must be a cluster made by parallel::makePSOCKcluster()%s, not %s",
  worker_load = "pageshare could not be loaded on worker %s: %s. Install pageshare in a library the workers see (.libPaths() of the master is tried)",
  worker_init = "worker initialization failed: %s",
  need_foreach = "registerDoShm() needs the packages foreach and iterators; install them first",
  margin = "`MARGIN` must be 1 (rows) or 2 (columns), not %s",
  apply_x = "`X` must be a matrix, a data frame or the name of a variable registered in `NAMESPACE`, not %s",
  lapply_x = "`X` must be a list, a vector or the name of a variable registered in `NAMESPACE`, not %s",
  df_rows = "`X` is a data frame with non-numeric column(s) %s; MARGIN = 1 needs all columns numeric or logical (use MARGIN = 2, or convert X with as.matrix() yourself)",
  name_needs_namespace = "`%s` names a registered variable, so `NAMESPACE` must be given as a single string",
  vars_format = "`VARS` must be a named list of values or a character vector of variables registered in `NAMESPACE`",
  fun_failed = "%s: `FUN` failed on %s: %s",
  worker_died = "worker process %s of pageshare's pool died while running %s (%s); the pool was stopped and the next call starts a new one",
  worker_died_idle = "worker process %s of pageshare's pool died while it was idle (killed, or ended by the out-of-memory killer); a new pool was started",
  foreign_internal = "pageshare needs %s's internal function %s(), which the installed version %s does not have; please report this with the version",
  mi_x = "`X` must be a numeric matrix, a data frame of numeric columns or a numeric vector, not %s",
  mi_df = "`X` is a data frame with non-numeric column(s) %s; drop or convert them first",
  mi_no_rows = "`X` has no rows: mutual information needs at least one case",
  mi_y_type = "`y` must be a vector or factor of class labels, not %s",
  mi_y_length = "`y` must have one class per row of `X` (%d rows), not %d values",
  mi_y_na = "`y` has %d NA value(s): use na.rm = TRUE to leave those cases out",
  mi_y_classes = "`y` must have at least two classes, not %d",
  mi_failed = "mutual_information() failed on %s: %s",
  mi_method = "`method` must be \"pde\" or \"memshare\", not %s",
  flag = "`%s` must be TRUE or FALSE",
  not_function = "`%s` must be a function or the name of one, not %s",
  number = "`%s` must be a single number %s, not %s",
  mi_pair = "`x` and `y` must be numeric vectors of the same length (mutualinfo() takes one pair of variables)",
  mi_pair_nonfinite = "`%s` has non-finite values (NA, NaN or Inf): use na.rm = TRUE to use only the pairs where both are finite",
  mi_both_continuous = "mutualinfo() of two continuous variables is not supported by pageshare: set isXDiscrete = TRUE or isYDiscrete = TRUE for the discrete one",
  mi_mpmi = "`useMPMI = TRUE` is not supported: pageshare does not call the mpmi package",
  received_handle = "worker process %d could not open %d shared object(s) sent to it, so the task did not run: %s. The worker is fine and runs the next task; share the object again (a view whose owner has released it cannot be sent)",
  received_handle_denied = "worker process %d could not open %d shared object(s) sent to it, so the task did not run: %s. The worker is fine and runs the next task; a worker must run as the same user as the process that shared the data, and be allowed to read its /proc/<pid>/fd",
  too_many_workers = "`%s` = %d workers on the %d CPU cores this R session may use would load them to %s, above the %s limit of %s that option %s sets (parallelly's rule for workers on this machine: by default a warning above 100%%, an error above 300%%). Use fewer workers, or allow more, e.g. options(%s = %s), or give the count as I(n)",
  pool_size = "`%s` must be a whole number of worker processes from 1 to 4096 (the most the pool starts), not %s",
  not_task = "`task` must be a task returned by shm_call(), not %s",
  task_timeout = "task %s gave no value within `timeout` = %s seconds; it goes on running: wait again with shm_value(), or check with shm_resolved()",
  everywhere_names = "the values in `...` of shm_everywhere() must all be named, each name once, e.g. shm_everywhere(f(x), x = x)",
  everywhere_failed = "`expr` of shm_everywhere() failed on worker process %d: %s (workers started later will not run it)",
  setup_failed = "the set-up code of shm_everywhere() failed on worker process %d, so it runs no task: %s. stop_workers() starts a pool without it",
  task_cancelled = "task %s was cancelled by shm_cancel(); it has no value (submit it again with shm_call() if it is still needed)",
  task_lost = "task %s was sent to a pool that has since been stopped; its value is lost (submit it again)",
  task_interrupted = "task %s was abandoned when a wait for the pool was interrupted (Ctrl-C): its worker was restarted and its value is lost; no worker died. Submit it again with shm_call()",
  pool_task_failed = "`FUN` failed in %s: %s",
  pool_out_of_step = "pageshare's pool is out of step: worker %d answered message %s where %s was due (please report this); stop_workers() starts afresh",
  pool_unknown_event = "pageshare's pool gave an event '%s' that this version of pageshare does not know (please report this); stop_workers() starts afresh",
  pool_worker_replaced = "worker process %s of pageshare's pool died while it was idle (killed, or ended by the out-of-memory killer); a new worker has taken its place",
  pool_worker_damaged = "worker process %s of pageshare's pool wrote what no worker writes into its result ring (%s: its memory may be corrupted, or another process wrote into its pages); the pool ended it, what it was running failed, and a new worker takes its place",
  pool_worker_died = "worker process %s of pageshare's pool died while running %s of %s (killed, crashed, or ended by the out-of-memory killer); a new worker has taken its place",
  map_x = "`X` must be a vector or a list, not %s",
  map_seed = "`.seed` must be FALSE, TRUE, a single number or an L'Ecuyer-CMRG .Random.seed (7 integers), not %s",
  need_progressr = "`.progress = TRUE` needs the package progressr; install it first",
  bad_key = "`key` must be a single non-empty string or TRUE (a content key), not %s",
  list_key = "%s: under a key given as a string, a list (a data frame) is shared element by element, and every element must be a vector; use key = TRUE to share each element under its content key",
  missing_argument = "`%s` is missing, with no default: %s() needs it (see ?%s for what it must be)",
  name_too_long = "`%s` must be a name of at most %d bytes (the longest name pageshare's index can hold), not a string of %s bytes",
  namespace_arg = "`NAMESPACE` must be NULL or a single non-empty string naming a namespace, not %s",
  duplicate_names = "`variableList` names %s more than once; each variable needs a name of its own (nothing was registered)",
  not_environment = "`%s` must be an environment, not %s",
  not_strings = "`%s` must be %s, not %s",
  plan_called_directly = "shm_multisession() is a plan for future: set it with future::plan(shm_multisession) instead of calling it (future %s sets its plans up itself)",
  future_worker_died = "Future (%s) of class %s failed for unknown reason while %s on 'localhost' (pid %s): the worker process of pageshare's pool died (killed, crashed, or ended by the out-of-memory killer); a new worker takes its place for the next future",
  future_worker_interrupted = "Future (%s) of class %s was %s while running on 'localhost' (pid %s): its worker process of pageshare's pool was ended; a new worker takes its place for the next future",
  future_pool_failed = "Future (%s) could not be run on pageshare's pool: %s",
  pack_out_of_order = "pageshare's walk met the small vectors of a chunk out of the order they were packed in (vector %d; please report this)"
)

# The kind of each message (the condition class is "pageshare_<kind>").
pageshare_message_kinds <- c(
  share_type = "unsupported_type", unknown_variable = "not_registered", not_viewed = "not_registered",
  worker_load = "worker_setup", worker_init = "worker_setup",
  need_foreach = "missing_package", fun_failed = "task_failed", mi_failed = "task_failed", worker_died = "worker_died",
  worker_died_idle = "worker_replaced", task_lost = "worker_died", task_interrupted = "task_interrupted", pool_task_failed = "task_failed", pool_worker_died = "worker_died",
  pool_worker_replaced = "worker_replaced", pool_worker_damaged = "worker_replaced", too_many_workers = "too_many_workers", pool_out_of_step = "internal",
  pool_unknown_event = "internal", pack_out_of_order = "internal",
  need_progressr = "missing_package", task_timeout = "timeout", task_cancelled = "task_cancelled", setup_failed = "worker_setup",
  foreign_internal = "internal", received_handle = "segment_gone")

pageshare_stop <- function(key, ..., call = NULL) {
  msg <- do.call(sprintf, c(list(pageshare_messages[[key]]), list(...)))
  if (key %in% worker_death_keys) msg <- paste0(msg, last_words_note(..1))
  kind <- pageshare_message_kinds[key]
  if (is.na(kind)) kind <- "bad_argument"
  stop(structure(class = c(paste0("pageshare_", kind), "pageshare_error", "error", "condition"),
                 list(message = msg, call = call)))
}

# A warning of the kind of `key` (class "pageshare_<kind>", below
# "pageshare_warning").
pageshare_warn <- function(key, ...) {
  msg <- do.call(sprintf, c(list(pageshare_messages[[key]]), list(...)))
  if (key %in% worker_death_keys) msg <- paste0(msg, last_words_note(..1))
  warning(structure(class = c(paste0("pageshare_", pageshare_message_kinds[[key]]), "pageshare_warning",
                              "warning", "condition"),
                    list(message = msg, call = NULL)))
}

# The messages that report a worker's death, its pid their first value: what
# the worker wrote to its standard error before it died follows them.
worker_death_keys <- c("worker_died", "worker_died_idle", "pool_worker_died", "pool_worker_replaced",
                       "pool_worker_damaged")

# The last lines a dead worker of the pool wrote to its standard error (a
# crash report such as R's "caught segfault", a fatal error), kept by pid for
# the messages that report its death; the last few deaths only.
last_words <- new.env(parent = emptyenv())

remember_last_words <- function(pid, words) {
  if (!is.character(words) || length(words) != 1L || !nzchar(trimws(words))) return(invisible())
  key <- as.character(pid)
  last_words[[key]] <- words
  keys <- ls(last_words)
  if (length(keys) > 16L) rm(list = setdiff(keys, key)[seq_len(length(keys) - 16L)], envir = last_words)
  invisible()
}

# ". Its last words on standard error: ..." for worker `pid`, or "" when it
# wrote nothing. Of a longer text, its first lines (where R's crash report
# names the cause) and its last ones.
last_words_note <- function(pid) {
  words <- last_words[[as.character(pid)]]
  if (is.null(words)) return("")
  lines <- strsplit(words, "\n")[[1L]]
  lines <- lines[nzchar(trimws(lines))]
  if (length(lines) > 8L) lines <- c(utils::head(lines, 3L), "...", utils::tail(lines, 4L))
  long <- nchar(lines) > 160L
  lines[long] <- paste0(substr(lines[long], 1L, 157L), "...")
  sprintf(". Its last words on standard error:\n%s", paste0("  ", lines, collapse = "\n"))
}

or_none <- function(x) if (length(x)) paste0("'", x, "'", collapse = ", ") else "nothing"
