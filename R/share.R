#' Share a vector (or the vectors in a list) through shared memory
#'
#' `share(x)` copies the data of `x` into a new shared-memory segment, once, and
#' returns a *view*: an ordinary-looking R vector (same type, length and
#' attributes) that reads the shared pages. A view sent to pageshare's own
#' workers travels as a handle of a few hundred bytes; every worker maps the
#' same pages instead of receiving its own copy.
#'
#' Views are read-only: modifying one gives the modifying code a private copy
#' (R's usual value semantics); the shared pages never change. Sharing the same
#' object twice returns the same view (the source is marked not mutable, so an
#' in-place write to it copies it first). The segment (an anonymous memory
#' file) is released when the view and the source are garbage-collected and
#' when the package is unloaded; the kernel frees it with the last process
#' that holds or maps it, so nothing is left behind by an exit, a crash or
#' `kill -9`.
#'
#' The data are then held once, not twice: while a large ordinary numeric
#' vector (at least 1 MiB, in a memory block of its own, as R allocates large
#' vectors) is copied, its own pages are handed over to the segment, becoming
#' copy-on-write mappings of the shared pages. `x` stays the same object with
#' the same values; writing into it later copies just the pages written. A
#' vector that the C library served from a free stretch of its heap (possible
#' in a long session) is copied without handing over: its memory is reused by
#' the heap when freed. `shared_info(view)$source_released` tells how many bytes
#' were handed over. See `pageshare.release_source` in [pageshare_options].
#'
#' Finding the view of an object shared before is cheap when its pages were
#' handed over (the source still maps the segment's pages, unwritten). Any
#' other source is compared with its segment byte for byte, because a new
#' vector may take a dead one's address: sharing it again costs a read of both
#' copies, in proportion to its size.
#'
#' Character vectors are stored packed (offsets, bytes, encodings); their view
#' makes an R string only for the elements that are touched, so `x[i]` or
#' `nchar(x[i])` on a view of millions of strings stays cheap.
#'
#' Lists (including data frames, tibbles and data.tables) are shared element by
#' element: each vector in them becomes a view, other elements (`NULL`,
#' formulas, ...) are kept as they are. S4 objects whose slots are vectors
#' (the Matrix package's sparse and dense matrices, for example) are shared
#' slot by slot in the same way: the result has the same class and is
#' `identical()` to `x`, its slots views. An environment,
#' a function or an external pointer cannot be shared and gives an error that
#' names the element.
#'
#' @section Errors:
#' An unsupported type; not enough memory, or more than option
#' `pageshare.max_shared_bytes` allows (`pageshare_no_space`: the error names the
#' size needed and the memory available; R keeps running); too many segments
#' for the limit on open files (`pageshare_too_many_segments`).
#'
#' @param x A logical, integer, double, complex, raw or character vector (any
#'   attributes: matrices, factors, dates...), a list of such vectors, or an
#'   S4 object whose slots are such vectors.
#' @param key `NULL` (default), or a key under which other R processes of this
#'   user on this machine find the data, and under which the same data shared
#'   by another process are found instead of copied: a string, or `TRUE` for
#'   the content key of `x` (see [share_by_key]).
#' @return A view of `x` (or a list of views, or an S4 object whose slots are
#'   views).
#' @seealso [is_shared()], [shared_info()], [with_handles()], [share_by_key], [pageshare_options]
#' @examples
#' x <- share(rnorm(1e5))
#' is_shared(x)
#' sum(x)
#' shared_info(x)$bytes
#' y <- x
#' y[1] <- 0          # y gets a private copy; x is unchanged
#' identical(x[2], y[2])
#' rm(x, y); invisible(gc())
#' @export
share <- function(x, key = NULL) {
  check_given("share", c(x = missing(x)))
  if (!is.null(key)) return(share_keyed(x, key, "x"))
  share_value(x, "x")
}

share_value <- function(x, where) {
  arm_gc_hook()
  if (is_shareable_vector(x)) {
    sync_shared_budget()
    return(.Call(ps_share, x, as.pairlist(attributes(x)), cache_limit(), release_source()))
  }
  if (typeof(x) == "list") {
    return(share_list(x, where))
  }
  if (typeof(x) == "S4") {
    return(share_s4(x, where))
  }
  pageshare_stop("share_type", paste0("`", where, "`"), describe_type(x))
}

