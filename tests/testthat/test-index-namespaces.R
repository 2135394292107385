# An index entry's holder may live in another PID namespace that shares the
# index directory (two containers sharing /dev/shm): its pid means nothing
# here and its /proc/<pid>/fd cannot be read. The entry must stay, its name
# must not be taken by anyone else, and only its holder's death (kill -9) may
# make it stale. The holder is an R session started by `unshare -p -f
# --mount-proc` (root only).

test_that("an entry held in another PID namespace is never removed nor taken", {
  skip_on_os(c("windows", "mac", "solaris"))
  skip_unless_root("unshare -p (a new PID namespace) needs CAP_SYS_ADMIN")
  unshare <- Sys.which("unshare")
  if (!nzchar(unshare)) skip("needs root and util-linux's unshare")
  if (system2(unshare, c("-p", "-f", "--mount-proc", "true"), stdout = FALSE, stderr = FALSE) != 0L) {
    skip("needs root: `unshare -p -f --mount-proc` is refused here (no CAP_SYS_ADMIN?)")
  }
  skip_if_not_installed("processx")

  dir <- tempfile("ps-ns-")
  dir.create(dir)
  old <- options(pageshare.dir = dir)
  ready <- tempfile("ps-ns-ready-")
  script <- tempfile("ps-ns-", fileext = ".R")
  writeLines(c(
    "library(pageshare)",
    "registerVariables('psns', list(v = as.double(1:10)))",
    sprintf("writeLines(as.character(Sys.getpid()), %s)", deparse(ready)),
    "Sys.sleep(600)"
  ), script)
  libs <- paste(.libPaths(), collapse = ":")
  # --kill-child: if unshare goes, the namespace's first process (the R
  # session) is killed with it.
  p <- processx::process$new(
    unshare, c("-p", "-f", "--mount-proc", "--kill-child", file.path(R.home("bin"), "Rscript"), script),
    env = c("current", R_LIBS = libs, PAGESHARE_DIR = dir), stdout = NULL, stderr = NULL
  )
  holder <- NA_integer_
  on.exit({
    if (!is.na(holder)) tools::pskill(holder, tools::SIGKILL)
    if (p$is_alive()) p$kill()
    p$wait()
    try(releaseVariables("psns", intersect("v", pageshare:::registered_here("psns"))), silent = TRUE)
    options(old)
    unlink(c(dir, ready, script), recursive = TRUE)
  }, add = TRUE)
  expect_identical(wait_for_lines(ready), "1") # the first process of its own PID namespace
  # Its pid here: the child of unshare.
  children <- readLines(sprintf("/proc/%d/task/%d/children", p$get_pid(), p$get_pid()), warn = FALSE)
  holder <- as.integer(strsplit(children, " ")[[1L]][1L])
  expect_false(is.na(holder))

  index <- file.path(dir, sprintf("pageshare-%d", my_uid))
  entry <- file.path(index, list.files(index, all.files = TRUE, no.. = TRUE))
  expect_length(entry, 1L)
  bytes <- readBin(entry, "raw", 4096L)

  expect_identical(sweep_shared(), character())
  expect_true(basename(entry) %in% shared_segments(all = TRUE)$name)
  expect_identical(pageList(), list())
  # alive but not reachable from here: a classed error, not "not registered"
  expect_error(retrieveViews("psns", "v"), class = "pageshare_permission", regexp = "another PID namespace")
  expect_error(registerVariables("psns", list(v = 1)), class = "pageshare_name_taken")
  # a fresh session of this namespace loading the package (which sweeps)
  fresh <- callr::r(function() {
    library(pageshare)
    got <- tryCatch(retrieveViews("psns", "v"), error = function(e) e)
    taken <- tryCatch(registerVariables("psns", list(v = 2)), error = function(e) e)
    list(swept = sweep_shared(), got = class(got), taken = class(taken))
  }, env = c(callr::rcmd_safe_env(), PAGESHARE_DIR = dir))
  expect_identical(fresh$swept, character())
  expect_true("pageshare_permission" %in% fresh$got)
  expect_true("pageshare_name_taken" %in% fresh$taken)
  expect_identical(readBin(entry, "raw", 4096L), bytes) # untouched
  expect_true(p$is_alive())

  # kill -9 of the holder: the kernel drops its lock, the entry is stale
  tools::pskill(holder, tools::SIGKILL)
  p$wait()
  holder <- NA_integer_
  expect_identical(sweep_shared(), basename(entry))
  expect_length(list.files(index, all.files = TRUE, no.. = TRUE), 0L)
  registerVariables("psns", list(v = 3))
  expect_identical(pageList(), list("psns.v"))
  releaseVariables("psns", "v")
  expect_length(list.files(index, all.files = TRUE, no.. = TRUE), 0L)
})
