//go:build benchnodes

// Package benchnodes measures cluster size by simulation (issue 24): one ofsdn-node with
// the Kubernetes topology on a sandbox OVS, against one real kube-apiserver holding
// NODE_BENCH_PEERS (default 1000 and 5000, one run each) Node objects with no kubelet
// behind them: pod CIDRs from 10.64.0.0/10 (this node 10.64.0.0/24, peer i 10.64.0.0 +
// (i+1)·256) and InternalIPs from 172.20.0.0/16, never routed anywhere (the tunnel flows
// name them; no packet is sent to them). Per size:
//
//   - realize: every peer Node created through the API (16 writers, spec.podCIDRs, then
//     status.addresses), from the first write until every peer's flows are on the switch
//     (peer-owned flows counted by their cookie's owner kind, flows.OwnerPeer, in
//     ovs-ofctl dump-flows every 500 ms); flows per peer;
//   - RSS (VmRSS) with every peer there, and the daemon's CPU (utime+stime) over a quiet
//     NODE_BENCH_IDLE (20 s) window and over the realization;
//   - NODE_BENCH_CHANGES (200) joins and as many leaves, one at a time: a join is timed
//     from the Node's create call until its remote flow (nw_dst=its pod CIDR) is on the
//     switch, a leave from the delete call until that flow is gone; the switch is polled
//     with ovs-ofctl dump-flows filtered by the pod CIDR (one exec every 5 ms or so:
//     the figures carry that resolution);
//   - every peer Node deleted: no peer-owned flow may be left (a Node deleted leaves no
//     flow), checked, as is the record of peer owner ids emptying.
//
// Times are reported, never asserted; an error or a flow left behind fails the test.
// NODE_BENCH_OUT=FILE writes the figures as JSON. Run it with `make bench-nodes` (or
// bench-nodes-quick). Results: bench/RESULTS.md "Cluster size by simulation".
package benchnodes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	benchk8s "github.com/ofsdn/ofsdn/bench/k8s"
	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/test/harness"
	"github.com/ofsdn/ofsdn/test/kapi"
	"github.com/ofsdn/ofsdn/test/testenv"
)

const (
	selfName    = "scale-self"
	selfSubnet  = "10.64.0.0/24"
	clusterCIDR = "10.64.0.0/10"
	apiAddr     = "172.31.0.1"
)

// TestMain removes the binaries the test built once it is done.
func TestMain(m *testing.M) {
	testenv.PrivilegedMain(m)
	code := m.Run()
	harness.RemoveBinaries()
	os.Exit(code)
}

// podCIDR is peer i's pod subnet: the (i+1)th /24 of clusterCIDR (i < 16383).
func podCIDR(i int) string {
	base := netip.MustParseAddr("10.64.0.0").As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(i+1) << 8
	return fmt.Sprintf("%d.%d.%d.0/24", n>>24, n>>16&0xff, n>>8&0xff)
}

// nodeIP is peer i's InternalIP in 172.20.0.0/16 (i < 63750).
func nodeIP(i int) string { return fmt.Sprintf("172.20.%d.%d", i/250, 1+i%250) }

// Result is one size's figures.
type Result struct {
	Peers          int       `json:"peers"`
	RealizeSeconds float64   `json:"realize_s"`
	PeerFlows      int       `json:"peer_flows"`
	FlowsPerPeer   float64   `json:"flows_per_peer"`
	AllFlows       int       `json:"all_flows"`
	RSSMiB         float64   `json:"rss_mib"`
	RealizeCPU     float64   `json:"realize_cpu_s"`
	IdleCPUPercent float64   `json:"idle_cpu_percent"`
	IdleSeconds    float64   `json:"idle_s"`
	JoinMs         []float64 `json:"join_ms"`
	LeaveMs        []float64 `json:"leave_ms"`
	DeleteAllS     float64   `json:"delete_all_s"`
	LoadAvg        []string  `json:"loadavg"`
}

type env struct {
	t     *testing.T
	node  *harness.Node
	admin kubernetes.Interface
}

