# Accuracy of mutual_information(method = "pde") on the feature families of
# issue 29: heavy tails, counts, rounded values and zero-inflated features.
# N = 10,446 cases in the 32 classes of the paper's sizes; 5 seeds per family.
#   null:        x independent of y (true MI 0)
#   informative: class shifts on the latent scale; the truth is computed
#                (numerical integration for a continuous x, exact sums for a
#                discrete x, both for a mixture of an atom and a density).
# Beside each estimate, the sample's own information (own_information()):
# what the true distributions say these very cases hold, so that sampling
# noise and the estimator's error are told apart; "sd" is the spread of the
# estimator's error between seeds.
# Run: R_LIBS=<library with pageshare> Rscript inst/benchmarks/bench-mi-families.R [out.csv [seeds, 5]]
# About 20 s on one core (most of it the truths).

suppressPackageStartupMessages(library(pageshare))
source(file.path(if (file.exists("inst/benchmarks/standin-data.R")) "inst/benchmarks" else
  system.file("benchmarks", package = "pageshare"), "standin-data.R"))

n <- 10446L
sizes <- standin_class_sizes(n)
k <- length(sizes)
y <- rep(seq_len(k), sizes)
pri <- sizes / n
# class shifts on the latent scale: 5 groups of classes, 0, 0.5, ..., 2 latent sds
shift <- 0.5 * ((seq_len(k) - 1L) %% 5L)

# ---- truths -------------------------------------------------------------------

# I(X; Y) for class densities dens(x, c) on a grid (trapezoid rule).
cont_truth <- function(dens, lo, hi, m = 200001L) {
  g <- seq(lo, hi, length.out = m)
  h <- g[2] - g[1]
  w <- rep(h, m); w[c(1, m)] <- h / 2
  f <- vapply(seq_len(k), function(c) dens(g, c), numeric(m))   # m x k
  p <- drop(f %*% pri)
  tot <- 0
  for (c in seq_len(k)) {
    fc <- f[, c]
    ok <- fc > 1e-300 & p > 0
    tot <- tot + pri[c] * sum(w[ok] * fc[ok] * log(fc[ok] / p[ok]))
  }
  tot
}

# I(X; Y) for class probability mass functions pmf(v, c) on the support v (exact sum).
disc_truth <- function(pmf, v) {
  f <- vapply(seq_len(k), function(c) pmf(v, c), numeric(length(v)))
  p <- drop(f %*% pri)
  tot <- 0
  for (c in seq_len(k)) {
    ok <- f[, c] > 1e-300 & p > 0
    tot <- tot + pri[c] * sum(f[ok, c] * log(f[ok, c] / p[ok]))
  }
  tot
}

# An atom at 0 with class probabilities z[c], otherwise a density: I(A; Y) +
# P(continuous) I(X; Y | continuous), A the atom indicator.
zi_truth <- function(z, dens, lo, hi) {
  pz <- sum(pri * z)
  ia <- disc_truth(function(v, c) ifelse(v == 0, z[c], 1 - z[c]), c(0, 1))
  w <- pri * (1 - z) / (1 - pz)
  g <- seq(lo, hi, length.out = 200001L)
  h <- g[2] - g[1]
  f <- vapply(seq_len(k), function(c) dens(g, c), numeric(length(g)))
  p <- drop(f %*% w)
  ic <- 0
  for (c in seq_len(k)) {
    ok <- f[, c] > 1e-300 & p > 0
    ic <- ic + w[c] * sum(h * f[ok, c] * log(f[ok, c] / p[ok]))
  }
  ia + (1 - pz) * ic
}

# ---- families: gen(s) draws x for class shifts s (0 for the null) -------------------

# Each family: gen(s) draws x for class shifts s (0 for the null); truth, the
# informative MI; cond(x, c), the density (or probability) of x in class c on
# a scale of x's own (for the sample's own information, see below).
fam <- list()
add <- function(name, gen, truth, cond) fam[[name]] <<- list(gen = gen, truth = truth, cond = cond)
gauss_truth <- function(sd = 1) cont_truth(function(g, c) dnorm(g, shift[c] * sd, sd), -12 * sd, 12 * sd + 2 * sd)

