# All user-facing error messages in one place. Each names the argument in
# backticks and says what is expected. Raised through pageshare_stop() so that
# every error carries the class "pageshare_error".

pageshare_messages <- list(
  share_type = "cannot share %s: %s. pageshare shares logical, integer, double, complex, raw and character vectors (with any attributes), and lists of them",
  not_string = "`%s` must be a single non-empty string",
  not_character = "`%s` must be a character vector of variable names",
  not_named_list = "`variableList` must be a named list of vectors, e.g. list(X = X)",
  unknown_variable = "%s not registered in namespace '%s'; it holds: %s",
  not_viewed = "no view of %s is held in namespace '%s'; views held: %s",
  dir_option = "option `pageshare.dir` must be an existing directory, not '%s'",
  threshold_option = "option `pageshare.threshold` must be a single non-negative number of bytes",
  workers_option = "option `pageshare.workers` must be a single positive number of worker processes",
  cores = "`%s` must be a single positive number of worker processes, not %s",
  not_cluster = "`cl` must be a cluster made by parallel::makePSOCKcluster() (or a number of workers), not %s",
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
  max_cores = "`MAX.CORES` must be a single positive number, not %s",
  future_workers = "`workers` must be a single positive whole number of background R sessions (or a function returning one), not %s",
  future_no_pageshare = "the workers of plan(shm_multisession) cannot load pageshare; install it in a library they use (`rscript_libs`; the caller's library paths are: %s)"
)

pageshare_stop <- function(key, ..., call = NULL) {
  msg <- do.call(sprintf, c(list(pageshare_messages[[key]]), list(...)))
  stop(structure(class = c("pageshare_error", "error", "condition"),
                 list(message = msg, call = call)))
}

or_none <- function(x) if (length(x)) paste0("'", x, "'", collapse = ", ") else "nothing"
