# Writes inst/AUTHORS: the copyright holders and licences of the Rust crates
# that tools/vendor.sh puts into the tarball, read from each crate's own
# Cargo.toml (as cargo vendor normalises it), so that the list cannot drift
# from what is shipped.
#
#   Rscript tools/vendored-authors.R VENDOR_DIR OUTPUT
args <- commandArgs(trailingOnly = TRUE)
stopifnot(length(args) == 2L, dir.exists(args[[1L]]))

# The [package] table's string fields and its `authors` array, which cargo
# writes one string per line or on one line.
package_fields <- function(manifest) {
  lines <- readLines(manifest, warn = FALSE)
  start <- match("[package]", trimws(lines))
  if (is.na(start)) stop("no [package] table in ", manifest)
  end <- c(which(grepl("^\\[", lines) & seq_along(lines) > start), length(lines) + 1L)[[1L]]
  text <- paste(lines[seq(start + 1L, end - 1L)], collapse = "\n")
  field <- function(name) {
    m <- regmatches(text, regexec(sprintf('(?m)^%s = "([^"]*)"', name), text, perl = TRUE))[[1L]]
    if (length(m) == 2L) m[[2L]] else NA_character_
  }
  authors <- regmatches(text, regexec("(?ms)^authors = \\[(.*?)\\]", text, perl = TRUE))[[1L]]
  authors <- if (length(authors) == 2L) {
    gsub('^\\s*"|"\\s*$', "", trimws(strsplit(authors[[2L]], ",\\s*(\n|(?=\"))", perl = TRUE)[[1L]]))
  } else character()
  list(name = field("name"), version = field("version"), license = field("license"),
       authors = authors[nzchar(authors)])
}

crates <- lapply(sort(list.files(args[[1L]], full.names = TRUE)), function(dir) {
  package_fields(file.path(dir, "Cargo.toml"))
})
entry <- function(crate) {
  holders <- if (length(crate$authors)) paste(crate$authors, collapse = "; ") else
    sprintf("the %s developers", crate$name)
  sprintf("- %s %s (%s): %s", crate$name, crate$version, crate$license, holders)
}
writeLines(c(
  "pageshare's source tarball includes the following Rust crates, in",
  "src/rust/vendor.tar.xz, each under its own licence (the full texts are in",
  "each crate's folder there). Their copyright belongs to their authors:",
  "",
  vapply(crates, entry, character(1)),
  "",
  "The rest of pageshare is copyright the pageshare developers (see LICENSE)."
), args[[2L]])
