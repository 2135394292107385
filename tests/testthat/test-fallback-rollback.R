# A door that falls back to plain serialization keeps nothing it shared on the
# way: after the fallback this session holds exactly the segments, bytes and
# descriptors it held before the launch, and the next share() works.

skip_if_not_installed("future")

held_now <- function() {
  full_gc()
  list(bytes = .Call(pageshare:::ps_held_bytes), segments = length(own_segments()),
       descriptors = length(list.files("/proc/self/fd")))
}

test_that("a future over the shared-bytes budget falls back and lets go of what it shared", {
  local_shm_plan(workers = I(1))
  old <- options(pageshare.max_shared_bytes = 100e6)
  on.exit(options(old), add = TRUE)
  invisible(future::value(future::future(1)))           # the worker is up
  L <- list(a = as.double(seq_len(5e6)), b = as.double(seq_len(5e6)) + 1, c = as.double(seq_len(5e6)) + 2)
  before <- held_now()
  w <- NULL
  r <- withCallingHandlers(future::value(future::future(sum(L$a) + sum(L$b) + sum(L$c))),
                           warning = function(c) { w <<- c; invokeRestart("muffleWarning") })
  expect_s3_class(w, "pageshare_fallback")
  expect_s3_class(w, "pageshare_warning")   # below pageshare_warning, as ?pageshare_conditions says
  expect_identical(r, sum(L$a) + sum(L$b) + sum(L$c))
  expect_identical(held_now(), before)
  y <- share(as.double(seq_len(4e6)))                   # 32 MB fit the budget again
  expect_true(is_shared(y))
  rm(y)
  # The same objects shared again later (a larger budget) are shared afresh.
  options(pageshare.max_shared_bytes = Inf)
  expect_identical(future::value(future::future(c(is_shared(L$a), sum(L$c)))), c(1, sum(L$c)))
})

test_that("a future whose many leaves exceed the descriptors falls back and lets go of them", {
  skip_if(!nzchar(Sys.which("bash")), "bash is missing: no way to lower the open-files limit")
  run <- run_rscript(c(
    "library(pageshare)",
    "held <- function() { for (i in 1:3) gc(); list(bytes = .Call(pageshare:::ps_held_bytes),",
    "  descriptors = length(list.files('/proc/self/fd'))) }",
    "future::plan(shm_multisession, workers = I(1))",
    "invisible(future::value(future::future(1)))",
    "options(pageshare.threshold = 0)",
    "L <- lapply(1:3000, function(i) as.double(i + 1:10))",
    "before <- held()",
    "w <- NULL",
    "r <- withCallingHandlers(future::value(future::future(sum(unlist(L)))),",
    "  pageshare_fallback = function(cond) { w <<- conditionMessage(cond); invokeRestart('muffleWarning') })",
    "value <- r[]; rm(r)   # (at threshold 0 the result itself comes back shared)",
    "after <- held()",
    "y <- share(as.double(1:1000))",
    "future::plan(future::sequential)",
    "saveRDS(list(w = w, r = value, expected = sum(unlist(L)), before = before, after = after, y = is_shared(y)), OUT)"),
    shell = "ulimit -n 1500")
  got <- run$saved
  expect_false(is.null(got), info = paste(run$log, collapse = "\n"))
  expect_match(got$w, "descriptor|open files|too many", ignore.case = TRUE)
  expect_identical(got$r, got$expected)
  expect_identical(got$after, got$before)
  expect_true(got$y)
})
