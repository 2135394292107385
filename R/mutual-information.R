#' Mutual information of every feature with a discrete response
#'
#' `mutual_information()` computes I(X_j; Y), the mutual information of each
#' column X_j of `X` with the classes `y`, in nats (or in the unit of `base`),
#' in Rust, in parallel over blocks of columns on pageshare's worker pool. `X`
#' is shared once ([share()]) and every worker reads the same pages; each
#' worker needs memory of the order of one column beyond that. The result does
#' not depend on the number of workers (every column is computed alone, with
#' no random numbers).
#'
#' @section `method = "pde"`:
#' Pareto Density Estimation (Ultsch 2005), with these choices:
#' \itemize{
#'   \item **Scale.** The mutual information is invariant under any strictly
#'     increasing map of x, and so is this estimate: x enters only through its
#'     ranks, as normal scores qnorm((i + 1/2) / n). Whatever its tails
#'     (lognormal, Student t, counts), the feature is then standard normal,
#'     and no isolated tail point gets a window of its own.
#'   \item **Ties and zeros.** A value shared by several points is a discrete
#'     atom when it is coarse on that scale: its points, ranked apart, would
#'     span at least 0.35 standard deviations of normal scores (the zeros of
#'     RNA-seq data, the levels of small counts or of coarsely rounded values).
#'     I(X; Y) = I(D; Y) + P(continuous) I(X; Y | continuous), D the atom a
#'     point sits on (or "continuous"); I(D; Y) is estimated from the table of
#'     D and y by the delete-one jackknife of the plug-in MI, which removes
#'     the plug-in bias of about (L - 1)(K - 1) / (2n) of an L-level table. Finer
#'     ties (the levels of a count of mean 50, values rounded to a tenth of
#'     their spread) stay in the density estimate, spread over the ranks they
#'     share in a fixed pseudo-random order, as if x were jittered within
#'     each value: a position that says nothing about y beyond x leaves the
#'     mutual information unchanged, and the densities do not depend on
#'     where the window's edge cuts a level. A constant feature has MI 0.
#'   \item **Radius.** On the normal scores of the continuous points, each
#'     class c gets its own Pareto radius R_c: the exact 18% quantile of the
#'     pairwise distances of its points (found without listing the pairs: a
#'     two-pointer count per candidate and selection, so no sampling at any
#'     n), times 4 / n_c^0.2 above 1024 points. A class of fewer than 5 points
#'     takes the radius of all points.
#'   \item **Densities.** p(x | c) = k_c(x) / (n_c 2 R_c), with k_c(x) the points
#'     of class c within R_c of x; p(x) = sum_c (n_c / n) p(x | c).
#'   \item **Integration rule.** Resubstitution: the mean over the continuous
#'     points of ln(p(x_i | y_i) / p(x_i)), each point counted as 1/2 in its own
#'     window (this cancels the first-order bias of the logarithm of a count).
#'     When fewer than half the points are continuous (mostly zeros), the same
#'     estimate with the classes permuted (a fixed, seeded permutation) is
#'     subtracted from that part, to remove its small-sample bias.
#' }
#' The estimate depends on x only through its ranks (any strictly increasing
#' map of x gives the same bits), does not depend on the order of the rows, is
#' never negative, and for a feature without atoms never above the plug-in
#' H(Y) (the bias-corrected discrete part may exceed it by its correction,
#' never ln k for k classes); well separated classes give H(Y). It draws no
#' random numbers (the order of tied points and the permutation come from
#' fixed seeds): the same data give the same bits.
#'
#' Accuracy at N = 10,446 (mean of 5 seeds; `inst/benchmarks/bench-mi-families.R`
#' and the tests). Gaussian classes N(0,1) and N(d,1), classes drawn at random:
#' within 0.001 nats for d = 0.5 and 1 (true 0.0303 and 0.1114), within 0.6%
#' for d = 2 and 4; N(0,1) against N(0,9) 0.0%; three classes (0.7/0.2/0.1)
#' -0.7%. With classes of fixed equal sizes (the Rust tests): d = 0.5 and 1
#' give 0.0276 and 0.1061, d = 2 and 4 within 2.5%, N(0,9) +1.1%, three
#' classes -1.7%. 32 separated classes H(Y) within 2%; 60% zeros within 1%.
#' Features independent of the 32 classes of the paper's sizes, mean over 5
#' seeds: below 0.0025 nats for every family tried (normal; lognormal(0, 1, 2,
#' 3); Student t with 1, 2, 3 degrees of freedom; Poisson(1, 5, 20, 50, 500);
#' negative binomial of mean 50, size 0.5, 1 and 5; N(0,1) rounded to 1, 0.5,
#' 0.2, 0.1, 0.05, 0.01; 30%, 60%, 90% zeros with a lognormal(0, 2) rest;
#' counts of a zero-inflated lognormal), e.g. lognormal(0,2) 0.0004, t_2
#' 0.0014, Poisson(50) 0.0019, rounded to 0.1 0.0010, 60% zeros 0.0005.
#' Informative features of the same families (class shifts of 0 to 2 latent
#' standard deviations): within 4.1% of the truth (computed by numerical
#' integration or exact sums), e.g. lognormal(0,2) +0.2%, t_2 +4.1%,
#' Poisson(20) +0.4%, Poisson(50) +0.7%, N(0,1) rounded to 0.2 -0.1%, 60%
#' zeros +1.6%; except the negative binomial of size 0.5, +8.4% (0.0043 nats
#' over a truth of 0.051), where the drawn cases themselves hold 4.9% more
#' than the truth: over 50 seeds that family is within 2.1% of its truth. The
#' estimator's own error (against what the true distributions say the drawn
#' cases hold) is within 1.7% for every family over 50 seeds. Table:
#' `inst/benchmarks/results/mi-families.md`. Before the change of issue 29
#' the null figures were 0.09 nats (lognormal(0,2)), 0.021 (t_2), 0.043
#' (Poisson(50)), 0.054 (rounded to 0.1), 0.056 (60% zeros), and informative
#' features of these families were overestimated by 20-74%.
#'
#' @section `method = "memshare"`:
#' The numbers of `memshare::mutualinfo(x, y, isYDiscrete = TRUE)` (memshare
#' 1.0.3.1 with DataVisualizations 1.4.0 and ScatterDensity 0.1.1) for a
#' continuous x, its quirks included, for a memshare user to compare and
#' migrate: a Pareto radius (18% distance quantile by bisection, times
#' 4 / n^0.2 above 1024 points) pads a 512-point grid; each class is binned to
#' its nearest grid point and smoothed by (I + l^2 D2'D2 + 2 l D1'D1)^-1,
#' l = min(#distinct x, 250) / 4; MI sums f ln(f / p) dx over cells with
#' f > `eps`. Known defects of that estimator: it is
#' biased low by 3-23% on Gaussian mixtures, saturates for separated classes,
#' depends on outliers (the smoothing width follows the range) and gives
#' negative values for heavily tied data. One difference: memshare draws a
#' random sample of 10,000 points for the radius when n > 10,000, so its
#' results are random there; here the radius always uses all points.
#'
#' @section Discrete features:
#' With `discrete = TRUE` every column is a discrete variable and both methods
#' give the exact plug-in MI of the contingency table (memshare's discrete case
#' drops the largest category and reports bits; see [mutualinfo()]).
#'
#' @section Progress:
#' The features are computed in blocks of 256 columns; with the progressr
#' package installed, each finished block is one progress step, shown inside
#' `progressr::with_progress()` (or with `progressr::handlers(global = TRUE)`).
#'
#' @param X A numeric (double, integer or logical) matrix, a data frame of
#'   numeric columns, a numeric vector (one feature), or a view of one made by
#'   [share()]. Cases in rows, features in columns.
#' @param y The classes: a factor, or an integer, numeric, character or
#'   logical vector with one value per row of `X` and at least two classes.
#' @param method `"pde"` (default) or `"memshare"`, see the sections.
#' @param discrete `TRUE` to treat every feature as discrete (plug-in MI).
#' @param eps For `method = "memshare"`: density cells at or below `eps` are
#'   left out (memshare's default).
#' @param na.rm `FALSE` (default): an NA in `y` or a non-finite value in `X` is
#'   an error. `TRUE`: cases with NA in `y` are left out, and non-finite values
#'   of a feature leave out that case for that feature.
#' @param base The base of the logarithm: `exp(1)` for nats (default), `2` for
#'   bits.
#' @param cores Number of workers of pageshare's pool to use (at most one per
#'   block of features); default the pool's size (option `pageshare.workers`, see
#'   [pageshare_options]). `1` computes
#'   in this R process. Checked as `cores` of [registerDoShm()].
#' @return A numeric vector, one MI per column of `X`, named by its column
#'   names.
#' @references Ultsch, A. (2005). Pareto density estimation: a density
#'   estimation for knowledge discovery. In: Innovations in Classification,
#'   Data Science, and Information Systems, 91-100. Springer.
#' @seealso [mutualinfo()] for memshare's one-pair function.
#' @examples
#' set.seed(1)
#' y <- rep(1:2, each = 500)
#' X <- cbind(null = rnorm(1000), shifted = rnorm(1000, mean = 2 * (y - 1)),
#'            zeros = ifelse(runif(1000) < 0.6, 0, rnorm(1000, 3 + y)))
#' mutual_information(X, y, cores = 1)
#' mutual_information(X, y, method = "memshare", cores = 1)
#' # the true MI of the second feature is 0.3368 nats
#' \donttest{
#' mutual_information(X, y, cores = 2)   # the same numbers, on 2 workers
#' stop_workers()
#' }
#' @export
mutual_information <- function(X, y, method = c("pde", "memshare"), discrete = FALSE,
                               eps = .Machine$double.eps * 1000, na.rm = FALSE, base = exp(1),
                               cores = NULL) {
  check_given("mutual_information", c(X = missing(X), y = missing(y)))
  method <- mi_method(method)
  check_flag(discrete, "discrete")
  check_flag(na.rm, "na.rm")
  check_number(eps, "eps", 0)
  check_base(base)
  if (!is.null(cores)) cores <- check_worker_count(cores, "cores")
  X <- mi_matrix(X)
  n <- nrow(X)
  if (n == 0L) pageshare_stop("mi_no_rows")
  cls <- mi_classes(y, n, na.rm)
  p <- ncol(X)
  out <- if (p == 0L) numeric() else mi_run(X, cls, method, eps, na.rm, discrete, base, cores)
  names(out) <- colnames(X)
  out
}

