# Each segment's owner holds one descriptor. How many segments fit must never
# shrink when `ulimit -n` grows: the range >= 1024 (out of select()'s reach,
# where nothing else lives) is used first, then low numbers while 64 of them
# below min(limit, 1024) stay free for R's sockets; past that, the classed
# error. Each limit is tried in a child `Rscript` started by bash after
# `ulimit -n N` (soft and hard), so this session's limit is untouched.

room_script <- function(cap) {
  script <- tempfile("room-", fileext = ".R")
  writeLines(c(
    "library(pageshare)",
    sprintf("cap <- %dL", cap),
    "keep <- vector('list', cap)",
    "n <- 0L",
    "end <- 'cap'",
    "for (i in seq_len(cap)) {",
    "  r <- tryCatch(share(as.double(seq_len(1000)) + i), error = function(e) e)",
    "  if (inherits(r, 'error')) { end <- class(r)[1L]; break }",
    "  keep[[i]] <- r",
    "  n <- i",
    "}",
    "cat(n, end, sep = '\\n')"
  ), script)
  script
}

# Segments that fit under `ulimit -n limit` (at most `cap`), and how the run
# ended: the class of the error, "cap", or NA when bash cannot set the limit.
segments_that_fit <- function(limit, script) {
  rscript <- file.path(R.home("bin"), "Rscript")
  cmd <- sprintf("ulimit -n %d || exit 99; exec %s %s", limit, shQuote(rscript), shQuote(script))
  out <- suppressWarnings(system2("bash", c("-c", shQuote(cmd)), stdout = TRUE, stderr = FALSE,
                                  env = sprintf("R_LIBS=%s", shQuote(paste(.libPaths(), collapse = ":")))))
  if (identical(attr(out, "status"), 99L)) return(list(n = NA_integer_, end = NA_character_))
  list(n = as.integer(out[1L]), end = out[2L])
}

hard_open_files <- function() {
  as.numeric(system2("bash", c("-c", shQuote("ulimit -Hn")), stdout = TRUE))
}

test_that("the number of segments that fit is non-decreasing in ulimit -n", {
  skip_on_os(c("windows", "mac", "solaris"))
  cap <- 5000L # more than fit at 4096: a run reaching it fits more than any below
  script <- room_script(cap)
  on.exit(unlink(script), add = TRUE)
  hard <- hard_open_files()
  limits <- c(256, 1024, 1100, 4096)
  limits <- limits[limits <= hard]
  expect_gte(length(limits), 3L)
  runs <- lapply(limits, segments_that_fit, script = script)
  n <- vapply(runs, `[[`, 0L, "n")
  end <- vapply(runs, `[[`, "", "end")
  info <- paste(sprintf("ulimit -n %d: %d (%s)", limits, n, end), collapse = "; ")
  expect_false(anyNA(n), info = info)
  # every run stopped at the classed error (the cap is never reached below 5000)
  expect_true(all(end == "pageshare_too_many_segments"), info = info)
  expect_true(all(diff(n) >= 0), info = info)
  # and the room follows the limit: all but the reserve and R's own descriptors
  expect_true(all(n > limits - 100), info = info)
})

test_that("the number of segments that fit is non-decreasing up to ulimit -n 65536", {
  skip_on_os(c("windows", "mac", "solaris"))
  hard <- hard_open_files()
  top <- min(65536, hard)
  if (top <= 5000) skip(sprintf("needs a hard limit on open files above 5000 (it is %s here)", hard))
  cap <- 5000L
  script <- room_script(cap)
  on.exit(unlink(script), add = TRUE)
  at4096 <- segments_that_fit(4096, script)
  at_top <- segments_that_fit(top, script)
  info <- sprintf("ulimit -n 4096: %d (%s); ulimit -n %d: %d (%s)", at4096$n, at4096$end, top, at_top$n, at_top$end)
  expect_identical(at4096$end, "pageshare_too_many_segments", info = info)
  expect_identical(at_top$end, "cap", info = info)
  expect_gte(at_top$n, at4096$n)
  if (top < 65536) {
    skip(sprintf("tried ulimit -n %d, the hard limit here: 65536 itself needs a hard limit that high", top))
  }
})
