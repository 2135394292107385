# Where memfd_create() is refused (a container's seccomp profile), no segment
# and no pool can be made: the front doors that can send plain data do so,
# with the fallback warning, instead of failing.

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

test_that("without memfd_create(), memLapply(), registerDoShm() and mutual_information() send plain data", {
  skip_on_cran()
  skip_if_not_installed("foreach")
  so <- deny_memfd_library()
  got <- run_rscript(c(
    sprintf("dyn.load(%s)", deparse(so)),
    "suppressPackageStartupMessages(library(pageshare))",
    "denied <- .C('pageshare_test_deny_memfd', ok = integer(1))$ok",
    "share_error <- tryCatch({ share(runif(10)); 'shared' }, error = function(e) class(e))",
    "x <- runif(2e5); warned <- character()",
    "quietly <- function(expr) withCallingHandlers(expr, warning = function(w) {",
    "  warned <<- c(warned, class(w)[1]); invokeRestart('muffleWarning') })",
    "mem <- tryCatch(quietly(memLapply(list(x, x + 1), sum, MAX.CORES = 2)), error = function(e) class(e))",
    "registerDoShm(cores = 2); `%dopar%` <- foreach::`%dopar%`",
    "loop <- tryCatch(quietly(foreach::foreach(i = 1:2, .combine = c) %dopar% sum(x + i)), error = function(e) class(e))",
    "y <- rep(1:2, each = 50); X <- matrix(runif(100 * 3), 100)",
    "mi <- tryCatch(mutual_information(X, y, cores = 2), error = function(e) class(e))",
    "stop_workers()",
    "saveRDS(list(denied = denied, share_error = share_error, mem = mem, loop = loop, mi = mi,",
    "             mi_here = mutual_information(X, y, cores = 1), warned = warned, sums = c(sum(x), sum(x + 1), sum(x + 2))), OUT)"))
  s <- got$saved
  if (is.null(s)) stop("the scenario saved nothing: ", paste(got$log, collapse = "\n"))
  expect_identical(s$denied, 0L)
  expect_true("pageshare_permission" %in% s$share_error)   # the premise: no segment can be made
  expect_equal(unlist(s$mem), s$sums[1:2])
  expect_equal(s$loop, s$sums[2:3])
  expect_equal(s$mi, s$mi_here)
  expect_true("pageshare_fallback" %in% s$warned)
})
