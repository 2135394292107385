# Every kind of data users pass: character vectors, factors, dates, data frames,
# tibbles, data.tables, nested lists, slices. Shared in this process, used in a
# worker, returned from the worker: identical() to the original every time.

roundtrip_in_worker <- function(cl, x) {
  v <- share(x)
  with_handles(parallel::clusterCall(cl, function(v) {
    list(value = v, shared = pageshare::is_shared(if (is.list(v)) v[[1]] else v))
  }, v))[[1]]
}

latin1 <- "caf\xe9"; Encoding(latin1) <- "latin1"
bytes <- "\xff\xfe"; Encoding(bytes) <- "bytes"
type_cases <- list(
  chr = c("a", NA, "h\u00e9llo", "", "\u65e5\u672c", latin1, bytes),
  chr_empty = character(),
  chr_na = NA_character_,
  factor = factor(c("lo", NA, "hi", "lo"), levels = c("lo", "hi", "mid")),
  ordered = factor(c("b", "a"), levels = c("a", "b"), ordered = TRUE),
  date = as.Date(c("2024-01-01", NA, "1970-01-01")),
  posixct = as.POSIXct(c("2024-03-10 02:30:00", "2000-01-01 00:00:00"), tz = "America/New_York"),
  difftime = as.difftime(c(1.5, NA), units = "mins"),
  named_chr = c(a = "x", b = "y"),
  matrix_chr = matrix(letters[1:6], 2, dimnames = list(c("r1", "r2"), NULL)),
  df = data.frame(x = c(1.5, NA, 3), s = c("a", NA, "c"), f = factor(c("u", "v", "u")),
                  d = as.Date("2024-01-01") + 0:2, stringsAsFactors = FALSE),
  df_empty = data.frame(x = double(), s = character()),
  df_rownames = data.frame(x = 1:3, row.names = c("one", "two", "three")),
  nested = list(m = matrix(rnorm(4), 2), inner = list(s = letters, n = NULL, i = 1:3), z = integer()),
  tibble = tibble::tibble(x = 1:3, y = c("a", "b", NA)),
  data.table = data.table::data.table(k = c("x", "y"), v = c(1.25, 2.5))
)

# A data.table carries an external pointer to itself (".internal.selfref"),
# which identical() compares by address and which every copy renews: what
# matters is the class, the columns and every other attribute.
without_selfref <- function(x) {
  if (inherits(x, "data.table")) attr(x, ".internal.selfref") <- NULL
  x
}

test_that("every type round-trips: share, use in a worker, return from the worker", {
  cl <- local_cluster(1L)
  parallel::clusterEvalQ(cl, { library(data.table); library(tibble); NULL })
  for (nm in names(type_cases)) {
    x <- type_cases[[nm]]
    v <- share(x)
    expect_identical(v, x, info = nm)
    got <- roundtrip_in_worker(cl, x)
    expect_identical(without_selfref(got$value), without_selfref(x), info = nm)
    if (length(x) > 0 && !is.data.frame(x)) expect_true(got$shared, info = nm)
    if (is.character(x)) expect_identical(Encoding(got$value), Encoding(x), info = nm)
  }
})

test_that("a data.table stays a data.table; := in a worker writes a private copy only", {
  dt <- data.table::data.table(a = as.double(1:10), b = letters[1:10])
  s <- share(dt)
  expect_true(data.table::is.data.table(s))
  cl <- local_cluster(1L)
  in_worker <- function(d) {
    library(data.table)
    d[2, a := 100]
    d[b == "c", b := "CC"]
    d[, z := a * 2]
    list(d = d, still_view = pageshare::is_shared(d$a))
  }
  environment(in_worker) <- globalenv()   # data.table-aware (see as_global_code())
  res <- with_handles(parallel::clusterCall(cl, in_worker, s))[[1]]
  expect_identical(res$d$a[2], 100)
  expect_identical(res$d$b[3], "CC")
  expect_identical(res$d$z[2], 200)
  expect_identical(s$a[2], 2)          # the owner still reads the shared pages
  expect_identical(s, dt)
  # := on the owner's view changes that view only, never the segment
  again <- unserialize(with_handles(serialize(s, NULL)))
  as_global_code(s[3, a := -1])
  expect_identical(s$a[3], -1)
  expect_identical(again$a[3], 3)
  expect_identical(dt$a[3], 3)
  # a modified view no longer travels as a handle, so nothing reads stale data
  expect_identical(unserialize(with_handles(serialize(s$a, NULL)))[3], -1)
})

test_that("touching one element of 10 million shared strings does not materialize the rest", {
  skip_if_not(file.exists("/proc/self/smaps_rollup"))
  n <- 1e7
  x <- sprintf("s%08d", seq_len(n))
  v <- share(x)
  rm(x); invisible(gc())
  h <- with_handles(serialize(v, NULL))
  res <- callr::r(function(h) {
    library(pageshare)
    kb <- function() {
      f <- readLines("/proc/self/smaps_rollup")
      g <- function(k) as.numeric(sub("^[^:]+:\\s+(\\d+) kB$", "\\1", grep(paste0("^", k, ":"), f, value = TRUE)))
      g("Private_Clean") + g("Private_Dirty")
    }
    v <- unserialize(h)
    invisible(gc())
    before <- kb()
    one <- v[5e6]
    chars <- nchar(v[123456])
    sub <- v[c(1, 9999999)]
    after <- kb()
    list(one = one, chars = chars, sub = sub, grown_kb = after - before,
         shared = is_shared(v), copies = shared_info(v)$materializations)
  }, args = list(h = h))
  expect_identical(res$one, "s05000000")
  expect_identical(res$chars, 9L)
  expect_identical(res$sub, c("s00000001", "s09999999"))
  expect_true(res$shared)
  expect_identical(res$copies, 0)
  # a full materialization would be > 600 MB (10M R strings + pointer array)
  expect_lt(res$grown_kb, 4 * 1024)
})

