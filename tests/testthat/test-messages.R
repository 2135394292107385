# Messages of bad inputs name the argument they are about, once, and say what
# is expected.

test_that("a bad CLUSTER is named as CLUSTER, with what it may be instead", {
  e <- tryCatch(memApply(matrix(1:4, 2), 2, sum, CLUSTER = 2), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), "^`CLUSTER` must be a cluster")
  expect_match(conditionMessage(e), "NULL: pageshare's own pool", fixed = TRUE)
  e <- tryCatch(registerDoShm(cl = "two"), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), "^`cl` must be a cluster")
})

test_that("a name registered twice is named once", {
  registerVariables("msg_ns", list(X = 1:3))
  on.exit(releaseVariables("msg_ns", "X"))
  e <- tryCatch(registerVariables("msg_ns", list(X = 1:3)), error = function(e) e)
  expect_s3_class(e, "pageshare_name_taken")
  expect_match(conditionMessage(e), "^variable 'X' in namespace 'msg_ns' is already registered by process")
  expect_identical(lengths(regmatches(conditionMessage(e), gregexpr("variable 'X'", conditionMessage(e)))), 1L)
})
