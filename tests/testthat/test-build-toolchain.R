# src/rust/build.sh checks the Rust toolchain before it builds, and says what
# it found and what to do. Runs from a source tree (tools/test.sh); R CMD
# check has no tools to run it with.

source_tree <- function() {
  d <- normalizePath(file.path(getwd(), "..", ".."), mustWork = FALSE)
  if (file.exists(file.path(d, "src", "rust", "build.sh"))) d else NULL
}

fake_toolchain <- function(version) {
  dir <- tempfile("fake-rust-")
  dir.create(dir)
  writeLines(c("#!/bin/sh", sprintf("echo 'rustc %s (0000000 2022-08-08)'", version)), file.path(dir, "rustc"))
  writeLines(c("#!/bin/sh", sprintf("echo 'cargo %s'", version)), file.path(dir, "cargo"))
  Sys.chmod(file.path(dir, c("rustc", "cargo")), "0755")
  dir
}

run_build <- function(root, path) {
  out <- suppressWarnings(system2("sh", c("rust/build.sh", tempfile()), stdout = TRUE, stderr = TRUE,
                                  env = c(sprintf("PATH=%s", path), "HOME=/nonexistent")))
  status <- attr(out, "status")
  list(status = if (is.null(status)) 0L else status, text = paste(out, collapse = "\n"))
}

test_that("too old a rustc, or none, stops the build with what was found and what to do", {
  root <- source_tree()
  skip_if(is.null(root), "no source tree here (R CMD check): tools/test.sh runs this test")
  old <- setwd(file.path(root, "src"))
  on.exit(setwd(old), add = TRUE)
  fake <- fake_toolchain("1.63.0")
  got <- run_build(root, paste(fake, "/usr/bin:/bin", sep = ":"))
  expect_identical(got$status, 1L)
  expect_match(got$text, "needs rustc >= 1.87; found 'rustc 1.63.0", fixed = TRUE)
  expect_match(got$text, "rustup", fixed = TRUE)
  got <- run_build(root, "/usr/bin:/bin")
  expect_identical(got$status, 1L)
  expect_match(got$text, "none found", fixed = TRUE)
})
