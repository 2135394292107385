# Writes memshare-cases.txt: the three deterministic inputs of issue 14 whose
# memshare::mutualinfo(x, y, isYDiscrete = TRUE) values the tests check (no
# random numbers; frac(v) = v - floor(v)). One line per point: case, y, x
# (x with 17 significant digits, which round-trips exactly).
#   Rscript make-memshare-cases.R
frac <- function(v) v - floor(v)
cases <- list()
i <- 1:1000; y <- (i %% 3) + 1
cases[[1]] <- data.frame(case = 1L, y = y, x = 2 * sin(i) + y)
i <- 1:5000; y <- ((7 * i) %% 5) + 1
cases[[2]] <- data.frame(case = 2L, y = y, x = qnorm(frac(0.6180339887498949 * i)) + 0.8 * y)
i <- 1:2000; y <- (i %% 32) + 1
z <- qnorm(frac(0.7548776662466927 * i)); on <- frac(0.5698402909980532 * i) > 0.3
cases[[3]] <- data.frame(case = 3L, y = y, x = log2(1 + ifelse(on, 2^(3 + 1.5 * z + 0.1 * y), 0)))
d <- do.call(rbind, cases)
writeLines(sprintf("%d %d %.17g", d$case, as.integer(d$y), d$x), "memshare-cases.txt")
