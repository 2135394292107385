# pageshare's own worker pool (R/pool*.R): tasks, maps, random numbers,
# errors, dead workers, progress, and nothing left behind.

pool_pids <- function() .Call(pageshare:::ps_pool_pids)
`%||%` <- function(a, b) if (is.null(a)) b else a

test_that("a task runs on a worker and its value comes back", {
  on.exit(stop_workers(), add = TRUE)
  pids <- start_workers(2)
  expect_length(pids, 2L)
  expect_false(Sys.getpid() %in% pids)
  expect_identical(shm_value(shm_call(function(x, y) x + y, 1L, y = 2L)), 3L)
  tasks <- lapply(1:6, function(i) shm_call(function(i) c(i, Sys.getpid()), i))
  got <- lapply(tasks, shm_value)
  expect_identical(vapply(got, `[`, 1, 1), as.numeric(1:6))
  expect_setequal(unique(vapply(got, `[`, 1, 2)), pids)
  expect_null(shm_value(shm_call(function() NULL)))
  # a value already collected is returned again
  t <- shm_call(function() "once")
  expect_identical(shm_value(t), "once")
  expect_identical(shm_value(t), "once")
})

test_that("the pool's events are named lists, by the wire's names", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  next_event <- function(timeout, idle) .Call(pageshare:::ps_pool_next_event_delivered, timeout, idle)
  expect_identical(next_event(NA_real_, FALSE), list(event = "idle"))
  expect_identical(next_event(0.05, TRUE), list(event = "timed_out"))
  # a plain call's reply is delivered to its task on the way
  t <- shm_call(function() 42L)
  expect_identical(next_event(NA_real_, FALSE), list(event = "delivered"))
  expect_identical(t$reply$value, 42L)
  # a reply that may hold handles (a value worth sharing) comes to R whole,
  # its fields by name
  t <- shm_call(function(n) as.numeric(seq_len(n)), 3e5)
  ev <- next_event(NA_real_, FALSE)
  expect_named(ev, c("event", "what", "payload", "plain", "value", "relay"))
  expect_identical(ev$event, "reply")
  expect_null(ev$relay)   # (the task wrote nothing and signalled nothing)
  expect_identical(ev$what, t)
  expect_false(ev$plain)
  expect_true(is.raw(ev$payload))
  expect_identical(pageshare:::pool_on_event(ev), "reply")
  expect_identical(shm_value(t), as.numeric(seq_len(3e5)))
})

test_that("a worker of another version of pageshare is refused at start, naming both versions", {
  on.exit({
    Sys.unsetenv("PAGESHARE_POOL_TEST_VERSION")
    stop_workers()
  }, add = TRUE)
  stop_workers()
  # (a variable for tests only: the worker claims this version in its hello)
  Sys.setenv(PAGESHARE_POOL_TEST_VERSION = "0.0.0-other")
  err <- expect_error(start_workers(2), class = "pageshare_worker_setup")
  expect_match(conditionMessage(err), "runs pageshare 0.0.0-other", fixed = TRUE)
  expect_match(conditionMessage(err), sprintf("this session pageshare %s", packageVersion("pageshare")), fixed = TRUE)
  expect_length(pool_pids(), 0L)
  Sys.unsetenv("PAGESHARE_POOL_TEST_VERSION")
  expect_length(start_workers(1), 1L)
  expect_identical(shm_value(shm_call(function() "same version")), "same version")
})

test_that("large arguments reach the worker as views and large values come back as views", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  x <- runif(3e5)
  expect_true(shm_value(shm_call(function(v) pageshare::is_shared(v), x)))
  back <- shm_value(shm_call(function(n) as.numeric(seq_len(n)), 3e5))
  expect_true(is_shared(back))
  expect_identical(back, as.numeric(seq_len(3e5)))
  expect_true(shared_info(back)$owned_here)
})

test_that("a shared argument returned as it came comes back as a view of the same segment", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  x <- share(runif(3e5))
  back <- shm_value(shm_call(function(v) v, x))
  expect_true(is_shared(back))
  expect_identical(back, x)
  expect_identical(shared_info(back)$name, shared_info(x)$name)
  expect_true(shared_info(back)$owned_here)
  # the same for one shared on the way (not a view in the caller) and one
  # returned inside a list, and an invisible value stays a value
  y <- runif(3e5)
  expect_identical(shm_value(shm_call(function(v) v, y)), y)
  expect_identical(shm_value(shm_call(function(v) list(v), x)), list(x))
  expect_identical(shm_value(shm_call(function(v) invisible(v), x)), x)
})

