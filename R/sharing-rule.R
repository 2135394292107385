# What a front door shares: one rule, used by plan(shm_multisession) (the
# globals of a future and the value a worker returns), registerDoShm()
# (exported variables, the caller's `...`, iteration values) and
# memApply()/memLapply() (X, VARS and FUN):
#
# * a view is sent as itself (a handle), re-shared if written in place since;
# * a logical, integer, double, complex, raw or character vector (with any
#   attributes) whose data take at least `threshold` bytes is shared;
# * small vectors of one chunk (below the threshold alone, together at least
#   the threshold; not character) are packed into one segment per type and
#   sent as views of its slices (pack_chunk()): a chunk is a list the walk
#   meets outside any other list (a global, an argument, X of a map, a
#   foreach iteration column, a value bound in a closure's frame) with the
#   lists inside it, so the pieces of split(df, g) that a chunk of
#   future_lapply() carries are packed together;
# * lists and data frames are walked (up to 50 levels; a data frame's row
#   names after its columns when it stores them, stored_row_names()), and so
#   are the frames a closure carries when it is serialized (its environment
#   and their parents up to the global environment, a namespace or a
#   package): large values bound there, plainly or as forced promises, are
#   swapped for views *in place* while the task is sent and put back right
#   after (restore_shared()); a view has the same value, so code that runs
#   meanwhile sees the same data. Missing arguments and active bindings are
#   left alone.
#
# Before the walk, each door forces the promises that the closures it sends
# will read from their frames (force_sent_promises()), as future forces the
# globals it sends; other promises are never forced.
#
# A walk collects its state in a `share_state()`: the views made or met (they
# must stay alive until the worker has mapped them), the bindings to put back,
# the names of the globals it changed, and the first pageshare_error met
# (nothing more is shared from then on: the door falls back to plain
# serialization, see fall_back()).

share_state <- function(door = NULL) {
  state <- new.env(parent = emptyenv())
  # (what the walk is for, named in option pageshare.verbose's report: see share_report())
  state$door <- door
  if (!is.null(door) && isTRUE(getOption("pageshare.verbose"))) state$started <- Sys.time()
  state$views <- list()
  state$view_names <- character()   # (where each view was found, for the verbose report)
  state$failed <- NULL
  state$restore <- list()
  state$envs <- list()
  state$threshold <- share_threshold()
  state$frames <- TRUE   # walk closures' frames (FALSE where nothing could put them back)
  state$forced <- list()   # the promises force_sent_promises() forced: list(env, name)
  state$mark <- .Call(ps_share_mark)   # what to roll back to (fall_back())
  state
}

# Bytes of the data of a shareable vector (no object.size(): it is slow on long
# vectors and only an order of magnitude is needed).
data_bytes <- function(x, threshold = share_threshold()) {
  if (is.character(x)) return(character_bytes(x, threshold))
  as.numeric(length(x)) * switch(typeof(x), logical = 4, integer = 4, double = 8,
                                 complex = 16, raw = 1, 0)
}

# Bytes a character vector takes to serialize: a pointer-sized entry per
# element plus its text (the text counted only when the entries alone are
# below the threshold, since nchar() walks every string).
character_bytes <- function(x, threshold = share_threshold()) {
  entries <- 8 * as.numeric(length(x))
  if (entries >= threshold) return(entries)
  entries + sum(nchar(x, type = "bytes"), na.rm = TRUE)
}

add_view <- function(state, view, name) {
  state$views[[length(state$views) + 1L]] <- view
  state$view_names[[length(state$views)]] <- name
}

element_name <- function(name, names, i) {
  nm <- if (is.null(names)) "" else names[[i]]
  if (!nzchar(name)) return(if (nzchar(nm)) nm else sprintf("[[%d]]", i))
  if (nzchar(nm)) paste0(name, "$", nm) else sprintf("%s[[%d]]", name, i)
}

