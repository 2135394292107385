#' One copy per host: share by key
#'
#' `share(x, key = "name")` shares `x` under a key that any other R process of
#' the same user on this machine can use: `shared_by_key("name")` there gives
#' a view of the same pages, with no copy, whether or not the two processes
#' know each other (separate sessions, crew or targets workers, the outer
#' workers of a nested plan). A process that shares the same data under a key
#' that another process holds already, with exactly the same contents (type,
#' length, attributes and every byte), maps that segment instead of making its
#' own, so a machine holds one copy however many processes share it.
#'
#' With `key = TRUE` the key is computed from the contents (`content_key(x)`,
#' the SHA-256 of the type, length, attributes and data, as text beginning with
#' `"content:"`): processes that hold the same data find each other without
#' agreeing on a name. Objects that [identical()] cannot tell apart have the
#' same content key: attributes in another order, strings in latin1 or UTF-8,
#' -0 or 0. A list is then shared element by element, each under its own
#' content key.
#'
#' Processes that share under the same key at the same moment take turns (one
#' copy is made, the others map it). A process waits for its turn at most
#' `pageshare.key_wait` seconds (see [pageshare_options]), and Ctrl-C ends the
#' wait; then it maps the copy a holder has already if it holds the same
#' contents, else under a content key it makes a copy of its own, and under a
#' key given by hand it is a `pageshare_key_busy` error that names the process
#' whose turn it is (one stopped with Ctrl-Z or in a debugger, say).
#'
#' A data frame (or another list of vectors) shared under a key given by hand
#' is held column by column, each column under its content key, and the key
#' names the list of those keys with the data frame's attributes:
#' `shared_by_key()` returns the data frame, each column a view, and
#' `release_key()` lets go of the columns too. Python's `pageshare` module
#' (in `python/` of the source repository) reads and writes the same keys:
#' see `vignette("r-and-python", package = "pageshare")`.
#'
#' Every process that shares or retrieves an object by key holds it: the
#' object is found, and its pages stay, while any of them still holds it.
#' `release_key(key)` lets go of it in this process; so does its end, however
#' it ends. Views already made keep reading their pages until they are
#' garbage-collected.
#'
#' @section Security:
#' Keys live in this user's index (the directory that named registrations use,
#' see `pageshare.dir` in [pageshare_options]), closed to other users: another
#' user's objects are never found, and an entry that is not what it says is an
#' error, never data. A content key is checked against the contents of the
#' segment found: `shared_by_key()` and `share()` hash them again (a
#' cryptographic hash: no process can make other data with that key), or
#' `share()` finds them equal byte for byte. A key given by hand is trusted as
#' the index is: any process of this user may publish under it.
#'
#' @section Errors:
#' `pageshare_not_registered` when no live process of this user shares an
#' object under the key; `pageshare_key_conflict` when `share()` is given a key
#' under which other data are shared; `pageshare_key_busy` when another process
#' held the key's turn for longer than `pageshare.key_wait` (see above); `pageshare_invalid_segment` for an entry
#' whose segment is not what it says (for a content key: other contents).
#'
#' @param x A vector as for [share()], or a list (a data frame) of them.
#' @param key A non-empty string, or `TRUE` for the content key of `x`.
#' @return `share()`: a view of `x`. `shared_by_key()`: a view of the object
#'   shared under `key`. `release_key()`: `TRUE` if this process held an
#'   object under `key`, invisibly. `content_key()`: the content key of `x`
#'   (a string).
#' @seealso [share()], [registerVariables()] (names in namespaces, held by one
#'   process).
#' @examples
#' x <- share(as.double(1:1e5), key = "example-x")
#' # in any other R session of this user on this machine:
#' y <- shared_by_key("example-x")
#' identical(x, y)
#' shared_info(y)$name == shared_info(x)$name   # the same pages
#' # content keys: the same data shared twice is held once
#' a <- share(as.double(1:1e5), key = TRUE)
#' b <- share(as.double(1:1e5), key = TRUE)
#' shared_info(a)$name == shared_info(b)$name
#' content_key(a)
#' release_key("example-x")
#' release_key(content_key(a))
#' @name share_by_key
NULL

#' @rdname share_by_key
#' @export
shared_by_key <- function(key) {
  check_given("shared_by_key", c(key = missing(key)))
  check_name(key, "key")
  got <- .Call(ps_retrieve_keyed, key, segment_dir())
  view <- got$view
  if (length(got$attributes)) {
    attrs <- unserialize(got$attributes)
    if (!is.null(attrs[[columns_mark]])) return(columns_by_key(view, attrs))
    .Call(ps_set_attributes, view, as.pairlist(attrs))
  }
  view
}

# A list (a data frame) shared under a key given by hand is a character vector
# of its elements' content keys, with the list's attributes and this one (R and
# Python write and read it alike: python/pageshare/__init__.py).
columns_mark <- "pageshare.columns"   # (pageshare_core::keys::COLUMNS_MARK)

# The list whose element keys are `keys`, with the attributes `attrs` (less the mark).
columns_by_key <- function(keys, attrs) {
  out <- lapply(as.character(keys), shared_by_key)
  attrs[[columns_mark]] <- NULL
  attributes(out) <- attrs
  out
}

