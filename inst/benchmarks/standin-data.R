# A synthetic stand-in for the RNA-seq data of the memshare paper's feature
# selection (which is not available here), as issue 14 specifies it: N cases in
# 32 classes (the paper's sizes, scaled to N), p genes; per gene a baseline
# mu ~ N(3, 2^2) on the log2 scale; 45% null genes (no class effect), 10% weak
# (effects ~ N(0, 0.3^2)), 35% moderate (effects ~ N(0, s^2), s ~ U(0.7, 1.1)),
# 10% markers (1-3 classes, drawn with probability proportional to their size,
# get + U(2, 5)); latent z = mu + effect[class] + u t_5 with u ~ U(0.5, 1.2);
# TPM = max(2^z - 1, 0); a zero with probability logistic(-1.5 - 1.2 (m - 1)),
# m = mu + effect[class]; the feature is log2(1 + TPM).
#   source("inst/benchmarks/standin-data.R"); d <- standin_data(p = 300)
# d$X is an N x p double matrix (columns filled block by block, no copy of
# the whole), d$y the classes, d$kind each gene's kind.

standin_sizes <- c(1095, 545, 533, 520, 516, 515, 505, 501, 497, 469, 457, 415, 408, 374, 371, 304, 290,
                   259, 184, 179, 178, 166, 166, 151, 150, 119, 87, 80, 79, 66, 48, 36)

# The sizes scaled to n cases (largest remainders); for n = 10,446: 1115, 555, ...
standin_class_sizes <- function(n) {
  e <- standin_sizes * n / sum(standin_sizes)
  f <- floor(e)
  extra <- order(f - e)[seq_len(n - sum(f))]
  f[extra] <- f[extra] + 1
  f
}

standin_data <- function(p = 19637L, n = 10446L, seed = 14L, block = 512L) {
  set.seed(seed)
  sizes <- standin_class_sizes(n)
  k <- length(sizes)
  y <- rep(seq_len(k), sizes)
  kind <- sample(c("null", "weak", "moderate", "marker"), p, TRUE, prob = c(0.45, 0.10, 0.35, 0.10))
  X <- matrix(0, n, p, dimnames = list(NULL, sprintf("g%05d", seq_len(p))))
  for (start in seq(1L, p, by = block)) {
    idx <- start:min(p, start + block - 1L)
    b <- length(idx)
    mu <- rnorm(b, 3, 2)
    eff <- matrix(0, k, b)                       # class effects, k x b
    for (j in seq_len(b)) {
      eff[, j] <- switch(kind[idx[j]],
        null = 0,
        weak = rnorm(k, 0, 0.3),
        moderate = rnorm(k, 0, runif(1, 0.7, 1.1)),
        marker = {
          e <- numeric(k)
          hit <- sample(k, sample(1:3, 1), prob = sizes)
          e[hit] <- runif(length(hit), 2, 5)
          e
        })
    }
    m <- sweep(eff, 2, mu, "+")                  # class means on the log2 scale
    u <- runif(b, 0.5, 1.2)
    z <- m[y, , drop = FALSE] + sweep(matrix(rt(n * b, 5), n, b), 2, u, "*")
    tpm <- pmax(2^z - 1, 0)
    pz <- stats::plogis(-1.5 - 1.2 * (m[y, , drop = FALSE] - 1))
    tpm[runif(n * b) < pz] <- 0
    X[, idx] <- log2(1 + tpm)
  }
  list(X = X, y = y, kind = kind)
}
