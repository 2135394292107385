# A string R cannot translate (marked "bytes") or that is not valid UTF-8
# (marked UTF-8, or native in a UTF-8 session), passed at any argument of any
# registered .Call entry point, never crashes R and never jumps over a Rust
# frame: the entry point returns or fails with a classed pageshare error.
# Every routine of getDLLRegisteredRoutines() is called with the junk at each
# position in turn, the other arguments NULL, the same junk, or (for the
# routines that read strings after other arguments) plausible values, so that
# the junk reaches the code reading it (ps_matrix_row and ps_matrix_column
# raise R's own errors of `[`, as documented there). All of it runs in a callr subprocess:
# a crash is a failure naming the call, not a dead test runner.
#
# Routines without arguments have no position to try. Side effects stay in
# the subprocess and end with it: a pool cannot start (its program does not
# exist), index entries and segments are made in the subprocess's own
# directory, and the routines that signal or kill processes
# (ps_processes_gone only reads /proc) get no pid of another process.

junk_strings_run <- function(progress) {
  suppressPackageStartupMessages(library(pageshare))
  dir <- tempfile("junk-dir-")
  dir.create(dir, mode = "0700")
  options(pageshare.dir = dir)
  bytes <- "\xff"
  Encoding(bytes) <- "bytes"
  bad_utf8 <- "\xff\xfe"
  Encoding(bad_utf8) <- "UTF-8"
  bad_native <- "\xff\xfe"
  Encoding(bad_native) <- "unknown"
  junk <- list(bytes = bytes, bad_utf8 = bad_utf8, bad_native = bad_native)
  no_program <- file.path(dir, "no-such-program")
  plausible <- list(
    ps_sweep = list(dir),
    ps_register = list("ns", "var", as.numeric(1:10), NULL, NULL, dir, FALSE),
    ps_retrieve = list("ns", "var", dir),
    ps_is_current = list(NULL, "ns", "var", dir),
    ps_release = list("ns", "var"),
    ps_namespace_variables = list("ns", dir),
    ps_segments_table = list(dir, TRUE),
    ps_share_keyed = list(as.numeric(1:10), NULL, NULL, "key", dir, FALSE, 10),
    ps_retrieve_keyed = list("key", dir),
    ps_release_key = list("key"),
    ps_pool_start = list(1L, no_program, c("--no-echo"), c("R_LIBS", "TMPDIR"), c(dir, dir), 65536, 5,
                         c(2, 1, 0)),
    ps_mutual_info = list(as.double(1:20), 20L, 1L, rep(1:2, 10), 2L, "memshare", 0.5, FALSE, FALSE, 2),
    ps_inject_fault = list("entry", "panic"),
    ps_binding = list(new.env(), "x"),
    ps_unlock_binding = list(new.env(), "x"),
    ps_restore_binding = list(new.env(), "x", 1L, 1, NULL),
    ps_run_iterations = list(list(i = 1:2), quote(i), new.env(), vector("list", 2L), integer(2L), 0)
  )
  routines <- getDLLRegisteredRoutines("pageshare")$.Call
  out <- list()
  for (r in routines) {
    n <- r$numParameters
    if (n == 0) next
    for (pos in seq_len(n)) {
      for (j in names(junk)) {
        modes <- list(null = rep(list(NULL), n), junk = rep(list(junk[[j]]), n))
        if (!is.null(plausible[[r$name]])) modes$plausible <- plausible[[r$name]]
        for (m in names(modes)) {
          args <- modes[[m]]
          args[pos] <- list(junk[[j]])
          what <- sprintf("%s, argument %d of %d: %s, the others %s", r$name, pos, n, j, m)
          cat(what, "\n", file = progress, append = TRUE)
          got <- tryCatch(suppressWarnings(do.call(.Call, c(list(r), args), quote = TRUE)), error = function(e) e)
          # a fault armed by ps_inject_fault fires at the next entry point: disarm it
          if (identical(r$name, "ps_inject_fault") && !inherits(got, "error")) {
            try(pageshare::is_shared(1), silent = TRUE)
          }
          if (inherits(got, "error")) {
            out[[length(out) + 1]] <- data.frame(call = what, class = paste(class(got), collapse = "/"),
                                                 message = conditionMessage(got))
          }
        }
      }
    }
  }
  pageshare::stop_workers()
  unlink(dir, recursive = TRUE)
  do.call(rbind, out)
}

