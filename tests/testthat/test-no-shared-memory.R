# Where memfd_create() is refused (a container's seccomp profile), no segment
# can be made: every front door still runs, on pageshare's pool (whose rings
# then live in an unnamed file, see src/rust/pageshare-pool/src/region.rs) or
# on the user's cluster, and sends its large values as plain data with one
# fallback warning per call instead of failing.

# The routine that makes memfd_create() fail with EPERM in the calling process
# and every process it starts (a seccomp filter, as a container's profile).
deny_memfd_library <- function() {
  compiled_probe("denymemfd", c(
    "#include <errno.h>",
    "#include <stddef.h>",
    "#include <linux/filter.h>",
    "#include <linux/seccomp.h>",
    "#include <sys/prctl.h>",
    "#include <sys/syscall.h>",
    "void pageshare_test_deny_memfd(int *ok) {",
    "  struct sock_filter f[] = {",
    "    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),",
    "    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 0, 1),",
    "    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),",
    "    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),",
    "  };",
    "  struct sock_fprog p = { .len = 4, .filter = f };",
    "  *ok = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p);",
    "}"))
}

# Runs each door's code (in the global environment, as a user's script) in a
# fresh R whose memfd_create() is refused; returns per door its value (or
# error), the classes of the warnings it gave and the pool's pids after it.
without_memfd <- function(doors) {
  so <- deny_memfd_library()
  got <- run_rscript(c(
    sprintf("dyn.load(%s)", deparse(so)),
    "suppressPackageStartupMessages(library(pageshare))",
    "denied <- .C('pageshare_test_deny_memfd', ok = integer(1))$ok",
    "share_error <- tryCatch({ share(runif(10)); 'shared' }, error = function(e) class(e))",
    "x <- runif(2e5); X <- matrix(x, ncol = 4); MX <- matrix(runif(1000 * 600), 1000); y <- rep(1:2, 500)",
    "`%dopar%` <- foreach::`%dopar%`",
    "run <- function(code) {",
    "  warned <- character()",
    "  value <- tryCatch(withCallingHandlers(eval(parse(text = code), globalenv()), warning = function(w) {",
    "    warned <<- c(warned, class(w)[1]); invokeRestart('muffleWarning') }),",
    "    error = function(e) structure(list(class = class(e), message = conditionMessage(e)), class = 'failed'))",
    "  list(value = value, warned = warned, pool = pageshare:::pool_pids())",
    "}",
    sprintf("doors <- %s", paste(deparse(doors), collapse = "\n")),
    "res <- lapply(doors, run)",
    "stop_workers()",
    "saveRDS(list(denied = denied, share_error = share_error, res = res, me = Sys.getpid(),",
    "             x = x, mi_here = mutual_information(MX, y, cores = 1)), OUT)"),
    timeout = 600)
  s <- got$saved
  if (is.null(s)) stop("the scenario saved nothing: ", paste(got$log, collapse = "\n"))
  expect_identical(s$denied, 0L)
  expect_true("pageshare_permission" %in% s$share_error)   # the premise: no segment can be made
  s
}

# Each door's value, the pids that ran it, and whether it sent a large value
# (then exactly one fallback warning) or only small ones (then none).
pool_doors <- list(
  memLapply = "list(v = unlist(memLapply(list(x, x + 1), function(v) c(sum(v), Sys.getpid()), MAX.CORES = 2)), big = TRUE)",
  memApply = "list(v = unlist(memApply(X, 2, function(v) c(sum(v), Sys.getpid()), MAX.CORES = 2)), big = TRUE)",
  foreach = paste("{ registerDoShm(cores = 2); on.exit(foreach::registerDoSEQ());",
                  "list(v = foreach::foreach(i = 1:2, .combine = c) %dopar% c(sum(x + i), Sys.getpid()), big = TRUE) }"),
  shm_call = "list(v = c(shm_value(shm_call(function(v) sum(v), x)), shm_value(shm_call(Sys.getpid))), big = TRUE)",
  shm_map = "list(v = unlist(shm_map(1:2, function(i, v) c(sum(v + i), Sys.getpid()), v = x)), big = TRUE)",
  small = "list(v = unlist(memLapply(1:2, function(i) c(i, Sys.getpid()), MAX.CORES = 2)), big = FALSE)",
  result = "list(v = shm_value(shm_call(function(n) as.double(seq_len(n)), 3e5)), big = FALSE)",
  # (more than one block of columns: the blocks go to the workers)
  mi = "list(v = mutual_information(MX, y, cores = 2), big = TRUE)")

