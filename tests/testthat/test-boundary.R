# Nothing unwinds across the Rust/R boundary: a panic or an R error raised by
# an R API call inside an entry point or any kind of ALTREP method reaches R
# as a condition, and R (and pageshare) go on. The faults are injected by
# ps_inject_fault() (src/rust/pageshare-r/src/faults.rs): one fault, fired at
# the next call of that site, inside its Rust body.

inject <- function(site, what) invisible(.Call(pageshare:::ps_inject_fault, site, what))

# R's C API for the methods no R function reaches reliably: a writeable data
# pointer, duplicate(), a string written in place. (Get_region is not among the
# sites: R reads a region through Dataptr_or_null, which a numeric view always
# answers, so R never calls it; it runs through the same wrapper as Elt.)
api <- compiled_probe("boundary_api", c(
  "#include <Rinternals.h>",
  "SEXP writeable_first(SEXP x) { return Rf_ScalarReal(REAL(x)[0]); }",
  "SEXP duplicate_of(SEXP x) { return Rf_duplicate(x); }",
  "SEXP set_second(SEXP x) { SET_STRING_ELT(x, 1, Rf_mkChar(\"z\")); return x; }"))
dyn.load(api)
c_api <- function(name, x) .Call(name, x)

# The operation that calls each site, on fresh views (a serialized_state or
# extract_subset needs a handle scope or a long slice).
site_calls <- list(
  entry = function(v) is_shared(v$dbl),
  length = function(v) length(v$dbl),
  dataptr = function(v) c_api("writeable_first", v$dbl),
  dataptr_or_null = function(v) sum(v$dbl),
  extract_subset = function(v) v$dbl[1:5000],
  duplicate = function(v) c_api("duplicate_of", v$dbl),
  serialized_state = function(v) pageshare:::with_handles(serialize(v$dbl, NULL)),
  unserialize = function(v) unserialize(pageshare:::with_handles(serialize(v$dbl, NULL))),
  inspect = function(v) capture.output(.Internal(inspect(v$dbl))),
  string_elt = function(v) v$chr[[2]],
  string_set_elt = function(v) c_api("set_second", v$chr),
  elt = function(v) v$dbl[[7]]
)

# (share() arms the garbage-collection hook, an R finalizer that calls an entry
# point: it runs at the collection here, not at one that R makes between
# arming a fault and the operation meant to reach it, where it would take the
# fault itself)
fresh_views <- function() {
  v <- list(
    dbl = share(as.numeric(1:20000)),
    int = share(1:20000 + 0L),
    chr = share(rep(c("a", "b", "c"), 7000))
  )
  invisible(gc())
  v
}

test_that("every site is reached by its operation (a fault fires there)", {
  for (site in names(site_calls)) {
    v <- fresh_views()
    inject(site, "panic")
    expect_error(suppressWarnings(site_calls[[site]](v)), class = "pageshare_internal", info = site)
  }
})

test_that("a panic in an entry point or an ALTREP method is a pageshare_internal error, and R goes on", {
  for (site in names(site_calls)) {
    v <- fresh_views()
    inject(site, "panic")
    e <- tryCatch(site_calls[[site]](v), error = identity)
    expect_s3_class(e, "pageshare_internal")
    expect_s3_class(e, "pageshare_error")
    expect_match(conditionMessage(e), "internal error in pageshare", info = site)
    # the same operation works once the fault has fired
    expect_error(site_calls[[site]](v), NA, info = site)
    expect_identical(v$dbl[[7]], 7)
    expect_identical(v$int[[9]], 9L)
  }
})

test_that("an R error raised by an R call inside Rust reaches R as R's own error, and R goes on", {
  for (site in names(site_calls)) {
    v <- fresh_views()
    inject(site, "r_error")
    e <- tryCatch(site_calls[[site]](v), error = identity)
    expect_s3_class(e, "error")
    expect_match(conditionMessage(e), "embedded nul", info = site)
    expect_error(site_calls[[site]](v), NA, info = site)
    expect_identical(v$int[[9]], 9L)
  }
})

test_that("faults leave nothing held: the segments of the views go with them", {
  settle <- function() { invisible(gc()); forget_shared(); invisible(gc()) }
  settle()
  before <- held_bytes_now()
  for (site in names(site_calls)) {
    local({
      v <- fresh_views()
      for (what in c("panic", "r_error")) {
        inject(site, what)
        try(site_calls[[site]](v), silent = TRUE)
      }
    })
  }
  settle()
  expect_identical(held_bytes_now(), before)
})

test_that("a fault site or kind that does not exist is refused", {
  expect_error(inject("nowhere", "panic"), class = "pageshare_bad_argument")
  expect_error(inject("length", "explode"), class = "pageshare_bad_argument")
})
