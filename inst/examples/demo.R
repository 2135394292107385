# A 30-second tour: one copy of a 128 MB matrix, read by two workers, with
# future and with foreach. Run by tools/setup.sh.
suppressPackageStartupMessages({ library(pageshare); library(future); library(future.apply); library(foreach) })
set.seed(1)
X <- matrix(rnorm(4000 * 4000), 4000)          # 128 MB
y <- rnorm(4000)

plan(shm_multisession, workers = 2)            # instead of plan(multisession)
t <- system.time(r1 <- future_sapply(seq_len(ncol(X)), function(j) cor(X[, j], y)))[["elapsed"]]
cat(sprintf("future_sapply over %d columns: %.2f s; X crossed as a %d-byte handle\n",
            ncol(X), t, length(with_handles(serialize(share(X), NULL)))))
plan(sequential)

registerDoShm(cores = 2)                       # instead of registerDoParallel(cores = 2)
t <- system.time(r2 <- foreach(j = seq_len(ncol(X)), .combine = c) %dopar% cor(X[, j], y))[["elapsed"]]
cat(sprintf("foreach %%dopar%% over %d columns: %.2f s; same result: %s\n", ncol(X), t, isTRUE(all.equal(r1, r2))))
registerDoSEQ()
stop_workers()
cat(sprintf("segment: %s (%.0f MB), removed when X is gone\n", shared_info(share(X))$name, shared_info(share(X))$bytes / 2^20))
