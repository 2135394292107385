# memshare-compatible API: same names and arguments as memshare 1.x, for every
# type share() supports, with R errors (not NA + message) on failure.
#
# A registered variable is a named segment ("namespace" + "variable") owned by
# the registering process until releaseVariables(); any process on the machine
# can retrieve a view of it by name. Views retrieved are tracked per process so
# that viewList()/releaseViews() work as in memshare.

views_held <- new.env(parent = emptyenv())   # view_key(ns, var) -> view

# The key of a namespace/variable pair in views_held: their UTF-8 bytes in hex,
# since R translates the name of a binding to the native encoding, which in a
# C locale cannot hold a name such as "\u00fc" (a warning, and a wrong key).
view_key <- function(namespace, variable) paste0(utf8_hex(namespace), ":", utf8_hex(variable))

utf8_hex <- function(s) {
  vapply(enc2utf8(as.character(s)), function(x) paste(as.character(charToRaw(x)), collapse = ""), "",
         USE.NAMES = FALSE)
}

hex_utf8 <- function(h) {
  vapply(h, function(x) {
    if (!nzchar(x)) return("")
    s <- rawToChar(as.raw(strtoi(substring(x, seq(1L, nchar(x), 2L), seq(2L, nchar(x), 2L)), 16L)))
    Encoding(s) <- "UTF-8"
    s
  }, "", USE.NAMES = FALSE)
}

# The arguments of the memshare functions that name variables of a namespace.
check_variables <- function(namespace, variableNames, arg = "variableNames") {
  check_name(namespace, "namespace")
  if (!is_names(variableNames)) pageshare_stop("not_character", arg)
  check_name_bytes(variableNames, arg)
}

registered_here <- function(namespace) {
  held <- .Call(ps_held)
  held$variable[held$namespace == namespace]
}

#' Register variables in a shared namespace (memshare API)
#'
#' Copies each element of `variableList` into a named shared segment that any R
#' process on this machine can view with [retrieveViews()]. The calling process
#' owns the segments until [releaseVariables()], package unload or exit.
#'
#' @section Errors:
#' Conditions (see [pageshare_conditions]): `pageshare_bad_argument` for an
#' unnamed list or a bad `namespace`, `pageshare_unsupported_type` for an
#' element that cannot be shared (the error names it), `pageshare_name_taken`
#' for a name already registered by another live process (the error names
#' its pid), `pageshare_no_space` when memory for the segment is lacking.
#' @param namespace A single string naming the namespace.
#' @param variableList A named list of vectors or matrices (logical, integer,
#'   double, complex or raw; attributes are kept).
#' @return `invisible(NULL)`.
#' @seealso [retrieveViews()], [releaseVariables()], [pageList()]
#' @examples
#' registerVariables("demo", list(X = matrix(rnorm(20), 4), y = 1:4))
#' pageList()
#' releaseVariables("demo", c("X", "y"))
#' @export
registerVariables <- function(namespace, variableList) {
  check_given("registerVariables", c(namespace = missing(namespace), variableList = missing(variableList)))
  check_name(namespace, "namespace")
  # The whole list is checked before anything is registered.
  nms <- names(variableList)
  if (!is.list(variableList) || is.object(variableList) && !identical(class(variableList), "list") ||
      !has_names(variableList)) {
    pageshare_stop("not_named_list")
  }
  check_name_bytes(nms, "variableList")
  if (anyDuplicated(nms)) pageshare_stop("duplicate_names", or_none(unique(nms[duplicated(nms)])))
  for (i in seq_along(variableList)) {
    el <- variableList[[i]]
    if (!is_shareable_vector(el)) {
      pageshare_stop("share_type", sprintf("variableList$%s", nms[i]), describe_type(el))
    }
  }
  dir <- segment_dir()
  # All or nothing: what the index refuses (a name another process holds, a
  # namespace and name too long together) releases what this call registered.
  done <- character()
  ok <- FALSE
  on.exit(if (!ok) for (var in done) try(.Call(ps_release, namespace, var), silent = TRUE))
  for (i in seq_along(variableList)) {
    el <- variableList[[i]]
    sync_shared_budget()
    .Call(ps_register, namespace, nms[i], el, as.pairlist(attributes(el)), attributes_blob(el), dir, release_source())
    done <- c(done, nms[i])
  }
  ok <- TRUE
  invisible(NULL)
}

