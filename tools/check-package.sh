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
# Every NOTE is one we know and can say why; another fails the check.
unexplained=0
while read -r check; do
  case "$check" in
    "installed package size")
      why="the Rust core is a static library linked into pageshare.so (libs is most of the size)" ;;
    "top-level files")
      why="Cargo.toml and Cargo.lock are the Rust workspace: the crates under src/rust take their edition and pinned versions from it" ;;
    "dependencies in R code")
      why="the ::: calls are in the expressions sent to workers and in shm_multisession()'s default for workers, which run outside the package namespace (future evaluates a plan's formals outside it)" ;;
    "R code for possible problems")
      why="attach() runs on workers only for doParallel's option attachExportEnv = TRUE, which registerDoShm() honours as doParallel does" ;;
    "for future file timestamps"|"CRAN incoming feasibility")
      why="needs the network or a time server, which the check is run without" ;;
    *) why=""; unexplained=1 ;;
  esac
  grep -A4 "^\* checking $check .*NOTE$" "$work/check.log" | sed 's/^/  /'
  if [ -n "$why" ]; then echo "  -> NOTE explained: $why"; else echo "  -> NOTE not explained: say why in tools/check-package.sh or fix it"; fi
done < <(sed -n 's/^\* checking \(.*\) \.\.\. NOTE$/\1/p' "$work/check.log")
echo "R CMD check ${flags[*]} of the built tarball ($(R --version | head -n 1)): $result"
[ "$unexplained" -eq 0 ] || exit 1