test_that("messages larger than a ring go one at a time to a busy worker (no deadlock)", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  # 320 KB each way: below the sharing threshold, so inline, and larger than a
  # ring's quarter: the second must not be sent while the worker replies to the first
  x <- runif(4e4)
  y <- runif(4e4)
  t1 <- shm_call(function(v) v, x)
  t2 <- shm_call(function(v) v, y)
  expect_identical(shm_value(t2), y)
  expect_identical(shm_value(t1), x)
  expect_identical(lapply(shm_map(list(x, y, x), function(v) v), length), rep(list(4e4L), 3))
})

test_that("a map started while every worker is busy waits for them (never returns NULLs)", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  busy <- lapply(1:2, function(i) shm_call(function() { Sys.sleep(0.3); "done" }))   # (the worker's ring is full)
  expect_identical(shm_map(1:3, function(i) i * 10), list(10, 20, 30))
  expect_identical(memLapply(1:3, function(i) i + 1L), list(2L, 3L, 4L))
  expect_identical(lapply(busy, shm_value), list("done", "done"))
  # the same after a map that failed while its other elements still ran
  expect_error(shm_map(1:4, function(i) if (i == 1) stop("first") else Sys.sleep(0.2)), "first")
  expect_identical(shm_map(1:3, function(i) -i), list(-1L, -2L, -3L))
})

test_that("arguments are values: a symbol or a call is sent as data", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  expect_identical(shm_value(shm_call(identity, quote(a_symbol))), quote(a_symbol))
  expect_identical(shm_value(shm_call(function(e) e, quote(f(x)))), quote(f(x)))
  expect_identical(shm_map(1:2, function(i, s) s, s = quote(b)), list(quote(b), quote(b)))
})

test_that("a plain call passes names, NULL, functions, environments and byte code as values", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  f <- function(a, b = "b", ...) list(a = a, b = b, dots = list(...))
  expect_identical(shm_value(shm_call(f, NULL, extra = 1:3)), list(a = NULL, b = "b", dots = list(extra = 1:3)))
  expect_identical(shm_value(shm_call(f, b = 2, 1)), list(a = 1, b = 2, dots = list()))
  expect_identical(shm_value(shm_call(function(g) g(4), sqrt)), 2)
  expect_identical(shm_value(shm_call(function(e) get("v", e), list2env(list(v = "in env")))), "in env")
  code <- compiler::compile(quote(1 + 1))
  expect_identical(shm_value(shm_call(function(x) typeof(x), code)), "bytecode")
  expect_identical(shm_value(shm_call(nchar, "four")), 4L)
  # an error in one plain call leaves the worker ready for the next
  expect_error(shm_value(shm_call(function() stop("plain boom"))), "plain boom")
  expect_identical(shm_value(shm_call(function(...) sum(...), 1, 2, 3)), 6)
})

test_that("a stream of plain calls: each reply reaches its own task, errors and conditions too", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  f <- function(i) if (i %% 7 == 0) stop("seven ", i) else i * 2
  tasks <- lapply(1:30, function(i) shm_call(f, i))
  got <- lapply(tasks, function(t) tryCatch(shm_value(t), pageshare_task_failed = function(e) conditionMessage(e$parent)))
  expect_identical(got, lapply(1:30, function(i) if (i %% 7 == 0) paste("seven", i) else i * 2))
  # a condition meant to be seen at once (as progressr's updates are) reaches
  # a handler here, from the call that signalled it
  tick <- function(i) {
    signalCondition(structure(class = c("my_tick", "immediateCondition", "condition"),
                              list(message = paste("tick", i), call = NULL)))
    i
  }
  seen <- character()
  withCallingHandlers({
    ticks <- lapply(1:3, function(i) shm_call(tick, i))
    expect_identical(lapply(ticks, shm_value), list(1L, 2L, 3L))
  }, my_tick = function(cond) seen <<- c(seen, conditionMessage(cond)))
  expect_identical(seen, paste("tick", 1:3))
  # between the chunks of a map and a foreach loop's tasks, which leave state on the worker
  expect_identical(shm_map(1:4, function(i) i), as.list(1:4))
  expect_identical(shm_value(shm_call(f, 2)), 4)
  expect_identical(shm_map(1:4, function(i) -i), as.list(-(1:4)))
})

