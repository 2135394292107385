test_that("every supported type round-trips with its attributes", {
  objs <- list(
    dbl = c(a = 1.5, b = NA, c = -Inf, d = NaN),
    int = c(1L, NA, .Machine$integer.max),
    lgl = c(TRUE, NA, FALSE),
    raw = as.raw(c(0, 1, 255)),
    cplx = complex(real = c(1, NA), imaginary = c(-1, 2)),
    mat = matrix(as.double(1:6), 2, dimnames = list(c("r1", "r2"), c("x", "y", "z"))),
    imat = matrix(1:6, 3),
    fac = factor(c("lo", "hi", "lo"), levels = c("lo", "hi")),
    date = as.Date("2024-01-01") + 0:3,
    posix = as.POSIXct("2024-01-01 12:00:00", tz = "UTC") + 1:3,
    diff = as.difftime(c(1, 2), units = "hours"),
    arr = array(as.double(1:24), c(2, 3, 4)),
    empty_dbl = double(), empty_int = integer(), empty_lgl = logical(), empty_raw = raw(),
    cls = structure(1:3, class = "myclass", extra = list(1, "a"))
  )
  for (nm in names(objs)) {
    v <- share(objs[[nm]])
    expect_true(is_shared(v), info = nm)
    expect_identical(v, objs[[nm]], info = nm)
    expect_identical(unserialize(with_handles(serialize(v, NULL))), objs[[nm]], info = nm)
    expect_identical(unserialize(serialize(v, NULL)), objs[[nm]], info = nm)
  }
})

test_that("shared_info describes a view and NULL otherwise", {
  v <- share(as.double(1:1000))
  info <- shared_info(v)
  expect_identical(info$owner_pid, Sys.getpid())
  expect_equal(info$bytes, 8000)
  expect_true(info$owned_here)
  expect_match(info$name, sprintf("^pageshare\\.a\\.%d\\.[0-9a-f]{32}$", Sys.getpid()))
  expect_true(info$name %in% shared_segments()$name)
  # an anonymous memory file of this process, above the socket range, sealed
  expect_gte(info$fd, 1024L)
  expect_identical(Sys.readlink(sprintf("/proc/self/fd/%d", info$fd)), paste(info$memfd, "(deleted)"))
  expect_null(shared_info(1:3))
  expect_false(is_shared(1:3))
})

test_that("sharing the same object twice maps to the same segment", {
  x <- rnorm(1e4)
  v1 <- share(x)
  v2 <- share(x)
  expect_identical(shared_info(v1)$name, shared_info(v2)$name)
  expect_identical(share(v1), v1)   # a view shares as itself
  y <- x
  y[1] <- 0                       # the source is not written in place
  expect_identical(v1[1], x[1])
  expect_false(identical(shared_info(share(y))$name, shared_info(v1)$name))
})

test_that("an object shared again after forget_shared() is shared once again (regression)", {
  # forget_shared() drops the cache entries but not the tokens left in the
  # sources' headers; a source carrying an old token used to be refused by the
  # cache, so every later share() of it made a new copy (one per future).
  x <- rnorm(1e4)
  first <- shared_info(share(x))$name
  forget_shared()
  before <- own_segments()
  v1 <- share(x)
  v2 <- share(x)
  expect_identical(shared_info(v1)$name, shared_info(v2)$name)
  expect_false(identical(shared_info(v1)$name, first))
  expect_length(setdiff(own_segments(), before), 1L)
})

test_that("a view serializes as a small handle only inside with_handles", {
  v <- share(as.double(seq_len(1e6)))
  expect_gt(length(serialize(v, NULL)), 8e6)
  h <- with_handles(serialize(v, NULL))
  expect_lt(length(h), 500)
  expect_true(is_shared(unserialize(h)))
  expect_false(is_shared(unserialize(serialize(v, NULL))))
  # the scope closes even on error
  expect_error(with_handles(stop("boom")), "boom")
  expect_gt(length(serialize(v, NULL)), 8e6)
})

test_that("saveRDS of a view stores the data, readable after the segment is gone", {
  f <- tempfile(fileext = ".rds")
  on.exit(unlink(f))
  name <- callr::r(function(f) {
    library(pageshare)
    v <- share(matrix(as.double(1:20), 4))
    saveRDS(v, f)
    shared_info(v)$name
  }, args = list(f = f))
  expect_false(name %in% shared_segments(all = TRUE)$name)
  expect_identical(readRDS(f), matrix(as.double(1:20), 4))
})