test_that("without memfd_create(), every door of the pool runs on the pool and sends plain data with one warning", {
  skip_on_cran()
  skip_if_not_installed("foreach")
  s <- without_memfd(pool_doors)
  x <- s$x
  X <- matrix(x, ncol = 4)
  pairs <- function(v) matrix(v, nrow = 2)
  for (door in names(pool_doors)) {
    r <- s$res[[door]]
    expect_false(inherits(r$value, "failed"), info = paste(door, r$value$message))
    if (inherits(r$value, "failed")) next
    expect_length(r$pool, 2L)
    expect_identical(r$warned, if (r$value$big) "pageshare_fallback" else character(), info = door)
  }
  v <- function(door) s$res[[door]]$value$v
  expect_equal(pairs(v("memLapply"))[1, ], c(sum(x), sum(x + 1)))
  expect_equal(pairs(v("memApply"))[1, ], colSums(X))
  expect_equal(pairs(v("foreach"))[1, ], c(sum(x + 1), sum(x + 2)))
  expect_equal(v("shm_call")[1], sum(x))
  expect_equal(pairs(v("shm_map"))[1, ], c(sum(x + 1), sum(x + 2)))
  expect_equal(pairs(v("small"))[1, ], c(1, 2))
  expect_identical(v("result"), as.double(seq_len(3e5)))   # a large result comes back plainly
  expect_equal(v("mi"), s$mi_here)
  # The work ran on the pool's workers, not in this process.
  ran <- c(pairs(v("memLapply"))[2, ], pairs(v("memApply"))[2, ], pairs(v("foreach"))[2, ],
           v("shm_call")[2], pairs(v("shm_map"))[2, ], pairs(v("small"))[2, ])
  expect_false(s$me %in% ran)
  expect_true(all(ran %in% unlist(lapply(s$res, `[[`, "pool"))))
})

test_that("without memfd_create(), a cluster the user passes and shm_multisession send plain data with one warning", {
  skip_on_cran()
  skip_if_not_installed("foreach")
  skip_if_not_installed("future")
  s <- without_memfd(list(
    cluster_foreach = paste("{ cl <- parallel::makePSOCKcluster(2); on.exit(parallel::stopCluster(cl));",
                            "registerDoShm(cl); on.exit(foreach::registerDoSEQ(), add = TRUE);",
                            "foreach::foreach(i = 1:2, .combine = c) %dopar% sum(x + i) }"),
    cluster_memLapply = paste("{ cl <- parallel::makePSOCKcluster(2); on.exit(parallel::stopCluster(cl));",
                              "unlist(memLapply(list(x, x + 1), sum, CLUSTER = cl)) }"),
    future = paste("{ future::plan(shm_multisession, workers = 2); on.exit(future::plan(future::sequential));",
                   "future::value(future::future(sum(x))) }")))
  x <- s$x
  expected <- list(cluster_foreach = c(sum(x + 1), sum(x + 2)), cluster_memLapply = c(sum(x), sum(x + 1)),
                   future = sum(x))
  for (door in names(expected)) {
    r <- s$res[[door]]
    expect_false(inherits(r$value, "failed"), info = paste(door, r$value$message))
    expect_equal(r$value, expected[[door]], info = door)
    expect_identical(r$warned, "pageshare_fallback", info = door)
  }
})
