package k8s

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ofsdn/ofsdn/test/sandbox"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// The test cluster's address plan. ClusterCIDR and ServiceCIDR are also in
// test/k8s/overlay/kustomization.yaml (the ConfigMap deploy/ofsdn.yaml runs with): keep
// them in step. Every address lives only in namespaces the test made.
const (
	// ClusterCIDR is kube-controller-manager's --cluster-cidr (node pod CIDRs are /24s).
	ClusterCIDR = "10.245.0.0/16"
	// ServiceCIDR is the API server's --service-cluster-ip-range.
	ServiceCIDR = "10.97.0.0/16"
	// UnderlayPrefix is the underlay's /24: the control plane is .1 on the bridge in its
	// namespace, node i (1-based) is .(10+i) on its br-phy.
	UnderlayPrefix = "172.31.0."
	// ControlPlaneIP is the API server's address on the underlay.
	ControlPlaneIP = UnderlayPrefix + "1"

	// A dual-stack cluster (ClusterConfig.DualStack) adds an IPv6 range to each, all ULA
	// (fd00::/8). ClusterCIDRIPv6 and the node pod CIDRs cut from it (/64s) are also in
	// test/k8s/overlay-dualstack/kustomization.yaml: keep them in step.

	// ClusterCIDRIPv6 is the IPv6 half of a dual-stack cluster's --cluster-cidr.
	ClusterCIDRIPv6 = "fd00:10:245::/56"
	// ServiceCIDRIPv6 is the IPv6 half of a dual-stack cluster's service ranges.
	ServiceCIDRIPv6 = "fd00:10:97::/112"
	// UnderlayPrefixIPv6 is a dual-stack underlay's IPv6 /64: the control plane is ::1 on
	// br0, node i (1-based) ::(10+i) (decimal digits: ofsdn-n1 is fd00:172:31::11) on the
	// node's uplink0.
	UnderlayPrefixIPv6 = "fd00:172:31::"
	// ControlPlaneIPv6 is the control plane's IPv6 address on a dual-stack underlay.
	ControlPlaneIPv6 = UnderlayPrefixIPv6 + "1"
)

// ClusterConfig says what StartCluster builds.
type ClusterConfig struct {
	// Nodes is the number of kubelet nodes (named ofsdn-n1, ofsdn-n2, ...); 0 = 2.
	Nodes int
	// ImagesDir holds image tarballs imported into every node's containerd before its
	// kubelet starts (containerd's sandbox image is ofsdn.test/pause:1).
	ImagesDir string
	// MaxPods is every kubelet's maxPods (pods the node runs at most, DaemonSet pods
	// included); 0 = the kubelet's default, 110. The node pod CIDRs are /24s (253 pod
	// addresses after the gateway), so more than 253 leaves pods without an address.
	MaxPods int
	// OVS is how the nodes get Open vSwitch: OVSHost ("", the default) starts a sandbox OVS
	// per node before its kubelet, with br-phy holding the node IP (deploy/ofsdn.yaml's
	// ovs: host, test/k8s/overlay); OVSBundled starts none: the node IP sits on its NIC
	// uplink0 and no OVS process runs in the node until the DaemonSet's ovs container
	// (ovs: bundled, test/k8s/overlay-bundled), whose ofsdn-node moves the node IP onto
	// br-phy (underlayBridge).
	OVS string
	// DualStack makes an IPv4-primary dual-stack cluster: two service ranges (ServiceCIDR,
	// ServiceCIDRIPv6), a pod CIDR per family per node (ClusterCIDR /24s, ClusterCIDRIPv6
	// /64s), every kubelet with both node IPs (both on uplink0, moved onto br-phy by
	// ofsdn-node), kube-proxy with both cluster CIDRs, and Overlay
	// test/k8s/overlay-dualstack (clusterCIDRIPv6). It needs OVS OVSBundled.
	DualStack bool
	// IPv6Only makes an IPv6-only cluster: the service range ServiceCIDRIPv6, node pod
	// CIDRs /64s of ClusterCIDRIPv6, every node IP IPv6 (on uplink0, moved onto br-phy by
	// ofsdn-node), the API server
	// advertised on ControlPlaneIPv6, and Overlay test/k8s/overlay-ipv6only (an IPv6
	// underlay, NetworkPolicy on, serviceProxy ofsdn, ovs: bundled). It needs OVS
	// OVSBundled, as that overlay runs the DaemonSet's Open vSwitch.
	IPv6Only bool
}

