# future.globals.maxSize while plan(shm_multisession) is in use.
#
# future (before any backend code runs, on future < 1.40), future.apply and
# furrr check every global at its full size against the option
# future.globals.maxSize, although a global that travels as a handle costs a
# few hundred bytes. The only lever they all read is the option itself, so:
#
# * while shm_multisession is the plan, the option holds a huge but finite
#   number (future.apply and furrr scale the option by the number of elements
#   of a chunk, k * value, and set it back after the call);
# * every such value stands for the user's limit at the time it was set: each
#   lift issues a new value (lifted_value(i), far from any multiple of the
#   others) and records the user's limit with it, so that the option always
#   says which limit applies, also when code reads it and sets it back later
#   (future.apply's own tests do) - decode_limit();
# * what a future still serializes is checked at launch against that limit
#   (500 MiB when unset), scaled by the same k, exactly where and how
#   multisession would check it (check_serialized_size());
# * the user's value comes back when the plan changes (plan's "cleanup"
#   attribute on future >= 1.32; otherwise at the end of the top-level call that
#   changed it, from the task callback) and when pageshare is unloaded;
# * a value the user sets while the plan is active is used as it is, as
#   under multisession (future, future.apply and furrr then count shared
#   globals at full size too); setting back a value read from the option
#   earlier restores the limit it stood for.

limit_state <- new.env(parent = emptyenv())
limit_state$lifted <- FALSE
limit_state$issued <- list()   # list(value =, user =), newest last

# future's default when the option is unset.
default_globals_limit <- 500 * 1024^2

# The i-th value issued: k * lifted_value(i) never comes within 1e-12 of
# k' * lifted_value(j) for chunk lengths k, k' below 10^6 and i != j < 1000.
lifted_value <- function(i) 1e300 * (1 + i * 1e-6)

# The user's limit a value of the option stands for and the chunk factor k, or
# NULL when the value is not one pageshare issued (or a multiple of one).
decode_limit <- function(value) {
  if (!is_number(value, min = 5e299, finite = TRUE)) {
    return(NULL)
  }
  for (entry in rev(limit_state$issued)) {
    k <- round(value / entry$value)
    if (k >= 1 && abs(value - k * entry$value) <= 1e-12 * value) {
      return(list(user = entry$user, k = k))
    }
  }
  NULL
}

issue_lifted_value <- function(user) {
  value <- lifted_value(length(limit_state$issued) %% 1000L)
  limit_state$issued <- c(limit_state$issued, list(list(value = value, user = user)))
  options(future.globals.maxSize = value)
  invisible()
}

# Called when the plan is set up (`fresh`: the user's value is read now) and
# when a future is created (no-op once lifted).
lift_globals_limit <- function(fresh = FALSE) {
  if (isTRUE(limit_state$lifted) && !fresh) return(invisible())
  limit_state$lifted <- TRUE
  value <- getOption("future.globals.maxSize")
  if (!is.null(decode_limit(value))) return(invisible())   # already one of ours
  issue_lifted_value(value)
}

restore_globals_limit <- function() {
  if (!isTRUE(limit_state$lifted)) return(invisible())
  limit_state$lifted <- FALSE
  # A value set by the user meanwhile (not ours) stays.
  known <- decode_limit(getOption("future.globals.maxSize"))
  if (!is.null(known)) options(future.globals.maxSize = known$user)
  invisible()
}

# Called after every top-level call (pageshare's task callback): gives the
# user's value back once shm_multisession is no longer the plan.
watch_globals_limit <- function() {
  if (!isTRUE(limit_state$lifted)) return(invisible())
  if (!plan_is_shm_multisession()) restore_globals_limit()
  invisible()
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
  known <- decode_limit(value)
  if (!is.null(known)) {
    user <- if (is.null(known$user)) default_globals_limit else as.numeric(known$user)
    return(user * known$k)
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
