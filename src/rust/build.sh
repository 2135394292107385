#!/bin/sh
# Builds the Rust static library of the R package (src/Makevars runs this
# from src/):
#
#   sh rust/build.sh TARGET_DIR
#
# First checks the toolchain (cargo, and rustc of at least the version the
# workspace's Cargo.toml asks for), saying what was found and what to do.
# With rust/vendor.tar.xz (made by tools/vendor.sh and put into the tarball
# by tools/check-package.sh), the build runs offline from those crates, in a
# copy of the workspace without the crates' dev-dependencies (which only
# `cargo test` needs and which are not vendored), locked to the Cargo.lock
# the tarball carries (the workspace's, without the dev-dependencies'
# entries: the full one does not match the copy, and cargo would rewrite it);
# without it, cargo fetches the crates. Cargo runs at most 2 jobs, as CRAN
# asks of packages that build Rust. POSIX sh: R may run this with any /bin/sh.
set -e
target_dir=$1
PATH="$PATH:$HOME/.cargo/bin"
export PATH
min_major=1
min_minor=87
help="Install or update Rust with rustup (https://rustup.rs): curl https://sh.rustup.rs -sSf | sh"

if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
  echo "pageshare needs Rust to build: cargo and rustc >= $min_major.$min_minor, on PATH or in ~/.cargo/bin; none found." >&2
  echo "$help" >&2
  exit 1
fi
found=$(rustc --version)
echo "$found"
cargo --version
version=$(echo "$found" | sed -n 's/^rustc \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p')
major=${version% *}
minor=${version#* }
if [ -z "$version" ] || [ "$major" -lt "$min_major" ] ||
   { [ "$major" -eq "$min_major" ] && [ "$minor" -lt "$min_minor" ]; }; then
  echo "pageshare needs rustc >= $min_major.$min_minor; found '$found'." >&2
  echo "$help (or: rustup update)" >&2
  exit 1
fi

if [ ! -f rust/vendor.tar.xz ]; then
  # Without vendored crates cargo fetches them; offline that fails with
  # cargo's own words only, so say where a self-contained tarball comes from.
  cargo build --release --quiet --jobs 2 --manifest-path=rust/pageshare-r/Cargo.toml --target-dir="$target_dir" && exit 0
  echo "pageshare: cargo could not build the Rust crates (above); to install without network, build the tarball from a clone with 'bash tools/vendor.sh && R CMD build .', which carries the crates." >&2
  exit 1
fi

# Offline, from the vendored crates: the workspace (its root is the package's
# top folder) is copied with each crate's [dev-dependencies] left out, and
# cargo keeps its files under the build folder, not in the user's home.
work="$target_dir/vendored-build"
rm -rf "$work"
mkdir -p "$work/ws/src/rust" "$work/cargo-home"
tar -xJf rust/vendor.tar.xz -C "$work"
cp ../Cargo.toml "$work/ws/"
cp "$work/Cargo.lock" "$work/ws/Cargo.lock"
for crate in rust/pageshare-*; do
  name=${crate#rust/}
  mkdir -p "$work/ws/src/rust/$name"
  cp -R "$crate/src" "$work/ws/src/rust/$name/"
  awk '/^\[/ { dev = ($0 == "[dev-dependencies]") } !dev' "$crate/Cargo.toml" >"$work/ws/src/rust/$name/Cargo.toml"
done
CARGO_HOME="$work/cargo-home" cargo build --release --quiet --jobs 2 --offline --locked \
  --config 'source.crates-io.replace-with="vendored-sources"' \
  --config "source.vendored-sources.directory=\"$work/vendor\"" \
  --manifest-path="$work/ws/src/rust/pageshare-r/Cargo.toml" --target-dir="$target_dir"
rm -rf "$work"
