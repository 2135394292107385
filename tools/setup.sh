#!/usr/bin/env bash
# One-command set-up on Debian 12, 13 or sid: installs R and the R packages
# pageshare uses (that release's r-cran-* packages, plus what R CMD check
# --as-cran runs: qpdf, tidy), builds and installs pageshare, then runs a short
# demo. Run as root, or as a user who may use sudo (with or without sudo in
# front: apt-get runs as root, pageshare is built and installed as the user,
# with their Rust toolchain, into their R library). Pass --no-demo to skip the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
as_root=; [ "$(id -u)" -eq 0 ] || as_root=sudo   # only apt-get needs root

packages=(r-base-dev r-cran-testthat r-cran-callr r-cran-ps r-cran-future r-cran-future.apply
          r-cran-furrr r-cran-foreach r-cran-doparallel r-cran-dorng r-cran-iterators r-cran-progressr
          r-cran-bench r-cran-data.table r-cran-tibble r-cran-runit r-cran-roxygen2
          r-cran-knitr r-cran-rmarkdown r-cran-parallelly r-cran-globals r-cran-future.batchtools
          r-cran-matrix r-cran-r6 qpdf tidy
          libjemalloc2    # tests: the page handover is off, said once, under LD_PRELOAD of jemalloc
          python3 python3-venv python3-pip)   # tools/test-python.sh: the Python module (python/)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  $as_root apt-get update -qq
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# Under sudo (which resets PATH and HOME, so the user's ~/.cargo/bin and
# ~/.rustup are not found), the rest runs as the user who asked: tools/test.sh,
# run without sudo, reinstalls into the same library.
if [ "$(id -u)" -eq 0 ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
  exec sudo -H -u "$SUDO_USER" bash tools/setup.sh "$@"
fi
# Not root: R installs into the user's library once it exists.
[ "$(id -u)" -eq 0 ] || Rscript -e 'dir.create(Sys.getenv("R_LIBS_USER"), recursive = TRUE, showWarnings = FALSE)'
if ! command -v cargo >/dev/null; then
  echo "pageshare needs a Rust toolchain (cargo, rustc >= 1.87) on PATH; install it with rustup." >&2
  exit 1
fi

echo "== building and installing pageshare"
log=/tmp/pageshare-install-$(id -u).log
R CMD INSTALL --no-multiarch . >"$log" 2>&1 || { cat "$log"; exit 1; }
echo "   installed $(Rscript -e 'cat(format(packageVersion("pageshare")))')"

if [ "${1:-}" != "--no-demo" ]; then
  echo "== demo"
  Rscript inst/examples/demo.R
fi
