# future.globals.maxSize while plan(shm_multisession) is in use.
#
# future (before any backend code runs, on future < 1.40), future.apply and
# furrr check every global at its full size against the option
# future.globals.maxSize, although a global that travels as a handle costs a
# few hundred bytes. The only lever they all read is the option itself, so:
#
# * while shm_multisession is the plan, the option holds `lifted_limit`, a
#   huge but finite number (future.apply and furrr scale the option by the
#   number of elements of a chunk, k * lifted_limit, and set it back after the
#   call: k stays readable from the value, see serialized_limit());
# * what a future still serializes is checked at launch against the limit the
#   user had (500 MiB when unset), scaled by the same k, exactly where and how
#   multisession would check it (check_serialized_size());
# * the user's value comes back when the plan changes (plan's "cleanup"
#   attribute on future >= 1.32; otherwise at the end of the top-level call that
#   changed it, from the task callback) and when pageshare is unloaded;
# * a value the user sets while the plan is active is taken as the new limit
#   for what is serialized, from the next future on (adopt_user_limit()).
#
# The state: limit_state$lifted (TRUE while the option is ours) and
# limit_state$user (the user's value; NULL when the option was unset).

lifted_limit <- 1e300
limit_state <- new.env(parent = emptyenv())
limit_state$lifted <- FALSE

# future's default when the option is unset.
default_globals_limit <- 500 * 1024^2

is_lifted_value <- function(value) {
  is.numeric(value) && length(value) == 1L && !is.na(value) && is.finite(value) &&
    value >= lifted_limit / 2
}

lift_globals_limit <- function() {
  value <- getOption("future.globals.maxSize")
  if (isTRUE(limit_state$lifted)) return(adopt_user_limit(value))
  limit_state$user <- if (is_lifted_value(value)) NULL else value
  limit_state$lifted <- TRUE
  options(future.globals.maxSize = lifted_limit)
  invisible()
}

# While lifted, a value in the option that is neither ours (nor a multiple of
# ours, set by future.apply or furrr for a chunk) nor +Inf (no limit; also what
# future_apply() sets after its own check) was set by the user: it becomes the
# limit for what is serialized, and the option is lifted again.
adopt_user_limit <- function(value) {
  if (is_lifted_value(value) || identical(as.numeric(value), Inf)) return(invisible())
  limit_state$user <- value
  options(future.globals.maxSize = lifted_limit)
  invisible()
}

restore_globals_limit <- function() {
  if (!isTRUE(limit_state$lifted)) return(invisible())
  limit_state$lifted <- FALSE
  # A value set by the user meanwhile (not ours) stays.
  if (is_lifted_value(getOption("future.globals.maxSize"))) {
    options(future.globals.maxSize = limit_state$user)
  }
  limit_state$user <- NULL
  invisible()
}

# Called after every top-level call (pageshare's task callback): gives the
# user's value back once shm_multisession is no longer the plan, and takes a
# value the user set meanwhile as the new limit.
watch_globals_limit <- function() {
  if (!isTRUE(limit_state$lifted)) return(invisible())
  if (!plan_is_shm_multisession()) return(restore_globals_limit())
  adopt_user_limit(getOption("future.globals.maxSize"))
}

plan_is_shm_multisession <- function() {
  isNamespaceLoaded("future") &&
    isTRUE(tryCatch(inherits(future::plan("next"), "shm_multisession"), error = function(e) FALSE))
}

# The limit for what a future launched now serializes: the user's, scaled as
# future.apply and furrr scale the option for a chunk; the option itself when
# it is not ours (for instance +Inf set by future_apply() after its own check).
serialized_limit <- function() {
  value <- getOption("future.globals.maxSize")
  if (isTRUE(limit_state$lifted) && is_lifted_value(value)) {
    user <- limit_state$user
    user <- if (is.null(user)) default_globals_limit else as.numeric(user)
    return(user * max(1, round(value / lifted_limit)))
  }
  if (is.null(value)) default_globals_limit else as.numeric(value)
}

# Bytes `x` takes to serialize (views inside the handle scope take a handle's
# size), counted without building the bytes.
serialized_size <- function(x) with_handles(.Call(ps_serialized_size, x))

# future < 1.40: the check multisession made when the future was created,
# repeated on what is sent. A global that pageshare changed (views swapped in)
# counts at its serialized size in the handle scope; the others as future
# counts them. Stops with future's own message (a simpleError, as future's).
# `sent`: the globals as they will be sent; attribute "pageshare_changed"
# names those pageshare changed.
check_serialized_size <- function(orig, sent, expr) {
  limit <- serialized_limit()
  if (!is.finite(limit) || length(sent) == 0L) return(invisible())
  objectSize <- foreign_internal("future", "objectSize")
  changed <- attr(sent, "pageshare_changed")
  sizes <- vapply(names(sent), function(nm) {
    if (nm %in% changed) as.numeric(serialized_size(sent[[nm]]))
    else as.numeric(objectSize(orig[[nm]]))
  }, numeric(1))
  total <- sum(sizes)
  if (total <= limit) return(invisible())
  asIEC <- foreign_internal("future", "asIEC")
  top <- utils::head(sort(sizes, decreasing = TRUE), 3L)
  stop(simpleError(sprintf(paste0(
    "The total size of the %d globals exported for future expression ('%s') is %s. ",
    "This exceeds the maximum allowed size of %s (option 'future.globals.maxSize'). ",
    "The %d largest globals are %s"),
    length(sizes), one_line(expr), asIEC(total), asIEC(limit), length(top),
    paste(sprintf("%s (%s)", sQuote(names(top), FALSE), vapply(top, asIEC, "")), collapse = ", "))))
}

one_line <- function(expr) {
  text <- paste(deparse(expr, width.cutoff = 60L, nlines = 2L), collapse = " ")
  if (nchar(text) > 60L) paste0(substr(text, 1L, 57L), "...") else text
}
