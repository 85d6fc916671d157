# ofsdn — see README.md. Everything here runs as root on Debian.
GO      ?= go
BIN     := bin
GOFLAGS ?=
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all build deps test unit demo bench bench-quick bench-policy bench-policy-ab bench-services bench-services-quick bench-nodes bench-nodes-quick bench-k8s bench-k8s-quick lint clean image k8s-build e2e-k8s

all: build

# The plugin is exec'd once per CNI operation: built without cgo it is a static binary,
# with no dynamic loader or libc start-up (bare exec 2.9 -> 2.0 ms, CPU 3.0 -> 1.6 ms per
# exec here, bench/RESULTS.md). It needs nothing of cgo: it only dials a unix socket.
build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $(BIN)/ofsdn ./cmd/ofsdn
	$(GO) build $(GOFLAGS) -o $(BIN)/ofsdn-node ./cmd/ofsdn-node
	$(GO) build $(GOFLAGS) -o $(BIN)/ofsdnctl ./cmd/ofsdnctl

deps:
	./hack/install-deps.sh

# The node image, offline (hack/mkimage, go-containerregistry): a docker-archive tarball
# (`ctr images import`, `docker load`, `kind load image-archive`) for linux/GOARCH of two
# layers. The first is Open vSwitch for the DaemonSet's ovs container (`ovs: bundled`):
# ovsdb-server, ovs-vswitchd, ovsdb-tool, the shared libraries they need (mkimage -elf
# follows DT_NEEDED) and the schema, from Debian 12's packages downloaded into OVS_DEBS and
# unpacked into OVS_ROOT, never installed (hack/ovs-root.sh; /usr/sbin/ovs-vswitchd is
# the symlink Debian's update-alternatives would make), with each package's copyright
# file and the list of packages and versions. The second is ofsdn's static binaries,
# /usr/local/bin/{ofsdn-node,ofsdn,ofsdnctl,ofsdn-ovs}; entrypoint ofsdn-node. No shell.
IMAGE     ?= ofsdn.local/ofsdn:dev
IMAGE_TAR ?= $(BIN)/ofsdn-image.tar
IMAGE_BIN ?= $(BIN)/image
OVS_DEBS  ?= $(BIN)/ovs-debs
OVS_ROOT  ?= $(IMAGE_BIN)/ovs-root
image:
	mkdir -p $(IMAGE_BIN)
	./hack/ovs-root.sh $(OVS_DEBS) $(OVS_ROOT)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_BIN)/ ./cmd/ofsdn-node ./cmd/ofsdn ./cmd/ofsdnctl ./cmd/ofsdn-ovs
	$(GO) run ./hack/mkimage -o $(IMAGE_TAR) -t $(IMAGE) -entrypoint /usr/local/bin/ofsdn-node \
	  -root $(OVS_ROOT) -elf /usr/sbin/ovsdb-server -elf /usr/bin/ovsdb-tool \
	  -elf /usr/lib/openvswitch-switch/ovs-vswitchd -symlink /usr/sbin/ovs-vswitchd=/usr/lib/openvswitch-switch/ovs-vswitchd \
	  -from /usr/share/openvswitch/vswitch.ovsschema \
	  $$(awk '{print "-from /usr/share/doc/" $$1 "/copyright"}' $(OVS_ROOT)/PACKAGES) \
	  -file /usr/share/doc/ofsdn-ovs/PACKAGES=$(OVS_ROOT)/PACKAGES \
	  -dir /var/run/openvswitch -dir /var/lib/ofsdn/ovs:0750 -dir /tmp:1777 \
	  -layer \
	  -file /usr/local/bin/ofsdn-node=$(IMAGE_BIN)/ofsdn-node -file /usr/local/bin/ofsdn=$(IMAGE_BIN)/ofsdn \
	  -file /usr/local/bin/ofsdnctl=$(IMAGE_BIN)/ofsdnctl -file /usr/local/bin/ofsdn-ovs=$(IMAGE_BIN)/ofsdn-ovs

# Kubernetes v1.37.2, etcd and containerd for the real-cluster tests (test/k8s), built once
# into /var/cache/ofsdn/k8s-v1.37.2 (K8S_CACHE): about 20 minutes cold on 2 cores, then a
# few seconds.
k8s-build:
	./test/k8s/build.sh

