# Bad inputs across every export and option: each is a classed condition
# whose message names the argument or option and shows the value given (where
# there is one to show); none is silent. (Options and environment variables in
# more detail: test-options.R.)

bad <- function(expr, class, ...) list(expr = substitute(expr), class = class, shown = c(...))

X <- matrix(as.double(1:20), 4)
cases <- list(
  bad(share(new.env()), "pageshare_unsupported_type", "`x`", "environment"),
  bad(share(function() 1), "pageshare_unsupported_type", "`x`", "function"),
  bad(shared_segments(all = "yes"), "pageshare_bad_argument", "`all`"),
  bad(registerVariables(1, list(a = 1)), "pageshare_bad_argument", "`namespace`"),
  bad(registerVariables(NA_character_, list(a = 1)), "pageshare_bad_argument", "`namespace`"),
  bad(registerVariables("", list(a = 1)), "pageshare_bad_argument", "`namespace`"),
  bad(registerVariables(c("a", "b"), list(a = 1)), "pageshare_bad_argument", "`namespace`"),
  bad(registerVariables("bad_ns", list(1)), "pageshare_bad_argument", "`variableList`"),
  bad(registerVariables("bad_ns", 1:3), "pageshare_bad_argument", "`variableList`"),
  bad(registerVariables("bad_ns", list(a = new.env())), "pageshare_unsupported_type", "variableList$a", "environment"),
  bad(retrieveViews(1, "a"), "pageshare_bad_argument", "`namespace`"),
  bad(retrieveViews("bad_ns", 1), "pageshare_bad_argument", "`variableNames`"),
  bad(retrieveViews("bad_ns_none", "zz"), "pageshare_not_registered", "'zz'", "'bad_ns_none'"),
  bad(releaseViews("bad_ns", 1), "pageshare_bad_argument", "`variableNames`"),
  bad(releaseVariables(1, "a"), "pageshare_bad_argument", "`namespace`"),
  bad(releaseVariables("bad_ns", 1), "pageshare_bad_argument", "`variableNames`"),
  bad(retrieveMetadata("bad_ns", 1), "pageshare_bad_argument", "`variableName`"),
  bad(retrieveMetadata(2, "a"), "pageshare_bad_argument", "`namespace`"),
  bad(memshare_gc(1), "pageshare_bad_argument", "`namespace`"),
  bad(memshare_gc("bad_ns", cluster = 3), "pageshare_bad_argument", "`cluster`", "double"),
  bad(memApply(list(1), 2, sum), "pageshare_bad_argument", "`X`", "list of length 1"),
  bad(memApply(X, 3, sum), "pageshare_bad_argument", "`MARGIN`", "not 3"),
  bad(memApply(X, 2, 1), "pageshare_bad_argument", "`FUN`", "not 1"),
  bad(memApply(X, 2, "no_such_function_here"), "pageshare_bad_argument", "`FUN`", '"no_such_function_here"'),
  bad(memApply(X, 2, sum, VARS = 1), "pageshare_bad_argument", "`VARS`"),
  bad(memApply(X, 2, sum, MAX.CORES = 0), "pageshare_bad_argument", "`MAX.CORES`", "not 0"),
  bad(memApply(X, 2, sum, CLUSTER = 2), "pageshare_bad_argument", "`CLUSTER`", "double"),
  bad(memApply("X", 2, sum), "pageshare_bad_argument", "`X`", "`NAMESPACE`"),
  bad(memLapply(new.env(), sum), "pageshare_bad_argument", "`X`", "environment"),
  bad(memLapply(1:3, "no_such_function_here"), "pageshare_bad_argument", "`FUN`", '"no_such_function_here"'),
  bad(memLapply(1:3, sum, MAX.CORES = -1), "pageshare_bad_argument", "`MAX.CORES`", "not -1"),
  bad(registerDoShm(cl = "x"), "pageshare_bad_argument", "`cl`", "character"),
  bad(registerDoShm(cores = 0), "pageshare_bad_argument", "`cores`", "not 0"),
  bad(registerDoShm(cores = 2.5), "pageshare_bad_argument", "`cores`", "not 2.5"),
  bad(registerDoShm(cores = "two"), "pageshare_bad_argument", "`cores`", '"two"'),
  bad(start_workers(0), "pageshare_bad_argument", "`n`", "not 0"),
  bad(start_workers(2.5), "pageshare_bad_argument", "`n`", "not 2.5"),
  bad(start_workers("a"), "pageshare_bad_argument", "`n`", '"a"'),
  bad(start_workers(5000), "pageshare_bad_argument", "`n`", "not 5000"),
  bad(shm_call(1), "pageshare_bad_argument", "`FUN`", "not 1"),
  bad(shm_call("no_such_function_here"), "pageshare_bad_argument", "`FUN`", '"no_such_function_here"'),
  bad(shm_value(42), "pageshare_bad_argument", "`task`", "double"),
  bad(shm_value(42, timeout = 1), "pageshare_bad_argument", "`task`", "double"),
  bad(shm_resolved("x"), "pageshare_bad_argument", "`task`", "character"),
  bad(shm_cancel("x"), "pageshare_bad_argument", "`task`", "character"),
  bad(shm_everywhere(NULL, 1), "pageshare_bad_argument", "`...`"),
  bad(shm_everywhere(NULL, a = 1, a = 2), "pageshare_bad_argument", "`...`"),
  bad(shm_map(new.env(), sum), "pageshare_bad_argument", "`X`", "environment"),
  bad(shm_map(1:3, sum, .seed = "x"), "pageshare_bad_argument", "`.seed`", '"x"'),
  bad(shm_map(1:3, sum, .progress = "yes"), "pageshare_bad_argument", "`.progress`"),
  bad(shm_map(1:3, 1), "pageshare_bad_argument", "`FUN`", "not 1"),
  bad(mutual_information("a", 1:3), "pageshare_bad_argument", "`X`", "character"),
  bad(mutual_information(X, 1:3), "pageshare_bad_argument", "`y`", "3 values"),
  bad(mutual_information(X, 1:4, method = "x"), "pageshare_bad_argument", "`method`", '"x"'),
  bad(mutual_information(X, 1:4, base = 1), "pageshare_bad_argument", "`base`", "not 1"),
  bad(mutualinfo("a", 1), "pageshare_bad_argument", "`x`", "`y`"),
  bad(memApply(X, 2, sum, NAMESPACE = NA), "pageshare_bad_argument", "`NAMESPACE`", "NA"),
  bad(memApply(X, 2, sum, NAMESPACE = sum), "pageshare_bad_argument", "`NAMESPACE`", "a function"),
  bad(memLapply(1:2, sum, NAMESPACE = new.env()), "pageshare_bad_argument", "`NAMESPACE`", "an environment"),
  bad(memApply(MARGIN = 2, FUN = sum), "pageshare_bad_argument", "`X`", "memApply()"),
  bad(shm_map(FUN = sum), "pageshare_bad_argument", "`X`", "shm_map()"),
  bad(shm_call(), "pageshare_bad_argument", "`FUN`", "shm_call()"),
  bad(registerVariables("bad_ns"), "pageshare_bad_argument", "`variableList`", "registerVariables()"),
  bad(retrieveViews(strrep("n", 1e4 + 1), "a"), "pageshare_bad_argument", "`namespace`", "10,001 bytes"),
  bad(retrieveViews("bad_ns", strrep("v", 6000)), "pageshare_bad_argument", "`variableNames`", "6,000 bytes"),
  bad(registerVariables("bad_ns", stats::setNames(list(1), strrep("v", 300))), "pageshare_bad_argument",
      "`variableList`", "300 bytes"),
  bad(share(1:3, key = strrep("k", 2e4)), "pageshare_bad_argument", "`key`", "20,000 bytes"),
  bad(shared_by_key(strrep("k", 2e4)), "pageshare_bad_argument", "`key`", "20,000 bytes"),
  bad(memApply("X", 2, sum, NAMESPACE = strrep("n", 2e4)), "pageshare_bad_argument", "`NAMESPACE`", "20,000 bytes"),
  bad(memLapply(1:2, strrep("f", 2e4)), "pageshare_bad_argument", "`FUN`", "(20,000 bytes)"),
  bad(registerVariables("bad_ns", list(a = 1, b = 2, a = 3)), "pageshare_bad_argument", "`variableList`", "'a'"),
  bad(shm_multisession(workers = 1, envir = 1), "pageshare_bad_argument", "`envir`", "1")
)

