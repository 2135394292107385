# The help pages as a user reads them: every page in man/ rendered to text
# (tools::Rd2txt, as ?topic prints it), then checked for markup that did not
# render: a backtick used as markup, a roxygen link `[fun()]` or `[topic]`
# left as text, and text that must be there (`%` is a comment in Rd: an
# unescaped one eats the rest of its line). Exits 1 naming every problem.
#
#   Rscript tools/check-help.R [man directory, default man]

args <- commandArgs(trailingOnly = TRUE)
man <- if (length(args)) args[[1L]] else "man"
pages <- sort(list.files(man, pattern = "\\.Rd$", full.names = TRUE))
if (!length(pages)) stop("no help pages in ", man)

render <- function(page) {
  out <- character()
  con <- textConnection("out", "w", local = TRUE)
  on.exit(close(con))
  tools::Rd2txt(tools::parse_Rd(page), out = con, options = list(underline_titles = FALSE))
  out
}

# Text that must appear in a page's rendering (what an unescaped `%` ate before).
must_show <- list(
  registerDoShm.Rd = c("%dopar%", "%:%"),
  mutual_information.Rd = c("within", "true")
)

problems <- character()
for (page in pages) {
  text <- render(page)
  name <- basename(page)
  flag <- function(what, lines) {
    if (length(lines)) {
      problems <<- c(problems, sprintf("%s: %s: %s", name, what, trimws(lines[seq_len(min(3L, length(lines)))])))
    }
  }
  # (Rd2txt renders \code{} with quotes, never with backticks)
  flag("backtick markup", grep("`", text, value = TRUE, fixed = TRUE))
  # (not indexing: `x[i]`, `X[[i]]` follow a name or a bracket)
  flag("link left as text", grep("(^|[^][A-Za-z0-9._])\\[[.A-Za-z_][.A-Za-z0-9_:]*(\\(\\))?\\]", text, value = TRUE))
  for (needle in must_show[[name]]) {
    if (!any(grepl(needle, text, fixed = TRUE))) problems <- c(problems, sprintf("%s: does not show '%s'", name, needle))
  }
}
if (length(problems)) {
  cat(problems, sep = "\n")
  cat(sprintf("rendered help: %d problems in %d pages\n", length(problems), length(pages)))
  quit(status = 1)
}
cat(sprintf("rendered help: %d pages, no markup left as text\n", length(pages)))
