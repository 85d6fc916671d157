#!/usr/bin/env bash
# A private Open vSwitch (userspace datapath) in a network namespace of its own.
#
#   test/sandbox.sh start DIR [NETNS]   start ovsdb-server + ovs-vswitchd with OVS_RUNDIR=DIR
#   test/sandbox.sh stop  DIR           stop both, delete the netns (and with it the tap devices)
#
# The DB socket is DIR/db.sock, a bridge's OpenFlow management socket DIR/BRIDGE.mgmt.
# The netns name is written to DIR/netns. Nothing here touches the host's OVS or links.
set -euo pipefail

cmd=${1:?usage: sandbox.sh start|stop DIR [NETNS]}
dir=${2:?usage: sandbox.sh start|stop DIR [NETNS]}
schema=/usr/share/openvswitch/vswitch.ovsschema

start() {
  local ns=${3:-ofsdn-sb-$$}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  command -v ovs-vswitchd >/dev/null || { echo "sandbox: Open vSwitch is not installed (apt-get install -y openvswitch-switch)" >&2; exit 1; }
  ip netns add "$ns"
  echo "$ns" >"$dir/netns"
  ip netns exec "$ns" ip link set lo up
  rm -f "$dir/conf.db"
  ovsdb-tool create "$dir/conf.db" "$schema"
  ip netns exec "$ns" env OVS_RUNDIR="$dir" OVS_LOGDIR="$dir" OVS_DBDIR="$dir" \
    ovsdb-server "$dir/conf.db" --remote="punix:$dir/db.sock" --unixctl="$dir/ovsdb-server.ctl" \
    --pidfile="$dir/ovsdb-server.pid" --log-file="$dir/ovsdb-server.log" --detach --no-chdir -vconsole:off 2>>"$dir/start.log"
  ovs-vsctl --db="unix:$dir/db.sock" --no-wait init
  ip netns exec "$ns" env OVS_RUNDIR="$dir" OVS_LOGDIR="$dir" OVS_DBDIR="$dir" \
    ovs-vswitchd "unix:$dir/db.sock" --unixctl="$dir/ovs-vswitchd.ctl" \
    --pidfile="$dir/ovs-vswitchd.pid" --log-file="$dir/ovs-vswitchd.log" --detach --no-chdir -vconsole:off 2>>"$dir/start.log"
  echo "sandbox: OVS running in netns $ns, db unix:$dir/db.sock"
}

stop() {
  [ -d "$dir" ] || return 0
  for d in ovs-vswitchd ovsdb-server; do
    if [ -f "$dir/$d.pid" ]; then
      pid=$(cat "$dir/$d.pid" 2>/dev/null || true)
      # The sandbox's state is thrown away, so there is nothing to shut down cleanly.
      [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
    fi
  done
  if [ -f "$dir/netns" ]; then
    ns=$(cat "$dir/netns")
    # Userspace internal ports are tap devices that outlive vswitchd; deleting the netns removes them.
    ip netns del "$ns" 2>/dev/null || true
  fi
}

case "$cmd" in
  start) start "$@" ;;
  stop) stop ;;
  *) echo "usage: sandbox.sh start|stop DIR [NETNS]" >&2; exit 2 ;;
esac
