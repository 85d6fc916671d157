package e2e

// Observing a running node: /metrics, /healthz and /readyz of the real daemon (its
// listener runs in the sandbox's network namespace, on that namespace's loopback at the
// default 127.0.0.1:9469), and ofsdnctl's pod list and flow dump checked against what
// ovs-vsctl and ovs-ofctl say the switch really has.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/metrics"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// metricsAddr is where the daemon listens by default, inside its own network namespace.
const metricsAddr = metrics.DefaultAddress

var (
	ctlOnce sync.Once
	ctlBin  string
	ctlErr  error
)

// buildCtl builds ofsdnctl once per test binary.
func buildCtl(t *testing.T) string {
	t.Helper()
	ctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ofsdn-e2e-ctl-")
		if err != nil {
			ctlErr = err
			return
		}
		ctlBin = filepath.Join(dir, "ofsdnctl")
		out, err := exec.Command("go", "build", "-o", ctlBin, "github.com/ofsdn/ofsdn/cmd/ofsdnctl").CombinedOutput()
		if err != nil {
			ctlErr = fmt.Errorf("go build ofsdnctl: %v\n%s", err, out)
		}
	})
	if ctlErr != nil {
		t.Fatal(ctlErr)
	}
	return ctlBin
}

// netnsHTTP returns an HTTP client whose connections are made inside the network
// namespace at path (the socket keeps its namespace after the dial).
func netnsHTTP(t *testing.T, path string) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			netns, err := ns.GetNS(path)
			if err != nil {
				return nil, err
			}
			defer netns.Close()
			var c net.Conn
			err = netns.Do(func(ns.NetNS) error {
				var derr error
				c, derr = (&net.Dialer{}).DialContext(ctx, network, addr)
				return derr
			})
			return c, err
		},
	}}
}

// get fetches path from the daemon's metrics listener; err is a connection error (the
// listener is not up yet).
func get(c *http.Client, path string) (int, string, error) {
	resp, err := c.Get("http://" + metricsAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrape fetches and parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, c *http.Client) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	code, body, err := get(c, metrics.PathMetrics)
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v\n%s", code, err, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs, body
}

// samples returns the metrics of family name whose labels include labels.
func samples(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) []*dto.Metric {
	var out []*dto.Metric
	mf := mfs[name]
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// value returns the value of the single gauge or counter name{labels}.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	ms := samples(mfs, name, labels)
	if len(ms) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, labels, len(ms))
	}
	if g := ms[0].GetGauge(); g != nil {
		return g.GetValue()
	}
	if c := ms[0].GetCounter(); c != nil {
		return c.GetValue()
	}
	if u := ms[0].GetUntyped(); u != nil {
		return u.GetValue()
	}
	t.Fatalf("%s%v is not a gauge or counter", name, labels)
	return 0
}

