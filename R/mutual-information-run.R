# The work of mutual_information() and mutualinfo() (R/mutual-information.R):
# the columns in blocks, in this process or on the pool's workers with X
# shared, progress reported per block, and pageshare errors signalled again
# with their class.

# Columns per block: one .Call, one progress step, and (on workers) one
# element of the map, so that an interrupt is seen and the workers stay
# balanced.
mi_block <- 256L

mi_run <- function(X, cls, method, eps, na.rm, discrete, base, cores) {
  p <- ncol(X)
  blocks <- split(seq_len(p), (seq_len(p) - 1L) %/% mi_block)
  names(blocks) <- NULL
  progress <- mi_progressor(length(blocks))
  n_workers <- min(worker_count(cores), length(blocks))
  args <- list(X = X, nrow = nrow(X), codes = cls$codes, k = cls$k, method = method, eps = eps,
               na.rm = na.rm, discrete = discrete, base = base)
  res <- if (n_workers <= 1L) {
    lapply(blocks, function(cols) {
      r <- do.call(mi_worker, c(list(cols), args))
      progress()
      r
    })
  } else {
    mi_run_pool(blocks, args, n_workers, progress)
  }
  resignal_remote_errors(res)
  unlist(res, use.names = FALSE)
}

# A progressr progressor of `steps` blocks when progressr is installed (it
# reports only inside progressr::with_progress() or with global handlers),
# else a function that does nothing. Tied to the caller's frame (`envir`), so
# that its bar closes when the caller returns, after the last block (see
# map_progressor()).
mi_progressor <- function(steps) {
  if (!requireNamespace("progressr", quietly = TRUE)) return(function(...) invisible())
  progressr::progressor(steps = steps, envir = parent.frame())
}

# On pageshare's pool: a map over the blocks (X shared by the rule of every
# front door), one progress step per block as its result arrives.
mi_run_pool <- function(blocks, args, n_workers, progress) {
  slots <- pool_slots(n_workers)
  job <- pool_map(blocks, mi_worker, args, progress = function(amount) progress(amount = amount),
                  slots = slots, door = "mutual_information()")
  f <- job$failure
  if (identical(f$kind, "died")) {
    pageshare_stop("pool_worker_died", f$pid,
                   describe_items("column", unlist(blocks[seq.int(f$info$from, f$info$to)])),
                   "mutual_information()")
  }
  if (!is.null(f)) {
    cond <- f$condition
    task_failed_error(sprintf(pageshare_messages$mi_failed, describe_items("column", blocks[[f$index]]), conditionMessage(cond)),
                      cond)
  }
  job$out
}

# Runs on a worker (and in this process for cores = 1): the MIs of columns
# `cols` of X. A pageshare error comes back as a value, to be signalled again
# by the caller with its class.
mi_worker <- function(cols, X, nrow, codes, k, method, eps, na.rm, discrete, base) {
  tryCatch(.Call(ps_mutual_info, X, nrow, as.integer(cols), codes, k, method, eps, na.rm, discrete, base),
           pageshare_error = remote_error)
}
