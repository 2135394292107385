# The field case of a container: /dev/shm is a 64 MB tmpfs (Docker's default).
# Run in a child R process in a private mount namespace (needs root: unshare -m
# and mount), so that its workers see the small /dev/shm too.

run_with_small_shm <- function(script, size = "64m") {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  skip_if_not(identical(unname(Sys.info()[["effective_user"]]), "root"),
              "needs root (a private mount namespace with a small /dev/shm)")
  skip_if(!nzchar(Sys.which("unshare")), "no unshare command")
  code <- tempfile(fileext = ".R"); out <- tempfile(fileext = ".rds")
  on.exit(unlink(c(code, out)), add = TRUE)
  writeLines(c(sprintf("out <- %s", deparse(out)), script), code)
  # /dev/shm is made private in the new namespace before the tmpfs goes over
  # it, so nothing propagates back (also inside a chroot, where / is no mount
  # point and `unshare --propagation private` fails).
  sh <- sprintf("mount --make-private /dev/shm && mount -t tmpfs -o size=%s tmpfs /dev/shm && exec %s --vanilla %s", size,
                shQuote(file.path(R.home("bin"), "Rscript")), shQuote(code))
  log <- suppressWarnings(system2("unshare", c("--mount", "--propagation", "unchanged", "sh", "-c", shQuote(sh)),
                                  stdout = TRUE, stderr = TRUE))
  if (!file.exists(out)) fail(paste(c("the child wrote no result:", log), collapse = "\n"))
  readRDS(out)
}

test_that("with a 64 MB /dev/shm, share() of 100 MB is a classed no-space error", {
  res <- run_with_small_shm(c(
    "library(pageshare)",
    "e <- tryCatch(share(rnorm(100 * 2^20 / 8)), error = function(e) e)",
    "saveRDS(list(class = class(e), msg = conditionMessage(e), needed = e$needed, free = e$free,",
    "             left = list.files('/dev/shm', pattern = '^pageshare')), out)"))
  expect_identical(res$class, c("pageshare_no_space", "pageshare_error", "error", "condition"))
  expect_match(res$msg, "needs 100.0 MB")
  expect_match(res$msg, "64.0 MB free")
  expect_equal(res$needed, 100 * 2^20, tolerance = 0.01)
  expect_equal(res$free, 64 * 2^20, tolerance = 0.01)
  expect_length(res$left, 0L)                        # nothing half-made left
})

test_that("with a 64 MB /dev/shm, every front door gives the right result with one warning", {
  skip_if_not_installed("future.apply")
  skip_if_not_installed("foreach")
  res <- run_with_small_shm(c(
    "suppressPackageStartupMessages({library(pageshare); library(future); library(future.apply); library(foreach)})",
    "options(future.globals.maxSize = Inf)",
    "X <- rnorm(100 * 2^20 / 8)",
    "M <- matrix(X, ncol = 100)",
    "caught <- function(expr) { w <- character()",
    "  v <- withCallingHandlers(expr, warning = function(c) { w <<- c(w, conditionMessage(c)); invokeRestart('muffleWarning') })",
    "  list(value = v, warnings = w) }",
    "plan(shm_multisession, workers = 2)",   # one warning per plan, however many futures
    "f <- caught(value(future(sum(X))))",
    "f2 <- caught(value(future(sum(X) + 1)))",
    "plan(sequential); plan(shm_multisession, workers = 2)",
    "fl <- caught(future_sapply(1:4, function(i) sum(X) + i))",
    "plan(sequential)",
    "registerDoShm(cores = 2)",
    "fe <- caught(foreach(i = 1:4, .combine = c) %dopar% (sum(X) + i))",
    "ma <- caught(memApply(M, 2, function(v) sum(v)))",
    "stop_workers()",
    "saveRDS(list(f = f, f2 = f2, fl = fl, fe = fe, ma = ma, sum = sum(X), cols = colSums(M),",
    "             left = list.files('/dev/shm', pattern = '^pageshare')), out)"))
  expect_identical(res$f$value, res$sum)
  expect_identical(res$f2$value, res$sum + 1)
  expect_length(res$f2$warnings, 0L)                 # said once for these workers
  expect_identical(res$fl$value, res$sum + 1:4)
  expect_identical(res$fe$value, res$sum + 1:4)
  expect_equal(unlist(res$ma$value), res$cols)
  for (door in c("f", "fl", "fe", "ma")) {
    expect_length(res[[door]]$warnings, 1L)
    expect_match(res[[door]]$warnings, "not enough shared memory", info = door)
  }
  expect_length(res$left, 0L)
})
