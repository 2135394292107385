# All user-facing error messages in one place. Each names the argument in
# backticks and says what is expected. Raised through pageshare_stop() so that
# every error carries the class "pageshare_error".

pageshare_messages <- list(
  share_type = "cannot share %s: %s. pageshare shares logical, integer, double, complex, raw and character vectors (with any attributes), and lists of them",
  not_string = "`%s` must be a single non-empty string",
  not_character = "`%s` must be a character vector of variable names",
  not_named_list = "`variableList` must be a named list of vectors, e.g. list(X = X)",
  unknown_variable = "%s not registered in namespace '%s'; it holds: %s",
  not_viewed = "no view of %s is held in namespace '%s'; views held: %s",
  dir_option = "option `pageshare.dir` must be an existing directory, not '%s'",
  threshold_option = "option `pageshare.threshold` must be a single non-negative number of bytes"
)

pageshare_stop <- function(key, ..., call = NULL) {
  msg <- do.call(sprintf, c(list(pageshare_messages[[key]]), list(...)))
  stop(structure(class = c("pageshare_error", "error", "condition"),
                 list(message = msg, call = call)))
}

or_none <- function(x) if (length(x)) paste0("'", x, "'", collapse = ", ") else "nothing"