// histCount sums the sample counts of histogram name over the series matching labels.
func histCount(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) uint64 {
	var n uint64
	for _, m := range samples(mfs, name, labels) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// ofctlFlow is one line of ovs-ofctl dump-flows.
type ofctlFlow struct {
	table    int
	priority int
	cookie   uint64
	packets  uint64
}

var (
	reTable    = regexp.MustCompile(`table=(\d+)`)
	rePriority = regexp.MustCompile(`priority=(\d+)`)
	reCookie   = regexp.MustCompile(`cookie=(0x[0-9a-f]+)`)
	rePackets  = regexp.MustCompile(`n_packets=(\d+)`)
)

// ofctlFlows dumps the bridge with ovs-ofctl (numbers, not names).
func ofctlFlows(t *testing.T, n *testNode) []ofctlFlow {
	t.Helper()
	var out []ofctlFlow
	for _, line := range strings.Split(n.OVS.Ofctl(t, "dump-flows", "--no-names", n.mgmt()), "\n") {
		if !strings.Contains(line, "actions=") {
			continue
		}
		var f ofctlFlow
		if m := reTable.FindStringSubmatch(line); m != nil {
			f.table, _ = strconv.Atoi(m[1])
		}
		f.priority = 32768
		if m := rePriority.FindStringSubmatch(line); m != nil {
			f.priority, _ = strconv.Atoi(m[1])
		}
		if m := reCookie.FindStringSubmatch(line); m != nil {
			f.cookie, _ = strconv.ParseUint(m[1], 0, 64)
		}
		if m := rePackets.FindStringSubmatch(line); m != nil {
			f.packets, _ = strconv.ParseUint(m[1], 10, 64)
		}
		out = append(out, f)
	}
	return out
}

// runCtl runs ofsdnctl against the node's inspection socket.
func runCtl(t *testing.T, n *testNode, args ...string) []byte {
	t.Helper()
	sock := filepath.Join(filepath.Dir(n.Socket), "ctl.sock")
	cmd := exec.Command(buildCtl(t), append([]string{"-socket", sock}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("ofsdnctl %v: %v\n%s%s", args, err, out, stderr)
	}
	return out
}

// TestObserveNode: after three ADDs and one DEL the daemon's /metrics (parsed with the
// Prometheus text parser) shows 2 local pods, 3 ADDs, stage flow counts equal to what the
// switch holds and to the daemon's desired flows, both connections up, and passes
// promlint; ofsdnctl's pod list matches ovs-vsctl and the CNI results, its flow dump
// matches ovs-ofctl flow for flow with packet counts between two ovs-ofctl dumps.
func TestObserveNode(t *testing.T) {
	serial(t)
	n := startNode(t, "10.128.0.0/24")
	a, b, c := n.addPod("a"), n.addPod("b"), n.addPod("c")
	if err := ping(a.netns, b.ip()); err != nil {
		t.Fatal(err)
	}
	if err := n.delPod(c); err != nil {
		t.Fatalf("DEL c: %v", err)
	}
	pods := []*testPod{a, b}
	hc := netnsHTTP(t, n.OVS.NetnsPath())

	t.Run("metrics", func(t *testing.T) {
		mfs, body := scrape(t, hc)
		if v := value(t, mfs, metrics.LocalPods, nil); v != 2 {
			t.Errorf("%s = %v, want 2", metrics.LocalPods, v)
		}
		if v := histCount(mfs, metrics.CNIRequestDuration, map[string]string{"command": "ADD"}); v != 3 {
			t.Errorf("%s{command=ADD} count = %d, want 3", metrics.CNIRequestDuration, v)
		}
		if v := histCount(mfs, metrics.CNIRequestDuration, map[string]string{"command": "ADD", "result": "success"}); v != 3 {
			t.Errorf("%s{command=ADD,result=success} count = %d, want 3", metrics.CNIRequestDuration, v)
		}
		if v := histCount(mfs, metrics.CNIRequestDuration, map[string]string{"command": "DEL", "result": "success"}); v != 1 {
			t.Errorf("%s{command=DEL,result=success} count = %d, want 1", metrics.CNIRequestDuration, v)
		}
		// This node runs without NetworkPolicy: its ADDs have no policy step, whose
		// series is there (the set of series is fixed) with a count of 0.
		for _, step := range metrics.AddSteps {
			want := uint64(3)
			if step == "policy" {
				want = 0
			}
			if v := histCount(mfs, metrics.PodAddStepDuration, map[string]string{"step": step}); v != want {
				t.Errorf("%s{step=%s} count = %d, want %d", metrics.PodAddStepDuration, step, v, want)
			}
		}
		for _, name := range []string{metrics.OpenFlowConnected, metrics.OVSDBConnected, metrics.Ready} {
			if v := value(t, mfs, name, nil); v != 1 {
				t.Errorf("%s = %v, want 1", name, v)
			}
		}
		if v := value(t, mfs, metrics.IPAMAllocatedAddresses, nil); v != 2 {
			t.Errorf("%s = %v, want 2", metrics.IPAMAllocatedAddresses, v)
		}
		if v := value(t, mfs, metrics.IPAMPoolAddresses, nil); v != 253 {
			t.Errorf("%s = %v, want 253 (a /24 without network, broadcast, gateway)", metrics.IPAMPoolAddresses, v)
		}
		if v := value(t, mfs, metrics.OpenFlowBatchErrors, map[string]string{"kind": "flow_mod"}); v != 0 {
			t.Errorf("%s = %v, want 0", metrics.OpenFlowBatchErrors, v)
		}
		if len(samples(mfs, metrics.BuildInfo, nil)) != 1 || mfs["go_goroutines"] == nil || mfs["process_resident_memory_bytes"] == nil {
			t.Errorf("build info, Go or process collector missing")
		}

		// Stage gauges = the switch's tables = the daemon's desired flows (ofsdnctl).
		onSwitch := map[int]int{}
		for _, f := range ofctlFlows(t, n) {
			onSwitch[f.table]++
		}
		var stages []ctl.Stage
		if err := json.Unmarshal(runCtl(t, n, "-o", "json", "flows"), &stages); err != nil {
			t.Fatal(err)
		}
		desired := map[string]int{}
		for _, st := range stages {
			for _, f := range st.Flows {
				if f.Desired {
					desired[st.Name]++
				}
			}
			desired[st.Name] += len(st.Missing)
		}
		total := 0
		for _, st := range flows.Tables() {
			g := value(t, mfs, metrics.OpenFlowFlows, map[string]string{"stage": st.Name})
			total += int(g)
			if int(g) != onSwitch[int(st.ID)] || int(g) != desired[st.Name] {
				t.Errorf("stage %s (table %d): gauge %v, switch has %d flows, daemon desires %d", st.Name, st.ID, g, onSwitch[int(st.ID)], desired[st.Name])
			}
		}
		if len(samples(mfs, metrics.OpenFlowFlows, nil)) != len(flows.Tables()) {
			t.Errorf("%s has %d series, want one per stage (%d)", metrics.OpenFlowFlows, len(samples(mfs, metrics.OpenFlowFlows, nil)), len(flows.Tables()))
		}
		t.Logf("%d flows on the switch in %d stages", total, len(flows.Tables()))

		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
		// No series carries a pod's container ID, name or IP.
		for _, p := range []*testPod{a, b, c} {
			for _, s := range []string{p.containerID, `="` + p.name + `"`, p.ip().String() + `"`} {
				if strings.Contains(body, s) {
					t.Errorf("/metrics mentions %q of pod %s", s, p.name)
				}
			}
		}
	})

	t.Run("health", func(t *testing.T) {
		for _, p := range []string{metrics.PathHealthz, metrics.PathReadyz} {
			if code, body, err := get(hc, p); err != nil || code != 200 {
				t.Errorf("GET %s: %d %v %s", p, code, err, body)
			}
		}
	})

	t.Run("ofsdnctl pods", func(t *testing.T) {
		var got []ctl.Pod
		if err := json.Unmarshal(runCtl(t, n, "pods", "-o", "json"), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("ofsdnctl pods: %d pods, want 2:\n%s", len(got), jsonString(got))
		}
		// What OVS has: every Interface with our external_ids.
		type row struct {
			ofport int
			ext    map[string]string
		}
		ports := map[string]row{}
		var list struct {
			Data [][]json.RawMessage `json:"data"`
		}
		raw := n.OVS.Vsctl(t, "--format=json", "--columns=name,ofport,external_ids", "list", "Interface")
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			t.Fatalf("ovs-vsctl list Interface: %v\n%s", err, raw)
		}
		for _, d := range list.Data {
			var name string
			var ofport int
			var ext []any
			_ = json.Unmarshal(d[0], &name)
			_ = json.Unmarshal(d[1], &ofport)
			_ = json.Unmarshal(d[2], &ext)
			m := map[string]string{}
			if len(ext) == 2 {
				for _, kv := range ext[1].([]any) {
					pair := kv.([]any)
					m[pair[0].(string)] = pair[1].(string)
				}
			}
			if m["ofsdn-container-id"] != "" {
				ports[name] = row{ofport, m}
			}
		}
		if len(ports) != 2 {
			t.Errorf("OVS has %d pod interfaces, want 2: %v", len(ports), ports)
		}
		for _, p := range pods {
			var cp *ctl.Pod
			for i := range got {
				if got[i].ContainerID == p.containerID {
					cp = &got[i]
				}
			}
			if cp == nil {
				t.Errorf("ofsdnctl pods lacks %s (%s)", p.name, p.containerID)
				continue
			}
			r, ok := ports[cp.HostVeth]
			if !ok {
				t.Errorf("pod %s: ofsdnctl says host veth %s, OVS has no such pod interface", p.name, cp.HostVeth)
				continue
			}
			if int(cp.OFPort) != r.ofport || r.ext["ofsdn-ip"] != cp.IP || r.ext["ofsdn-mac"] != cp.MAC ||
				r.ext["ofsdn-pod-namespace"] != cp.Namespace || r.ext["ofsdn-pod-name"] != cp.Name {
				t.Errorf("pod %s: ofsdnctl %s, OVS ofport %d external_ids %v", p.name, jsonString(cp), r.ofport, r.ext)
			}
			res := p.result
			if cp.Namespace != "e2e" || cp.Name != p.name || cp.IfName != "eth0" || cp.Netns != p.netns ||
				cp.IP != res.IPs[0].Address.String() || cp.MAC != res.Interfaces[1].Mac || cp.HostVeth != res.Interfaces[0].Name {
				t.Errorf("pod %s: ofsdnctl %s, CNI result %s", p.name, jsonString(cp), jsonString(res))
			}
		}
		table := string(runCtl(t, n, "pods"))
		for _, p := range pods {
			if !strings.Contains(table, "e2e/"+p.name) || !strings.Contains(table, p.containerID) || !strings.Contains(table, p.ip().String()) {
				t.Errorf("ofsdnctl pods table lacks pod %s:\n%s", p.name, table)
			}
		}
		if strings.Contains(table, c.containerID) {
			t.Errorf("ofsdnctl pods still lists the deleted pod c:\n%s", table)
		}
	})

	t.Run("ofsdnctl flows", func(t *testing.T) {
		type key struct {
			table, priority int
			cookie          uint64
		}
		sum := func(fs []ofctlFlow) (map[key]int, map[key]uint64) {
			n, p := map[key]int{}, map[key]uint64{}
			for _, f := range fs {
				k := key{f.table, f.priority, f.cookie}
				n[k]++
				p[k] += f.packets
			}
			return n, p
		}
		// Packets flow meanwhile (the gateway's own traffic), so ofsdnctl's counts must lie
		// between two ovs-ofctl dumps taken before and after it.
		if err := ping(a.netns, b.ip()); err != nil {
			t.Fatal(err)
		}
		beforeN, before := sum(ofctlFlows(t, n))
		var stages []ctl.Stage
		if err := json.Unmarshal(runCtl(t, n, "flows", "-o", "json"), &stages); err != nil {
			t.Fatal(err)
		}
		afterN, after := sum(ofctlFlows(t, n))

		gotN, got := map[key]int{}, map[key]uint64{}
		var names []string
		for _, st := range stages {
			names = append(names, st.Name)
			if len(st.Missing) > 0 {
				t.Errorf("stage %s: flows missing on the switch: %v", st.Name, st.Missing)
			}
			for _, f := range st.Flows {
				if !f.Desired {
					t.Errorf("stage %s: flow not paired with a desired flow: %s", st.Name, f.Flow)
				}
				ck, _ := strconv.ParseUint(f.Cookie, 0, 64)
				k := key{int(st.Table), int(f.Priority), ck}
				gotN[k]++
				got[k] += f.Packets
			}
		}
		var want []string
		for _, st := range flows.Tables() {
			want = append(want, st.Name)
		}
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("ofsdnctl flows stages %v, want the pipeline's %v", names, want)
		}
		if len(gotN) != len(beforeN) || len(gotN) != len(afterN) {
			t.Errorf("ofsdnctl flows has %d (table, priority, cookie) groups, ovs-ofctl %d then %d", len(gotN), len(beforeN), len(afterN))
		}
		for k, nGot := range gotN {
			if nGot != beforeN[k] || nGot != afterN[k] {
				t.Errorf("table %d priority %d cookie %#x: ofsdnctl %d flows, ovs-ofctl %d then %d", k.table, k.priority, k.cookie, nGot, beforeN[k], afterN[k])
			}
			if got[k] < before[k] || got[k] > after[k] {
				t.Errorf("table %d priority %d cookie %#x: ofsdnctl %d packets, ovs-ofctl %d before and %d after", k.table, k.priority, k.cookie, got[k], before[k], after[k])
			}
		}
		// The ping a→b went through b's l3_forwarding flow.
		var bFlow *ctl.Flow
		for _, st := range stages {
			for i, f := range st.Flows {
				if st.Name == "l3_forwarding" && strings.Contains(f.Flow, "nw_dst="+b.ip().String()+" ") {
					bFlow = &st.Flows[i]
				}
			}
		}
		if bFlow == nil || bFlow.Packets == 0 {
			t.Errorf("no l3_forwarding flow for pod b (%s) with packets: %s", b.ip(), jsonString(bFlow))
		}
		table := string(runCtl(t, n, "flows", "-stage", "l3_forwarding"))
		if !strings.Contains(table, "nw_dst="+b.ip().String()) || strings.Contains(table, "spoof_guard ") {
			t.Errorf("ofsdnctl flows -stage l3_forwarding:\n%s", table)
		}
	})

	t.Run("ofsdnctl peers", func(t *testing.T) {
		var peers []ctl.Peer
		if err := json.Unmarshal(runCtl(t, n, "peers", "-o", "json"), &peers); err != nil {
			t.Fatal(err)
		}
		if len(peers) != 0 {
			t.Errorf("a single node knows peers: %s", jsonString(peers))
		}
	})
}