test_that("a write gives the writer a private copy and leaves the segment as it was", {
  x <- as.double(1:100)
  v <- share(x)
  w <- v
  w[5] <- -1
  expect_identical(w[5], -1)
  expect_identical(v[5], 5)
  f <- function(z) { z[1] <- 99; z }
  expect_identical(f(v)[1], 99)
  expect_identical(v, x)
  names(w) <- paste0("n", 1:100)
  expect_null(names(v))
  # a fresh process that maps the segment sees the original bytes
  h <- with_handles(serialize(v, NULL))
  expect_identical(callr::r(function(h) { library(pageshare); unserialize(h) }, args = list(h = h)), x)
})

test_that("element reads through ALTREP Elt (X[, j]) see the right view as views come and go", {
  # Elt keeps the last view it read; a new view may take a collected one's address.
  mats <- lapply(1:3, function(k) matrix(as.double(seq_len(4096 * 4)) * k, 4096))
  views <- lapply(mats, share)
  for (j in 1:4) for (k in 1:3) expect_identical(views[[k]][, j], mats[[k]][, j])
  for (r in 1:30) {
    m <- matrix(runif(4096 * 2) + r, 4096)
    v <- share(m)
    expect_identical(v[, 2], m[, 2])
    expect_identical(v[7, ], m[7, ])
    rm(v)
    invisible(gc())
  }
  rm(views); invisible(gc())
})

test_that("Length and Dataptr (range, t, split) answer for the right view as views come and go", {
  # Like Elt, they keep the last view asked about instead of calling into R.
  mats <- lapply(1:3, function(k) matrix(as.double(seq_len(4096 * 4)) * k, 4096))
  views <- lapply(mats, share)
  for (k in c(1:3, 3:1)) {
    expect_identical(range(views[[k]]), range(mats[[k]]))
    expect_identical(t(views[[k]]), t(mats[[k]]))
    expect_identical(length(views[[k]]), length(mats[[k]]))
  }
  expect_identical(views[[1]] + views[[2]], mats[[1]] + mats[[2]])
  f <- rep(1:7, length.out = 4096 * 4)
  expect_identical(split(views[[2]], f), split(mats[[2]], f))
  for (r in 1:30) {
    m <- matrix(runif(4096 * 2) + r, 4096)
    v <- share(m)
    expect_identical(range(v), range(m))
    expect_identical(t(v), t(m))
    rm(v)
    invisible(gc())
  }
  rm(views); invisible(gc())
})

test_that("a write after read-only Dataptr calls lands in the writer's copy only", {
  skip_if_not_installed("data.table")
  x <- as.double(1:5000)
  l <- list(a = share(x))
  expect_identical(range(l$a), c(1, 5000))          # read-only and writeable pointers handed out
  data.table::setDT(l)
  data.table::set(l, 1L, "a", 6000)
  expect_identical(range(l$a), c(2, 6000))
  expect_identical(t(l$a)[1, 1:2], c(6000, 2))
  expect_identical(share(x)[1], 1)                   # the segment is as it was
})

test_that("element reads after an in-place write (data.table::set) see the writer's copy", {
  skip_if_not_installed("data.table")
  x <- as.double(1:5000)
  l <- list(a = share(x))
  expect_identical(l$a[c(1, 4999)], c(1, 4999))   # read first: the view is now cached
  data.table::setDT(l)
  data.table::set(l, 1L, "a", -1)                  # writes through Dataptr(writeable)
  expect_identical(l$a[c(1, 4999)], c(-1, 4999))
  expect_identical(share(x)[1], 1)                 # the segment is as it was
})

test_that("unsupported input gives an error naming the element and the reason", {
  expect_error(share(new.env()), "`x`: it is an environment", class = "pageshare_error")
  expect_error(share(sum), "it is a function", class = "pageshare_error")
  expect_error(share(list(a = 1, b = list(c = new.env()))), "x\\[\\[\"b\"\\]\\]\\[\\[\"c\"\\]\\]")
  ptr <- getNativeSymbolInfo("ps_share", "pageshare")$address
  expect_error(share(list(1, ptr)), "x\\[\\[2\\]\\]: it is an external pointer")
})