test_that("calls run while R is still sending more (replies read as calls are sent)", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  # Each call leaves a file; R sends the next only once the file of the one
  # before exists, and never waits for a value in between. A worker holds at
  # most two messages, so from the third call on a call reaches the worker
  # only if the replies that came back are read while R sends.
  dir <- tempfile("stream-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  mark <- function(i, dir) { file.create(file.path(dir, i)); i }
  tasks <- list()
  for (i in 1:6) {
    tasks[[i]] <- shm_call(mark, i, dir)
    deadline <- Sys.time() + 30   # (not a bound on the pool: a guard against waiting forever)
    while (!file.exists(file.path(dir, i)) && Sys.time() < deadline) Sys.sleep(0.01)
    expect_true(file.exists(file.path(dir, i)), info = sprintf("call %d ran before R waited for a value", i))
  }
  expect_identical(lapply(tasks, shm_value), as.list(1:6))
})

test_that("a reply with handles read while sending, and a death among read replies", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  big <- shm_call(function(n) as.numeric(seq_len(n)), 3e5)
  small <- lapply(1:10, function(i) { Sys.sleep(0.005); shm_call(function(i) i, i) })
  expect_identical(lapply(small, shm_value), as.list(1:10))
  v <- shm_value(big)
  expect_true(shared_info(v)$owned_here)
  expect_identical(v, as.numeric(seq_len(3e5)))
  # calls before, at and after a worker's death: those before keep their
  # values, the one that killed it fails naming its pid, the later ones run
  # on its replacement
  before <- lapply(1:5, function(i) shm_call(function(i) i, i))
  pid <- pool_pids()
  killer <- shm_call(function() tools::pskill(Sys.getpid(), tools::SIGKILL))
  after <- lapply(1:5, function(i) { Sys.sleep(0.005); shm_call(function(i) -i, i) })
  expect_identical(lapply(before, shm_value), as.list(1:5))
  e <- tryCatch(shm_value(killer), error = function(e) e)
  expect_s3_class(e, "pageshare_worker_died")
  expect_match(conditionMessage(e), as.character(pid))
  expect_identical(lapply(after, shm_value), as.list(-(1:5)))
  expect_true(pids_gone(pid))
})

test_that("a worker looks for stale views only after its master let go of segments", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  pid <- pool_pids()
  io <- sprintf("/proc/%d/io", pid)
  skip_if_not(file.access(io, 4) == 0, "the worker's /proc/PID/io cannot be read here")
  # (each look reads every mapped segment's holder in /proc: counted as read calls)
  reads <- function() as.numeric(sub("^syscr: ", "", grep("^syscr", readLines(io), value = TRUE)))
  segs <- lapply(1:40, function(i) share(runif(2e5)))
  for (s in segs) shm_value(shm_call(function(v) length(v), s))   # (the worker maps all 40)
  # (segments of earlier code that a collection would let go of meanwhile
  # make a look due: let go of them now, and tell the worker)
  invisible(gc())
  shm_value(shm_call(function() NULL))
  before <- reads()
  for (i in 1:20) shm_value(shm_call(function(v) length(v), segs[[1]]))
  for (i in 1:20) shm_value(shm_call(function(i) i, i))
  expect_lt(reads() - before, 40)
  # once the master lets go of segments, the worker's next task drops its views of them
  # (the identity cache forgotten too, so that the master surely lets go now)
  segs[2:40] <- NULL
  rm(s)
  invisible(gc()); forget_shared(); invisible(gc())
  mapped <- function() shm_value(shm_call(function() nrow(pageshare::shared_segments())))
  expect_lte(mapped(), 1L + 1L)   # (segs[[1]], and at most one segment of the call's own)
})

