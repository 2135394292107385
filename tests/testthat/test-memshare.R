test_that("register, retrieve, release: the memshare life cycle", {
  ns <- paste0("t_ms_", Sys.getpid())
  X <- matrix(rnorm(20), 4, dimnames = list(letters[1:4], NULL))
  registerVariables(ns, list(X = X, i = 1:5, f = factor(c("a", "b"))))
  expect_true(paste0(ns, ".X") %in% unlist(pageList()))
  v <- retrieveViews(ns, c("X", "i", "f"))
  expect_named(v, c("X", "i", "f"))
  expect_identical(v$X, X)
  expect_identical(v$i, 1:5)
  expect_identical(v$f, factor(c("a", "b")))
  expect_true(is_shared(v$X))
  expect_true(paste0(ns, ".X") %in% unlist(viewList()))
  md <- retrieveMetadata(ns, "X")
  expect_identical(md[c("type", "nrow", "ncol")], list(type = "matrix", nrow = 4, ncol = 5))
  expect_identical(retrieveMetadata(ns, "i")[c("type", "n")], list(type = "vector", n = 5))
  expect_length(retrieveMetadata(ns, c("X", "i")), 2L)
  # another process finds the variable by name
  other <- callr::r(function(ns) { library(pageshare); v <- retrieveViews(ns, "X")$X; list(is_shared(v), v) }, args = list(ns = ns))
  expect_true(other[[1]])
  expect_identical(other[[2]], X)
  releaseViews(ns, c("X", "i", "f"))
  expect_false(paste0(ns, ".X") %in% unlist(viewList()))
  releaseVariables(ns, c("X", "i", "f"))
  expect_false(paste0(ns, ".X") %in% unlist(pageList()))
  expect_identical(v$X, X)   # a released variable's existing views keep working
})

test_that("memshare API errors are R errors that say what to do", {
  ns <- paste0("t_ms_err_", Sys.getpid())
  registerVariables(ns, list(a = 1:3))
  on.exit(memshare_gc(ns))
  expect_error(retrieveViews(ns, "nope"), "variable 'nope' is not registered in namespace .* it holds: 'a'", class = "pageshare_error")
  expect_error(registerVariables(ns, list(a = 1:3)), sprintf("already registered by process %d", Sys.getpid()))
  expect_error(registerVariables(ns, list(1:3)), "named list", class = "pageshare_error")
  expect_error(registerVariables(ns, list(e = new.env())), "variableList\\$e: it is an environment")
  expect_error(registerVariables(ns, list(s = list(1))), "variableList\\$s: it is of type list")
  expect_error(registerVariables("", list(a = 1)), "`namespace` must be a single non-empty string")
  expect_error(releaseVariables(ns, "zzz"), "variable 'zzz' not registered")
  expect_error(releaseViews(ns, "a"), "no view of 'a'")
  expect_error(retrieveViews(ns, 1), "`variableNames` must be a character vector")
})

test_that("a name registered by another live session is refused, naming the holder", {
  ns <- paste0("t_ms_other_", Sys.getpid())
  out <- tempfile()
  proc <- callr::r_bg(function(ns, out) {
    library(pageshare)
    registerVariables(ns, list(x = 1:10))
    writeLines(as.character(Sys.getpid()), out)
    Sys.sleep(600)
  }, args = list(ns = ns, out = out))
  on.exit({ proc$kill(); proc$wait(5000) })
  pid <- wait_for_lines(out)
  expect_error(registerVariables(ns, list(x = 1:10)), sprintf("process %s", pid))
  expect_identical(retrieveViews(ns, "x")$x, 1:10)
  releaseViews(ns, "x")
  # an unknown name lists what the namespace holds, whoever registered it
  expect_error(retrieveViews(ns, "y"), "it holds: 'x'")
})

test_that("memshare_gc releases a namespace's views and variables", {
  ns <- paste0("t_ms_gc_", Sys.getpid())
  registerVariables(ns, list(a = 1:3, b = as.double(1:3)))
  retrieveViews(ns, "a")
  memshare_gc(ns)
  expect_false(any(startsWith(as.character(unlist(pageList())), ns)))
  expect_false(any(startsWith(as.character(unlist(viewList())), ns)))
})

