# Segments are anonymous memory files (memfd): the kernel frees one with the
# last descriptor and mapping of it, so what a process leaves behind is at most
# the index entry of a name it registered.

# Descriptors of pageshare memfds this process holds.
held_memfds <- function() {
  links <- Sys.readlink(list.files("/proc/self/fd", full.names = TRUE))
  sum(startsWith(links, "/memfd:pageshare."), na.rm = TRUE)
}

index_entry <- function(ns, var) {
  file.path(getOption("pageshare.dir"), paste0("pageshare-", system("id -u", intern = TRUE)),
            paste0("pageshare.n.", ns, ".", var))
}

test_that("kill -9 of an owner: its segments go, its index entries are stale until a lookup or sweep", {
  # An index of this test's own: any other pageshare session of this user (one
  # that loads pageshare, or looks a name up) would remove a stale entry of the
  # shared index before this test looks at it.
  dir <- tempfile("index-")
  dir.create(dir, mode = "0700")
  old_env <- Sys.getenv("PAGESHARE_DIR", unset = NA)
  old <- options(pageshare.dir = dir)
  Sys.setenv(PAGESHARE_DIR = dir)   # (the background owners' index too)
  on.exit({
    options(old)
    if (is.na(old_env)) Sys.unsetenv("PAGESHARE_DIR") else Sys.setenv(PAGESHARE_DIR = old_env)
    unlink(dir, recursive = TRUE)
  }, add = TRUE)
  dead <- background_owner(2L, register = "kill_test")
  live <- background_owner(1L, register = "live_test")
  on.exit({ dead$proc$kill(); live$proc$kill() }, add = TRUE)
  expect_true(all(c("pageshare.n.kill_test.r", "pageshare.n.live_test.r") %in% shared_segments(all = TRUE)$name))
  got <- unserialize(dead$handle)
  expect_identical(sum(got), sum(as.double(seq_len(1000) + 1)))   # a live owner's handle maps
  rm(got); invisible(gc())
  tools::pskill(dead$proc$get_pid(), tools::SIGKILL)
  dead$proc$wait(5000)
  expect_false(dead$proc$is_alive())
  # the segment itself is gone with its owner: a handle of it is a classed error
  expect_error(unserialize(dead$handle), class = "pageshare_segment_gone")
  expect_true(file.exists(index_entry("kill_test", "r")))          # stale entry left
  expect_false("pageshare.n.kill_test.r" %in% shared_segments(all = TRUE)$name)
  removed <- sweep_shared()
  expect_true("pageshare.n.kill_test.r" %in% removed)
  expect_false(file.exists(index_entry("kill_test", "r")))
  expect_true("pageshare.n.live_test.r" %in% shared_segments(all = TRUE)$name)
  # a lookup removes a stale entry too
  again <- background_owner(1L, register = "again_test")
  tools::pskill(again$proc$get_pid(), tools::SIGKILL)
  again$proc$wait(5000)
  expect_error(retrieveViews("again_test", "r"), class = "pageshare_not_registered")
  expect_false(file.exists(index_entry("again_test", "r")))
  expect_true("pageshare.n.live_test.r" %in% shared_segments(all = TRUE)$name)
  live$proc$kill()
  live$proc$wait(5000)
  sweep_shared()
  expect_false("pageshare.n.live_test.r" %in% shared_segments(all = TRUE)$name)
})

test_that("a normal exit leaves no index entry", {
  callr::r(function() {
    library(pageshare)
    keep <- list(share(as.double(1:100)), share(1:100))
    registerVariables("exit_test", list(a = 1:3))
    invisible()
  })
  expect_false(file.exists(index_entry("exit_test", "a")))
  expect_false(any(grepl("exit_test", shared_segments(all = TRUE)$name, fixed = TRUE)))
})

test_that("an exit finalizer can read a view", {
  # Regression: views were finalized at exit too, so an exit finalizer of the
  # user's that ran later read a freed View (segfault at quit).
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script), add = TRUE)
  writeLines(c(
    "library(pageshare)",
    "e <- new.env()",
    "reg.finalizer(e, function(e) cat('at exit:', sum(e$x), e$x[2], '\\n'), onexit = TRUE)",
    "e$x <- share(as.double(1:2e5))"
  ), script)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE))
  expect_null(attr(out, "status"))
  expect_true(any(out == "at exit: 20000100000 2 "), info = paste(out, collapse = "\n"))
})

test_that("unloading the package releases what the process held", {
  res <- callr::r(function(held_memfds, entry) {
    library(pageshare)
    v <- share(rnorm(1000))
    registerVariables("unload_test", list(a = 1:3))
    h <- with_handles(serialize(v, NULL))
    before <- c(held_memfds(), file.exists(entry))
    unloadNamespace("pageshare")
    list(before = before, after = c(held_memfds(), file.exists(entry)), still_readable = length(v) == 1000, h = h)
  }, args = list(held_memfds = held_memfds, entry = index_entry("unload_test", "a")))
  expect_equal(res$before, c(2, 1))
  expect_equal(res$after, c(0, 0))
  expect_true(res$still_readable)
})

