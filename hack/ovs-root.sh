#!/usr/bin/env bash
# Open vSwitch for the node image (`make image`), from Debian's packages, never installed:
#   hack/ovs-root.sh DEBS_DIR ROOT_DIR
# downloads (apt-get download, as an unprivileged user would; no apt-get install) the
# packages below into DEBS_DIR (kept: a second run downloads nothing) and unpacks each with
# dpkg-deb -x into ROOT_DIR, a fresh tree that hack/mkimage's -root/-elf/-from then read.
# ROOT_DIR/PACKAGES lists what was unpacked, one "package version" a line (copied into the
# image as /usr/share/doc/ofsdn-ovs/PACKAGES, beside each package's copyright file).
#
# The list is Open vSwitch 3.1's two packages and the shared-library packages that
# ovsdb-server, ovs-vswitchd and ovsdb-tool need, transitively (readelf -d / ldd on the
# unpacked binaries; openvswitch-switch's Depends name the direct ones: libbpf1, libc6,
# libcap-ng0, libnuma1, libssl3, libunbound8, libxdp1; those need libelf1, zlib1g,
# libevent-2.1-7, libnettle8, libhogweed6, libgmp10). mkimage -elf fails naming any
# library missing from the tree, so a Debian update that adds one is caught at build time.
# Debian 12 (bookworm) only: the machine's apt sources decide which versions come.
set -euo pipefail
DEBS=${1:?usage: ovs-root.sh DEBS_DIR ROOT_DIR}
ROOT=${2:?usage: ovs-root.sh DEBS_DIR ROOT_DIR}
PKGS=(openvswitch-switch openvswitch-common libc6 libssl3 libcap-ng0 libnuma1 libxdp1 libbpf1
  libunbound8 libelf1 zlib1g libevent-2.1-7 libnettle8 libhogweed6 libgmp10)
. /etc/os-release
if [ "${VERSION_CODENAME:-}" != bookworm ]; then
  echo "ovs-root.sh: this machine's apt is $PRETTY_NAME; the image's package list is Debian 12 (bookworm)'s" >&2
  exit 1
fi
mkdir -p "$DEBS"
arch=$(dpkg --print-architecture)
# Each package's candidate version, from one apt-cache call: "package version" lines.
declare -A ver
candidates() {
  while read -r p v; do ver[$p]=$v; done < <(apt-cache policy "${PKGS[@]}" |
    awk '/^[^ ]/ {sub(":$", "", $1); p=$1} /Candidate:/ {print p, $2}')
}
candidates
# A fresh machine whose packages were all there already may have empty package lists:
# as root, fetch them once (what hack/install-deps.sh does before it installs anything).
for p in "${PKGS[@]}"; do
  if { [ -z "${ver[$p]:-}" ] || [ "${ver[$p]}" = "(none)" ]; } && [ "$(id -u)" = 0 ]; then
    echo "ovs-root.sh: no candidate version of $p: apt-get update" >&2
    apt-get update -qq
    candidates
    break
  fi
done
want=()
for p in "${PKGS[@]}"; do
  v=${ver[$p]:-}
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then
    echo "ovs-root.sh: no candidate version of $p: run apt-get update" >&2
    exit 1
  fi
  # The file name apt-get download gives: the epoch's ':' as %3a.
  [ -s "$DEBS/${p}_${v//:/%3a}_$arch.deb" ] || want+=("$p=$v")
done
if [ ${#want[@]} -gt 0 ]; then
  # -o APT::Sandbox::User=root: the _apt user cannot write into a root-owned build directory.
  (cd "$DEBS" && apt-get download -q -o APT::Sandbox::User=root "${want[@]}" >/dev/null)
fi
rm -rf "$ROOT"
mkdir -p "$ROOT"
: >"$ROOT/PACKAGES"
for p in "${PKGS[@]}"; do
  v=${ver[$p]}
  dpkg-deb -x "$DEBS/${p}_${v//:/%3a}_$arch.deb" "$ROOT"
  echo "$p $v" >>"$ROOT/PACKAGES"
done