// ofctl runs ovs-ofctl against the sandbox's br-int.
func (e *env) ofctl(args ...string) (string, error) {
	cmd := exec.Command("ovs-ofctl", append([]string{"-O", "OpenFlow13"}, args...)...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+e.node.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ovs-ofctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// flowCounts counts the flows on br-int: all, and those owned by peers (cookie owner kind
// flows.OwnerPeer).
func (e *env) flowCounts() (all, peer int, err error) {
	out, err := e.ofctl("dump-flows", "--no-stats", e.node.Mgmt())
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(out, "\n") {
		i := strings.Index(l, "cookie=0x")
		if i < 0 {
			continue
		}
		all++
		f := l[i+len("cookie=0x"):]
		if j := strings.IndexAny(f, ", "); j >= 0 {
			f = f[:j]
		}
		c, err := strconv.ParseUint(f, 16, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("cookie in %q: %v", l, err)
		}
		if flows.OwnerKind((c&flows.CookieOwnerKindMask)>>32) == flows.OwnerPeer {
			peer++
		}
	}
	return all, peer, nil
}

// hasRemote reports whether br-int holds a flow for destination cidr (the peer's remote
// flow).
func (e *env) hasRemote(cidr string) (bool, error) {
	out, err := e.ofctl("dump-flows", "--no-stats", e.node.Mgmt(), "ip,nw_dst="+cidr)
	if err != nil {
		return false, err
	}
	return strings.Contains(out, "nw_dst="+cidr), nil
}

func (e *env) createNode(ctx context.Context, name, cidr, ip string) error {
	n, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of Node %s: %w", name, err)
	}
	return nil
}

// waitFor polls cond every 5 ms (the ovs-ofctl exec is most of each round) for up to limit.
func waitFor(limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNodeScale(t *testing.T) {
	var sizes []int
	for _, s := range strings.Split(benchk8s.EnvStr("NODE_BENCH_PEERS", "1000,5000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 16000 {
			t.Fatalf("NODE_BENCH_PEERS: %q: want peer counts 1..16000, comma-separated", s)
		}
		sizes = append(sizes, n)
	}
	changes := benchk8s.EnvInt("NODE_BENCH_CHANGES", 200)
	idle := time.Duration(benchk8s.EnvInt("NODE_BENCH_IDLE", 20)) * time.Second
	var results []Result
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%d peers", n), func(t *testing.T) {
			results = append(results, runSize(t, n, changes, idle))
		})
	}
	t.Logf("| peers | realize s | flows/peer | all flows | RSS MiB | realize CPU s | idle CPU %% | join p50 / p99 / max ms | leave p50 / p99 / max ms | delete all s | load |")
	t.Logf("|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|")
	for _, r := range results {
		j, l := benchk8s.Summarize(r.JoinMs), benchk8s.Summarize(r.LeaveMs)
		t.Logf("| %d | %.2f | %.1f | %d | %.1f | %.2f | %.2f | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %.2f | %s |",
			r.Peers, r.RealizeSeconds, r.FlowsPerPeer, r.AllFlows, r.RSSMiB, r.RealizeCPU, r.IdleCPUPercent,
			j.P50, j.P99, j.Max, l.P50, l.P99, l.Max, r.DeleteAllS, strings.Join(r.LoadAvg, "; "))
	}
	if out := os.Getenv("NODE_BENCH_OUT"); out != "" {
		b, _ := json.MarshalIndent(results, "", " ")
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func runSize(t *testing.T, npeers, changes int, idle time.Duration) Result {
	ctx := context.Background()
	n := harness.NewNode(t, selfSubnet, "ofsdn-nodes")
	n.Name = "scale ofsdn-node"
	n.OVS.Exec(t, "ip", "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
	n.OVS.Exec(t, "ip", "addr", "add", apiAddr+"/24", "dev", "ul0")
	n.OVS.Exec(t, "ip", "link", "set", "ul0", "up")
	n.OVS.Exec(t, "ip", "link", "set", "ul1", "up")
	api := kapi.Start(t, n.OVS.NetnsPath(), apiAddr, "../../deploy/ofsdn.yaml")
	// The bench's own client, not rate-limited below what the API server takes (kapi's
	// admin client allows 500 requests/s, which made the writes of 5,000 Nodes take 18 s
	// and bounded the realization by them).
	rc := rest.CopyConfig(api.CP.Rest)
	rc.QPS, rc.Burst = 100000, 100000
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, node: n, admin: admin}
	if err := e.createNode(ctx, selfName, selfSubnet, apiAddr); err != nil {
		t.Fatal(err)
	}
	r := Result{Peers: npeers}
	n.StartDaemon(filepath.Join(harness.BuildBinaries(t), "ofsdn-node"), 2*time.Minute,
		"--topology", "kubernetes", "--kubeconfig", api.Kubeconfig(t), "--node-name", selfName, "--cluster-cidr", clusterCIDR,
		"--mtu", "1450", "--flow-audit-interval", "0", "--network-policy=false", "--service-proxy", "kube-proxy",
		"--metrics-address", "127.0.0.1:9469")
	pid := n.Daemon.Process.Pid

	// Realize: every peer created through the API, until each one's flows are on the switch.
	r.LoadAvg = append(r.LoadAvg, "start "+benchk8s.LoadAvg())
	cpu0, start := benchk8s.CPUSeconds(pid), time.Now()
	if err := benchk8s.Parallel(npeers, 16, func(i int) error {
		return e.createNode(ctx, fmt.Sprintf("peer-%05d", i), podCIDR(i), nodeIP(i))
	}); err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	// Done when the peer-owned flow count is a multiple of npeers, the same two polls in a
	// row, and the last peer's remote flow is there (every peer gets the same flows, each
	// peer's in one bundle).
	last, lastChange := -1, time.Now()
	if err := waitFor(15*time.Minute, func() (bool, error) {
		time.Sleep(495 * time.Millisecond)
		all, peer, err := e.flowCounts()
		if err != nil {
			return false, err
		}
		r.AllFlows, r.PeerFlows = all, peer
		stable := peer == last
		if !stable {
			lastChange = time.Now()
		}
		last = peer
		if !stable || peer == 0 || peer%npeers != 0 {
			return false, nil
		}
		return e.hasRemote(podCIDR(npeers - 1))
	}); err != nil {
		t.Fatalf("%d peers: flows: %v (last count %d peer flows)", npeers, err, r.PeerFlows)
	}
	r.RealizeSeconds = lastChange.Sub(start).Seconds() // the poll that first saw the final count (±0.5 s)
	r.RealizeCPU = benchk8s.CPUSeconds(pid) - cpu0
	r.FlowsPerPeer = float64(r.PeerFlows) / float64(npeers)
	t.Logf("%d peers: API writes done in %s, every peer's flows on the switch after %.2f s (%d peer flows, %.1f per peer, %d flows in all)",
		npeers, created.Round(time.Millisecond), r.RealizeSeconds, r.PeerFlows, r.FlowsPerPeer, r.AllFlows)

	// Quiet window with every peer there: RSS and idle CPU.
	r.LoadAvg = append(r.LoadAvg, "idle "+benchk8s.LoadAvg())
	cpu1, t1 := benchk8s.CPUSeconds(pid), time.Now()
	time.Sleep(idle)
	r.IdleSeconds = time.Since(t1).Seconds()
	r.IdleCPUPercent = 100 * (benchk8s.CPUSeconds(pid) - cpu1) / r.IdleSeconds
	r.RSSMiB = benchk8s.RSSMiB(pid)
	t.Logf("%d peers: RSS %.1f MiB; CPU %.2f %% of one core over %.0f s idle", npeers, r.RSSMiB, r.IdleCPUPercent, r.IdleSeconds)

	// Joins and leaves, one at a time.
	r.LoadAvg = append(r.LoadAvg, "changes "+benchk8s.LoadAvg())
	for k := 0; k < changes; k++ {
		i := npeers + k
		name, cidr := fmt.Sprintf("join-%05d", k), podCIDR(i)
		t0 := time.Now()
		if err := e.createNode(ctx, name, cidr, nodeIP(i)); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(30*time.Second, func() (bool, error) { return e.hasRemote(cidr) }); err != nil {
			t.Fatalf("join %s: its flows: %v", name, err)
		}
		r.JoinMs = append(r.JoinMs, float64(time.Since(t0).Microseconds())/1000)
		t0 = time.Now()
		if err := e.admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(30*time.Second, func() (bool, error) { ok, err := e.hasRemote(cidr); return !ok, err }); err != nil {
			t.Fatalf("leave %s: its flows still there: %v", name, err)
		}
		r.LeaveMs = append(r.LeaveMs, float64(time.Since(t0).Microseconds())/1000)
	}
	j, l := benchk8s.Summarize(r.JoinMs), benchk8s.Summarize(r.LeaveMs)
	t.Logf("%d peers: %d joins p50 %.1f ms p99 %.1f ms; %d leaves p50 %.1f ms p99 %.1f ms", npeers, j.N, j.P50, j.P99, l.N, l.P50, l.P99)

	// Every peer deleted: no peer flow may be left.
	t2 := time.Now()
	if err := benchk8s.Parallel(npeers, 16, func(i int) error {
		return e.admin.CoreV1().Nodes().Delete(ctx, fmt.Sprintf("peer-%05d", i), metav1.DeleteOptions{})
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(15*time.Minute, func() (bool, error) {
		time.Sleep(495 * time.Millisecond)
		_, peer, err := e.flowCounts()
		return peer == 0, err
	}); err != nil {
		_, peer, _ := e.flowCounts()
		t.Fatalf("every peer Node deleted: %d peer flows left on the switch: %v", peer, err)
	}
	r.DeleteAllS = time.Since(t2).Seconds()
	if rec, err := controller.RecordedPeerIDs(n.DataDir); err != nil {
		t.Errorf("peer owner id record: %v", err)
	} else if len(rec) != 0 {
		t.Errorf("every peer Node deleted, but the peer owner id record still holds %d peers", len(rec))
	}
	r.LoadAvg = append(r.LoadAvg, "end "+benchk8s.LoadAvg())
	return r
}
