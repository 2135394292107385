# Pre-fault memory before a benchmark.
#
# On a virtual machine the host may back guest memory lazily: the first time a
# guest page is ever used costs a host-side fault (measured here: writing 512 MB
# into never-used memory took 0.9 s, into recycled memory 0.19 s). Which
# contender meets fresh pages then depends on the order of the runs, not on
# the contender. Touching (and freeing) a few GB once at the start puts every
# contender on recycled pages.
#   source("inst/benchmarks/warm-memory.R"); warm_memory(4096)
warm_memory <- function(mb = 4096) {
  avail <- tryCatch({
    m <- readLines("/proc/meminfo")
    as.numeric(sub("\\D*(\\d+).*", "\\1", grep("^MemAvailable:", m, value = TRUE))) / 1024
  }, error = function(e) mb * 2)
  mb <- min(mb, avail / 2)
  t <- system.time({
    v <- numeric(mb * 2^20 / 8)   # zero-filled: every page written once
    rm(v)
    invisible(gc())
  })[["elapsed"]]
  message(sprintf("warmed %.0f MB of memory in %.1f s", mb, t))
  invisible(t)
}
