#!/usr/bin/env bash
# Product code (outside tests, test/ and bench/) must never execute OVS tools or ip.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rnE '"(ovs-vsctl|ovs-ofctl|ovs-appctl|ovs-dpctl|ip|ethtool)"|exec\.Command' --include='*.go' . \
  | grep -v '_test\.go:' | grep -vE '^\./(test|bench)/' || true)
if [ -n "$hits" ]; then
  echo "product code executes an external command (forbidden by the design):"
  echo "$hits"
  exit 1
fi
