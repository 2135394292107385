#!/usr/bin/env bash
# Runs every test: the Rust core without R (cargo test: unit + proptest), then
# the R package's testthat suite against the installed package. Fails if a
# test fails or if the run left a pageshare segment in /dev/shm.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

before=$(ls /dev/shm 2>/dev/null | grep '^pageshare\.' | sort)

echo "== cargo test"
cargo test --quiet 2>&1 | grep -v '^$'
cargo_status=${PIPESTATUS[0]}

echo "== R CMD INSTALL"
R CMD INSTALL --no-multiarch . >/tmp/pageshare-install.log 2>&1 || { cat /tmp/pageshare-install.log; exit 1; }

echo "== R tests"
Rscript tools/run-r-tests.R
r_status=$?

after=$(ls /dev/shm 2>/dev/null | grep '^pageshare\.' | sort)
# New segments whose owner is gone are leaks (an anonymous name carries its owner's
# pid; segments of other live processes on the machine are not this run's).
leaked=""
for name in $(comm -13 <(echo "$before") <(echo "$after")); do
  pid=$(echo "$name" | sed -n 's/^pageshare\.a\.\([0-9]*\)\..*/\1/p')
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then leaked="$leaked $name"; fi
done
if [ -n "$leaked" ]; then
  echo "pageshare segments left in /dev/shm after the tests:"
  echo "$leaked" | tr ' ' '\n' | grep .
  r_status=1
fi
[ "$cargo_status" -eq 0 ] && [ "$r_status" -eq 0 ]
