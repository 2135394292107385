# Helpers shared by the tests.

# Tests that need root (a second user, dropped capabilities, namespaces) skip
# visibly otherwise.
my_uid <- as.integer(system2("id", "-u", stdout = TRUE))
am_root <- identical(my_uid, 0L)

# For tests that act as root on the machine (a second user, namespaces,
# capabilities): they run in tools/test.sh (so in CI, as root), never inside
# R CMD check, which runs the suite to check a package, not a machine.
skip_unless_root <- function(why) {
  testthat::skip_if_not(am_root, paste("not root:", why))
  testthat::skip_if(nzchar(Sys.getenv("_R_CHECK_PACKAGE_NAME_")),
                    paste("inside R CMD check (tools/test.sh runs it as root):", why))
}

# Segments this R process made and still holds (anonymous names carry the
# maker's pid).
own_segments <- function() {
  grep(sprintf("^pageshare\\.a\\.%d\\.", Sys.getpid()), shared_segments(all = TRUE)$name, value = TRUE)
}

# Memory a process holds for itself (kB): its anonymous pages, which include
# every copy it made of file pages (copy-on-write), from smaps_rollup. (Not
# Private_Clean: a segment page that only this process has mapped so far counts
# there too, although it is the segment's page-cache page, not a copy.)
own_kb <- function(pid) {
  f <- readLines(sprintf("/proc/%d/smaps_rollup", pid))
  get <- function(key) {
    as.numeric(sub("^[^:]+:\\s+(\\d+) kB$", "\\1", grep(paste0("^", key, ":"), f, value = TRUE)))
  }
  get("Anonymous")
}
environment(own_kb) <- baseenv()   # self-contained: tests send it to callr processes

# A PSOCK cluster with pageshare loaded, stopped when the calling test ends.
local_cluster <- function(n = 1L, env = parent.frame()) {
  cl <- parallel::makePSOCKcluster(n)
  withr_stop <- function() parallel::stopCluster(cl)
  do.call(base::on.exit, list(substitute(f(), list(f = withr_stop)), add = TRUE), envir = env)
  parallel::clusterEvalQ(cl, library(pageshare))
  cl
}

# Wait until `path` exists. The timeout is a guard against waiting forever
# (an error that names the file), not a bound on what is tested.
wait_for_file <- function(path, timeout = 30) {
  deadline <- Sys.time() + timeout
  while (!file.exists(path)) {
    if (Sys.time() > deadline) stop("timed out waiting for ", path)
    Sys.sleep(0.05)
  }
  path
}

# Wait until `path` has at least n lines.
wait_for_lines <- function(path, n = 1L, timeout = 60) {
  t0 <- Sys.time()
  while (difftime(Sys.time(), t0, units = "secs") < timeout) {
    if (file.exists(path)) {
      l <- readLines(path, warn = FALSE)
      if (length(l) >= n) return(l)
    }
    Sys.sleep(0.05)
  }
  stop("timed out waiting for ", path)
}

# An R process in the background that shares `n` vectors, writes the segment
# names to a file, then sleeps until killed. Returns list(proc, names).
# A background R session holding `n` shared vectors (and, with `register`, one
# registered as variable "r" of that namespace); returns it, the names of its
# segments and a handle of the first.
background_owner <- function(n = 2L, register = NULL) {
  out <- tempfile()
  proc <- callr::r_bg(function(out, n, register) {
    library(pageshare)
    keep <- lapply(seq_len(n), function(i) share(as.double(seq_len(1000) + i)))
    if (!is.null(register)) registerVariables(register, list(r = 1:3))
    saveRDS(with_handles(serialize(keep[[1]], NULL)), paste0(out, ".rds"))
    writeLines(vapply(keep, function(v) shared_info(v)$name, ""), out)
    Sys.sleep(600)
  }, args = list(out = out, n = n, register = register), supervise = TRUE)
  names <- wait_for_lines(out, n)
  list(proc = proc, names = names, handle = readRDS(paste0(out, ".rds")))
}

# Bytes this process holds in segments it made.
held_bytes_now <- function() .Call(pageshare:::ps_held_bytes)

