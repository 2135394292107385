# Field tests of two "done means" items:
#
# (4) A FIFO, a symlink, a directory, a device, a 0644 file and a file of
#     another user under any name pageshare reads: every pageshare call returns
#     (never blocks), with a classed error or by skipping the entry; no foreign data
#     is ever returned. (The tests that need a second user create one when run
#     as root, and skip visibly otherwise.)
# (6) 10,000 objects shared at once in one session, and a list of 10,000
#     leaves sent to a worker: correct, or the documented classed error; no
#     crash.
#
# Every test works in a temporary `pageshare.dir` of its own (the real one is
# never touched) and removes what it made: files, directories, processes and
# the second user (if it created it).
#
# "Foreign data" is detected with sentinel values: every hostile object that
# could lead pageshare to a segment leads to one holding `sentinel`, and no
# value a pageshare call returns may contain one of them.

skip_on_os(c("windows", "mac", "solaris"))


sentinel <- c(-7071067.8118, 2.718281828e-9, 31415926.5358)

has_sentinel <- function(x) {
  if (is.list(x)) return(any(vapply(x, has_sentinel, TRUE)))
  is.numeric(x) && any(x %in% sentinel)
}

# Run f() when the frame `env` exits (after what was deferred before, or first
# of all with after = FALSE).
defer_fn <- function(f, env, after = TRUE) {
  do.call(base::on.exit, list(as.call(list(f)), add = TRUE, after = after), envir = env)
}

# A fresh directory (mode `mode`) under `parent`, removed when `env` exits; with
# `use`, it is also this session's pageshare.dir until then.
local_base <- function(env = parent.frame(), mode = "0700", parent = tempdir(), use = TRUE) {
  base <- tempfile("ps-field-", tmpdir = parent)
  dir.create(base)
  Sys.chmod(base, mode, use_umask = FALSE)
  base <- normalizePath(base)
  old <- if (use) options(pageshare.dir = base)
  defer_fn(function() {
    if (use) options(old)
    # (not force = TRUE: it chmods what links point at before removing them)
    unlink(base, recursive = TRUE)
  }, env)
  base
}

with_dir <- function(base, expr) {
  old <- options(pageshare.dir = base)
  on.exit(options(old))
  expr
}

index_dir <- function(base) file.path(base, paste0("pageshare-", my_uid))
entry_path <- function(base, ns, var) file.path(index_dir(base), paste0("pageshare.n.", ns, ".", var))

mkfifo <- function(path) {
  stopifnot(system2("mkfifo", c("-m", "600", shQuote(path))) == 0L)
}

# Valid index entries for "ns"."x" and "ns"."y", in a directory of their own,
# pointing at live segments that hold `sentinel`, held by another R process of
# this user (so that nothing of them is this process's own).
local_sentinels <- function(env = parent.frame()) {
  base <- local_base(env, use = FALSE)
  ready <- file.path(base, "ready")
  done <- file.path(base, "done")
  proc <- callr::r_bg(function(base, sentinel, ready, done) {
    options(pageshare.dir = base)
    library(pageshare)
    registerVariables("ns", list(x = sentinel, y = sentinel))
    file.create(ready)
    t0 <- Sys.time()
    while (!file.exists(done) && Sys.time() - t0 < 600) Sys.sleep(0.02)
  }, args = list(base = base, sentinel = sentinel, ready = ready, done = done), supervise = TRUE)
  defer_fn(function() {
    # an exit of its own (a killed R leaves its session's temporary directory)
    file.create(done)
    proc$wait(5000)
    if (proc$is_alive()) proc$kill()
  }, env, after = FALSE)
  wait_for_file(ready)
  stopifnot(file.exists(entry_path(base, "ns", "x")))
  list(base = base, entry_x = entry_path(base, "ns", "x"), entry_y = entry_path(base, "ns", "y"))
}

# The value or the error of `expr`. (A call that blocked, on a FIFO for
# example, would never return: the run's own time limit catches that.)
attempt <- function(expr) {
  tryCatch(list(value = expr, error = NULL), error = function(e) list(value = NULL, error = e))
}

# Every pageshare call that reads the index, for the name ns.var.
calls_on <- function(ns, var) list(
  retrieveViews = function() retrieveViews(ns, var),
  retrieveMetadata = function() retrieveMetadata(ns, var),
  registerVariables = function() registerVariables(ns, stats::setNames(list(1:3), var)),
  sweep_shared = function() sweep_shared(),
  shared_segments = function() shared_segments(all = TRUE)$name,
  # the namespace listing: an unknown name is an error listing what is registered
  namespace_listing = function() retrieveViews(ns, "never_registered"),
  namespace_variables = function() .Call(pageshare:::ps_namespace_variables, ns, pageshare:::segment_dir())
)

# Outcomes (a condition class, or "value") allowed for each call.
entry_outcomes <- list(
  retrieveViews = "pageshare_permission", retrieveMetadata = "pageshare_permission",
  registerVariables = "pageshare_permission",      # refused, not replaced: "remove it"
  sweep_shared = "value", shared_segments = "value", # the entry is skipped
  namespace_listing = "pageshare_not_registered", namespace_variables = "value")
dir_outcomes <- list(
  retrieveViews = "pageshare_permission", retrieveMetadata = "pageshare_permission",
  registerVariables = "pageshare_permission", namespace_listing = "pageshare_permission",
  sweep_shared = c("pageshare_permission", "value"), shared_segments = c("pageshare_permission", "value"),
  namespace_variables = c("pageshare_permission", "value"))

