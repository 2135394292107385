# Handles a receiver cannot open: a process that is not dumpable (prctl, or a
# change of credentials) keeps its descriptors from every process without
# CAP_SYS_PTRACE, so its segments cannot be opened through /proc/<pid>/fd.
# Each scenario runs in a fresh R session without capabilities (as root, under
# setpriv; an ordinary user has none anyway) whose processes turn themselves
# non-dumpable through a small compiled routine.

# The routine that makes the calling process non-dumpable.
nondumpable_library <- function() {
  compiled_probe("nondumpable", c(
    "#include <sys/prctl.h>",
    "void pageshare_test_nondumpable(int *ok) { *ok = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }"))
}

# Runs `lines` (R code that saves its findings with saveRDS(x, OUT)) in a new
# R session without capabilities; returns what it saved.
run_without_capabilities <- function(lines, so) {
  # (as root, setpriv drops them; an ordinary user has none)
  if (am_root) skip_if(!nzchar(Sys.which("setpriv")), "setpriv is missing: capabilities cannot be dropped")
  got <- run_rscript(c(
    sprintf("SO <- %s", deparse(so)),
    "NONDUMPABLE <- function() { dyn.load(SO); .C('pageshare_test_nondumpable', ok = integer(1))$ok }",
    lines), wrap = if (am_root) c("setpriv", "--bounding-set=-all", "--inh-caps=-all"))
  if (is.null(got$saved)) stop("the scenario saved nothing: ", paste(got$log, collapse = "\n"))
  got$saved
}

test_that("a future's worker that cannot open handles fails each future with a classed error and lives on", {
  skip_if_not_installed("future")
  so <- nondumpable_library()
  got <- run_without_capabilities(c(
    "library(pageshare); library(future)",
    "plan(shm_multisession, workers = I(1))",
    "before <- value(future(Sys.getpid()))",
    "made <- NONDUMPABLE()",
    "X <- as.double(seq_len(2e5))",
    "classes <- lapply(1:5, function(i) tryCatch({ value(future(sum(X))); 'no error' },",
    "                                             error = function(e) class(e)))",
    "msg <- tryCatch(value(future(sum(X))), error = conditionMessage)",
    "after <- value(future(Sys.getpid()))",
    "plain <- value(future(sum(1:10)))",
    "plan(sequential)",
    "saveRDS(list(made = made, classes = classes, msg = msg, before = before, after = after, plain = plain), OUT)"),
    so)
  expect_identical(got$made, 0L)
  expect_length(got$classes, 5L)
  for (cl in got$classes) expect_true(all(c("pageshare_permission", "pageshare_error") %in% cl), info = paste(cl, collapse = " "))
  # (says what to do about a permission, not to share the object again)
  expect_match(got$msg, "must run as the same user", fixed = TRUE)
  expect_identical(got$after, got$before)      # the same worker throughout
  expect_identical(got$plain, 55L)
})

test_that("a result its master cannot open arrives as plain data", {
  skip_if_not_installed("future")
  so <- nondumpable_library()
  got <- run_without_capabilities(c(
    "library(pageshare); library(future)",
    "plan(shm_multisession, workers = I(1))",
    "f <- future({ made <- NONDUMPABLE(); list(made = made, value = as.double(seq_len(2e5))) })",
    "r <- tryCatch(value(f), error = function(e) e)",
    "plan(sequential)",
    "saveRDS(r, OUT)"),
    so)
  expect_false(inherits(got, "error"), info = if (inherits(got, "error")) conditionMessage(got))
  expect_identical(got$made, 0L)
  expect_identical(got$value, as.double(seq_len(2e5)))
})

test_that("on a cluster of the user's, a handle the worker cannot open is a classed error too (regression)", {
  skip_if_not_installed("foreach")
  so <- nondumpable_library()
  got <- run_without_capabilities(c(
    "library(pageshare)",
    "cl <- parallel::makePSOCKcluster(1); registerDoShm(cl)",
    "made <- NONDUMPABLE()",
    "X <- as.double(seq_len(2e5))",
    "`%dopar%` <- foreach::`%dopar%`",
    "loop <- tryCatch(foreach::foreach(i = 1:2) %dopar% sum(X), error = function(e) class(e))",
    "mem <- tryCatch(memLapply(list(X), sum, CLUSTER = cl), error = function(e) class(e))",
    "after <- memLapply(list(1:10), sum, CLUSTER = cl)",
    "parallel::stopCluster(cl)",
    "saveRDS(list(made = made, loop = loop, mem = mem, after = after), OUT)"),
    so)
  expect_identical(got$made, 0L)
  # (parallel passes on only an error's message: it was \"one node produced an error\")
  expect_true(all(c("pageshare_permission", "pageshare_error") %in% got$loop), info = paste(got$loop, collapse = " "))
  expect_true(all(c("pageshare_permission", "pageshare_error") %in% got$mem), info = paste(got$mem, collapse = " "))
  expect_identical(got$after, list(55L))   # the worker lives on
})
