# The .Call table (src/entry_points.c), the functions it registers (Rust's
# `ps_<name>_rs`, the C entry points) and the R code that calls them agree:
# tools/check-entry-points.R says so for the tree, and finds each kind of
# drift in a copy of the sources altered to have it. Runs from a source tree
# (tools/test.sh); R CMD check has no tools/ folder.

source_root <- function() {
  for (d in c(file.path(getwd(), "..", ".."), Sys.getenv("PAGESHARE_SOURCE"))) {
    if (nzchar(d) && file.exists(file.path(d, "tools", "check-entry-points.R")) && dir.exists(file.path(d, "src", "rust"))) {
      return(normalizePath(d))
    }
  }
  NULL
}

checker <- function(root) {
  env <- new.env()
  sys.source(file.path(root, "tools", "check-entry-points.R"), envir = env)
  env$entry_point_problems
}

# A copy of the sources the checker reads, in a temporary folder.
copy_sources <- function(root) {
  to <- tempfile("entry-points-")
  for (d in c("R", "src", file.path("src", "rust", "pageshare-r", "src"), file.path("tests", "testthat"))) {
    dir.create(file.path(to, d), recursive = TRUE, showWarnings = FALSE)
    files <- list.files(file.path(root, d), pattern = "\\.(R|c|h|rs)$", full.names = TRUE)
    file.copy(files, file.path(to, d))
  }
  to
}

# Replace `from` by `to` (fixed strings, first occurrence) in `file` of the copy.
alter <- function(copy, file, from, to) {
  path <- file.path(copy, file)
  text <- paste(readLines(path, warn = FALSE), collapse = "\n")
  at <- regexpr(from, text, fixed = TRUE)
  stopifnot(at > 0)
  text <- paste0(substr(text, 1, at - 1), to, substr(text, at + attr(at, "match.length"), nchar(text)))
  writeLines(text, path)
}

test_that("the .Call table matches its functions and its callers", {
  root <- source_root()
  skip_if(is.null(root), "no source tree here (R CMD check): tools/test.sh runs this test")
  expect_identical(checker(root)(root), character(0))
})

test_that("the table's check finds every kind of drift, and says which", {
  root <- source_root()
  skip_if(is.null(root), "no source tree here (R CMD check): tools/test.sh runs this test")
  problems <- checker(root)
  rust_pool <- "src/rust/pageshare-r/src/entry_pool.rs"
  rust_memshare <- "src/rust/pageshare-r/src/entry_memshare.rs"
  cases <- list(
    # a count in the table that the Rust function does not take
    list("src/entry_points.c", "X(ps_register, 7)", "X(ps_register, 6)",
         "ps_register is registered with 6 arguments, but ps_register_rs (src/rust/pageshare-r/src/entry_memshare.rs) takes 7"),
    # a Rust function that lost a parameter
    list(rust_memshare, "pub extern \"C\" fn ps_release_rs(ns: SEXP, var: SEXP)", "pub extern \"C\" fn ps_release_rs(ns: SEXP)",
         "ps_release is registered with 2 arguments, but ps_release_rs (src/rust/pageshare-r/src/entry_memshare.rs) takes 1"),
    # a registered name whose Rust function is missing (renamed)
    list(rust_memshare, "fn ps_held_rs(", "fn ps_held_now_rs(",
         "ps_held is registered as a Rust entry point, but no Rust function ps_held_rs exists"),
    # ... and the renamed one is registered nowhere
    list(rust_memshare, "fn ps_held_rs(", "fn ps_held_now_rs(",
         "ps_held_now_rs is neither registered in src/entry_points.c nor called from C"),
    # a registration that no R code calls
    list("src/entry_points.c", "X(ps_held, 0)", "X(ps_held, 0) X(ps_sweep_all, 0)",
         "ps_sweep_all is registered, but no .Call in R/ or tests/testthat/ calls it"),
    # a name listed twice
    list("src/entry_points.c", "X(ps_held, 0)", "X(ps_held, 0) X(ps_held, 0)",
         "ps_held is listed twice in RUST_ENTRY_POINTS"),
    # a .Call of a name that is not registered (misspelt)
    list("R/memshare.R", ".Call(ps_release, namespace, var)", ".Call(ps_relase, namespace, var)",
         ".Call(ps_relase) names no registered entry point"),
    # a .Call passing one argument too many (over several lines)
    list("R/memshare.R", ".Call(ps_release, namespace, var)", ".Call(ps_release,\n namespace, var, TRUE)",
         ".Call(ps_release) passes 3 arguments, but ps_release is registered with 2"),
    # ... and in a test, through pageshare:::
    list("tests/testthat/test-pool.R", ".Call(pageshare:::ps_pool_pids)", ".Call(pageshare:::ps_pool_pids, 1L)",
         ".Call(ps_pool_pids) passes 1 arguments, but ps_pool_pids is registered with 0"),
    # a C entry point registered with the wrong count
    list("src/entry_points.c", "X(ps_binding, 2)", "X(ps_binding, 3)",
         "ps_binding is registered with 3 arguments, but src/bindings.c defines it with 2"),
    # a registered C entry point that no C file defines
    list("src/bindings.c", "SEXP ps_unlock_binding(SEXP env, SEXP name) {", "SEXP ps_unlock_a_binding(SEXP env, SEXP name) {",
         "ps_unlock_binding is registered as a C entry point, but no C file defines it"),
    # ... and the renamed one is not registered
    list("src/bindings.c", "SEXP ps_unlock_binding(SEXP env, SEXP name) {", "SEXP ps_unlock_a_binding(SEXP env, SEXP name) {",
         "ps_unlock_a_binding looks like an entry point but is not registered in src/entry_points.c"),
    # a C prototype of a Rust function with the wrong count
    list("src/boundary.c", "#include \"boundary.h\"", "#include \"boundary.h\"\nSEXP ps_pool_stderr_rs(SEXP slot, SEXP more);",
         "src/boundary.c: declares ps_pool_stderr_rs with 2 arguments, but the Rust function"),
    # a Rust function with a parameter that is not a SEXP
    list(rust_pool, "pub extern \"C\" fn ps_pool_stderr_rs(slot: SEXP)", "pub extern \"C\" fn ps_pool_stderr_rs(slot: i32)",
         "ps_pool_stderr_rs takes a parameter that is not a SEXP")
  )
  for (case in cases) {
    copy <- copy_sources(root)
    expect_identical(problems(copy), character(0))
    alter(copy, case[[1]], case[[2]], case[[3]])
    found <- problems(copy)
    expect_true(any(grepl(case[[4]], found, fixed = TRUE)),
                info = paste0("expected: ", case[[4]], "\nfound: ", paste(found, collapse = "\n")))
    unlink(copy, recursive = TRUE)
  }
})
