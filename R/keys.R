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
#' a hash of the type, length, attributes and data, as text beginning with
#' `"content:"`): processes that hold the same data find each other without
#' agreeing on a name. A list is then shared element by element, each under
#' its own content key.
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
#' segment found (`shared_by_key()` computes it again; `share()` compares every
#' byte). A key given by hand is trusted as the index is: any process of this
#' user may publish under it.
#'
#' @section Errors:
#' `pageshare_not_registered` when no live process of this user shares an
#' object under the key; `pageshare_key_conflict` when `share()` is given a key
#' under which other data are shared; `pageshare_invalid_segment` for an entry
#' whose segment is not what it says (for a content key: other contents).
#'
#' @param x A vector as for [share()], or, with `key = TRUE`, a list of them.
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
  check_given("shared_by_key", "key")
  check_name(key, "key")
  got <- .Call(ps_retrieve_keyed, key, segment_dir())
  view <- got$view
  if (length(got$attributes)) {
    .Call(ps_set_attributes, view, as.pairlist(unserialize(got$attributes)))
  }
  view
}

#' @rdname share_by_key
#' @export
release_key <- function(key) {
  check_given("release_key", "key")
  check_name(key, "key")
  invisible(.Call(ps_release_key, key))
}

#' @rdname share_by_key
#' @export
content_key <- function(x) {
  check_given("content_key", "x")
  if (!is_shareable_vector(x)) pageshare_stop("share_type", "`x`", describe_type(x))
  .Call(ps_content_key, x, attributes_blob(x))
}

# share(x, key = ) (see share()): `key` a string, or TRUE for content keys
# (for a list, of each element).
share_keyed <- function(x, key, where) {
  if (!isTRUE(key) && !is_string(key)) {
    pageshare_stop("bad_key", describe_value(key))
  }
  if (!isTRUE(key)) check_name_bytes(key, "key")
  if (is_shareable_vector(x)) {
    blob <- attributes_blob(x)
    if (isTRUE(key)) key <- .Call(ps_content_key, x, blob)
    sync_shared_budget()
    return(.Call(ps_share_keyed, x, as.pairlist(attributes(x)), blob, key, segment_dir(), release_source()))
  }
  if (typeof(x) == "list") {
    if (!isTRUE(key)) pageshare_stop("list_key", paste0("`", where, "`"))
    return(share_list(x, where, function(el, label) share_keyed(el, TRUE, label)))
  }
  pageshare_stop("share_type", paste0("`", where, "`"), describe_type(x))
}

# A vector's attributes as a segment stores them (NULL for none).
attributes_blob <- function(x) {
  attrs <- attributes(x)
  if (is.null(attrs)) NULL else serialize(attrs, NULL, xdr = FALSE)
}
