# Checks that the .Call table cannot drift from what it registers and from
# what calls it. A wrong argument count in the table (or in a C prototype of a
# Rust function) makes R or C pass arguments that the function does not read,
# or read arguments nobody passed: memory corrupted, silently. So, from the
# sources:
#
# - src/entry_points.c: the X-macro lists RUST_ENTRY_POINTS and
#   C_ENTRY_POINTS, `X(name, count)`;
# - every Rust `extern "C" fn ps_<name>_rs(...)` under src/rust/pageshare-r/src
#   (its SEXP parameters counted);
# - every C definition of an entry point of C_ENTRY_POINTS in src/*.c, and
#   every C prototype of a Rust `ps_<name>_rs` function there (pool code calls
#   some Rust functions directly);
# - every `.Call(ps_<name>, ...)` or `.Call(pageshare:::ps_<name>, ...)` in
#   R/ and tests/testthat/ (parsed by R's parser, so a call over several
#   lines counts as one);
#
# it reports a name registered twice, a registered name with no function, a
# function registered nowhere, a registration no R code calls, a .Call of a
# name that is not registered, and every count that differs.
#
#   Rscript tools/check-entry-points.R [source root]   # exit status 1 on a problem
#
# tools/test.sh runs it first; tests/testthat/test-entry-points.R runs it on
# the tree and on altered copies of it.

