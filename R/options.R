#' Options for pageshare
#'
#' Every option can also be set by an environment variable, read once when the
#' package is loaded (an option set explicitly wins).
#'
#' \describe{
#'  \item{`pageshare.dir`}{(character; env `PAGESHARE_DIR`; default `"/dev/shm"`)
#'    The tmpfs directory that holds the segments. Workers must see the same
#'    directory (they do: a handle carries it).}
#'  \item{`pageshare.threshold`}{(numeric bytes; env `PAGESHARE_THRESHOLD`;
#'    default `1048576`, 1 MiB) Objects smaller than this travel by plain
#'    serialization when the backends share automatically; [share()] itself
#'    always shares.}
#'  \item{`pageshare.cache_limit`}{(numeric bytes; env `PAGESHARE_CACHE_LIMIT`;
#'    default half the free space of `pageshare.dir` when the package loads)
#'    The identity cache ("share once") keeps each shared source and its view
#'    while the source is referenced. A source bound in an environment that was
#'    discarded without R decrementing its reference count (`local()`,
#'    `eval()` in a new environment) cannot be seen to die; above this many
#'    cached bytes the least recently used such entries are dropped (their views
#'    stay valid). `forget_shared()` drops them all.}
#' }
#' @name pageshare_options
#' @aliases pageshare.dir pageshare.threshold
#' @examples
#' getOption("pageshare.dir")
#' old <- options(pageshare.threshold = 64 * 1024)
#' options(old)
NULL

option_defaults <- list(
  pageshare.cache_limit = list(env = "PAGESHARE_CACHE_LIMIT", default = NULL, parse = as.numeric),
  pageshare.dir = list(env = "PAGESHARE_DIR", default = "/dev/shm", parse = identity),
  pageshare.threshold = list(env = "PAGESHARE_THRESHOLD", default = 1048576, parse = as.numeric)
)

load_option_defaults <- function() {
  for (name in names(option_defaults)) {
    spec <- option_defaults[[name]]
    if (is.null(getOption(name))) {
      env <- Sys.getenv(spec$env, "")
      value <- if (nzchar(env)) spec$parse(env) else spec$default
      if (is.null(value) && name == "pageshare.cache_limit") {
        value <- tryCatch(0.5 * .Call(ps_free_bytes, segment_dir()), error = function(e) Inf)
      }
      options(stats::setNames(list(value), name))
    }
  }
}

segment_dir <- function() {
  dir <- getOption("pageshare.dir", "/dev/shm")
  if (!is.character(dir) || length(dir) != 1L || is.na(dir) || !dir.exists(dir)) {
    pageshare_stop("dir_option", paste(format(dir), collapse = " "))
  }
  normalizePath(dir, mustWork = TRUE)
}

share_threshold <- function() {
  t <- getOption("pageshare.threshold", 1048576)
  if (!is.numeric(t) || length(t) != 1L || is.na(t) || t < 0) pageshare_stop("threshold_option")
  t
}

cache_limit <- function() {
  l <- getOption("pageshare.cache_limit", Inf)
  if (!is.numeric(l) || length(l) != 1L || is.na(l) || l < 0) Inf else l
}
