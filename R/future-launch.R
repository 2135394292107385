# Launching a future of plan(shm_multisession): its large globals swapped
# for views while it is sent to its worker (prepare_pool_launch() in
# future-pool.R, for both future APIs), put back once it has been sent.


# The globals of a future with what the sharing rule shares swapped for views
# (R/sharing-rule.R). Returns NULL when nothing is shared; otherwise the new
# globals with attributes "pageshare_views" (keep them alive until the result
# is in), "pageshare_restore" (bindings swapped in closure frames; put them
# back with restore_shared() once the future has been sent) and
# "pageshare_changed" (the names of the globals replaced). What cannot be
# shared is sent plainly, with the fallback warning once per set of workers
# (`plan_key`), and none without a key.
share_globals <- function(globals, plan_key = NULL) {
  # (a future without globals, such as the one future's plan() resolves to
  # set a backend up, has nothing to report)
  if (length(globals) == 0L) return(NULL)
  state <- share_state("a future")
  g <- globals
  changed <- character()
  for (i in seq_along(globals)) {
    el <- .subset2(globals, i)
    before <- length(state$views)
    swapped <- length(state$restore)
    new <- share_walk(el, state, name = names(globals)[i])
    if (length(state$views) > before && typeof(el) != "closure") {
      g[[names(globals)[i]]] <- new
    }
    # (a closure is changed when values in its frames were swapped)
    if (length(state$views) > before || length(state$restore) > swapped) {
      changed <- c(changed, names(globals)[i])
    }
  }
  if (fall_back(state, plan_key, warn = !is.null(plan_key)) || length(state$views) == 0L) {
    restore_shared(state)
    return(NULL)
  }
  attr(g, "pageshare_views") <- state$views
  attr(g, "pageshare_restore") <- state$restore
  attr(g, "pageshare_changed") <- changed
  g
}
