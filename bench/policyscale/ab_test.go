//go:build policyscale

// TestPolicyAB compares two builds of ofsdn-node (and their plugins) on the same API and
// the same machine load, interleaved: the "before" build from POLICY_AB_BEFORE (a
// directory holding ofsdn-node and ofsdn) and the "after" build from POLICY_AB_AFTER (the
// tree's, built by the harness, when unset). Each build has a sandbox node of its own
// (the API server's underlay is a veth pair between the two namespaces); only one daemon
// runs at a time. Per round and build (the order alternates round by round: ABBA):
//
//   - NetworkPolicy off (--network-policy=false): POLICY_AB_PODS pods (96) ADDed through
//     the plugin at concurrency POLICY_AB_CONC (32), then DELeted at the same concurrency;
//   - NetworkPolicy on: the same, with 10 policies selecting those pods (each of M=96 pods,
//     about 140 peers and 5 port matches); then 5 label changes of one API pod that make
//     it a peer of 100 rules (TestPolicyScale's "one label change"), each reverted; then 5
//     more while another goroutine calls the full report (`ofsdnctl policies`,
//     ctl.Client.Policies) in a tight loop. Each change is reverted (also awaited on the
//     switch and in the status) and followed by a 500 ms pause before the next.
//
// The API holds TestPolicyScale's 10,000 pods and 1,000 policies (100 rules on each node,
// one local pod per namespace on each). A label change is timed twice from the API write:
// until the daemon's status reports the version realized (PolicyStatus, polled every 20
// ms) and until the peer's flow is on the switch (ovs-ofctl dump-flows, filtered on its
// address, polled every 10 ms): in a build where the status waits behind the report, the
// switch is the observation that does not. Kubelet's status write (podIPs) follows each
// ADD asynchronously and is not in the ADD's time. Times are reported, never asserted.
//
// Run it with `make bench-policy-ab` (it builds the before commit POLICY_BEFORE from git
// archive). POLICY_AB_LOGS=DIR keeps each session's daemon log (BUILD-on|off-ROUND.log,
// the node's log so far) and its /metrics at the session's end (BUILD-on|off-ROUND.metrics:
// the ADD steps' histograms). Each ADD burst's CPU (ofsdn-node, ovs-vswitchd, ovsdb-server:
// utime+stime from /proc) and the machine's busy fraction (/proc/stat) are in the table:
// on 2 cores the burst is CPU-bound, so pods/s follows the CPU an ADD costs. Results: bench/RESULTS.md "NetworkPolicy off the agent's lock (issue 21)".
package policyscale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	benchk8s "github.com/ofsdn/ofsdn/bench/k8s"
	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/test/harness"
	"github.com/ofsdn/ofsdn/test/kapi"
)

// abBuild is one build under comparison, on its own sandbox node.
type abBuild struct {
	name, dir string
	node      *scaleNode
	nodeName  string
	localK    int      // index of its local pod in each namespace (p-000 or p-010)
	burstNS   string   // namespace of its burst pods
	netns     []string // one network namespace per burst pod, reused across rounds
	round     int
}

// abSample is what one session measured.
type abSample struct {
	Build, Policy string
	Round         int
	StartSeconds  float64
	AddWall       float64   // seconds, first ADD sent to last ADD answered
	Add           []float64 // seconds, each ADD
	DelWall       float64
	Del           []float64
	LabelStatus   []float64 // seconds, quiet: status version realized
	LabelSwitch   []float64 // seconds, quiet: flow on the switch
	LoopStatus    []float64 // the same while the full report loops
	LoopSwitch    []float64
	LoopReports   []float64 // seconds, each full report during the loop phase
	// AddCPU is CPU seconds (user+system) each process used during the ADD burst:
	// "ofsdn-node", "ovs-vswitchd", "ovsdb-server" (where its pid could be read).
	AddCPU map[string]float64
	// AddCPUByCommand is CPU seconds every process on the machine used during the ADD
	// burst, by command name (proc(5) comm), its reaped children's included (the plugin's
	// execs count to the bench's test binary, which runs the CNI library).
	AddCPUByCommand map[string]float64
	Errors          []string
}

