# Runs last (files run in alphabetical order): nothing of ours may be left.
test_that("the test suite leaves no segment of this process behind", {
  # test_that() evaluates each test in an environment that R discards without
  # decrementing reference counts, so the identity cache cannot see those
  # sources die: forget them, then every segment must go with its last view.
  forget_shared()
  invisible(gc()); invisible(gc())
  expect_identical(own_segments(), character())
  expect_length(pageList(), 0L)
  expect_length(viewList(), 0L)
})