# The real-cluster tests alone (README "Real Kubernetes tests"): a two-node cluster running
# deploy/ofsdn.yaml from `make image`, and the Node source against a real API server.
e2e-k8s: deps k8s-build
	$(GO) test -count=1 -timeout 30m -v ./test/k8s/...
	$(GO) test -count=1 -timeout 10m -v -run RealAPIServer ./topology/

# Test tiers, by one rule (test/testenv): a test that needs root (network namespaces,
# netlink, nftables, a private Open vSwitch, a real Kubernetes) calls testenv.Privileged,
# or its package's TestMain calls testenv.PrivilegedMain. With OFSDN_TEST_TIER=unit those
# skip and everything else runs anywhere, without root: `make unit`. make test runs every
# test (a privileged one fails without root, never skips), after the unit tier once more
# under the race detector.
UNIT := OFSDN_TEST_TIER=unit

# The unit tier: no root, no OVS, no Kubernetes build needed (a laptop's go is enough).
unit:
	$(UNIT) $(GO) test -count=1 ./...

# The whole suite: the unit tier under -race, then every test: unit tests, tests against real OVS
# sandboxes, end-to-end tests through libcni and the plugin binary, the real-cluster tests
# (test/k8s, after k8s-build builds Kubernetes once into its cache), the runtime
# compatibility test (./test/compat, part of ./...: it builds the libcni-v1.1/-v1.2/-v1.3
# driver modules, each pinning one containernetworking/cni generation, and drives the
# daemon's own conflist through each), and short fuzz runs (counted in executions, not
# seconds: a duration -fuzztime hits a race in the go1.26 fuzz coordinator,
# golang/go#75804).
COMPAT_MODULES := $(wildcard test/compat/libcni-v*)
# The real-cluster tests (test/k8s) run after the others, alone: they check pods' traffic
# across daemon and kubelet restarts, and with test/e2e's clusters beside them on 2 cores
# the userspace datapath itself was seen to drop pings while no daemon ran at all.
test: deps build lint k8s-build
	$(UNIT) $(GO) test -count=1 -race ./...
	$(GO) test -count=1 -timeout 40m $$($(GO) list ./... | grep -v '/test/k8s$$')
	$(GO) test -count=1 -timeout 20m ./test/k8s/
	$(GO) test -count=1 -run '^$$' -fuzz FuzzParseArgs -fuzztime 20000x ./cni/
	$(GO) test -count=1 -run '^$$' -fuzz FuzzLoadNetConf -fuzztime 20000x ./cni/
	$(GO) test -count=1 -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 20000x ./cni/server/
	$(GO) test -count=1 -run '^$$' -fuzz FuzzDecodeStore -fuzztime 20000x ./ipam/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags benchk8s ./bench/k8s/
	$(GO) vet -tags benchservices ./bench/services/
	$(GO) vet -tags benchnodes ./bench/nodescale/
	$(GO) vet -tags policyscale ./bench/policyscale/
	@for d in $(COMPAT_MODULES); do (cd $$d && $(GO) vet ./...) || exit 1; done
	./hack/check-no-shellout.sh

demo: deps build
	./test/demo.sh

# Pod-wiring benchmark (bench/, bench/RESULTS.md): ofsdn through the plugin and in-daemon,
# the shell-out baseline and the floor, a do-nothing plugin (the plugin path's floor) and
# the peer ovs-cni (built at run time from the Go module proxy at a pinned version, in a
# throw-away module under $(BENCH_OUT)/peers), interleaved on private OVS instances. Prints
# the tables; raw samples in $(BENCH_OUT)/results.json. About 7 minutes on 2 quiet cores.
# BENCH_FLAGS passes more flags, e.g. BENCH_FLAGS="-fill 10,100,1000" (about 9 minutes in all).
BENCH_OUT ?= /tmp/ofsdn-bench
BENCH_FLAGS ?=
bench: deps build
	$(GO) build $(GOFLAGS) -o $(BIN)/ofsdn-bench ./bench/cmd/ofsdn-bench
	$(GO) build $(GOFLAGS) -o $(BIN)/ofsdn-bench-noop ./bench/cmd/ofsdn-bench-noop
	$(BIN)/ofsdn-bench -bin $(BIN) -sandbox test/sandbox.sh -out $(BENCH_OUT) $(BENCH_FLAGS)

