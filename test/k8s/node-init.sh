#!/usr/bin/env bash
# PID 1 of one test node's private PID and mount namespace. test/k8s/node.go starts it as
#   nsenter --net=NODE_NETNS unshare --mount --pid --fork --mount-proc --propagation private \
#     --kill-child -- node-init.sh
# so everything it starts (containerd, shims, pods, kubelet, kube-proxy) dies with it, and
# every mount below disappears with the namespace. Nothing here changes the host: no file
# outside NODE_DIR is written, no global sysctl is set.
#
# Env: NODE, NODE_IP (dual-stack: IPv4,IPv6), NODE_DIR (state: configs, logs, overlay upper dirs), K8S_BIN (kubelet,
#   kube-proxy), CONTAINERD_BIN (containerd, ctr, shims), OVS_RUNDIR (the node's sandbox
#   OVS, seen as /var/run/openvswitch; empty on a node whose OVS is the DaemonSet's, which
#   runs it in the node's own /var/run/openvswitch), IMAGES (directory of image tarballs to import),
#   CLUSTER_CIDR (dual-stack: IPv4,IPv6).
# Signals: TERM/INT stop the node (kube-proxy, kubelet, then containerd); USR1 restarts the
#   kubelet (pods keep running).
set -euo pipefail
: "${NODE:?}" "${NODE_IP:?}" "${NODE_DIR:?}" "${K8S_BIN:?}" "${CONTAINERD_BIN:?}" "${OVS_RUNDIR?}" "${IMAGES:?}" "${CLUSTER_CIDR:?}"
D=$NODE_DIR
export PATH=$CONTAINERD_BIN:$PATH
log() { echo "node-init[$NODE] $(date +%T.%N | cut -c1-12) $*"; }

# /run (= /var/run): a tmpfs of the node's own for runc state, shim sockets, pod netns
# mounts, the CNI socket and the xtables lock.
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/openvswitch /run/netns
[ -z "$OVS_RUNDIR" ] || mount --bind "$OVS_RUNDIR" /run/openvswitch

# /etc, /opt, /var/lib: overlays on the host's (upper dirs in NODE_DIR), so the node's
# /etc/cni/net.d, /opt/cni/bin and /var/lib/ofsdn can be made without touching the host;
# each is a bind mount of a NODE_DIR directory the test reads.
for d in etc opt var/lib; do
  n=${d//\//-}
  mkdir -p "$D/ovl/$n/up" "$D/ovl/$n/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$D/ovl/$n/up,workdir=$D/ovl/$n/work" "/$d"
done
mkdir -p /etc/cni/net.d /opt/cni/bin /var/lib/ofsdn
mount --bind "$D/cni-conf" /etc/cni/net.d
mount --bind "$D/cni-bin" /opt/cni/bin
mount --bind "$D/ofsdn-data" /var/lib/ofsdn

# Every mount of the node shared (as systemd makes them on a real host; the peer groups
# are new, the host's mounts stay private to it): the HostToContainer mount of
# /var/run/netns in ofsdn-node's pod must see the netns mounts containerd makes later, and
# containerd 1.6 checks the propagation of the mount holding the unresolved path (here /).
mount --make-rshared /

# The kubelet sets vm.overcommit_memory=1, kernel.panic=10 and kernel.panic_on_oops=1 when
# they differ (machine-wide sysctls): show it files holding those values, so it never writes.
mkdir -p "$D/sysctl"
for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
  k=${kv%=*}
  f="$D/sysctl/${k//\//_}"
  echo "${kv#*=}" >"$f"
  mount --bind "$f" "/proc/sys/${kv%=*}"
done

KPID= PPID_= CPID=
start_kubelet() {
  "$K8S_BIN/kubelet" --config="$D/kubelet.yaml" --kubeconfig="$D/kubelet.kubeconfig" \
    --root-dir="$D/kubelet" --hostname-override="$NODE" --node-ip="$NODE_IP" \
    >>"$D/logs/kubelet.log" 2>&1 </dev/null &
  KPID=$!
  log "kubelet started (pid $KPID in the node)"
}
stop() {
  log "stopping"
  kill $PPID_ $KPID 2>/dev/null
  wait $PPID_ $KPID 2>/dev/null
  kill $CPID 2>/dev/null
  wait $CPID 2>/dev/null
  log "stopped"
  exit 0
}
restart_kubelet() {
  log "restarting the kubelet"
  kill "$KPID" 2>/dev/null || true
  wait "$KPID" 2>/dev/null || true
  start_kubelet
  touch "$D/kubelet-restarted"
}
trap stop TERM INT
trap restart_kubelet USR1

containerd --config "$D/containerd.toml" >>"$D/logs/containerd.log" 2>&1 </dev/null &
CPID=$!
until ctr -a "$D/containerd.sock" version >/dev/null 2>&1; do
  kill -0 "$CPID" 2>/dev/null || { log "containerd exited"; exit 1; }
  sleep 0.1
done
log "containerd up"
for i in "$IMAGES"/*.tar; do
  ctr -a "$D/containerd.sock" -n k8s.io images import "$i" >>"$D/logs/import.log" 2>&1
done
log "images imported"
start_kubelet
# kube-proxy, iptables mode, in this node's network namespace; --conntrack-* 0 keeps it from
# writing the machine-wide conntrack sysctls.
"$K8S_BIN/kube-proxy" --kubeconfig="$D/kube-proxy.kubeconfig" --hostname-override="$NODE" \
  --proxy-mode=iptables --cluster-cidr="$CLUSTER_CIDR" --conntrack-max-per-core=0 \
  --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
  >>"$D/logs/kube-proxy.log" 2>&1 </dev/null &
PPID_=$!
log "kube-proxy started"
touch "$D/started"
set +e
while kill -0 "$CPID" 2>/dev/null; do
  wait "$CPID" # returns on every trapped signal; the handlers exit or carry on
done
log "containerd exited"
exit 1
