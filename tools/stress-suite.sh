#!/usr/bin/env bash
# The whole suite (tools/test.sh) N times in a row (default 5) from a fresh
# clone of this repository's HEAD, with one busy loop per core running beside
# it: a suite that judges only pageshare passes on a busy machine too.
#
#   bash tools/stress-suite.sh [N]
#
# Prints each run's "R: ..." line and exits non-zero if any run failed. The
# busy loops and the clone are removed at the end.
set -uo pipefail
n=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/pageshare-stress.XXXXXX)
git clone -q "$repo" "$work/clone"
busy=()
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  busy+=("$!")
done
trap 'kill "${busy[@]}" 2>/dev/null; rm -rf "$work"' EXIT
failed=0
for i in $(seq "$n"); do
  start=$(date +%s)
  (cd "$work/clone" && bash tools/test.sh >"$work/run$i.log" 2>&1)
  rc=$?
  echo "run $i: exit $rc, $(( $(date +%s) - start )) s, $(grep -E '^R: ' "$work/run$i.log" | tail -n 1)"
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    grep -E "(Failure|Error) \(|left behind" -A4 "$work/run$i.log" | head -40
  fi
done
echo "stress: $n runs, $failed failed, load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$failed" -eq 0 ]
