# Sharing by key (R/keys.R): one copy per host, found by any process of the
# same user; errors, never data, for a stale, forged or mismatched entry.
# (Another user's keys: test-field-hostile.R.)

skip_on_os(c("windows", "mac", "solaris"))

# A pageshare.dir of this test's own (its index), removed at the end.
local_key_dir <- function(env = parent.frame()) {
  dir <- tempfile("ps-keys-")
  dir.create(dir, mode = "0700")
  old <- options(pageshare.dir = dir)
  do.call(base::on.exit, list(bquote({ options(.(old)); unlink(.(dir), recursive = TRUE) }), add = TRUE), envir = env)
  dir
}

# An R process that is not a child of this one's sharing: it runs `lines`
# with the index in `dir`, writes "ready" to `ready`, and waits until
# `done` exists (at most a minute). Returns its pid; it is ended when `env`
# exits.
local_sharer <- function(dir, lines, env = parent.frame()) {
  f <- function(name) file.path(dir, name)
  script <- tempfile("sharer-", fileext = ".R")
  writeLines(c("library(pageshare)", lines,
               sprintf("writeLines(as.character(Sys.getpid()), %s)", deparse(f("ready.tmp"))),
               sprintf("file.rename(%s, %s)", deparse(f("ready.tmp")), deparse(f("ready"))),
               sprintf("t0 <- Sys.time(); while (!file.exists(%s) && Sys.time() - t0 < 60) Sys.sleep(0.05)",
                       deparse(f("done")))), script)
  lib <- dirname(system.file(package = "pageshare"))
  system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", script), wait = FALSE,
          env = c(paste0("R_LIBS=", paste(unique(c(lib, .libPaths())), collapse = ":")), paste0("PAGESHARE_DIR=", dir)),
          stdout = f("sharer.log"), stderr = f("sharer.log"))
  deadline <- Sys.time() + 60
  while (!file.exists(f("ready")) && Sys.time() < deadline) Sys.sleep(0.05)
  if (!file.exists(f("ready"))) stop("the sharing process did not start: ", paste(readLines(f("sharer.log")), collapse = "\n"))
  pid <- as.integer(readLines(f("ready")))
  done <- f("done")
  do.call(base::on.exit, list(bquote({
    file.create(.(done))
    if (!pids_gone(.(pid), 10)) tools::pskill(.(pid), tools::SIGKILL)
  }), add = TRUE, after = FALSE), envir = env)
  pid
}

# Bytes of this process's own memory: its anonymous pages (a copy of data
# would be there), not the pages of the shared memory files it maps. (From
# smaps_rollup, which counts the pages: the RssAnon of /proc/PID/status may lag.)
private_bytes <- function() {
  line <- grep("^Anonymous:", readLines("/proc/self/smaps_rollup"), value = TRUE)
  1024 * as.numeric(sub("^Anonymous:[[:space:]]*([0-9]+) kB$", "\\1", line))
}

test_that("a process that did not start the sharer reads its keyed object in place", {
  skip_on_cran()
  dir <- local_key_dir()
  pid <- local_sharer(dir, c("x <- share(as.double(seq_len(5e6)), key = 'big')",
                             "s <- share(c(a = 1L, b = 2L), key = 'small')"))
  invisible(gc())
  before <- private_bytes()
  v <- shared_by_key("big")
  total <- sum(v)                                    # (every page read)
  grown <- private_bytes() - before
  expect_identical(total, sum(as.double(seq_len(5e6))))
  expect_identical(v[c(1, 5e6)], c(1, 5e6))
  expect_lt(grown, 0.05 * 8 * 5e6)
  expect_true(is_shared(v))
  expect_identical(shared_by_key("small"), c(a = 1L, b = 2L))   # attributes too
  # the same data shared here under the key: the sharer's copy, not a new one
  same <- share(as.double(seq_len(5e6)), key = "big")
  expect_identical(shared_info(same)$name, shared_info(v)$name)
  # other data under a key that holds something: an error naming the holder
  e <- tryCatch(share(as.double(1:3), key = "small"), error = function(e) e)
  expect_s3_class(e, "pageshare_key_conflict")
  expect_identical(share(1:3, key = "elsewhere"), 1:3)
  expect_true(release_key("elsewhere"))
  expect_true(release_key("big"))
  expect_true(release_key("small"))
  expect_false(release_key("small"))
})

test_that("the same data shared under a key another process holds: its pages are handed over, one copy", {
  skip_on_cran()
  skip_if_not(isTRUE(pageshare:::page_handover_enabled()), "the page handover is off here (another malloc?)")
  dir <- local_key_dir()
  pid <- local_sharer(dir, "x <- share(as.double(seq_len(5e6)) + 0, key = TRUE)")   # (+ 0: not ALTREP)
  # In a fresh process (this one's C heap may serve a large vector from free
  # space of its own, whose pages cannot be handed over): its own 40 MB copy,
  # then shared under the key the sharer holds.
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script), add = TRUE)
  writeLines(c(
    "library(pageshare)",
    "anon <- function() {",
    "  line <- grep('^Anonymous:', readLines('/proc/self/smaps_rollup'), value = TRUE)",
    "  1024 * as.numeric(sub('^Anonymous:[[:space:]]*([0-9]+) kB$', '\\\\1', line))",
    "}",
    "x <- as.double(seq_len(5e6)) + 0; invisible(gc()); before <- anon()",
    "v <- share(x, key = TRUE); invisible(gc())",
    "same <- identical(x, as.double(seq_len(5e6)))",
    "x[1] <- 0   # (a write copies one page, never reaches the segment)",
    "cat('RESULT', anon() - before, same, v[1], shared_info(v)$name, '\\n')"), script)
  out <- system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", script), stdout = TRUE, stderr = TRUE,
                 env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")), paste0("PAGESHARE_DIR=", dir)))
  got <- strsplit(grep("^RESULT", out, value = TRUE), " ")[[1]]
  expect_length(got, 5L)
  expect_lt(as.numeric(got[2]), -0.9 * 8 * 5e6)      # its pages went back to the system
  expect_identical(got[3], "TRUE")                     # x unchanged
  expect_identical(got[4], "1")                        # the segment unchanged by x[1] <- 0
  expect_match(got[5], paste0("[.]", pid, "$"))        # (the sharer's segment)
})

