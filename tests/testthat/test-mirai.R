# mirai's daemons on this host receive pageshare handles inside with_handles():
# mirai serializes a task's data when the call is made, so views sent in that
# scope travel as handles, and daemons with pageshare loaded map the shared
# pages; outside it they travel as plain data.

test_that("mirai_map() inside with_handles() sends daemons handles of one shared X", {
  skip_on_cran()
  skip_if_not_installed("mirai")
  # (mirai is not among the packages pageshare suggests: Debian does not ship
  # it, and R CMD check would look it up on CRAN; this test runs where it is
  # installed)
  mirai <- asNamespace("mirai")
  mirai$daemons(2)
  on.exit(mirai$daemons(0), add = TRUE)
  mirai$everywhere(library(pageshare))
  X <- share(matrix(runif(2000 * 100), 2000))
  y <- runif(2000)
  f <- function(j, X, y) c(cor(X[, j], y), pageshare::is_shared(X), Sys.getpid())
  got <- do.call(rbind, with_handles(mirai$mirai_map(seq_len(ncol(X)), f, .args = list(X = X, y = y)))[])
  expect_equal(got[, 1], as.vector(cor(X, y)))
  expect_true(all(got[, 2] == 1))                 # a view of the same segment in the daemons
  expect_false(any(got[, 3] == Sys.getpid()))
  plain <- do.call(rbind, mirai$mirai_map(1:3, f, .args = list(X = X, y = y))[])
  expect_true(all(plain[, 2] == 0))               # outside the scope: plain data
  expect_equal(plain[, 1], got[1:3, 1])
})
