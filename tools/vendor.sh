#!/usr/bin/env bash
# Vendors the Rust crates the R package builds with into src/rust/vendor.tar.xz,
# so that a tarball made by `R CMD build` afterwards installs offline (see
# src/rust/build.sh). Only what the package's library needs: the workspace is
# copied without the crates' dev-dependencies (proptest, tempfile: `cargo
# test` only), and the versions are those of Cargo.lock. The tarball also
# carries that copy's Cargo.lock (Cargo.lock without the dev-dependencies'
# entries, versions unchanged: checked here), which src/rust/build.sh builds
# with `--locked`. Needs the crates once, from crates.io or cargo's cache.
#
#   bash tools/vendor.sh          # writes src/rust/vendor.tar.xz and inst/AUTHORS
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
work=$(mktemp -d /tmp/pageshare-vendor.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/rust"
cp Cargo.toml Cargo.lock "$work/"
for crate in src/rust/pageshare-*; do
  mkdir -p "$work/$crate"
  cp -R "$crate/src" "$work/$crate/"
  awk '/^\[/ { dev = ($0 == "[dev-dependencies]") } !dev' "$crate/Cargo.toml" >"$work/$crate/Cargo.toml"
done
(cd "$work" && { cargo vendor --quiet --offline vendor >/dev/null 2>&1 || cargo vendor --quiet vendor >/dev/null; })
# cargo vendor dropped the dev-dependencies' entries from the copy's
# Cargo.lock; it must not have changed a version that remains.
pairs() { awk '/^name = / { n = $3 } /^version = / { print n, $3 }' "$1" | sort; }
changed=$(pairs "$work/Cargo.lock" | comm -23 - <(pairs Cargo.lock))
if [ -n "$changed" ]; then
  echo "vendor.sh: the vendored Cargo.lock differs from Cargo.lock in: $changed" >&2
  exit 1
fi
# inst/AUTHORS names each vendored crate's licence and copyright holders, from
# the crates themselves; a change to the crates shows up as a change to it.
Rscript tools/vendored-authors.R "$work/vendor" inst/AUTHORS
tar -cJf src/rust/vendor.tar.xz -C "$work" vendor Cargo.lock
echo "vendored $(ls "$work/vendor" | tr '\n' ' ')into src/rust/vendor.tar.xz ($(du -k src/rust/vendor.tar.xz | cut -f1) KB)"
