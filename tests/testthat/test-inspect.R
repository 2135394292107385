# Seeing what is shared: shared_segments() as a data frame, shared_info() and
# both printed for people.

test_that("shared_segments() is a data frame of the segments, sizes printed in IEC units", {
  x <- share(runif(3e5))
  info <- shared_info(x)
  segs <- shared_segments()
  expect_s3_class(segs, "data.frame")
  expect_identical(names(segs), c("name", "type", "length", "bytes", "owner_pid", "owned_here", "views"))
  row <- segs[segs$name == info$name, ]
  expect_identical(nrow(row), 1L)
  expect_identical(row$type, "double")
  expect_identical(row$length, 3e5)
  expect_true(row$bytes >= 8 * 3e5)
  expect_identical(row$owner_pid, Sys.getpid())
  expect_true(row$owned_here)
  expect_gte(row$views, 1L)
  y <- x[]   # (the same view)
  expect_identical(shared_segments()$views[shared_segments()$name == info$name], row$views)
  printed <- capture.output(print(segs))
  expect_true(any(grepl("2.3 MiB", printed, fixed = TRUE)))
  expect_false(any(grepl("2400", printed, fixed = TRUE)))
})

test_that("shared_segments(all = TRUE) lists the names registered here", {
  registerVariables("inspect_ns", list(v = 1:1000))
  on.exit(releaseVariables("inspect_ns", "v"))
  segs <- shared_segments(all = TRUE)
  row <- segs[segs$name == "pageshare.n.inspect_ns.v", ]
  expect_identical(nrow(row), 1L)
  expect_identical(row$owner_pid, Sys.getpid())
  expect_identical(row$type, "integer")
})

test_that("shared_info() prints a short description and stays a list", {
  x <- share(runif(3e5))
  info <- shared_info(x)
  expect_s3_class(info, "pageshare_info")
  expect_identical(info$length, 3e5)
  printed <- capture.output(print(info))
  expect_match(printed[1], "^<pageshare view: 300,000 double of 2.3 MiB, shared>$")
  expect_match(printed[2], "held by this process", fixed = TRUE)
  expect_null(shared_info(1:3))
})
