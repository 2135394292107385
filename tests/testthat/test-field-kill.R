# kill -9 (and SIGTERM) of a master holding 1 GB of shared objects, with
# shm_multisession workers and a registerDoShm() pool, during a share() and
# during a running future: every worker exits, no process holds or maps a
# segment any of them made (so the kernel has freed them), and nothing of
# pageshare is left but the index entry of a registered name, which
# sweep_shared() removes. Only this test's own processes are measured (other
# sessions on the machine may use shared memory meanwhile); how soon all this
# happens is reported, not asserted (PAGESHARE_FIELD_KILL_LOG). The master is
# a child R session, so that this session is never the one killed.

# The master's code (runs in the child). `moment`: "share" (signalled while a
# second 1 GB share() copies) or "future" (while a future using the shared
# object sleeps on a worker). Writes `dir`/pids (master, future workers, pool
# workers) and markers for the test to wait on.
field_master <- function(dir, libs, moment, ns) {
  .libPaths(libs)
  suppressPackageStartupMessages({
    library(pageshare)
    library(future)
    library(foreach)
  })
  put <- function(name, lines = "") {
    writeLines(lines, file.path(dir, paste0(name, ".tmp")))
    file.rename(file.path(dir, paste0(name, ".tmp")), file.path(dir, name))
  }
  # 1 GB of real pages (not ALTREP, not rnorm's 5 s).
  x <- numeric(2^27)
  x[] <- 1
  x <- share(x)
  registerVariables(ns, list(r = 1:3))
  plan(shm_multisession, workers = 2L)
  # Two concurrent futures run on the two workers (the pool's).
  fs <- lapply(1:2, function(i) future({ Sys.sleep(0.5); c(Sys.getpid(), tempdir()) }))
  future_workers <- vapply(fs, value, character(2))
  registerDoShm(cores = 2L)
  # The pool's workers map the shared object too.
  sums <- foreach(i = 1:2) %dopar% sum(x)
  pool_pids <- pageshare:::pool_pids()
  # Killed R sessions leave their tempdir: the test removes these.
  put("tmpdirs", c(tempdir(), future_workers[2, ],
                   unlist(pageshare:::pool_call_each(tempdir))))
  if (moment == "future") {
    running <- file.path(dir, "running")
    f <- future({
      s <- sum(x)    # maps the segment before announcing itself
      writeLines(format(Sys.getpid()), paste0(running, ".tmp"))
      file.rename(paste0(running, ".tmp"), running)
      Sys.sleep(60)
      s
    })
  }
  put("pids", format(c(Sys.getpid(), as.integer(future_workers[1, ]), pool_pids)))
  if (moment == "share") {
    y <- numeric(2^27)
    y[] <- 2
    put("sharing")
    y <- share(y)
    put("shared")
    Sys.sleep(60)
  } else {
    value(f)
  }
}
environment(field_master) <- globalenv()

# Bytes of the pageshare segments process `pid` holds (kB): the sizes of the
# memfds among its descriptors.
fk_memfd_kb <- function(pid) {
  fds <- list.files(sprintf("/proc/%d/fd", pid), full.names = TRUE)
  links <- suppressWarnings(Sys.readlink(fds))
  sum(file.size(fds[startsWith(links, "/memfd:pageshare.")]), na.rm = TRUE) / 1024
}

# Memory the pageshare segments of process `pid` take so far (kB): their
# allocated blocks, which grow while a copy into a new segment is under way.
fk_memfd_allocated_kb <- function(pid) {
  fds <- list.files(sprintf("/proc/%d/fd", pid), full.names = TRUE)
  memfds <- fds[startsWith(suppressWarnings(Sys.readlink(fds)), "/memfd:pageshare.")]
  if (!length(memfds)) return(0)
  out <- suppressWarnings(system2("stat", c("-L", "-c", "%b*%B", memfds), stdout = TRUE, stderr = FALSE))
  sum(vapply(out, function(e) eval(parse(text = e)), 0), na.rm = TRUE) / 1024
}

fk_start_time <- function(pid) .Call(pageshare:::ps_process_start_time, as.integer(pid))

# Gone: no such process (or a later one with its pid), or a zombie (a zombie
# has released its memory and descriptors).
fk_gone <- function(pid, start) {
  now <- fk_start_time(pid)
  is.na(now) || now != start || pageshare:::process_gone(pid)
}

fk_wait <- function(cond, timeout, step = 0.01) {
  deadline <- Sys.time() + timeout
  repeat {
    if (cond()) return(TRUE)
    if (Sys.time() > deadline) return(FALSE)
    Sys.sleep(step)
  }
}