#' @rdname share_by_key
#' @export
release_key <- function(key) {
  check_given("release_key", c(key = missing(key)))
  check_name(key, "key")
  # (a data frame's key: its columns' keys are let go of too, see
  # pageshare_core::keys::release)
  invisible(.Call(ps_release_key, key))
}

#' @rdname share_by_key
#' @export
content_key <- function(x) {
  check_given("content_key", c(x = missing(x)))
  if (!is_shareable_vector(x)) pageshare_stop("share_type", "`x`", describe_type(x))
  .Call(ps_content_key, x, canonical_attributes_blob(x))
}

# share(x, key = ) (see share()): `key` a string, or TRUE for content keys
# (for a list, of each element).
share_keyed <- function(x, key, where) {
  if (!isTRUE(key) && !is_string(key)) {
    pageshare_stop("bad_key", describe_value(key))
  }
  if (!isTRUE(key)) check_name_bytes(key, "key")
  if (is_shareable_vector(x)) {
    # (under a content key the segment stores the attributes as the key hashes them)
    content <- isTRUE(key) || startsWith(key, "content:")
    blob <- if (content) canonical_attributes_blob(x) else attributes_blob(x)
    if (isTRUE(key)) key <- .Call(ps_content_key, x, blob)
    sync_shared_budget()
    return(.Call(ps_share_keyed, x, as.pairlist(attributes(x)), blob, key, segment_dir(), release_source(),
                 as.double(pageshare_option("pageshare.key_wait"))))
  }
  if (typeof(x) == "list") {
    if (isTRUE(key)) return(share_list(x, where, function(el, label) share_keyed(el, TRUE, label)))
    return(share_columns_keyed(x, key, where))
  }
  pageshare_stop("share_type", paste0("`", where, "`"), describe_type(x))
}

# share(x, key = "name") of a list (a data frame): each element under its
# content key, and the list of those keys, with x's attributes, under `key`
# (see columns_mark), so that shared_by_key("name") in R or Python finds it.
share_columns_keyed <- function(x, key, where) {
  for (i in seq_along(x)) {
    if (!is_shareable_vector(x[[i]])) {
      pageshare_stop("list_key", paste0("`", where, "` (its element ", i, " is not a vector)"))
    }
  }
  views <- lapply(seq_along(x), function(i) share_keyed(x[[i]], TRUE, paste0(where, "[[", i, "]]")))
  keys <- vapply(views, function(v) content_key(v), "")
  manifest <- keys
  manifest_attrs <- c(attributes(x)[setdiff(names(attributes(x)), "names")],
                      list(names = names(x)), stats::setNames(list(TRUE), columns_mark))
  # (automatic row names as R keeps them, c(NA, -n), not n integers)
  if (is.data.frame(x)) manifest_attrs$row.names <- .row_names_info(x, 0L)
  blob <- serialize(manifest_attrs, NULL, xdr = FALSE, version = 2L)
  sync_shared_budget()
  .Call(ps_share_keyed, manifest, NULL, blob, key, segment_dir(), FALSE,
        as.double(pageshare_option("pageshare.key_wait")))
  with_attributes_of(views, x)
}

# A vector's attributes as a segment stores them (NULL for none). Version 2
# of the format writes every value as plain data (version 3 may write an
# ALTREP object's class and state instead, which only R reads), so that
# Python's pageshare (python/) can read dims, names and levels.
attributes_blob <- function(x) {
  attrs <- attributes(x)
  if (is.null(attrs)) NULL else serialize(attrs, NULL, xdr = FALSE, version = 2L)
}

# The attributes of `x` as a content key hashes them (see
# src/rust/pageshare-core/src/content.rs), and as a segment shared under a
# content key stores them: what identical() does not tell apart written one way
# only (in the order of their names, as UTF-8 bytes; strings as UTF-8; -0 as
# 0, every NA and every other NaN one way each; the same for the attributes of
# attributes and the elements of lists), serialized without the version of R
# that wrote it (NULL for none).
canonical_attributes_blob <- function(x) {
  attrs <- canonical_attributes(attributes(x))
  if (is.null(attrs)) return(NULL)
  blob <- serialize(attrs, NULL, xdr = FALSE, version = 2L)
  blob[7:10] <- as.raw(0L)   # (the writer's R version: unserialize() does not need it)
  blob
}

canonical_attributes <- function(attrs) {
  if (is.null(attrs)) return(NULL)
  names(attrs) <- enc2utf8(names(attrs))
  lapply(attrs[order(names(attrs), method = "radix")], canonical_value)
}

canonical_value <- function(v) {
  if (!is.atomic(v) && typeof(v) != "list") return(v)   # (a function, an environment: as it is)
  attrs <- canonical_attributes(attributes(v))
  attributes(v) <- NULL
  v <- switch(typeof(v),
              character = enc2utf8(v),
              double = canonical_doubles(v),
              complex = complex(real = canonical_doubles(Re(v)), imaginary = canonical_doubles(Im(v))),
              list = lapply(v, canonical_value),
              v)
  if (!is.null(attrs)) attributes(v) <- attrs
  v
}

canonical_doubles <- function(d) {
  d[!is.na(d) & d == 0] <- 0
  d[is.nan(d)] <- NaN
  d[is.na(d) & !is.nan(d)] <- NA_real_
  d
}