# `x` with every value the rule shares replaced by its view. `name` says
# where `x` was found (a global's or an argument's name, `$` and `[[i]]` below
# it), for the verbose report.
share_walk <- function(x, state, depth = 0L, name = "") {
  if (is.null(x)) return(x)
  if (.Call(ps_is_view, x)) {
    v <- tryCatch(share_value(x, "x"), pageshare_error = function(e) x)
    add_view(state, v, name)
    return(v)
  }
  if (!is.null(state$pack) && is_pack_leaf(x, state$threshold)) return(take_packed(x, state))
  if (is_shareable_vector(x)) {
    if (!is.null(state$failed) || data_bytes(x, state$threshold) < state$threshold) return(x)
    v <- tryCatch(share_value(x, "x"), pageshare_error = function(e) {
      state$failed <- e
      NULL
    })
    if (is.null(v)) return(x)
    add_view(state, v, name)
    return(v)
  }
  # (the frames of a closure, an environment and an S4 object's slots are
  # walked as chunks of their own: see pack_chunk())
  if (typeof(x) == "closure") {
    if (isTRUE(state$frames)) outside_chunk(state, share_in_frames(environment(x), state, name))
    return(x)
  }
  # (an environment travels as a copy: its large values are swapped for views
  # while it is sent, as a closure's frames are; an R6 object is one)
  if (typeof(x) == "environment") {
    if (isTRUE(state$frames)) outside_chunk(state, share_in_frames(x, state, name))
    return(x)
  }
  if (typeof(x) == "S4") return(outside_chunk(state, share_slots(x, state, depth, name)))
  if (typeof(x) == "list" && !isS4(x) && depth < 50L && length(x) > 0L &&
      (!is.null(state$pack) || isTRUE(.Call(ps_worth_walking, x, state$threshold)))) {
    if (!isTRUE(state$in_chunk)) {
      # (a chunk: its small vectors are packed first, then taken in the walk's order)
      state$in_chunk <- TRUE
      on.exit(for (f in pack_fields) assign(f, NULL, envir = state))
      pack_chunk(x, state, depth, name)
    }
    out <- NULL
    nms <- names(x)
    for (i in seq_along(x)) {
      el <- .subset2(x, i)
      if (is.null(el)) next
      before <- length(state$views)
      new <- share_walk(el, state, depth + 1L, element_name(name, nms, i))
      if (length(state$views) > before && !identical(typeof(el), "closure")) {
        if (is.null(out)) out <- unclass(x)
        out[i] <- list(new)
      }
    }
    # (then its row names, when it keeps them as a vector: pack_leaves()'s order)
    rows <- stored_row_names(x)
    shared_rows <- NULL
    if (!is.null(rows)) {
      before <- length(state$views)
      new <- share_walk(rows, state, depth + 1L, paste0(if (nzchar(name)) name else "a data frame", " (row names)"))
      if (length(state$views) > before) {
        shared_rows <- new
        if (is.null(out)) out <- unclass(x)
      }
    }
    if (!is.null(out)) return(with_attributes_of(out, x, rows = shared_rows %||% .row_names_info(x, 0L)))
  }
  x
}

# An S4 object (a Matrix package matrix, say) with its slots walked as a
# list's elements are: its class, and every slot left small, stay as they are.
# (Slots are attributes; setting one with attr<- checks nothing, as the
# object's data do not change.)
share_slots <- function(x, state, depth, name) {
  if (depth >= 50L) return(x)
  out <- x
  for (slot in setdiff(names(attributes(x)), "class")) {
    value <- attr(x, slot, exact = TRUE)
    before <- length(state$views)
    new <- share_walk(value, state, depth + 1L, paste0(if (nzchar(name)) name else "an S4 object", "@", slot))
    if (length(state$views) > before && typeof(value) != "closure" && typeof(value) != "environment") {
      attr(out, slot) <- new
    }
  }
  out
}

# Packing (the rule above): the vectors of a chunk below the threshold on
# their own but of at least `min_packed_bytes` (a handle costs about a
# hundred bytes), of the types that pack (not character), not views. When
# together they reach the threshold, those of each type are copied into one
# segment and the walk replaces them by views of its slices: a list of many
# columns, a data frame of many narrow columns, future.apply's chunks of
# columns, and a chunk of split()'s pieces (a list of data frames of narrow
# columns) travel as handles, at the cost of one segment, descriptor and
# mapping per type and chunk. A type whose vectors take less than
# `min_pack_segment_bytes` together is left plain: its bytes cost less to send
# than a segment (a descriptor and a mapping in every process that reads
# them) costs to keep.
min_packed_bytes <- 512
min_pack_segment_bytes <- 65536

