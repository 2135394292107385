# A worker whose master is gone exits within seconds, also in the middle of a
# long task: a shm_multisession worker running a future and a pool worker
# (registerDoShm()) running a foreach iteration, the master killed with
# SIGKILL, with SIGTERM, or killed and left unreaped (a zombie). The master is
# a child R session, so that this session is never the one killed.

# The master's code (runs in the child session): one worker of each kind, both
# busy with a 60 s task; writes its own pid and the workers' to `dir`/pids and
# a file per task once the task runs on its worker.
watchdog_master <- function(dir, libs) {
  .libPaths(libs)
  suppressPackageStartupMessages({
    library(pageshare)
    library(future)
    library(foreach)
  })
  # (future >= 1.40: futures run on pageshare's pool, the pool registerDoShm()
  # uses, so it needs a worker for each; before, the future's worker is
  # multisession's)
  pool <- packageVersion("future") >= "1.40.0"
  plan(shm_multisession, workers = I(if (pool) 2L else 1L))
  future_pid <- value(future(Sys.getpid()))
  future_started <- file.path(dir, "future-started")
  f <- future({
    writeLines("", future_started)
    Sys.sleep(60)
  })
  registerDoShm(cores = if (pool) 2L else 1L)
  pool_pid <- foreach(i = 1L) %dopar% Sys.getpid()
  writeLines(format(c(Sys.getpid(), future_pid, pool_pid[[1L]])), file.path(dir, "pids.tmp"))
  file.rename(file.path(dir, "pids.tmp"), file.path(dir, "pids"))
  pool_started <- file.path(dir, "pool-started")
  foreach(i = 1L, .export = "pool_started") %dopar% {
    writeLines("", pool_started)
    Sys.sleep(60)
  }
  value(f)
}
environment(watchdog_master) <- globalenv()

start_time_of <- function(pid) .Call(pageshare:::ps_process_start_time, as.integer(pid))

# Gone: no such process any more (its pid not reused by a later one), or a zombie.
is_gone <- function(pid, start) {
  now <- start_time_of(pid)
  is.na(now) || now != start || pageshare:::process_gone(pid)
}

state_of <- function(pid) {
  line <- tryCatch(readLines(sprintf("/proc/%d/stat", pid), warn = FALSE)[1L], error = function(e) "")
  sub("^.*\\) ([A-Za-z]).*$", "\\1", line)
}

wait_for <- function(cond, timeout) {
  deadline <- Sys.time() + timeout
  repeat {
    if (cond()) return(TRUE)
    if (Sys.time() > deadline) return(FALSE)
    Sys.sleep(0.05)
  }
}