test_that("lists and data frames are shared leaf by leaf", {
  df <- data.frame(a = as.double(1:5), b = letters[1:5], f = factor(c(1, 2, 1, 2, 1)))
  s <- share(df)
  expect_identical(s, df)
  expect_true(is_shared(s$a))
  expect_true(is_shared(s$f))
  expect_true(is_shared(s$b))
  l <- list(m = matrix(1:4, 2), inner = list(x = 1:3, y = NULL))
  sl <- share(l)
  expect_identical(sl, l)
  expect_true(is_shared(sl$inner$x))
})

test_that("a bad pageshare.dir is a clear error where names are used, and share() does not need it", {
  old <- options(pageshare.dir = "/nonexistent/dir")
  on.exit(options(old))
  expect_error(registerVariables("bad_dir_ns", list(a = 1:3)), "pageshare.dir", class = "pageshare_bad_argument")
  expect_true(is_shared(share(as.double(1:10))))
})

test_that("the identity cache never keeps a source alive and drops dead ones", {
  skip_unless_glibc_malloc()
  forget_shared()
  # A large source (its memory goes back to the OS when freed) in a plain R session.
  res <- callr::r(function() {
    library(pageshare)
    heap_mb <- function() { g <- gc(); sum(g[, 2]) }
    x <- rnorm(5e6)                       # 40 MB
    v <- share(x)
    name <- shared_info(v)$name
    same <- identical(shared_info(share(x))$name, name)
    rm(x, v)
    invisible(gc()); invisible(gc()); invisible(gc())
    gone <- !(name %in% shared_segments(all = TRUE)$name)
    # X <- share(X): the original is not held by the cache
    X <- rnorm(5e6)
    before <- heap_mb()
    X <- share(X)
    invisible(gc())
    freed <- before - heap_mb()
    # the source of a function frame that died
    make <- function() { y <- rnorm(5e6); shared_info(share(y))$name }
    name2 <- make()
    invisible(gc()); invisible(gc()); invisible(gc())
    list(same = same, gone = gone, freed = freed, gone2 = !(name2 %in% shared_segments(all = TRUE)$name))
  })
  expect_true(res$same)
  expect_true(res$gone)
  expect_gt(res$freed, 35)                # MB of R heap released by X <- share(X)
  expect_true(res$gone2)
})

test_that("an object at a dead source's address is not mistaken for it", {
  forget_shared()
  x <- rnorm(1e4)
  v <- share(x)
  y <- x
  y[1] <- 99                              # x is not mutable: y is a copy
  expect_identical(x[1], v[1])
  expect_false(identical(shared_info(share(y))$name, shared_info(v)$name))
  expect_identical(share(y)[1], 99)
})

test_that("the cache honours its byte cap, keeping the newest entry", {
  forget_shared()
  old <- options(pageshare.cache_limit = 1)   # bytes
  on.exit(options(old))
  a <- rnorm(1e4); b <- rnorm(1e4)
  va <- share(a); vb <- share(b)
  expect_identical(shared_info(share(b))$name, shared_info(vb)$name)
  expect_false(identical(shared_info(share(a))$name, shared_info(va)$name))  # a's entry was dropped
  expect_identical(va, a)                     # a dropped entry's view stays valid
  cached <- .Call(pageshare:::ps_cache_size)
  expect_identical(forget_shared(), cached)             # every entry is forgotten
  expect_identical(.Call(pageshare:::ps_cache_size), 0L)
})

test_that("a growable source is not given a cache token (regression)", {
  # x[i] <- v past the end makes x growable: R keeps its capacity in TRUELENGTH
  # and reads it when x is freed. Writing a token there corrupted R's heap count.
  x <- numeric(0)
  for (i in 1:200000) x[i] <- i
  v <- share(x)
  expect_identical(v, x)
  rm(x)
  g <- gc()
  expect_lt(g["Vcells", "used"], 1e10)
  expect_lt(sum(gc()[, "used"]), 1e10)
})

test_that("reading elements of raw and complex views makes no private mapping", {
  r <- share(as.raw(seq_len(1e5) %% 256))
  z <- share(complex(real = seq_len(1e4), imaginary = -1))
  expect_identical(r[3], as.raw(3))
  expect_identical(z[2], complex(real = 2, imaginary = -1))
  # a view with a private mapping would not cut slices as views any more
  expect_true(is_shared(r[1:5000]))
  expect_true(is_shared(z[1:5000]))
})