# Run every op on a view and on the plain object: identical results, and the
# shared pages unchanged afterwards.
check_ops <- function(plain, ops, label) {
  v <- share(plain)
  pristine <- unserialize(serialize(plain, NULL))
  for (i in seq_along(ops)) {
    expect_identical(ops[[i]](v), ops[[i]](plain), info = sprintf("%s op %d: %s", label, i, deparse(body(ops[[i]]))[1]))
  }
  expect_identical(v, pristine)
  # the shared pages themselves are unchanged: a fresh mapping reads the original
  fresh <- unserialize(with_handles(serialize(v, NULL)))
  expect_identical(fresh, pristine)
  v
}

# data.table's `[` gives `:=` its meaning only in code it considers
# data.table-aware; under R CMD check the tests run inside this package's
# namespace, which does not import data.table (it is only suggested), so a
# plain `dt[i, v := x]` there fails. Evaluate such a call as code in the
# global environment, with the variables it names taken from the caller.
as_global_code <- function(expr, env = parent.frame()) {
  expr <- substitute(expr)
  vars <- intersect(all.vars(expr), ls(env, all.names = TRUE))
  eval(expr, list2env(mget(vars, envir = env), parent = globalenv()))
}

# Evaluate `expr` with options set, restoring them afterwards.
withr_options <- function(opts, expr) {
  old <- options(opts)
  on.exit(options(old))
  expr
}

# Compiles a small C routine into a shared library in a temporary folder and
# returns its path (skips visibly where nothing can be compiled). Test-only
# probes of the operating system that R cannot ask for.
compiled_probe <- function(name, code) {
  dir <- tempfile(paste0(name, "-"))
  dir.create(dir)
  src <- file.path(dir, paste0(name, ".c"))
  writeLines(code, src)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", shQuote(src)),
                                  stdout = TRUE, stderr = TRUE))
  so <- sub("\\.c$", .Platform$dynlib.ext, src)
  testthat::skip_if_not(file.exists(so), paste("cannot compile a test routine:", paste(out, collapse = " ")))
  so
}

# Runs R code `lines` in a fresh Rscript that loads this pageshare, from bash:
# `shell` (shell commands such as `ulimit` or `mount`) runs first in the same
# shell, and the shell itself runs under `wrap` (a command such as unshare or
# setpriv) if given. The code saves its findings with saveRDS(x, OUT).
# Returns list(saved = what it saved, or NULL; log = its output).
run_rscript <- function(lines, shell = NULL, wrap = character(), timeout = 300) {
  script <- tempfile(fileext = ".R")
  out <- tempfile(fileext = ".rds")
  writeLines(c(sprintf("OUT <- %s", deparse(out)), lines), script)
  lib <- paste(unique(c(dirname(system.file(package = "pageshare")), .libPaths())), collapse = ":")
  rscript <- sprintf("R_LIBS=%s %s --vanilla %s", shQuote(lib), shQuote(file.path(R.home("bin"), "Rscript")),
                     shQuote(script))
  cmd <- paste(c(shell, rscript), collapse = " && ")
  args <- c(wrap[-1], if (length(wrap)) "bash", "-c", shQuote(cmd))
  log <- suppressWarnings(system2(if (length(wrap)) wrap[1] else "bash", args, stdout = TRUE, stderr = TRUE,
                                  timeout = timeout))
  list(saved = if (file.exists(out)) readRDS(out), log = log)
}

# Counts the calls of the functions `names` of namespace `ns` made while
# `expr` runs, by wrapping their bindings. (trace() cannot wrap a function of
# a class it cannot extend, such as parallelly's cli_fcn availableCores().)
count_calls <- function(ns, names, expr) {
  env <- asNamespace(ns)
  calls <- 0L
  originals <- mget(names, envir = env)
  swap <- function(values) {
    for (name in names) {
      unlockBinding(name, env)
      assign(name, values[[name]], envir = env)
      lockBinding(name, env)
    }
  }
  counting <- lapply(originals, function(original) {
    force(original)
    function(...) {
      calls <<- calls + 1L
      original(...)
    }
  })
  swap(counting)
  on.exit(swap(originals))
  force(expr)
  calls
}