# Run every call on ns.var; each returns, with an allowed outcome,
# a pageshare_error if it fails, and nothing of the name or of the sentinels.
check_calls <- function(ns, var, allowed, label) {
  name <- paste0("pageshare.n.", ns, ".", var)
  outcomes <- character()
  for (call in names(allowed)) {
    r <- attempt(calls_on(ns, var)[[call]]())
    info <- sprintf("%s: %s", label, call)
    outcome <- if (is.null(r$error)) "value" else class(r$error)[1]
    outcomes[call] <- outcome
    expect_true(outcome %in% allowed[[call]], info = sprintf(
      "%s: got %s%s, expected %s", info, outcome,
      if (is.null(r$error)) "" else paste0(" (", conditionMessage(r$error), ")"),
      paste(allowed[[call]], collapse = " or ")))
    if (!is.null(r$error)) {
      expect_true(inherits(r$error, "pageshare_error"), info = paste(info, "error is not classed"))
      if (call == "namespace_listing") {
        holds <- sub("^.*it holds: ", "", conditionMessage(r$error))
        expect_false(grepl(sprintf("'%s'", var), holds, fixed = TRUE), info = paste(info, "lists the hostile name"))
      }
    }
    expect_false(has_sentinel(r$value), info = paste(info, "returned foreign data"))
    if (call %in% c("sweep_shared", "shared_segments")) {
      expect_false(name %in% r$value, info = paste(info, "reports the hostile name"))
    }
    if (call == "namespace_variables") expect_false(var %in% r$value, info = paste(info, "lists the hostile name"))
    # (should a call wrongly succeed, do not let it spill into the next checks)
    if (call == "registerVariables" && is.null(r$error)) releaseVariables(ns, var)
    if (call == "retrieveViews" && is.null(r$error)) releaseViews(ns, var)
  }
  invisible(outcomes)
}

# What a path is, without following links or opening FIFOs: type, mode, owner,
# size, inode, link target, content digest; for a directory, of its children too.
snapshot <- function(path) {
  one <- function(p) {
    st <- suppressWarnings(system2("stat", c("-c", shQuote("%F|%a|%u|%s|%i"), shQuote(p)), stdout = TRUE, stderr = FALSE))
    if (!length(st)) return(paste(basename(p), "absent"))
    type <- strsplit(st, "|", fixed = TRUE)[[1]][1]
    extra <- if (type == "symbolic link") Sys.readlink(p)
             else if (grepl("regular", type)) unname(tools::md5sum(p))
    paste(c(basename(p), st, extra), collapse = "|")
  }
  out <- one(path)
  if (startsWith(sub("^[^|]*\\|", "", out), "directory|")) {
    kids <- sort(list.files(path, all.files = TRUE, no.. = TRUE, full.names = TRUE))
    out <- c(out, vapply(kids, one, ""))
  }
  unname(out)
}

# The second user (root only): "pageshare-test", created if absent and then
# removed when `env` exits (after everything deferred with after = FALSE).
local_other_user <- function(env = parent.frame()) {
  skip_unless_root("a second user is created to test another user's objects")
  for (tool in c("useradd", "userdel", "setpriv", "id")) {
    skip_if(!nzchar(Sys.which(tool)), paste(tool, "is missing: another user's objects are not tested"))
  }
  name <- "pageshare-test"
  if (system2("id", c("-u", name), stdout = FALSE, stderr = FALSE) != 0L) {
    st <- system2("useradd", c("--system", "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", "/usr/sbin/nologin", name), stdout = FALSE, stderr = FALSE)
    skip_if(st != 0L, "useradd failed: another user's objects are not tested")
    defer_fn(function() {
      # (a process of that user that is still exiting keeps userdel from working)
      for (k in 1:50) {
        if (system2("userdel", name, stdout = FALSE, stderr = FALSE) == 0L) return(invisible())
        Sys.sleep(0.1)
      }
      warning("could not remove the test user ", name)
    }, env)
  }
  list(name = name,
       uid = as.integer(system2("id", c("-u", name), stdout = TRUE)),
       gid = as.integer(system2("id", c("-g", name), stdout = TRUE)))
}

# A directory under /tmp that both users can write (mode 1777), removed when
# `env` exits.
local_exchange <- function(env = parent.frame()) {
  local_base(env, mode = "1777", parent = "/tmp", use = FALSE)
}

as_user_args <- function(user) {
  c(paste0("--reuid=", user$uid), paste0("--regid=", user$gid), "--clear-groups")
}

# Run shell code as `user`.
sh_as <- function(user, code) {
  system2("setpriv", c(as_user_args(user), "sh", "-c", shQuote(code)), stdout = TRUE, stderr = TRUE)
}

# Run R code (lines) as `user` with this pageshare's library, HOME and TMPDIR in
# `xchg`. With wait = FALSE it runs in the background (it must record its own
# pid and end by itself).
rscript_as <- function(user, xchg, lines, wait = TRUE, pageshare_dir = xchg) {
  script <- tempfile("script-", tmpdir = xchg, fileext = ".R")
  writeLines(lines, script)
  Sys.chmod(script, "0644", use_umask = FALSE)
  lib <- dirname(system.file(package = "pageshare"))
  args <- c(as_user_args(user), "env", paste0("HOME=", xchg), paste0("TMPDIR=", xchg),
            paste0("R_LIBS=", paste(unique(c(lib, .libPaths())), collapse = ":")),
            paste0("PAGESHARE_DIR=", pageshare_dir), file.path(R.home("bin"), "Rscript"), "--vanilla", script)
  if (wait) {
    suppressWarnings(system2("setpriv", args, stdout = TRUE, stderr = TRUE, timeout = 60))
  } else {
    system2("setpriv", args, stdout = file.path(xchg, "bg.log"), stderr = file.path(xchg, "bg.log"), wait = FALSE)
  }
}

skip_unless_user_loads_pageshare <- function(user, xchg) {
  out <- rscript_as(user, xchg, c("library(pageshare)", "cat('pageshare loaded as', Sys.info()[['effective_user']], '\\n')"))
  skip_if_not(any(grepl(paste("pageshare loaded as", user$name), out, fixed = TRUE)),
              sprintf("user %s cannot load pageshare from %s (make the library readable: chmod -R a+rX): %s",
                      user$name, dirname(system.file(package = "pageshare")), paste(out, collapse = " ")))
}

# A process of `user` that runs `lines` (R, with `sentinel` defined and its
# files in `xchg`), says "ready" and lives until the frame `env` exits (it
# goes first: before the user and the exchange directory). Returns its pid.
local_their_process <- function(user, xchg, lines, env = parent.frame()) {
  f <- function(name) file.path(xchg, name)
  rscript_as(user, xchg, wait = FALSE, c(
    "library(pageshare)",
    sprintf("writeLines(as.character(Sys.getpid()), %s)", deparse(f("their.pid"))),
    sprintf("sentinel <- %s", paste(deparse(sentinel, control = "digits17"), collapse = "")),
    lines,
    sprintf("writeLines('ready', %s)", deparse(f("ready"))),
    sprintf("t0 <- Sys.time(); while (!file.exists(%s) && Sys.time() - t0 < 60) Sys.sleep(0.05)", deparse(f("done")))))
  wait_for_file(f("their.pid"))
  their_pid <- as.integer(readLines(f("their.pid")))
  defer_fn(function() {
    file.create(f("done"))
    deadline <- Sys.time() + 10
    while (pid_alive(their_pid) && Sys.time() < deadline) Sys.sleep(0.05)
    if (pid_alive(their_pid)) tools::pskill(their_pid, tools::SIGKILL)
  }, env, after = FALSE)
  wait_for_file(f("ready"))
  their_pid
}