option_cases <- list(
  list("pageshare.cache_limit", "x", quote(share(runif(2e5)))),
  list("pageshare.max_shared_bytes", "lots", quote(share(runif(2e5)))),
  list("pageshare.release_source", "maybe", quote(share(runif(2e5)))),
  list("pageshare.dir", "/no/such/dir", quote(sweep_shared())),
  list("pageshare.threshold", "1MB", quote(memLapply(1:2, identity))),
  list("pageshare.workers", 0, quote(start_workers())),
  list("pageshare.worker_vsize", "16M", quote(start_workers(1))),
  list("pageshare.verbose", "loud", quote(memLapply(list(runif(2e5)), sum)))
)

test_that("every bad input is a classed error naming the argument and the value", {
  on.exit(stop_workers(), add = TRUE)
  expect_gte(length(cases) + length(option_cases), 50L)
  for (case in cases) {
    label <- paste(deparse(case$expr), collapse = " ")
    e <- tryCatch({ eval(case$expr); NULL }, error = function(e) e)
    expect_s3_class(e, case$class)
    if (is.null(e)) next
    expect_s3_class(e, "pageshare_error")
    for (s in case$shown) expect_match(conditionMessage(e), s, fixed = TRUE, info = label)
  }
  for (case in option_cases) {
    old <- options(stats::setNames(list(case[[2]]), case[[1]]))
    e <- tryCatch({ eval(case[[3]]); NULL }, error = function(e) e)
    options(old)
    expect_s3_class(e, "pageshare_bad_argument")
    if (is.null(e)) next
    expect_match(conditionMessage(e), sprintf("`%s`", case[[1]]), fixed = TRUE)
    expect_match(conditionMessage(e), describe <- pageshare:::describe_value(case[[2]]), fixed = TRUE, info = describe)
  }
})

