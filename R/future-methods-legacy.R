# The methods of future < 1.40 (MultisessionFuture API): run() launches a
# future (future >= 1.40 calls launchFuture() instead, see future-methods.R).

run.ShmMultisessionFuture <- function(future, ...) {
  if (!identical(future$state, "created")) return(NextMethod())
  heal_plan_workers(future)
  cl <- future$workers
  key <- sprintf("workers-%s", attr(cl, "name", exact = TRUE))
  check_workers_have_pageshare(cl, key)
  undo <- prepare_launch(future, key, pack = TRUE, check_size = TRUE)
  on.exit(undo(), add = TRUE)
  if (isTRUE(attr(undo, "shared"))) with_handles(NextMethod()) else NextMethod()
}

# future 1.31 sends each global to the worker in a call of its own and waits
# for the reply (~0.3 ms each here; a future_lapply() chunk has 7 globals).
# shm_multisession sends them as one list, which the expression first unpacks
# into the worker's global environment, where future would have assigned them
# (as future >= 1.40 sends all globals in one message). future$globals itself
# is restored after the launch.
packed_globals_name <- "...pageshare.globals"

pack_globals <- function(globals) {
  values <- unclass(globals)
  attributes(values) <- list(names = names(globals))
  structure(list(values), names = packed_globals_name)
}

unpack_globals_expr <- function(expr) {
  bquote({
    base::list2env(base::get(.(packed_globals_name), envir = base::globalenv()),
                   envir = base::globalenv())
    base::rm(list = .(packed_globals_name), envir = base::globalenv())
    .(expr)
  })
}