// burstPolicy is burst policy j of ns: every burst pod takes TCP/80, TCP/8000-8099 and the
// named port "http" from pods role=r<j%5> of the namespaces team=t<j%7> (about 140 API pods).
func burstPolicy(ns string, j int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	p80, p8000, named := intstr.FromInt32(80), intstr.FromInt32(8000), intstr.FromString("http")
	end := int32(8099)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bp-%02d", j)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "burst"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", j%7)}},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": fmt.Sprintf("r%d", j%5), "app": fmt.Sprintf("a%d", j%10)}}},
				},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p80}, {Protocol: &tcp, Port: &p8000, EndPort: &end}, {Port: &named}},
			}},
		},
	}
}

// quantile is the nearest-rank q-quantile of xs (seconds), 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(x float64) string { return strconv.FormatFloat(x*1000, 'f', 1, 64) }

// peerFlows counts br-int's flows that match on nw_src=ip (the peer's clause flows).
func peerFlows(n *scaleNode, ip string) (int, error) {
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow13", "--no-stats", "dump-flows", n.Mgmt(), "ip,nw_src="+ip)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+n.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ovs-ofctl dump-flows: %v: %s", err, out)
	}
	return strings.Count(string(out), "nw_src="+ip), nil
}

// labelChange sets the app label of API pod ns/name to app and returns the time from the
// write until the daemon's status reports its version realized and until the switch's
// count of flows on ip is no longer before.
func labelChange(n *scaleNode, api *kapi.API, ns, name, app, ip string, before int) (status, sw time.Duration, err error) {
	ctx := context.Background()
	p, err := api.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	p.Labels["app"] = app
	start := time.Now()
	po, err := api.Admin.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		return 0, 0, err
	}
	want, _ := strconv.ParseUint(po.ResourceVersion, 10, 64)
	deadline := start.Add(2 * time.Minute)
	var wg sync.WaitGroup
	var swErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			c, e := peerFlows(n, ip)
			if e != nil {
				swErr = e
				return
			}
			if c != before {
				sw = time.Since(start)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		swErr = fmt.Errorf("label change of %s/%s: the flows on %s stayed %d for 2 minutes", ns, name, ip, before)
	}()
	for time.Now().Before(deadline) {
		if r, e := n.ctl.PolicyStatus(ctx); e == nil && r.Versions["pods"] >= want && !r.Dirty {
			status = time.Since(start)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if status == 0 {
		return 0, sw, fmt.Errorf("label change of %s/%s: version %d not realized within 2 minutes", ns, name, want)
	}
	return status, sw, swErr
}

// wireBurst ADDs (or, with del, DELs) the build's burst pods through its plugin at
// concurrency conc; after each ADD a side pool writes the pod's IP into its status. It
// returns the wall time of the batch and each operation's time.
func (b *abBuild) wireBurst(t *testing.T, api *kapi.API, conc int, del bool) (time.Duration, []float64, []string) {
	ctx := context.Background()
	n := b.node
	type st struct {
		i  int
		ip string
	}
	statusQ := make(chan st, len(b.netns))
	var statusWG sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for w := 0; w < 4; w++ {
		statusWG.Add(1)
		go func() {
			defer statusWG.Done()
			for s := range statusQ {
				o, err := api.Admin.CoreV1().Pods(b.burstNS).Get(ctx, fmt.Sprintf("b-%03d", s.i), metav1.GetOptions{})
				if err == nil {
					o.Status.Phase = corev1.PodRunning
					o.Status.PodIPs = []corev1.PodIP{{IP: s.ip}}
					_, err = api.Admin.CoreV1().Pods(b.burstNS).UpdateStatus(ctx, o, metav1.UpdateOptions{})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	lat := make([]float64, len(b.netns))
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("ab-%s-%d-%03d", b.name, b.round, i), NetNS: b.netns[i], IfName: "eth0",
					Args: [][2]string{{"K8S_POD_NAMESPACE", b.burstNS}, {"K8S_POD_NAME", fmt.Sprintf("b-%03d", i)}}}
				s := time.Now()
				var err error
				if del {
					err = n.CNI.DelNetworkList(ctx, n.Netconf, rt)
				} else {
					var r types.Result
					if r, err = n.CNI.AddNetworkList(ctx, n.Netconf, rt); err == nil {
						var cr *current.Result
						if cr, err = current.NewResultFromResult(r); err == nil {
							statusQ <- st{i, cr.IPs[0].Address.IP.String()}
						}
					}
				}
				lat[i] = time.Since(s).Seconds()
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("%s b-%03d (del=%v): %v", b.name, i, del, err))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range b.netns {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(start)
	close(statusQ)
	statusWG.Wait()
	return wall, lat, errs
}

// procStat reads /proc/PID/stat (proc(5)): the command name and the fields after it
// (state first, so utime is f[11], stime f[12], cutime f[13], cstime f[14]); false when
// it cannot be read.
func procStat(pid string) (comm string, f []string, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", nil, false
	}
	open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if open < 0 || end < open {
		return "", nil, false
	}
	f = strings.Fields(string(b[end+1:])) // the command may hold spaces and ')'
	if len(f) < 15 {
		return "", nil, false
	}
	return string(b[open+1 : end]), f, true
}

// ticksSeconds sums the given fields of f, in USER_HZ ticks (100 on Linux), as seconds.
func ticksSeconds(f []string, idx ...int) float64 {
	var sum float64
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		sum += v
	}
	return sum / 100
}

// cpuSeconds returns the CPU seconds (utime+stime, proc(5)) each named process has used
// so far; processes whose stat cannot be read are left out.
func cpuSeconds(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		if _, f, ok := procStat(strconv.Itoa(pid)); ok {
			out[name] = ticksSeconds(f, 11, 12)
		}
	}
	return out
}

// procCPU is one process's command name and CPU seconds so far: utime+stime+cutime+
// cstime (proc(5)), so its reaped children count to it.
type procCPU struct {
	comm string
	sec  float64
}

// processCPU reads every process's procCPU, by pid.
func processCPU() map[int]procCPU {
	out := map[int]procCPU{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, f, ok := procStat(e.Name()); ok {
			out[pid] = procCPU{comm: comm, sec: ticksSeconds(f, 11, 12, 13, 14)} // utime, stime, cutime, cstime
		}
	}
	return out
}

// commandCPUDelta returns the CPU seconds used between snapshots a and b, by command
// name. A process is told apart by its pid (a kernel worker renames itself by the work it
// runs: all kworkers count as "kworker"); one gone by b gives back its time at a, which
// its parent's children's time now holds.
func commandCPUDelta(a, b map[int]procCPU) map[string]float64 {
	name := func(c string) string {
		if strings.HasPrefix(c, "kworker/") {
			return "kworker"
		}
		return c
	}
	out := map[string]float64{}
	for pid, p := range b {
		out[name(p.comm)] += p.sec - a[pid].sec
	}
	for pid, p := range a {
		if _, ok := b[pid]; !ok {
			out[name(p.comm)] -= p.sec
		}
	}
	return out
}

// machineBusy returns the machine's busy and total CPU time so far, in USER_HZ ticks
// summed over CPUs (/proc/stat's cpu line, proc(5): busy is all but idle and iowait).
func machineBusy() (busy, all float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		all += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, all
}

// scrapeMetrics reads the daemon's /metrics (its default address, 127.0.0.1:9469) in the
// network namespace netns.
func scrapeMetrics(netns string) ([]byte, error) {
	var out []byte
	err := ns.WithNetNSPath("/var/run/netns/"+netns, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9469", 5*time.Second) // the socket is made in this namespace
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		out, err = io.ReadAll(c)
		return err
	})
	return out, err
}

