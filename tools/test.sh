#!/usr/bin/env bash
# Runs every test: the .Call table checked against its functions and
# callers (tools/check-entry-points.R), the Rust core without R (cargo test: unit + proptest; cargo
# fmt --check and cargo clippy -D warnings must pass too), then
# the R package's testthat suite against the installed package, then the code
# blocks of README and of the Getting-started vignette, then the Python
# module's tests (tools/test-python.sh; skipped without python3-venv). Fails if a
# test fails or if the run left anything of pageshare behind: a process that
# still holds a segment (memfd), an index entry, or a file in /dev/shm.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# Every process this run starts inherits this mark (workers are re-parented
# when their master dies, so ancestry cannot tell them), and only those count:
# other R sessions on the machine (another run, a CI stage in a chroot) may
# hold segments of their own meanwhile.
export PAGESHARE_TEST_RUN="$$-$(date +%s%N)"
started_by_this_run() {
  tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qx "PAGESHARE_TEST_RUN=$PAGESHARE_TEST_RUN"
}

# An index entry is held by the flock of the process that shares under it
# (/proc/locks names it by device and inode); one held only by processes
# outside this run belongs to that other run. An entry nobody holds counts.
held_by_another_run() {
  local dev ino holders pid
  read -r dev ino < <(stat -c '%d %i' "$1" 2>/dev/null) || return 1
  dev=$(printf '%02x:%02x:%d' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$ino")
  holders=$(awk -v id="$dev" '{ for (i = 2; i < NF; i++) if ($i == id) print $(i - 1) }' /proc/locks)
  [ -n "$holders" ] || return 1
  for pid in $holders; do started_by_this_run "$pid" && return 1; done
  return 0
}

# What holds or names pageshare segments now: processes of this run with a
# pageshare memfd open ("pid"), index entries and files in /dev/shm.
pageshare_leftovers() {
  for fd in /proc/[0-9]*/fd/*; do
    case "$(readlink "$fd" 2>/dev/null)" in /memfd:pageshare.*) echo "${fd#/proc/}" | cut -d/ -f1 ;; esac
  done | sort -u | while read -r pid; do
    started_by_this_run "$pid" && echo "process $pid"
  done
  for entry in /dev/shm/pageshare-"$(id -u)"/*; do
    [ -e "$entry" ] && ! held_by_another_run "$entry" && echo "index entry ${entry##*/}"
  done
  ls -A /dev/shm 2>/dev/null | grep '^pageshare\.' | sed 's/^/file /'
}
before=$(pageshare_leftovers | sort)

echo "== the .Call table against its functions and callers"
Rscript tools/check-entry-points.R .
table_status=$?

echo "== cargo test"
cargo test --quiet 2>&1 | grep -v '^$'
cargo_status=${PIPESTATUS[0]}

echo "== cargo fmt --check, cargo clippy"
cargo fmt --check >/dev/null 2>&1 || { echo "unformatted Rust: run cargo fmt"; cargo_status=1; }
cargo clippy --quiet --all-targets -- -D warnings || cargo_status=1

echo "== R CMD INSTALL"
log=/tmp/pageshare-install-$(id -u).log
R CMD INSTALL --no-multiarch . >"$log" 2>&1 || { cat "$log"; exit 1; }

echo "== R tests"
# Every R process of the tests makes its temporary directory in one of this
# run's own, removed at the end: a process the tests kill (a worker, a
# master) cannot remove its own.
test_tmp=$(mktemp -d /tmp/pageshare-test-tmp.XXXXXX)
TMPDIR="$test_tmp" Rscript tools/run-r-tests.R
r_status=$?
echo "== README's and Getting started's code, as written"
TMPDIR="$test_tmp" Rscript tools/run-doc-examples.R || r_status=1
echo "== Python: pip install ./python in a venv, pytest (round trips with the R just installed)"
py_status=0
TMPDIR="$test_tmp" bash tools/test-python.sh || py_status=1

after=$(pageshare_leftovers | sort)
leaked=$(comm -13 <(echo "$before") <(echo "$after") | grep .)
if [ -n "$leaked" ]; then
  # Only what stays counts: a process that was exiting (or another user's of
  # the machine, busy for a moment) lets go within seconds.
  sleep 3
  leaked=$(comm -12 <(echo "$leaked") <(pageshare_leftovers | sort) | grep .)
fi
if [ -n "$leaked" ]; then
  echo "pageshare left behind after the tests (segments held, index entries, files):"
  echo "$leaked"
  r_status=1
fi
rm -rf "$test_tmp"
[ "$table_status" -eq 0 ] && [ "$cargo_status" -eq 0 ] && [ "$r_status" -eq 0 ] && [ "$py_status" -eq 0 ]
