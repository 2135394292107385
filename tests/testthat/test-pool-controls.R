# shm_everywhere(), shm_resolved(), shm_value(timeout =) and shm_status():
# the controls of pageshare's pool (R/pool-controls.R).

# The values of `f()` on every worker of the pool, in slot order.
on_each_worker <- function(f) pageshare:::pool_call_each(f)

test_that("shm_everywhere() runs its code on every worker, with its values, in order", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  shm_everywhere(library(tools), k = 41)
  shm_everywhere(answer <- k + 1)
  got <- on_each_worker(function() list(answer = get("answer", globalenv()), tools = "package:tools" %in% search()))
  expect_length(got, 2L)
  for (g in got) expect_identical(g, list(answer = 42, tools = TRUE))
  expect_identical(shm_status()$setup, 2L)
})

test_that("a large value given to shm_everywhere() reaches the workers as shared pages", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  big <- runif(3e5)
  shm_everywhere(NULL, ref = big)
  got <- on_each_worker(function() c(shared = pageshare::is_shared(ref), sum = sum(ref)))
  for (g in got) expect_identical(g, c(shared = 1, sum = sum(big)))
})

test_that("replies larger than a ring arrive whole while shm_resolved() polls them", {
  # shm_resolved() (and a future's resolved()) reads what has arrived without
  # waiting: a reply that streams through its ring must survive polls that
  # end in its middle, from two workers at once, without a worker replaced.
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  pids <- shm_status()$workers$pid
  # (several MB serialized, no single vector near the sharing threshold: inline)
  reply <- function(i) lapply(seq_len(2e5), function(k) k + i)
  for (round in 1:3) {
    tasks <- lapply(1:2, function(i) shm_call(reply, i))
    polls <- 0L
    while (!all(vapply(tasks, shm_resolved, NA))) polls <- polls + 1L
    for (i in 1:2) expect_identical(shm_value(tasks[[i]]), reply(i))
  }
  expect_gt(polls, 0L)
  expect_identical(shm_status()$workers$pid, pids)
})

test_that("a worker started after shm_everywhere() runs the set-up before its first task", {
  skip_on_cran()
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  shm_everywhere(a <- 1)
  shm_everywhere(b <- a + 1, unused = "x")
  victim <- pageshare:::pool_pids()[2L]
  tools::pskill(victim, tools::SIGKILL)
  expect_true(pids_gone(victim))
  got <- suppressWarnings(on_each_worker(function() c(a, b)))   # (the death is a warning)
  expect_false(victim %in% pageshare:::pool_pids())
  for (g in got) expect_identical(g, c(1, 2))
})

test_that("set-up code that fails is an error naming the worker, and is not kept", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  e <- tryCatch(shm_everywhere(stop("no such set-up")), error = function(e) e)
  expect_s3_class(e, "pageshare_task_failed")
  expect_match(conditionMessage(e), sprintf("worker process (%s)", paste(pageshare:::pool_pids(), collapse = "|")))
  expect_identical(conditionMessage(e$parent), "no such set-up")
  expect_identical(shm_status()$setup, 0L)
  expect_equal(shm_value(shm_call(function() 3)), 3)   # the pool works on
})

test_that("set-up code that fails on a later worker fails that worker's tasks, saying why", {
  skip_on_cran()
  on.exit(stop_workers(), add = TRUE)
  flag <- tempfile()
  start_workers(2)
  shm_everywhere(if (file.exists(flag)) stop("the flag is up"), flag = flag)
  file.create(flag)
  victim <- pageshare:::pool_pids()[2L]
  tools::pskill(victim, tools::SIGKILL)
  expect_true(pids_gone(victim))
  e <- tryCatch(suppressWarnings(on_each_worker(function() 1)), error = function(e) e)
  expect_s3_class(e, "pageshare_task_failed")
  expect_s3_class(e$parent, "pageshare_worker_setup")
  expect_match(conditionMessage(e$parent), "failed on worker process [0-9]+, so it runs no task: the flag is up")
  # a new pool starts without the set-up
  stop_workers()
  start_workers(2)
  expect_identical(shm_status()$setup, 0L)
  expect_equal(unlist(on_each_worker(function() exists("flag", globalenv()))), c(FALSE, FALSE))
})