pid_alive <- function(pid) {
  f <- sprintf("/proc/%d/status", pid)
  file.exists(f) && !any(grepl("^State:\\s+[ZX]", tryCatch(readLines(f), error = function(e) "State: X")))
}

# ---------------------------------------------------------------------------
# (4) hostile objects in place of one index entry

entry_kinds <- function(s) list(
  fifo = function(p) mkfifo(p),
  symlink_to_a_valid_entry = function(p) file.symlink(s$entry_x, p),
  symlink_to_dev_zero = function(p) file.symlink("/dev/zero", p),
  dangling_symlink = function(p) file.symlink(file.path(dirname(p), "nowhere"), p),
  directory = function(p) dir.create(p, mode = "0700"),
  valid_entry_mode_0644 = function(p) {
    file.copy(s$entry_x, p)
    Sys.chmod(p, "0644", use_umask = FALSE)
  },
  valid_entry_mode_0640 = function(p) {
    file.copy(s$entry_x, p)
    Sys.chmod(p, "0640", use_umask = FALSE)
  },
  entry_for_another_name = function(p) file.copy(s$entry_y, p),   # ours, 0600, well formed: for ns.y
  junk = function(p) {
    writeBin(c(charToRaw("PSI1"), as.raw(rep_len(c(0:255, 7L), 120))), p)
    Sys.chmod(p, "0600", use_umask = FALSE)
  },
  oversized = function(p) {
    writeBin(c(readBin(s$entry_x, "raw", 1024), raw(1e6)), p)
    Sys.chmod(p, "0600", use_umask = FALSE)
  },
  empty = function(p) {
    file.create(p)
    Sys.chmod(p, "0600", use_umask = FALSE)
  }
)

# Put one hostile object at pageshare.n.ns.x next to a good entry ns.good, run
# every call, and check that nothing was changed and the good entry still works.
check_hostile_entry <- function(kind, make) {
  base <- local_base()
  registerVariables("ns", list(good = c(1.5, 2.5)))
  on.exit(releaseVariables("ns", "good"), add = TRUE)
  make(entry_path(base, "ns", "x"))
  before <- snapshot(index_dir(base))
  outcomes <- check_calls("ns", "x", entry_outcomes, kind)
  expect_identical(snapshot(index_dir(base)), before, info = paste(kind, ": the index directory changed"))
  got <- retrieveViews("ns", "good")$good
  expect_identical(got, c(1.5, 2.5), info = kind)
  releaseViews("ns", "good")
  expect_true("pageshare.n.ns.good" %in% shared_segments(all = TRUE)$name, info = kind)
  invisible(outcomes)
}

test_that("a FIFO, links, a directory, open or malformed files as an index entry: classed errors or skipped", {
  s <- local_sentinels()
  kinds <- entry_kinds(s)
  for (kind in names(kinds)) check_hostile_entry(kind, kinds[[kind]])
  # the valid entries the links and copies were made of are untouched
  expect_true(all(file.exists(c(s$entry_x, s$entry_y))))
  expect_identical(with_dir(s$base, retrieveViews("ns", "x"))$x, sentinel)
  releaseViews("ns", "x")
})

test_that("a device and another user's entry under an index entry's name are refused (root)", {
  user <- local_other_user()
  s <- local_sentinels()
  kinds <- list(
    char_device_zero = function(p) stopifnot(system2("mknod", c("-m", "600", shQuote(p), "c", "1", "5")) == 0L),
    char_device_null = function(p) stopifnot(system2("mknod", c("-m", "600", shQuote(p), "c", "1", "3")) == 0L),
    valid_entry_of_another_user = function(p) {
      file.copy(s$entry_x, p)
      stopifnot(system2("chown", c(paste0(user$uid, ":", user$gid), shQuote(p))) == 0L)
    },
    fifo_of_another_user = function(p) {
      mkfifo(p)
      stopifnot(system2("chown", c(paste0(user$uid, ":", user$gid), shQuote(p))) == 0L)
    }
  )
  for (kind in names(kinds)) check_hostile_entry(kind, kinds[[kind]])
})

test_that("sweep_shared() leaves hostile temporary-file names alone", {
  base <- local_base()
  registerVariables("ns", list(good = 1:2))
  on.exit(releaseVariables("ns", "good"), add = TRUE)
  d <- index_dir(base)
  # temporary-file names of a writer that cannot be alive, old enough to be
  # removed if they were abandoned temporary files
  dead <- as.integer(readLines("/proc/sys/kernel/pid_max")) + 1L
  tmp <- function(what) file.path(d, sprintf(".tmp.%d.%s", dead, what))
  target <- file.path(base, "precious")
  writeLines("keep me", target)
  mkfifo(tmp("fifo"))
  dir.create(tmp("dir"))
  file.symlink(target, tmp("link"))
  writeLines("abandoned", tmp("file"))            # the control: this one goes
  Sys.setFileTime(c(tmp("fifo"), tmp("dir"), tmp("file")), Sys.time() - 3600)
  before <- setdiff(snapshot(d), grep("^\\.tmp\\.[0-9]+\\.file\\|", snapshot(d), value = TRUE))
  r <- attempt(sweep_shared())
  expect_null(r$error)
  expect_identical(r$value, character())
  expect_false(file.exists(tmp("file")))
  expect_identical(snapshot(d), before)
  expect_identical(readLines(target), "keep me")
  check_calls("ns", "x", entry_outcomes["shared_segments"], ".tmp objects")
})

