test_that("kill -9 of an owner: the sweep reclaims its segments, live owners keep theirs", {
  dead <- background_owner(2L)
  live <- background_owner(1L)
  on.exit({ dead$proc$kill(); live$proc$kill() }, add = TRUE)
  present <- shared_segments(all = TRUE)
  expect_true(all(c(dead$names, live$names) %in% present))
  tools::pskill(dead$proc$get_pid(), tools::SIGKILL)
  dead$proc$wait(5000)
  expect_false(dead$proc$is_alive())
  expect_true(all(dead$names %in% shared_segments(all = TRUE)))   # leaked until swept
  removed <- sweep_shared()
  expect_true(all(dead$names %in% removed))
  expect_false(any(dead$names %in% shared_segments(all = TRUE)))
  expect_true(all(live$names %in% shared_segments(all = TRUE)))
  # a fresh load of the package in another process sweeps too
  again <- background_owner(1L)
  tools::pskill(again$proc$get_pid(), tools::SIGKILL)
  again$proc$wait(5000)
  callr::r(function() { library(pageshare); invisible() })
  expect_false(any(again$names %in% shared_segments(all = TRUE)))
  expect_true(all(live$names %in% shared_segments(all = TRUE)))
  live$proc$kill()
  live$proc$wait(5000)
  sweep_shared()
  expect_false(any(live$names %in% shared_segments(all = TRUE)))
})

test_that("a normal exit unlinks the segments the process owned", {
  names <- callr::r(function() {
    library(pageshare)
    keep <- list(share(as.double(1:100)), share(1:100))
    registerVariables("exit_test", list(a = 1:3))
    vapply(keep, function(v) shared_info(v)$name, "")
  })
  present <- shared_segments(all = TRUE)
  expect_false(any(names %in% present))
  expect_false(any(grepl("exit_test", present, fixed = TRUE)))
})

test_that("an exit finalizer can read a view, and the exit still unlinks it", {
  # Regression: views were finalized at exit too, so an exit finalizer of the
  # user's that ran later read a freed View (segfault at quit).
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script), add = TRUE)
  writeLines(c(
    "library(pageshare)",
    "e <- new.env()",
    "reg.finalizer(e, function(e) cat('at exit:', sum(e$x), e$x[2], '\\n'), onexit = TRUE)",
    "e$x <- share(as.double(1:2e5))",
    "cat('segment:', shared_info(e$x)$name, '\\n')"
  ), script)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE))
  expect_null(attr(out, "status"))
  expect_true(any(out == "at exit: 20000100000 2 "), info = paste(out, collapse = "\n"))
  name <- sub("^segment: (\\S+) $", "\\1", grep("^segment: ", out, value = TRUE))
  expect_length(name, 1L)
  expect_false(name %in% shared_segments(all = TRUE))
})

test_that("unloading the package unlinks what the process owned", {
  res <- callr::r(function() {
    library(pageshare)
    v <- share(rnorm(1000))
    registerVariables("unload_test", list(a = 1:3))
    name <- shared_info(v)$name
    before <- c(name, "pageshare.n.unload_test.a") %in% shared_segments(all = TRUE)
    unloadNamespace("pageshare")
    after <- file.exists(file.path("/dev/shm", c(name, "pageshare.n.unload_test.a")))
    list(before = before, after = after, still_readable = length(v) == 1000)
  })
  expect_identical(res$before, c(TRUE, TRUE))
  expect_identical(res$after, c(FALSE, FALSE))
  expect_true(res$still_readable)
})

test_that("a forked child never unlinks its parent's segments", {
  skip_on_os("windows")
  v <- share(as.double(1:1000))
  name <- shared_info(v)$name
  # the child reads the view, then releases everything it "owns" (as an unload
  # or a normal exit would): that must not touch the parent's segment
  res <- parallel::mclapply(1:2, function(i) {
    x <- sum(v)
    .Call(pageshare:::ps_release_all)
    x
  }, mc.cores = 2)
  expect_identical(res[[1]], sum(as.double(1:1000)))
  expect_true(name %in% shared_segments(all = TRUE))
})

test_that("a full segment directory is an R error, never a crash", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  dir <- tempfile("pageshare-small-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  mounted <- suppressWarnings(system2("mount", c("-t", "tmpfs", "-o", "size=8m", "tmpfs", dir),
                                      stdout = FALSE, stderr = FALSE)) == 0
  skip_if_not(mounted, "cannot mount a small tmpfs here (needs root)")
  on.exit({ rm(list = intersect("small", ls())); invisible(gc()); system2("umount", dir) }, add = TRUE, after = FALSE)
  old <- options(pageshare.dir = dir)
  on.exit(options(old), add = TRUE, after = FALSE)
  small <- share(as.double(1:1000))                      # fits
  expect_true(is_shared(small))
  err <- tryCatch(share(as.double(seq_len(2e6))), error = function(e) e)   # 16 MB
  expect_s3_class(err, "pageshare_no_space")           # below pageshare_error: the backends fall back
  expect_s3_class(err, "pageshare_error")
  expect_match(conditionMessage(err), "not enough shared memory")
  expect_match(conditionMessage(err), "15.3 MB")
  expect_match(conditionMessage(err), "free")
  expect_identical(sum(small), sum(as.double(1:1000)))   # R keeps running
  expect_error(registerVariables("full", list(big = as.double(seq_len(2e6)))), "not enough shared memory")
  expect_length(setdiff(list.files(dir), shared_info(small)$name), 0L)   # nothing half-made left
  rm(small)
  invisible(gc())
})

test_that("thousands of live segments hold no file descriptors (regression)", {
  # Each segment once kept its file open; with ~1000 live segments R's socket
  # descriptors passed FD_SETSIZE and select() aborted the process.
  fds_before <- length(list.files("/proc/self/fd"))
  views <- lapply(1:1500, function(i) share(rnorm(8) + i))
  expect_lt(length(list.files("/proc/self/fd")) - fds_before, 10)
  cl <- local_cluster(1L)
  expect_identical(parallel::clusterCall(cl, function(v) sum(v), views[[1500]])[[1]], sum(views[[1500]]))
  rm(views)
  forget_shared()
  invisible(gc())
})

test_that("a write to a view whose segment name is gone falls back to a full copy", {
  ns <- paste0("t_unlinked_", Sys.getpid())
  x <- rnorm(1e4)
  registerVariables(ns, list(x = x))
  v <- retrieveViews(ns, "x")$x
  releaseViews(ns, "x")
  releaseVariables(ns, "x")                  # unlinked; the mapping stays valid
  expect_identical(range(v), range(x))       # R 4.2 asks range() for a writeable pointer
  dt <- data.table::data.table(v = v)
  as_global_code(dt[1, v := 0])
  expect_identical(dt$v[1], 0)
  expect_identical(v[-1], x[-1])
})
