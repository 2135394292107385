# What pageshare relies on beyond the documented APIs of R, of other packages
# and of the C library: one inventory, internals_inventory(), whose table says
# for each entry what is read, written or called, and how it is checked.
#
# - Functions of other packages that they do not export (foreign_internals):
#   looked up through foreign_internal() only, and checked when the package
#   they belong to is loaded (check_foreign_internals()), so that a release of
#   that package that drops one gives a clear message instead of a failure
#   deep inside a launch.
# - Fields of other packages' objects, read or written (foreign_fields), and
#   other packages' options (foreign_options). tests/testthat/
#   test-foreign-internals.R fails when code in R/ uses a field of a known
#   foreign object, a `pkg:::name` or another package's option that is not
#   listed here.
# - Private memory layouts of R and of glibc that the page handover
#   (option pageshare.release_source; R/page-handover.R, source_pages.rs,
#   pageshare-core's os/glibc_page_handover.rs) relies on (private_layouts):
#   a self-test at load runs the handover on a probe vector and switches it
#   off, with one message, where any of them differs.
# - Conventions, each with a safe fallback (conventions).
#
# Everything else pageshare calls is documented API: R's C API as
# `tools:::funAPI()` lists it (src/rust/pageshare-r/src/r_sys.rs), R's and
# other packages' exported functions, and Linux's system calls.

foreign_internals <- list(
  list(package = "future", name = "FutureRegistry",
       why = paste("the registry of a plan's running futures, as future's own backends keep it:",
                   "what nbrOfFreeWorkers() counts, collected when every worker is busy")),
  list(package = "future", name = "objectSize",
       why = "future < 1.40 sizes globals this way; the size check of what is sent must count as future does"),
  list(package = "future", name = "asIEC",
       why = "future's own formatting of sizes in its globals-size error"),
  list(package = "future", name = "getFutureData", since = "1.40.0",
       why = "what a future sends to its worker, as future's own backends (and future.mirai) send it"),
  list(package = "future", name = "evalFuture", since = "1.40.0",
       why = "future's own evaluator, run by the pool's worker, as future's own backends (and future.mirai) run it")
)

