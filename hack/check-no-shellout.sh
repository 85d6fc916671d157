#!/usr/bin/env bash
# Product code (outside tests, test/ and bench/) must never execute OVS tools, ip or iptables:
# it must not even import os/exec. The one exception is cmd/ofsdn-ovs, the start of the
# DaemonSet's Open vSwitch container: it runs Open vSwitch's own daemons (ovsdb-tool,
# ovsdb-server, ovs-vswitchd) and nothing else, all through one exec.Command in ovsCmd,
# which refuses any other program.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rlE '"os/exec"|syscall\.Exec|exec\.Command' --include='*.go' . \
  | grep -v '_test\.go$' | grep -vE '^\./(test|bench)/' | grep -vx './cmd/ofsdn-ovs/main.go' || true)
if [ -n "$hits" ]; then
  echo "product code imports os/exec (the design forbids executing external commands):"
  echo "$hits"
  exit 1
fi
n=$(grep -cE 'exec\.Command(Context)?\(|syscall\.Exec|os\.StartProcess' cmd/ofsdn-ovs/main.go || true)
if [ "$n" != 1 ] || ! grep -q 'if !ovsPrograms\[name\]' cmd/ofsdn-ovs/main.go; then
  echo "cmd/ofsdn-ovs/main.go: want exactly one exec.Command, in ovsCmd behind its ovsPrograms check (found $n)"
  exit 1
fi