is_pack_leaf <- function(x, threshold) {
  is_shareable_vector(x) && !is.character(x) && !is_shared(x) && {
    b <- data_bytes(x, threshold)
    b >= min_packed_bytes && b < threshold
  }
}

# The vectors that packing may take in chunk `x` (a list met at `depth`), in
# the order in which share_walk() meets them: the elements of the lists from
# `x` down, up to the walk's depth of 50, each list's stored row names after
# its elements. (The walk descends into every list of a chunk that packs, so
# that it meets each of them.)
pack_leaves <- function(x, threshold, depth) {
  found <- list()
  for (i in seq_along(x)) {
    el <- .subset2(x, i)
    if (is.null(el) || is_shared(el)) next
    if (is_pack_leaf(el, threshold)) {
      found[[length(found) + 1L]] <- el
    } else if (typeof(el) == "list" && !isS4(el) && depth + 1L < 50L && length(el) > 0L) {
      found <- c(found, pack_leaves(el, threshold, depth + 1L))
    }
  }
  rows <- stored_row_names(x)
  if (!is.null(rows) && is_pack_leaf(rows, threshold)) found[[length(found) + 1L]] <- rows
  found
}

# The row names a list with a class (a data frame) keeps as a vector of
# their own, as subsetting and split() leave them (4 bytes a row, or the text
# of each name), or NULL: the walk shares them as it shares columns. R's
# compact form of 1:n, c(NA, -n), is left alone. (.row_names_info(x, 0L)
# reads the attribute as stored; attr() would expand the compact form. The
# Rust prefilter, stored_row_names() in entry_share.rs, asks the same.)
stored_row_names <- function(x) {
  if (!is.object(x)) return(NULL)
  rows <- .row_names_info(x, 0L)
  if (is.null(rows) || (is.integer(rows) && length(rows) == 2L && is.na(rows[1L]))) NULL else rows
}

# `out` with x's attributes, row names as x stores them (or `rows`):
# attributes() gives automatic row names as 1:n, which R then keeps as names
# of the data frame's own (as.matrix() would show them, unlike x's).
with_attributes_of <- function(out, x, rows = .row_names_info(x, 0L)) {
  attributes(out) <- attributes(x)
  if (!is.null(rows)) attr(out, "row.names") <- rows
  out
}

# Packs the small vectors of chunk `x` (met at `depth`, found as `name`) when
# together they reach the threshold: sets state$pack to their views in the
# walk's order (NULL for a vector left plain), which take_packed() hands
# out as the walk meets them.
pack_chunk <- function(x, state, depth, name = "") {
  state$pack <- NULL
  if (!is.null(state$failed) ||
      .Call(ps_packable_bytes, x, state$threshold, min_packed_bytes) < state$threshold) {
    return(invisible())
  }
  leaves <- pack_leaves(x, state$threshold, depth)
  types <- vapply(leaves, typeof, "")
  bytes <- vapply(leaves, data_bytes, 0)
  if (sum(bytes) < state$threshold) return(invisible())
  views <- vector("list", length(leaves))
  labels <- character(length(leaves))
  for (type in unique(types)) {
    idx <- which(types == type)
    if (sum(bytes[idx]) < min_pack_segment_bytes) next
    sync_shared_budget()
    packed <- tryCatch(
      .Call(ps_share_packed, leaves[idx], lapply(leaves[idx], function(l) as.pairlist(attributes(l))),
            cache_limit()),
      pageshare_error = function(e) {
        state$failed <- e
        NULL
      })
    if (is.null(packed)) break
    arm_gc_hook()
    views[idx] <- packed
    labels[idx] <- sprintf("%s (%d small elements packed)", if (nzchar(name)) name else "a list", length(idx))
  }
  state$pack <- views
  state$pack_labels <- labels
  state$pack_next <- 0L
  state$pack_leaves <- leaves
  invisible()
}

