# Pids of the current future plan's workers (none for sequential). future 1.31
# keeps the cluster in a registry, future >= 1.40 in the plan's backend. Call
# it only while no future is running (it asks each worker).
plan_worker_pids <- function() {
  # (shm_multisession: pageshare's pool, on every version of future)
  if (inherits(future::plan("next"), "shm_multisession")) return(as.integer(pageshare:::shm_pool$pids))
  cl <- tryCatch(if (packageVersion("future") >= "1.40.0") future::plan("backend")[["workers"]]
                 else future:::ClusterRegistry("get"), error = function(e) NULL)
  if (!inherits(cl, "cluster")) return(integer())
  as.integer(unlist(tryCatch(parallel::clusterCall(cl, Sys.getpid), error = function(e) NA)))
}