// session starts the build's daemon with NetworkPolicy on or off and measures.
func (b *abBuild) session(t *testing.T, api *kapi.API, on bool, conc, labelReps int) abSample {
	s := abSample{Build: b.name, Policy: map[bool]string{true: "on", false: "off"}[on], Round: b.round}
	n := b.node
	start := time.Now()
	args := []string{"--topology", "kubernetes", "--kubeconfig", n.kc, "--node-name", b.nodeName, "--cluster-cidr", "10.250.0.0/16",
		"--mtu", "1450", "--start-timeout", "4m", "--add-timeout", "60s", "--flow-audit-interval", "0",
		"--network-policy=" + strconv.FormatBool(on)}
	// POLICY_AB_DAEMON_ARGS: extra daemon flags for both builds (e.g. --log-level debug for
	// the runner's per-round timings).
	n.StartDaemon(filepath.Join(b.dir, "ofsdn-node"), 5*time.Minute, append(args, strings.Fields(os.Getenv("POLICY_AB_DAEMON_ARGS"))...)...)
	defer func() {
		d := os.Getenv("POLICY_AB_LOGS")
		if d != "" {
			// The daemon's own figures (ADD steps, bundle times) beside its log.
			if m, err := scrapeMetrics(n.OVS.Netns); err == nil {
				_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("%s-%s-%d.metrics", b.name, s.Policy, b.round)), m, 0o644)
			} else {
				t.Logf("metrics of %s: %v", b.name, err)
			}
		}
		n.StopDaemon()
		if d != "" {
			lg, _ := os.ReadFile(n.LogPath)
			_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("%s-%s-%d.log", b.name, s.Policy, b.round)), lg, 0o644)
		}
	}()
	s.StartSeconds = time.Since(start).Seconds()
	pids := map[string]int{"ofsdn-node": n.Daemon.Process.Pid}
	for _, name := range []string{"ovs-vswitchd", "ovsdb-server"} {
		if b, err := os.ReadFile(filepath.Join(n.OVS.Dir, name+".pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				pids[name] = pid
			}
		}
	}
	cpu0, proc0 := cpuSeconds(pids), processCPU()
	busy0, all0 := machineBusy()
	wall, lat, errs := b.wireBurst(t, api, conc, false)
	s.AddWall, s.Add, s.Errors = wall.Seconds(), lat, append(s.Errors, errs...)
	s.AddCPU, s.AddCPUByCommand = cpuSeconds(pids), commandCPUDelta(proc0, processCPU())
	for k, v := range cpu0 {
		s.AddCPU[k] -= v
	}
	if busy1, all1 := machineBusy(); all1 > all0 {
		s.AddCPU["machine busy fraction"] = (busy1 - busy0) / (all1 - all0)
	}
	wall, lat, errs = b.wireBurst(t, api, conc, true)
	s.DelWall, s.Del, s.Errors = wall.Seconds(), lat, append(s.Errors, errs...)
	if !on {
		return s
	}
	// One label change: ns-007/p-013 (app=a3) becomes app=a0, a peer of every np-00 rule.
	ns, name, ip := nsName(7), podName(13), remoteIP(7, 13)
	base, err := peerFlows(n, ip)
	if err != nil {
		t.Fatal(err)
	}
	change := func(statusOut, swOut *[]float64) {
		for r := 0; r < labelReps; r++ {
			st, sw, err := labelChange(n, api, ns, name, "a0", ip, base)
			if err != nil {
				s.Errors = append(s.Errors, err.Error())
				return
			}
			*statusOut, *swOut = append(*statusOut, st.Seconds()), append(*swOut, sw.Seconds())
			cur, _ := peerFlows(n, ip)
			if _, _, err := labelChange(n, api, ns, name, "a3", ip, cur); err != nil {
				s.Errors = append(s.Errors, err.Error())
				return
			}
			// Settle: the revert's bundle may be followed by the datapath purge; each change
			// starts from an idle daemon, as one change in a quiet cluster would.
			time.Sleep(500 * time.Millisecond)
		}
	}
	change(&s.LabelStatus, &s.LabelSwitch)
	// The same while the full report is asked for in a tight loop.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reports []float64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			s := time.Now()
			if _, err := n.ctl.Policies(ctx); err == nil {
				reports = append(reports, time.Since(s).Seconds())
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // the loop is under way
	change(&s.LoopStatus, &s.LoopSwitch)
	cancel()
	wg.Wait()
	s.LoopReports = reports
	return s
}