# An S4 object (a Matrix package matrix, say) with each slot shared as a list
# element is: vectors and lists shared, NULL and language kept, anything else
# refused. The object, its class and its slot names are as before; only the
# slots' data live in segments.
share_s4 <- function(x, where) {
  out <- x
  for (slot in setdiff(names(attributes(x)), "class")) {
    el <- attr(x, slot, exact = TRUE)
    label <- sprintf("%s@%s", where, slot)
    if (is_shareable_vector(el) || is.list(el) || typeof(el) == "S4") {
      attr(out, slot) <- share_value(el, label)
    } else if (!is_plain_data(el)) {
      pageshare_stop("share_type", label, describe_type(el))
    }
  }
  out
}

share_list <- function(x, where, share_element = share_value) {
  # Work on the unclassed list so that `[[<-` methods (data.frame, tibble) are
  # not involved; the class is put back unchanged.
  cls <- oldClass(x)
  out <- unclass(x)
  nms <- names(x)
  for (i in seq_along(x)) {
    el <- x[[i]]
    label <- sprintf("%s[[%s]]", where, if (!is.null(nms) && nzchar(nms[i])) dQuote(nms[i], FALSE) else i)
    if (is_shareable_vector(el) || is.list(el)) {
      shared <- share_element(el, label)
      if (!is.null(shared)) out[[i]] <- shared
    } else if (!is_plain_data(el)) {
      pageshare_stop("share_type", label, describe_type(el))
    }
  }
  oldClass(out) <- cls
  out
}

is_shareable_vector <- function(x) {
  typeof(x) %in% c("logical", "integer", "double", "complex", "raw", "character") && !isS4(x)
}

# Values that are not shared but may travel inside a shared list as they are.
is_plain_data <- function(x) {
  is.null(x) || is.symbol(x) || is.language(x)
}

describe_type <- function(x) {
  switch(typeof(x),
    environment = "it is an environment, which has no fixed size and cannot be read by another process",
    closure = , builtin = , special = "it is a function; pass the data it uses instead",
    externalptr = "it is an external pointer, which is only valid inside the process that made it",
    S4 = "it is an S4 object",
    sprintf("it is of type %s", typeof(x)))
}

#' Is an object a pageshare view?
#'
#' @param x Any R object.
#' @return `TRUE` if `x` is a view of a shared segment, else `FALSE`.
#' @examples
#' is_shared(1:10)
#' v <- share(as.double(1:10))
#' is_shared(v)
#' @export
is_shared <- function(x) {
  if (missing(x)) pageshare_stop("missing_argument", "x", "is_shared", "is_shared")
  .Call(ps_is_view, x)
}

#' Describe a view
#'
#' @param x A view (see [share()]).
#' @return `NULL` if `x` is not a view; otherwise a list with `name` (segment
#'   name), `fd` (the descriptor of the process that makes it available to
#'   others: this one if `owned_here`), `bytes` (of this view's data),
#'   `segment_bytes`, `owner_pid` (that process), `owned_here`, `type`,
#'   `offset` and `length` (in elements), `materializations` (full copies made
#'   of this view so far), `private_copy` (whether this view now reads a
#'   private copy), `memfd` (the segment's name as /proc shows its mappings
#'   and descriptors) and `source_released` (bytes of the source's own pages
#'   that became the segment's when this process shared it, see [share()]).
#'   It prints as a short description.
#' @examples
#' v <- share(runif(1000))
#' shared_info(v)
#' shared_info(v)$owner_pid == Sys.getpid()
#' @export
shared_info <- function(x) {
  check_given("shared_info", c(x = missing(x)))
  info <- .Call(ps_view_info, x)
  if (is.null(info)) info else structure(info, class = "pageshare_info")
}

#' @export
print.pageshare_info <- function(x, ...) {
  held <- if (isTRUE(x$owned_here)) "held by this process" else sprintf("held by process %d", x$owner_pid)
  cat(sprintf("<pageshare view: %s %s of %s, %s>\n", format(x$length, big.mark = ",", scientific = FALSE), x$type,
              format_bytes(x$bytes), if (isTRUE(x$private_copy)) "now a private copy" else "shared"))
  cat(sprintf("  segment %s (%s, %s)\n", x$name, format_bytes(x$segment_bytes), held))
  if (x$materializations > 0) cat(sprintf("  copied out %s time(s)\n", format(x$materializations)))
  if (x$source_released > 0) cat(sprintf("  %s of the source's own memory given to the segment\n", format_bytes(x$source_released)))
  invisible(x)
}

