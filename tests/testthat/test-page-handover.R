# The page handover's self-test at load (R/page-handover.R, source_pages.rs):
# on with glibc's malloc, off with one message under another allocator.

jemalloc <- "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

test_that("the self-test at load turns the handover on with glibc's malloc", {
  skip_if(nzchar(Sys.getenv("LD_PRELOAD")), paste("an allocator is preloaded:", Sys.getenv("LD_PRELOAD")))
  skip_if_not(grepl("linux-gnu", R.version$os), "not a glibc system")
  on <- pageshare:::page_handover_enabled()
  expect_true(on)
  expect_null(attr(on, "reason"))
})

test_that("under LD_PRELOAD of jemalloc the handover is off, said once, and sharing still works", {
  skip_if_not(file.exists(jemalloc), paste(jemalloc, "is not installed (apt-get install libjemalloc2)"))
  res <- run_rscript(c(
    "msgs <- character(0)",
    "withCallingHandlers(library(pageshare), pageshare_handover_off = function(m) msgs <<- c(msgs, conditionMessage(m)))",
    "invisible(loadNamespace('pageshare'))    # loading again says nothing",
    "x <- as.double(seq_len(5e6)) + 0.5; v <- share(x)",
    "saveRDS(list(msgs = msgs, on = pageshare:::page_handover_enabled(),",
    "             released = shared_info(v)$source_released, same = identical(x, v),",
    "             preload = Sys.getenv('LD_PRELOAD')), OUT)"),
    shell = sprintf("export LD_PRELOAD=%s", shQuote(jemalloc)))
  got <- res$saved
  expect_false(is.null(got), info = paste(res$log, collapse = "\n"))
  expect_identical(got$preload, jemalloc)
  expect_length(got$msgs, 1)
  expect_match(got$msgs, "page handover off .*jemalloc")
  expect_false(got$on)
  expect_match(attr(got$on, "reason"), "jemalloc")
  expect_identical(got$released, 0)
  expect_true(got$same)
  # The message reaches the console exactly once.
  expect_identical(sum(grepl("page handover off", res$log)), 1L)
})
