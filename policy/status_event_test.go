package policy

import (
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// countingSelector counts its Matches calls.
type countingSelector struct {
	labels.Selector
	n *int
}

func (s countingSelector) Matches(l labels.Labels) bool { *s.n++; return s.Selector.Matches(l) }

// TestPodStatusEventEvaluatesNoSelector: a Pod event that changes only the pod's
// address (the kubelet's status write after each ADD) evaluates no peer selector of the
// rules the pod cannot newly match (its labels and namespace are the same), yet the
// rules it is a peer of are recompiled with its new address (issue 21: with 1,000
// policies selecting by namespace, each status event of a burst of ADDs held the agent's
// lock for 6-10 ms evaluating all of them).
func TestPodStatusEventEvaluatesNoSelector(t *testing.T) {
	e := NewEngine(nil)
	e.UpsertNamespace(&Namespace{Name: "x", Labels: map[string]string{"team": "t"}})
	e.UpsertNamespace(&Namespace{Name: "y", Labels: map[string]string{"team": "u"}})
	calls := 0
	for i := 0; i < 200; i++ {
		app := fmt.Sprintf("a%d", i%10)
		e.UpsertPolicy(&Policy{Namespace: "x", Name: fmt.Sprintf("p%03d", i), PodSelector: labels.Everything(), IngressType: true,
			Ingress: []Rule{{AllPorts: true, Peers: []Peer{{NamespaceSelector: labels.Everything(),
				PodSelector: countingSelector{labels.SelectorFromSet(labels.Set{"app": app}), &calls}}}}}})
	}
	e.UpsertPod(&Pod{Namespace: "x", Name: "local", Labels: map[string]string{"app": "local"}, NodeName: "n1"})
	e.SetLocalPod(LocalPod{Namespace: "x", Name: "local", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}, OFPort: 5})
	peer := &Pod{Namespace: "y", Name: "peer", Labels: map[string]string{"app": "a3"}, NodeName: "n2",
		IPs: []netip.Addr{netip.MustParseAddr("10.244.2.7")}}
	e.UpsertPod(peer)
	other := &Pod{Namespace: "y", Name: "other", Labels: map[string]string{"app": "zz"}, NodeName: "n2"}
	e.UpsertPod(other)
	other2 := *other
	other2.IPs = []netip.Addr{netip.MustParseAddr("10.244.2.8")}
	e.UpsertPod(&other2) // eligible now: selectors are evaluated
	calls = 0

	// The peer's address moves: the 20 rules selecting app=a3 change, no selector runs.
	moved := *peer
	moved.IPs = []netip.Addr{netip.MustParseAddr("10.244.2.9")}
	ch := e.UpsertPod(&moved)
	if calls != 0 {
		t.Errorf("an address-only Pod event evaluated %d pod selectors, want 0", calls)
	}
	if len(ch.Conjunctions) != 20 {
		t.Fatalf("%d conjunctions changed, want the 20 rules whose peer app=a3 moved", len(ch.Conjunctions))
	}
	for _, c := range ch.Conjunctions {
		if len(c.New.Peers) != 1 || c.New.Peers[0] != netip.MustParsePrefix("10.244.2.9/32") {
			t.Fatalf("conjunction %d peers %v, want the new address", c.New.ID, c.New.Peers)
		}
	}
	// A pod that is no peer: nothing changes, no selector runs.
	calls = 0
	other3 := other2
	other3.IPs = []netip.Addr{netip.MustParseAddr("10.244.2.10")}
	if ch := e.UpsertPod(&other3); !ch.Empty() || calls != 0 {
		t.Errorf("a non-peer's address event: %d changes, %d selector calls; want none", len(ch.Conjunctions), calls)
	}
	// A label change still re-evaluates.
	calls = 0
	relabeled := moved
	relabeled.Labels = map[string]string{"app": "a4"}
	if ch := e.UpsertPod(&relabeled); calls == 0 || len(ch.Conjunctions) != 40 {
		t.Errorf("a relabel: %d selector calls, %d conjunctions changed; want calls and 40 (20 lose it, 20 gain it)", calls, len(ch.Conjunctions))
	}
}
