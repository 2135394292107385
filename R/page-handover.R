# The page handover (option pageshare.release_source): sharing a large
# ordinary vector gives its own pages back and maps the segment's in their
# place (src/rust/pageshare-r/src/source_pages.rs). It relies on R's and
# glibc's private memory layouts (listed in R/foreign-internals.R), so it runs
# only where a self-test at load found them as expected on probes;
# elsewhere (another malloc through LD_PRELOAD, musl, an R with another vector
# header) it is off, and attaching the package says so once.

handover_state <- new.env(parent = emptyenv())
handover_state$off <- "the self-test has not run"

# Called from .onLoad: run the self-test once (R's header on two small
# vectors, then the handover on a 40 MiB malloc() block of which two pages are
# touched, freed at once: ~1 ms); never fails the load.
check_page_handover <- function() {
  handover_state$off <- tryCatch(.Call(ps_handover_self_test),
                                 error = function(e) conditionMessage(e))
  invisible(is.null(handover_state$off))
}

# Is the page handover on in this process? TRUE, or FALSE with attribute
# `reason` (why it is off). Where it is off, a shared vector and its segment
# hold the data twice; everything else works as usual.
page_handover_enabled <- function() {
  off <- handover_state$off
  if (is.null(off)) return(TRUE)
  structure(FALSE, reason = off)
}

# Called from .onAttach: one message when the self-test switched the handover
# off (class pageshare_handover_off, a packageStartupMessage).
announce_page_handover <- function() {
  off <- handover_state$off
  if (is.null(off)) return(invisible())
  msg <- sprintf(paste0("pageshare: page handover off (%s); shared vectors keep their own copy ",
                        "of the data (see pageshare.release_source in ?pageshare_options)"), off)
  cond <- structure(class = c("pageshare_handover_off", "packageStartupMessage", "simpleMessage",
                              "message", "condition"),
                    list(message = paste0(msg, "\n"), call = NULL))
  message(cond)
}