test_that("set-up code whose worker dies before reading it runs on the slot's next worker, once on each", {
  skip_on_cran()
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  pids <- pageshare:::pool_pids()
  log <- tempfile("setup")
  # The second worker is stopped: its set-up message waits unread until the
  # first worker's set-up kills it (after a pause in which the message is
  # written; were it not, the message would go to the next worker anyway).
  tools::pskill(pids[2L], tools::SIGSTOP)
  expect_warning(
    shm_everywhere({
      cat(Sys.getpid(), "\n", file = log, append = TRUE)
      if (Sys.getpid() == first) {
        Sys.sleep(0.5)
        tools::pskill(second, tools::SIGKILL)
      }
    }, log = log, first = pids[1L], second = pids[2L]),
    sprintf("worker process %d .* died while it was idle", pids[2L]), class = "pageshare_worker_replaced")
  now <- pageshare:::pool_pids()
  expect_identical(now[1L], pids[1L])
  expect_false(now[2L] %in% pids)
  # (once each: not twice on the first worker, not missing on the new one)
  expect_setequal(as.integer(readLines(log)), now)
  expect_length(readLines(log), 2L)
  expect_identical(shm_status()$setup, 1L)
})

test_that("a message for each worker whose worker died unread goes to the slot's next worker, not another", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  pids <- pageshare:::pool_pids()
  tools::pskill(pids[2L], tools::SIGSTOP)
  tasks <- pageshare:::pool_submit_each(pageshare:::pool_call_each_message(Sys.getpid, list()))
  tools::pskill(pids[2L], tools::SIGKILL)
  expect_true(pids_gone(pids[2L]))
  expect_warning(got <- vapply(pageshare:::pool_await_each(tasks), shm_value, 0L),
                 class = "pageshare_worker_replaced")
  expect_identical(got, pageshare:::pool_pids())
  expect_identical(got[1L], pids[1L])
  expect_false(got[2L] %in% pids)
  expect_identical(vapply(tasks, function(t) t$pid, 0L), got)
})

test_that("shm_value(timeout =) gives up in time and the task goes on; shm_resolved() does not wait", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  flag <- tempfile()
  task <- shm_call(function(f) {
    while (!file.exists(f)) Sys.sleep(0.01)
    7
  }, flag)
  expect_false(shm_resolved(task))
  expect_error(shm_value(task, timeout = 0), class = "pageshare_timeout")
  e <- tryCatch(shm_value(task, timeout = 0.05), error = function(e) e)
  expect_s3_class(e, "pageshare_timeout")
  expect_match(conditionMessage(e), "no value within `timeout` = 0.05 seconds")
  expect_false(shm_resolved(task))
  file.create(flag)
  expect_identical(shm_value(task, timeout = Inf), 7)
  expect_true(shm_resolved(task))
  expect_identical(shm_value(task, timeout = 0), 7)
  done <- shm_call(function() 1)
  while (!shm_resolved(done)) Sys.sleep(0.001)
  expect_identical(shm_value(done), 1)
})

test_that("shm_value(timeout =) and shm_resolved() of a task of a stopped pool say it is lost", {
  start_workers(1)
  task <- shm_call(function() 1)
  stop_workers()
  expect_error(shm_resolved(task), class = "pageshare_worker_died")
  expect_error(shm_value(task, timeout = 1), class = "pageshare_worker_died")
})

test_that("shm_status() names the workers and what this session shares", {
  on.exit(stop_workers(), add = TRUE)
  stop_workers()
  expect_output(print(shm_status()), "pageshare pool: not running")
  start_workers(2)
  x <- share(runif(2e5))
  s <- shm_status()
  expect_s3_class(s, "pageshare_status")
  expect_identical(s$workers$pid, pageshare:::pool_pids())
  expect_true(all(s$workers$rss_bytes > 0))
  out <- capture.output(print(s))
  expect_match(out[1L], "pageshare pool: 2 worker\\(s\\), set-up calls: 0")
  for (pid in s$workers$pid) expect_true(any(grepl(sprintf("worker %d: .*[KM]iB", pid), out)))
  expect_match(out[length(out)], "segments shared by this session: [1-9][0-9]*, ")
})