test_that("junk strings at every argument of every entry point: classed errors, no crash", {
  skip_if_not_installed("callr")
  skip_on_cran()
  skip_if(!l10n_info()[["UTF-8"]], "the native junk is invalid only in a UTF-8 session")
  progress <- tempfile("junk-progress-")
  on.exit(unlink(progress), add = TRUE)
  res <- tryCatch(callr::r(junk_strings_run, list(progress = progress), timeout = 600,
                           env = c(callr::rcmd_safe_env(), LANG = "C.UTF-8", LC_ALL = "C.UTF-8")),
                  error = function(e) e)
  if (inherits(res, "error")) {
    last <- tail(readLines(progress, warn = FALSE), 1)
    fail(paste0("the subprocess died (", conditionMessage(res), ") at: ", last))
    return(invisible())
  }
  calls <- readLines(progress, warn = FALSE)
  # every routine with arguments was called, at every position
  routines <- getDLLRegisteredRoutines("pageshare")$.Call
  with_args <- Filter(function(r) r$numParameters > 0, routines)
  expect_gt(length(with_args), 50)
  for (r in with_args) {
    expect_true(any(startsWith(calls, sprintf("%s, argument %d of", r$name, r$numParameters))), info = r$name)
  }
  # ps_matrix_row() and ps_matrix_column() give what `x[i, ]` and `x[, j]`
  # give, R's own errors included (they evaluate `[` for anything but a
  # plain matrix): the junk gets the error `"\xff"[1, ]` gets.
  own_errors <- grepl("^ps_matrix_(row|column),", res$call)
  unclassed <- res[!own_errors & !grepl("pageshare_error", res$class, fixed = TRUE), ]
  expect_identical(nrow(unclassed), 0L,
                   info = paste(sprintf("%s -> %s: %s", unclassed$call, unclassed$class, unclassed$message),
                                collapse = "\n"))
  # the junk reached the code that reads strings, and was refused there by name
  refused <- res[grepl("must be text", res$message, fixed = TRUE), ]
  expect_true(any(grepl("^ps_pool_start, argument 3 of 8: bytes, the others plausible", refused$call)))
  expect_true(any(grepl("^ps_pool_start, argument 4 of 8: bad_utf8, the others plausible", refused$call)))
  expect_true(any(grepl("^ps_register, argument 1 of 7: bad_utf8, the others plausible", refused$call)))
  expect_true(any(grepl("^ps_register, argument 2 of 7: bytes, the others plausible", refused$call)))
  # (invalid native text is translated by R, its bad bytes written as <ff>:
  # valid UTF-8 then, and taken as such)
})

test_that("a string the pool cannot read is refused by name, and the pool starts afterwards", {
  stop_workers()   # (a pool an earlier file left, such as a plan's on future 1.31)
  on.exit(stop_workers(), add = TRUE)
  bytes <- "\xff"
  Encoding(bytes) <- "bytes"
  start_with_args <- function(args) {
    .Call(pageshare:::ps_pool_start, 1L, file.path(R.home("bin"), "Rscript"), args, "R_LIBS",
          paste(.libPaths(), collapse = ":"), 65536, 30, c(2, 1, 0))
  }
  expect_error(start_with_args(c("--no-echo", bytes)), "`args` must be text", class = "pageshare_bad_argument")
  expect_error(start_with_args(c("--no-echo", NA)), "`args` must not contain NA", class = "pageshare_bad_argument")
  # nothing was left half-done (no lock held, no worker started)
  expect_length(.Call(pageshare:::ps_pool_pids), 0L)
  start_workers(1)
  expect_identical(shm_value(shm_call(function() 41 + 1)), 42)
})

test_that("the C entry points check their arguments' types before using them", {
  skip_if_not_installed("callr")
  # (in a subprocess: before the check, a string for `env` crashed R)
  got <- callr::r(function() {
    library(pageshare)
    calls <- list(
      binding = function() .Call(pageshare:::ps_binding, "not an env", "x"),
      unlock = function() .Call(pageshare:::ps_unlock_binding, new.env(), "no_such_variable"),
      restore = function() .Call(pageshare:::ps_restore_binding, "not an env", "x", 1L, 1, 1),
      bytes_name = function() {
        x <- "\xff"
        Encoding(x) <- "bytes"
        .Call(pageshare:::ps_binding, new.env(), x)
      },
      iterations = function() .Call(pageshare:::ps_run_iterations, list(1:2), quote(i), new.env(), list(NULL, NULL),
                                    integer(2L), 0))
    lapply(calls, function(f) tryCatch({
      f()
      "no error"
    }, error = function(e) class(e)[1]))
  })
  expect_identical(unlist(got), c(binding = "pageshare_bad_argument", unlock = "pageshare_bad_argument",
                                   restore = "pageshare_bad_argument", bytes_name = "pageshare_bad_argument",
                                   iterations = "pageshare_bad_argument"))
})