test_that("a plain call follows the threshold as set now, and its rule", {
  on.exit({ options(old); stop_workers() }, add = TRUE)
  old <- options(pageshare.threshold = 1024)
  start_workers(1)
  is_view <- function(v) pageshare::is_shared(v)
  expect_true(shm_value(shm_call(is_view, runif(1000))))
  options(pageshare.threshold = 1e6)
  expect_false(shm_value(shm_call(is_view, runif(1000))))
  options(pageshare.threshold = "a lot")
  expect_error(shm_call(is_view, 1), class = "pageshare_bad_argument")
})

test_that("a large value is taken over when its reply arrives, not when it is collected", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  t1 <- shm_call(function(n) as.numeric(seq_len(n)), 3e5)
  expect_identical(shm_value(shm_call(function() 1)), 1)   # (t1's reply has arrived by now)
  expect_identical(shm_value(shm_call(function() 2)), 2)   # (the worker let go of what it handed over)
  expect_no_warning(v <- shm_value(t1))
  expect_true(shared_info(v)$owned_here)
  expect_identical(v, as.numeric(seq_len(3e5)))
})

test_that("an error in a task keeps the original condition as parent", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  boom <- function() stop(structure(class = c("my_error", "error", "condition"),
                                    list(message = "boom", call = quote(boom()))))
  e <- tryCatch(shm_value(shm_call(boom)), error = function(e) e)
  expect_s3_class(e, "pageshare_task_failed")
  expect_s3_class(e, "pageshare_error")
  expect_s3_class(e$parent, "my_error")
  expect_match(conditionMessage(e), "boom")
  expect_identical(shm_value(shm_call(function() "still here")), "still here")
  expect_error(shm_value(42), class = "pageshare_bad_argument")
})

test_that("shm_map() is lapply() on the workers", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  expect_identical(shm_map(1:50, function(i) i * 2L), lapply(1:50, function(i) i * 2L))
  x <- c(a = 1, b = 2, c = 3)
  expect_identical(shm_map(x, function(v, k) v + k, k = 10), lapply(x, function(v, k) v + k, k = 10))
  df <- data.frame(u = 1:3, v = c("x", "y", "z"))
  expect_identical(shm_map(df, class), lapply(df, class))
  expect_identical(shm_map(list(), identity), list())
  expect_identical(shm_map(NULL, identity), list())
  expect_identical(shm_map(1:5, function(i) NULL), vector("list", 5))
  expect_identical(shm_map(1:3, "sqrt"), lapply(1:3, sqrt))
  big <- matrix(runif(2e5), 1000)
  cols <- shm_map(1:200, function(j, m) sum(m[, j]), m = big)
  expect_equal(unlist(cols), colSums(big))
  expect_error(shm_map(new.env(), identity), class = "pageshare_bad_argument")
  expect_error(shm_map(1:3, identity, .seed = "a"), class = "pageshare_bad_argument")
})

test_that("shm_map() spreads expensive elements and batches cheap ones", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  who <- unlist(shm_map(1:4, function(i) { Sys.sleep(0.2); Sys.getpid() }))
  expect_setequal(unique(who), pool_pids())
  expect_identical(unlist(shm_map(1:3000, function(i) i)), 1:3000)
})

test_that("a map's chunks come from its plan in Rust: every element once, requeued chunks first", {
  # (the sizes themselves: map_plan.rs's tests)
  call <- function(name, ...) .Call(getNativeSymbolInfo(name, "pageshare"), ...)
  id <- 1e6 + sample.int(1000, 1)
  call("ps_map_begin", id, 1000, 2)
  on.exit(call("ps_map_end", id), add = TRUE)
  first <- call("ps_map_next", id)
  expect_identical(first, c(1, 2))                            # a probe first
  second <- call("ps_map_next", id)
  call("ps_map_requeue", id, first[[1]], first[[2]])
  expect_identical(call("ps_map_next", id), first)            # a requeued chunk goes first
  call("ps_map_rate", id, 1e-3)                               # 1 ms each: 10 per chunk
  third <- call("ps_map_next", id)
  expect_identical(third, c(second[[2]] + 1, second[[2]] + 10))
  seen <- c(seq(first[[1]], first[[2]]), seq(second[[1]], second[[2]]), seq(third[[1]], third[[2]]))
  while (!is.null(chunk <- call("ps_map_next", id))) seen <- c(seen, seq(chunk[[1]], chunk[[2]]))
  expect_equal(sort(seen), 1:1000)
  call("ps_map_end", id)
  expect_null(call("ps_map_next", id))                        # an ended map gives nothing
  expect_error(call("ps_map_begin", id, -1, 2), class = "pageshare_bad_argument")
})

