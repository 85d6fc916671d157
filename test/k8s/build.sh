#!/usr/bin/env bash
# Builds the real Kubernetes the cluster tests run (test/k8s), once, into a cache directory
# outside the repository, keyed by version; later runs find the binaries and return at once.
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl v1.37.2
#     from a wrapper module requiring k8s.io/kubernetes with every k8s.io/<staging> replaced by
#     its published v0.37.2 (CGO_ENABLED=0; about 20 min cold on 2 cores, then cached);
#   etcd v3.7.3 from a wrapper module requiring go.etcd.io/etcd/server/v3;
#   containerd unpacked from Debian's package (apt-get download + dpkg -x), runc installed;
#   the reference loopback CNI plugin (containerd's CRI needs it for the pod's lo), and the
#   reference bridge and host-local plugins of the same release (make bench-k8s's baseline,
#   what flannel delegates to; no test uses them).
# Env: K8S_CACHE (default /var/cache/ofsdn/k8s-v1.37.2). Needs root (apt-get) and the Go proxy.
set -euo pipefail
V=1.37.2
H=${K8S_CACHE:-/var/cache/ofsdn/k8s-v$V}
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
export PATH=/usr/local/go/bin:$PATH
mkdir -p "$H"/bin "$H"/kbuild "$H"/etcdbuild "$H"/cni-bin "$H"/debs
T() { local s; s=$(date +%s); "$@"; echo "[k8s-build] $(($(date +%s)-s))s: $*" >&2; }

# Debian packages: runc and iptables installed (kube-proxy and runc need them on the node);
# containerd only unpacked, so the machine's own containerd (if any) is untouched.
command -v runc >/dev/null && command -v iptables >/dev/null && command -v nsenter >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runc iptables util-linux; }
if [ ! -x "$H"/containerd-deb/usr/bin/containerd ]; then
  (cd "$H"/debs && rm -f containerd_*.deb && apt-get download containerd && dpkg -x containerd_*.deb "$H"/containerd-deb)
fi

# Kubernetes: wrapper module
cd "$H"/kbuild
if [ ! -f go.sum ]; then
  M=$(go mod download -json k8s.io/kubernetes@v$V | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  { printf 'module ofsdn.test/kbuild\n\ngo 1.26.0\n\ngodebug default=go1.26\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' $V
    grep '=> ./staging/src/' "$M" | awk -v v=0.${V#1.} '{print "\t"$1" => "$1" v"v}'
    echo ')'; } > go.mod.tmp
  mv go.mod.tmp go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools.go
  T go mod tidy
fi
MINOR=$(echo $V | cut -d. -f2); LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done
CMDS=""
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  [ -x "$H"/bin/$c ] || CMDS="$CMDS k8s.io/kubernetes/cmd/$c"
done
# shellcheck disable=SC2086
[ -z "$CMDS" ] || T go build -trimpath -ldflags "$LD" -o "$H"/bin/ $CMDS

# etcd: its server/v3 module has replace directives of its own, hence a wrapper module too
cd "$H"/etcdbuild
if [ ! -x "$H"/bin/etcd ]; then
  printf 'module ofsdn.test/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v3.7.3\n' > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3/etcdmain"\n' > tools.go
  T go mod tidy
  T go build -trimpath -ldflags "-s -w" -o "$H"/bin/etcd go.etcd.io/etcd/server/v3
fi

# the reference loopback plugin (containerd's CRI runs it for every sandbox's lo)
[ -x "$H"/cni-bin/loopback ] || T env GOBIN="$H"/cni-bin go install -trimpath -ldflags "-s -w" \
  github.com/containernetworking/plugins/plugins/main/loopback@v1.10.0
# the reference bridge + host-local plugins (bench/k8s's baseline mode), same pinned release
{ [ -x "$H"/cni-bin/bridge ] && [ -x "$H"/cni-bin/host-local ]; } || T env GOBIN="$H"/cni-bin go install -trimpath -ldflags "-s -w" \
  github.com/containernetworking/plugins/plugins/main/bridge@v1.10.0 \
  github.com/containernetworking/plugins/plugins/ipam/host-local@v1.10.0
echo "[k8s-build] binaries in $H/bin, containerd in $H/containerd-deb/usr/bin" >&2
