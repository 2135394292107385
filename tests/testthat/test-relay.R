# What a task writes to its standard output and the conditions it signals
# reach the caller as future relays them (src/rust/pageshare-r/src/relay.rs,
# `Relay` in the pool's wire.rs, relay_emit() in R/pool-state.R), through
# every door of the pool: shm_call()/shm_value(), shm_map(), memLapply(),
# memApply() and foreach on registerDoShm().

# A task body: writes a line, then signals a message, a warning and a
# condition of its own class; fails for `i` in `fail`. Its environment is the
# global environment, as a function a user writes at the prompt has (a call of
# it to shm_call() then takes the plain path, run in Rust).
relay_body <- function(fail = integer()) {
  f <- function(i) {
    cat(sprintf("out %d\n", i))
    message(sprintf("msg %d", i))
    warning(sprintf("warn %d", i))
    signalCondition(structure(class = c("relay_custom", "condition"),
                              list(message = sprintf("custom %d", i), call = NULL)))
    if (i %in% fail) stop(sprintf("fail %d", i))
    i
  }
  environment(f) <- list2env(list(fail = fail), parent = globalenv())
  f
}

# The doors, each running `f` on 1..n with the door's off switches.
relay_doors <- list(
  shm_call = function(f, n, stdout = TRUE, conditions = "condition") {
    tasks <- lapply(seq_len(n), function(i) shm_call(f, i, .stdout = stdout, .conditions = conditions))
    lapply(tasks, shm_value)
  },
  shm_map = function(f, n, stdout = TRUE, conditions = "condition") {
    shm_map(seq_len(n), f, .stdout = stdout, .conditions = conditions)
  },
  memLapply = function(f, n, stdout = TRUE, conditions = "condition") {
    memLapply(as.list(seq_len(n)), f, stdout = stdout, conditions = conditions)
  },
  memApply = function(f, n, stdout = TRUE, conditions = "condition") {
    # (column j of a 1 x n matrix is j)
    memApply(matrix(seq_len(n), 1L), 2, f, stdout = stdout, conditions = conditions)
  },
  foreach = function(f, n, stdout = TRUE, conditions = "condition") {
    `%dopar%` <- foreach::`%dopar%`
    foreach::foreach(i = seq_len(n), .options.shm = list(stdout = stdout, conditions = conditions)) %dopar% f(i)
  }
)

# `expr`'s value, what it wrote to the standard output, and the conditions
# (other than errors) that reached a calling handler around it, in order
# (messages and warnings muffled there).
observe <- function(expr) {
  seen <- list()
  out <- utils::capture.output(value <- withCallingHandlers(expr, condition = function(c) {
    if (inherits(c, "error")) return()
    seen[[length(seen) + 1L]] <<- c
    if (inherits(c, "warning")) invokeRestart("muffleWarning")
    if (inherits(c, "message")) invokeRestart("muffleMessage")
  }))
  list(value = value, stdout = out, seen = seen,
       said = vapply(seen, function(c) sub("\n$", "", conditionMessage(c)), ""),
       kinds = vapply(seen, function(c) class(c)[1L], ""))
}

# The conditions relay_body() signals for 1..n, in order.
expected_said <- function(n) as.vector(rbind(sprintf("msg %d", seq_len(n)), sprintf("warn %d", seq_len(n)),
                                             sprintf("custom %d", seq_len(n))))

local_doshm <- function(env = parent.frame()) {
  skip_if_not_installed("foreach")
  registerDoShm(cores = 2)
  do.call(base::on.exit, list(quote(foreach::registerDoSEQ()), add = TRUE), envir = env)
}

for (door in names(relay_doors)) {
  run <- relay_doors[[door]]

  test_that(sprintf("%s: output, messages, warnings and other conditions reach the caller, in task order", door), {
    on.exit(stop_workers(), add = TRUE)
    if (door == "foreach") local_doshm()
    start_workers(2)
    n <- 7L
    got <- observe(run(relay_body(), n))
    expect_equal(unlist(got$value), seq_len(n))
    expect_identical(got$stdout, sprintf("out %d", seq_len(n)))
    expect_identical(got$said, expected_said(n))
    expect_identical(unique(got$kinds[got$said == "warn 1"]), "simpleWarning")
    expect_identical(unique(got$kinds[got$said == "msg 1"]), "simpleMessage")
    expect_identical(unique(got$kinds[got$said == "custom 1"]), "relay_custom")
  })

  test_that(sprintf("%s: the off switches, named as future's, drop output or conditions", door), {
    on.exit(stop_workers(), add = TRUE)
    if (door == "foreach") local_doshm()
    start_workers(2)
    n <- 3L
    quiet <- observe(run(relay_body(), n, stdout = FALSE))
    expect_identical(quiet$stdout, character(0))
    expect_identical(quiet$said, expected_said(n))
    for (none in list(character(), NULL)) {
      silent <- observe(run(relay_body(), n, conditions = none))
      expect_identical(silent$stdout, sprintf("out %d", seq_len(n)))
      expect_length(silent$seen, 0L)
    }
    warnings_only <- observe(run(relay_body(), n, conditions = "warning"))
    expect_identical(warnings_only$said, sprintf("warn %d", seq_len(n)))
    expect_equal(unlist(warnings_only$value), seq_len(n))
  })

  test_that(sprintf("%s: an error behaves as before, after what came before it was relayed", door), {
    on.exit(stop_workers(), add = TRUE)
    if (door == "foreach") local_doshm()
    start_workers(1)   # (one worker: the tasks run in order, the third fails)
    e <- NULL
    got <- observe(tryCatch(run(relay_body(fail = 3L), 3L), error = function(err) e <<- err))
    if (door == "foreach") {
      expect_s3_class(e, "simpleError")
      expect_match(conditionMessage(e), "task 3 failed - \"fail 3\"", fixed = TRUE)
    } else {
      expect_s3_class(e, "pageshare_task_failed")
      expect_identical(conditionMessage(e$parent), "fail 3")
    }
    expect_identical(got$stdout, sprintf("out %d", 1:3))
    expect_identical(got$said, expected_said(3L))
  })
}