test_that("the same seed gives the same numbers with any number of workers", {
  on.exit(stop_workers(), add = TRUE)
  draw <- function(i) c(runif(1), rnorm(1))
  runs <- lapply(c(1, 2, 4), function(n) {
    start_workers(I(n))   # (I(): more workers than cores on purpose)
    shm_map(1:40, draw, .seed = 42)
  })
  expect_identical(runs[[1]], runs[[2]])
  expect_identical(runs[[1]], runs[[3]])
  # element i uses the i-th L'Ecuyer-CMRG stream after the seed
  genv <- globalenv()
  old <- get0(".Random.seed", envir = genv)
  on.exit(if (is.null(old)) rm(".Random.seed", envir = genv) else assign(".Random.seed", old, envir = genv),
          add = TRUE)
  set.seed(42, kind = "L'Ecuyer-CMRG")
  s <- .Random.seed
  expected <- vector("list", 40)
  for (i in 1:40) {
    s <- parallel::nextRNGStream(s)
    assign(".Random.seed", s, envir = genv)
    expected[[i]] <- draw(i)
  }
  RNGkind("default", "default", "default")
  expect_identical(runs[[1]], expected)
  # TRUE draws the seed from the session's generator; the kind is left alone
  set.seed(7)
  a <- shm_map(1:5, draw, .seed = TRUE)
  kind <- RNGkind()
  set.seed(7)
  b <- shm_map(1:5, draw, .seed = TRUE)
  expect_identical(a, b)
  expect_identical(kind[1], "Mersenne-Twister")
})

test_that("an error in shm_map() names the element and keeps the original", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  e <- tryCatch(shm_map(c(a = 1, b = 2, c = 3), function(v) if (v == 2) stop("two!") else v),
                error = function(e) e)
  expect_s3_class(e, "pageshare_task_failed")
  expect_match(conditionMessage(e), 'element 2 ("b")', fixed = TRUE)
  expect_identical(conditionMessage(e$parent), "two!")
  expect_identical(shm_map(1:4, function(i) i), as.list(1:4))
})

test_that("a worker killed in a task is an error naming it, and is replaced", {
  skip_on_cran()
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  before <- pool_pids()
  e <- tryCatch(shm_value(shm_call(function() tools::pskill(Sys.getpid(), tools::SIGKILL))),
                error = function(e) e)
  expect_s3_class(e, "pageshare_worker_died")
  dead <- setdiff(before, pool_pids())
  expect_length(dead, 1L)
  expect_match(conditionMessage(e), as.character(dead))
  expect_length(pool_pids(), 2L)
  expect_true(pids_gone(dead))
  expect_identical(unlist(shm_map(1:100, function(i) i + 1L)), 2:101)
  expect_true(all(pool_pids() > 0L))               # back to full size
  expect_false(any(dead %in% pool_pids()))
  # in a map, too
  e <- tryCatch(shm_map(1:20, function(i) if (i == 5) tools::pskill(Sys.getpid(), tools::SIGKILL) else i),
                error = function(e) e)
  expect_s3_class(e, "pageshare_worker_died")
  expect_match(conditionMessage(e), "shm_map()", fixed = TRUE)
  expect_identical(unlist(shm_map(1:10, identity)), 1:10)
  # one element is named in the singular
  e <- tryCatch(shm_map(7, function(i) tools::pskill(Sys.getpid(), tools::SIGKILL)), error = function(e) e)
  expect_match(conditionMessage(e), "while running element 1 of shm_map()", fixed = TRUE)
})

test_that("a killed worker's temporary directory goes when its session ends", {
  skip_on_cran()
  got <- run_rscript(c(
    "library(pageshare); start_workers(1)",
    "pid <- shm_value(shm_call(Sys.getpid)); dir <- shm_value(shm_call(tempdir))",
    "tools::pskill(pid, tools::SIGKILL)",
    "for (i in 1:100) if (!file.exists(file.path('/proc', pid))) break else Sys.sleep(0.05)",
    "saveRDS(list(dir = dir, session = tempdir(), left = dir.exists(dir)), OUT)",
    "stop_workers()"))
  expect_true(got$saved$left)   # the premise: kill -9 leaves it behind
  expect_true(startsWith(got$saved$dir, got$saved$session))
  expect_false(dir.exists(got$saved$dir))
})