# Fields of other packages' objects. `roots`: the names under which R/ holds
# such an object (`files`: a regular expression limiting the files where a
# root means this object), for the test that scans R/; `access`: "read",
# "written" or both.
foreign_fields <- list(
  list(package = "future", object = "a Future (future 1.31 and >= 1.40)",
       roots = c("future", "x", "f"), files = "future",
       checked = "not checked: future sets them before any method of pageshare runs",
       fields = list(
         globals = list("read, written", "large globals are swapped for views around sending and put back"),
         expr = list("read", "future < 1.40: the expression, wrapped to relay immediate conditions at once"),
         state = list("read, written", "the pool sets it as future's own backends do (launched, finished, failed, interrupted)"),
         result = list("read, written", "the FutureResult (or error) the pool's reply brings, stored as future would"),
         node = list("read, written", "the pool's slot a future runs on, set at launch"),
         workers = list("read, written", "the plan's number of workers (future < 1.40: named like a cluster, for future's nbrOfFreeWorkers())"),
         backend = list("read", "future >= 1.40: the backend whose registry holds the future"),
         label = list("read", "named in the error of a future whose worker died"),
         uuid = list("read", "the FutureResult of a future that could not open a handle"),
         conditions = list("read", "future >= 1.40: the classes of immediate conditions relayed at once"),
         pageshare_task = list("written, read", "pageshare's own field: the pool task of a future"),
         pageshare_pid = list("written, read", "pageshare's own field: the worker a future runs on"),
         pageshare_reg = list("written, read", "pageshare's own field (future < 1.40): the registry of the plan's futures"),
         pageshare_registered = list("written, read", "pageshare's own field: the future is in future's registry (removed once, when collected)"),
         pageshare_views = list("written, read", "pageshare's own field: the views a future's launch shared"))),
  list(package = "future", object = "a FutureBackend (future >= 1.40)",
       roots = c("backend", "core"), files = "future",
       checked = "not checked: set by future's ClusterFutureBackend()",
       fields = list(
         workers = list("read", "the pool backend's number of workers"),
         reg = list("read", "the registry name of its futures"),
         uuid = list("read", "the pool backend: which plan started the pool (the one to stop it)"),
         interrupts = list("read", "the pool backend: whether cancel() may end a future's worker"),
         maxSizeOfObjects = list("read", "the backend's own globals-size limit"),
         futureClasses = list("read, written", "ShmPoolFuture is put first, so that its methods run"))),
  list(package = "parallel", object = "a cluster node (parallel's SOCKnode, parallelly's RichSOCKnode)",
       roots = c("node", "cl", "workers", "registered"), files = "",
       checked = "read under tryCatch: absent means no pid, not local, not pollable",
       fields = list(
         con = list("read", "the node's socket: polled, and closed when the worker is stopped"),
         host = list("read", "whether the node is on this machine (handles travel only to local workers)"),
         session_info = list("read", "parallelly: `session_info$process$pid`, the worker's pid"))),
  list(package = "foreach", object = "a foreach object (what %dopar% hands a backend)",
       roots = "obj", files = "doshm",
       checked = "a loop whose object lacks one goes through foreach's own iterator and accumulator",
       fields = list(
         args = list("read, written", paste("the iterated values, iterated in bulk by plain loops; a copy of the",
                                            "object gets them evaluated once (quoted) for foreach's iterator")),
         argnames = list("read", "the loop variables' names"),
         evalenv = list("read", "where the loop body is evaluated"),
         combineInfo = list("read", "`fun`, `in.order`, `has.init`, `init`, `final`, `max.combine`: combining in bulk"),
         verbose = list("read", "as doParallel"),
         errorHandling = list("read", "as doParallel"),
         export = list("read", "as doParallel"),
         noexport = list("read", "as doParallel"),
         packages = list("read", "as doParallel"),
         options = list("read", "`.options.shm` / `.options.snow`, the user's backend options"))),
  list(package = "foreach", object = "a foreach object's combineInfo",
       roots = "info", files = "doshm",
       checked = "as for the foreach object",
       fields = list(
         fun = list("read", "the combine function"), in.order = list("read", "as foreach's accumulator"),
         has.init = list("read", "as foreach's accumulator"), init = list("read", "as foreach's accumulator"),
         final = list("read", "as foreach's accumulator"), max.combine = list("read", "as foreach's accumulator"))),
  list(package = "foreach", object = "the user's .options.shm / .options.snow list",
       roots = "opt", files = "doshm",
       checked = "absent means the default",
       fields = list(
         chunk.size = list("read", "doParallel's (doSNOW's) option names"),
         preschedule = list("read", "doParallel's option names"),
         scheduling = list("read", "doSNOW's option names"),
         attachExportEnv = list("read", "doParallel's option names")))
)

# Other packages' options that pageshare reads or writes.
foreign_options <- list(
  list(package = "future", name = "future.globals.maxSize", access = "read, written",
       why = paste("documented; written only under future < 1.40, which has no hook for a backend's own limit",
                   "(restored by a task callback; see ?shm_multisession)")),
  list(package = "future", name = "future.relay.immediate", access = "read",
       why = paste("documented (?future.options): the classes of conditions relayed at once;",
                   "future < 1.40: the pool's futures relay them as multisession's workers do")),
  list(package = "parallelly", name = "parallelly.maxWorkers.localhost", access = "read",
       why = paste("documented (parallelly >= 1.38): the limit on local workers every door applies",
                   "(check_local_workers()), also where the installed parallelly is older")),
  list(package = "parallelly", name = "parallelly.maxWorkers.localhost.ignore", access = "read",
       why = paste("documented with it: availableCores() methods the limit leaves out (the others are",
                   "the documented default of availableCores(methods = ))"))
)