# ---- the sweep: every export, every argument, every kind of bad value --------
#
# Each exported function is called with valid arguments (`base`) except one,
# which takes in turn each value below, or is left out. Whatever errors must be
# a pageshare_error; valid values may succeed. All in this process: the pool
# has one worker (option pageshare.workers), started once.

# (the sweep's namespaces and keys are this process's own: the index is the
# user's, and another R session of theirs, e.g. another run of this suite,
# may use the same names meanwhile; its registrations would answer here)
sweep_ns <- paste0("sweep_ns_", Sys.getpid())
sweep_key <- paste0("sweep_key_", Sys.getpid())
sweep_digits <- as.character(Sys.getpid())   # (a name made of digits)

sweep_values <- list(
  "NULL" = NULL, "NA" = NA, "-1" = -1, "0" = 0, "1.5" = 1.5, "Inf" = Inf, "NaN" = NaN,
  "empty string" = "", "two strings" = c("a", "b"), "100 kB string" = strrep("x", 1e5),
  "list" = list(1), "function" = function(...) NULL, "environment" = new.env(),
  "raw(0)" = raw(0), "1i" = 1i, "TRUE" = TRUE, "digits" = sweep_digits)

sweep_X <- matrix(as.double(1:20), 4)
sweep_y <- rep(1:2, 5)
# base: valid arguments; skip: arguments not swept, with the reason; after:
# run after each call (undoes what a valid call did).
sweep_plan <- list(
  content_key = list(base = list(x = 1:3)),
  forget_shared = list(base = list()),
  is_shared = list(base = list(x = 1)),
  memApply = list(base = list(X = sweep_X, MARGIN = 2, FUN = sum)),
  memLapply = list(base = list(X = 1:3, FUN = sum)),
  memshare_gc = list(base = list(namespace = sweep_ns)),
  mutual_information = list(base = list(X = matrix(as.double(1:20), 10), y = sweep_y)),
  mutualinfo = list(base = list(x = as.double(1:10), y = sweep_y, isXDiscrete = TRUE)),
  pageList = list(base = list()),
  registerDoShm = list(base = list(cores = 1), after = quote(foreach::registerDoSEQ())),
  registerVariables = list(base = list(namespace = sweep_ns, variableList = list(a = 1)),
                           after = quote(for (ns in c(sweep_ns, sweep_digits)) memshare_gc(ns))),
  releaseVariables = list(base = list(namespace = sweep_ns, variableNames = "a")),
  releaseViews = list(base = list(namespace = sweep_ns, variableNames = "a")),
  release_key = list(base = list(key = sweep_key)),
  retrieveMetadata = list(base = list(namespace = sweep_ns, variableName = "a")),
  retrieveViews = list(base = list(namespace = sweep_ns, variableNames = "a")),
  share = list(base = list(x = 1:3), after = quote(for (k in c(sweep_digits, sweep_key)) release_key(k))),
  shared_by_key = list(base = list(key = sweep_key)),
  shared_info = list(base = list(x = 1)),
  shared_segments = list(base = list()),
  shm_call = list(base = list(FUN = identity)),
  shm_map = list(base = list(X = 1:2, FUN = identity)),
  shm_multisession = list(base = list(workers = 1),
                          not_swept = c(workers = "(missing): the default count of workers starts a cluster")),
  shm_value = list(base = list(task = quote(shm_call(identity, 1)))),
  shm_everywhere = list(base = list(expr = 1)),
  shm_resolved = list(base = list(task = quote(shm_call(identity, 1)))),
  shm_cancel = list(base = list(task = quote(shm_call(identity, 1)))),
  default_worker_count = list(base = list()),
  shm_status = list(base = list()),
  start_workers = list(base = list(n = 1)),
  stop_workers = list(base = list(), skip = "stopping the pool is tested in test-pool.R"),
  sweep_shared = list(base = list()),
  viewList = list(base = list()),
  with_handles = list(base = list(expr = 1))
)