// Values of ClusterConfig.OVS.
const (
	// OVSHost is a sandbox Open vSwitch per node, started by the harness.
	OVSHost = ""
	// OVSBundled is Open vSwitch run by the DaemonSet's ovs container only.
	OVSBundled = "bundled"
)

// Overlay returns the kustomize overlay (a path from the repository root) that deploys
// ofsdn on a cluster of this configuration.
func (c ClusterConfig) Overlay() string {
	if c.IPv6Only {
		return "test/k8s/overlay-ipv6only"
	}
	if c.DualStack {
		return "test/k8s/overlay-dualstack"
	}
	if c.OVS == OVSBundled {
		return "test/k8s/overlay-bundled"
	}
	return "test/k8s/overlay"
}

// Cluster is a running test cluster.
type Cluster struct {
	// Config is the configuration it was started with, defaults filled in.
	Config ClusterConfig
	// ID names what the cluster made on the host: ID-cp (the control plane's network
	// namespace) and the cgroup subtree /ID. It is "ofsdn-k8s-PID-N".
	ID string
	// Dir holds everything the cluster writes (removed at the end).
	Dir string
	// Netns is the control plane's network namespace, which also holds the underlay
	// bridge br0 (ControlPlaneIP).
	Netns string
	// CP is the control plane; its Rest and Client dial into Netns.
	CP *ControlPlane
	// Nodes are the kubelet nodes, ofsdn-n1 first.
	Nodes []*Node
	// Timings are the start-up steps' durations, in order.
	Timings []Timing
}

// Timing is one measured step.
type Timing struct {
	// Step says what was measured.
	Step string
	// Duration is its wall-clock time.
	Duration time.Duration
}

// clusterSeq numbers the clusters of this test binary (atomically: tests may start them
// in parallel).
var clusterSeq atomic.Int64

