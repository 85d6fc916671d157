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