// TestReadyzBeforeOVSReachable: the daemon starts while its OVSDB endpoint does not exist
// yet. /healthz answers 200 at once, /readyz 503 naming OVSDB; once the endpoint appears
// (a symlink to the sandbox's database socket) the daemon connects, installs the pipeline
// and /readyz turns 200.
func TestReadyzBeforeOVSReachable(t *testing.T) {
	serial(t)
	bin := buildBinaries(t)
	o := sandbox.Start(t)
	late := filepath.Join(o.Dir, "late-db.sock")
	logPath := filepath.Join(o.Dir, "ofsdn-node.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", o.Netns, filepath.Join(bin, "ofsdn-node"),
		"--ovsdb", "unix:"+late, "--ovs-rundir", o.Dir, "--datapath-type", "netdev",
		"--socket", filepath.Join(o.Dir, "cni", "cni.sock"), "--data-dir", filepath.Join(o.Dir, "data"),
		"--pod-subnet", "10.128.0.0/24", "--start-timeout", "120s", "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("ofsdn-node log:\n%s", b)
		}
	})
	hc := netnsHTTP(t, o.NetnsPath())

	// Wait for the listener, which comes up before the daemon tries OVS.
	var code int
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err = get(hc, metrics.PathReadyz)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics listener not up after 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "OVSDB") {
		t.Errorf("/readyz before OVS is reachable: %d %q, want 503 naming OVSDB", code, body)
	}
	if code, _, err := get(hc, metrics.PathHealthz); err != nil || code != 200 {
		t.Errorf("/healthz before OVS is reachable: %d %v, want 200", code, err)
	}
	mfs, _ := scrape(t, hc)
	for _, name := range []string{metrics.Ready, metrics.OVSDBConnected, metrics.OpenFlowConnected} {
		if v := value(t, mfs, name, nil); v != 0 {
			t.Errorf("%s = %v before OVS is reachable, want 0", name, v)
		}
	}
	// ofsdnctl says the daemon is not ready rather than failing obscurely.
	out, err := exec.Command(buildCtl(t), "-socket", filepath.Join(o.Dir, "cni", "ctl.sock"), "pods").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "connecting to Open vSwitch") {
		t.Errorf("ofsdnctl pods before the node is up: %v\n%s", err, out)
	}

	if err := os.Symlink(o.DBSock, late); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(90 * time.Second)
	for {
		code, body, err = get(hc, metrics.PathReadyz)
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 90s after OVSDB appeared: %d %q %v", code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Ready means the pipeline is really on the switch.
	if dump := o.Ofctl(t, "dump-flows", o.MgmtSocket("br-int")); !strings.Contains(dump, "actions=drop") {
		t.Errorf("/readyz 200 but the bridge has no pipeline:\n%s", dump)
	}
	mfs, _ = scrape(t, hc)
	for _, name := range []string{metrics.Ready, metrics.OVSDBConnected, metrics.OpenFlowConnected} {
		if v := value(t, mfs, name, nil); v != 1 {
			t.Errorf("%s = %v once ready, want 1", name, v)
		}
	}
}