test_that("a worker's last words on its standard error come with the report of its death", {
  skip_on_cran()
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  t <- shm_call(function() {
    cat("first line\nmy last words\n", file = stderr())
    tools::pskill(Sys.getpid(), tools::SIGKILL)
    Sys.sleep(30)
  })
  e <- tryCatch(shm_value(t), error = identity)
  expect_s3_class(e, "pageshare_worker_died")
  expect_match(conditionMessage(e), "Its last words on standard error:\n  first line\n  my last words", fixed = TRUE)
  # a crash (SIGSEGV, 11 on Linux): R's own report of it
  t <- shm_call(function() { tools::pskill(Sys.getpid(), 11L); Sys.sleep(30) })
  e <- tryCatch(shm_value(t), error = identity)
  expect_s3_class(e, "pageshare_worker_died")
  expect_match(conditionMessage(e), "caught segfault", fixed = TRUE)
  # a worker that says nothing: the message as before
  t <- shm_call(function() { tools::pskill(Sys.getpid(), tools::SIGKILL); Sys.sleep(30) })
  e <- tryCatch(shm_value(t), error = identity)
  expect_false(grepl("last words", conditionMessage(e), fixed = TRUE))
})

test_that("a worker killed while idle is replaced before the next task", {
  skip_on_cran()
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  victim <- pool_pids()[1]
  tools::pskill(victim, tools::SIGKILL)
  expect_true(pids_gone(victim))
  expect_warning(got <- lapply(1:6, function(i) shm_value(shm_call(function(i) i, i))),
                 sprintf("worker process %d .* died while it was idle", victim), class = "pageshare_worker_replaced")
  expect_identical(got, as.list(1:6))
  expect_false(victim %in% pool_pids())
  expect_identical(unlist(shm_map(1:10, identity)), 1:10)
  # the only worker of a pool: calls sent to it while it was dead wait for
  # its successor (they never hang)
  start_workers(1)
  victim <- pool_pids()
  tools::pskill(victim, tools::SIGKILL)
  expect_true(pids_gone(victim))
  expect_warning(tasks <- lapply(1:3, function(i) shm_call(function(i) -i, i)), NA)
  expect_warning(got <- lapply(tasks, shm_value), class = "pageshare_worker_replaced")
  expect_identical(got, list(-1L, -2L, -3L))
  expect_length(pool_pids(), 1L)
  expect_false(victim %in% pool_pids())
})

test_that("a worker killed in memApply(), memLapply() or foreach is reported and replaced", {
  skip_on_cran()
  skip_if_not_installed("foreach")
  on.exit(stop_workers(), add = TRUE)
  killer <- function(cond) if (cond) tools::pskill(Sys.getpid(), tools::SIGKILL)
  M <- matrix(as.double(1:40), 4)
  doors <- list(
    memApply = function(k) unlist(memApply(M, 2, function(v, k) { k(v[1] == 21); sum(v) }, VARS = list(k = k))),
    memLapply = function(k) unlist(memLapply(as.list(1:10), function(i, k) { k(i == 7); i }, VARS = list(k = k))),
    foreach = function(k) {
      registerDoShm(cores = 2)
      foreach::foreach(i = 1:10, .combine = c) %dopar% { k(i == 7); i }
    })
  `%dopar%` <- foreach::`%dopar%`
  start_workers(2)
  for (door in names(doors)) {
    before <- pool_pids()
    e <- tryCatch(doors[[door]](killer), error = function(e) e)
    expect_s3_class(e, "pageshare_worker_died")
    dead <- setdiff(before, pool_pids())
    expect_length(dead, 1L)
    expect_match(conditionMessage(e), sprintf("worker process %d ", dead), fixed = TRUE, info = door)
    expect_length(pool_pids(), 2L)
    expect_true(pids_gone(dead), info = door)
    expect_length(doors[[door]](function(cond) NULL), 10L)
    expect_true(all(pool_pids() > 0L), info = door)
  }
  foreach::registerDoSEQ()
})

