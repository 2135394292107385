# One checker family for the arguments and options of every front door.
#
# The predicates (is_*(), has_names()) say whether a value keeps a rule and
# never fail; the check_*() functions raise pageshare's classed error (see
# messages.R: the message names the argument). The rules with a message of
# their own (worker counts, options) are in worker-count.R and options.R and
# build on these predicates.

# A single string: not NA, not empty.
is_string <- function(x) {
  is.character(x) && length(x) == 1L && !is.na(x) && nzchar(x)
}

# A single number, not NA (nor NaN), of at least `min`; with `finite`, not
# infinite either.
is_number <- function(x, min = -Inf, finite = FALSE) {
  is.numeric(x) && length(x) == 1L && !is.na(x) && (!finite || is.finite(x)) && x >= min
}

# A single whole number from 1 up, finite.
is_whole_count <- function(n) {
  is_number(n, min = 1, finite = TRUE) && n == round(n)
}

# TRUE or FALSE.
is_flag <- function(x) {
  is.logical(x) && length(x) == 1L && !is.na(x)
}

# Names: a character vector with no NA and no empty element.
is_names <- function(x) {
  is.character(x) && !anyNA(x) && all(nzchar(x))
}

# Every element of `x` has a name (an empty `x` has none to give).
has_names <- function(x) {
  !length(x) || is_names(names(x))
}

# The names of the columns of data frame `df` that are neither numeric nor
# logical (a factor is not numeric).
non_numeric_columns <- function(df) {
  ok <- vapply(df, function(col) (is.numeric(col) || is.logical(col)) && !is.factor(col), logical(1))
  names(df)[!ok]
}

# `x` must be a single non-empty string: else the error `key` (a message
# of messages.R that takes the argument's name) naming `arg`.
check_string <- function(x, arg, key = "not_string") {
  if (!is_string(x)) pageshare_stop(key, arg)
  invisible(x)
}

# The longest namespace, variable name or key there can be, in bytes: the
# longest file name of the index (Linux NAME_MAX, as MAX_NAME in
# src/rust/pageshare-core/src/naming.rs, which checks the escaped names
# again). Checked here first, so that no name reaches R's own limit of 10,000
# bytes for a symbol (an unclassed error) on its way there.
max_name_bytes <- 255L

# Each of `x` (strings) must be at most max_name_bytes long.
check_name_bytes <- function(x, arg) {
  n <- nchar(x, type = "bytes")
  if (any(n > max_name_bytes)) {
    pageshare_stop("name_too_long", arg, max_name_bytes, format(max(n), big.mark = ","))
  }
  invisible(x)
}

# A namespace, variable name or key: a single non-empty string of at most
# max_name_bytes.
check_name <- function(x, arg, key = "not_string") {
  check_string(x, arg, key)
  check_name_bytes(x, arg)
}

# The arguments of the calling function `fn` (those without a default) must
# have been given: `missing` holds missing(<arg>) for each, named by the
# argument, asked by the caller (asking it here, in the caller's frame, would
# cost more than a small task). Else a pageshare_bad_argument error naming the
# first one missing and the function.
check_given <- function(fn, missing) {
  if (any(missing)) pageshare_stop("missing_argument", names(missing)[which(missing)[1L]], fn, fn)
}

# `FUN` as a function: a function, or the name of one looked up from where the
# front door was called (as match.fun() looks it up); else a
# pageshare_bad_argument error naming `arg` and the value.
as_function <- function(FUN, arg = "FUN", envir = parent.frame(2)) {
  if (is.function(FUN)) return(FUN)
  name <- if (is.symbol(FUN)) as.character(FUN) else if (is_string(FUN)) FUN else NULL
  # (no function has a name over R's limit for a symbol, 10,000 bytes)
  if (!is.null(name) && nchar(name, type = "bytes") > 10000L) name <- NULL
  f <- if (is.null(name)) NULL else get0(name, envir = envir, mode = "function")
  if (is.null(f)) pageshare_stop("not_function", arg, describe_value(FUN))
  f
}

# `x` must be a character vector without NA (`what` says what it is for).
check_strings <- function(x, arg, what) {
  if (!is.character(x) || anyNA(x)) pageshare_stop("not_strings", arg, what, describe_value(x))
  invisible(x)
}

# `x` must be TRUE or FALSE.
check_flag <- function(x, arg) {
  if (!is_flag(x)) pageshare_stop("flag", arg)
  invisible(x)
}

# `x` must be a single finite number of at least `min`.
check_number <- function(x, arg, min) {
  if (!is_number(x, min = min, finite = TRUE)) {
    pageshare_stop("number", arg, sprintf("of at least %s", format(min)), describe_value(x))
  }
  invisible(x)
}