#' Mutual information of one pair (memshare API)
#'
#' Same names and arguments as memshare's `mutualinfo()`, computed by the Rust
#' code of [mutual_information()]. For a continuous `x` and a discrete `y`
#' (`isYDiscrete = TRUE`, the case of memshare's paper) it gives memshare's
#' numbers, in nats (`method = "memshare"` of [mutual_information()]; with more
#' than 10,000 points memshare samples the radius at random, pageshare does
#' not). `isXDiscrete = TRUE` alone swaps the roles, as memshare does.
#'
#' Differences from memshare: with both discrete, the result is the exact
#' plug-in MI in bits (memshare's table drops the largest category: two
#' identical 4-class variables give 1.4988 bits there, 2 here); two continuous
#' variables (memshare's 2-D estimate) and `useMPMI = TRUE` are not supported
#' (a `pageshare_bad_argument` error); non-finite values without `na.rm` are an
#' error that says so (memshare fails with "'from' must be a finite number").
#' As in memshare, fewer than 3 pairs, or `sd(x)` or `sd(y)` below `eps`, give 0.
#'
#' @param x,y Numeric vectors of the same length.
#' @param isXDiscrete,isYDiscrete Whether `x` (`y`) is discrete.
#' @param eps Density cells at or below `eps` are left out; also the
#'   standard deviation below which a variable counts as constant.
#' @param useMPMI Must be `FALSE` (memshare's switch to the mpmi package).
#' @param na.rm `TRUE` to use only pairs where both values are finite.
#' @return The mutual information: nats for a continuous and a discrete
#'   variable, bits for two discrete ones (memshare's units).
#' @seealso [mutual_information()]
#' @examples
#' x <- c(rnorm(1000), rnorm(2000) + 8, rnorm(1000) * 2 - 8)
#' y <- c(rep(1, 1000), rep(2, 2000), rep(3, 1000))
#' mutualinfo(x, y, isXDiscrete = FALSE, isYDiscrete = TRUE)
#' mutualinfo(y, y, isXDiscrete = TRUE, isYDiscrete = TRUE)   # H(y) in bits
#' @export
mutualinfo <- function(x, y, isXDiscrete = FALSE, isYDiscrete = FALSE,
                       eps = .Machine$double.eps * 1000, useMPMI = FALSE, na.rm = FALSE) {
  check_given("mutualinfo", c(x = missing(x), y = missing(y)))
  if (!is.vector(x) || !is.vector(y) || !is.numeric(x) || !is.numeric(y) || length(x) != length(y)) {
    pageshare_stop("mi_pair")
  }
  check_flag(isXDiscrete, "isXDiscrete")
  check_flag(isYDiscrete, "isYDiscrete")
  check_flag(useMPMI, "useMPMI")
  check_flag(na.rm, "na.rm")
  check_number(eps, "eps", 0)
  if (useMPMI) pageshare_stop("mi_mpmi")
  if (!isXDiscrete && !isYDiscrete) pageshare_stop("mi_both_continuous")
  if (na.rm) {
    ok <- is.finite(x) & is.finite(y)
    x <- x[ok]
    y <- y[ok]
  } else {
    for (v in c("x", "y")) if (!all(is.finite(get(v)))) pageshare_stop("mi_pair_nonfinite", v)
  }
  if (length(x) < 3L) return(0)
  if (stats::sd(x) < eps || stats::sd(y) < eps) return(0)
  both <- isXDiscrete && isYDiscrete
  if (isXDiscrete && !isYDiscrete) {
    t <- x
    x <- y
    y <- t
  }
  codes <- match(y, sort(unique(y)))
  .Call(ps_mutual_info, as.double(x), length(x), 1L, codes, max(codes), "memshare", as.double(eps),
        FALSE, both, if (both) 2 else exp(1))
}