# The same, small (under a minute): CI's smoke test, failing only when a mode errors.
bench-quick: deps build
	$(GO) build $(GOFLAGS) -o $(BIN)/ofsdn-bench ./bench/cmd/ofsdn-bench
	$(GO) build $(GOFLAGS) -o $(BIN)/ofsdn-bench-noop ./bench/cmd/ofsdn-bench-noop
	$(BIN)/ofsdn-bench -quick -bin $(BIN) -sandbox test/sandbox.sh -out $(BENCH_OUT)-quick

# NetworkPolicy at scale (bench/policyscale, results in bench/RESULTS.md "NetworkPolicy at
# scale"): 1,000 policies over 10,000 pods in a real kube-apiserver, 100 of them wired on a
# sandbox node; flows, realization times, RSS. About 3 minutes on 2 busy cores; needs test/k8s/build.sh's
# binaries. POLICY_SCALE_OUT=FILE writes the figures as JSON.
bench-policy: deps build
	$(GO) test -tags policyscale -count=1 -timeout 40m -v -run TestPolicyScale ./bench/policyscale

# NetworkPolicy before/after (issue 21; bench/policyscale/ab_test.go, results in
# bench/RESULTS.md "NetworkPolicy off the agent's lock"): the before commit POLICY_BEFORE
# built from git archive into POLICY_BEFORE_BIN, against the tree, on one API server with
# 10,000 pods and 1,000 policies, interleaved: concurrency-32 ADDs with policy on and off,
# one label change quiet and while the full policy report loops; per ADD burst also the CPU
# of ofsdn-node, ovs-vswitchd and ovsdb-server and how busy the machine was. About 2-4
# minutes on 2 cores. POLICY_AB_OUT=FILE writes the samples as JSON (a relative FILE is
# under the repository's root); POLICY_AB_LOGS=DIR keeps each daemon's log and /metrics;
# POLICY_AB_ROUNDS (2), POLICY_AB_PODS (96), POLICY_AB_CONC (32), POLICY_AB_LABEL_REPS (5)
# size it.
POLICY_BEFORE     ?= ce8289d
POLICY_BEFORE_BIN ?= /tmp/ofsdn-bench-policy-before
bench-policy-ab: deps build
	rm -rf $(POLICY_BEFORE_BIN) && mkdir -p $(POLICY_BEFORE_BIN)/src
	git archive $(POLICY_BEFORE) | tar -x -C $(POLICY_BEFORE_BIN)/src
	cd $(POLICY_BEFORE_BIN)/src && CGO_ENABLED=0 $(GO) build -o ../ofsdn ./cmd/ofsdn && $(GO) build -o ../ofsdn-node ./cmd/ofsdn-node
	POLICY_AB_BEFORE=$(POLICY_BEFORE_BIN) $(GO) test -tags policyscale -count=1 -timeout 60m -v -run TestPolicyAB ./bench/policyscale

# Services in OVS against kube-proxy (bench/services, results in bench/RESULTS.md
# "Services in OVS"): on one real kube-apiserver per size, SVC_BENCH_SIZES Services x
# endpoints (1000x10,10000x5) made as API objects, then one after the other ofsdn-node
# (serviceProxy ofsdn, sandbox OVS), kube-proxy v1.37.2 --proxy-mode=iptables and
# --proxy-mode=nftables (each in a network namespace of its own): time to realize from
# empty, RSS, SVC_BENCH_CHANGES (200) EndpointSlice changes each from its own programming
# histogram. Installs iptables and nftables if missing; needs test/k8s/build.sh's
# binaries. SVC_BENCH_ROUNDS (1), SVC_BENCH_GAP (1100ms after the previous change was
# programmed), SVC_BENCH_MODES, SVC_BENCH_OUT=FILE (JSON), SVC_BENCH_LOGS=DIR (proxy logs,
# dataplane dumps). About 40 minutes on 2 cores. Never asserts a time.
SVC_BENCH_TOOLS = command -v nft >/dev/null && command -v iptables-save >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iptables; }
bench-services: deps build k8s-build
	$(SVC_BENCH_TOOLS)
	$(GO) test -tags benchservices -count=1 -timeout 120m -v -run TestServices ./bench/services