# Private memory layouts the page handover relies on, checked by the
# self-test at load (R/page-handover.R), which switches the handover off
# where one differs; and one behaviour of glibc's free() that the identity
# cache uses, with a bound where it does not hold.
private_layouts <- list(
  list(package = "R", name = "sxpinfo header word", access = "read",
       why = paste("bits 0-4 type, 5 scalar, 7 ALTREP, 29-31 gc node class of a vector's first 64-bit word",
                   "(R >= 3.5, 64-bit little-endian): only a large vector (class 7) is handed over")),
  list(package = "R", name = "large vector allocation", access = "read",
       why = paste("a large vector is one malloc() block with its header at the block's start,",
                   "freed with free(); its data follow the header")),
  list(package = "glibc", name = "mmapped chunk header", access = "read",
       why = paste("malloc()'s size word before a block (IS_MMAPPED 0x2, NON_MAIN_ARENA 0x4) and prev_size",
                   "(the alignment offset) before it: the block's mmap() region, which free() unmaps whole")),
  list(package = "glibc", name = "mmap threshold", access = "read",
       why = "blocks above the (dynamic, at most 32 MiB) mmap threshold get an mmap() region of their own"),
  list(package = "Linux", name = "pages under a live vector", access = "written",
       why = paste("the page-aligned interior of the vector's data is replaced, with equal bytes, by a private",
                   "mapping of its segment, moved in with mremap(MREMAP_MAYMOVE | MREMAP_FIXED), which leaves",
                   "the old pages in place when it fails (never mmap(MAP_FIXED) over them, never abort())")),
  list(package = "glibc", name = "free() unmaps a large block", access = "read",
       checked = "not checked: the cache limit bounds what stays",
       why = paste("the identity cache sees that a large source died when its memory is no longer mapped;",
                   "not checked: under an allocator that keeps freed memory mapped, dead sources go only",
                   "when the cached views exceed pageshare.cache_limit (least recently used first)")),
  list(package = "Linux", name = "/proc/self/maps, /proc/self/pagemap", access = "read",
       why = "the vector's region is private memory of its own; which handed-over pages were written since")
)

# Conventions relied on, each with a safe fallback.
conventions <- list(
  list(package = "future", name = "the plan test future", access = "read",
       why = paste("future < 1.40 sets a plan up by launching a future labelled \"future-plan-test\"",
                   "(shm_multisession reads the user's future.globals.maxSize then)")),
  list(package = "foreach", name = "default combine", access = "read",
       why = paste("`function(a, ...) c(a, list(...))` in foreach's namespace with `.init` list()",
                   "(is_default_combine(); another definition is combined the general way)")),
  list(package = "base", name = "tryCatch's frames", access = "read",
       why = paste("tryCatch() evaluates its expression in a frame called by doTryCatch() (is_handler_call();",
                   "if that changes, an error at a loop body's top level names that frame instead)"))
)

# The whole inventory as one table.
internals_inventory <- function() {
  row <- function(package, kind, object, name, access, checked, why)
    data.frame(package = package, kind = kind, object = object, name = name, access = access,
               checked = checked, why = why, stringsAsFactors = FALSE)
  rows <- c(
    lapply(foreign_internals, function(e)
      row(e$package, "function", "namespace", e$name, "called", "when the package loads", e$why)),
    unlist(lapply(foreign_fields, function(o) lapply(names(o$fields), function(f)
      row(o$package, "field", o$object, f, o$fields[[f]][[1]], o$checked, o$fields[[f]][[2]]))),
      recursive = FALSE),
    lapply(foreign_options, function(e)
      row(e$package, "option", "options()", e$name, e$access, "default where unset", e$why)),
    lapply(private_layouts, function(e)
      row(e$package, "layout", "memory", e$name, e$access,
          if (is.null(e$checked)) "self-test at load" else e$checked, e$why)),
    lapply(conventions, function(e)
      row(e$package, "convention", "behaviour", e$name, e$access, "fallback", e$why)))
  do.call(rbind, rows)
}

foreign_internal <- function(package, name) {
  # (found once per session: a future's launch asks for several)
  key <- paste0(package, ":::", name)
  fun <- foreign_found[[key]]
  if (!is.null(fun)) return(fun)
  fun <- tryCatch(get(name, envir = asNamespace(package), mode = "function", inherits = FALSE),
                  error = function(e) NULL)
  if (is.null(fun)) pageshare_stop("foreign_internal", package, name, format(utils::packageVersion(package)))
  foreign_found[[key]] <- fun
  fun
}
foreign_found <- new.env(parent = emptyenv())

# The entries of `package` that its installed version does not have.
missing_foreign_internals <- function(package) {
  ns <- asNamespace(package)
  version <- utils::packageVersion(package)
  used <- Filter(function(e) e$package == package && (is.null(e$before) || version < e$before) &&
                   (is.null(e$since) || version >= e$since),
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