# The next view of the chunk's packing, for `x` (a vector of the chunk that
# packing may take, met by the walk): its view, or `x` itself when its type
# was left plain.
take_packed <- function(x, state) {
  k <- state$pack_next + 1L
  state$pack_next <- k
  # (the walk meets the vectors in pack_leaves()'s order; anything else is a bug)
  # (identical() is TRUE at once for the same object)
  if (k > length(state$pack) || !identical(x, state$pack_leaves[[k]])) pageshare_stop("pack_out_of_order", k)
  v <- state$pack[[k]]
  if (is.null(v)) return(x)
  add_view(state, v, state$pack_labels[[k]])
  v
}

# Evaluates `expr` (a walk of a closure's frames or of an S4 object's slots)
# as a chunk of its own, outside the chunk being walked, which resumes after.
outside_chunk <- function(state, expr) {
  saved <- mget(pack_fields, envir = state, ifnotfound = list(NULL))
  state$in_chunk <- FALSE
  state$pack <- NULL
  on.exit(for (f in pack_fields) assign(f, saved[[f]], envir = state))
  expr
}

# The fields of a share_state() that describe the chunk being walked.
pack_fields <- c("in_chunk", "pack", "pack_labels", "pack_next", "pack_leaves")

# The frames a closure carries (its environment and their parents, up to 25,
# until the global environment, a namespace or a package): large values bound
# there are swapped for views in place (see the rule above).
share_in_frames <- function(env, state, name = "") {
  depth <- 0L
  while (is.environment(env) && depth < 25L && !is_shared_scope(env)) {
    for (e in state$envs) if (identical(e, env)) return(invisible())
    state$envs[[length(state$envs) + 1L]] <- env
    for (nm in ls(env, all.names = TRUE, sorted = FALSE)) share_binding(env, nm, state, name)
    env <- parent.env(env)
    depth <- depth + 1L
  }
  invisible()
}

# Binding types of ps_binding() (src/bindings.c).
binding_types <- c(unbound = 0L, value = 1L, missing = 2L, delayed = 3L, forced = 4L,
                   active = 5L, promise = 6L)

# (`owner`: the name of the closure whose frames hold the binding, in the
# verbose report as "owner's name")
share_binding <- function(env, name, state, owner = "") {
  b <- .Call(ps_binding, env, name)
  type <- b[[1L]]
  value <- b[[2L]]
  if (type == binding_types[["promise"]]) {
    # R 4.5 cannot tell a forced promise from an unforced one; a promise of a
    # variable's value (the usual argument) is read, which is a lookup, and so
    # is one that force_sent_promises() forced.
    if (!is.symbol(do.call(substitute, list(as.name(name), env))) && !was_forced(state, env, name)) {
      return(invisible())
    }
    value <- tryCatch(get(name, envir = env, inherits = FALSE), error = function(e) NULL)
  } else if (!type %in% binding_types[c("value", "forced")]) {
    return(invisible())
  }
  if (typeof(value) == "closure") {
    share_in_frames(environment(value), state, name)
    return(invisible())
  }
  if (typeof(value) == "environment") {
    if (!is_shared_scope(value)) share_in_frames(value, state, name)
    return(invisible())
  }
  if (!(is_shareable_vector(value) || typeof(value) %in% c("list", "S4"))) return(invisible())
  before <- length(state$views)
  where <- if (nzchar(owner)) sprintf("%s's %s", owner, name) else name
  new <- share_walk(value, state, name = where)
  if (length(state$views) > before && is.null(state$failed)) {
    state$restore[[length(state$restore) + 1L]] <-
      list(env = env, name = name, type = type, value = value, saved = b[[3L]])
    set_binding(env, name, new)
  }
  invisible()
}

# The promises that the closures a door sends will read from their frames
# (`FUN`, and the closures among the elements of the lists in `...`: the
# arguments that go with it) are forced here, before the task leaves, as
# future forces the globals it sends. Left unforced, such a promise would be
# serialized with its expression and evaluated on the worker in the
# environment it was made in: for an argument given at the top level the
# worker's global environment ("object not found"), else a copy of the
# caller's whole frame. A closure reads its free variables
# (codetools::findGlobals(), which globals::globalsOf() uses for future) and
# those of the closures they name; the promises of other names are not
# forced (forcing one could fail, or have effects, that the task never
# causes). A missing argument (also one passed on from a caller's missing
# argument) is left alone, and so is a promise whose forcing fails: the task
# meets the error on the worker if it reads it, as it did unforced.
force_sent_promises <- function(state, FUN, ...) {
  force_closure_promises(FUN, state)
  for (l in list(...)) for (el in l) if (typeof(el) == "closure") force_closure_promises(el, state)
  invisible()
}

