package flows

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestPolicyFlowSetSetReportsOnlyWhatChanged: re-setting a rule that gained one pod (a
// CNI ADD of a pod its policies select) reports that pod's clause flow only, not the
// rule's other M+N+K flows whose contribution is the same (issue 21: with 10 rules of
// ~240 flows, every ADD re-sent ~2,400 unchanged flows through the flow store). The keys
// reported are exactly the flows that differ, and for ten rules sharing the new pod's
// match one key (the flow carrying the ten conjunction actions).
func TestPolicyFlowSetSetReportsOnlyWhatChanged(t *testing.T) {
	pod := func(i int) Pod {
		return Pod{OFPort: uint32(100 + i), IPs: []net.IP{net.IPv4(10, 244, 1, byte(10+i))}}
	}
	var peers []string
	for i := 0; i < 140; i++ {
		peers = append(peers, fmt.Sprintf("10.251.%d.%d/32", i/100, i%100+1))
	}
	ports := []PolicyPort{{IPProtoTCP, 80, 0xffff}, {IPProtoTCP, 8000, 0xffe0}, {IPProtoTCP, 8080, 0xffff}}
	for _, egress := range []bool{false, true} {
		s := NewPolicyFlowSet(policyConfig())
		var pods []Pod
		for i := 0; i < 95; i++ {
			pods = append(pods, pod(i))
		}
		for id := uint32(1); id <= 10; id++ {
			s.Set(testRule(id, egress, pods, peers, ports))
		}
		before := map[string]string{}
		for _, f := range s.Flows() {
			before[f.MatchKey()] = f.String()
		}
		grown := append(append([]Pod(nil), pods...), pod(95))
		reported := map[string]bool{}
		for id := uint32(1); id <= 10; id++ {
			for _, k := range s.Set(testRule(id, egress, grown, peers, ports)) {
				reported[k] = true
			}
		}
		var diff []string
		after := map[string]string{}
		for _, f := range s.Flows() {
			after[f.MatchKey()] = f.String()
			if before[f.MatchKey()] != f.String() {
				diff = append(diff, f.String())
			}
		}
		if len(diff) != 1 || !strings.Contains(diff[0], "conjunction(10,1/3)") {
			t.Fatalf("egress=%v: want one new flow (the pod's clause of the ten rules), got %d:\n%s", egress, len(diff), strings.Join(diff, "\n"))
		}
		if len(reported) != 1 {
			var ks []string
			for k := range reported {
				ks = append(ks, k)
			}
			t.Fatalf("egress=%v: Set reported %d keys for one changed flow (first: %.200s)", egress, len(reported), strings.Join(ks, " | "))
		}
		for k := range reported {
			if _, ok := after[k]; !ok || before[k] == after[k] {
				t.Fatalf("egress=%v: reported key %s did not change", egress, k)
			}
		}
		// Shrinking back reports the removed flow only.
		reported = map[string]bool{}
		for id := uint32(1); id <= 10; id++ {
			for _, k := range s.Set(testRule(id, egress, pods, peers, ports)) {
				reported[k] = true
			}
		}
		if len(reported) != 1 || len(s.Flows()) != len(before) {
			t.Fatalf("egress=%v: shrinking reported %d keys, %d flows (want 1, %d)", egress, len(reported), len(s.Flows()), len(before))
		}
	}
}

// TestPolicyFlowSetRuleWithoutPods: a rule whose pods are scheduled to the node and not
// attached yet (no pods) has its peer and port clauses and its conj_id flow, and no pod
// clause, so the conjunction matches nothing; the first pod's ADD then reports that pod's
// clause flow only (what the ADD's bundle carries), and the last pod's DEL leaves the
// clauses. A rule without pods and with neither a peer nor a port clause has no flows.
// Before rules without pods had flows, the first Set gave none and the test fails there.
func TestPolicyFlowSetRuleWithoutPods(t *testing.T) {
	peers := []string{"10.251.0.1/32", "10.251.0.2/32", "10.251.0.3/32"}
	ports := []PolicyPort{{IPProtoTCP, 80, 0xffff}, {IPProtoTCP, 8000, 0xffe0}}
	pod := Pod{OFPort: 100, IPs: []net.IP{net.IPv4(10, 244, 1, 10)}}
	for _, egress := range []bool{false, true} {
		s := NewPolicyFlowSet(policyConfig())
		if got := len(s.Set(testRule(7, egress, nil, peers, ports))); got != 6 || s.Len() != 6 {
			t.Fatalf("egress=%v: a rule without pods: want its 3 peer, 2 port and 1 conj_id flows, got %d reported, %d held:\n%s",
				egress, got, s.Len(), flowsText(s.Flows()))
		}
		for _, f := range s.Flows() {
			if strings.Contains(f.String(), ",1/3)") {
				t.Fatalf("egress=%v: a rule without pods has a pod clause flow: %s", egress, f)
			}
		}
		keys := s.Set(testRule(7, egress, []Pod{pod}, peers, ports))
		if len(keys) != 1 || s.Len() != 7 {
			t.Fatalf("egress=%v: the first pod: want its clause flow only reported, got %d keys (%d held):\n%s", egress, len(keys), s.Len(), flowsText(s.Flows()))
		}
		if f, _ := s.Flow(keys[0]); !strings.Contains(f.String(), "conjunction(7,1/3)") {
			t.Fatalf("egress=%v: the first pod's flow: %s", egress, f)
		}
		if keys := s.Set(testRule(7, egress, nil, peers, ports)); len(keys) != 1 || s.Len() != 6 {
			t.Fatalf("egress=%v: the last pod gone: want its clause flow only deleted, got %d keys, %d held", egress, len(keys), s.Len())
		}
		if keys := s.Remove(7); len(keys) != 6 || s.Len() != 0 {
			t.Fatalf("egress=%v: removed: want the 6 flows deleted, got %d keys, %d held", egress, len(keys), s.Len())
		}
		if keys := s.Set(testRule(8, egress, nil, nil, nil)); len(keys) != 0 || s.Len() != 0 {
			t.Fatalf("egress=%v: a rule without pods, any peer and any port: want no flows, got %d", egress, s.Len())
		}
	}
}

func flowsText(fs []Flow) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}