test_that("a task with nothing to relay carries no relay, and one task's output never reaches the next", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  quiet <- shm_call(sqrt, 4)
  expect_identical(shm_value(quiet), 2)
  expect_null(quiet$reply$relay)
  loud <- shm_call(function() {
    cat("once\n")
    1
  })
  expect_identical(capture.output(shm_value(loud)), c("once", "[1] 1"))
  # (the output is relayed by each shm_value(), as future's value() does)
  expect_identical(capture.output(v <- shm_value(loud)), "once")
  after <- shm_call(function() 2)
  expect_identical(capture.output(v <- shm_value(after)), character(0))
  expect_null(after$reply$relay)
})

test_that("output larger than a ring crosses whole, and output of a process a task starts is relayed", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  big <- strrep("abcdefgh", 1e5)   # 800 kB: more than the ring holds
  got <- capture.output(v <- shm_value(shm_call(function(x) {
    cat(x, "\n", sep = "")
    nchar(x)
  }, big)))
  expect_identical(got, big)
  expect_identical(v, nchar(big))
  skip_if(!nzchar(Sys.which("echo")))
  got <- capture.output(v <- shm_value(shm_call(function() system("echo from-a-child"))))
  expect_identical(got, "from-a-child")
})

test_that("suppressWarnings() and suppressMessages() around a door silence what its tasks relay", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(2)
  f <- function(i) {
    message("m")
    warning("w")
    i
  }
  expect_silent(r <- suppressMessages(suppressWarnings(shm_map(1:4, f))))
  expect_identical(r, as.list(1:4))
  expect_warning(suppressMessages(shm_map(1, f)), "w")
  expect_message(suppressWarnings(shm_value(shm_call(f, 1))), "m")
})

test_that("a condition the task handled itself is not relayed", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  got <- observe(shm_value(shm_call(function() {
    tryCatch(warning("handled"), warning = function(w) NULL)
    suppressMessages(message("suppressed"))
    withCallingHandlers(warning("seen"), warning = function(w) invokeRestart("muffleWarning"))
    3
  })))
  expect_identical(got$value, 3)
  expect_length(got$seen, 0L)
})

test_that("the off switches are checked", {
  expect_error(shm_call(sqrt, 1, .stdout = NA), class = "pageshare_bad_argument")
  expect_error(shm_call(sqrt, 1, .conditions = 1), class = "pageshare_bad_argument")
  expect_error(shm_map(1:2, sqrt, .stdout = "yes"), class = "pageshare_bad_argument")
  expect_error(shm_map(1:2, sqrt, .conditions = NA_character_), class = "pageshare_bad_argument")
  expect_error(memLapply(list(1), sqrt, stdout = NULL), class = "pageshare_bad_argument")
  expect_error(memApply(matrix(1), 1, sqrt, conditions = list("warning")), class = "pageshare_bad_argument")
})

test_that("a condition whose call holds large values is relayed without its call", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  f <- function(x) {
    warning("from a call with a large argument")
    length(x)
  }
  environment(f) <- globalenv()
  v <- runif(1e5)   # (800 kB: below the sharing threshold, so in the call's arguments)
  w <- NULL
  got <- withCallingHandlers(shm_value(shm_call(f, v)), warning = function(c) {
    w <<- c
    invokeRestart("muffleWarning")
  })
  expect_identical(got, 100000L)
  expect_identical(conditionMessage(w), "from a call with a large argument")
  expect_null(conditionCall(w))
  # (a small call stays)
  w <- NULL
  withCallingHandlers(shm_map(1, function(i) warning("small")), warning = function(c) {
    w <<- c
    invokeRestart("muffleWarning")
  })
  expect_false(is.null(conditionCall(w)))
})
