# DEVELOPING.md's "Layout" section names every source file and folder of the package,
# and nothing that is not there: each bullet starts with a folder (`R/`,
# `src/`, `src/rust/<crate>/src/`, ...) and names the files and subfolders in
# it. Runs from a source tree (tools/test.sh); R CMD check has no DEVELOPING.md to read.

source_root <- function() {
  for (d in c(file.path(getwd(), "..", ".."), Sys.getenv("PAGESHARE_SOURCE"))) {
    if (nzchar(d) && file.exists(file.path(d, "DEVELOPING.md")) && dir.exists(file.path(d, "src", "rust"))) {
      return(normalizePath(d))
    }
  }
  NULL
}

layout_bullets <- function(readme) {
  lines <- readLines(readme, warn = FALSE)
  from <- grep("^## Layout", lines)
  to <- c(grep("^## ", lines), length(lines) + 1)
  to <- min(to[to > from])
  text <- paste(lines[(from + 1):(to - 1)], collapse = "\n")
  bullets <- strsplit(text, "\n- ", fixed = TRUE)[[1]]
  bullets <- sub("^- ", "", trimws(bullets))
  bullets[nzchar(bullets)]
}

# The files and folders a bullet names, relative to its first folder.
named_in <- function(bullet) {
  ticks <- regmatches(bullet, gregexpr("`[^`]+`", bullet))[[1]]
  ticks <- gsub("`", "", ticks)
  list(dir = ticks[1], names = unique(grep("^[A-Za-z0-9_.-]+(\\.(R|rs|c|h)|/)$", ticks[-1], value = TRUE)))
}

# What is in a folder: source files, and subfolders (as "name/"); test files
# of Rust modules (tests.rs) and build output are not layout.
present_in <- function(root, dir) {
  path <- file.path(root, dir)
  entries <- list.files(path, all.files = FALSE, no.. = TRUE)
  is_dir <- dir.exists(file.path(path, entries))
  files <- entries[!is_dir & grepl("\\.(R|rs|c|h)$", entries) & entries != "tests.rs"]
  dirs <- sprintf("%s/", entries[is_dir & !entries %in% c("target", "testdata", "results")])
  c(files, dirs)
}

test_that("DEVELOPING.md's layout names every source file and folder, and only those", {
  root <- source_root()
  skip_if(is.null(root), "no source tree here (R CMD check): tools/test.sh runs this test")
  bullets <- lapply(layout_bullets(file.path(root, "DEVELOPING.md")), named_in)
  bullets <- Filter(function(b) grepl("^(R|src)/", b$dir), bullets)
  covered <- vapply(bullets, function(b) b$dir, "")
  required <- c("R/", "src/", "src/rust/pageshare-core/src/", "src/rust/pageshare-r/src/",
                "src/rust/pageshare-mutual-info/src/", "src/rust/pageshare-pool/src/")
  expect_true(all(required %in% covered), info = paste(setdiff(required, covered), collapse = ", "))
  for (b in bullets) {
    if (!dir.exists(file.path(root, b$dir))) {
      fail(paste("DEVELOPING.md's layout names a folder that is not there:", b$dir))
      next
    }
    present <- present_in(root, b$dir)
    expect_identical(sort(setdiff(present, b$names)), character(0), info = paste("not in DEVELOPING.md:", b$dir))
    expect_identical(sort(setdiff(b$names, present)), character(0), info = paste("not in the tree:", b$dir))
  }
})

test_that("only the pool's wire module defines the codes of its messages and events, and R and C read them by name", {
  root <- source_root()
  skip_if(is.null(root), "no source tree here (R CMD check): tools/test.sh runs this test")
  crates <- file.path(root, "src", "rust", c("pageshare-pool", "pageshare-r"), "src")
  rust <- list.files(crates, pattern = "\\.rs$", recursive = TRUE, full.names = TRUE)
  wire <- file.path(root, "src", "rust", "pageshare-pool", "src", "wire.rs")
  # (a flag bit of a tag, a version, or a code of a message or event)
  defines <- function(f) {
    any(grepl("const +(RELEASE|PLAIN|CONDITION|SCAN|VALUE|RELAY|FLAGS|WIRE_VERSION|PACKAGE_VERSION)\\b|<< *(5[89]|6[0-3])\\b",
              readLines(f, warn = FALSE)))
  }
  expect_true(defines(wire))
  expect_identical(basename(Filter(defines, setdiff(rust, wire))), character(0))
  # (and the types of its messages, events and payloads)
  types <- function(f) {
    any(grepl("(enum|struct) +(Event|EventKind|Kind|Status|Frame|PlainCall|Args|ValueKind|StringMark|ValueWriter|ValueReader|Value|Relay)\\b",
              readLines(f, warn = FALSE)))
  }
  expect_true(types(wire))
  expect_identical(basename(Filter(types, setdiff(rust, wire))), character(0))
  # Events and a worker's tasks are named lists: nothing reads them by position.
  rc <- c(list.files(file.path(root, "R"), "\\.R$", full.names = TRUE),
          list.files(file.path(root, "src"), "\\.c$", full.names = TRUE))
  positional <- function(f) {
    any(grepl("\\b(ev|msg)\\[\\[[0-9]|VECTOR_ELT\\((ev|msg), *[0-9]|ScalarInteger\\(7\\)", readLines(f, warn = FALSE)))
  }
  expect_identical(basename(Filter(positional, rc)), character(0))
})

test_that("no C file encodes or decodes the pool's messages or touches R's serialization, and C stays small", {
  root <- source_root()
  skip_if(is.null(root), "no source tree here (R CMD check): tools/test.sh runs this test")
  c_files <- list.files(file.path(root, "src"), "\\.(c|h)$", full.names = TRUE)
  # R's serializer or its format (a stream, R's own item codes and string
  # levels), and the pool's messages (their fields read by name, the Rust
  # functions of the pool called from C, an event of C's own)
  serializes <- "R_(Un)?[Ss]erialize\\b|R_(Init)?(Out|In)PStream|R_pstream_|R_(out|inp)pstream|NILVALUE_SXP|LEVEL_(ASCII|UTF8|LATIN1|BYTES)"
  messages <- paste0("\"(payload|event|reply|plain|scan|shared|status|what)\"|",
                     "\\bps_(pool|plain|task_value|wire)[A-Za-z_]*_rs *\\(|ScalarInteger\\(7\\)")
  touches <- function(f, pattern) any(grepl(pattern, readLines(f, warn = FALSE)))
  expect_identical(basename(Filter(function(f) touches(f, serializes), c_files)), character(0))
  expect_identical(basename(Filter(function(f) touches(f, messages), c_files)), character(0))
  lines <- sum(vapply(c_files, function(f) length(readLines(f, warn = FALSE)), 0L))
  expect_lte(lines, 650)
})
