#!/usr/bin/env bash
# Runs a command inside a Debian root of another release (R and R packages from
# that release's archive), made with debootstrap on first use:
#
#   bash tools/debian-root.sh sid bash tools/test.sh       # as root: R 4.6, current futureverse
#   bash tools/debian-root.sh trixie bash tools/test.sh    # as root: Debian 13, R 4.5
#
# The command runs in a fresh copy of this repository's work tree inside the
# root (/work/pageshare.XXXXXX, removed afterwards; the root keeps its own
# build directories, so nothing built against one R is reused by another), in a private mount
# namespace (nothing is mounted on the host's side). The host's
# Rust toolchain ($HOME/.cargo, $HOME/.rustup) and /dev/shm are bind-mounted, so
# cargo works inside and segments are the host's. Roots are kept under
# $PAGESHARE_ROOTS (default /var/tmp/pageshare-roots) and reused; the packages
# are installed by tools/setup.sh inside the root, as a user of that release
# would. Needs root (debootstrap, chroot, mount).
set -euo pipefail
suite=${1:?usage: debian-root.sh SUITE COMMAND...}
shift
[ "$#" -gt 0 ] || set -- bash
[ "$(id -u)" -eq 0 ] || { echo "debian-root.sh: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${PAGESHARE_ROOTS:-/var/tmp/pageshare-roots}/$suite

# The archive the host's apt already uses (deb822 .sources or one-line format).
mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1)
  [ -n "$uri" ] || uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
                         awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' |
                         grep -v security | head -n 1)
  [ -n "$uri" ] || { echo "debian-root.sh: no Debian archive found in /etc/apt" >&2; exit 1; }
  echo "$uri"
}

if [ ! -x "$root/usr/bin/apt-get" ] || [ ! -f "$root/.pageshare-root" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
  }
  echo "== debootstrap $suite into $root"
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$(mirror)" \
    >"$root.debootstrap.log" 2>&1 || { tail -n 30 "$root.debootstrap.log"; exit 1; }
  touch "$root/.pageshare-root"
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# A snapshot of an archive may carry a Release file past its Valid-Until date;
# this machine's apt accepts it, so does the root's.
echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99pageshare-valid-until"

# The work tree as it is now (committed or not), without build products, in a
# directory of this call's own; the root's cargo target directories are kept
# across calls (cargo locks them while it builds).
keep="$root/var/cache/pageshare"
mkdir -p "$keep/target" "$keep/src-target" "$root/work"
work=$(mktemp -d "$root/work/pageshare.XXXXXX")
trap 'rm -rf "$work" "$work.ca.crt"' EXIT
# HTTPS from inside trusts what this machine trusts (pip, cargo: a machine
# behind a proxy with a CA of its own): a copy of the host's CA bundle beside
# the work tree, removed with it; the root's own store is left as it is.
ca=""
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$work.ca.crt"
  ca=${work#"$root"}.ca.crt
fi
tar -C "$repo" --exclude=./.git --exclude=./target --exclude=./src/rust/target \
    --exclude='*.o' --exclude='*.so' --exclude='*.Rcheck' --exclude='pageshare_*.tar.gz' -cf - . |
  tar -C "$work" -xf -
mkdir -p "$work/target" "$work/src/rust/target"

# Inside a private mount namespace: bind what the command needs, then chroot.
# shellcheck disable=SC2016
unshare --mount --propagation private bash -euo pipefail -c '
  root=$1; work=$2; keep=$3; ca=$4; shift 4
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount --bind /dev/shm "$root/dev/shm"
  for d in "$HOME/.cargo" "$HOME/.rustup"; do
    if [ -d "$d" ]; then mkdir -p "$root$d"; mount --bind "$d" "$root$d"; fi
  done
  mount --bind "$keep/target" "$work/target"
  mount --bind "$keep/src-target" "$work/src/rust/target"
  exec chroot "$root" /usr/bin/env -i HOME="$HOME" TERM="${TERM:-dumb}" CI="${CI:-}" \
    ${ca:+SSL_CERT_FILE="$ca" PIP_CERT="$ca" CARGO_HTTP_CAINFO="$ca"} \
    PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    LANG=C.UTF-8 bash -c "cd \"\$0\" && exec \"\$@\"" "${work#"$root"}" "$@"
' bash "$root" "$work" "$keep" "$ca" "$@"
