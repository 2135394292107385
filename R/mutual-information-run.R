# The work of mutual_information() and mutualinfo() (R/mutual-information.R):
# the columns in blocks in this process, or in chunks on the pool's workers
# with X shared, and pageshare errors signalled again with their class.

# Columns per .Call in this process (so that an interrupt is seen between blocks).
mi_block <- 256L

mi_run <- function(X, cls, method, eps, na.rm, discrete, base, cores) {
  p <- ncol(X)
  n_workers <- min(worker_count(cores), p)
  if (n_workers <= 1L) {
    blocks <- split(seq_len(p), (seq_len(p) - 1L) %/% mi_block)
    res <- lapply(blocks, function(cols) mi_worker(cols, X, nrow(X), cls$codes, cls$k, method, eps, na.rm,
                                                   discrete, base))
  } else {
    cl <- pool_workers(n_workers)
    state <- share_state()
    X <- share_walk(X, state)   # the rule of every front door
    fell_back <- fall_back(state)
    chunks <- split_range(p, n_workers)
    res <- with_pool_health(
      with_handles_if(is_shared(X) && !fell_back, parallel::clusterApply(cl, chunks, worker_stub("mi_worker"), X = X,
        nrow = nrow(X), codes = cls$codes, k = cls$k, method = method, eps = eps, na.rm = na.rm,
        discrete = discrete, base = base)),
      cl, TRUE, function(i) sprintf("columns %s of mutual_information()", describe_range(chunks[[i]])))
  }
  for (r in res) if (inherits(r, "pageshare_mi_error")) resignal(r)
  unlist(res, use.names = FALSE)
}

# Runs on a worker (and in this process for cores = 1): the MIs of columns
# `cols` of X. A pageshare error comes back as a value, to be signalled again
# by the caller with its class.
mi_worker <- function(cols, X, nrow, codes, k, method, eps, na.rm, discrete, base) {
  tryCatch(.Call(ps_mutual_info, X, nrow, as.integer(cols), codes, k, method, eps, na.rm, discrete, base),
           pageshare_error = function(e) structure(list(message = conditionMessage(e), class = class(e)),
                                                   class = "pageshare_mi_error"))
}

resignal <- function(r) {
  stop(structure(class = r$class, list(message = r$message, call = NULL)))
}
