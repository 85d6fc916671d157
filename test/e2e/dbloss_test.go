package e2e

// The OVS database lost (issue 20, item 1): ovsdb-server comes back with a fresh, empty
// conf.db (a reinstalled package, a wiped /etc/openvswitch, an operator's `ovsdb-tool
// create`) while pods run. ovs-vswitchd then deletes br-int with every port and flow. The
// daemon must bring back every pod's port (same name, identity, ofport), its flows and
// its connectivity, within seconds, both while it runs and when it is restarted while
// the database is empty; and a daemon run must never reuse the generation of flows that
// are on the switch. Each test asserts what a user checks: pings, `ovs-vsctl` rows,
// `ofsdnctl pods`, the lease file, the generation of every flow.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/flows"
)

// dbLossBound is the bound the issue asks for (seconds, not minutes) on the time from
// the empty database's ovsdb-server start (or, with a daemon restart, the daemon's start)
// until every pod pair and every pod→gateway pings again. Measured on the development
// machine (2 shared cores): see the tests' logs and README "Faults and restarts"; the
// bound is several times that, for a loaded machine.
const dbLossBound = 30 * time.Second

// portRow is one Interface of ours in OVSDB: its ofport and the attachment's identity.
type portRow struct {
	OFPort int
	IDs    map[string]string // the ofsdn-* external_ids
}

// podPorts returns the Interfaces that carry our external_ids, by name.
func (n *testNode) podPorts(t *testing.T) map[string]portRow {
	t.Helper()
	out := n.OVS.Vsctl(t, "--format=json", "--columns=name,ofport,external_ids", "list", "Interface")
	var list struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("ovs-vsctl list Interface: %v\n%s", err, out)
	}
	rows := map[string]portRow{}
	for _, r := range list.Data {
		var name string
		var ofport int
		_ = json.Unmarshal(r[0], &name)
		_ = json.Unmarshal(r[1], &ofport)
		var m []any // ["map", [[k, v], ...]]
		_ = json.Unmarshal(r[2], &m)
		ids := map[string]string{}
		if len(m) == 2 {
			pairs, _ := m[1].([]any)
			for _, p := range pairs {
				kv, _ := p.([]any)
				if len(kv) == 2 {
					k, _ := kv[0].(string)
					v, _ := kv[1].(string)
					if strings.HasPrefix(k, "ofsdn-") {
						ids[k] = v
					}
				}
			}
		}
		if ids["ofsdn-container-id"] != "" {
			rows[name] = portRow{OFPort: ofport, IDs: ids}
		}
	}
	return rows
}

// replaceDB stops ovsdb-server, replaces conf.db with a fresh empty database made by
// `ovsdb-tool create` (no Open_vSwitch row, no bridge, no port) and starts ovsdb-server
// again on it. It returns when ovsdb-server accepts connections.
func (n *testNode) replaceDB(t *testing.T) {
	t.Helper()
	n.OVS.KillOVSDB(t)
	db := filepath.Join(n.Dir, "conf.db")
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema").CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create %s: %v\n%s", db, err, out)
	}
	n.OVS.StartOVSDB(t)
}