# Every call of the sweep and what it gave: NA (no error), TRUE (a
# pageshare_error), or the class of another error.
run_sweep <- function() {
  ns <- asNamespace("pageshare")
  exports <- sort(getNamespaceExports("pageshare"))
  exports <- exports[vapply(exports, function(f) is.function(get(f, ns)), TRUE)]
  testthat::expect_setequal(names(sweep_plan), exports)
  rows <- list()
  record <- function(f, arg, value, args) {
    call <- as.call(c(as.name(f), args))
    e <- tryCatch({ eval(call, globalenv()); NULL }, error = function(e) e)
    after <- sweep_plan[[f]]$after
    if (!is.null(after)) try(eval(after), silent = TRUE)
    rows[[length(rows) + 1L]] <<- data.frame(
      fun = f, arg = arg, value = value, classed = if (is.null(e)) NA else inherits(e, "pageshare_error"),
      message = if (is.null(e)) "" else substr(conditionMessage(e), 1, 200), stringsAsFactors = FALSE)
  }
  for (f in names(sweep_plan)) {
    plan <- sweep_plan[[f]]
    if (!is.null(plan$skip)) next
    base <- plan$base
    record(f, "", "(all valid)", base)
    for (arg in names(formals(get(f, ns)))) {
      if (arg == "...") next
      for (v in names(sweep_values)) {
        args <- base
        args[arg] <- list(sweep_values[[v]])
        record(f, arg, v, args)
      }
      if (isTRUE(startsWith(as.character(plan$not_swept[arg]), "(missing)"))) next
      args <- base
      args[[arg]] <- NULL
      record(f, arg, "(missing)", args)
    }
  }
  do.call(rbind, rows)
}