test_that("namespace and variable names with unicode, dots and slashes work", {
  ns <- paste0("ns/ü.", Sys.getpid())
  registerVariables(ns, list(`a.b/c` = 1:3))
  on.exit(releaseVariables(ns, "a.b/c"))
  expect_identical(retrieveViews(ns, "a.b/c")[[1]], 1:3)
  releaseViews(ns, "a.b/c")
})

test_that("a non-ASCII name works in a C locale too, without a warning (regression)", {
  # (views held were kept under the name as an R binding, which R translates
  # to the native encoding: in a C locale a warning and a wrong key)
  got <- run_rscript(shell = "export LC_ALL=C LANG=C", c(
    "library(pageshare); options(warn = 2)",
    "ns <- paste0('ns/\\u00fc.', Sys.getpid()); var <- 'v\\u00e9'",
    "registerVariables(ns, stats::setNames(list(1:3), var))",
    "v <- retrieveViews(ns, var)[[1]]; held <- viewList()",
    "releaseViews(ns, var); after <- viewList(); releaseVariables(ns, var)",
    "saveRDS(list(v = v, held = held, after = after, locale = l10n_info()[['UTF-8']]), OUT)"))
  expect_false(got$saved$locale)   # the premise: not a UTF-8 locale
  expect_identical(got$saved$v, 1:3)
  expect_match(unlist(got$saved$held), "\u00e9", fixed = TRUE, all = FALSE)
  expect_length(got$saved$after, 0L)
})

test_that("a view of a released variable never reads a re-registered one (regression)", {
  ns <- paste0("t_rereg_", Sys.getpid())
  registerVariables(ns, list(x = as.numeric(1:1e5) + 0.5))
  v <- retrieveViews(ns, "x")$x
  releaseViews(ns, "x")
  releaseVariables(ns, "x")
  registerVariables(ns, list(x = rep(-7, 1e5)))
  on.exit(releaseVariables(ns, "x"))
  expect_identical(range(v), c(1.5, 1e5 + 0.5))     # range() asks for a writeable pointer
  expect_identical(v[1:3], c(1.5, 2.5, 3.5))
  w <- retrieveViews(ns, "x")$x                      # the new variable, not the old mapping
  expect_identical(w[1:2], c(-7, -7))
  releaseViews(ns, "x")
})

test_that("a name released and registered again gives its new data to holders of the old view (regression)", {
  ns <- paste0("t_rereg_held_", Sys.getpid())
  registerVariables(ns, list(A = 1:10 + 0))
  old <- retrieveViews(ns, "A")$A                     # kept by name in this process
  releaseVariables(ns, "A")
  registerVariables(ns, list(A = 101:110 + 0))
  expect_identical(retrieveViews(ns, "A")$A[], 101:110 + 0)
  expect_identical(old[], 1:10 + 0)                    # the old view itself keeps its data
  releaseVariables(ns, "A")
  expect_error(retrieveViews(ns, "A"), class = "pageshare_not_registered")
  expect_length(viewList()[grepl(ns, unlist(viewList()), fixed = TRUE)], 0L)
})

test_that("a worker that retrieved a name sees it registered again (regression)", {
  skip_if_not_installed("future")
  ns <- paste0("t_rereg_worker_", Sys.getpid())
  local_shm_plan(workers = I(1))
  get_a <- function(ns) {
    a <- pageshare::retrieveViews(ns, "A")$A
    a[]
  }
  registerVariables(ns, list(A = 1:10 + 0))
  expect_identical(future::value(future::future(get_a(ns))), 1:10 + 0)
  releaseVariables(ns, "A")
  registerVariables(ns, list(A = 101:110 + 0))
  expect_identical(future::value(future::future(get_a(ns))), 101:110 + 0)
  releaseVariables(ns, "A")
  expect_error(future::value(future::future(get_a(ns))), class = "pageshare_not_registered")
})