test_that("a source written in place after share() is shared again as what it holds", {
  # The cache checks the source's data, not only its address: C code that
  # ignores R's copy rule (data.table's set()) must not get the stale view.
  skip_if_not_installed("data.table")
  forget_shared()
  for (n in c(1e4, 5e6)) {                      # in R's heap; a block of its own (pages handed over)
    x <- seq_len(n) + 0                         # an ordinary vector (not a compact sequence)
    v <- share(x)
    expect_identical(shared_info(share(x))$name, shared_info(v)$name)   # share once
    dt <- data.table::setDT(list(a = x))
    data.table::set(dt, 2L, "a", -1)            # writes into x's own memory
    expect_identical(x[2], -1)
    w <- share(x)
    expect_false(identical(shared_info(w)$name, shared_info(v)$name))
    expect_identical(w[2], -1)
    expect_identical(v[2], 2)                   # the first view never changed
    data.table::setattr(x, "tag", "new")        # attributes changed in place
    expect_identical(attr(share(x), "tag"), "new")
    rm(x, v, w, dt)
  }
  forget_shared(); invisible(gc())
})

test_that("a character vector is found again by its strings, and not once one is replaced in place", {
  skip_if_not_installed("data.table")
  forget_shared()
  x <- sprintf("s%06d", 1:2e5)
  x[3] <- NA
  x[4] <- enc2native("caf\u00e9")
  y <- x
  Encoding(y[5]) <- "latin1"; y[5] <- iconv("caf\u00e9", "UTF-8", "latin1")
  v <- share(x)
  expect_identical(shared_info(share(x))$name, shared_info(v)$name)   # share once
  expect_identical(share(x), x)
  w <- share(y)
  expect_identical(w, y)
  expect_identical(Encoding(w[5]), "latin1")
  dt <- data.table::setDT(list(a = x))
  data.table::set(dt, 2L, "a", "changed")       # writes into x's own array
  expect_identical(x[2], "changed")
  z <- share(x)
  expect_false(identical(shared_info(z)$name, shared_info(v)$name))
  expect_identical(z[2], "changed")
  expect_identical(v[2], "s000002")              # the first view never changed
  rm(x, y, v, w, z, dt)
  forget_shared(); invisible(gc())
})

test_that("another process of the same user can neither shrink, grow nor rewrite a segment", {
  skip_if(!nzchar(Sys.which("truncate")) || !nzchar(Sys.which("dd")), "needs truncate and dd")
  x <- as.double(seq_len(1e5))
  v <- share(x)
  info <- shared_info(v)
  path <- sprintf("/proc/%d/fd/%d", Sys.getpid(), info$fd)
  run <- function(cmd, args) suppressWarnings(system2(cmd, args, stdout = TRUE, stderr = TRUE))
  shrink <- run("truncate", c("-s", "0", path))
  grow <- run("truncate", c("-s", "+1M", path))
  write <- run("sh", c("-c", shQuote(sprintf("printf xxxxxxxx | dd of=%s bs=1 seek=8192 conv=notrunc", path))))
  for (r in list(shrink, grow, write)) expect_false(is.null(attr(r, "status")), info = paste(r, collapse = "\n"))
  expect_true(any(grepl("Operation not permitted", c(shrink, grow, write))))
  expect_identical(v[], x)                                   # the view reads what was shared
  expect_identical(file.size(path), info$segment_bytes)
  expect_identical(unserialize(with_handles(serialize(v, NULL))), x)
})

test_that("sharing many objects whose sources stay alive keeps every one cached", {
  # (that the last of n shares costs as much as the first, not O(n): the
  # per-share time is measured by inst/benchmarks/bench-share.R)
  forget_shared(); invisible(gc())
  src <- lapply(seq_len(4000), function(i) as.double(i + 1:16))
  views <- vector("list", length(src))
  for (i in seq_along(src)) views[[i]] <- share(src[[i]])
  expect_identical(.Call(pageshare:::ps_cache_size), 4000L)
  expect_identical(views[[4000]][16], 4016)
  expect_identical(shared_info(share(src[[1]]))$name, shared_info(views[[1]])$name)  # still cached
  rm(views, src); forget_shared(); invisible(gc())
})
