package flows

import (
	"math/rand"
	"net"
	"reflect"
	"testing"
)

// TestPolicyFlowSetSetPodsMatchesFullRebuild: a sequence of Sets in which rules gain and
// lose pods and peers (the incremental path: same direction and ports), change ports, lose
// every pod or peer, are removed and set again, ingress and egress, with pods that share
// an ofport, and rules that share clause flows, gives after every step the same changed
// keys and the same flows as a set that rebuilds every rule from scratch (the path every
// Set took before), and the same rule flows per id (each listed once).
func TestPolicyFlowSetSetPodsMatchesFullRebuild(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	pod := func(i int) Pod {
		return Pod{OFPort: uint32(100 + i%40), IPs: []net.IP{net.IPv4(10, 244, 1, byte(10+i)).To4()}, OwnerID: uint32(i + 1)}
	}
	peer := func(i int) *net.IPNet {
		return &net.IPNet{IP: net.IPv4(10, 251, byte(i/100), byte(i%100+1)).To4(), Mask: net.CIDRMask(32, 32)}
	}
	portSets := [][]PolicyPort{nil, {{IPProtoTCP, 80, 0xffff}}, {{IPProtoTCP, 80, 0xffff}, {IPProtoTCP, 8000, 0xffe0}}}
	type ruleState struct {
		pods, peers []int
		ports       int
		anyPeer     bool
		egress      bool
	}
	build := func(id uint32, st ruleState) PolicyRule {
		r := PolicyRule{ID: id, Egress: st.egress, AnyPeer: st.anyPeer, AnyPort: st.ports == 0, Ports: portSets[st.ports]}
		for _, i := range st.pods {
			r.Pods = append(r.Pods, pod(i))
		}
		if !st.anyPeer {
			for _, i := range st.peers {
				r.Peers = append(r.Peers, peer(i))
			}
		}
		return r
	}
	inc, full := NewPolicyFlowSet(policyConfig()), NewPolicyFlowSet(policyConfig())
	full.full = true
	rules := map[uint32]*ruleState{}
	for id := uint32(1); id <= 6; id++ {
		rules[id] = &ruleState{peers: []int{1, 2, int(id)}, ports: int(id) % 3, anyPeer: id == 5, egress: id%2 == 0}
	}
	// Flow texts, each once: the rebuild lists an allow flow once per pod that shares it
	// (two pods on one ofport), the incremental path once.
	texts := func(fs []Flow) []string {
		var out []string
		for _, f := range fs {
			if s := f.String(); len(out) == 0 || out[len(out)-1] != s {
				out = append(out, s)
			}
		}
		return out
	}
	for step := 0; step < 2000; step++ {
		id := uint32(1 + rng.Intn(6))
		st := rules[id]
		op := rng.Intn(20)
		switch {
		case op < 9: // a pod more
			st.pods = append(st.pods, rng.Intn(60))
		case op < 15 && len(st.pods) > 0: // a pod less
			i := rng.Intn(len(st.pods))
			st.pods = append(st.pods[:i], st.pods[i+1:]...)
		case op < 16:
			st.peers = append(st.peers, rng.Intn(30))
		case op < 17 && len(st.peers) > 0:
			st.peers = st.peers[1:]
		case op < 18:
			st.ports = rng.Intn(3)
		case op < 19:
			st.pods = nil
		default:
			got, want := inc.Remove(id), full.Remove(id)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: Remove(%d) changed %v, the rebuild %v", step, id, got, want)
			}
			continue
		}
		r := build(id, *st)
		got, want := inc.Set(r), full.Set(r)
		if len(got) == 0 && len(want) == 0 {
			got, want = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: Set(rule %d, %d pods) changed %v, the rebuild %v", step, id, len(r.Pods), got, want)
		}
		if g, w := texts(inc.Flows()), texts(full.Flows()); !reflect.DeepEqual(g, w) {
			t.Fatalf("step %d: %d flows, the rebuild %d", step, len(g), len(w))
		}
		for rid := uint32(1); rid <= 6; rid++ {
			if g, w := texts(inc.RuleFlows(rid)), texts(full.RuleFlows(rid)); !reflect.DeepEqual(g, w) {
				t.Fatalf("step %d: rule %d flows %d, the rebuild %d", step, rid, len(g), len(w))
			}
		}
	}
	if inc.Len() == 0 {
		t.Fatal("the sequence ended with no flows: it tests little")
	}
}