test_that("a keyed object lives while any holder does; a stale entry is an error, never data", {
  skip_on_cran()
  dir <- local_key_dir()
  pid <- local_sharer(dir, c("a <- share(as.double(1:1e5), key = 'kept')",
                             "b <- share(as.double(1:1e5) * 2, key = 'dropped')"))
  kept <- shared_by_key("kept")                      # (this process now holds it too)
  tools::pskill(pid, tools::SIGKILL)
  expect_true(pids_gone(pid))
  e <- tryCatch(shared_by_key("dropped"), error = function(e) e)
  expect_s3_class(e, "pageshare_not_registered")
  expect_match(conditionMessage(e), "'dropped'")
  # a third process finds "kept" through this one
  got <- system2(file.path(R.home("bin"), "Rscript"),
                 c("--vanilla", "-e", shQuote("cat(sum(pageshare::shared_by_key('kept')))")), stdout = TRUE,
                 env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")), paste0("PAGESHARE_DIR=", dir)))
  expect_identical(as.numeric(tail(got, 1)), sum(as.double(1:1e5)))
  expect_true(release_key("kept"))
  e <- tryCatch(shared_by_key("kept"), error = function(e) e)
  expect_s3_class(e, "pageshare_not_registered")
  expect_identical(sum(kept), sum(as.double(1:1e5)))   # (a view keeps reading its pages)
})

test_that("content keys: the same data found by their contents, checked when retrieved", {
  skip_on_cran()
  dir <- local_key_dir()
  x <- matrix(as.double(1:2e5), 400)
  k <- content_key(x)
  expect_match(k, "^content:[0-9a-f]{32}$")
  expect_identical(content_key(x + 0), k)
  expect_false(identical(content_key(x[, 500:1]), k))
  expect_false(identical(content_key(as.vector(x)), k))   # (attributes count)
  pid <- local_sharer(dir, "x <- share(matrix(as.double(1:2e5), 400), key = TRUE)")
  v <- shared_by_key(k)
  expect_identical(v, x)
  mine <- share(x, key = TRUE)
  expect_identical(shared_info(mine)$name, shared_info(v)$name)
  # a list: each element under its content key
  l <- share(list(a = as.double(1:1e5), b = letters), key = TRUE)
  expect_true(all(vapply(l, is_shared, TRUE)))
  expect_identical(shared_by_key(content_key(letters)), letters)
  e <- tryCatch(share(list(a = 1), key = "one"), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  e <- tryCatch(share(1:3, key = "content:nothex"), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  e <- tryCatch(share(1:3, key = NA_character_), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  for (key in c(k, content_key(as.double(1:1e5)), content_key(letters))) release_key(key)
})

test_that("a forged entry under a content key leads to an error, never to its data", {
  skip_on_cran()
  skip_if_not_installed("processx")
  skip_if(!nzchar(Sys.which("flock")), "flock is missing")
  dir <- local_key_dir()
  other <- share(as.double(1:1e4) + 0.5, key = "other")
  wanted <- content_key(as.double(1:10))
  index <- file.path(dir, paste0("pageshare-", system2("id", "-u", stdout = TRUE)))
  ours <- list.files(index, pattern = "^pageshare\\.k\\.other\\.")
  expect_length(ours, 1L)
  # an entry of the right form under the content key's name, locked by a live
  # process, whose locator leads to the segment of "other"
  bytes <- readBin(file.path(index, ours), "raw", 1000)
  name <- paste0("pageshare.k.", gsub(".", "%2E", wanted, fixed = TRUE), ".999999")
  forged <- c(bytes[1:60], writeBin(nchar(name, "bytes"), raw(), size = 2, endian = "little"), charToRaw(name))
  path <- file.path(index, name)
  writeBin(forged, path)
  Sys.chmod(path, "0600", use_umask = FALSE)
  locked <- tempfile()
  locker <- processx::process$new("sh", c("-c", 'exec 9<"$1" && flock -s 9 && : > "$2" && exec sleep 600', "sh", path, locked))
  on.exit({ locker$kill(); locker$wait() }, add = TRUE)
  deadline <- Sys.time() + 10
  while (!file.exists(locked) && Sys.time() < deadline) Sys.sleep(0.05)
  e <- tryCatch(shared_by_key(wanted), error = function(e) e)
  expect_s3_class(e, "pageshare_invalid_segment")
  expect_match(conditionMessage(e), "does not hold those contents")
  # sharing those contents makes a copy of its own instead
  mine <- share(as.double(1:10), key = TRUE)
  expect_false(identical(shared_info(mine)$name, shared_info(other)$name))
  expect_identical(mine, as.double(1:10))
  release_key(wanted)
  release_key("other")
})