// ctlPods returns `ofsdnctl -o json pods`.
func (n *testNode) ctlPods(t *testing.T) []ctl.Pod {
	t.Helper()
	var got []ctl.Pod
	if err := json.Unmarshal(runCtl(t, n, "pods", "-o", "json"), &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// leaseRecords returns the lease file's entries: IP → (container ID, owner, network).
func (n *testNode) leaseRecords(t *testing.T) map[string][3]string {
	t.Helper()
	b, err := os.ReadFile(n.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Leases map[string]struct {
			ContainerID string `json:"containerID"`
			Owner       string `json:"owner"`
			Network     string `json:"network"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	out := map[string][3]string{}
	for ip, l := range st.Leases {
		out[ip] = [3]string{l.ContainerID, l.Owner, l.Network}
	}
	return out
}

// assertPodsBack checks, after a database loss, that OVSDB again holds every pod's port
// with the same name, identity and ofport as before, that ofsdnctl lists the pods with
// those ofports, and that the leases are those from before.
func (n *testNode) assertPodsBack(t *testing.T, pods []*testPod, ports map[string]portRow, leases map[string][3]string) {
	t.Helper()
	var got map[string]portRow
	deadline := time.Now().Add(dbLossBound)
	for {
		got = n.podPorts(t)
		if len(got) == len(ports) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, want := range ports {
		g, ok := got[name]
		if !ok {
			t.Errorf("pod port %s (container %s) is not back in OVSDB; ports with our external_ids: %v", name, want.IDs["ofsdn-container-id"], keys(got))
			continue
		}
		if g.OFPort != want.OFPort {
			t.Errorf("pod port %s is back with ofport %d, was %d", name, g.OFPort, want.OFPort)
		}
		for k, v := range want.IDs {
			if g.IDs[k] != v {
				t.Errorf("pod port %s: external_ids:%s = %q, was %q", name, k, g.IDs[k], v)
			}
		}
	}
	cp := n.ctlPods(t)
	if len(cp) != len(pods) {
		t.Errorf("ofsdnctl pods lists %d pods, want %d:\n%s", len(cp), len(pods), jsonString(cp))
	}
	for _, p := range cp {
		g, ok := got[p.HostVeth]
		if !ok {
			t.Errorf("ofsdnctl pods lists %s/%s on port %s, which OVSDB does not have", p.Namespace, p.Name, p.HostVeth)
			continue
		}
		if int(p.OFPort) != g.OFPort {
			t.Errorf("ofsdnctl pods lists %s/%s with ofport %d, its port has %d", p.Namespace, p.Name, p.OFPort, g.OFPort)
		}
		if p.Namespace+"/"+p.Name != g.IDs["ofsdn-pod-namespace"]+"/"+g.IDs["ofsdn-pod-name"] {
			t.Errorf("ofsdnctl pods lists %s/%s, its port says %s/%s", p.Namespace, p.Name, g.IDs["ofsdn-pod-namespace"], g.IDs["ofsdn-pod-name"])
		}
	}
	if after := n.leaseRecords(t); jsonString(after) != jsonString(leases) {
		t.Errorf("leases changed across the database loss:\nbefore %s\nafter %s", jsonString(leases), jsonString(after))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// podFlowCount returns how many of the switch's flows carry a pod owner's cookie for
// each pod (owner kind OwnerPod, owner id = the one its lease holds, podCookie).
func (n *testNode) podFlowCount(t *testing.T, pods []*testPod) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range pods {
		id, _ := n.podCookie(t, p)
		id &= flows.CookieOwnerIDMask
		for _, l := range n.flowSet(t) {
			m := cookieRe.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			c, err := strconv.ParseUint(m[1], 0, 64)
			if err == nil && flows.Cookie(c).Owner() == flows.OwnerPod && c&0xffffffff == id {
				out[p.name]++
			}
		}
	}
	return out
}

// podFlowLines returns the switch's flows whose cookie names a pod owner, sorted.
func (n *testNode) podFlowLines(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range n.flowSet(t) {
		if m := cookieRe.FindStringSubmatch(l); m != nil {
			if c, err := strconv.ParseUint(m[1], 0, 64); err == nil && flows.Cookie(c).Owner() == flows.OwnerPod {
				out = append(out, l)
			}
		}
	}
	return out
}

// TestOVSDBLossWhileRunning: 3 pods run; ovsdb-server is replaced by an empty database.
// The daemon re-creates bridge, gateway and every pod's port with its identity and its
// ofport, the pods' flows are what they were, every pod pair and every pod→gateway pings again
// within dbLossBound, and ofsdnctl shows the pods on their ports. The generation is
// written into the new database too.
func TestOVSDBLossWhileRunning(t *testing.T) {
	serial(t)
	n := startNode(t, "10.160.0.0/24")
	pods := []*testPod{n.addPod("l1"), n.addPod("l2"), n.addPod("l3")}
	gw := pods[0].result.IPs[0].Gateway
	if d := allPairsPing(t, pods, gw, 20*time.Second); d < 0 {
		t.Fatal("pods do not reach each other before the database loss")
	}
	ports, leases, flowsBefore, gen := n.podPorts(t), n.leaseRecords(t), n.podFlowLines(t), n.generation(t)
	if len(ports) != len(pods) {
		t.Fatalf("%d pod ports before the loss, want %d", len(ports), len(pods))
	}

	n.replaceDB(t)
	d := allPairsPing(t, pods, gw, dbLossBound)
	if d < 0 {
		t.Errorf("pods do not reach each other and the gateway %s after ovsdb-server came back with an empty database", dbLossBound)
	} else {
		t.Logf("every pod pair and pod→gateway pings again %s after ovsdb-server came back with an empty database (bound %s)", d.Round(time.Millisecond), dbLossBound)
	}
	n.logDaemonLines(t, "re-ensured", "re-created", "rebuil")
	n.assertPodsBack(t, pods, ports, leases)
	// The pods' flows are those from before, cookie for cookie (same ofports, same
	// generation); the pipeline's were rebuilt for the re-created gateway (new MAC).
	if missing, extra := diffLines(flowsBefore, n.podFlowLines(t)); len(missing)+len(extra) > 0 {
		t.Errorf("pod flows differ from before the database loss\nmissing:\n%s\nextra:\n%s", strings.Join(missing, "\n"), strings.Join(extra, "\n"))
	}
	waitFor(t, dbLossBound, "the generation in the new database", func() bool {
		return strings.Trim(n.OVS.Vsctl(t, "--if-exists", "get", "Bridge", "br-int", "external_ids:ofsdn-generation"), `"`) != ""
	})
	if g := n.generation(t); g != gen {
		t.Errorf("bridge external_ids:ofsdn-generation is %d in the new database, the running daemon's is %d", g, gen)
	}
	// The node still serves: a new pod reaches the old ones.
	p := n.addPod("l4")
	if err := pingOnce(p.netns, pods[0].ip()); err != nil {
		t.Errorf("pod added after the database loss: %v", err)
	}
}

// TestOVSDBLossAcrossDaemonRestart: 3 pods run; the daemon is killed, ovsdb-server is
// replaced by an empty database, and the daemon starts again while it is empty. It
// restores every pod from its lease and host veth: the same ports (name, identity,
// ofport), flows of a new generation only, pings back within dbLossBound of the start,
// ofsdnctl right, leases unchanged; and flow audits afterwards delete none of the pods'
// flows (they are owned: the issue saw the audit delete all 15 as owned by nobody).
func TestOVSDBLossAcrossDaemonRestart(t *testing.T) {
	serial(t)
	n := startNode(t, "10.161.0.0/24")
	pods := []*testPod{n.addPod("m1"), n.addPod("m2"), n.addPod("m3")}
	gw := pods[0].result.IPs[0].Gateway
	if d := allPairsPing(t, pods, gw, 20*time.Second); d < 0 {
		t.Fatal("pods do not reach each other before the database loss")
	}
	ports, leases, gen1 := n.podPorts(t), n.leaseRecords(t), n.generation(t)
	perPod := n.podFlowCount(t, pods)

	n.stopDaemon()
	n.replaceDB(t)
	start := time.Now()
	n.StartDaemon(filepath.Join(buildBinaries(t), "ofsdn-node"), 30*time.Second,
		"--pod-subnet", n.Subnet, "--log-level", "debug", "--flow-audit-interval", "1s")
	d := allPairsPing(t, pods, gw, dbLossBound)
	if d < 0 {
		t.Errorf("pods do not reach each other and the gateway %s after the daemon started on an empty database", dbLossBound)
	} else {
		t.Logf("every pod pair and pod→gateway pings again %s after the daemon's start on an empty database (%s after its exec; bound %s)",
			d.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), dbLossBound)
	}
	n.logDaemonLines(t, "node ready", "restored", "re-created")
	n.assertPodsBack(t, pods, ports, leases)
	gen2 := n.generation(t)
	if gen2 == gen1 {
		t.Errorf("the daemon started on an empty database with generation %d, the one of the run before", gen1)
	}
	for _, l := range n.flowSet(t) {
		if g := cookieGeneration(t, l); g != gen2 {
			t.Errorf("flow of generation %d on the switch, the daemon's is %d:\n%s", g, gen2, l)
		}
	}
	// Several audits (every second): the pods' flows stay, pings still pass.
	time.Sleep(3500 * time.Millisecond)
	if got := n.podFlowCount(t, pods); jsonString(got) != jsonString(perPod) {
		t.Errorf("pod flows per pod after the flow audits: %v, before the loss %v", got, perPod)
	}
	if d := allPairsPing(t, pods, gw, 5*time.Second); d < 0 {
		t.Error("pods lost connectivity after the flow audits")
	}
	if c := n.logCount("no owner wants; deleted"); c > 0 {
		t.Errorf("the flow audit deleted %d flows as owned by nobody after the restart", c)
	}
}

// TestGenerationNeverRepeats: a daemon run never takes the generation of flows on the
// switch. (1) The database is lost while the daemon runs, then the daemon restarts: a
// new generation, no flow of the earlier one left. (2) Both records of the generation,
// the bridge's external_ids and the daemon's data directory, are removed while flows of
// the current generation are on the switch: the next run still takes another one.
func TestGenerationNeverRepeats(t *testing.T) {
	serial(t)
	n := startNode(t, "10.162.0.0/24")
	pods := []*testPod{n.addPod("g1"), n.addPod("g2")}
	gw := pods[0].result.IPs[0].Gateway
	if d := allPairsPing(t, pods, gw, 20*time.Second); d < 0 {
		t.Fatal("pods do not reach each other")
	}
	gens := []uint16{n.generation(t)}
	check := func(step string) {
		t.Helper()
		if d := allPairsPing(t, pods, gw, dbLossBound); d < 0 {
			t.Errorf("%s: pods do not reach each other", step)
		}
		g := n.generation(t)
		for _, old := range gens {
			if g == old {
				t.Errorf("%s: generation %d repeated (earlier runs: %v)", step, g, gens)
			}
		}
		for _, l := range n.flowSet(t) {
			if fg := cookieGeneration(t, l); fg != g {
				t.Errorf("%s: flow of generation %d left, the daemon's is %d:\n%s", step, fg, g, l)
			}
		}
		gens = append(gens, g)
	}

	n.replaceDB(t)
	if d := allPairsPing(t, pods, gw, dbLossBound); d < 0 {
		t.Fatal("pods do not reach each other after the database loss")
	}
	n.stopDaemon()
	n.startDaemon()
	check("restart after a database loss")

	n.stopDaemon()
	n.OVS.Vsctl(t, "remove", "Bridge", "br-int", "external_ids", "ofsdn-generation")
	if err := os.Remove(filepath.Join(n.DataDir, "generation")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n.startDaemon()
	check("restart with both records of the generation removed")
}