// StartCluster starts a control plane and cfg.Nodes kubelet nodes with containerd and
// kube-proxy, and waits until every Node object is registered (NotReady: there is no CNI
// config yet). Everything is torn down when the test ends; a leftover (network namespace,
// cgroup, mount, process, changed host sysctl) fails the test.
func StartCluster(t *testing.T, cfg ClusterConfig) *Cluster {
	t.Helper()
	testenv.Privileged(t)
	if os.Geteuid() != 0 {
		t.Fatal("a test cluster needs root (network, mount and PID namespaces, cgroups)")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 2
	}
	if cfg.DualStack && cfg.OVS != OVSBundled {
		t.Fatal("ClusterConfig.DualStack needs OVS: OVSBundled (test/k8s/overlay-dualstack runs the DaemonSet's Open vSwitch)")
	}
	if cfg.IPv6Only && (cfg.OVS != OVSBundled || cfg.DualStack) {
		t.Fatal("ClusterConfig.IPv6Only needs OVS: OVSBundled (test/k8s/overlay-ipv6only runs the DaemonSet's Open vSwitch) and no DualStack")
	}
	for _, b := range []string{"kubelet", "kube-proxy", "kubectl"} {
		Bin(t, b)
	}
	containerdBin := filepath.Join(CacheDir(), "containerd-deb", "usr", "bin")
	loopback := filepath.Join(CacheDir(), "cni-bin", "loopback")
	for _, p := range []string{filepath.Join(containerdBin, "containerd"), loopback} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing: run test/k8s/build.sh", p)
		}
	}
	sweepStale(t)
	c := &Cluster{Config: cfg, ID: fmt.Sprintf("ofsdn-k8s-%d-%d", os.Getpid(), clusterSeq.Add(1))}
	before := hostState()
	dir, err := os.MkdirTemp("", c.ID+"-")
	must(t, err)
	c.Dir = dir
	// Registered first, so it runs last: after every process, namespace and cgroup is gone.
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("OFSDN_K8S_KEEP") != "" {
			t.Logf("cluster files kept in %s (OFSDN_K8S_KEEP)", dir)
		} else if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
		if left := c.leftovers(before); left != "" {
			t.Errorf("the cluster left things behind: %s", left)
		}
	})
	start := time.Now()

	// The control plane's namespace, with the underlay bridge.
	ns := c.ID + "-cp"
	if _, err := run("ip", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = run("ip", "netns", "del", ns) })
	c.Netns = "/var/run/netns/" + ns
	cpLinks := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "br0", "type", "bridge"},
		{"addr", "add", ControlPlaneIP + "/24", "dev", "br0"},
	}
	serviceCIDR, clusterCIDR, cpIP := ServiceCIDR, ClusterCIDR, ControlPlaneIP
	if cfg.DualStack || cfg.IPv6Only {
		// No duplicate address detection: the address is usable at once.
		cpLinks = append(cpLinks, []string{"addr", "add", ControlPlaneIPv6 + "/64", "dev", "br0", "nodad"})
		serviceCIDR, clusterCIDR = ServiceCIDR+","+ServiceCIDRIPv6, ClusterCIDR+","+ClusterCIDRIPv6
	}
	if cfg.IPv6Only {
		serviceCIDR, clusterCIDR, cpIP = ServiceCIDRIPv6, ClusterCIDRIPv6, ControlPlaneIPv6
	}
	for _, args := range append(cpLinks, []string{"link", "set", "br0", "up"}) {
		if _, err := run("ip", append([]string{"-n", ns}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	c.CP = StartControlPlane(t, ControlPlaneConfig{Dir: filepath.Join(dir, "cp"), Netns: c.Netns,
		Address: cpIP, ServiceCIDR: serviceCIDR, ClusterCIDR: clusterCIDR})
	c.Timings = append(c.Timings, Timing{"control plane ready (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; PKI made)", c.CP.Ready})
	// Registered after the control plane's clean-up, so it runs before it, once every node
	// has stopped: the nodes' API clients (kubelet, kube-proxy, ofsdn-node) died with their
	// namespaces and no FIN of theirs ever reaches the API server, whose graceful shutdown
	// then waited for those connections until its stop grace ran out (15 s of every cluster
	// test). Close them (ss -K: the kernel's SOCK_DESTROY) so it exits at once.
	t.Cleanup(func() {
		_, _ = run("ip", "netns", "exec", ns, "ss", "-K", "-tn", "state", "established", fmt.Sprintf("( sport = :%d )", apiserverPort))
	})

	server := "https://" + net.JoinHostPort(cpIP, fmt.Sprint(apiserverPort))
	must(t, c.CP.PKI.Cert("kube-proxy", "system:kube-proxy", nil, nil, nil))
	proxyKC, err := c.CP.PKI.Kubeconfig("kube-proxy", server)
	must(t, err)
	// Registered before the nodes, so it runs after every node has stopped.
	t.Cleanup(func() {
		if err := removeCgroup("/" + c.ID); err != nil {
			t.Error(err)
		}
	})
	nodesStart := time.Now()
	for i := 1; i <= cfg.Nodes; i++ {
		c.Nodes = append(c.Nodes, c.startNode(t, i, server, proxyKC, containerdBin, loopback))
	}
	ctx := context.Background()
	WaitFor(t, "every node registered", 120*time.Second, func() error {
		for _, n := range c.Nodes {
			if _, err := c.CP.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				if n.unshareExited() {
					return Permanent(fmt.Errorf("%s's node-init exited:\n%s", n.Name, n.LogTail("init", 30)))
				}
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
		return nil
	})
	c.Timings = append(c.Timings, Timing{fmt.Sprintf("%d nodes registered (containerd up, images imported, kubelet and kube-proxy started)", cfg.Nodes), time.Since(nodesStart)})
	c.Timings = append(c.Timings, Timing{"cluster up (control plane + nodes registered)", time.Since(start)})
	return c
}

// startNode makes node i: network namespace, underlay link, and with OVSHost a sandbox
// OVS whose br-phy holds the node IP (with OVSBundled, uplink0 holds it and the node has no
// OVS), configs, cgroup subtree, and node-init.sh as PID 1 of new PID and mount
// namespaces. It returns once containerd, the kubelet and kube-proxy have been started.
func (c *Cluster) startNode(t *testing.T, i int, server, proxyKC, containerdBin, loopback string) *Node {
	t.Helper()
	name := fmt.Sprintf("ofsdn-n%d", i)
	ip := fmt.Sprintf("%s%d", UnderlayPrefix, 10+i)
	if c.Config.IPv6Only {
		ip = fmt.Sprintf("%s%d", UnderlayPrefixIPv6, 10+i)
	}
	bundled := c.Config.OVS == OVSBundled
	var o *sandbox.OVS
	if bundled {
		// The node's namespace alone; its OVS will be the DaemonSet's, whose run directory
		// is the node's /run/openvswitch (set once node-init runs, below).
		o = &sandbox.OVS{Netns: fmt.Sprintf("%s-n%d", c.ID, i)}
		if _, err := run("ip", "netns", "add", o.Netns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = run("ip", "netns", "del", o.Netns) })
		if _, err := run("ip", "-n", o.Netns, "link", "set", "lo", "up"); err != nil {
			t.Fatal(err)
		}
	} else {
		o = sandbox.Start(t)
	}
	n := &Node{Name: name, IP: ip, OVS: o, Dir: filepath.Join(c.Dir, name), CgroupRoot: "/" + c.ID + "/" + name, Bundled: bundled}
	if c.Config.DualStack {
		n.IPv6 = fmt.Sprintf("%s%d", UnderlayPrefixIPv6, 10+i)
	}

	// Underlay: veth ul-N (on the control plane's br0) ↔ uplink0 (in the node); with
	// OVSHost uplink0 is on br-phy, whose internal port holds the node IP, with OVSBundled
	// uplink0 holds it; the default route points at the control plane.
	cpns := filepath.Base(c.Netns)
	host := fmt.Sprintf("ul-%d", i)
	for _, cmd := range [][]string{
		{"ip", "-n", cpns, "link", "add", host, "type", "veth", "peer", "name", "uplink0", "netns", o.Netns},
		{"ip", "-n", cpns, "link", "set", host, "master", "br0", "up"},
		// The kernel would leave TCP checksums to an offload that the userspace datapath,
		// reading uplink0 through a packet socket, never performs: compute them here.
		{"ip", "netns", "exec", cpns, "ethtool", "-K", host, "tx", "off"},
		{"ip", "-n", o.Netns, "link", "set", "uplink0", "up"},
	} {
		if _, err := run(cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	ipDev := "uplink0"
	if !bundled {
		o.Vsctl(t, "add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev",
			"--", "add-port", "br-phy", "uplink0")
		ipDev = "br-phy"
	}
	addrs := [][]string{
		{"addr", "add", ip + "/24", "dev", ipDev},
		{"link", "set", ipDev, "up"},
		{"route", "add", "default", "via", ControlPlaneIP},
	}
	if c.Config.IPv6Only {
		addrs = [][]string{
			{"addr", "add", ip + "/64", "dev", ipDev, "nodad"},
			{"link", "set", ipDev, "up"},
			{"-6", "route", "add", "default", "via", ControlPlaneIPv6},
		}
	}
	if n.IPv6 != "" {
		// The IPv6 node IP on uplink0 beside the IPv4 one (ofsdn-node moves both onto
		// br-phy); no duplicate address detection, as on br0.
		addrs = append(addrs, []string{"addr", "add", n.IPv6 + "/64", "dev", "uplink0", "nodad"},
			[]string{"-6", "route", "add", "default", "via", ControlPlaneIPv6})
	}
	for _, args := range addrs {
		if _, err := run("ip", append([]string{"-n", o.Netns}, args...)...); err != nil {
			t.Fatal(err)
		}
	}

	for _, d := range []string{"logs", "cni-conf", "cni-bin", "ofsdn-data", "kubelet", "pod-logs"} {
		must(t, os.MkdirAll(filepath.Join(n.Dir, d), 0o755))
	}
	must(t, copyFile(loopback, filepath.Join(n.CNIBinDir(), "loopback"), 0o755))
	must(t, c.CP.PKI.Cert("kubelet-"+name, "system:node:"+name, []string{"system:nodes"}, nil, nil))
	kc, err := c.CP.PKI.Kubeconfig("kubelet-"+name, server)
	must(t, err)
	must(t, os.Rename(kc, filepath.Join(n.Dir, "kubelet.kubeconfig")))
	must(t, copyFile(proxyKC, filepath.Join(n.Dir, "kube-proxy.kubeconfig"), 0o600))
	must(t, os.WriteFile(filepath.Join(n.Dir, "containerd.toml"), []byte(containerdConfig(n.Dir)), 0o644))
	must(t, os.WriteFile(filepath.Join(n.Dir, "kubelet.yaml"), []byte(kubeletConfig(n, c.CP.PKI.Path("ca.crt"), c.Config.MaxPods)), 0o644))

	if err := makeCgroup(n.CgroupRoot); err != nil {
		t.Fatal(err)
	}

	logf, err := os.OpenFile(filepath.Join(n.Dir, "logs", "init.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	cmd := exec.Command("nsenter", "--net="+o.NetnsPath(), "--",
		"unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private", "--kill-child", "--",
		"bash", filepath.Join(RepoRoot(), "test", "k8s", "node-init.sh"))
	// A dual-stack node's kubelet takes both node IPs, its kube-proxy both cluster CIDRs
	// (IPv4 first: the primary family).
	nodeIPs, clusterCIDRs := ip, ClusterCIDR
	if c.Config.IPv6Only {
		clusterCIDRs = ClusterCIDRIPv6
	}
	if n.IPv6 != "" {
		nodeIPs, clusterCIDRs = ip+","+n.IPv6, ClusterCIDR+","+ClusterCIDRIPv6
	}
	cmd.Env = append(os.Environ(), "NODE="+name, "NODE_IP="+nodeIPs, "NODE_DIR="+n.Dir,
		"K8S_BIN="+filepath.Join(CacheDir(), "bin"), "CONTAINERD_BIN="+containerdBin, "OVS_RUNDIR="+o.Dir,
		"IMAGES="+c.Config.ImagesDir, "CLUSTER_CIDR="+clusterCIDRs)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startCmd(cmd); err != nil {
		t.Fatal(err)
	}
	n.unshare, n.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(n.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"init", "kubelet", "containerd", "kube-proxy"} {
				t.Logf("---- %s %s log (last 40 lines) ----\n%s", name, l, n.LogTail(l, 40))
			}
		}
		n.stop()
	})
	WaitFor(t, name+" started", 120*time.Second, func() error {
		if n.unshareExited() {
			return Permanent(fmt.Errorf("node-init exited:\n%s", n.LogTail("init", 30)))
		}
		_, err := os.Stat(filepath.Join(n.Dir, "started"))
		return err
	})
	if bundled {
		// The DaemonSet's OVS, seen from the host through node-init's mount namespace.
		pid := n.InitPID()
		if pid == 0 {
			t.Fatalf("%s: node-init is not running", name)
		}
		o.Dir = fmt.Sprintf("/proc/%d/root/run/openvswitch", pid)
		o.DBSock = filepath.Join(o.Dir, "db.sock")
	}
	return n
}

func (n *Node) unshareExited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// containerdConfig is the node's containerd 1.6 config. The CNI directories are the node's
// own /opt/cni/bin and /etc/cni/net.d (empty until ofsdn-node writes its conflist: no
// conf_template), pod netns mounts go under /var/run/netns (where deploy/ofsdn.yaml mounts
// them from), and restrict_oom_score_adj is on because the machine lacks CAP_SYS_RESOURCE
// (runc otherwise fails: "can't get final child's PID from pipe: EOF").
func containerdConfig(dir string) string {
	return fmt.Sprintf(`version = 2
root = "%[1]s/containerd/root"
state = "%[1]s/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "%[1]s/containerd.sock"
[ttrpc]
  address = "%[1]s/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "%[1]s/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "ofsdn.test/pause:1"
  netns_mounts_under_state_dir = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`, dir)
}

// kubeletConfig is the node's KubeletConfiguration: cgroup v1 allowed (failCgroupV1),
// maxOpenFiles within the hard limit the machine allows (no CAP_SYS_RESOURCE), no image
// garbage collection (images are imported, never pulled), node status computed every
// second, serving on the node IP only, healthz on 127.0.0.1, and maxPods when it is not 0.
func kubeletConfig(n *Node, caFile string, maxPods int) string {
	extra := ""
	if maxPods > 0 {
		extra = fmt.Sprintf("maxPods: %d\n", maxPods)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s/containerd.sock
clusterDomain: cluster.local
maxOpenFiles: 20000
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
serializeImagePulls: false
podLogsDir: %s/pod-logs
rotateCertificates: false
nodeStatusUpdateFrequency: 1s
`, n.IP, caFile, n.CgroupRoot, n.Dir, n.Dir) + extra
}

// Kubectl runs kubectl (the cache's) with the admin kubeconfig inside the control plane's
// namespace and returns its combined output.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	cmd := c.KubectlCmd(args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustKubectl is Kubectl failing the test on an error.
func (c *Cluster) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlCmd returns the command Kubectl runs, for callers that stream its input or output.
func (c *Cluster) KubectlCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=" + c.Netns, "--",
		filepath.Join(CacheDir(), "bin", "kubectl"), "--kubeconfig", c.CP.AdminKubeconfig}, args...)...)
	cmd.Dir = RepoRoot()
	return cmd
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// NodeReady returns the node's Ready condition (nil if it has none yet).
func NodeReady(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// host sysctls the kubelet would write; they must be unchanged after a run.
var watchedSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

func hostState() map[string]string {
	st := map[string]string{}
	for _, s := range watchedSysctls {
		b, _ := os.ReadFile("/proc/sys/" + s)
		st[s] = strings.TrimSpace(string(b))
	}
	return st
}

// leftovers describes what of the cluster is still on the host (empty: nothing).
func (c *Cluster) leftovers(before map[string]string) string {
	var left []string
	for k, v := range hostState() {
		if before[k] != v {
			left = append(left, fmt.Sprintf("host sysctl %s changed %s → %s", k, before[k], v))
		}
	}
	if _, err := os.Stat(c.Netns); err == nil {
		left = append(left, "network namespace "+c.Netns)
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat(n.NetnsPath()); err == nil {
			left = append(left, "network namespace "+n.NetnsPath())
		}
	}
	if hs, err := cgroupHierarchies(true); err == nil {
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h, c.ID)); err == nil {
				left = append(left, "cgroup "+filepath.Join(h, c.ID))
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), c.Dir) {
		left = append(left, "mounts under "+c.Dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "NODE_DIR="+c.Dir) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p)))
		}
	}
	return strings.Join(left, "; ")
}

// sweepStale removes what an earlier test binary that was killed (no clean-up ran) left:
// control plane namespaces and cgroup subtrees named ofsdn-k8s-PID-N whose PID is gone.
// Node namespaces are test/sandbox's (ofsdn-t-*), whose processes died with that binary.
func sweepStale(t testing.TB) {
	stale := func(name string) bool {
		rest, ok := strings.CutPrefix(name, "ofsdn-k8s-")
		if !ok {
			return false
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		return err == nil && pid != os.Getpid() && !pidAlive(pid)
	}
	if out, err := run("ip", "netns", "list"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && stale(f[0]) {
				t.Logf("removing stale network namespace %s", f[0])
				_, _ = run("ip", "netns", "del", f[0])
			}
		}
	}
	if hs, err := cgroupHierarchies(true); err == nil {
		seen := map[string]bool{}
		for _, h := range hs {
			ents, _ := os.ReadDir(h)
			for _, e := range ents {
				if e.IsDir() && stale(e.Name()) && !seen[e.Name()] {
					seen[e.Name()] = true
					t.Logf("removing stale cgroup subtree /%s", e.Name())
					_ = removeCgroup("/" + e.Name())
				}
			}
		}
	}
}