# The problems found in the package source at `root`, as messages (none: no problem).
entry_point_problems <- function(root) {
  read <- function(path) paste(readLines(path, warn = FALSE), collapse = "\n")
  problems <- character(0)
  say <- function(...) problems <<- c(problems, sprintf(...))
  strip_c_comments <- function(s) gsub("/\\*.*?\\*/", " ", s, perl = TRUE)
  strip_rust_comments <- function(s) gsub("//[^\n]*", " ", s, perl = TRUE)

  # The X-macro lists: name -> count, in the order written.
  table_c <- strip_c_comments(read(file.path(root, "src", "entry_points.c")))
  x_list <- function(macro) {
    m <- regmatches(table_c, regexpr(sprintf("#define %s\\(X\\)(\\\\\n|[^\n])*", macro), table_c, perl = TRUE))
    if (length(m) == 0) {
      say("src/entry_points.c: no #define %s(X) list", macro)
      return(integer(0))
    }
    items <- regmatches(m, gregexpr("X\\(\\s*([A-Za-z0-9_]+)\\s*,\\s*([0-9]+)\\s*\\)", m, perl = TRUE))[[1]]
    names <- sub("X\\(\\s*([A-Za-z0-9_]+).*", "\\1", items)
    counts <- as.integer(sub(".*,\\s*([0-9]+)\\s*\\)$", "\\1", items))
    for (d in unique(names[duplicated(names)])) say("src/entry_points.c: %s is listed twice in %s", d, macro)
    setNames(counts, names)
  }
  rust_listed <- x_list("RUST_ENTRY_POINTS")
  c_listed <- x_list("C_ENTRY_POINTS")
  for (d in intersect(names(rust_listed), names(c_listed))) {
    say("src/entry_points.c: %s is in both RUST_ENTRY_POINTS and C_ENTRY_POINTS", d)
  }
  registered <- c(rust_listed, c_listed[setdiff(names(c_listed), names(rust_listed))])

  # Parameters of a C or Rust parameter list: how many, and whether all are SEXP.
  params <- function(text, lang) {
    text <- trimws(text)
    if (text == "" || text == "void") return(list(n = 0L, all_sexp = TRUE))
    parts <- trimws(strsplit(text, ",", fixed = TRUE)[[1]])
    parts <- parts[nzchar(parts)]
    sexp <- if (lang == "rust") grepl(":\\s*SEXP$", parts) else grepl("^SEXP\\s+[A-Za-z_][A-Za-z0-9_]*$|^SEXP$", parts)
    list(n = length(parts), all_sexp = all(sexp))
  }

  # Rust: extern "C" fn ps_<name>_rs(...).
  rust_dir <- file.path(root, "src", "rust", "pageshare-r", "src")
  rust_fns <- list()
  for (f in list.files(rust_dir, pattern = "\\.rs$", recursive = TRUE, full.names = TRUE)) {
    s <- strip_rust_comments(read(f))
    re <- 'extern\\s+"C"\\s+fn\\s+(ps_[A-Za-z0-9_]+)_rs\\s*\\(([^)]*)\\)'
    for (m in regmatches(s, gregexpr(re, s, perl = TRUE))[[1]]) {
      name <- sub(re, "\\1", m, perl = TRUE)
      p <- params(sub(re, "\\2", m, perl = TRUE), "rust")
      where <- sub(paste0(root, "/"), "", f, fixed = TRUE)
      if (!p$all_sexp) say("%s: %s_rs takes a parameter that is not a SEXP", where, name)
      if (!is.null(rust_fns[[name]])) say("%s: %s_rs is defined twice", where, name)
      rust_fns[[name]] <- list(n = p$n, where = where)
    }
  }

  # C: definitions of C entry points, and prototypes of Rust functions.
  c_defs <- list()
  c_protos <- list()
  for (f in list.files(file.path(root, "src"), pattern = "\\.c$", full.names = TRUE)) {
    if (basename(f) == "entry_points.c") next
    s <- strip_c_comments(read(f))
    where <- paste0("src/", basename(f))
    re_def <- "(^|\n)(static\\s+)?SEXP\\s+(ps_[A-Za-z0-9_]+)\\s*\\(([^)]*)\\)\\s*\\{"
    for (m in regmatches(s, gregexpr(re_def, s, perl = TRUE))[[1]]) {
      name <- sub(re_def, "\\3", m, perl = TRUE)
      if (grepl("_rs$", name)) next
      c_defs[[name]] <- c(c_defs[[name]], list(list(n = params(sub(re_def, "\\4", m, perl = TRUE), "c")$n,
                                                     static = grepl("static", m), where = where)))
    }
    re_proto <- "SEXP\\s+(ps_[A-Za-z0-9_]+)_rs\\s*\\(([^)]*)\\)\\s*;"
    for (m in regmatches(s, gregexpr(re_proto, s, perl = TRUE))[[1]]) {
      name <- sub(re_proto, "\\1", m, perl = TRUE)
      c_protos[[name]] <- c(c_protos[[name]], list(list(n = params(sub(re_proto, "\\2", m, perl = TRUE), "c")$n,
                                                         where = where)))
    }
  }

  # The Rust entry points against the table and the C prototypes.
  for (name in names(rust_listed)) {
    fn <- rust_fns[[name]]
    if (is.null(fn)) {
      say("src/entry_points.c: %s is registered as a Rust entry point, but no Rust function %s_rs exists", name, name)
    } else if (fn$n != rust_listed[[name]]) {
      say("src/entry_points.c: %s is registered with %d arguments, but %s_rs (%s) takes %d",
          name, rust_listed[[name]], name, fn$where, fn$n)
    }
  }
  for (name in names(c_protos)) {
    fn <- rust_fns[[name]]
    for (p in c_protos[[name]]) {
      if (is.null(fn)) {
        say("%s: declares %s_rs, which no Rust function defines", p$where, name)
      } else if (p$n != fn$n) {
        say("%s: declares %s_rs with %d arguments, but the Rust function (%s) takes %d", p$where, name, p$n, fn$where, fn$n)
      }
    }
  }
  for (name in setdiff(names(rust_fns), c(names(rust_listed), names(c_protos)))) {
    say("%s: %s_rs is neither registered in src/entry_points.c nor called from C", rust_fns[[name]]$where, name)
  }

  # The C entry points against the table.
  for (name in names(c_listed)) {
    defs <- Filter(function(d) !d$static, c_defs[[name]])
    if (length(defs) == 0) {
      say("src/entry_points.c: %s is registered as a C entry point, but no C file defines it", name)
    } else if (length(defs) > 1) {
      say("src/entry_points.c: %s is defined in more than one C file", name)
    } else if (defs[[1]]$n != c_listed[[name]]) {
      say("src/entry_points.c: %s is registered with %d arguments, but %s defines it with %d",
          name, c_listed[[name]], defs[[1]]$where, defs[[1]]$n)
    }
  }
  # A C function shaped like an entry point, that is not registered and that
  # no C code calls either.
  c_text <- paste(vapply(list.files(file.path(root, "src"), pattern = "\\.[ch]$", full.names = TRUE),
                         function(f) strip_c_comments(read(f)), ""), collapse = "\n")
  for (name in setdiff(names(c_defs), names(registered))) {
    for (d in Filter(function(d) !d$static, c_defs[[name]])) {
      uses <- lengths(regmatches(c_text, gregexpr(paste0("\\b", name, "\\s*\\("), c_text, perl = TRUE)))
      if (uses <= 1) say("%s: %s looks like an entry point but is not registered in src/entry_points.c", d$where, name)
    }
  }

  # The .Call sites of R code: each `.Call(` the parser finds, read back as
  # one call (over as many lines as it takes).
  site_of <- function(e, file, line) {
    target <- e[[2]]
    name <- if (is.name(target)) {
      as.character(target)
    } else if (is.call(target) && identical(target[[1]], as.name(":::")) &&
               identical(as.character(target[[2]]), "pageshare")) {
      as.character(target[[3]])
    } else {
      NA_character_
    }
    if (is.na(name) || !startsWith(name, "ps_")) return(NULL)
    args <- as.list(e)[-(1:2)]
    dots <- any(vapply(args, function(a) identical(a, as.name("...")), TRUE))
    n <- length(args) - sum(names(args) %in% "PACKAGE")
    list(name = name, n = n, dots = dots, file = file, line = line)
  }
  sites <- list()
  r_files <- c(list.files(file.path(root, "R"), pattern = "\\.R$", full.names = TRUE),
               list.files(file.path(root, "tests", "testthat"), pattern = "\\.R$", full.names = TRUE))
  for (f in r_files) {
    data <- utils::getParseData(parse(f, keep.source = TRUE))
    where <- sub(paste0(root, "/"), "", f, fixed = TRUE)
    for (sym in data$parent[data$token == "SYMBOL_FUNCTION_CALL" & data$text == ".Call"]) {
      call_id <- data$parent[data$id == sym]
      e <- parse(text = utils::getParseText(data, call_id), keep.source = FALSE)[[1]]
      if (length(e) >= 2) sites[[length(sites) + 1]] <- site_of(e, where, data$line1[data$id == call_id])
    }
  }
  for (s in sites) {
    at <- sprintf("%s:%s", s$file, s$line)
    if (!s$name %in% names(registered)) {
      say("%s: .Call(%s) names no registered entry point", at, s$name)
    } else if (s$dots) {
      say("%s: .Call(%s, ...) passes `...`, whose count cannot be checked", at, s$name)
    } else if (s$n != registered[[s$name]]) {
      say("%s: .Call(%s) passes %d arguments, but %s is registered with %d", at, s$name, s$n, s$name,
          registered[[s$name]])
    }
  }
  called <- unique(vapply(sites, function(s) s$name, ""))
  for (name in setdiff(names(registered), called)) {
    say("src/entry_points.c: %s is registered, but no .Call in R/ or tests/testthat/ calls it", name)
  }
  problems
}

if (sys.nframe() == 0L) {
  args <- commandArgs(trailingOnly = TRUE)
  root <- if (length(args) >= 1) args[1] else "."
  found <- entry_point_problems(normalizePath(root))
  if (length(found)) {
    cat("The .Call table does not match its functions or its callers:\n", paste0("  ", found, "\n"), sep = "")
    quit(status = 1)
  }
  cat("The .Call table matches its functions and its callers.\n")
}
