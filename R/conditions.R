#' Conditions pageshare signals
#'
#' Every error pageshare raises, from its R code or from its Rust core, is a
#' condition of class `c("pageshare_<kind>", "pageshare_error", "error",
#' "condition")`: catch them all with `tryCatch(..., pageshare_error = )`, or
#' one kind by its own class. The message names the argument or object and says
#' what to do.
#'
#' @section Kinds:
#' \describe{
#'   \item{`pageshare_no_space`}{There is not enough memory for a segment (the
#'     machine's available memory, or this process's cgroup limit). The
#'     condition also carries `needed` and `free` (bytes). Every backend catches
#'     it and sends the data by plain serialization instead, with one warning.}
#'   \item{`pageshare_too_many_segments`}{This process is too close to its limit
#'     on open files (`ulimit -n`) to hold one more segment (each takes one
#'     descriptor). Backends fall back as for `pageshare_no_space`.}
#'   \item{`pageshare_segment_gone`}{The segment a view or handle refers to no
#'     longer exists (its owner released it or exited).}
#'   \item{`pageshare_invalid_segment`}{A file or handle that is not a valid
#'     pageshare segment: damaged, foreign, or of another format.}
#'   \item{`pageshare_name_taken`}{A memshare name (namespace and variable) is
#'     already registered by another live process.}
#'   \item{`pageshare_key_conflict`}{Other data are shared under the key
#'     given to [share()] (see [share_by_key]).}
#'   \item{`pageshare_key_busy`}{Another process held the lock of the key given
#'     to [share()] for longer than option `pageshare.key_wait` (it is sharing
#'     under that key, or stopped meanwhile); the message names it.}
#'   \item{`pageshare_not_registered`}{No variable (or no view) of that name is
#'     registered in that namespace, or no process shares an object under that
#'     key.}
#'   \item{`pageshare_permission`}{The operating system refused access, or a
#'     file pageshare must trust is not safe to use (the index directory or an
#'     entry in it belongs to another user, is a link, a FIFO, or is open to
#'     others).}
#'   \item{`pageshare_bad_argument`}{An argument or option has a wrong type or
#'     value.}
#'   \item{`pageshare_unsupported_environment`}{This environment cannot pass
#'     segments between processes (no /proc mounted: receivers open a segment
#'     through `/proc/<pid>/fd`); the message says what is missing. The
#'     parallel backends then send plain data, with one `pageshare_fallback`
#'     warning.}
#'   \item{`pageshare_unsupported_type`}{An object of a type that cannot be
#'     shared (an environment, a function, an external pointer ...).}
#'   \item{`pageshare_worker_setup`}{A worker could not load pageshare or be
#'     initialized.}
#'   \item{`pageshare_missing_package`}{A package a front door needs is not
#'     installed.}
#'   \item{`pageshare_too_many_workers`}{More workers were asked for than
#'     parallelly's rule for workers on this machine allows (option
#'     `parallelly.maxWorkers.localhost`, by default an error above 3 workers
#'     per core this R session may use, a warning of the same class below
#'     `pageshare_warning` above 1). Raised before anything is started; the
#'     message names the argument and the option to change. Every front door
#'     applies it (`start_workers()`, `registerDoShm()`, `memApply()`,
#'     `shm_multisession`, option `pageshare.workers`); a count given as `I(n)`
#'     skips it.}
#'   \item{`pageshare_worker_died`}{A worker died while it ran a task (killed,
#'     crashed, out of memory; the message names its pid and the task). A
#'     worker of pageshare's own pool is replaced and the next call runs
#'     normally.}
#'   \item{`pageshare_task_interrupted`}{A task of pageshare's own pool was
#'     abandoned because a wait for the pool was interrupted (Ctrl-C): the
#'     workers were restarted, so its value is lost, though no worker died.
#'     Submit it again.}
#'   \item{`pageshare_timeout`}{[shm_value()] with a `timeout` had no value
#'     in time; the task goes on running.}
#'   \item{`pageshare_task_failed`}{`FUN` failed in a worker ([shm_value()],
#'     [shm_map()], [memApply()], [memLapply()]): the condition's `parent` is
#'     `FUN`'s own condition, with its class and call.}
#'   \item{`pageshare_system`}{Any other failure of the operating system (the
#'     message names the call and the system's reason).}
#'   \item{`pageshare_internal`}{A bug in pageshare; please report it.}
#' }
#' Warnings (below `pageshare_warning`): `pageshare_fallback` when a backend
#' sends data by plain serialization because they could not be shared;
#' `pageshare_worker_replaced` when a worker of pageshare's own pool died
#' while it was idle (the message names its pid): a new worker takes its
#' place and the call runs normally (futures replace it without a warning,
#' as `multisession` does); also when the pool ended a worker that
#' wrote what no worker writes into its result ring (the message says what):
#' what it was running fails as a dead worker's task does.
#'
#' @name pageshare_conditions
#' @examples
#' e <- tryCatch(share(new.env()), pageshare_error = function(e) e)
#' class(e)
#' conditionMessage(e)
NULL
