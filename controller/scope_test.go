package controller

import (
	"reflect"
	"testing"
)

// TestPlanGC: a GC for one network removes only its own attachments missing from the
// valid list; another network's, and those recorded without a network, are kept; an
// attachment with contradicting records is kept.
func TestPlanGC(t *testing.T) {
	id := func(c string) AttachmentID { return AttachmentID{ContainerID: c, IfName: "eth0"} }
	known := map[AttachmentID][]string{
		id("a-valid"):    {"A", "A", "A"}, // pod, port, lease of network A, listed valid
		id("a-stale"):    {"A", "A", "A"},
		id("a-lease"):    {"A"},           // lease only (a crashed ADD)
		id("b-pod"):      {"B", "B", "B"}, // network B's pod: never A's GC's business
		id("legacy"):     {"", "", ""},    // from before networks were recorded
		id("mixed"):      {"", "A"},       // port from an older ofsdn, lease of A
		id("contradict"): {"A", "B"},
	}
	got := planGC("A", []AttachmentID{id("a-valid"), id("not-known")}, known)
	want := gcPlan{
		Remove:   []AttachmentID{id("a-lease"), id("a-stale"), id("mixed")},
		Unscoped: []AttachmentID{id("legacy")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("planGC(A) = %+v, want %+v", got, want)
	}
	// The same attachments seen by network B's GC, with an empty valid list.
	got = planGC("B", []AttachmentID{}, known)
	want = gcPlan{Remove: []AttachmentID{id("b-pod")}, Unscoped: []AttachmentID{id("legacy")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("planGC(B) = %+v, want %+v", got, want)
	}
	// An interface name is part of the identity: eth0 valid does not keep net1.
	two := map[AttachmentID][]string{{"c", "eth0"}: {"A"}, {"c", "net1"}: {"A"}}
	got = planGC("A", []AttachmentID{{"c", "eth0"}}, two)
	if want := []AttachmentID{{"c", "net1"}}; !reflect.DeepEqual(got.Remove, want) {
		t.Errorf("planGC with eth0 valid removes %v, want %v", got.Remove, want)
	}
}

func TestSameNetwork(t *testing.T) {
	for _, c := range []struct {
		recorded, req string
		want          bool
	}{{"A", "A", true}, {"A", "B", false}, {"", "B", true}, {"A", "", true}, {"", "", true}} {
		if got := sameNetwork(c.recorded, c.req); got != c.want {
			t.Errorf("sameNetwork(%q, %q) = %v, want %v", c.recorded, c.req, got, c.want)
		}
	}
}

// TestBrokenKind: reconciliation removes only what cannot be in use.
func TestBrokenKind(t *testing.T) {
	for _, c := range []struct {
		hasPort, veth, leased bool
		stale                 bool
	}{
		{hasPort: true, veth: true, leased: true, stale: false},    // a working pod
		{hasPort: true, veth: true, leased: false, stale: false},   // lease lost: restored, not removed
		{hasPort: true, veth: false, leased: true, stale: true},    // veth gone: the pod's end too
		{hasPort: true, veth: false, leased: false, stale: true},   // same, no lease
		{hasPort: false, veth: false, leased: true, stale: true},   // ADD died after its lease
		{hasPort: false, veth: true, leased: true, stale: false},   // port lost, pod may run
		{hasPort: false, veth: false, leased: false, stale: false}, // nothing left
	} {
		if got := brokenKind(c.hasPort, c.veth, c.leased) != ""; got != c.stale {
			t.Errorf("brokenKind(port %v, veth %v, lease %v) stale = %v, want %v", c.hasPort, c.veth, c.leased, got, c.stale)
		}
	}
}