force_closure_promises <- function(fun, state) {
  if (typeof(fun) != "closure") return(invisible())
  env <- environment(fun)
  if (!is.environment(env) || is_shared_scope(env)) return(invisible())
  for (f in state$forced_funs) if (identical(f, fun)) return(invisible())
  state$forced_funs[[length(state$forced_funs) + 1L]] <- fun
  # (finding the free variables costs more than a small task: only when
  # there is something to force)
  if (!holds_unforced(env, new.env(parent = emptyenv()))) return(invisible())
  for (name in codetools::findGlobals(fun, merge = TRUE)) {
    frame <- binding_frame(env, name)
    if (is.null(frame)) next
    value <- if (identical(name, "...")) force_dots(frame) else force_binding(frame, name, state)
    if (typeof(value) == "closure") force_closure_promises(value, state)
  }
  invisible()
}

# Does a frame from `env` on (as share_in_frames() walks them), or one of
# the closures bound there, hold a promise that may be unforced? `seen`
# holds the frames looked at.
holds_unforced <- function(env, seen) {
  depth <- 0L
  while (is.environment(env) && depth < 25L && !is_shared_scope(env)) {
    for (e in seen$envs) if (identical(e, env)) return(FALSE)
    seen$envs[[length(seen$envs) + 1L]] <- env
    frame <- .Call(ps_frame_promises, env)
    if (frame[[1L]]) return(TRUE)
    for (f in frame[[2L]]) if (holds_unforced(environment(f), seen)) return(TRUE)
    env <- parent.env(env)
    depth <- depth + 1L
  }
  FALSE
}

# The frame among a closure's own (as share_in_frames() walks them) that
# binds `name`, or NULL.
binding_frame <- function(env, name) {
  depth <- 0L
  while (is.environment(env) && depth < 25L && !is_shared_scope(env)) {
    if (exists(name, envir = env, inherits = FALSE)) return(env)
    env <- parent.env(env)
    depth <- depth + 1L
  }
  NULL
}

# The value bound to `name` in `frame`, a promise forced first (see
# force_sent_promises()); NULL for what is not read.
force_binding <- function(frame, name, state) {
  b <- .Call(ps_binding, frame, name)
  type <- b[[1L]]
  if (type %in% binding_types[c("value", "forced")]) return(b[[2L]])
  if (!type %in% binding_types[c("delayed", "promise")]) return(NULL)
  sym <- as.name(name)
  passed_missing <- is.symbol(do.call(substitute, list(sym, frame))) &&
    isTRUE(tryCatch(eval(call("missing", sym), frame), error = function(e) FALSE))
  if (passed_missing) return(NULL)
  forced <- TRUE
  value <- tryCatch(get(name, envir = frame, inherits = FALSE), error = function(e) {
    forced <<- FALSE
    NULL
  })
  if (forced) state$forced[[length(state$forced) + 1L]] <- list(env = frame, name = name)
  value
}

# The `...` of a frame, each argument forced (those whose forcing fails are
# left as they are).
force_dots <- function(frame) {
  n <- tryCatch(eval(quote(...length()), frame), error = function(e) 0L)
  for (k in seq_len(n)) tryCatch(eval(call("...elt", k), frame), error = function(e) NULL)
  NULL
}

was_forced <- function(state, env, name) {
  for (f in state$forced) if (identical(f$name, name) && identical(f$env, env)) return(TRUE)
  FALSE
}

# Assigns in place, keeping a locked binding locked.
set_binding <- function(env, name, value) {
  locked <- bindingIsLocked(name, env)
  if (locked) .Call(ps_unlock_binding, env, name)
  on.exit(if (locked) lockBinding(name, env))
  assign(name, value, envir = env)
}

