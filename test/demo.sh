#!/usr/bin/env bash
# make demo: a private OVS (userspace datapath) in a "node" network namespace, the ofsdn-node
# daemon in that namespace, three pods (network namespaces) wired through the real ofsdn
# plugin binary exactly as a container runtime executes it, pings between every pair and
# from the host (the node namespace, through the gateway), the flows with stage names, then
# DEL of every pod and a full teardown. Exits 0 only if every ping passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=$(mktemp -d /tmp/ofsdn-demo.XXXXXX)
# Names derive from this run's directory, so two demos (or one after a crash) never collide,
# and cleanup removes only what this run created.
run=${dir##*.}
node=ofsdn-demo-$run-node
pods=(ofsdn-demo-$run-pod1 ofsdn-demo-$run-pod2 ofsdn-demo-$run-pod3)
created_pods=()
subnet=10.128.0.0/24
daemon_pid=

cleanup() {
  set +e
  for i in "${created_pods[@]}"; do
    [ -e "/var/run/netns/${pods[$i]}" ] && del_pod "$i" >/dev/null 2>&1
    ip netns del "${pods[$i]}" 2>/dev/null
  done
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  "$root/test/sandbox.sh" stop "$dir" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT

netconf() {
  printf '{"cniVersion":"1.1.0","name":"ofsdn-demo","type":"ofsdn","socket":"%s/cni.sock"}' "$dir"
}

cni() { # cni COMMAND INDEX: run the plugin binary as a runtime does
  local i=$2
  netconf | CNI_COMMAND=$1 CNI_CONTAINERID="demo-container-$i" CNI_NETNS="/var/run/netns/${pods[$i]}" \
    CNI_IFNAME=eth0 CNI_PATH="$root/bin" CNI_ARGS="K8S_POD_NAMESPACE=demo;K8S_POD_NAME=pod$((i+1))" \
    "$root/bin/ofsdn"
}
del_pod() { cni DEL "$1"; }

echo "== starting a private Open vSwitch in netns $node ($dir)"
"$root/test/sandbox.sh" start "$dir" "$node" || exit 1

echo "== starting ofsdn-node in netns $node"
ip netns exec "$node" "$root/bin/ofsdn-node" --ovsdb "unix:$dir/db.sock" --ovs-rundir "$dir" \
  --datapath-type netdev --socket "$dir/cni.sock" --data-dir "$dir/data" --pod-subnet "$subnet" \
  >"$dir/ofsdn-node.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  out=$(netconf | CNI_COMMAND=STATUS CNI_PATH="$root/bin" "$root/bin/ofsdn" 2>&1) && break
  sleep 0.1
done
if ! netconf | CNI_COMMAND=STATUS CNI_PATH="$root/bin" "$root/bin/ofsdn" >/dev/null 2>&1; then
  echo "daemon did not become ready:"; cat "$dir/ofsdn-node.log"; exit 1
fi

declare -a ips
for i in 0 1 2; do
  ip netns add "${pods[$i]}" || exit 1
  created_pods+=("$i")
  ip netns exec "${pods[$i]}" ip link set lo up
  res=$(cni ADD "$i") || { echo "ADD pod$((i+1)) failed: $res"; cat "$dir/ofsdn-node.log"; exit 1; }
  ips[$i]=$(echo "$res" | jq -r '.ips[0].address' | cut -d/ -f1)
  echo "== pod$((i+1)) wired: $(echo "$res" | jq -c '{ip: .ips[0].address, gateway: .ips[0].gateway, interfaces: [.interfaces[].name]}')"
done

fail=0
check_ping() { # check_ping LABEL NETNS DST
  if ip netns exec "$2" ping -c 2 -W 2 -i 0.2 -q "$3" >/dev/null 2>&1; then
    echo "   ok   $1"
  else
    echo "   FAIL $1"; fail=1
  fi
}
echo "== pings between every pair of pods"
for i in 0 1 2; do
  for j in 0 1 2; do
    [ "$i" = "$j" ] && continue
    check_ping "pod$((i+1)) -> pod$((j+1)) (${ips[$j]})" "${pods[$i]}" "${ips[$j]}"
  done
done
echo "== pings from the host (node namespace, via the gateway) and from pods to the gateway"
gw=10.128.0.1
for i in 0 1 2; do
  check_ping "host -> pod$((i+1)) (${ips[$i]})" "$node" "${ips[$i]}"
  check_ping "pod$((i+1)) -> gateway ($gw)" "${pods[$i]}" "$gw"
done

echo "== flows on br-int, with stage names"
ovs-ofctl -O OpenFlow13 dump-flows --names "$dir/br-int.mgmt" | sed 's/^ */   /'

echo "== DEL every pod"
for i in 0 1 2; do cni DEL "$i" && echo "   pod$((i+1)) deleted" || fail=1; ip netns del "${pods[$i]}"; done
created_pods=()
left=$(ovs-vsctl --db="unix:$dir/db.sock" list-ports br-int | grep -v '^ofsdn-gw0$' || true)
[ -n "$left" ] && { echo "ports left behind: $left"; fail=1; }

if [ "$fail" = 0 ]; then echo "== demo passed: every ping got through"; else echo "== demo FAILED"; echo "--- daemon log"; cat "$dir/ofsdn-node.log"; fi
exit $fail
