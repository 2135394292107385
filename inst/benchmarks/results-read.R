# Reads the results files that the scripts of inst/benchmarks write
# (inst/benchmarks/results/*.md), for the Benchmarks vignette and README's
# plot (plot-readme.R). Base R only.
#
#   results_file("future.md")      the path, in the source tree or installed
#   results_table(path, header)    the markdown table whose header row starts
#                                  with `header`, as a data frame; attribute
#                                  "run" is the file's line saying when and where
#   results_lines(path, heading)   the "label  number unit  xratio" lines below
#                                  `heading` in a text block (bench-pool.R)

results_file <- function(name) {
  installed <- system.file("benchmarks", "results", name, package = "pageshare")
  # (the source tree's first: a vignette built from the sources shows their results)
  candidates <- c(file.path("inst", "benchmarks", "results", name),
                  file.path("..", "inst", "benchmarks", "results", name), installed)
  found <- candidates[nzchar(candidates) & file.exists(candidates)]
  if (!length(found)) stop("results file ", name, " not found (run inst/benchmarks first)")
  found[[1]]
}

# The line that says when and on what the file's numbers were measured.
results_run <- function(lines) {
  run <- grep("^(Run|Generated|R [0-9])", lines, value = TRUE)
  if (length(run)) sub("^Run:? *", "", run[[1]]) else NA_character_
}

results_table <- function(path, header) {
  lines <- readLines(path, warn = FALSE)
  start <- which(startsWith(lines, paste("|", header)))
  if (!length(start)) stop("no table starting with '", header, "' in ", path)
  end <- start[[1]]
  while (end < length(lines) && startsWith(lines[end + 1L], "|")) end <- end + 1L
  cells <- lapply(lines[start[[1]]:end], function(l) trimws(strsplit(sub("^\\|(.*)\\|\\s*$", "\\1", l), "|", fixed = TRUE)[[1]]))
  body <- cells[-(1:2)]   # (the header and the alignment row)
  df <- as.data.frame(do.call(rbind, body), stringsAsFactors = FALSE)
  names(df) <- cells[[1]]
  for (j in seq_along(df)) {
    num <- suppressWarnings(as.numeric(df[[j]]))
    if (!anyNA(num[nzchar(df[[j]])])) df[[j]] <- num
  }
  attr(df, "run") <- results_run(lines)
  df
}

# Lines "  label   12.345 us  x1.00" below a heading line, up to the next
# blank line: a data frame of label, value, unit.
results_lines <- function(path, heading) {
  lines <- readLines(path, warn = FALSE)
  at <- which(startsWith(lines, heading))
  if (!length(at)) stop("no heading '", heading, "' in ", path)
  out <- list()
  for (l in lines[-seq_len(at[[1]])]) {
    if (!nzchar(trimws(l))) break
    m <- regmatches(l, regexec("^\\s+(.*\\S)\\s+([0-9.]+) (us|ms|s)\\s+x[0-9.]+\\s*$", l))[[1]]
    if (length(m)) out[[length(out) + 1L]] <- data.frame(label = m[2], value = as.numeric(m[3]), unit = m[4])
  }
  df <- do.call(rbind, out)
  attr(df, "run") <- results_run(lines)
  df
}