test_that("no namespace or variable name reaches outside the index directory", {
  base <- local_base()
  s <- local_sentinels()
  # a valid entry where a name with "../" would lead if it were used as a path
  file.copy(s$entry_x, file.path(base, "pageshare.n.ns.x"))
  dir.create(index_dir(base))
  Sys.chmod(index_dir(base), "0700", use_umask = FALSE)
  odd <- c("..", ".", "../ns", "a/b", "../../ns", "x\ny", "%2E%2E", " ")
  for (ns in odd) {
    for (var in c("x", "../x", "../pageshare.n.ns.x")) {
      label <- sprintf("namespace '%s', variable '%s'", ns, var)
      r <- attempt(retrieveViews(ns, var))
      expect_s3_class(r$error, "pageshare_not_registered")
      expect_false(has_sentinel(r$value), info = label)
    }
  }
  registerVariables("../x", list(`../y` = 1:3, `a/b` = 4:5))
  on.exit(releaseVariables("../x", c("../y", "a/b")), add = TRUE)
  expect_identical(retrieveViews("../x", c("../y", "a/b")), list(`../y` = 1:3, `a/b` = 4:5))
  releaseViews("../x", c("../y", "a/b"))
  made <- list.files(base, recursive = TRUE, all.files = TRUE)
  expect_setequal(made, c("pageshare.n.ns.x", file.path(basename(index_dir(base)),
                                                       c("pageshare.n.%2E%2E%2Fx.%2E%2E%2Fy", "pageshare.n.%2E%2E%2Fx.a%2Fb"))))
})

# ---------------------------------------------------------------------------
# (4) the whole index directory hostile

check_hostile_dir <- function(kind, make, extra_check = NULL) {
  base <- local_base()
  d <- index_dir(base)
  make(d)
  before <- snapshot(d)
  outcomes <- check_calls("ns", "x", dir_outcomes, kind)
  expect_identical(snapshot(d), before, info = paste(kind, ": pageshare changed it"))
  if (!is.null(extra_check)) extra_check(d)
  invisible(outcomes)
}

test_that("a hostile index directory: every call is a permission error or skips", {
  s <- local_sentinels()
  s_before <- snapshot(index_dir(s$base))
  with_entry <- function(mode) function(d) {
    dir.create(d)
    Sys.chmod(d, mode, use_umask = FALSE)
    file.copy(s$entry_x, file.path(d, "pageshare.n.ns.x"))
  }
  kinds <- list(
    symlink_to_a_valid_index_dir = function(d) file.symlink(index_dir(s$base), d),
    mode_0777_with_a_valid_entry = with_entry("0777"),
    mode_0750_with_a_valid_entry = with_entry("0750"),
    mode_0701_with_a_valid_entry = with_entry("0701"),
    regular_file = function(d) writeLines("not a directory", d),
    fifo = function(d) mkfifo(d),
    dangling_symlink = function(d) file.symlink(file.path(dirname(d), "link-target"), d)
  )
  for (kind in names(kinds)) {
    check_hostile_dir(kind, kinds[[kind]], function(d) {
      # nothing is created through a link
      expect_false(file.exists(file.path(dirname(d), "link-target")), info = kind)
    })
  }
  expect_identical(snapshot(index_dir(s$base)), s_before)   # the real index the link led to
})

test_that("an index directory of another user is refused (root)", {
  user <- local_other_user()
  s <- local_sentinels()
  owned_by_other <- function(mode) function(d) {
    dir.create(d)
    file.copy(s$entry_x, file.path(d, "pageshare.n.ns.x"))
    stopifnot(system2("chown", c("-R", paste0(user$uid, ":", user$gid), shQuote(d))) == 0L)
    Sys.chmod(d, mode, use_umask = FALSE)
  }
  check_hostile_dir("directory of another user, 0700", owned_by_other("0700"))
  check_hostile_dir("directory of another user, 0777", owned_by_other("0777"))
})

test_that("a pageshare.dir that is not a directory is a bad-argument error; share() is unaffected", {
  base <- local_base()
  fifo <- file.path(base, "fifo")
  mkfifo(fifo)
  file <- file.path(base, "file")
  writeLines("x", file)
  all_bad <- stats::setNames(rep(list("pageshare_bad_argument"), length(dir_outcomes)), names(dir_outcomes))
  for (dir in list(fifo, file, file.path(base, "missing"), "", NA_character_, c(base, base), 1)) {
    label <- paste("pageshare.dir =", paste(format(dir), collapse = " "))
    with_dir(dir, {
      check_calls("ns", "x", all_bad, label)
      v <- share(as.double(1:10))
      expect_true(is_shared(v), info = label)
      expect_identical(unserialize(with_handles(serialize(v, NULL))), as.double(1:10), info = label)
    })
  }
})

# ---------------------------------------------------------------------------
# (4) another user's processes (root only)

test_that("another user's squatted index directory: our calls are permission errors, nothing of theirs used", {
  user <- local_other_user()
  xchg <- local_exchange()
  s <- local_sentinels()
  entry <- file.path(xchg, "entry.bin")     # a valid entry (of a live segment of ours), for them to plant
  file.copy(s$entry_x, entry)
  Sys.chmod(entry, "0644", use_umask = FALSE)
  squats <- list(
    "their directory, 0700" = "mkdir -m 0700 \"$D\" && cp \"$E\" \"$D/pageshare.n.ns.x\" && chmod 600 \"$D/pageshare.n.ns.x\"",
    "their directory, 0777" = "mkdir -m 0777 \"$D\" && cp \"$E\" \"$D/pageshare.n.ns.x\" && chmod 600 \"$D/pageshare.n.ns.x\"",
    "their link to a directory of theirs" = paste(
      "mkdir -m 0700 \"$D.real\" && cp \"$E\" \"$D.real/pageshare.n.ns.x\" && chmod 600 \"$D.real/pageshare.n.ns.x\"",
      "&& ln -s \"$D.real\" \"$D\""))
  squatted <- function(kind) {
    base <- local_base(mode = "1777", parent = "/tmp")
    d <- index_dir(base)
    out <- sh_as(user, sprintf("D=%s E=%s; %s", shQuote(d), shQuote(entry), squats[[kind]]))
    expect_true(file.exists(file.path(d, "pageshare.n.ns.x")), info = paste(kind, paste(out, collapse = " ")))
    before <- c(snapshot(d), snapshot(paste0(d, ".real")))
    check_calls("ns", "x", dir_outcomes, kind)
    expect_identical(c(snapshot(d), snapshot(paste0(d, ".real"))), before, info = kind)
  }
  for (kind in names(squats)) squatted(kind)
})