# Starts a master (`how`: "callr", a child of this session that processx reaps;
# "zombie", a child of a shell that does not reap it until told), waits until
# both workers run their long task, kills the master with `signal` and checks
# that both workers are gone within 5 s. Whatever happens, the master is reaped
# and the workers this test started are killed (by pid, if still the same
# processes).
check_workers_exit <- function(signal, how = "callr") {
  dir <- tempfile("watchdog-")
  dir.create(dir)
  procs <- list()      # pid -> start time, of the master and its workers
  shell <- NULL
  master <- NULL
  on.exit({
    for (pid in names(procs)) {
      if (!is_gone(as.integer(pid), procs[[pid]])) tools::pskill(as.integer(pid), tools::SIGKILL)
    }
    if (!is.null(shell) && shell$is_alive()) {
      try(shell$write_input("\n"), silent = TRUE)  # its `wait` reaps the master
      if (!isTRUE(tryCatch({ shell$wait(5000); !shell$is_alive() }, error = function(e) FALSE))) shell$kill()
    }
    if (!is.null(master)) {
      if (master$is_alive()) master$kill()
      master$wait(5000)
    }
    unlink(dir, recursive = TRUE)
  }, add = TRUE)

  if (how == "callr") {
    master <- callr::r_bg(watchdog_master, args = list(dir = dir, libs = .libPaths()),
                          libpath = .libPaths(), stdout = file.path(dir, "out"), stderr = "2>&1")
  } else {
    # The shell keeps its child unreaped while it waits in `read`.
    saveRDS(watchdog_master, file.path(dir, "master.rds"))
    code <- sprintf("readRDS(%s)(%s, %s)", deparse(file.path(dir, "master.rds")), deparse(dir),
                    paste(deparse(.libPaths()), collapse = ""))
    script <- sprintf("%s -e %s >%s 2>&1 & read x; wait", shQuote(file.path(R.home("bin"), "Rscript")),
                      shQuote(code), shQuote(file.path(dir, "out")))
    shell <- processx::process$new("sh", c("-c", script), stdin = "|")
  }

  ready <- wait_for(function() all(file.exists(file.path(dir, c("pids", "future-started", "pool-started")))), 60)
  log <- function() paste(c("", tryCatch(readLines(file.path(dir, "out")), error = function(e) "")), collapse = "\n")
  if (file.exists(file.path(dir, "pids"))) {
    pids <- as.integer(readLines(file.path(dir, "pids")))
    for (pid in pids) procs[[as.character(pid)]] <- start_time_of(pid)
  }
  expect_true(ready, info = paste("the master did not get its workers busy:", log()))
  if (!ready) return(invisible())
  master_pid <- pids[1L]
  workers <- pids[-1L]
  if (how == "callr") expect_identical(master_pid, master$get_pid())
  expect_length(unique(workers), 2L)
  expect_false(any(workers == master_pid))
  expect_false(any(vapply(workers, function(p) is_gone(p, procs[[as.character(p)]]), logical(1))))

  tools::pskill(master_pid, signal)
  killed <- Sys.time()
  expect_true(wait_for(function() is_gone(master_pid, procs[[as.character(master_pid)]]), 5))
  if (how == "zombie") {
    expect_identical(state_of(master_pid), "Z") # what the workers see: killed, not reaped
  }
  gone <- wait_for(function() all(vapply(workers, function(p) is_gone(p, procs[[as.character(p)]]), logical(1))), 5)
  took <- as.numeric(difftime(Sys.time(), killed, units = "secs"))
  expect_true(gone, info = sprintf("workers %s still run %.1f s after their master was killed",
                                   paste(workers, collapse = ", "), took))
  # Nothing of the workers' left in the segment directory (the master shared nothing).
  segs <- pageshare::shared_segments(all = TRUE)$name
  expect_false(any(vapply(pids, function(p) any(grepl(sprintf(".%d.", p), segs, fixed = TRUE)), logical(1))))
  invisible(took)
}

skip_unless_watchdog_testable <- function() {
  skip_on_os(c("windows", "mac", "solaris"))
  skip_if_not(file.exists("/proc/self/stat"), "no /proc")
  skip_if_not_installed("callr")
  skip_if_not_installed("processx")
  skip_if_not_installed("future")
  skip_if_not_installed("foreach")
}

test_that("a worker's start-time helpers see this process and no other", {
  skip_if_not(file.exists("/proc/self/stat"), "no /proc")
  me <- pageshare:::master_identity()
  expect_identical(me$pid, Sys.getpid())
  expect_true(is.double(me$start) && me$start > 0)
  expect_identical(start_time_of(Sys.getpid()), me$start)
  # The watchdog never watches its own process, and bad arguments are errors.
  expect_false(.Call(pageshare:::ps_watch_master, Sys.getpid(), me$start))
  expect_false(pageshare:::watch_master(Sys.getpid(), me$start))
  expect_error(.Call(pageshare:::ps_watch_master, -1L, me$start), class = "pageshare_bad_argument")
  expect_error(.Call(pageshare:::ps_watch_master, 1L, NA_real_), class = "pageshare_bad_argument")
  expect_error(.Call(pageshare:::ps_process_start_time, NA_integer_), class = "pageshare_bad_argument")
})

test_that("busy workers exit when their master is killed with SIGKILL", {
  skip_unless_watchdog_testable()
  check_workers_exit(tools::SIGKILL)
})