func TestPolicyAB(t *testing.T) {
	ctx := context.Background()
	beforeDir := os.Getenv("POLICY_AB_BEFORE")
	if beforeDir == "" {
		t.Fatal("POLICY_AB_BEFORE is not set: give the directory of the before build's ofsdn-node and ofsdn (make bench-policy-ab builds it from POLICY_BEFORE)")
	}
	afterDir := os.Getenv("POLICY_AB_AFTER")
	if afterDir == "" {
		afterDir = harness.BuildBinaries(t)
	}
	rounds, pods, conc, reps := benchk8s.EnvInt("POLICY_AB_ROUNDS", 2), benchk8s.EnvInt("POLICY_AB_PODS", 96), benchk8s.EnvInt("POLICY_AB_CONC", 32), benchk8s.EnvInt("POLICY_AB_LABEL_REPS", 5)

	builds := []*abBuild{
		{name: "before", dir: beforeDir, nodeName: "ab-before", localK: 0, burstNS: "burst-before"},
		{name: "after", dir: afterDir, nodeName: "ab-after", localK: 10, burstNS: "burst-after"},
	}
	for i, b := range builds {
		b.node = &scaleNode{Node: harness.NewNode(t, fmt.Sprintf("10.250.%d.0/24", i), "ofsdn-ab-"+b.name)}
		b.node.Name = b.name + " ofsdn-node"
		// Each build's own plugin.
		b.node.CNI = libcni.NewCNIConfigWithCacheDir([]string{b.dir}, filepath.Join(b.node.Dir, "cni-cache"), nil)
		b.node.ctl = ctl.NewClient(filepath.Join(filepath.Dir(b.node.Socket), "ctl.sock"), 5*time.Minute)
	}
	// The underlay: a veth pair between the two nodes' namespaces; the API on the first.
	n0, n1 := builds[0].node, builds[1].node
	n0.OVS.Exec(t, "ip", "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
	n0.OVS.Exec(t, "ip", "link", "set", "ul1", "netns", n1.OVS.Netns)
	n0.OVS.Exec(t, "ip", "addr", "add", "172.31.0.1/24", "dev", "ul0")
	n0.OVS.Exec(t, "ip", "link", "set", "ul0", "up")
	n1.OVS.Exec(t, "ip", "addr", "add", "172.31.0.2/24", "dev", "ul1")
	n1.OVS.Exec(t, "ip", "link", "set", "ul1", "up")
	api := kapi.Start(t, n0.OVS.NetnsPath(), "172.31.0.1", "../../deploy/ofsdn.yaml")
	kc := api.Kubeconfig(t)
	admin := api.Admin
	for i, b := range builds {
		b.node.api, b.node.kc = api, kc
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.nodeName}, Spec: corev1.NodeSpec{PodCIDR: b.node.Subnet, PodCIDRs: []string{b.node.Subnet}}}
		created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.31.0.%d", i+1)}}
		if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// TestPolicyScale's API: 10,000 pods, 1,000 policies; p-000 local on before's node,
	// p-010 (the same labels) on after's.
	start := time.Now()
	parallel(t, namespaces, func(i int) error {
		return api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i),
			Labels: map[string]string{"team": fmt.Sprintf("t%d", i%7)}}})
	})
	parallel(t, namespaces*podsPerNS, func(i int) error {
		ns, k := i/podsPerNS, i%podsPerNS
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsName(ns), Name: podName(k),
				Labels: map[string]string{"app": fmt.Sprintf("a%d", k%10), "role": fmt.Sprintf("r%d", k%5)}},
			Spec: corev1.PodSpec{NodeName: "elsewhere", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080 + int32(k%3)}}}}},
		}
		local := false
		for _, b := range builds {
			if k == b.localK {
				pod.Spec.NodeName, local = b.nodeName, true
			}
		}
		o, err := admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil || local {
			return err
		}
		o.Status.Phase = corev1.PodRunning
		o.Status.PodIPs = []corev1.PodIP{{IP: remoteIP(ns, k)}}
		_, err = admin.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{})
		return err
	})
	parallel(t, namespaces*policiesPerN, func(i int) error {
		_, err := admin.NetworkingV1().NetworkPolicies(nsName(i/policiesPerN)).Create(ctx, policy(i/policiesPerN, i%policiesPerN), metav1.CreateOptions{})
		return err
	})
	// Each build's burst namespace: its pods (not yet wired) and 10 policies selecting them.
	for _, b := range builds {
		if err := api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.burstNS, Labels: map[string]string{"team": "burst"}}}); err != nil {
			t.Fatal(err)
		}
		parallel(t, pods, func(i int) error {
			_, err := admin.CoreV1().Pods(b.burstNS).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: b.burstNS, Name: fmt.Sprintf("b-%03d", i), Labels: map[string]string{"app": "burst"}},
				Spec:       corev1.PodSpec{NodeName: b.nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}},
			}, metav1.CreateOptions{})
			return err
		})
		for j := 0; j < 10; j++ {
			if _, err := admin.NetworkingV1().NetworkPolicies(b.burstNS).Create(ctx, burstPolicy(b.burstNS, j), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < pods; i++ {
			name := fmt.Sprintf("polab-%s-%03d", b.name, i)
			if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
				t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
			}
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
			b.netns = append(b.netns, "/var/run/netns/"+name)
		}
	}
	t.Logf("API filled: %d namespaces, %d pods, %d policies, 2 burst namespaces of %d pods and 10 policies in %s",
		namespaces, namespaces*podsPerNS, namespaces*policiesPerN, pods, time.Since(start).Round(time.Second))

	// Each build's 100 local pods, wired once by its own daemon and plugin.
	for _, b := range builds {
		n := b.node
		n.StartDaemon(filepath.Join(b.dir, "ofsdn-node"), 5*time.Minute,
			"--topology", "kubernetes", "--kubeconfig", kc, "--node-name", b.nodeName, "--cluster-cidr", "10.250.0.0/16",
			"--mtu", "1450", "--start-timeout", "4m", "--add-timeout", "60s", "--flow-audit-interval", "0")
		s := time.Now()
		parallel(t, namespaces, func(i int) error {
			return n.wire(t, nsName(i), podName(b.localK), fmt.Sprintf("ab-%s-local-%03d", b.name, i))
		})
		total, _ := countFlows(t, n)
		st, err := n.ctl.PolicyStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d local pods wired in %s; %d flows, %d rules", b.name, namespaces, time.Since(s).Round(time.Millisecond), total, st.Rules)
		n.StopDaemon()
	}

	var samples []abSample
	for r := 0; r < rounds; r++ {
		order := builds
		if r%2 == 1 {
			order = []*abBuild{builds[1], builds[0]}
		}
		for _, on := range []bool{false, true} {
			for _, b := range order {
				b.round = r
				s := b.session(t, api, on, conc, reps)
				t.Logf("round %d %s policy %s: ready %.2f s; ADD %d in %.2f s (%.1f pods/s) p50 %s p99 %s ms; DEL p50 %s ms; label status %v switch %v; with report loop status %v switch %v (%d reports, p50 %.2f s); errors %d %v",
					r, b.name, s.Policy, s.StartSeconds, len(s.Add), s.AddWall, float64(len(s.Add))/s.AddWall, ms(quantile(s.Add, .5)), ms(quantile(s.Add, .99)),
					ms(quantile(s.Del, .5)), s.LabelStatus, s.LabelSwitch, s.LoopStatus, s.LoopSwitch, len(s.LoopReports), quantile(s.LoopReports, .5), len(s.Errors), s.Errors[:min(len(s.Errors), 3)])
				samples = append(samples, s)
			}
		}
	}

	// Tables.
	type agg struct {
		add, del, ls, lsw, lps, lpsw, rep []float64
		pods, wall                        float64
		cpu                               map[string]float64 // CPU seconds in the ADD bursts
		cmd                               map[string]float64 // the same by command
	}
	by := map[string]*agg{}
	for _, s := range samples {
		k := s.Build + "/" + s.Policy
		if by[k] == nil {
			by[k] = &agg{cpu: map[string]float64{}, cmd: map[string]float64{}}
		}
		a := by[k]
		for c, v := range s.AddCPUByCommand {
			a.cmd[c] += v
		}
		for p, c := range s.AddCPU {
			a.cpu[p] += c
		}
		a.add, a.del = append(a.add, s.Add...), append(a.del, s.Del...)
		a.ls, a.lsw, a.lps, a.lpsw = append(a.ls, s.LabelStatus...), append(a.lsw, s.LabelSwitch...), append(a.lps, s.LoopStatus...), append(a.lpsw, s.LoopSwitch...)
		a.rep = append(a.rep, s.LoopReports...)
		a.pods += float64(len(s.Add))
		a.wall += s.AddWall
	}
	rate := func(k string) float64 { return by[k].pods / by[k].wall }
	tab := []string{fmt.Sprintf("| build | NetworkPolicy | ADDs (%d rounds) | pods/s | ADD p50 ms | ADD p99 ms | ADD max ms | DEL p50 ms | DEL p99 ms | CPU ms per ADD: ofsdn-node / ovs-vswitchd / ovsdb-server | machine busy in the ADDs |", rounds),
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"}
	for _, k := range []string{"before/off", "after/off", "before/on", "after/on"} {
		a := by[k]
		cpu := func(p string) string { return ms(a.cpu[p] / a.pods) }
		busy := a.cpu["machine busy fraction"] / float64(rounds) * 100
		tab = append(tab, fmt.Sprintf("| %s | %s | %d | %.1f | %s | %s | %s | %s | %s | %s / %s / %s | %.0f %% |", strings.Split(k, "/")[0], strings.Split(k, "/")[1], int(a.pods), rate(k),
			ms(quantile(a.add, .5)), ms(quantile(a.add, .99)), ms(quantile(a.add, 1)), ms(quantile(a.del, .5)), ms(quantile(a.del, .99)),
			cpu("ofsdn-node"), cpu("ovs-vswitchd"), cpu("ovsdb-server"), busy))
	}
	tab = append(tab, "", fmt.Sprintf("ratios: after/before pods/s policy off %.2f, policy on %.2f; after-on / before-off %.2f; ADD p99 after/before off %.2f, on %.2f",
		rate("after/off")/rate("before/off"), rate("after/on")/rate("before/on"), rate("after/on")/rate("before/off"),
		quantile(by["after/off"].add, .99)/quantile(by["before/off"].add, .99), quantile(by["after/on"].add, .99)/quantile(by["before/on"].add, .99)))
	// Every command that used at least 0.05 ms per ADD in some session: where a mode's CPU
	// goes beyond the three named processes (the API server for the status writes, the
	// bench's CNI library and plugin execs, the kernel's threads).
	keys4 := []string{"before/off", "after/off", "before/on", "after/on"}
	var cmds []string
	for c := range by["after/on"].cmd {
		cmds = append(cmds, c)
	}
	for _, k := range keys4[:3] {
		for c := range by[k].cmd {
			if _, ok := by["after/on"].cmd[c]; !ok {
				cmds = append(cmds, c)
			}
		}
	}
	sort.Slice(cmds, func(i, j int) bool {
		return by["after/on"].cmd[cmds[i]] > by["after/on"].cmd[cmds[j]] || by["after/on"].cmd[cmds[i]] == by["after/on"].cmd[cmds[j]] && cmds[i] < cmds[j]
	})
	bycmd := []string{"| command | " + strings.Join(keys4, " | ") + " |", "|---|---:|---:|---:|---:|"}
	totals := make([]float64, len(keys4))
	for _, c := range cmds {
		row, keep := "| "+c, false
		for i, k := range keys4 {
			v := by[k].cmd[c] / by[k].pods
			totals[i] += v
			keep = keep || v >= 0.00005
			row += " | " + ms(v)
		}
		if keep {
			bycmd = append(bycmd, row+" |")
		}
	}
	row := "| all processes"
	for _, v := range totals {
		row += " | " + ms(v)
	}
	bycmd = append(bycmd, row+" |")
	t.Logf("CPU ms per ADD by command (utime+stime+children's, /proc/*/stat), summed over the rounds:\n%s", strings.Join(bycmd, "\n"))
	lab := []string{"| build | label changes | quiet: status p50 / max ms | quiet: switch p50 / max ms | report loop: status p50 / max ms | report loop: switch p50 / max ms | full reports in the loop, p50 s |",
		"|---|---:|---:|---:|---:|---:|---:|"}
	for _, b := range []string{"before", "after"} {
		a := by[b+"/on"]
		lab = append(lab, fmt.Sprintf("| %s | %d + %d | %s / %s | %s / %s | %s / %s | %s / %s | %.2f (%d) |", b, len(a.ls), len(a.lps),
			ms(quantile(a.ls, .5)), ms(quantile(a.ls, 1)), ms(quantile(a.lsw, .5)), ms(quantile(a.lsw, 1)),
			ms(quantile(a.lps, .5)), ms(quantile(a.lps, 1)), ms(quantile(a.lpsw, .5)), ms(quantile(a.lpsw, 1)), quantile(a.rep, .5), len(a.rep)))
	}
	t.Logf("concurrency %d, %d pods per batch:\n%s\n\none label change (10,000 API pods, 1,000 policies, 100 rules):\n%s", conc, pods, strings.Join(tab, "\n"), strings.Join(lab, "\n"))
	nerr := 0
	for _, s := range samples {
		nerr += len(s.Errors)
	}
	if nerr > 0 {
		t.Errorf("%d operations failed (see the round lines above)", nerr)
	}
	if f := os.Getenv("POLICY_AB_OUT"); f != "" {
		if !filepath.IsAbs(f) { // relative to the repository's root, where make runs
			f = filepath.Join("..", "..", f)
		}
		b, _ := json.MarshalIndent(samples, "", " ")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Errorf("POLICY_AB_OUT: %v", err)
		} else {
			t.Logf("samples written to %s", f)
		}
	}
}