# Processes that hold (descriptor) or map a segment made by one of `pids`, and
# those of `pids` that hold any pageshare memfd: "pid: what".
fk_segment_holders <- function(pids) {
  made_by <- sprintf("memfd:pageshare.a.%d.", pids)
  hits <- character()
  for (p in list.files("/proc", pattern = "^[0-9]+$")) {
    links <- suppressWarnings(Sys.readlink(list.files(file.path("/proc", p, "fd"), full.names = TRUE)))
    # (processes of others, init included, may not be readable: they are not ours)
    maps <- tryCatch(suppressWarnings(readLines(file.path("/proc", p, "maps"), warn = FALSE)),
                     error = function(e) character())
    seen <- c(links, maps)
    theirs <- seen[Reduce(`|`, lapply(made_by, function(m) grepl(m, seen, fixed = TRUE)), FALSE)]
    if (as.integer(p) %in% pids) theirs <- c(theirs, links[startsWith(links, "/memfd:pageshare.")])
    if (length(theirs)) hits <- c(hits, paste0(p, ": ", unique(theirs)))
  }
  hits
}


fk_index_dir <- function() {
  file.path(getOption("pageshare.dir", "/dev/shm"), paste0("pageshare-", system("id -u", intern = TRUE)))
}

# One case: start the master, signal it at `moment`, measure. Whatever happens,
# every process this started is killed (by pid, if still the same process) and
# the master reaped.
check_field_kill <- function(signal, moment) {
  dir <- tempfile("field-kill-")
  dir.create(dir)
  ns <- sprintf("fieldkill%d%s%d", Sys.getpid(), moment, signal)
  entry <- file.path(fk_index_dir(), paste0("pageshare.n.", ns, ".r"))
  procs <- list()   # pid -> start time
  master <- NULL
  on.exit({
    for (pid in names(procs)) {
      if (!fk_gone(as.integer(pid), procs[[pid]])) tools::pskill(as.integer(pid), tools::SIGKILL)
    }
    # (wait: no survivor may outlive its case)
    fk_wait(function() all(vapply(names(procs), function(p) fk_gone(as.integer(p), procs[[p]]), logical(1))), 5)
    if (!is.null(master)) {
      if (master$is_alive()) master$kill()
      master$wait(5000)
    }
    sweep_shared()
    if (file.exists(file.path(dir, "tmpdirs"))) {
      tmps <- readLines(file.path(dir, "tmpdirs"))
      unlink(tmps[grepl("/Rtmp[^/]+$", tmps)], recursive = TRUE)
    }
    unlink(dir, recursive = TRUE)
  }, add = TRUE)

  shm_files_before <- list.files("/dev/shm", pattern = "^pageshare\\.", all.files = TRUE)
  master <- callr::r_bg(field_master, args = list(dir = dir, libs = .libPaths(), moment = moment, ns = ns),
                        libpath = .libPaths(), stdout = file.path(dir, "out"), stderr = "2>&1")
  log <- function() paste(c("", tryCatch(readLines(file.path(dir, "out")), error = function(e) "")), collapse = "\n")
  marker <- if (moment == "share") "sharing" else "running"
  ready <- fk_wait(function() all(file.exists(file.path(dir, c("pids", marker)))) || !master$is_alive(), 90, 0.005)
  if (file.exists(file.path(dir, "pids"))) {
    pids <- as.integer(readLines(file.path(dir, "pids")))
    for (pid in pids) procs[[as.character(pid)]] <- fk_start_time(pid)
  }
  ready <- ready && all(file.exists(file.path(dir, c("pids", marker))))
  expect_true(ready, info = paste("the master did not get to the moment:", log()))
  if (!ready) return(invisible())
  master_pid <- pids[1L]
  workers <- pids[-1L]
  expect_identical(master_pid, master$get_pid())
  # (futures run on the pool itself: the same 2 workers)
  expect_length(unique(workers), 2L)
  expect_false(any(vapply(workers, function(p) fk_gone(p, procs[[as.character(p)]]), logical(1))))
  expect_true(file.exists(entry))

  copied_mb <- NA_real_
  busy <- NA_integer_
  if (moment == "share") {
    # Signal once the copy is under way (a quarter of it in the new segment).
    at_marker <- fk_memfd_allocated_kb(master_pid)
    fk_wait(function() fk_memfd_allocated_kb(master_pid) - at_marker > 256 * 1024 || file.exists(file.path(dir, "shared")),
            5, 0.002)
    copied_mb <- (fk_memfd_allocated_kb(master_pid) - at_marker) / 1024
  } else {
    busy <- as.integer(readLines(file.path(dir, "running")))
    expect_true(busy %in% workers[1:2])
  }
  shmem_at_kill <- fk_memfd_kb(master_pid)
  expect_gt(shmem_at_kill, 1000 * 1024)                    # the master does hold 1 GB
  tools::pskill(master_pid, signal)
  killed <- Sys.time()
  expect_true(fk_wait(function() fk_gone(master_pid, procs[[as.character(master_pid)]]), 5))
  if (moment == "share") {
    # Killed inside share(): it never returned.
    expect_false(any(file.exists(file.path(dir, c("shared", "shared.tmp")))))
  }

  # When each worker is first seen gone.
  gone_at <- rep(NA_real_, length(workers))
  fk_wait(function() {
    for (i in which(is.na(gone_at))) {
      if (fk_gone(workers[i], procs[[as.character(workers[i])]])) {
        gone_at[i] <<- as.numeric(difftime(Sys.time(), killed, units = "secs"))
      }
    }
    !anyNA(gone_at)
  }, 6, 0.005)
  last_gone <- Sys.time()
  expect_false(anyNA(gone_at), info = sprintf("workers %s still run 6 s after their master's signal",
                                               paste(workers[is.na(gone_at)], collapse = ", ")))

  # Their segments are freed: nobody holds or maps one any more.
  fk_wait(function() length(fk_segment_holders(pids)) == 0L, 10, 0.01)
  back_after <- as.numeric(difftime(Sys.time(), last_gone, units = "secs"))
  expect_identical(fk_segment_holders(pids), character())

  # The workers' R temporary directories went with them (a worker whose master is gone removes
  # its session's before _exit(), which skips R's own clean-up).
  worker_tmps <- readLines(file.path(dir, "tmpdirs"))[-1L]
  expect_true(fk_wait(function() !any(dir.exists(worker_tmps)), 2),
              info = paste("left:", paste(worker_tmps[dir.exists(worker_tmps)], collapse = ", ")))

  # Nobody holds or maps a segment of theirs; no file of pageshare's but the
  # stale index entry, which a sweep removes.
  expect_identical(setdiff(list.files("/dev/shm", pattern = "^pageshare\\.", all.files = TRUE), shm_files_before),
                   character())
  stale <- file.exists(entry)
  removed <- sweep_shared()
  if (stale) expect_true(paste0("pageshare.n.", ns, ".r") %in% removed)
  expect_false(file.exists(entry))
  expect_false(any(startsWith(list.files(fk_index_dir(), all.files = TRUE), paste0("pageshare.n.", ns, "."))))

  master$wait(5000)
  expect_false(master$is_alive())
  figures <- sprintf("%s %s: workers (future, future, pool, pool) gone after %s s (max %.2f); master's segments at signal %.0f kB (%s); segments freed %.2f s after the last worker; index entry %s",
                     if (signal == tools::SIGKILL) "SIGKILL" else "SIGTERM", moment,
                     paste0(sprintf("%.2f", gone_at), ifelse(workers %in% busy, " (busy)", ""), collapse = "/"),
                     max(gone_at, na.rm = TRUE),
                     shmem_at_kill,
                     if (is.na(copied_mb)) "future running" else sprintf("%.0f MB of the second share copied", copied_mb),
                     back_after,
                     if (stale) "stale until sweep" else "withdrawn")
  # The measured figures, for whoever asks (env PAGESHARE_FIELD_KILL_LOG).
  log_file <- Sys.getenv("PAGESHARE_FIELD_KILL_LOG")
  if (nzchar(log_file)) cat(figures, "\n", sep = "", file = log_file, append = TRUE)
  invisible(figures)
}

skip_unless_field_kill_testable <- function() {
  skip_on_cran()
  skip_on_os(c("windows", "mac", "solaris"))
  skip_if_not(file.exists("/proc/meminfo"), "no /proc")
  skip_if_not_installed("callr")
  skip_if_not_installed("future")
  skip_if_not_installed("foreach")
  avail <- as.numeric(sub("^MemAvailable: +([0-9]+) kB$", "\\1",
                          grep("^MemAvailable:", readLines("/proc/meminfo"), value = TRUE)))
  skip_if(avail < 6 * 2^20, sprintf("needs 6 GB of available memory, %.1f GB are", avail / 2^20))
}

for (sig in c("SIGKILL", "SIGTERM")) {
  for (moment in c("share", "future")) {
    local({
      sig <- sig
      moment <- moment
      what <- if (moment == "share") "during a share()" else "during a running future"
      test_that(sprintf("%s of a master holding 1 GB shared, %s: workers exit, their segments and files are released", sig, what), {
        skip_unless_field_kill_testable()
        check_field_kill(get(sig, envir = asNamespace("tools")), moment)
      })
    })
  }
}