test_that("busy workers exit when their master is killed with SIGTERM", {
  skip_unless_watchdog_testable()
  check_workers_exit(tools::SIGTERM)
})

test_that("busy workers exit when their master is killed but not reaped (a zombie)", {
  skip_unless_watchdog_testable()
  check_workers_exit(tools::SIGKILL, how = "zombie")
})

# The master's code for the next test (runs in the child session): a pool of
# two workers, one busy with a long task, both mapping a shared object, and a
# forked child of the master (mcparallel()) alive, which holds the master's
# ends of the workers' sockets. Writes its pid, the workers' and the child's.
forking_master <- function(dir, libs) {
  .libPaths(libs)
  suppressPackageStartupMessages(library(pageshare))
  x <- share(as.double(seq_len(2^20)))
  start_workers(2L)
  pids <- pageshare:::pool_pids()
  stopifnot(all(unlist(shm_map(1:2, function(i, x) sum(x) > 0, x = x))))
  busy <- shm_call(function(x) { s <- sum(x); Sys.sleep(60); s }, x)
  child <- parallel::mcparallel(Sys.sleep(60))
  Sys.sleep(0.5)   # (the long task has begun)
  writeLines(format(c(Sys.getpid(), pids, child$pid)), file.path(dir, "pids.tmp"))
  file.rename(file.path(dir, "pids.tmp"), file.path(dir, "pids"))
  Sys.sleep(60)
}
environment(forking_master) <- globalenv()

test_that("pool workers end within a second of their master's kill -9 while a fork of it lives", {
  skip_unless_watchdog_testable()
  dir <- tempfile("watchdog-fork-")
  dir.create(dir)
  procs <- list()
  master <- NULL
  on.exit({
    for (pid in names(procs)) {
      if (!is_gone(as.integer(pid), procs[[pid]])) tools::pskill(as.integer(pid), tools::SIGKILL)
    }
    if (!is.null(master)) {
      if (master$is_alive()) master$kill()
      master$wait(5000)
    }
    unlink(dir, recursive = TRUE)
  }, add = TRUE)
  master <- callr::r_bg(forking_master, args = list(dir = dir, libs = .libPaths()),
                        libpath = .libPaths(), stdout = file.path(dir, "out"), stderr = "2>&1")
  ready <- wait_for(function() file.exists(file.path(dir, "pids")), 60)
  expect_true(ready, info = paste(c("", tryCatch(readLines(file.path(dir, "out")), error = function(e) "")),
                                  collapse = "\n"))
  if (!ready) return(invisible())
  pids <- as.integer(readLines(file.path(dir, "pids")))
  for (pid in pids) procs[[as.character(pid)]] <- start_time_of(pid)
  master_pid <- pids[1L]
  workers <- pids[2:3]
  child <- pids[4L]
  expect_false(any(vapply(pids, function(p) is_gone(p, procs[[as.character(p)]]), logical(1))))

  tools::pskill(master_pid, tools::SIGKILL)
  killed <- Sys.time()
  seen_gone <- rep(NA_real_, length(workers))
  deadline <- killed + 10
  while (anyNA(seen_gone) && Sys.time() < deadline) {
    for (i in which(is.na(seen_gone))) {
      if (is_gone(workers[i], procs[[as.character(workers[i])]])) {
        seen_gone[i] <- as.numeric(difftime(Sys.time(), killed, units = "secs"))
      }
    }
    Sys.sleep(0.01)
  }
  expect_false(is_gone(child, procs[[as.character(child)]]))  # the fork still held the sockets
  expect_false(anyNA(seen_gone), info = sprintf("workers %s still run 10 s after their master was killed",
                                               paste(workers[is.na(seen_gone)], collapse = ", ")))
  # (each worker sees its master's end at once; the margin is for a loaded
  # machine: inst/benchmarks/worker-exit-with-fork.R measures the delay)
  expect_lt(max(seen_gone, 0, na.rm = TRUE), 3)
})
