# Every unexported function or private field of another package that pageshare
# uses, in one place, each with the reason no public API serves. They are
# looked up through foreign_internal() only, and checked when the package they
# belong to is loaded (check_foreign_internals()), so that a release of that
# package that drops one gives a clear message instead of a failure deep
# inside a launch.
#
# Conventions relied on: future < 1.40 sets a plan up by launching a future
# labelled "future-plan-test" (shm_multisession reads the user's
# future.globals.maxSize then).
#
# Private fields read (not functions, so not in the table): the `cluster` in
# the environment of future's ClusterRegistry (future < 1.40), a node's
# `session_info$process$pid` (parallelly), a future's
# `globals`, `expr`, `state`, `result`, `owner`, `node`, `workers`/`backend`
# (the run()/launchFuture() methods of a future subclass must change what is
# sent and put it back), and a ClusterFutureBackend's `workers`, `reg`,
# `futureClasses` and `maxSizeOfObjects` (future >= 1.40); a foreach object's
# `args`, `argnames`, `evalenv` and `combineInfo` (`fun`, `in.order`,
# `has.init`, `init`, `final`, `max.combine`), which the foreach backend
# reads to iterate and combine plain loops in bulk (R/doshm-bulk.R; a loop
# whose object lacks one goes through foreach's own iterator and accumulator).
#
# Definitions relied on, each with a safe fallback: foreach's default combine
# is `function(a, ...) c(a, list(...))` in its namespace with `.init` list()
# (is_default_combine(); another definition is combined the general way), and
# tryCatch() evaluates its expression in a frame called by doTryCatch()
# (is_handler_call(); if that changes, an error raised at a loop body's top
# level names that frame instead of `eval(expr, env)`).

foreign_internals <- list(
  list(package = "future", name = "FutureRegistry",
       why = "whether a cluster's workers are idle before pageshare checks they can load it"),
  list(package = "future", name = "session_uuid",
       why = "the id future records as a future's owner (a future of another session is future's to handle)"),
  list(package = "future", name = "objectSize",
       why = "future < 1.40 sizes globals this way; the size check of what is sent must count as future does"),
  list(package = "future", name = "asIEC",
       why = "future's own formatting of sizes in its globals-size error"),
  list(package = "future", name = "ClusterRegistry", before = "1.40.0",
       why = paste("future < 1.40 keeps its multisession workers in this closure's `cluster`;",
                   "a dead worker is replaced there (future >= 1.40 does it itself)"))
)

foreign_internal <- function(package, name) {
  fun <- tryCatch(get(name, envir = asNamespace(package), mode = "function", inherits = FALSE),
                  error = function(e) NULL)
  if (is.null(fun)) pageshare_stop("foreign_internal", package, name, format(utils::packageVersion(package)))
  fun
}

# The entries of `package` that its installed version does not have.
missing_foreign_internals <- function(package) {
  ns <- asNamespace(package)
  version <- utils::packageVersion(package)
  used <- Filter(function(e) e$package == package && (is.null(e$before) || version < e$before),
                 foreign_internals)
  names <- vapply(used, `[[`, "", "name")
  names[!vapply(names, exists, logical(1), envir = ns, mode = "function", inherits = FALSE)]
}

check_foreign_internals <- function(package) {
  gone <- missing_foreign_internals(package)
  if (length(gone)) {
    packageStartupMessage(sprintf(
      "pageshare: %s %s lacks %s, which pageshare uses; plan(shm_multisession) may fail (please report)",
      package, utils::packageVersion(package), paste(gone, collapse = ", ")))
  }
  invisible(gone)
}
