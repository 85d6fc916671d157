package controller

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/policy"
)

// TestPolicyRoundCoalescesConjunctions, against a real OVS frozen (SIGSTOP) while the
// first pod's bundle is in flight: behind it queue 7 ADDs (each growing the same rule),
// the rule's policy deleted, re-created with other ports (a new conjunction id while the
// old one is still on the switch), a second policy and a new peer. The runner applies
// each conjunction once per round with its last state (issue 21: a round of N ADDs used
// to recompute the same rules N times); once the switch runs again the rule flows in the
// store and on the switch are exactly those of the engine's final conjunctions built
// from scratch, and no flow of the deleted conjunction is left.
func TestPolicyRoundCoalescesConjunctions(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, false)
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}

	const pods = 8
	a, atts := policyTestPods(n, pods)
	fromA := func(ports ...uint16) *policy.Policy {
		r := policy.Rule{Peers: []policy.Peer{{PodSelector: labels.SelectorFromSet(labels.Set{"app": "a"})}}}
		for _, p := range ports {
			r.Ports = append(r.Ports, policy.Port{Protocol: policy.ProtocolTCP, Port: p})
		}
		r.AllPorts = len(ports) == 0
		return &policy.Policy{Namespace: "x", Name: "from-a", PodSelector: labels.SelectorFromSet(labels.Set{"app": "a"}),
			IngressType: true, Ingress: []policy.Rule{r}}
	}
	a.Update(func(e *policy.Engine) policy.Changes { return e.UpsertPolicy(fromA(80, 81)) })
	a.MarkSynced()
	p := newPolicyRealizer(n, PolicyOptions{Agent: a, RealizeTimeout: 30 * time.Second})
	n.policy = p
	p.load(nil)
	defer p.close()

	queued := func() int {
		p.qmu.Lock()
		defer p.qmu.Unlock()
		return len(p.queue)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 20 s: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	conjIDs := func() map[uint32]bool {
		ids := map[uint32]bool{}
		a.View(func(e *policy.Engine) {
			for _, c := range e.Conjunctions() {
				ids[c.ID] = true
			}
		})
		return ids
	}

	ovs.StopVswitchd(t)
	frozen := true
	defer func() {
		if frozen {
			ovs.ContVswitchd(t)
		}
	}()
	errs := make([]error, pods)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = p.attach(ctx, atts[0]) }()
	waitFor("the first pod's bundle in flight", func() bool {
		if queued() != 0 || !p.mu.TryLock() {
			return false
		}
		n := len(p.attached) // under p.mu: the runner writes it
		p.mu.Unlock()
		return n == 1
	})
	time.Sleep(50 * time.Millisecond) // the runner is inside store.Update, on the frozen switch
	oldIDs := conjIDs()
	if len(oldIDs) == 0 {
		t.Fatal("the first pod brought no conjunction")
	}

	for i := 1; i < pods; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.attach(ctx, atts[i]) }()
	}
	waitFor("7 ADDs queued", func() bool { return queued() == pods-1 })
	a.Update(func(e *policy.Engine) policy.Changes { return e.DeletePolicy("x", "from-a") })
	a.Update(func(e *policy.Engine) policy.Changes { return e.UpsertPolicy(fromA(8080)) })
	web := fromA(443)
	web.Name = "web"
	a.Update(func(e *policy.Engine) policy.Changes { return e.UpsertPolicy(web) })
	a.Update(func(e *policy.Engine) policy.Changes {
		return e.UpsertPod(&policy.Pod{Namespace: "x", Name: "remote", Labels: map[string]string{"app": "a"},
			IPs: []netip.Addr{netip.MustParseAddr("10.244.2.7")}, NodeName: "n2"})
	})
	a.Observed("pods", "77")

	ovs.ContVswitchd(t)
	frozen = false
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("attach of pod %d: %v", i, err)
		}
	}
	waitFor("every queued change confirmed", func() bool { return a.Versions()["pods"] == 77 })

	// The store's rule flows are those of the final conjunctions, built from scratch.
	fresh := flows.NewPolicyFlowSet(n.config())
	newIDs := map[uint32]bool{}
	a.View(func(e *policy.Engine) {
		for _, c := range e.Conjunctions() {
			fresh.Set(ruleOf(c, false))
			newIDs[c.ID] = true
		}
	})
	for id := range oldIDs {
		if newIDs[id] {
			t.Fatalf("conjunction %d of the deleted policy is live again; the test needs new ids", id)
		}
	}
	want := flows.SortByText(fresh.Flows())
	got, _ := n.store.Owner(ownerPolicy)
	var ws, gs []string
	for _, f := range want {
		ws = append(ws, f.String())
	}
	for _, f := range flows.SortByText(got) {
		gs = append(gs, f.String())
	}
	if strings.Join(gs, "\n") != strings.Join(ws, "\n") {
		t.Fatalf("rule flows in the store:\n%s\nwant (the final conjunctions from scratch):\n%s", strings.Join(gs, "\n"), strings.Join(ws, "\n"))
	}
	// On the switch: as many rule flows, each live conj_id and none of the deleted one's.
	_, ingress := policyTables()
	dump := ovs.Ofctl(t, "dump-flows", ovs.MgmtSocket("br-int"), fmt.Sprintf("table=%d", ingress))
	rules := 0
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "priority=200") || strings.Contains(l, "priority=210") {
			rules++
		}
	}
	if rules != len(want) {
		t.Errorf("%d rule flows on the switch, want %d:\n%s", rules, len(want), dump)
	}
	for id := range newIDs {
		if !strings.Contains(dump, fmt.Sprintf("conj_id=%d,", id)) {
			t.Errorf("no conj_id=%d flow on the switch:\n%s", id, dump)
		}
	}
	for id := range oldIDs {
		if strings.Contains(dump, fmt.Sprintf("conj_id=%d,", id)) || strings.Contains(dump, fmt.Sprintf("conjunction(%d,", id)) {
			t.Errorf("flows of the deleted conjunction %d are still on the switch:\n%s", id, dump)
		}
	}
}