#' Retrieve views of registered variables (memshare API)
#'
#' @param namespace A single string naming the namespace.
#' @param variableNames Names of variables registered in `namespace` (by any
#'   process on this machine).
#' @return A named list of views, one per name. An unknown name is an error that
#'   lists what this process has registered in the namespace.
#' @section Errors:
#' Conditions (see [pageshare_conditions]): `pageshare_not_registered` for a
#' name nobody registered in `namespace`, `pageshare_segment_gone` when its
#' process released it or exited meanwhile, `pageshare_permission` or
#' `pageshare_invalid_segment` for an index entry that is not to be trusted
#' (another user's, damaged or forged).
#' @examples
#' registerVariables("demo2", list(X = matrix(1:6, 2)))
#' v <- retrieveViews("demo2", "X")
#' v$X[, 2]
#' releaseViews("demo2", "X")
#' releaseVariables("demo2", "X")
#' @export
retrieveViews <- function(namespace, variableNames) {
  check_given("retrieveViews", c(namespace = missing(namespace), variableNames = missing(variableNames)))
  check_variables(namespace, variableNames)
  dir <- segment_dir()
  out <- lapply(variableNames, function(var) {
    key <- view_key(namespace, var)
    held <- views_held[[key]]
    # A name can be released and registered again with other data: the view
    # kept for it is used only while the index still publishes its segment.
    if (!is.null(held)) {
      if (isTRUE(.Call(ps_is_current, held, namespace, var, dir))) return(held)
      rm(list = key, envir = views_held)
    }
    got <- tryCatch(.Call(ps_retrieve, namespace, var, dir), pageshare_not_registered = function(e) {
      pageshare_stop("unknown_variable", sprintf("variable '%s' is", var), namespace,
                     or_none(.Call(ps_namespace_variables, namespace, dir)))
    })
    view <- got$view
    if (length(got$attributes)) {
      .Call(ps_set_attributes, view, as.pairlist(unserialize(got$attributes)))
    }
    assign(key, view, envir = views_held)
    view
  })
  names(out) <- variableNames
  out
}

#' Release views held by this process (memshare API)
#'
#' Forgets this process's views of the named variables; the mapping goes away
#' when no R object uses it any more.
#' @inheritParams retrieveViews
#' @return `invisible(NULL)`.
#' @examples
#' registerVariables("demo3", list(v = rnorm(5)))
#' x <- retrieveViews("demo3", "v")
#' releaseViews("demo3", "v")
#' releaseVariables("demo3", "v")
#' @export
releaseViews <- function(namespace, variableNames) {
  check_given("releaseViews", c(namespace = missing(namespace), variableNames = missing(variableNames)))
  check_variables(namespace, variableNames)
  keys <- view_key(namespace, variableNames)
  missing <- !vapply(keys, exists, logical(1), envir = views_held, inherits = FALSE)
  if (any(missing)) {
    pageshare_stop("not_viewed", or_none(variableNames[missing]), namespace,
                   or_none(held_view_names(namespace)))
  }
  rm(list = keys, envir = views_held)
  invisible(NULL)
}

#' Release registered variables (memshare API)
#'
#' Unlinks the named segments registered by this process. Views of them that
#' other processes hold keep working until they are dropped (POSIX semantics).
#' @inheritParams retrieveViews
#' @return `invisible(NULL)`.
#' @examples
#' registerVariables("demo4", list(v = rnorm(5)))
#' releaseVariables("demo4", "v")
#' @export
releaseVariables <- function(namespace, variableNames) {
  check_given("releaseVariables", c(namespace = missing(namespace), variableNames = missing(variableNames)))
  check_variables(namespace, variableNames)
  dir <- segment_dir()
  mine <- registered_here(namespace)
  unknown <- setdiff(variableNames, mine)
  if (length(unknown)) {
    pageshare_stop("unknown_variable",
                   sprintf("%s %s", if (length(unknown) > 1) "variables" else "variable", or_none(unknown)),
                   namespace, or_none(mine))
  }
  for (var in variableNames) .Call(ps_release, namespace, var)
  invisible(NULL)
}

