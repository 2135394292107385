#!/usr/bin/env bash
# The package as users get it: `R CMD build`, then install the tarball into a
# temporary library (outside this repository, so cargo cannot see its
# workspace) and share a vector with it. Guards what the tarball must carry
# for its Rust build (the workspace's Cargo.toml and Cargo.lock).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
work=$(mktemp -d /tmp/pageshare-tarball.XXXXXX)
trap 'rm -rf "$work"' EXIT
R CMD build --no-build-vignettes --no-manual . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
mv pageshare_*.tar.gz "$work/"
mkdir "$work/lib"
(cd "$work" && R CMD INSTALL --no-multiarch -l lib pageshare_*.tar.gz >install.log 2>&1) ||
  { tail -30 "$work/install.log"; echo "tarball: R CMD INSTALL failed"; exit 1; }
R_LIBS="$work/lib" Rscript -e '
  library(pageshare)
  stopifnot(startsWith(find.package("pageshare"), Sys.getenv("R_LIBS")))
  x <- share(as.double(1:1e5))
  stopifnot(is_shared(x), sum(x) == 5000050000)
  cat("tarball: built, installed and shared a vector\n")'