test_that("another user's R process cannot open a handle of ours, nor find our names", {
  user <- local_other_user()
  xchg <- local_exchange()
  skip_unless_user_loads_pageshare(user, xchg)
  v <- share(c(sentinel, as.double(1:1000)))
  handle <- file.path(xchg, "ours.rds")
  saveRDS(with_handles(serialize(v, NULL)), handle)
  Sys.chmod(handle, "0644", use_umask = FALSE)
  with_dir(xchg, registerVariables("ns", list(x = sentinel)))   # our entry in the shared base
  on.exit(releaseVariables("ns", "x"), add = TRUE)
  ours_before <- snapshot(index_dir(xchg))
  result <- file.path(xchg, "result.rds")
  out <- rscript_as(user, xchg, c(
    "library(pageshare)",
    "try1 <- function(expr) {",
    "  r <- tryCatch(expr, error = function(e) e)",
    "  list(class = class(r),",
    "       message = if (inherits(r, 'error')) conditionMessage(r),",
    "       data = if (inherits(r, 'error')) NULL else if (is.numeric(r)) as.double(r[1:3])",
    "              else unlist(lapply(r, function(x) if (is.numeric(x)) as.double(x[1:3]) else x)))",
    "}",
    sprintf("h <- readRDS(%s)", deparse(handle)),
    "res <- list(",
    "  handle = try1(unserialize(h)),",
    "  by_name = try1(retrieveViews('ns', 'x')),",
    "  sweep = try1(sweep_shared()),",
    "  listing = try1(shared_segments(all = TRUE)$name))",
    sprintf("saveRDS(res, %s)", deparse(result))))
  expect_true(file.exists(result), info = paste(out, collapse = "\n"))
  res <- readRDS(result)
  h <- res$handle
  expect_true("pageshare_error" %in% h$class, info = paste(h$class, collapse = " "))
  expect_true(h$class[1] %in% c("pageshare_permission", "pageshare_invalid_segment", "pageshare_segment_gone"),
              info = paste(h$class[1], h$message))
  expect_false(has_sentinel(h$data))
  # our names are not theirs: they look in their own index directory
  expect_identical(res$by_name$class[1], "pageshare_not_registered", info = res$by_name$message)
  expect_false(has_sentinel(res$by_name$data))
  expect_false("pageshare.n.ns.x" %in% res$listing$data)
  # and nothing of ours was touched
  expect_identical(snapshot(index_dir(xchg)), ours_before)
  expect_identical(with_dir(xchg, retrieveViews("ns", "x"))$x, sentinel)
  releaseViews("ns", "x")
  expect_identical(v[1:3], sentinel)
})

test_that("a handle or an index entry made by another user's process is refused, never mapped (root)", {
  user <- local_other_user()
  xchg <- local_exchange()
  skip_unless_user_loads_pageshare(user, xchg)
  f <- function(name) file.path(xchg, name)
  their_pid <- local_their_process(user, xchg, c(
    "v <- share(c(sentinel, as.double(1:1000)))",
    "registerVariables('theirs', list(x = sentinel))",
    sprintf("saveRDS(with_handles(serialize(v, NULL)), %s)", deparse(f("theirs.rds"))),
    sprintf("file.copy(file.path(getOption('pageshare.dir'), paste0('pageshare-', %d), 'pageshare.n.theirs.x'), %s)",
            user$uid, deparse(f("their-entry.bin")))))
  expect_true(pid_alive(their_pid))
  maps <- function() sum(grepl("memfd:pageshare.", readLines("/proc/self/maps"), fixed = TRUE))
  invisible(gc())
  maps_before <- maps()
  mapped_before <- shared_segments()$name
  # (c) their handle, given to us
  r <- attempt(unserialize(readRDS(f("theirs.rds"))))
  expect_s3_class(r$error, "pageshare_invalid_segment")
  expect_match(conditionMessage(r$error), sprintf("belongs to user %d", user$uid))
  expect_false(has_sentinel(r$value))
  expect_identical(maps(), maps_before)
  expect_identical(shared_segments()$name, mapped_before)
  # their index entry: in their directory we never look ...
  absent <- list(retrieveViews = "pageshare_not_registered", retrieveMetadata = "pageshare_not_registered",
                 sweep_shared = "value", shared_segments = "value",
                 namespace_listing = "pageshare_not_registered", namespace_variables = "value")
  with_dir(xchg, check_calls("theirs", "x", absent, "their entry in their index directory"))
  expect_false(dir.exists(index_dir(xchg)))
  # ... copied into ours as theirs (owner and mode kept): refused as an entry
  base <- local_base()
  registerVariables("ns", list(good = 1:2))
  on.exit(releaseVariables("ns", "good"), add = TRUE)
  maps_before <- maps()
  mapped_before <- shared_segments()$name
  p <- entry_path(base, "theirs", "x")
  stopifnot(system2("cp", c("-p", shQuote(f("their-entry.bin")), shQuote(p))) == 0L)
  expect_identical(as.integer(system2("stat", c("-c", "%u", shQuote(p)), stdout = TRUE)), user$uid)
  check_calls("theirs", "x", entry_outcomes, "their entry in our index directory")
  # ... and even as an entry of ours (0600) that a live process holds (an entry
  # nobody holds the lock of is stale, and would be removed unopened): the
  # memory file it leads to is theirs
  stopifnot(system2("chown", c("0:0", shQuote(p))) == 0L)
  Sys.chmod(p, "0600", use_umask = FALSE)
  locked <- f("locked")
  locker <- processx::process$new("sh", c("-c", 'exec 9<"$1" && flock -s 9 && : > "$2" && exec sleep 600', "sh", p, locked))
  on.exit({ locker$kill(); locker$wait() }, add = TRUE)
  wait_for_file(locked)
  entry_of_ours <- modifyList(entry_outcomes, list(
    retrieveViews = "pageshare_invalid_segment", retrieveMetadata = "pageshare_invalid_segment",
    registerVariables = "pageshare_name_taken"))   # a live process holds that name
  # (the listings may name it: it is an entry of ours, for a live segment)
  check_calls("theirs", "x", entry_of_ours[c("retrieveViews", "retrieveMetadata", "registerVariables", "sweep_shared")],
              "their locator in an entry of ours")
  err <- tryCatch(retrieveViews("theirs", "x"), error = function(e) e)
  expect_match(conditionMessage(err), sprintf("belongs to user %d", user$uid))
  expect_identical(maps(), maps_before)
  expect_identical(shared_segments()$name, mapped_before)
})