# ---- checks ---------------------------------------------------------------------

mi_method <- function(method) {
  if (identical(method, c("pde", "memshare"))) return("pde")
  if (!is_string(method) || !method %in% c("pde", "memshare")) {
    pageshare_stop("mi_method", describe_value(method))
  }
  method
}

check_base <- function(base) {
  if (!is_number(base, finite = TRUE) || base <= 1) {
    pageshare_stop("number", "base", "greater than 1", describe_value(base))
  }
}

# X as a double matrix: a view or a double matrix as it is (not copied), other
# numeric matrices and data frames converted.
mi_matrix <- function(X) {
  if (is.data.frame(X)) {
    bad <- non_numeric_columns(X)
    if (length(bad)) pageshare_stop("mi_df", or_none(bad))
    X <- as.matrix(X)
    if (!is.double(X)) storage.mode(X) <- "double"
    return(X)
  }
  if (is.null(dim(X)) && is.atomic(X) && !is.character(X) && !is.complex(X) && !is.raw(X) && !is.factor(X)) {
    X <- matrix(as.double(X), ncol = 1L, dimnames = list(NULL, NULL))
    return(X)
  }
  if (length(dim(X)) != 2L || !(is.double(X) || is.integer(X) || is.logical(X)) || is.factor(X)) {
    pageshare_stop("mi_x", describe_object(X))
  }
  if (!is.double(X)) storage.mode(X) <- "double"
  X
}

# Integer class codes 1..k (NA where y is NA and na.rm is TRUE).
mi_classes <- function(y, n, na.rm) {
  if (is.null(y) || !is.atomic(y) || is.complex(y) || is.raw(y)) pageshare_stop("mi_y_type", describe_object(y))
  if (length(y) != n) pageshare_stop("mi_y_length", n, length(y))
  if (is.factor(y)) y <- as.character(y)
  miss <- is.na(y)
  if (any(miss) && !na.rm) pageshare_stop("mi_y_na", sum(miss))
  lev <- sort(unique(y[!miss]))
  if (length(lev) < 2L) pageshare_stop("mi_y_classes", length(lev))
  list(codes = match(y, lev), k = length(lev))
}
