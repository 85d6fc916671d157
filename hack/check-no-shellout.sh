#!/usr/bin/env bash
# Product code (outside tests, test/ and bench/) must never execute OVS tools, ip or iptables:
# it must not even import os/exec.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rlE '"os/exec"|syscall\.Exec|exec\.Command' --include='*.go' . \
  | grep -v '_test\.go$' | grep -vE '^\./(test|bench)/' || true)
if [ -n "$hits" ]; then
  echo "product code imports os/exec (the design forbids executing external commands):"
  echo "$hits"
  exit 1
fi