# ---------------------------------------------------------------------------
# (4) handles whose locator points at something that is not our segment

# Little-endian bytes of a whole number below 2^53, and back.
le_bytes <- function(x, size) {
  out <- raw(size)
  for (i in seq_len(size)) {
    out[i] <- as.raw(x %% 256)
    x <- x %/% 256
  }
  out
}
from_le <- function(b) sum(as.numeric(b) * 256^(seq_along(b) - 1))

# Where the locator sits in a serialized handle ("PSH2" | kind u32 | offset u64
# | length u64 | pid u32 | start u64 | fd i32 | dev u64 | ino u64 | size u64 |
# token [16] | ...), and its fields.
locator_of <- function(h) {
  pos <- grepRaw("PSH2", h, fixed = TRUE, all = TRUE)
  stopifnot(length(pos) == 1L)
  at <- pos + 24L
  list(at = at, pid = from_le(h[at + 0:3]), start = from_le(h[at + 4:11]), fd = from_le(h[at + 12:15]),
       dev = from_le(h[at + 16:23]), ino = from_le(h[at + 24:31]), size = from_le(h[at + 32:39]),
       token = paste(format(h[at + 40:55]), collapse = ""))
}
with_locator <- function(h, pid = NULL, start = NULL, fd = NULL, dev = NULL, ino = NULL, size = NULL) {
  at <- locator_of(h)$at
  if (!is.null(pid)) h[at + 0:3] <- le_bytes(pid, 4)
  if (!is.null(start)) h[at + 4:11] <- le_bytes(start, 8)
  if (!is.null(fd)) h[at + 12:15] <- le_bytes(fd, 4)
  if (!is.null(dev)) h[at + 16:23] <- le_bytes(dev, 8)
  if (!is.null(ino)) h[at + 24:31] <- le_bytes(ino, 8)
  if (!is.null(size)) h[at + 32:39] <- le_bytes(size, 8)
  h
}

# (dev, ino, size) of a path, following links (as /proc/<pid>/fd/<n> is followed).
identity_of <- function(path) {
  as.numeric(strsplit(system2("stat", c("-L", "-c", shQuote("%d %i %s"), shQuote(path)), stdout = TRUE), " ")[[1]])
}

# Open a connection to `path` (which no other descriptor of this process may
# lead to); returns it and its descriptor.
open_fd <- function(open, path) {
  fds_to <- function() {
    fds <- list.files("/proc/self/fd", full.names = TRUE)
    as.integer(basename(fds[which(Sys.readlink(fds) == normalizePath(path))]))
  }
  stopifnot(length(fds_to()) == 0L)
  con <- open()
  fd <- fds_to()
  stopifnot(length(fd) == 1L)
  list(con = con, fd = fd)
}

# Unserialize each handle in a fresh R process of this user. (A process that
# maps a segment already finds it again by its token, whatever the rest of the
# locator says: this process maps the real segments, and the receiver drops
# each view before it receives the next handle.)
receive_elsewhere <- function(handles) {
  callr::r(function(handles) {
    library(pageshare)
    lapply(handles, function(h) {
      r <- tryCatch(unserialize(h), error = function(e) e)
      out <- list(class = class(r),
                  message = if (inherits(r, "error")) conditionMessage(r),
                  data = if (!inherits(r, "error")) as.double(r[1:3]))
      rm(r)
      invisible(gc())
      stopifnot(length(pageshare::shared_segments()$name) == 0L)
      out
    })
  }, args = list(handles = handles))
}

check_refused <- function(got, label, allowed = c("pageshare_segment_gone", "pageshare_invalid_segment")) {
  expect_true("pageshare_error" %in% got$class, info = paste(label, paste(got$class, collapse = " ")))
  expect_true(got$class[1] %in% allowed, info = paste(label, got$class[1], got$message))
  expect_false(has_sentinel(got$data), info = paste(label, "returned foreign data"))
}

test_that("another user's keyed objects are never found, nor their entry under a key in our index (root)", {
  user <- local_other_user()
  xchg <- local_exchange()
  skip_unless_user_loads_pageshare(user, xchg)
  f <- function(name) file.path(xchg, name)
  their_pid <- local_their_process(user, xchg, c(
    "v <- share(c(sentinel, as.double(1:1000)), key = 'planted')",
    "k <- share(sentinel, key = TRUE)",
    sprintf("file.copy(list.files(file.path(getOption('pageshare.dir'), paste0('pageshare-', %d)), '^pageshare[.]k[.]planted[.]', full.names = TRUE), %s)",
            user$uid, deparse(f("their-entry.bin")))))
  expect_true(pid_alive(their_pid))
  # in the directory their index is in, we look only in ours
  for (key in c("planted", content_key(sentinel))) {
    r <- with_dir(xchg, attempt(shared_by_key(key)))
    expect_s3_class(r$error, "pageshare_not_registered")
    expect_false(has_sentinel(r$value))
    r <- with_dir(xchg, attempt(share(sentinel, key = key)))   # (ours, a copy of our own)
    expect_null(r$error)
    expect_true(shared_info(r$value)$owned_here)
    with_dir(xchg, release_key(key))
  }
  # their entry copied into our index, as theirs (owner and mode kept): skipped
  base <- local_base()
  share(1, key = "mine")                     # (our index directory exists)
  on.exit(release_key("mine"), add = TRUE)
  p <- file.path(index_dir(base), paste0("pageshare.k.planted.", their_pid))
  stopifnot(system2("cp", c("-p", shQuote(f("their-entry.bin")), shQuote(p))) == 0L)
  r <- attempt(shared_by_key("planted"))
  expect_s3_class(r$error, "pageshare_not_registered")
  expect_false(has_sentinel(r$value))
  # ... and as an entry of ours that a live process holds: it leads to their
  # memory file, which is refused
  stopifnot(system2("chown", c("0:0", shQuote(p))) == 0L)
  Sys.chmod(p, "0600", use_umask = FALSE)
  locked <- f("locked-key")
  locker <- processx::process$new("sh", c("-c", 'exec 9<"$1" && flock -s 9 && : > "$2" && exec sleep 600', "sh", p, locked))
  on.exit({ locker$kill(); locker$wait() }, add = TRUE)
  wait_for_file(locked)
  r <- attempt(shared_by_key("planted"))
  expect_s3_class(r$error, "pageshare_invalid_segment")
  expect_match(conditionMessage(r$error), sprintf("belongs to user %d", user$uid))
  expect_false(has_sentinel(r$value))
  r <- attempt(share(sentinel, key = "planted"))   # (their data never taken: a copy of ours)
  expect_true(shared_info(r$value)$owned_here)
  release_key("planted")
})

