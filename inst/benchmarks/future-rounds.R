# The plans the future benchmarks compare, timed in interleaved rounds: each
# round sets each plan up (2 workers), warms it, times it with
# `time_plan(n)` and goes back to plan(sequential), so that every plan is
# measured at every time of the run. Returns, per plan, the figures of all
# rounds as rows (a vector of figures is a column). `each_round(times)`, when
# given, runs after each round and returns `times` with its own figures added.
#   source(file.path("inst", "benchmarks", "future-rounds.R"))
future_bench_plans <- list(sequential = function() future::plan(future::sequential),
                           multisession = function() future::plan(future::multisession, workers = 2),
                           shm_multisession = function() future::plan(pageshare::shm_multisession, workers = 2))

interleave_future_plans <- function(rounds, calls, time_plan, warm = 5L, each_round = NULL) {
  times <- list()
  for (r in seq_len(rounds)) {
    for (name in names(future_bench_plans)) {
      future_bench_plans[[name]]()
      invisible(time_plan(warm))                       # workers up, code compiled
      times[[name]] <- rbind(times[[name]], as.matrix(time_plan(calls)))
      future::plan(future::sequential)
    }
    if (!is.null(each_round)) times <- each_round(times)
  }
  times
}