# Bytes in IEC units (KiB, MiB, GiB: powers of 1024), as users read them.
format_bytes <- function(n) {
  units <- c("B", "KiB", "MiB", "GiB", "TiB")
  vapply(n, function(b) {
    if (is.na(b)) return(NA_character_)
    k <- if (b < 1024) 1L else min(length(units), floor(log(b, 1024)) + 1L)
    if (k == 1L) sprintf("%.0f B", b) else sprintf("%.1f %s", b / 1024^(k - 1L), units[k])
  }, "")
}

#' Evaluate code with views serializing as handles
#'
#' Outside this scope a view serializes as its plain data, so `saveRDS()`,
#' `serialize()` or a cluster on another host never depend on a segment that may
#' be gone. Inside it, a view serializes to a small handle naming its segment;
#' the process that unserializes it maps the same pages. pageshare's backends
#' open this scope around sending work to their own workers; use it yourself
#' only to send views to processes on this machine that have pageshare
#' installed, and only while the views stay alive.
#'
#' @param expr Code to evaluate.
#' @return The value of `expr`.
#' @examples
#' v <- share(as.double(1:1e6))
#' length(serialize(v, NULL))                 # the data: ~8 MB
#' length(with_handles(serialize(v, NULL)))   # a handle: a few hundred bytes
#' @export
with_handles <- function(expr) {
  check_given("with_handles", c(expr = missing(expr)))
  .Call(ps_scope, 1L)
  on.exit(.Call(ps_scope, -1L))
  expr
}

#' Remove stale index entries of dead processes
#'
#' Segments are anonymous memory files that the kernel frees when the last
#' process holding or mapping one exits, even after `kill -9`: they cannot be
#' left behind. What a crashed process can leave is the index entry of a name
#' it registered ([registerVariables()]); this removes every such entry under
#' `getOption("pageshare.dir")` whose process is gone. Entries of live
#' processes, and files that are not this user's entries, are never touched.
#' Lookups remove stale entries they meet too, and this also runs when the
#' package is loaded.
#'
#' @return The names of the removed entries, invisibly.
#' @examples
#' sweep_shared()
#' @export
sweep_shared <- function() invisible(.Call(ps_sweep, segment_dir()))

#' List pageshare segments
#'
#' @param all If `FALSE` (default), the segments this process maps (owned or
#'   viewed); if `TRUE`, the segments this process holds (made or taken over,
#'   and not released: other processes can still open them) and the named
#'   segments ([registerVariables()]) that any live process of this user
#'   holds, from the index under `getOption("pageshare.dir")`. Segments are
#'   anonymous memory files: one that no process holds or maps any more is
#'   gone, whatever happened to its owner.
#' @return A data frame, one row per segment sorted by name: `name`,
#'   `type` and `length` (of its data; NA for a named segment this process
#'   does not map), `bytes` (of the segment), `owner_pid` (the process that
#'   holds it), `owned_here`, and `views` (how many views of it this process
#'   has, counting the one the identity cache of [share()] keeps). Sizes print
#'   in IEC units.
#' @examples
#' v <- share(rnorm(1e5))
#' shared_segments()
#' shared_segments()$name
#' @export
shared_segments <- function(all = FALSE) {
  check_flag(all, "all")
  cols <- .Call(ps_segments_table, if (all) segment_dir() else "", all)
  structure(as.data.frame(cols, stringsAsFactors = FALSE), class = c("pageshare_segments", "data.frame"))
}

#' @export
print.pageshare_segments <- function(x, ...) {
  if (!nrow(x)) {
    cat("<no pageshare segments>\n")
    return(invisible(x))
  }
  shown <- as.data.frame(unclass(x), stringsAsFactors = FALSE)
  shown$length <- format(x$length, big.mark = ",", scientific = FALSE)
  shown$bytes <- format_bytes(x$bytes)
  print(shown, ...)
  invisible(x)
}

#' Forget which objects were shared
#'
#' Empties the identity cache of [share()]: sharing an object again afterwards
#' makes a new segment. Views that exist keep working; a segment is removed once
#' no view of it is left. Useful after sharing many objects in code whose
#' environments R cannot see die (see `pageshare.cache_limit` in
#' [pageshare_options]).
#' @return The number of entries dropped, invisibly.
#' @examples
#' v <- share(rnorm(100))
#' forget_shared()
#' @export
forget_shared <- function() invisible(.Call(ps_cache_evict, 0))
