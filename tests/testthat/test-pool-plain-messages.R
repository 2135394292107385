# The messages of the pool's plain calls (entry_pool_plain.rs): simple values
# in the wire's own value encoding (wire.rs, wire_values.rs), a function's
# bytes kept for the next call of the same function, and this path under
# gctorture.

wire_value <- function(x) .Call(pageshare:::ps_wire_value, x)
wire_read <- function(bytes) .Call(pageshare:::ps_wire_value_read, bytes)

# A random simple value: NULL, a vector of a basic type without attributes
# (NA, NaN, infinities, empty, strings of every encoding) or a list of them.
random_simple <- function(depth = 0L) {
  n <- sample(c(0:3, 10L), 1L)
  kind <- sample(c("null", "lgl", "int", "dbl", "cplx", "raw", "chr", if (depth < 3L) "list"), 1L)
  strings <- c("a", "", "NA", NA, "\u00e9t\u00e9", "\u4e2d", iconv("\u00e9", "UTF-8", "latin1"),
               "\xff", paste(rep("x", 300), collapse = ""))
  Encoding(strings[8]) <- "bytes"
  x <- switch(kind,
    null = NULL,
    lgl = sample(c(TRUE, FALSE, NA), n, replace = TRUE),
    int = sample(c(-.Machine$integer.max, -1L, 0L, 7L, NA), n, replace = TRUE),
    dbl = sample(c(0, -0, 0.1, 1e308, -Inf, Inf, NaN, NA), n, replace = TRUE),
    cplx = complex(real = runif(n), imaginary = sample(c(NA, 1, -2), n, replace = TRUE)),
    raw = as.raw(sample(0:255, n, replace = TRUE)),
    chr = sample(strings, n, replace = TRUE),
    list = lapply(seq_len(n), function(i) random_simple(depth + 1L)))
  if (kind == "int") x <- x + 0L   # (a vector of its own, not R's compact 1:n)
  x
}

test_that("simple values travel in the wire's encoding and come back identical", {
  set.seed(20261204)
  for (i in 1:400) {
    x <- random_simple()
    bytes <- wire_value(x)
    expect_true(is.raw(bytes))
    expect_identical(wire_read(bytes), x, info = paste(deparse(x), collapse = ""))
  }
  deep <- list(); for (i in 1:20) deep <- list(deep, i + 0)
  expect_identical(wire_read(wire_value(deep)), deep)
  # strings keep their encoding marks
  s <- c("a", "\u00e9", iconv("\u00e9", "UTF-8", "latin1"), "\xff", NA)
  Encoding(s[4]) <- "bytes"
  expect_identical(Encoding(wire_read(wire_value(s))), Encoding(s))
})

test_that("values that are not simple are left to R's serialization", {
  too_deep <- list(); for (i in 1:40) too_deep <- list(too_deep)
  for (x in list(c(a = 1), factor("a"), matrix(1:4, 2), 1:10, as.character(1:3), list(1, c(b = 2)),
                 quote(x), function() 1, globalenv(), too_deep)) {
    expect_null(wire_value(x))
  }
})

test_that("bytes that are no value are a classed error, never a crash", {
  set.seed(1)
  good <- wire_value(list(1, "a", NULL, list(TRUE)))
  for (i in 1:300) {
    bytes <- good
    if (i %% 2) bytes <- bytes[seq_len(sample(length(bytes) - 1L, 1L))]
    else bytes[sample(length(bytes), 1L)] <- as.raw(sample(0:255, 1L))
    res <- tryCatch(wire_read(bytes), pageshare_error = function(e) e)
    expect_true(inherits(res, "pageshare_error") || is.list(res) || is.null(res) || is.atomic(res))
  }
  expect_error(wire_read(as.raw(c(7, rep(255, 8)))), class = "pageshare_system")
  expect_error(wire_read(as.raw(99)), class = "pageshare_system")
})

