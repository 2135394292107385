#!/usr/bin/env bash
# The package as users get it: its rendered help checked, the Rust crates
# vendored, `R CMD build`, the tarball installed offline, then `R CMD check`
# of the tarball (installation from the tarball, examples,
# vignette, and the test suite run the way R CMD check runs it: inside the
# package namespace). Run in
# a temporary directory outside this repository, so that cargo cannot see its
# workspace. Fails on an ERROR, a WARNING or a NOTE about non-API calls into R;
# other NOTEs are printed.
#
#   bash tools/check-package.sh [--as-cran]
#
# --as-cran runs CRAN's checks, without the parts that need the network.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
work=$(mktemp -d /tmp/pageshare-check.XXXXXX)
trap 'rm -rf "$work" src/rust/vendor.tar.xz' EXIT
src=$(pwd)
# The help as users read it: no markup left as text (tools/check-help.R).
Rscript tools/check-help.R man
# The tarball carries the Rust crates it builds with (tools/vendor.sh).
bash tools/vendor.sh
# inst/AUTHORS (rewritten by vendor.sh) must be the one committed: it is what
# the tarball says about the crates it carries.
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet -- inst/AUTHORS; then
  git diff -- inst/AUTHORS
  echo "inst/AUTHORS is out of date with the vendored crates: commit the version tools/vendor.sh wrote" >&2
  exit 1
fi
(cd "$work" && R CMD build "$src" >build.log 2>&1) || { cat "$work/build.log"; exit 1; }
# It installs with the network cut and no cargo cache, and its vignettes are
# there (needs root for the network namespace: said, not silently skipped).
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null; then
  mkdir -p "$work/offline-lib" "$work/empty-cargo-home"
  (cd "$work" && unshare -n env CARGO_HOME="$work/empty-cargo-home" \
     R CMD INSTALL -l "$work/offline-lib" pageshare_*.tar.gz >offline-install.log 2>&1) ||
    { tail -40 "$work/offline-install.log"; echo "offline install of the tarball: FAILED"; exit 1; }
  vignettes=$(R_LIBS="$work/offline-lib" Rscript -e 'cat(sort(vignette(package = "pageshare")$results[, "Item"]))')
  echo "offline install of the tarball (no network, no cargo cache): OK; vignettes: $vignettes"
  expected=$(cd vignettes && ls *.Rmd | sed 's/\.Rmd$//' | sort | tr '\n' ' ' | sed 's/ $//')
  [ "$vignettes" = "$expected" ] || { echo "vignettes installed: '$vignettes'; in vignettes/: '$expected'"; exit 1; }
else
  echo "offline install of the tarball: skipped (needs root and unshare)"
fi
flags=(--no-manual)
if [ "${1:-}" = "--as-cran" ]; then
  flags+=(--as-cran)
  export _R_CHECK_CRAN_INCOMING_REMOTE_=false _R_CHECK_SYSTEM_CLOCK_=false
fi
status=0
(cd "$work" && _R_CHECK_FORCE_SUGGESTS_=false R CMD check "${flags[@]}" pageshare_*.tar.gz >check.log 2>&1) || status=$?
result=$(grep '^Status:' "$work/check.log" || echo "Status: no result")
if [ "$status" -ne 0 ] || grep -q '^Status:.*\(ERROR\|WARNING\)' "$work/check.log" ||
   grep -qi 'non-API' "$work/check.log"; then
  cat "$work/check.log"
  for f in "$work"/pageshare.Rcheck/00install.out "$work"/pageshare.Rcheck/tests/testthat.Rout.fail; do
    [ -f "$f" ] && tail -40 "$f"
  done
  echo "R CMD check: $result"
  exit 1
fi
# Every NOTE is one we know and say why in cran-comments.md (a line
# "- checking <check>: <why>"); another fails the check.
unexplained=0
while read -r check; do
  why=$(awk -v c="- checking $check: " 'index($0, c) == 1 { print substr($0, length(c) + 1) }' cran-comments.md)
  [ -n "$why" ] || unexplained=1
  grep -A4 "^\* checking $check .*NOTE$" "$work/check.log" | sed 's/^/  /'
  if [ -n "$why" ]; then echo "  -> NOTE explained: $why"; else echo "  -> NOTE not explained: say why in cran-comments.md or fix it"; fi
done < <(sed -n 's/^\* checking \(.*\) \.\.\. NOTE$/\1/p' "$work/check.log")
echo "R CMD check ${flags[*]} of the built tarball ($(R --version | head -n 1)): $result"
[ "$unexplained" -eq 0 ] || exit 1
