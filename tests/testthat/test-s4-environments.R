# S4 objects (slot by slot) and environments, R6 objects among them (their
# large values swapped for views while they are sent): shared through every
# door as lists and closures' frames are (R/sharing-rule.R, share()).

skip_if_not_installed("future")
skip_if_not_installed("foreach")
skip_if_not_installed("Matrix")

# A sparse matrix whose `x` slot (1.6 MB) is above the 1 MiB threshold.
sparse <- function() {
  set.seed(42)
  Matrix::rsparsematrix(2000, 2000, density = 0.05)
}

test_that("share() shares an S4 object slot by slot: same class, identical, its slots views", {
  m <- sparse()
  s <- share(m)
  expect_s4_class(s, "dgCMatrix")
  expect_identical(s, m)
  expect_true(is_shared(s@x))
  expect_true(is_shared(s@i))
  expect_true(is_shared(s@p))
  expect_false(is_shared(m@x))
  expect_identical(Matrix::colSums(s), Matrix::colSums(m))
  d <- share(Matrix::Matrix(matrix(runif(20), 4)))
  expect_s4_class(d, "dgeMatrix")
  expect_true(is_shared(d@x))
  setClass("pageshare_test_holder", representation(f = "function"))
  on.exit(removeClass("pageshare_test_holder"), add = TRUE)
  expect_error(share(new("pageshare_test_holder", f = identity)), class = "pageshare_unsupported_type")
})

test_that("a sparse Matrix reaches every door's workers as views of its slots", {
  m <- sparse()
  expected <- Matrix::colSums(m)[1:2]
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  got <- future::value(future::future(c(pageshare::is_shared(m@x), Matrix::colSums(m)[1:2])))
  expect_equal(got, c(1, expected), ignore_attr = TRUE)
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  got <- foreach::foreach(i = 1:2, .combine = rbind) %dopar% c(pageshare::is_shared(m@x), Matrix::colSums(m)[i])
  expect_equal(unname(got), unname(cbind(1, expected)))
  got <- shm_map(1:2, function(i, mm) c(pageshare::is_shared(mm@x), Matrix::colSums(mm)[i]), mm = m)
  expect_equal(unname(do.call(rbind, got)), unname(cbind(1, expected)))
  got <- memApply(matrix(1:4, 2), 2, function(col, mm) c(pageshare::is_shared(mm@x), Matrix::colSums(mm)[col[1]]),
                  VARS = list(mm = m))
  expect_equal(unname(do.call(rbind, got)), unname(cbind(1, Matrix::colSums(m)[c(1, 3)])))
  # (the caller's object is as it was)
  expect_false(is_shared(m@x))
  expect_identical(m, sparse())
})

test_that("an environment's large values reach a future's worker as views; the caller's are untouched", {
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  e <- new.env()
  e$v <- as.double(seq_len(2e5))
  e$small <- 1
  v <- e$v
  got <- future::value(future::future({
    shared <- pageshare::is_shared(e$v)
    e$small <- 2   # (the worker's own copy of the environment)
    c(shared, sum(e$v), e$small)
  }))
  expect_identical(got, c(1, sum(v), 2))
  expect_identical(e$small, 1)
  expect_false(is_shared(e$v))
  expect_identical(e$v, v)
})

test_that("an R6 object's public and private fields reach the workers as views", {
  skip_if_not_installed("R6")
  Holder <- R6::R6Class("Holder",
    public = list(data = NULL,
                  initialize = function(n) {
                    self$data <- as.double(seq_len(n))
                    private$hidden <- as.double(seq_len(n)) * 2
                  },
                  report = function() c(pageshare::is_shared(self$data), pageshare::is_shared(private$hidden),
                                        sum(self$data) + sum(private$hidden))),
    private = list(hidden = NULL))
  h <- Holder$new(2e5)
  total <- sum(h$data) * 3
  future::plan(pageshare::shm_multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  expect_identical(future::value(future::future(h$report())), c(1, 1, total))
  registerDoShm(cores = 2)
  on.exit(foreach::registerDoSEQ(), add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  got <- foreach::foreach(i = 1:2, .combine = rbind) %dopar% h$report()
  expect_equal(unname(got), rbind(c(1, 1, total), c(1, 1, total)))
  expect_identical(shm_value(shm_call(function(o) o$report(), h)), c(1, 1, total))
  # (locked bindings and environments stay locked; nothing is left swapped)
  expect_true(bindingIsLocked("report", h))
  expect_false(is_shared(h$data))
})