# shm_cancel(). Tasks that wait for a gate file: they are running, or wait,
# until the test lets them go; each leaves a mark when it begins.
blocking_task <- function(gate, mark) {
  file.create(mark)
  while (!file.exists(gate)) Sys.sleep(0.005)
  Sys.getpid()
}
# A pool of 2 workers and a directory for gate and mark files, both gone when
# the calling test ends.
local_cancel_pool <- function(env = parent.frame()) {
  dir <- tempfile("cancel-")
  dir.create(dir)
  do.call(base::on.exit, list(bquote({ stop_workers(); unlink(.(dir), recursive = TRUE) }), add = TRUE), envir = env)
  start_workers(2)
  dir
}
test_that("shm_cancel() takes back a task waiting for a worker: it never runs", {
  dir <- local_cancel_pool()
  gate <- file.path(dir, "gate")
  mark <- function(i) file.path(dir, paste0("began-", i))
  # (each worker holds 2 tasks, one running and one ready: the 5th waits)
  tasks <- lapply(1:5, function(i) shm_call(blocking_task, gate, mark(i)))
  expect_true(shm_cancel(tasks[[5L]]))
  expect_true(shm_resolved(tasks[[5L]]))
  expect_false(shm_cancel(tasks[[5L]]))
  expect_output(print(tasks[[5L]]), "cancelled")
  file.create(gate)
  pids <- vapply(tasks[1:4], shm_value, integer(1), timeout = 60)
  expect_setequal(unique(pids), pageshare:::pool_pids())
  expect_error(shm_value(tasks[[5L]]), class = "pageshare_task_cancelled")
  expect_false(file.exists(mark(5L)))
  expect_identical(shm_value(shm_call(function() 42)), 42)
  expect_false(file.exists(mark(5L)))
})

test_that("shm_cancel() of a running task ends its worker; the task behind it runs on another", {
  dir <- local_cancel_pool()
  running <- shm_call(blocking_task, file.path(dir, "never"), file.path(dir, "began-1"))
  wait_for_file(file.path(dir, "began-1"))
  other <- shm_call(blocking_task, file.path(dir, "gate"), file.path(dir, "began-2"))
  wait_for_file(file.path(dir, "began-2"))
  # (both workers run one task: the next goes behind the first's, in slot order)
  behind <- shm_call(function() Sys.getpid())
  victim <- pageshare:::pool_pids()[1L]
  expect_no_warning(expect_true(shm_cancel(running)))
  expect_true(pids_gone(victim))
  expect_error(shm_value(running), class = "pageshare_task_cancelled")
  file.create(file.path(dir, "gate"))
  expect_true(shm_value(other, timeout = 60) %in% pageshare:::pool_pids())
  got <- shm_value(behind, timeout = 60)
  expect_false(got == victim)
  expect_length(pageshare:::pool_pids(), 2L)
  expect_false(victim %in% pageshare:::pool_pids())
  expect_identical(shm_value(shm_call(function() 7L)), 7L)
})

test_that("shm_cancel() of a task sent behind another drops its value; nothing to cancel is FALSE", {
  dir <- local_cancel_pool()
  gate <- file.path(dir, "gate")
  first <- shm_call(blocking_task, gate, file.path(dir, "began-1"))
  second <- shm_call(blocking_task, gate, file.path(dir, "began-2"))
  behind <- shm_call(blocking_task, gate, file.path(dir, "began-3"))
  pids <- pageshare:::pool_pids()
  expect_true(shm_cancel(behind))
  file.create(gate)
  expect_true(shm_value(first, timeout = 60) %in% pids)
  expect_true(shm_value(second, timeout = 60) %in% pids)
  expect_error(shm_value(behind), class = "pageshare_task_cancelled")
  expect_identical(pageshare:::pool_pids(), pids)   # (no worker was ended)
  done <- shm_call(function() 1)
  expect_identical(shm_value(done), 1)
  expect_false(shm_cancel(done))
  expect_error(shm_cancel(), class = "pageshare_error")
  expect_error(shm_cancel(list()), class = "pageshare_error")
})