add("normal(0,1)", function(s) rnorm(n, s), gauss_truth(), function(x, c) dnorm(x, shift[c]))
for (sdl in c(1, 2, 3)) {
  # lognormal(0, sdl): exp(sdl * z); the MI is that of z
  add(sprintf("lognormal(0,%g)", sdl), local({ sdl <- sdl; function(s) exp(sdl * rnorm(n, s)) }), gauss_truth(),
      local({ sdl <- sdl; function(x, c) dnorm(log(x) / sdl, shift[c]) }))
}
for (df in c(1, 2, 3)) {
  add(sprintf("t_%g", df), local({ df <- df; function(s) rt(n, df) + s }),
      local({ df <- df; cont_truth(function(g, c) dt(g - shift[c], df), -2000, 2000, m = 400001L) }),
      local({ df <- df; function(x, c) dt(x - shift[c], df) }))
}
for (lam in c(1, 5, 20, 50, 500)) {
  # Poisson counts: the log mean shifts by 0.3 * s / sqrt(lam) ... a shift of s latent sds
  add(sprintf("poisson(%g)", lam), local({ lam <- lam; function(s) rpois(n, lam + s * sqrt(lam)) }),
      local({ lam <- lam; v <- 0:(lam * 4 + 100); disc_truth(function(v, c) dpois(v, lam + shift[c] * sqrt(lam)), v) }),
      local({ lam <- lam; function(x, c) dpois(x, lam + shift[c] * sqrt(lam)) }))
}
for (size in c(0.5, 1, 5)) {
  # negative binomial, mean 50, dispersion 1/size; the mean shifts by s sds
  add(sprintf("negbin(mu=50,size=%g)", size), local({ size <- size; function(s) {
    sdv <- sqrt(50 + 50^2 / size); rnbinom(n, size = size, mu = 50 + s * sdv) } }),
    local({ size <- size; sdv <- sqrt(50 + 50^2 / size); v <- 0:5000
      disc_truth(function(v, c) dnbinom(v, size = size, mu = 50 + shift[c] * sdv), v) }),
    local({ size <- size; sdv <- sqrt(50 + 50^2 / size); function(x, c) dnbinom(x, size = size, mu = 50 + shift[c] * sdv) }))
}
for (r in c(1, 0.5, 0.2, 0.1, 0.05, 0.01)) {
  add(sprintf("normal rounded to %g", r), local({ r <- r; function(s) round(rnorm(n, s) / r) * r }),
      local({ r <- r; v <- seq(-12, 14, by = r)
        disc_truth(function(v, c) pnorm(v + r / 2, shift[c]) - pnorm(v - r / 2, shift[c]), v) }),
      local({ r <- r; function(x, c) pnorm(x + r / 2, shift[c]) - pnorm(x - r / 2, shift[c]) }))
}
for (z0 in c(0.6, 0.3, 0.9)) {
  # a zero with probability z0 (shifted to z0 - 0.1 * s in informative classes), else lognormal(0, 2)
  # whose latent mean shifts by s
  add(sprintf("%g zeros + lognormal(0,2)", z0), local({ z0 <- z0; function(s) {
    zc <- pmax(0.02, z0 - 0.1 * s)
    ifelse(runif(n) < zc, 0, exp(2 * rnorm(n, s))) } }),
    local({ z0 <- z0; zi_truth(pmax(0.02, z0 - 0.1 * shift), function(g, c) dnorm(g, shift[c]), -12, 14) }),
    local({ z0 <- z0; function(x, c) {
      zc <- max(0.02, z0 - 0.1 * shift[c])
      ifelse(x == 0, zc, (1 - zc) * dnorm(log(pmax(x, 1e-300)) / 2, shift[c])) } }))
}
# RNA-seq-like: counts of a zero-inflated lognormal (a mixture of atoms and a tail)
local({
  g <- seq(-8, 7.5, by = 0.01)
  v <- 0:10000
  dp <- outer(v, g, function(v, g) dpois(v, exp(2 + g)))      # P(v | latent g)
  pmf <- function(v, c) 0.4 * (v == 0) + 0.6 * drop(dp[v + 1, , drop = FALSE] %*% (dnorm(g, shift[c]) * 0.01))
  add("counts of 0.4 zeros + lognormal(2,1)", function(s) {
    ifelse(runif(n) < 0.4, 0, rpois(n, exp(2 + rnorm(n, s))))
  }, disc_truth(pmf, v), function(x, c) pmf(x, c))
})

# The sample's own information: the mean over its cases of log(f(x | y) / f(x))
# with the true distributions (what an estimator that knew them would give).
# Its spread between seeds is the sampling noise no estimator avoids; an
# estimate's error against it is the estimator's own.
own_information <- function(f, x) {
  u <- unique(x)
  d <- vapply(seq_len(k), function(c) f$cond(u, c), numeric(length(u)))   # (each value once)
  at <- match(x, u)
  mean(log(d[cbind(at, y)] / drop(d %*% pri)[at]))
}

# ---- the runs -----------------------------------------------------------------------

args <- commandArgs(TRUE)
out_file <- if (length(args)) args[1] else ""
seeds <- seq_len(if (length(args) > 1) as.integer(args[2]) else 5L)
rows <- list()
for (name in names(fam)) {
  f <- fam[[name]]
  null <- inf <- own <- numeric(length(seeds))
  for (i in seq_along(seeds)) {
    set.seed(1000 + seeds[i])
    x0 <- f$gen(0)
    x1 <- f$gen(shift[y])
    X <- cbind(x0, x1)
    v <- mutual_information(X, y, cores = 1)
    null[i] <- v[1]
    inf[i] <- v[2]
    own[i] <- own_information(f, x1)
  }
  rows[[name]] <- data.frame(family = name, null_mean = mean(null), null_max = max(null),
                             truth = f$truth, inf_mean = mean(inf), rel_err = mean(inf) / f$truth - 1,
                             own_mean = mean(own), own_rel_err = mean(own) / f$truth - 1,
                             rel_err_own = mean(inf - own) / f$truth,
                             rel_err_own_sd = sd(inf - own) / f$truth)
  cat(sprintf("%-38s null %.4f (max %.4f)  truth %.4f  est %.4f %+6.1f%%  sample's own %+6.1f%%  est - own %+6.1f%% (sd %.1f%%)\n",
              name, mean(null), max(null), f$truth, mean(inf), 100 * (mean(inf) / f$truth - 1),
              100 * (mean(own) / f$truth - 1), 100 * mean(inf - own) / f$truth, 100 * sd(inf - own) / f$truth))
}
res <- do.call(rbind, rows)
if (nzchar(out_file)) write.csv(res, out_file, row.names = FALSE)