test_that("the sweep over every export's arguments raises only pageshare_error", {
  old <- options(pageshare.workers = 1)
  on.exit({ stop_workers(); options(old); foreach::registerDoSEQ(); for (ns in c(sweep_ns, sweep_digits)) memshare_gc(ns) }, add = TRUE)
  res <- run_sweep()
  unclassed <- res[!is.na(res$classed) & !res$classed, ]
  expect_gt(nrow(res), 900L)
  expect_equal(nrow(unclassed), 0L,
               info = paste(sprintf("%s(%s = %s): %s", unclassed$fun, unclassed$arg, unclassed$value,
                                    unclassed$message), collapse = "\n"))
})

test_that("registerVariables() checks the whole list before it registers anything", {
  on.exit(memshare_gc("dup_ns"), add = TRUE)
  e <- tryCatch(registerVariables("dup_ns", list(a = 1, b = 2, a = 3)), error = function(e) e)
  expect_s3_class(e, "pageshare_bad_argument")
  expect_match(conditionMessage(e), "names 'a' more than once", fixed = TRUE)
  expect_false(any(grepl("^dup_ns\\.", unlist(pageList()))))
  # a bad element after good ones: nothing registered either
  e <- tryCatch(registerVariables("dup_ns", list(a = 1, b = 2, c = new.env())), error = function(e) e)
  expect_s3_class(e, "pageshare_unsupported_type")
  expect_false(any(grepl("^dup_ns\\.", unlist(pageList()))))
  # one the index refuses midway (a name this process holds already): the
  # others of the call are released again
  registerVariables("dup_ns", list(b = 2))
  e <- tryCatch(registerVariables("dup_ns", list(a = 1, b = 3)), error = function(e) e)
  expect_s3_class(e, "pageshare_error")
  expect_identical(unlist(pageList()[grepl("^dup_ns\\.", unlist(pageList()))]), "dup_ns.b")
  # and valid lists keep working
  registerVariables("dup_ns", list(a = 1, c = 3))
  expect_setequal(grep("^dup_ns\\.", unlist(pageList()), value = TRUE), c("dup_ns.a", "dup_ns.b", "dup_ns.c"))
})

test_that("a bad pageshare.threshold is the same classed error through every door", {
  skip_if_not_installed("future")
  skip_if_not_installed("foreach")
  old_workers <- options(pageshare.workers = 1)
  old_plan <- future::plan(shm_multisession, workers = 2)
  registerDoShm(cores = 1)
  on.exit({
    future::plan(old_plan); foreach::registerDoSEQ(); stop_workers(); options(old_workers)
  }, add = TRUE)
  x <- runif(10)
  doors <- list(
    shm_map = function() shm_map(1:2, function(i) x[i]),
    memLapply = function() memLapply(1:2, function(i) x[i]),
    foreach = function() foreach::`%dopar%`(foreach::foreach(i = 1:2, .export = "x"), x[i]),
    future = function() future::value(future::future(x[1]))
  )
  for (value in list("big", -5, NA, c(1, 2))) {
    old <- options(pageshare.threshold = value)
    for (door in names(doors)) {
      e <- tryCatch({ doors[[door]](); NULL }, error = function(e) e)
      if (door == "future" && inherits(e, "FutureLaunchError")) {
        # (future >= 1.40 wraps every error of a backend's launch in its own
        # FutureLaunchError, which keeps the class only in its message)
        expect_match(conditionMessage(e), "pageshare_bad_argument", fixed = TRUE)
      } else {
        expect_s3_class(e, "pageshare_bad_argument")
      }
      if (is.null(e)) next
      expect_match(conditionMessage(e), "option `pageshare.threshold`", fixed = TRUE, info = door)
      expect_match(conditionMessage(e), pageshare:::describe_value(value), fixed = TRUE, info = door)
    }
    options(old)
  }
  # and a valid value works through each
  for (door in names(doors)) expect_error(doors[[door]](), NA)
})