test_that("contiguous slices stay views of the same segment", {
  x <- as.double(seq_len(1e5))
  v <- share(x)
  s <- v[20001:30000]
  expect_true(is_shared(s))
  expect_identical(shared_info(s)$name, shared_info(v)$name)
  expect_identical(shared_info(s)$offset, 20000)
  expect_identical(s, x[20001:30000])
  expect_lt(length(with_handles(serialize(s, NULL))), 500)
  expect_false(is_shared(v[c(1, 3, 5)]))        # not contiguous: a copy
  expect_false(is_shared(v[1:10]))              # too small to be worth a view
  chr <- share(sprintf("id%06d", 1:50000))
  cs <- chr[1001:9000]
  expect_true(is_shared(cs))
  expect_identical(cs, sprintf("id%06d", 1001:9000))
  # chunks cut by future.apply-style splitting cross as handles
  chunks <- split(seq_along(v), rep(1:4, each = length(v) / 4))
  pieces <- lapply(chunks, function(i) v[i])
  expect_true(all(vapply(pieces, is_shared, TRUE)))
  expect_identical(unlist(pieces, use.names = FALSE), x)
})

test_that("results come back shared: a worker's large value is owned by the receiver", {
  cl <- local_cluster(1L)
  res <- parallel::clusterCall(cl, function() {
    out <- pageshare::share(sprintf("r%d", 1:20000))
    .Call(pageshare:::ps_disown, out)
    pageshare::with_handles(serialize(out, NULL))
  })[[1]]
  got <- unserialize(res)
  .Call(pageshare:::ps_adopt, got)
  info <- shared_info(got)
  expect_true(info$owned_here)
  expect_identical(info$owner_pid, Sys.getpid())
  parallel::clusterEvalQ(cl, invisible(gc()))     # the worker drops its view: nothing unlinked
  expect_true(info$name %in% shared_segments(all = TRUE)$name)
  expect_identical(got, sprintf("r%d", 1:20000))
  rm(got); invisible(gc())
  expect_false(info$name %in% shared_segments(all = TRUE)$name)
})

char_ops <- list(
  function(x) x[3], function(x) x[2:5], function(x) nchar(x), function(x) toupper(x), function(x) paste0(x, "!"),
  function(x) sort(x), function(x) order(x), function(x) unique(x), function(x) table(x), function(x) x == "b",
  function(x) x %in% c("a", "z"), function(x) match("c", x), function(x) is.na(x), function(x) rev(x),
  function(x) substr(x, 1, 1), function(x) grepl("a", x), function(x) sub("a", "A", x), function(x) factor(x),
  function(x) c(x, "new"), function(x) { x[2] <- "changed"; x }, function(x) as.list(x), function(x) split(x, seq_along(x) %% 2),
  function(x) unserialize(serialize(x, NULL)), function(x) unserialize(with_handles(serialize(x, NULL))),
  function(x) vapply(x, nchar, 1L), function(x) sprintf("<%s>", x), function(x) duplicated(x), function(x) which(x > "b"),
  function(x) strsplit(x, ""), function(x) enc2utf8(x), function(x) max(x, na.rm = TRUE), function(x) head(x, 2)
)
factor_ops <- list(
  function(f) levels(f), function(f) as.integer(f), function(f) table(f), function(f) f[2:3], function(f) droplevels(f),
  function(f) f == "b", function(f) nlevels(f), function(f) summary(f), function(f) as.character(f), function(f) rev(f),
  function(f) { f[1] <- "c"; f }, function(f) factor(f, levels = rev(levels(f))), function(f) tapply(seq_along(f), f, sum),
  function(f) split(seq_along(f), f), function(f) interaction(f, f), function(f) unserialize(with_handles(serialize(f, NULL)))
)
df_ops <- list(
  function(d) d[2, ], function(d) d$x, function(d) d[d$x > 1, ], function(d) nrow(d), function(d) summary(d),
  function(d) aggregate(x ~ g, data = d, FUN = sum), function(d) merge(d, d, by = "s"), function(d) d[order(d$s), ],
  function(d) split(d, d$g), function(d) lapply(d, class), function(d) subset(d, x > 1, select = s),
  function(d) transform(d, y = x * 2), function(d) { d$x[1] <- 0; d }, function(d) rbind(d, d), function(d) cbind(d, k = 1),
  function(d) as.list(d), function(d) do.call(rbind, split(d, d$g)), function(d) table(d$g, d$s),
  function(d) unserialize(with_handles(serialize(d, NULL))), function(d) within(d, z <- nchar(s))
)

test_that("the operations test runs on character, factor and data frame views", {
  check_ops(c("b", "a", NA, "c", "a", "d"), char_ops, "character")
  check_ops(factor(c("b", "a", "c", "a")), factor_ops, "factor")
  check_ops(data.frame(x = c(3, 1, 2, 5), s = c("q", "r", "q", "t"), g = factor(c("u", "v", "u", "v"))), df_ops, "data.frame")
})
