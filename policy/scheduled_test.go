package policy

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// scheduledEngine returns an engine of node n1 (SetNode when setNode) with namespace x:
// pods web (app=web, scheduled to n1, no address yet), c1 and c2 (app=client, on n2,
// addresses 10.244.2.1 and .2), and policy allow-clients selecting app=web for ingress from
// app=client on TCP 80.
func scheduledEngine(setNode bool) *Engine {
	e := NewEngine(nil)
	if setNode {
		e.SetNode("n1")
	}
	e.UpsertNamespace(&Namespace{Name: "x"})
	e.UpsertPod(&Pod{Namespace: "x", Name: "web", NodeName: "n1", Labels: map[string]string{"app": "web"}})
	for i, name := range []string{"c1", "c2"} {
		e.UpsertPod(&Pod{Namespace: "x", Name: name, NodeName: "n2", Labels: map[string]string{"app": "client"},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 2, byte(i + 1)})}})
	}
	e.UpsertPolicy(&Policy{Namespace: "x", Name: "allow-clients", PodSelector: labels.SelectorFromSet(labels.Set{"app": "web"}), IngressType: true,
		Ingress: []Rule{{Peers: []Peer{{PodSelector: labels.SelectorFromSet(labels.Set{"app": "client"})}},
			Ports: []Port{{Protocol: ProtocolTCP, Port: 80}}}}})
	return e
}

// held returns how many conjunction ids e holds once the released ones are freed (as the
// controller frees them once the switch confirms).
func held(e *Engine) int {
	e.ids.Free(e.ids.Pending()...)
	return e.ids.InUse()
}

// A pod the API schedules to this node brings its rules' peer and port clauses before its
// ADD: the ADD then changes only the pod clause (the conjunction keeps its id, peers and
// ports), a DEL leaves the clauses for the next ADD, and the pod's deletion from the API
// drops the conjunction and releases its id. Without SetNode (the engine before this) no
// conjunction exists before the ADD and the test fails at its first check.
func TestScheduledPodRulesBeforeAttach(t *testing.T) {
	e := scheduledEngine(true)
	cs := e.Conjunctions()
	if len(cs) != 1 || len(cs[0].Pods) != 0 || len(cs[0].Peers) != 2 || len(cs[0].Ports) != 1 {
		t.Fatalf("before the ADD of x/web (scheduled to n1): want one conjunction with 2 peers, 1 port and no pod clause, got %v", cs)
	}
	id := cs[0].ID
	if e.ids.InUse() != 1 {
		t.Fatalf("conjunction ids in use before the ADD: %d, want 1", e.ids.InUse())
	}
	// An unattached pod is not isolated by anything: it has no flows at all.
	if got := e.LocalPods(); len(got) != 0 {
		t.Fatalf("local pods before the ADD: %v", got)
	}

	ch := e.SetLocalPod(LocalPod{Namespace: "x", Name: "web", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}, OFPort: 7})
	if len(ch.Conjunctions) != 1 {
		t.Fatalf("ADD of x/web: want the one conjunction changed, got %v", ch.Conjunctions)
	}
	c := ch.Conjunctions[0]
	if c.Old == nil || c.New == nil || c.Old.ID != id || c.New.ID != id || len(c.Old.Pods) != 0 || len(c.New.Pods) != 1 ||
		len(c.New.Peers) != 2 || len(c.New.Ports) != 1 {
		t.Fatalf("ADD of x/web: want conjunction %d to gain the pod clause and keep its peers and port, got %v", id, c)
	}
	if len(ch.Isolation) != 1 || !ch.Isolation[0].New.Ingress {
		t.Fatalf("ADD of x/web: want it isolated for ingress, got %v", ch.Isolation)
	}

	ch = e.DeleteLocalPod("x", "web")
	if len(ch.Conjunctions) != 1 || ch.Conjunctions[0].New == nil || ch.Conjunctions[0].New.ID != id || len(ch.Conjunctions[0].New.Pods) != 0 {
		t.Fatalf("DEL of x/web (still scheduled to n1): want conjunction %d kept without its pod clause, got %v", id, ch.Conjunctions)
	}

	ch = e.DeletePod("x", "web")
	if len(ch.Conjunctions) != 1 || ch.Conjunctions[0].New != nil || ch.Conjunctions[0].Old.ID != id {
		t.Fatalf("x/web deleted from the API: want conjunction %d removed, got %v", id, ch.Conjunctions)
	}
	if held(e) != 0 || len(e.Conjunctions()) != 0 {
		t.Fatalf("after x/web's deletion: %d ids held once the released ones are freed, conjunctions %v; want none", held(e), e.Conjunctions())
	}

	// Without a node name nothing counts before the ADD (as before SetNode existed).
	if cs := scheduledEngine(false).Conjunctions(); len(cs) != 0 {
		t.Fatalf("without SetNode: want no conjunction before the ADD, got %v", cs)
	}
}

// Pods that will never be attached here bring nothing: on the host network, terminated,
// moved to another node; each change takes the clauses away and releases the id.
func TestScheduledPodRulesFollowThePod(t *testing.T) {
	e := scheduledEngine(true)
	web := func(mod func(*Pod)) *Pod {
		p := &Pod{Namespace: "x", Name: "web", NodeName: "n1", Labels: map[string]string{"app": "web"}}
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name string
		mod  func(*Pod)
	}{
		{"host network", func(p *Pod) { p.HostNetwork = true }},
		{"terminated", func(p *Pod) { p.Terminal = true }},
		{"on another node", func(p *Pod) { p.NodeName = "n2" }},
		{"not selected any more", func(p *Pod) { p.Labels = map[string]string{"app": "other"} }},
	} {
		ch := e.UpsertPod(web(tc.mod))
		if len(ch.Conjunctions) != 1 || ch.Conjunctions[0].New != nil || held(e) != 0 {
			t.Fatalf("%s: want the conjunction removed and its id released, got %v (%d ids held)", tc.name, ch.Conjunctions, held(e))
		}
		ch = e.UpsertPod(web(func(*Pod) {}))
		if len(ch.Conjunctions) != 1 || ch.Conjunctions[0].New == nil || len(ch.Conjunctions[0].New.Pods) != 0 {
			t.Fatalf("%s, then back: want the conjunction again without a pod clause, got %v", tc.name, ch.Conjunctions)
		}
	}
	// The policy deleted: the conjunction goes; created again: it comes back.
	if ch := e.DeletePolicy("x", "allow-clients"); len(ch.Conjunctions) != 1 || ch.Conjunctions[0].New != nil || held(e) != 0 {
		t.Fatalf("policy deleted: want the conjunction removed, got %v", ch.Conjunctions)
	}
}