test_that("a plain call starts the pool when none runs, and fills a slot left vacant", {
  on.exit(stop_workers(), add = TRUE)
  old <- options(pageshare.workers = 1L)
  on.exit(options(old), add = TRUE)
  stop_workers()
  expect_identical(shm_value(shm_call(function() "started")), "started")
  pid <- .Call(pageshare:::ps_pool_pids)
  expect_length(pid, 1L)
  # its worker killed in the middle of a call: the next call gets a new one
  begun <- tempfile()
  task <- shm_call(function(path) { file.create(path); Sys.sleep(30) }, begun)
  expect_true(file.exists(wait_for_file(begun)))
  tools::pskill(pid, tools::SIGKILL)
  expect_error(shm_value(task), class = "pageshare_worker_died")
  expect_identical(shm_value(shm_call(function() "filled")), "filled")
  expect_false(pid %in% .Call(pageshare:::ps_pool_pids))
  unlink(begun)
})

test_that("calls of one function reach the worker with their own arguments", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  f <- function(x, ...) list(x, ...)
  tasks <- lapply(1:50, function(i) shm_call(f, i, name = letters[i %% 26 + 1], NULL))
  got <- lapply(tasks, shm_value)
  expect_identical(got, lapply(1:50, function(i) list(i, name = letters[i %% 26 + 1], NULL)))
  # arguments that are not simple, and quoted ones, arrive as they are
  expect_identical(shm_value(shm_call(f, factor("b"), 1:3, quote(sym))), list(factor("b"), 1:3, quote(sym)))
})

test_that("a function changed since its last call runs as it is now", {
  on.exit(stop_workers(), add = TRUE)
  start_workers(1)
  # an environment written by value: its contents now, not at the first call
  e <- new.env()
  e$v <- 1
  f <- eval(bquote(function() .(e)$v), globalenv())
  expect_identical(shm_value(shm_call(f)), 1)
  e$v <- 2
  expect_identical(shm_value(shm_call(f)), 2)
  # the function itself changed in place by R's replacement functions
  g <- function() "before"
  environment(g) <- globalenv()
  expect_identical(shm_value(shm_call(g)), "before")
  body(g) <- quote("body")
  expect_identical(shm_value(shm_call(g)), "body")
  formals(g) <- alist(x = "formals")
  body(g) <- quote(x)
  expect_identical(shm_value(shm_call(g)), "formals")
  attr(g, "tag") <- "attribute"
  expect_identical(shm_value(shm_call(function(h) attr(h, "tag"), g)), "attribute")
  h <- function() attr(sys.function(), "tag")
  expect_null(shm_value(shm_call(h)))
  attr(h, "tag") <- "set"
  expect_identical(shm_value(shm_call(h)), "set")
  # a function defined again under the same name, and another between calls
  k <- function() 1
  expect_identical(shm_value(shm_call(k)), 1)
  k <- function() 2
  expect_identical(shm_value(shm_call(k)), 2)
  expect_identical(shm_value(shm_call(sum, 1, 2)), 3)
  expect_identical(shm_value(shm_call(k)), 2)
})

test_that("the plain path keeps every object it makes from the collector", {
  on.exit({ gctorture(FALSE); stop_workers() }, add = TRUE)
  start_workers(1)
  f <- function(x, y = 0) list(x, y, "\u00e9")
  g <- local({ k <- 5; function(x) x * k })
  gctorture(TRUE)
  a <- shm_value(shm_call(f, 1, y = "z"))
  b <- shm_value(shm_call(g, 2))
  t1 <- shm_call(f, 2)
  t2 <- shm_call(f, 3)
  both <- list(shm_value(t2), shm_value(t1))
  simple <- wire_read(wire_value(list(1, "a", list(NULL, 2i))))
  gctorture(FALSE)
  expect_identical(a, list(1, "z", "\u00e9"))
  expect_identical(b, 10)
  expect_identical(both, list(list(3, 0, "\u00e9"), list(2, 0, "\u00e9")))
  expect_identical(simple, list(1, "a", list(NULL, 2i)))
  # and in the worker, which runs plain calls and writes their replies in Rust
  pageshare:::pool_call_each(function() gctorture(TRUE))
  w <- list(shm_value(shm_call(f, 5, y = c(a = 1))), shm_value(shm_call(f, 6)))
  pageshare:::pool_call_each(function() gctorture(FALSE))
  expect_identical(w, list(list(5, c(a = 1), "\u00e9"), list(6, 0, "\u00e9")))
})