test_that("a forked child never releases its parent's segments", {
  skip_on_os("windows")
  v <- share(as.double(1:1000))
  h <- with_handles(serialize(v, NULL))
  # the child reads the view, then releases everything it holds (as an unload
  # would): that must not touch the parent's segment
  res <- parallel::mclapply(1:2, function(i) {
    x <- sum(v)
    .Call(pageshare:::ps_release_all)
    x
  }, mc.cores = 2)
  expect_identical(res[[1]], sum(as.double(1:1000)))
  expect_true(shared_info(v)$owned_here)
  other <- callr::r(function(h) { library(pageshare); sum(unserialize(h)) }, args = list(h = h))
  expect_identical(other, sum(as.double(1:1000)))
})

test_that("forked children's segments go with them (mclapply)", {
  skip_on_os("windows")
  before <- held_memfds()
  made <- list()
  for (k in 1:5) {
    r <- parallel::mclapply(1:4, function(i) {
      v <- share(rnorm(1e6))
      list(sum = sum(v), pid = Sys.getpid(), memfd = sub(" \\(deleted\\)$", "", shared_info(v)$memfd))
    }, mc.cores = 2)
    expect_true(all(vapply(r, function(x) is.numeric(x$sum), TRUE)))
    made <- c(made, r)
  }
  expect_length(made, 20L)
  # A memfd's memory goes with the last descriptor and mapping of it: the
  # children that made them are gone (mclapply() may return while they are
  # still exiting), and this process holds none of them.
  expect_true(pids_gone(unique(vapply(made, `[[`, 0L, "pid"))))
  expect_lte(held_memfds(), before)
  here <- c(Sys.readlink(list.files("/proc/self/fd", full.names = TRUE)), readLines("/proc/self/maps"))
  names <- vapply(made, `[[`, "", "memfd")
  expect_true(all(startsWith(names, "/memfd:pageshare.")))
  expect_false(any(vapply(names, function(n) any(grepl(n, here, fixed = TRUE)), TRUE)))
})

test_that("more shared memory than allowed is a classed R error, never a crash", {
  old <- options(pageshare.max_shared_bytes = held_bytes_now() + 8 * 2^20)
  on.exit(options(old), add = TRUE)
  small <- share(as.double(1:1000))                      # fits
  expect_true(is_shared(small))
  err <- tryCatch(share(as.double(seq_len(2e6))), error = function(e) e)   # 16 MB
  expect_s3_class(err, "pageshare_no_space")           # below pageshare_error: the backends fall back
  expect_s3_class(err, "pageshare_error")
  expect_match(conditionMessage(err), "not enough shared memory")
  expect_match(conditionMessage(err), "15.3 MiB")
  expect_match(conditionMessage(err), "pageshare.max_shared_bytes", fixed = TRUE)
  expect_identical(sum(small), sum(as.double(1:1000)))   # R keeps running
  expect_error(registerVariables("full", list(big = as.double(seq_len(2e6)))), "not enough shared memory")
  expect_error(retrieveViews("full", "big"), class = "pageshare_not_registered")
  rm(small)
  invisible(gc())
})

test_that("thousands of live segments keep R's sockets below FD_SETSIZE (regression)", {
  # The owner holds one descriptor per segment. Had they taken the low numbers,
  # R's next socket would pass FD_SETSIZE and select() abort the process.
  fds_before <- as.integer(list.files("/proc/self/fd"))
  views <- lapply(1:1500, function(i) share(rnorm(8) + i))
  new <- setdiff(as.integer(list.files("/proc/self/fd")), fds_before)
  expect_gte(length(new), 1500)
  expect_true(all(new >= 1024))
  cl <- local_cluster(1L)
  expect_identical(parallel::clusterCall(cl, function(v) sum(v), views[[1500]])[[1]], sum(views[[1500]]))
  rm(views)
  forget_shared()
  invisible(gc())
})

test_that("a write to a view whose segment nobody holds any more falls back to a full copy", {
  ns <- paste0("t_unlinked_", Sys.getpid())
  x <- rnorm(1e4)
  registerVariables(ns, list(x = x))
  v <- retrieveViews(ns, "x")$x
  releaseViews(ns, "x")
  releaseVariables(ns, "x")                  # released; the mapping stays valid
  expect_identical(range(v), range(x))       # R 4.2 asks range() for a writeable pointer
  dt <- data.table::data.table(v = v)
  as_global_code(dt[1, v := 0])
  expect_identical(dt$v[1], 0)
  expect_identical(v[-1], x[-1])
})