#' Describe a registered variable (memshare API)
#'
#' @param namespace A single string naming the namespace.
#' @param variableName One or more variable names.
#' @return For one name, `list(type = "matrix", nrow, ncol)` or
#'   `list(type = "vector", n)` (as memshare), plus `mode` (the storage type);
#'   for several names, an unnamed list of those.
#' @examples
#' registerVariables("demo5", list(X = matrix(0, 3, 2)))
#' retrieveMetadata("demo5", "X")
#' releaseViews("demo5", "X")
#' releaseVariables("demo5", "X")
#' @export
retrieveMetadata <- function(namespace, variableName) {
  check_given("retrieveMetadata", c(namespace = missing(namespace), variableName = missing(variableName)))
  check_variables(namespace, variableName, "variableName")
  describe <- function(var) {
    v <- retrieveViews(namespace, var)[[1L]]
    d <- dim(v)
    if (length(d) == 2L) {
      list(type = "matrix", nrow = as.numeric(d[1L]), ncol = as.numeric(d[2L]), mode = typeof(v))
    } else {
      list(type = "vector", n = as.numeric(length(v)), mode = typeof(v))
    }
  }
  if (length(variableName) == 1L) describe(variableName) else lapply(variableName, describe)
}

held_view_names <- function(namespace = NULL) {
  keys <- ls(views_held, all.names = TRUE)
  if (!length(keys)) return(character())
  ns <- hex_utf8(sub(":.*", "", keys))
  var <- hex_utf8(sub(".*:", "", keys))
  by_name <- order(paste0(ns, "\r", var))
  ns <- ns[by_name]
  var <- var[by_name]
  if (is.null(namespace)) paste0(ns, ".", var) else var[ns == namespace]
}

#' Pages and views held by this process (memshare API)
#'
#' @return An unnamed list of strings `"<namespace>.<variable>"`, sorted:
#'   `pageList()` the variables this process registered, `viewList()` the
#'   views it retrieved and has not released.
#' @examples
#' registerVariables("demo6", list(a = 1:3))
#' pageList()
#' viewList()
#' releaseVariables("demo6", "a")
#' @export
pageList <- function() {
  held <- .Call(ps_held)
  if (!length(held$namespace)) return(list())
  as.list(sort(paste0(held$namespace, ".", held$variable)))
}

#' @rdname pageList
#' @export
viewList <- function() as.list(held_view_names())

#' Release everything of a namespace (memshare API)
#'
#' Releases this process's views of and registrations in `namespace`, and,
#' if `cluster` is given, the views held by its workers.
#' @param namespace A single string.
#' @param cluster Optional `parallel` cluster whose workers have pageshare loaded.
#' @return `invisible(NULL)`.
#' @examples
#' registerVariables("demo7", list(a = 1:3))
#' memshare_gc("demo7")
#' pageList()
#' @export
memshare_gc <- function(namespace, cluster = NULL) {
  check_given("memshare_gc", c(namespace = missing(namespace)))
  check_name(namespace, "namespace")
  if (!is.null(cluster) && !inherits(cluster, "cluster")) {
    pageshare_stop("not_cluster", "cluster", " (or NULL)", describe_object(cluster))
  }
  release_namespace <- function(namespace) {
    views <- pageshare:::held_view_names(namespace)
    if (length(views)) pageshare::releaseViews(namespace, views)
    mine <- pageshare:::registered_here(namespace)
    if (length(mine)) pageshare::releaseVariables(namespace, mine)
    invisible(NULL)
  }
  if (!is.null(cluster)) parallel::clusterCall(cluster, release_namespace, namespace)
  release_namespace(namespace)
  invisible(NULL)
}
