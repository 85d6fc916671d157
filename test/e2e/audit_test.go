package e2e

// The flow table heals itself while connected (issue 10): the daemon's periodic flow
// audit re-installs desired flows someone deleted and deletes flows carrying its cookie
// that it does not want, leaves other flows alone, counts each repair in
// ofsdn_openflow_repairs_total and logs it once, all on the same OpenFlow connection.

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/metrics"
	"github.com/ofsdn/ofsdn/test/harness"
)

// metricValue scrapes the node's /metrics and returns the counter or gauge name with the
// given labels (0 when the series is absent).
func (n *testNode) metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, _ := scrape(t, netnsHTTP(t, n.OVS.NetnsPath()))
	fam, ok := fams[name]
	if !ok {
		return 0
	}
next:
	for _, m := range fam.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	return 0
}

// logCount counts the daemon's log lines containing sub.
func (n *testNode) logCount(sub string) int {
	b, _ := os.ReadFile(n.LogPath)
	return strings.Count(string(b), sub)
}

// TestFlowAuditHealsTable: with a 200 ms audit, pods come and go without a single repair
// (a change in flight is never taken for drift). Then a pod's flows and a pipeline flow
// (the output stage) are deleted with ovs-ofctl, a flow with the daemon's cookie that no
// owner wants and an operator's flow are added: the deleted flows come back, the stray
// flow goes, the operator's flow stays, pings pass again, each repair is counted and
// logged once, the operator's flow is reported once, and the OpenFlow connection was
// never re-established.
func TestFlowAuditHealsTable(t *testing.T) {
	serial(t)
	n := &testNode{harness.NewNode(t, "10.153.0.0/24", netA)}
	n.StartDaemon(daemonBinary(t), 30*time.Second, "--pod-subnet", n.Subnet, "--log-level", "debug",
		"--flow-audit-interval", "200ms")
	gw := net.ParseIP("10.153.0.1")
	p1, p2 := n.addPod("heal-1"), n.addPod("heal-2")
	pid := n.Daemon.Process.Pid
	repairs := func(kind string) float64 {
		return n.metricValue(t, metrics.OpenFlowRepairs, map[string]string{"kind": kind})
	}

	t.Run("pods come and go without a repair", func(t *testing.T) {
		for i := 0; i < 6; i++ {
			p := n.addPod(fmt.Sprintf("heal-churn%d", i))
			if err := n.delPod(p); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			n.assertGone(t, p)
		}
		if m, u := repairs("missing"), repairs("unexpected"); m != 0 || u != 0 {
			t.Errorf("audits repaired %v missing and %v unexpected flows while pods came and went; want none", m, u)
		}
	})

	want := n.flowSet(t)
	gen := n.generation(t)
	cookie, mask := n.podCookie(t, p1)
	outputTable, ok := flows.StageTable("output")
	if !ok {
		t.Fatal("no output stage in the pipeline")
	}
	stray := flows.NewCookie(gen, flows.OwnerPod, 0x0a9900fe) // a pod this node never had
	t.Run("deleted flows come back, the stray one goes, the operator's stays", func(t *testing.T) {
		n.OVS.Ofctl(t, "del-flows", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
		n.OVS.Ofctl(t, "del-flows", "--strict", n.mgmt(), fmt.Sprintf("table=%d,priority=1", outputTable))
		n.OVS.Ofctl(t, "add-flow", n.mgmt(), fmt.Sprintf("cookie=%#x,table=0,priority=100,in_port=4242,actions=drop", uint64(stray)))
		n.OVS.Ofctl(t, "add-flow", n.mgmt(), "table=0,priority=7,udp,tp_dst=9,actions=drop")
		operatorLines := flowLines(n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), "table=0,udp,tp_dst=9"))
		if len(operatorLines) != 1 {
			t.Fatalf("the operator's flow: %q", operatorLines)
		}
		operator := operatorLines[0]

		waitUntil(t, "the flow table to be the desired one plus the operator's flow", 30*time.Second, func() error {
			missing, extra := diffLines(append(append([]string(nil), want...), operator), n.flowSet(t))
			if len(missing)+len(extra) > 0 {
				return fmt.Errorf("missing:\n%s\nextra:\n%s", strings.Join(missing, "\n"), strings.Join(extra, "\n"))
			}
			return nil
		})
		for _, pr := range [][2]*testPod{{p1, p2}, {p2, p1}} {
			if err := pingOnce(pr[0].netns, pr[1].ip()); err != nil {
				t.Errorf("after the repair: %v", err)
			}
		}
		if err := pingOnce(p1.netns, gw); err != nil {
			t.Errorf("after the repair: %v", err)
		}
		if m, u := repairs("missing"), repairs("unexpected"); m != podFlowCount+1 || u != 1 {
			t.Errorf("%s: missing %v, unexpected %v; want %d and 1", metrics.OpenFlowRepairs, m, u, podFlowCount+1)
		}
		if got := n.logCount("installed it again"); got != podFlowCount+1 {
			t.Errorf("%d log lines for re-installed flows, want one per flow (%d)", got, podFlowCount+1)
		}
		if got := n.logCount("no owner wants; deleted it"); got != 1 {
			t.Errorf("%d log lines for the deleted stray flow, want 1", got)
		}
	})

	t.Run("a second repair; the operator's flow is reported once", func(t *testing.T) {
		c2, m2 := n.podCookie(t, p2)
		n.OVS.Ofctl(t, "del-flows", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", c2, m2))
		waitUntil(t, "p2's flows back", 30*time.Second, func() error {
			if got := len(flowLines(n.OVS.Ofctl(t, "dump-flows", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", c2, m2)))); got != podFlowCount {
				return fmt.Errorf("%d of %d flows", got, podFlowCount)
			}
			return nil
		})
		if err := pingOnce(p2.netns, p1.ip()); err != nil {
			t.Errorf("after the second repair: %v", err)
		}
		if m := repairs("missing"); m != 2*podFlowCount+1 {
			t.Errorf("%s{kind=missing} = %v, want %d", metrics.OpenFlowRepairs, m, 2*podFlowCount+1)
		}
		if got := n.logCount("flow not installed by ofsdn"); got != 1 {
			t.Errorf("the operator's flow was reported %d times, want once", got)
		}
	})

	if r := n.metricValue(t, metrics.OpenFlowReconnects, nil); r != 0 {
		t.Errorf("%s = %v: the repair went through a reconnect", metrics.OpenFlowReconnects, r)
	}
	if got := n.logCount("OpenFlow connection ready"); got != 1 {
		t.Errorf("%d OpenFlow connections made, want the first one only", got)
	}
	if n.Daemon.Process.Pid != pid || n.Daemon.ProcessState != nil {
		t.Error("the daemon was restarted")
	}
}
