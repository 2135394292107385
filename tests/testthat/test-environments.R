# Environments that are not a plain Linux machine: no /proc, /proc mounted with
# subset=pid or hidepid=2. In each, every front door either works or says in
# one classed error why this environment is not supported; none stops inside
# another package or misreports a live worker as dead.

skip_on_os(c("windows", "mac", "solaris"))
skip_unless_root("a private mount and PID namespace (unshare) needs root")
skip_if(!nzchar(Sys.which("unshare")), "unshare (util-linux) is missing")

# Runs every front door in a fresh R session inside `setup` (shell commands run
# first in a private mount namespace); returns, per door, its value or error
# class and message, and the classes of the warnings it gave.
doors_in <- function(setup, pid_namespace = FALSE) {
  got <- run_rscript(c(
    "library(pageshare)",
    "# (without /proc this session sees 1 core; the doors below ask for 2 workers)",
    "options(parallelly.maxWorkers.localhost = numeric(0))",
    "X <- as.double(1:3e5)",
    "M <- matrix(X, ncol = 10)",
    "run <- function(expr) {",
    "  warnings <- character(); messages <- character()",
    "  value <- tryCatch(withCallingHandlers(expr, warning = function(w) {",
    "    warnings <<- c(warnings, class(w)[1]); messages <<- c(messages, conditionMessage(w))",
    "    invokeRestart('muffleWarning') }), error = function(e) e)",
    "  list(value = if (inherits(value, 'error')) NULL else value,",
    "       error = if (inherits(value, 'error')) class(value) else NULL,",
    "       message = if (inherits(value, 'error')) conditionMessage(value) else paste(messages, collapse = ' | '),",
    "       warnings = warnings)",
    "}",
    "res <- list(",
    "  share = run(is_shared(share(X))),",
    "  registerVariables = run({ registerVariables('env_test', list(A = X)); sum(retrieveViews('env_test', 'A')$A) }),",
    "  memApply = run(unlist(memApply(M, 2, sum))),   # (the default number of workers)",
    "  memLapply = run(unlist(memLapply(as.list(1:4), function(i, X) sum(X[1:i]), VARS = list(X = X), MAX.CORES = 2))),",
    "  foreach = run({ registerDoShm(cores = 2); foreach::`%dopar%`(foreach::foreach(i = 1:4, .combine = c), sum(X[1:i])) }),",
    "  future = run({ future::plan(shm_multisession, workers = 2); on.exit(future::plan(future::sequential));",
    "                 future::value(future::future(sum(X))) }))",
    "stop_workers()",
    "saveRDS(res, OUT)"),
    shell = setup, wrap = c("unshare", "-m", if (pid_namespace) c("-p", "-f"), "--propagation", "private"))
  if (is.null(got$saved)) skip(paste("this environment could not be made here:", paste(tail(got$log, 3), collapse = " ")))
  got$saved
}

X <- as.double(1:3e5)
expected <- list(memApply = colSums(matrix(X, ncol = 10)), memLapply = cumsum(X[1:4]), foreach = cumsum(X[1:4]),
                 future = sum(X))

test_that("without /proc: share() and registerVariables() say why in one classed error, the backends send plain data", {
  res <- doors_in("mount -t tmpfs none /proc")
  for (door in c("share", "registerVariables")) {
    expect_true("pageshare_unsupported_environment" %in% res[[door]]$error, info = door)
    expect_match(res[[door]]$message, "/proc", fixed = TRUE, info = door)
  }
  for (door in names(expected)) {
    expect_null(res[[door]]$error, info = paste(door, res[[door]]$message))
    expect_equal(res[[door]]$value, expected[[door]], info = door)
    expect_true(all(res[[door]]$warnings == "pageshare_fallback"), info = paste(door, res[[door]]$message))
    if (length(res[[door]]$warnings)) expect_match(res[[door]]$message, "/proc", fixed = TRUE, info = door)
  }
})

for (mount in c("subset=pid", "hidepid=2")) {
  test_that(sprintf("with /proc mounted %s every front door works", mount), {
    res <- doors_in(sprintf("mount -t proc -o %s proc /proc", mount), pid_namespace = TRUE)
    expect_identical(res$share$value, TRUE)
    expect_equal(res$registerVariables$value, sum(X))
    for (door in names(expected)) {
      expect_null(res[[door]]$error, info = paste(door, res[[door]]$message))
      expect_equal(res[[door]]$value, expected[[door]], info = door)
      expect_length(res[[door]]$warnings, 0L)
    }
  })
}
