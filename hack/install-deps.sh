#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmarks use, on a fresh Debian machine, as root.
# Idempotent: does nothing when everything is there already.
set -euo pipefail
need=()
command -v ovs-vswitchd >/dev/null || need+=(openvswitch-switch)
command -v ping >/dev/null || need+=(iputils-ping)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null || need+=(nftables)
command -v ethtool >/dev/null || need+=(ethtool)
command -v ip >/dev/null || need+=(iproute2)
command -v jq >/dev/null || need+=(jq)
command -v gcc >/dev/null || need+=(gcc) # cgo for go test -race (make test's unit tier)
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian's package may start the system's Open vSwitch; ofsdn's demo and tests never use it
# (they run private instances), so leave it as it is.
command -v ovs-vswitchd >/dev/null && command -v ping >/dev/null