test_that("a worker that died while idle is named by the next memApply(), memLapply(), foreach or mutual_information()", {
  skip_on_cran()
  skip_if_not_installed("foreach")
  on.exit({ foreach::registerDoSEQ(); stop_workers() }, add = TRUE)
  M <- matrix(as.double(1:40), 4)
  set.seed(2)
  y <- rep(1:2, each = 20)
  MX <- matrix(rnorm(40 * 300), 40)   # (two blocks of columns: both workers)
  `%dopar%` <- foreach::`%dopar%`
  doors <- list(
    memApply = function() unlist(memApply(M, 2, sum)),
    memLapply = function() unlist(memLapply(as.list(1:10), function(i) i)),
    foreach = function() {
      registerDoShm(cores = 2)
      foreach::foreach(i = 1:10, .combine = c) %dopar% i
    },
    mutual_information = function() mutual_information(MX, y, cores = 2))
  expected <- list(memApply = colSums(M), memLapply = 1:10, foreach = 1:10,
                   mutual_information = mutual_information(MX, y, cores = 1))
  start_workers(2)
  for (signal in c(tools::SIGKILL, tools::SIGTERM)) {
    for (door in names(doors)) {
      # (a door that met the death while it ran leaves the slot empty until
      # the pool is next used; the next worker to kill is started here)
      pageshare:::pool_ensure()
      before <- pool_pids()
      expect_length(before, 2L)
      expect_true(all(before > 0L), info = door)
      tools::pskill(before[2L], signal)
      expect_true(pids_gone(before[2L]), info = door)
      w <- NULL
      got <- withCallingHandlers(doors[[door]](), pageshare_worker_replaced = function(cond) {
        w <<- cond
        invokeRestart("muffleWarning")
      })
      expect_s3_class(w, "pageshare_warning")
      expect_match(conditionMessage(w), sprintf("worker process %d .* died while it was idle", before[2L]),
                   info = door)
      expect_equal(got, expected[[door]], info = door)
      expect_false(before[2L] %in% pool_pids())
      expect_true(before[1L] %in% pool_pids(), info = door)   # the live worker stays
    }
  }
})

test_that("progress arrives while a map runs", {
  skip_if_not_installed("progressr")
  on.exit(stop_workers(), add = TRUE)
  old <- options(progressr.enable = TRUE)   # (progressr reports only in interactive sessions by default)
  on.exit(options(old), add = TRUE)
  start_workers(2)
  steps <- 0
  first <- NULL
  got <- withCallingHandlers(
    shm_map(1:20, function(i) { Sys.sleep(0.01); i }, .progress = TRUE),
    progression = function(p) if (identical(p$type, "update")) {
      first <<- first %||% p$amount
      steps <<- steps + p$amount
    })
  expect_identical(got, as.list(1:20))
  expect_equal(steps, 20)
  # (the first update came with the first chunks, not with the whole map)
  expect_lt(first, 20)
})

test_that("what a worker wrote to its standard error can be read back by its slot", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  expect_identical(shm_value(shm_call(function() {
    cat("pageshare-stderr-probe\n", file = stderr())
    1
  })), 1)
  tail_of <- function() .Call(pageshare:::ps_pool_stderr, 1L)
  for (i in 1:50) if (!grepl("pageshare-stderr-probe", tail_of())) Sys.sleep(0.1)
  expect_match(tail_of(), "pageshare-stderr-probe", fixed = TRUE)
  expect_error(.Call(pageshare:::ps_pool_stderr, 2L), class = "pageshare_bad_argument")
})

test_that("stopping the pool ends every worker", {
  start_workers(I(3))
  pids <- pool_pids()
  expect_true(stop_workers())
  expect_true(pids_gone(pids))
  expect_length(pool_pids(), 0L)
  expect_false(stop_workers())
})