// TestMetricSeriesStableOverPodChurn: the daemon exposes as many series after 200 ADD/DEL
// cycles as after 2 (no label grows with pods). The pods share one network namespace so a
// cycle costs only the CNI round trips.
func TestMetricSeriesStableOverPodChurn(t *testing.T) {
	serial(t)
	n := startNode(t, "10.128.0.0/24")
	hc := netnsHTTP(t, n.OVS.NetnsPath())
	netns := newNetns(t, "ofsdn-e2e-churn")
	cycle := func(i int) {
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("churn-%d", i), NetNS: netns, IfName: "eth0",
			Args: [][2]string{{"K8S_POD_NAMESPACE", "churn"}, {"K8S_POD_NAME", fmt.Sprintf("p%d", i)}}}
		if _, err := n.CNI.AddNetworkList(context.Background(), n.Netconf, rt); err != nil {
			t.Fatalf("cycle %d ADD: %v", i, err)
		}
		if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, rt); err != nil {
			t.Fatalf("cycle %d DEL: %v", i, err)
		}
	}
	ofsdnSeries := func() map[string]bool {
		_, body := scrape(t, hc)
		out := map[string]bool{}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "ofsdn_") {
				out[line[:strings.LastIndexByte(line, ' ')]] = true
			}
		}
		return out
	}
	for i := range 2 {
		cycle(i)
	}
	after2 := ofsdnSeries()
	start := time.Now()
	for i := 2; i < 200; i++ {
		cycle(i)
	}
	t.Logf("198 ADD/DEL cycles took %v", time.Since(start).Round(time.Millisecond))
	after200 := ofsdnSeries()
	for s := range after200 {
		if !after2[s] {
			t.Errorf("new series after 200 cycles: %s", s)
		}
	}
	if len(after2) != len(after200) {
		t.Errorf("ofsdn_ series: %d after 2 cycles, %d after 200", len(after2), len(after200))
	}
	mfs, _ := scrape(t, hc)
	if v := histCount(mfs, metrics.CNIRequestDuration, map[string]string{"command": "ADD", "result": "success"}); v != 200 {
		t.Errorf("ADD count %d after 200 cycles, want 200", v)
	}
	if v := value(t, mfs, metrics.LocalPods, nil); v != 0 {
		t.Errorf("%s = %v after the churn, want 0", metrics.LocalPods, v)
	}
}
