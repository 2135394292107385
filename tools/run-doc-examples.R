#!/usr/bin/env Rscript
# Runs the code a user copies from the documentation, as written, against the
# installed package: every R block of README.md and every chunk of the
# Getting-started vignette, each document in a fresh R process, blocks in
# order (a later block may use what an earlier one made). Fails if a block
# fails, or if a process of pageshare's (a worker) outlives its document.
# README's shell blocks are its installation commands, which CI runs in every
# stage (tools/setup.sh, tools/test.sh); here they are checked to exist.
#
#   Rscript tools/run-doc-examples.R        (from the repository's root)
#
# Prints one line per document and "docs: N blocks ran, N failed".

blocks_of_markdown <- function(path) {
  lines <- readLines(path, warn = FALSE)
  fences <- grep("^```", lines)
  out <- list()
  for (k in seq(1, length(fences) - 1L, by = 2)) {
    lang <- sub("^```\\s*\\{?\\s*([A-Za-z]*).*$", "\\1", lines[fences[k]])
    body <- lines[seq_len(fences[k + 1L] - fences[k] - 1L) + fences[k]]
    opts <- sub("^```\\s*\\{?\\s*[A-Za-z]*\\s*,?\\s*(.*?)\\}?\\s*$", "\\1", lines[fences[k]])
    out[[length(out) + 1L]] <- list(lang = tolower(lang), body = body, line = fences[k], opts = opts)
  }
  out
}

# A chunk knitr would not evaluate (eval = FALSE) is shown, not run.
evaluated <- function(b) !grepl("eval\\s*=\\s*FALSE", b$opts)

check_shell_block <- function(b, path) {
  scripts <- regmatches(b$body, regexpr("tools/[A-Za-z0-9_.-]+", b$body))
  missing <- scripts[!file.exists(scripts)]
  if (length(missing)) sprintf("%s:%d names %s, which does not exist", path, b$line, paste(missing, collapse = ", "))
}

# Runs the R blocks of one document in one fresh Rscript; each block is
# echoed with its line number so that a failure says where.
run_document <- function(path, blocks) {
  script <- tempfile("doc-", fileext = ".R")
  on.exit(unlink(script), add = TRUE)
  code <- c("options(warn = 1)",
            unlist(lapply(blocks, function(b) c(sprintf("cat('-- %s:%d\\n')", basename(path), b$line), b$body))))
  writeLines(code, script)
  # Every process the document starts inherits this mark; none may outlive it.
  mark <- sprintf("PAGESHARE_DOC_RUN=%d-%s", Sys.getpid(), basename(script))
  out <- system2("env", c(mark, file.path(R.home("bin"), "Rscript"), "--no-echo", "--no-restore", script),
                 stdout = TRUE, stderr = TRUE)
  status <- attr(out, "status") %||% 0L
  left <- processes_marked(mark)
  for (wait in 1:30) if (length(left)) { Sys.sleep(0.1); left <- processes_marked(mark) }
  if (length(left)) out <- c(out, sprintf("processes left running by the document: %s", paste(left, collapse = " ")))
  list(ok = status == 0L && !length(left), output = out)
}

processes_marked <- function(mark) {
  pids <- basename(Sys.glob("/proc/[0-9]*"))
  Filter(function(pid) {
    env <- tryCatch(suppressWarnings(readBin(file.path("/proc", pid, "environ"), "raw", 1e6)), error = function(e) raw())
    env[env == as.raw(0)] <- as.raw(10)
    length(env) > 0 && mark %in% strsplit(rawToChar(env), "\n", fixed = TRUE)[[1]]
  }, pids)
}

`%||%` <- function(a, b) if (is.null(a)) b else a

docs <- list(README = "README.md", `Getting started` = file.path("vignettes", "getting-started.Rmd"))
ran <- 0L
failed <- 0L
problems <- character()
for (name in names(docs)) {
  path <- docs[[name]]
  blocks <- blocks_of_markdown(path)
  r_blocks <- Filter(function(b) b$lang == "r" && evaluated(b), blocks)
  for (b in Filter(function(b) b$lang %in% c("sh", "bash"), blocks)) problems <- c(problems, check_shell_block(b, path))
  t0 <- proc.time()[["elapsed"]]
  res <- run_document(path, r_blocks)
  ran <- ran + length(r_blocks)
  cat(sprintf("%s: %d R blocks, %s in %.1f s\n", name, length(r_blocks), if (res$ok) "ok" else "FAILED",
              proc.time()[["elapsed"]] - t0))
  if (!res$ok) {
    failed <- failed + 1L
    cat(tail(res$output, 30), sep = "\n")
  }
}
if (length(problems)) cat(problems, sep = "\n")
cat(sprintf("docs: %d blocks ran, %d documents failed, %d shell commands missing\n", ran, failed, length(problems)))
quit(status = if (failed || length(problems)) 1L else 0L)