test_that("workers end when their master is killed, also in a long task", {
  skip_on_cran()
  lines <- c("library(pageshare)", "start_workers(2)",
             "t <- shm_call(function() Sys.sleep(600))",
             "cat(.Call(pageshare:::ps_pool_pids), sep = '\\n', file = Sys.getenv('PIDS_FILE'))",
             "Sys.sleep(600)")
  script <- tempfile(fileext = ".R")
  pids_file <- tempfile()
  writeLines(lines, script)
  master <- processx::process$new(file.path(R.home("bin"), "Rscript"), script,
                                  env = c("current", PIDS_FILE = pids_file))
  on.exit(master$kill(), add = TRUE)
  pids <- as.integer(wait_for_lines(pids_file, 2))
  expect_false(any(pageshare:::wait_processes_gone(pids, 0)))
  master$kill()
  expect_true(pids_gone(pids))
})

test_that("a task lost to an interrupt is a pageshare_task_interrupted error, not a dead worker", {
  skip_on_cran()
  skip_if_not_installed("callr")
  # (a child session: the interrupt is a real SIGINT, as Ctrl-C sends)
  got <- callr::r(function() {
    library(pageshare)
    start_workers(1)
    pids <- pageshare:::pool_pids()
    task <- shm_call(function() Sys.sleep(30))
    system(sprintf("sh -c 'sleep 1; kill -INT %d' &", Sys.getpid()))
    first <- tryCatch(shm_value(task), interrupt = function(e) "interrupted")
    later <- tryCatch(shm_value(task), error = function(e) e)
    after <- shm_value(shm_call(function() 42))
    stop_workers()
    lost <- shm_call(function() 1)
    stop_workers()
    stopped <- tryCatch(shm_value(lost), error = function(e) e)
    list(first = first, class = class(later), message = conditionMessage(later), after = after,
         stopped = class(stopped))
  }, libpath = .libPaths())
  expect_identical(got$first, "interrupted")
  expect_identical(got$class, c("pageshare_task_interrupted", "pageshare_error", "error", "condition"))
  expect_match(got$message, "interrupted (Ctrl-C)", fixed = TRUE)
  expect_match(got$message, "no worker died", fixed = TRUE)
  expect_identical(got$after, 42)
  # (a task of a pool stopped by stop_workers() is not said to be interrupted)
  expect_false("pageshare_task_interrupted" %in% got$stopped)
})

test_that("a start whose third worker fails stops the workers it started and leaves no process", {
  skip_on_cran()
  skip_if_not_installed("callr")
  dir <- tempfile("failing-start-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  # Every worker's R reads this profile first (R_PROFILE_USER): it notes its
  # pid; the third (slot 2) fails once the first two have surely connected.
  profile <- file.path(dir, "profile.R")
  writeLines(c(
    sprintf("writeLines(format(Sys.getpid()), file.path(%s, Sys.getenv('PAGESHARE_POOL_SLOT')))", deparse(dir)),
    "if (Sys.getenv('PAGESHARE_POOL_SLOT') == '2') { Sys.sleep(2); cat('third worker fails\\n', file = stderr()); quit(status = 3) }"),
    profile)
  got <- callr::r(function(profile) {
    library(pageshare)
    Sys.setenv(R_PROFILE_USER = profile)
    e <- tryCatch(start_workers(3), error = function(e) e)
    Sys.unsetenv("R_PROFILE_USER")
    children <- function() {
      tasks <- list.files(sprintf("/proc/%d/task", Sys.getpid()), full.names = TRUE)
      unlist(lapply(file.path(tasks, "children"), function(f) scan(f, quiet = TRUE)))
    }
    left <- children()
    pool <- pageshare:::pool_pids()
    again <- length(start_workers(2))
    stop_workers()
    list(class = class(e), message = conditionMessage(e), left = left, pool = pool, again = again)
  }, args = list(profile = profile), libpath = .libPaths())
  expect_identical(got$class, c("pageshare_worker_setup", "pageshare_error", "error", "condition"))
  expect_match(got$message, "worker 3 of the pool", fixed = TRUE)
  expect_match(got$message, "third worker fails", fixed = TRUE)
  pids <- as.integer(unlist(lapply(file.path(dir, c("0", "1", "2")), function(f) if (file.exists(f)) readLines(f))))
  expect_length(pids, 3L)                      # all three were started
  expect_length(got$left, 0L)                  # and none is left, not even unreaped
  expect_true(all(pageshare:::wait_processes_gone(pids, 5)))
  expect_length(got$pool, 0L)
  expect_identical(got$again, 2L)
})
