# A 30-second tour: one copy of a matrix, read by two workers.
library(pageshare)
X <- matrix(rnorm(2000 * 2000), 2000)          # 32 MB
Xs <- share(X)                                 # copied into shared memory once
cat(sprintf("shared %s: %.0f MB in %s\n", shared_info(Xs)$name, shared_info(Xs)$bytes / 2^20, shared_info(Xs)$dir))
cat(sprintf("serialized as data: %.1f MB, as a handle: %d bytes\n",
            length(serialize(Xs, NULL)) / 2^20, length(with_handles(serialize(Xs, NULL)))))
cl <- parallel::makePSOCKcluster(2)
parallel::clusterEvalQ(cl, library(pageshare))
sums <- with_handles(parallel::clusterCall(cl, function(X) c(shared = is_shared(X), sum = sum(X)), Xs))
parallel::stopCluster(cl)
cat(sprintf("worker %d: view = %s, sum matches = %s\n", 1:2,
            vapply(sums, function(s) as.logical(s[["shared"]]), TRUE),
            vapply(sums, function(s) isTRUE(all.equal(s[["sum"]], sum(X))), TRUE)), sep = "")
