package controller

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPolicyScheduledPodsClausesBeforeADD, on a real (sandbox) switch: with the agent
// knowing its node (policy.Engine.SetNode) and 4 burst pods scheduled to it by the API,
// 10 policies selecting them, the node's first sync already installs the 10 rules' peer
// and port clauses, so the first pod's ADD sends only that pod's own flows (its
// forwarding flows, its default deny and its one clause flow of the 10 rules: 7), where
// it carried the rules' ~300 clause flows before (the test fails so when SetNode is a
// no-op: no rule flow before the first ADD, whose bundle is then 311 messages). After the ADD the pod's clause flow is
// on the switch; the last pod's DEL leaves the rules' clauses for the next ADD.
func TestPolicyScheduledPodsClausesBeforeADD(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, false)
	var mu sync.Mutex
	var bundles []int
	n.store.SetObserver(func(kind string, msgs int, _ time.Duration, _ error) {
		if kind == "bundle" {
			mu.Lock()
			bundles = append(bundles, msgs)
			mu.Unlock()
		}
	})
	a := burstAgent(20, 4, "n1")
	p := newPolicyRealizer(n, PolicyOptions{Agent: a, RealizeTimeout: 30 * time.Second})
	n.policy = p
	p.load(nil)
	defer p.close()
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	ruleFlows := func() int {
		c := 0
		for _, l := range ofDumpLines(t, ovs) {
			if strings.Contains(l, "conjunction(") || strings.Contains(l, "conj_id=") {
				c++
			}
		}
		return c
	}
	before := ruleFlows()
	if before < 10*(20/7*10) {
		t.Fatalf("before any ADD: %d rule flows on the switch, want the 10 rules' peer and port clauses (hundreds)", before)
	}
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	att := &Attachment{ContainerID: "c000", IfName: "eth0", PodNamespace: "burst", PodName: "b-000",
		HostVeth: "veth000", OFPort: 32768, OwnerID: 1000, IPs: []*net.IPNet{{IP: net.IPv4(10, 244, 1, 10).To4(), Mask: subnet.Mask}},
		MAC: net.HardwareAddr{0x0a, 0x58, 10, 244, 1, 10}}
	mu.Lock()
	bundles = nil
	mu.Unlock()
	if err := n.installPodFlows(ctx, att); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := fmt.Sprint(bundles)
	total := 0
	for _, b := range bundles {
		total += b
	}
	mu.Unlock()
	if total > 10 {
		t.Fatalf("the first pod's ADD sent bundles of %s messages; want only its own flows (7), the rules' clauses being on the switch already", got)
	}
	if c := ruleFlows(); c != before+1 {
		t.Fatalf("after the first ADD: %d rule flows, want %d (its clause flow of the 10 rules added)", c, before+1)
	}
	var clause string
	for _, l := range ofDumpLines(t, ovs) {
		if strings.Contains(l, "reg1=0x8000") && strings.Contains(l, "conjunction(") {
			clause = l
		}
	}
	if strings.Count(clause, "conjunction(") != 10 {
		t.Fatalf("the pod's clause flow should carry the 10 rules' conjunctions: %q", clause)
	}
	p.detach(att)
	if err := n.store.DeleteOwner(ctx, att.owner()); err != nil {
		t.Fatal(err)
	}
	if c := ruleFlows(); c != before {
		t.Fatalf("after the pod's DEL: %d rule flows, want the %d clauses kept (the pod is still scheduled here)", c, before)
	}
}
