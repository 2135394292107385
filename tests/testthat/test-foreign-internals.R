# The inventory of what pageshare relies on beyond documented APIs
# (R/foreign-internals.R) is complete: every `pkg:::name`, every field of a
# known foreign object that R/ reads or writes, and every other package's
# option that R/ uses is listed there.

r_sources <- function() {
  dir <- test_path("..", "..", "R")
  skip_if_not(dir.exists(dir) && length(list.files(dir, "[.]R$")) > 0,
              "pageshare's R sources are not next to the tests (R CMD check runs the installed package)")
  list.files(dir, "[.]R$", full.names = TRUE)
}

is_empty <- function(e) is.symbol(e) && identical(as.character(e), "")

# Every use in `file`: field accesses as (root, first named field, written),
# `pkg:::name` and foreign_internal("pkg", "name") as (pkg, name), options.
scan_uses <- function(file) {
  fields <- list(); internals <- list(); opts <- list()
  chain <- function(e) {
    if (is.symbol(e)) return(list(root = as.character(e), fields = character()))
    if (is.call(e) && length(e) == 3L && (identical(e[[1]], as.name("$")) || identical(e[[1]], as.name("[[")))) {
      inner <- chain(e[[2]])
      if (is.null(inner)) return(NULL)
      key <- e[[3]]
      f <- if (identical(e[[1]], as.name("$"))) as.character(key)
           else if (is.character(key) && length(key) == 1L) key else NA_character_
      inner$fields <- c(inner$fields, f)
      return(inner)
    }
    NULL
  }
  walk_all <- function(l, write = FALSE) {
    for (i in seq_along(l)) if (!is_empty(l[[i]])) walk(l[[i]], write)
  }
  walk <- function(e, write = FALSE) {
    if (is.pairlist(e)) return(walk_all(as.list(e)))
    if (!is.call(e)) return(invisible())
    head <- e[[1]]
    if (identical(head, as.name("$")) || identical(head, as.name("[["))) {
      ch <- chain(e)
      named <- if (!is.null(ch)) ch$fields[!is.na(ch$fields)] else character()
      if (length(named)) {
        fields[[length(fields) + 1L]] <<- data.frame(file = basename(file), root = ch$root, field = named[1],
                                                     write = write, stringsAsFactors = FALSE)
      }
      return(walk_all(as.list(e)[-1]))
    }
    if (identical(head, as.name(":::")) && length(e) == 3L) {
      internals[[length(internals) + 1L]] <<- c(as.character(e[[2]]), as.character(e[[3]]))
    }
    if (identical(head, as.name("foreign_internal")) && length(e) >= 3L &&
        is.character(e[[2]]) && is.character(e[[3]])) {
      internals[[length(internals) + 1L]] <<- c(e[[2]], e[[3]])
    }
    if (identical(head, as.name("getOption")) && length(e) >= 2L && is.character(e[[2]])) {
      opts[[length(opts) + 1L]] <<- c(e[[2]], "read")
    }
    if (identical(head, as.name("options")) && !is.null(names(e))) {
      for (n in setdiff(names(e), "")) opts[[length(opts) + 1L]] <<- c(n, "written")
    }
    if (identical(head, as.name("<-")) || identical(head, as.name("=")) || identical(head, as.name("<<-"))) {
      walk(e[[2]], write = TRUE)
      return(walk(e[[3]]))
    }
    walk_all(as.list(e), write = FALSE)
  }
  walk_all(as.list(parse(file, keep.source = FALSE)))
  list(fields = do.call(rbind, fields), internals = internals, options = opts)
}

test_that("every field of another package's object that R/ uses is in the inventory, with its access", {
  files <- r_sources()
  uses <- do.call(rbind, lapply(files, function(f) scan_uses(f)$fields))
  objects <- pageshare:::foreign_fields
  checked <- 0L
  for (o in objects) {
    mine <- uses[uses$root %in% o$roots & grepl(o$files, uses$file), , drop = FALSE]
    for (i in seq_len(nrow(mine))) {
      u <- mine[i, ]
      where <- sprintf("%s: %s$%s (%s)", u$file, u$root, u$field, o$object)
      expect_true(u$field %in% names(o$fields), info = paste(where, "is not in R/foreign-internals.R"))
      if (u$write && u$field %in% names(o$fields)) {
        expect_match(o$fields[[u$field]][[1]], "written", info = paste(where, "is written; the inventory says read"))
      }
      checked <- checked + 1L
    }
  }
  expect_gt(checked, 40)   # the scan finds what it is meant to find
  # The known ones, by name (the issue that asked for the inventory listed them).
  inv <- pageshare:::internals_inventory()
  has <- function(kind, name, access) any(inv$kind == kind & inv$name == name & grepl(access, inv$access))
  expect_true(has("field", "con", "read"))
  expect_true(has("field", "host", "read"))
  expect_true(has("field", "workers", "written"))
  expect_true(has("option", "future.relay.immediate", "read"))
  expect_true(has("field", "combineInfo", "read"))
  expect_true(all(c("sxpinfo header word", "mmapped chunk header", "pages under a live vector") %in%
                  inv$name[inv$kind == "layout"]))
  expect_true(all(nzchar(inv$why)) && all(nzchar(inv$access)) && all(nzchar(inv$checked)))
})

test_that("every pkg:::name and foreign_internal() in R/ is in the inventory", {
  listed <- vapply(pageshare:::foreign_internals, function(e) paste(e$package, e$name, sep = ":::"), "")
  used <- unique(unlist(lapply(r_sources(), function(f)
    vapply(scan_uses(f)$internals, paste, "", collapse = ":::"))))
  foreign <- used[!startsWith(used, "pageshare:::")]
  expect_gt(length(foreign), 0)
  for (u in foreign) expect_true(u %in% listed, info = paste(u, "is used in R/ but not in foreign_internals"))
})

test_that("every other package's option that R/ reads or writes is in the inventory", {
  listed <- pageshare:::foreign_options
  names(listed) <- vapply(listed, `[[`, "", "name")
  used <- do.call(rbind, lapply(r_sources(), function(f) do.call(rbind, scan_uses(f)$options)))
  prefix <- sub("[.].*$", "", used[, 1])
  foreign <- used[grepl(".", used[, 1], fixed = TRUE) & prefix != "pageshare" &
                  vapply(prefix, function(p) nzchar(system.file(package = p)), logical(1)), , drop = FALSE]
  expect_gt(nrow(foreign), 0)
  for (i in seq_len(nrow(foreign))) {
    name <- foreign[i, 1]
    expect_true(name %in% names(listed), info = paste("option", name, "is not in foreign_options"))
    if (name %in% names(listed)) expect_match(listed[[name]]$access, foreign[i, 2], info = name)
  }
})