# Puts back every binding the walk swapped (last first), as it was (a forced
# promise as that promise).
restore_shared <- function(state) {
  restore <- if (is.environment(state)) state$restore else state
  for (r in rev(restore)) {
    locked <- bindingIsLocked(r$name, r$env)
    if (locked) .Call(ps_unlock_binding, r$env, r$name)
    .Call(ps_restore_binding, r$env, r$name, r$type, r$value, r$saved)
    if (locked) lockBinding(r$name, r$env)
  }
  if (is.environment(state)) state$restore <- list()
  invisible()
}

# Environments whose bindings are everyone's, not a closure's own: never
# changed, and a walk stops there.
is_shared_scope <- function(env) {
  identical(env, globalenv()) || identical(env, emptyenv()) || identical(env, baseenv()) ||
    isNamespace(env) || startsWith(environmentName(env), "package:")
}

# A door whose walk failed (state$failed set) falls back to plain
# serialization, all or nothing: the segments the walk made and their
# identity-cache entries are let go at once (budget and descriptors as before
# the walk), and the door sends outside the handle scope, where its views
# serialize as their plain data. Returns TRUE when it fell back. Warns once
# per set of workers when `key` is given (a future_lapply() makes many
# futures), otherwise once per call (none with `warn = FALSE`).
fall_back <- function(state, key = NULL, warn = TRUE) {
  share_report(state)
  if (is.null(state$failed)) return(invisible(FALSE))
  .Call(ps_share_rollback, state$mark)
  if (!warn) return(invisible(TRUE))
  if (length(key) == 1L) {
    if (isTRUE(fallback_warned[[key]])) return(invisible(TRUE))
    fallback_warned[[key]] <- TRUE
  }
  warning(structure(class = c("pageshare_fallback", "pageshare_warning", "warning", "condition"), list(
    message = sprintf(paste0(
      "pageshare: a value could not be put into shared memory (%s); ",
      "it is sent by plain serialization%s"),
      conditionMessage(state$failed),
      if (length(key) == 1L) " (this warning is given once for these workers)" else ""),
    call = NULL)))
  invisible(TRUE)
}

# With option pageshare.verbose, what a front door's walk shared: a message
# of class "pageshare_verbose" naming the door, each segment sent as a handle
# with the names it was found under and its size, the bytes each worker reads
# in place instead of receiving a copy (and the time the walk took), or that
# nothing reached the threshold, and what could not be shared and why (those
# data go plainly).
share_report <- function(state) {
  if (is.null(state$door) || !isTRUE(pageshare_option("pageshare.verbose"))) return(invisible())
  took <- if (is.null(state$started)) "" else
    sprintf(", %.1f ms", as.numeric(Sys.time() - state$started, units = "secs") * 1000)
  text <- if (!is.null(state$failed)) {
    sprintf("could not share (%s): its data go by plain serialization", conditionMessage(state$failed))
  } else if (length(state$views)) {
    info <- lapply(state$views, shared_info)
    segment <- vapply(info, function(i) as.character(i$name), "")
    bytes <- vapply(info, function(i) as.numeric(i$segment_bytes), 0)
    names <- state$view_names
    names[is.na(names) | !nzchar(names)] <- "(unnamed)"
    # (a segment under the first name it was found by)
    first <- !duplicated(segment)
    each <- sprintf("%s (%s)", names[first], format_bytes(bytes[first]))
    total <- sum(bytes[first])
    sprintf("shares %d segment%s as handles%s: %s; %s that each worker reads in place instead of receiving a copy",
            length(each), if (length(each) == 1L) "" else "s", took, paste(each, collapse = "; "),
            format_bytes(total))
  } else {
    sprintf("has nothing that reaches the threshold (%s): everything goes by plain serialization",
            format_bytes(state$threshold))
  }
  message(structure(class = c("pageshare_verbose", "message", "condition"),
                    list(message = sprintf("pageshare: %s %s\n", state$door, text), call = NULL)))
  invisible()
}

# The sets of workers (plan keys) that gave their fallback warning already.
fallback_warned <- new.env(parent = emptyenv())

# Views of a walk, each segment once.
unique_views <- function(views) {
  if (!length(views)) return(views)
  names <- vapply(views, function(v) as.character(shared_info(v)$name), "")
  views[!duplicated(names)]
}