# The same, small (a few minutes): 50 Services x 5 endpoints, 20 changes, failing only
# when a mode errors, never on a timing.
bench-services-quick: deps build k8s-build
	$(SVC_BENCH_TOOLS)
	SVC_BENCH_SIZES=50x5 SVC_BENCH_CHANGES=20 $(GO) test -tags benchservices -count=1 -timeout 30m -v -run TestServices ./bench/services

# Cluster size by simulation (issue 24; bench/nodescale, results in bench/RESULTS.md
# "Cluster size by simulation"): one ofsdn-node (Kubernetes topology, sandbox OVS) against
# a real kube-apiserver holding NODE_BENCH_PEERS (1000,5000) Node objects with no kubelet:
# time until every peer's flows are on the switch, flows per peer, RSS and CPU,
# NODE_BENCH_CHANGES (200) joins and leaves timed from the API call to the switch, and no
# peer flow left once every Node is deleted. NODE_BENCH_OUT=FILE (JSON). Never asserts a time.
bench-nodes: deps build k8s-build
	$(GO) test -tags benchnodes -count=1 -timeout 60m -v -run TestNodeScale ./bench/nodescale

# The same, small (about a minute): 200 peers, 20 joins and leaves.
bench-nodes-quick: deps build k8s-build
	NODE_BENCH_PEERS=200 NODE_BENCH_CHANGES=20 NODE_BENCH_IDLE=5 $(GO) test -tags benchnodes -count=1 -timeout 20m -v -run TestNodeScale ./bench/nodescale

# Pod start-up as the kubelet sees it (issue 24; bench/k8s, results in bench/RESULTS.md
# "Pod start-up on a real cluster"): a test/k8s cluster of four nodes with kubelet maxPods
# 250, one mode each (ofsdn with NetworkPolicy on and 10 policies, ofsdn with policy off,
# the reference bridge + host-local plugins v1.10.0, hostNetwork pods), bursts of
# BENCH_K8S_BURSTS pods (one Deployment scaled from 0) onto one node at a time, the modes
# interleaved over BENCH_K8S_ROUNDS rounds (an entry N:R of BENCH_K8S_BURSTS runs R rounds
# of N). Raw samples in BENCH_K8S_OUT (JSON) and the Markdown report beside it. About 15
# minutes on 2 cores for 30,100 x 2 rounds; 249 (a full node with the daemon's pod, e.g.
# BENCH_K8S_BURSTS=30,100,249:1) adds about 10 minutes a round. Not part of make test
# (build tag benchk8s).
# Diagnosis knobs: BENCH_K8S_LOGLEVEL=debug (ofsdn-node's log level, default info) and
# BENCH_K8S_KEEP_LOGS=DIR (each burst's ofsdn-node log kept in DIR).
BENCH_K8S_BURSTS ?= 30,100
BENCH_K8S_ROUNDS ?= 2
BENCH_K8S_OUT    ?= /tmp/ofsdn-bench-k8s/results.json
bench-k8s: deps k8s-build
	BENCH_K8S_BURSTS=$(BENCH_K8S_BURSTS) BENCH_K8S_ROUNDS=$(BENCH_K8S_ROUNDS) BENCH_K8S_OUT=$(BENCH_K8S_OUT) \
	  $(GO) test -tags benchk8s -count=1 -timeout 120m -v -run 'TestBenchK8s|TestHistogramQuantile|TestLogParsers' ./bench/k8s/

# The same, small (about 2 minutes): one burst of 5 pods per mode, failing only when a mode
# errors (a pod not Ready, a failed sandbox or ADD, a leak), never on a timing.
bench-k8s-quick: deps k8s-build
	BENCH_K8S_BURSTS=5 BENCH_K8S_ROUNDS=1 BENCH_K8S_SETTLE=1s BENCH_K8S_STRICT=1 BENCH_K8S_OUT=/tmp/ofsdn-bench-k8s-quick/results.json \
	  $(GO) test -tags benchk8s -count=1 -timeout 30m -v -run 'TestBenchK8s|TestHistogramQuantile|TestLogParsers' ./bench/k8s/

clean:
	rm -rf $(BIN)
