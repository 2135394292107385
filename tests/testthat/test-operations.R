# The same R operations on views and on plain copies must give identical results,
# read-only work must not copy a view, and the shared pages must stay unchanged.

ops <- list(
  function(x) x[3], function(x) x[2:7], function(x) x[-1], function(x) x[c(TRUE, FALSE)],
  function(x) x[x > 0], function(x) x[[4]], function(x) head(x), function(x) tail(x, 3),
  function(x) sum(x), function(x) mean(x), function(x) prod(x[1:5]), function(x) range(x),
  function(x) min(x), function(x) max(x), function(x) cumsum(x), function(x) rev(x),
  function(x) sort(x), function(x) order(x), function(x) rank(x), function(x) unique(x),
  function(x) duplicated(x), function(x) table(x > 0), function(x) which(x > 0),
  function(x) which.max(x), function(x) x == 1, function(x) x + 1, function(x) x * x,
  function(x) -x, function(x) abs(x), function(x) is.na(x), function(x) anyNA(x),
  function(x) length(x), function(x) c(x, x), function(x) c(x[1], 0), function(x) rep(x, 2),
  function(x) as.integer(x), function(x) as.double(x), function(x) as.character(x),
  function(x) as.logical(x), function(x) as.complex(x), function(x) format(x[1:3]),
  function(x) paste(x[1:3]), function(x) summary(x), function(x) quantile(x, na.rm = TRUE),
  function(x) split(x, rep(1:2, length.out = length(x))), function(x) tapply(x, rep(1:3, length.out = length(x)), sum),
  function(x) vapply(x[1:5], function(e) e * 2, numeric(1)), function(x) sapply(x[1:4], identity),
  function(x) lapply(1:3, function(i) x[i]), function(x) Reduce(`+`, x[1:5]), function(x) Filter(function(e) e > 0, x),
  function(x) diff(x), function(x) outer(x[1:3], x[1:3]), function(x) crossprod(x),
  function(x) x %*% x, function(x) x %o% x[1:2], function(x) tabulate(as.integer(abs(x)) + 1L),
  function(x) cut(x, 3), function(x) findInterval(x, c(0, 5, 10)), function(x) match(5, x),
  function(x) 5 %in% x, function(x) setdiff(x, 1:3), function(x) union(x, 1:3), function(x) intersect(x, 1:3),
  function(x) identical(x, x), function(x) all.equal(x, x), function(x) pmax(x, 3), function(x) pmin(x, 3),
  function(x) ifelse(x > 3, 1, 0), function(x) round(x / 3, 2), function(x) sqrt(abs(x)), function(x) exp(x[1:3] / 100),
  function(x) log1p(abs(x)), function(x) var(x), function(x) sd(x), function(x) median(x), function(x) mad(x),
  function(x) scale(x)[1:3], function(x) cor(x, rev(x)), function(x) fivenum(x), function(x) IQR(x),
  function(x) rowsum(x, rep(1:2, length.out = length(x))), function(x) cumprod(x[1:5] / 10), function(x) cummax(x),
  function(x) nchar(format(x)), function(x) toString(x[1:3]), function(x) sprintf("%.1f", x[1:3]),
  function(x) as.list(x[1:3]), function(x) unlist(list(x, x)), function(x) append(x, 0, 2),
  function(x) { y <- x; y[2] <- 100; y }, function(x) { names(x) <- seq_along(x); x }, function(x) { attr(x, "foo") <- 1; x },
  function(x) { x[length(x) + 1] <- 1; x }, function(x) { dim(x) <- NULL; x }, function(x) structure(x, class = "foo"),
  function(x) unserialize(serialize(x, NULL)), function(x) unserialize(with_handles(serialize(x, NULL))),
  function(x) x[order(-x)], function(x) do.call(cbind, list(x, x)), function(x) rbind(x, x), function(x) t(x),
  function(x) matrix(x, 2), function(x) array(x, c(2, length(x) / 2)), function(x) max.col(matrix(x, 2)),
  function(x) mapply(function(a, b) a + b, x[1:3], x[4:6]), function(x) Map(`+`, x[1:2], 1), function(x) seq_along(x),
  function(x) rle(x > 3)$lengths, function(x) any(x > 5), function(x) all(x > -100), function(x) xor(x > 1, x > 2),
  function(x) is.numeric(x), function(x) typeof(x), function(x) mode(x), function(x) storage.mode(x),
  function(x) jitter(x, amount = 0) * 0, function(x) trunc(x), function(x) ceiling(x), function(x) floor(x),
  function(x) signif(x, 2), function(x) x %/% 2, function(x) x %% 2, function(x) bitwAnd(as.integer(abs(x)), 1L)
)

matrix_ops <- list(
  function(X) X[, 2], function(X) X[3, ], function(X) X[2:3, 1:2], function(X) colSums(X), function(X) rowSums(X),
  function(X) colMeans(X), function(X) rowMeans(X), function(X) X %*% t(X), function(X) crossprod(X),
  function(X) apply(X, 2, max), function(X) apply(X, 1, sum), function(X) dim(X), function(X) t(X),
  function(X) X[X > 2], function(X) which(X > 5, arr.ind = TRUE), function(X) solve(crossprod(X) + diag(ncol(X))),
  function(X) cbind(X, 1), function(X) rbind(X, 1), function(X) X * 2, function(X) cor(X), function(X) summary(X),
  function(X) split(X, col(X)), function(X) asplit(X, 2), function(X) dimnames(X), function(X) X[, "b"]
)

test_that("at least 100 operations give identical results on views and copies", {
  expect_gte(length(ops) + length(matrix_ops), 100)
  check_ops(c(as.double(c(5, 1, 9, 3, 7, 2, 8, 4, 6, 10)), -2.5, 0), ops, "double")
  check_ops(c(5L, 1L, 9L, 3L, 7L, 2L, 8L, 4L, 6L, 10L, -2L, 0L), ops, "integer")
  X <- matrix(as.double(c(4, 2, 9, 1, 5, 7, 3, 8, 6, 10, 12, 11)), 4, dimnames = list(NULL, c("a", "b", "c")))
  check_ops(X, matrix_ops, "matrix")
})

test_that("read-only operations never materialize a view", {
  x <- as.double(c(5, 1, 9, 3, 7, 2, 8, 4, 6, 10))
  v <- share(x)
  X <- share(matrix(as.double(1:20), 4))
  y <- as.double(1:4)
  for (f in list(function() v[1:3], function() v[[2]], function() is.na(v), function() sort(v),
                 function() range(v), function() v == 1, function() sum(v), function() rev(v),
                 function() X[, 2], function() colSums(X), function() X %*% as.double(1:5),
                 function() crossprod(X), function() mean(v), function() identical(v, x), function() c(v, 1),
                 function() max(v), function() order(v), function() unserialize(serialize(v, NULL)))) {
    f()
  }
  expect_identical(shared_info(v)$materializations, 0)
  expect_identical(shared_info(X)$materializations, 0)
  expect_false(shared_info(v)$private_copy)
})
