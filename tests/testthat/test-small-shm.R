# The field case of a container: /dev/shm is a 64 MB tmpfs (Docker's default).
# Run in a child R process in a private mount namespace (needs root: unshare -m
# and mount), so that its workers see the small /dev/shm too. Segments are
# anonymous memory files, so the size of /dev/shm must not matter.

run_with_small_shm <- function(script, size = "64m", cgroup = NULL) {
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
  # In a memory cgroup of its own (with its workers), to read its peak.
  if (!is.null(cgroup)) sh <- sprintf("echo $$ > %s/cgroup.procs && %s", cgroup, sh)
  log <- suppressWarnings(system2("unshare", c("--mount", "--propagation", "unchanged", "sh", "-c", shQuote(sh)),
                                  stdout = TRUE, stderr = TRUE))
  if (!file.exists(out)) fail(paste(c("the child wrote no result:", log), collapse = "\n"))
  readRDS(out)
}


# A fresh memory cgroup below this process's own (cgroup v1 or v2), or skip.
new_memory_cgroup <- function() {
  lines <- readLines("/proc/self/cgroup")
  v1 <- grep("^[0-9]+:([^:]*,)?memory(,[^:]*)?:", lines, value = TRUE)
  base <- if (length(v1)) file.path("/sys/fs/cgroup/memory", sub("^[^:]*:[^:]*:/?", "", v1[1]))
          else file.path("/sys/fs/cgroup", sub("^0::/?", "", grep("^0::", lines, value = TRUE)[1]))
  dir <- file.path(base, paste0("pageshare-test-", Sys.getpid()))
  ok <- dir.create(dir, showWarnings = FALSE)
  skip_if_not(ok && file.exists(file.path(dir, "cgroup.procs")), "cannot make a memory cgroup here")
  peak <- if (length(v1)) "memory.max_usage_in_bytes" else "memory.peak"
  skip_if_not(file.exists(file.path(dir, peak)), "this cgroup reports no memory peak")
  list(dir = dir, peak_file = peak, peak = function() as.numeric(readLines(file.path(dir, peak))),
       remove = function() for (i in 1:100) {
         if (!dir.exists(dir) || suppressWarnings(file.remove(dir))) break
         Sys.sleep(0.1)
       })
}

test_that("with a 64 MB /dev/shm, share() of 100 MB works and puts nothing in /dev/shm", {
  res <- run_with_small_shm(c(
    "library(pageshare)",
    "x <- rnorm(100 * 2^20 / 8)",
    "v <- share(x)",
    "saveRDS(list(shared = is_shared(v), same = identical(sum(v), sum(x)),",
    "             in_shm = list.files('/dev/shm', all.files = TRUE, no.. = TRUE)), out)"))
  expect_true(res$shared)
  expect_true(res$same)
  expect_length(res$in_shm, 0L)
})

test_that("with a 64 MB /dev/shm, every front door shares a 100 MB global, with no warning", {
  skip_if_not_installed("future.apply")
  skip_if_not_installed("foreach")
  res <- run_with_small_shm(c(
    "suppressPackageStartupMessages({library(pageshare); library(future); library(future.apply); library(foreach)})",
    "X <- rnorm(100 * 2^20 / 8)",
    "M <- matrix(X, ncol = 100)",
    "caught <- function(expr) { w <- character()",
    "  v <- withCallingHandlers(expr, warning = function(c) { w <<- c(w, conditionMessage(c)); invokeRestart('muffleWarning') })",
    "  list(value = v, warnings = w) }",
    "plan(shm_multisession, workers = 2)",
    "f <- caught(value(future(c(is_shared(X), sum(X)))))",
    "fl <- caught(future_sapply(1:4, function(i) c(is_shared(X), sum(X) + i)))",
    "plan(sequential)",
    "registerDoShm(cores = 2)",
    "fe <- caught(foreach(i = 1:4, .combine = rbind) %dopar% c(is_shared(X), sum(X) + i))",
    "ma <- caught(memApply(M, 2, function(v) sum(v)))",
    "stop_workers()",
    "saveRDS(list(f = f, fl = fl, fe = fe, ma = ma, sum = sum(X), cols = colSums(M),",
    "             in_shm = list.files('/dev/shm', all.files = TRUE, no.. = TRUE)), out)"))
  expect_identical(res$f$value, c(1, res$sum))
  expect_identical(unname(res$fl$value), rbind(1, res$sum + 1:4))
  expect_identical(unname(res$fe$value), cbind(1, res$sum + 1:4))
  expect_equal(unlist(res$ma$value), unname(res$cols))
  for (door in c("f", "fl", "fe", "ma")) expect_length(res[[door]]$warnings, 0L)
  expect_length(res$in_shm, 0L)
})

test_that("with a 64 MB /dev/shm, the README's example with a 1 GB X shares X within 1.3 x its size", {
  skip_unless_handover()   # without it X is held twice: by the session and by its segment
  skip_if_not_installed("future.apply")
  skip_if_not_installed("foreach")
  skip_if(as.numeric(system("awk '/MemAvailable/ {print $2}' /proc/meminfo", intern = TRUE)) < 6 * 2^20,
          "needs 6 GB of free memory")
  cg <- new_memory_cgroup()
  on.exit(cg$remove(), add = TRUE)
  # The future and foreach lines of README's "30 seconds", in its order, with
  # a 1 GB X instead of 128 MB (and a check that the workers see a view).
  res <- run_with_small_shm(c(
    sprintf("peak_file <- %s", deparse(file.path(cg$dir, basename(cg$peak_file)))),
    "suppressPackageStartupMessages({library(pageshare); library(future.apply); library(foreach)})",
    "n <- 11586L; X <- rnorm(n * n); dim(X) <- c(n, n)      # 1 GB, made without a second copy",
    "y <- rnorm(n)",
    "plan(shm_multisession, workers = 2)",
    "r1 <- future_sapply(seq_len(ncol(X)), function(j) cor(X[, j], y))",
    "seen <- value(future(is_shared(X)))",
    "plan(sequential)",
    "peak_futures <- as.numeric(readLines(peak_file))",
    "registerDoShm(cores = 2)",
    "r2 <- foreach(j = seq_len(ncol(X)), .combine = c) %dopar% cor(X[, j], y)",
    "stop_workers(); plan(sequential)",
    "saveRDS(list(seen = seen, r1 = r1[c(1, n)], r2 = r2[c(1, n)], check = c(cor(X[, 1], y), cor(X[, n], y)),",
    "             peak_futures = peak_futures,",
    "             bytes = 8 * n * n, in_shm = list.files('/dev/shm', all.files = TRUE, no.. = TRUE)), out)"),
    cgroup = cg$dir)
  expect_true(res$seen)
  expect_equal(res$r1, res$check)
  expect_equal(res$r2, res$check)
  expect_length(res$in_shm, 0L)
  ratio <- c(futures = res$peak_futures, pool = cg$peak()) / res$bytes
  # X held twice would be >= 2 x: never.
  expect_true(all(ratio < 1.5), info = sprintf("peak / size(X): %.3f (futures), %.3f (pool)", ratio[1], ratio[2]))
  expect_lte(ratio[["futures"]], 1.3)   # master and its future workers
  expect_lte(ratio[["pool"]], 1.3)      # and then with the foreach pool
})