test_that("a handle whose locator points at a FIFO, a file, a device or another segment is refused", {
  v <- share(c(sentinel, as.double(1:1000)))
  w <- share(as.double(1:50))
  h <- with_handles(serialize(v, NULL))
  loc <- locator_of(h)
  # the fields are where this test patches them
  expect_identical(loc$pid, as.numeric(Sys.getpid()))
  link <- Sys.readlink(sprintf("/proc/self/fd/%d", loc$fd))
  expect_true(startsWith(link, paste0("/memfd:pageshare.", loc$token)), info = link)
  expect_identical(identity_of(sprintf("/proc/%d/fd/%d", Sys.getpid(), loc$fd)), c(loc$dev, loc$ino, loc$size))
  dir <- tempfile("ps-field-fds-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  fifo_path <- file.path(dir, "fifo")
  mkfifo(fifo_path)
  fifo_fd <- open_fd(function() fifo(fifo_path, "w+"), fifo_path)
  on.exit(close(fifo_fd$con), add = TRUE)
  file_path <- file.path(dir, "plain")
  writeBin(serialize(c(sentinel, as.double(1:1000)), NULL), file_path)
  file_fd <- open_fd(function() file(file_path, "rb"), file_path)
  on.exit(close(file_fd$con), add = TRUE)
  zero_fd <- open_fd(function() file("/dev/zero", "rb", raw = TRUE), "/dev/zero")
  on.exit(close(zero_fd$con), add = TRUE)
  unused <- max(as.integer(list.files("/proc/self/fd"))) + 100L
  handles <- list(
    fifo_descriptor = with_locator(h, fd = fifo_fd$fd),
    fifo_descriptor_and_identity = do.call(with_locator, c(list(h, fd = fifo_fd$fd),
      stats::setNames(as.list(identity_of(fifo_path)), c("dev", "ino", "size")))),
    file_descriptor = with_locator(h, fd = file_fd$fd),
    file_descriptor_and_identity = do.call(with_locator, c(list(h, fd = file_fd$fd),
      stats::setNames(as.list(identity_of(file_path)), c("dev", "ino", "size")))),
    dev_zero_descriptor = with_locator(h, fd = zero_fd$fd),
    another_segments_descriptor = with_locator(h, fd = locator_of(with_handles(serialize(w, NULL)))$fd),
    unused_descriptor = with_locator(h, fd = unused),
    wrong_inode = with_locator(h, ino = loc$ino + 1),
    wrong_size = with_locator(h, size = loc$size + 4096),
    wrong_start_time = with_locator(h, start = loc$start + 1),
    another_process = with_locator(h, pid = 1),
    genuine = h     # the control, last
  )
  got <- receive_elsewhere(handles)
  expect_identical(got$genuine$data, sentinel)      # the control: a genuine handle maps
  for (kind in setdiff(names(handles), "genuine")) check_refused(got[[kind]], kind)
  expect_match(got$wrong_size$message, "bytes")
})

test_that("a FIFO or an unsealed file named like the segment's memfd is refused (root)", {
  skip_unless_root("files named like a memfd are made in /")
  skip_if(file.access("/", 2) != 0, "/ is not writable")
  v <- share(c(sentinel, as.double(1:1000)))
  h <- with_handles(serialize(v, NULL))
  loc <- locator_of(h)
  # "/memfd:pageshare.<token>" is what /proc/<pid>/fd/<n> of the genuine memfd reads
  spoof <- paste0("/memfd:pageshare.", loc$token)
  skip_if(file.exists(spoof), paste(spoof, "exists"))
  on.exit(unlink(spoof), add = TRUE)
  mkfifo(spoof)
  fifo_fd <- open_fd(function() fifo(spoof, "w+"), spoof)
  fifo_handle <- do.call(with_locator, c(list(h, fd = fifo_fd$fd),
    stats::setNames(as.list(identity_of(spoof)), c("dev", "ino", "size"))))
  got_fifo <- receive_elsewhere(list(fifo = fifo_handle))$fifo
  close(fifo_fd$con)
  unlink(spoof)
  check_refused(got_fifo, "a FIFO named like the memfd")
  # a plain file with the segment's very bytes, except the data: the sentinels
  # replaced by others; only the seals tell it from the segment
  bytes <- readBin(sprintf("/proc/self/fd/%d", loc$fd), "raw", loc$size)
  at <- grepRaw(writeBin(sentinel, raw()), bytes, fixed = TRUE)
  expect_length(at, 1L)
  decoy <- -sentinel
  bytes[at + 0:23] <- writeBin(decoy, raw())
  writeBin(bytes, spoof)
  Sys.chmod(spoof, "0600", use_umask = FALSE)
  file_fd <- open_fd(function() file(spoof, "rb"), spoof)
  on.exit(close(file_fd$con), add = TRUE)
  file_handle <- do.call(with_locator, c(list(h, fd = file_fd$fd),
    stats::setNames(as.list(identity_of(spoof)), c("dev", "ino", "size"))))
  got_file <- receive_elsewhere(list(file = file_handle))$file
  check_refused(got_file, "an unsealed file named like the memfd", "pageshare_invalid_segment")
  expect_match(got_file$message, "sealed")
  expect_false(any(got_file$data %in% decoy))
})

# ---------------------------------------------------------------------------
# (6) 10,000 objects at once

open_fds <- function() as.integer(list.files("/proc/self/fd"))

# Back to plan(sequential), and the user's future.globals.maxSize back now (it
# comes back by itself only when the top-level call ends, see globals-limit.R).
end_shm_plan <- function() {
  future::plan(future::sequential)
  pageshare:::watch_globals_limit()
}

options_of_interest <- function() {
  o <- options()
  o[sort(grep("^(pageshare|future)\\.", names(o), value = TRUE))]
}

# Note: the identity cache checks every entry it holds at every share()
# (cache::evict_unused() after each insert), so sharing n objects whose sources
# stay alive costs O(n^2): 10,000 take about 25 s here, against about 13 s for
# temporaries as below (their entries are replaced when R reuses an address).

test_that("10,000 objects shared at once: all read back, sockets work, workers get them, all goes with rm() + gc()", {
  skip_if_not_installed("future")
  skip_if_not_installed("foreach")
  n <- 10000L
  opts_before <- options_of_interest()
  invisible(gc())
  fds_before <- open_fds()
  segments_before <- own_segments()
  held_before <- held_bytes_now()
  # (the sources are temporaries: see the note on the identity cache below)
  value <- function(i) i + seq_len(16) / 32
  views <- vector("list", n)
  failed <- NULL
  for (i in seq_len(n)) {
    views[[i]] <- tryCatch(share(value(i)), pageshare_too_many_segments = function(e) e)
    if (inherits(views[[i]], "error")) {
      failed <- views[[i]]
      break
    }
  }
  if (!is.null(failed)) {
    # the documented classed error, near the limit on open files only
    limit <- as.numeric(system("ulimit -Hn", intern = TRUE))
    expect_s3_class(failed, "pageshare_error")
    expect_match(conditionMessage(failed), "ulimit -n", fixed = TRUE)
    expect_gt(i, limit - 200)
    n <- i - 1L
    length(views) <- n
  }
  expect_true(all(vapply(views, is_shared, TRUE)))
  expect_true(all(vapply(seq_len(n), function(i) identical(views[[i]], value(i)), TRUE)))
  expect_length(unique(vapply(views, function(v) shared_info(v)$name, "")), n)
  # one descriptor per segment held (its own number: numbers that segments of
  # earlier tests let go meanwhile may be reused) ...
  view_fds <- vapply(views, function(v) shared_info(v)$fd, 0L)
  expect_length(unique(view_fds), n)
  expect_true(all(view_fds %in% open_fds()))
  expect_true(all(view_fds >= 1024))              # all above select()'s FD_SETSIZE
  new_fds <- setdiff(open_fds(), fds_before)
  expect_lte(length(new_fds), n + 16)             # ... and no more
  # R's sockets still work: a new cluster gets low descriptors and reads the views
  fds_now <- open_fds()
  cl <- local_cluster(1L)
  sockets <- setdiff(open_fds(), fds_now)
  expect_true(length(sockets) >= 1 && all(sockets < 1024))
  expect_identical(parallel::clusterCall(cl, function(v) sum(v), views[[n]])[[1]], sum(value(n)))
  local_sum <- sum(vapply(seq_len(n), function(i) sum(value(i)), 0))
  r <- with_handles(parallel::clusterCall(cl, function(l) {
    c(sum = sum(vapply(l, sum, 0)), shared = sum(vapply(l, pageshare::is_shared, TRUE)),
      fds = length(list.files("/proc/self/fd")))
  }, views))[[1]]
  expect_identical(r[["sum"]], local_sum)
  expect_identical(r[["shared"]], as.double(n))
  expect_lt(r[["fds"]], 100)                     # a receiver holds no descriptor per view
  # the same list through the front doors
  old <- options(pageshare.workers = 2L)
  on.exit(options(old), add = TRUE)
  future::plan(pageshare::shm_multisession, workers = 2L)
  on.exit(end_shm_plan(), add = TRUE)
  f <- future::value(future::future(c(sum = sum(vapply(views, sum, 0)),
                                      shared = sum(vapply(views, pageshare::is_shared, TRUE)))))
  expect_identical(f, c(sum = local_sum, shared = as.double(n)))
  end_shm_plan()
  registerDoShm(cores = 2)
  on.exit({ foreach::registerDoSEQ(); stop_workers() }, add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  fe <- foreach::foreach(k = 1:2) %dopar% c(sum(vapply(views, sum, 0)), sum(vapply(views, pageshare::is_shared, TRUE)))
  expect_identical(fe, rep(list(c(local_sum, as.double(n))), 2))
  foreach::registerDoSEQ()
  stop_workers()   # (the pool's own sockets, pipes and memory file go with it)
  # everything goes with the objects
  rm(views, f, fe, r)
  forget_shared()
  for (k in 1:3) invisible(gc())
  expect_identical(setdiff(own_segments(), segments_before), character())
  expect_lte(held_bytes_now(), held_before)
  expect_lte(length(setdiff(open_fds(), fds_before)), 4)
  options(old)
  expect_identical(options_of_interest(), opts_before)
})

test_that("a list of 10,000 leaves (80 MB) sent to a worker: the same result through future and foreach", {
  skip_if_not_installed("future")
  skip_if_not_installed("foreach")
  opts_before <- options_of_interest()
  invisible(gc())
  fds_before <- open_fds()
  segments_before <- own_segments()
  leaves <- lapply(1:10000, function(i) as.double(seq_len(1000)) + i)
  local_sum <- sum(vapply(leaves, sum, 0))
  on_worker <- function(leaves) {
    c(sum = sum(vapply(leaves, sum, 0)), n = length(leaves), shared = sum(vapply(leaves, pageshare::is_shared, TRUE)),
      fds = length(list.files("/proc/self/fd")))
  }
  old <- options(pageshare.workers = 2L)
  on.exit(options(old), add = TRUE)
  future::plan(pageshare::shm_multisession, workers = 2L)
  on.exit(end_shm_plan(), add = TRUE)
  f <- future::value(future::future(on_worker(leaves)))
  expect_identical(f[["sum"]], local_sum)
  expect_identical(f[["n"]], 10000)
  expect_identical(f[["shared"]], 10000)          # packed into shared segments, as the sharing rule says
  expect_lt(f[["fds"]], 100)
  end_shm_plan()
  registerDoShm(cores = 2)
  on.exit({ foreach::registerDoSEQ(); stop_workers() }, add = TRUE)
  `%dopar%` <- foreach::`%dopar%`
  fe <- foreach::foreach(k = 1:2) %dopar% on_worker(leaves)
  for (x in fe) {
    expect_identical(x[["sum"]], local_sum)
    expect_identical(x[["shared"]], 10000)
    expect_lt(x[["fds"]], 100)
  }
  foreach::registerDoSEQ()
  stop_workers()   # (the pool's own sockets, pipes and memory file go with it)
  expect_lte(length(setdiff(open_fds(), fds_before)), 4)
  rm(leaves, f, fe, x)
  forget_shared()
  for (k in 1:3) invisible(gc())
  expect_identical(setdiff(own_segments(), segments_before), character())
  options(old)
  expect_identical(options_of_interest(), opts_before)
})
