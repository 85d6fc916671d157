package flows

import (
	"net"
	"testing"
)

// BenchmarkPolicyFlowSetSetOnePodMore: the cost of Set for a rule that gained one pod (a
// CNI ADD with NetworkPolicy on: the runner re-sets each rule selecting the new pod), at
// the policy A/B's shape: M pods, N peers, K port matches.
func BenchmarkPolicyFlowSetSetOnePodMore(b *testing.B) {
	const m, n = 96, 140
	var pods []Pod
	for i := 0; i < m+1; i++ {
		pods = append(pods, Pod{OFPort: uint32(10 + i), IPs: []net.IP{net.IPv4(10, 250, 1, byte(i+2)).To4()}, OwnerID: uint32(i + 1)})
	}
	var peers []*net.IPNet
	for i := 0; i < n; i++ {
		peers = append(peers, &net.IPNet{IP: net.IPv4(10, 251, byte(i/200), byte(i%200+1)).To4(), Mask: net.CIDRMask(32, 32)})
	}
	ports := []PolicyPort{{Proto: 6, Port: 80, Mask: 0xffff}, {Proto: 6, Port: 8000, Mask: 0xffc0}, {Proto: 6, Port: 8064, Mask: 0xffe0}, {Proto: 6, Port: 8096, Mask: 0xfffc}, {Proto: 6, Port: 8080, Mask: 0xffff}}
	cfg := testConfig()
	cfg.Policy = true
	s := NewPolicyFlowSet(cfg)
	rule := func(k int) PolicyRule {
		return PolicyRule{ID: 7, Pods: pods[:k], Peers: peers, Ports: ports}
	}
	s.Set(rule(m))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := m + 1 - i%2
		if ch := s.Set(rule(k)); len(ch) != 1 {
			b.Fatalf("Set of a rule with one pod more or less changed %d flows, want 1", len(ch))
		}
	}
}

// BenchmarkPolicyFlowSetSetOnePeerPodMore: the cost of Set for a rule that selects the
// burst pods of a full node and admits them as peers, when one pod more came (a CNI ADD
// with NetworkPolicy on, at the shape of bench/k8s's policies: every rule gains the pod
// as a target and its address as a peer): 250 pods and peers, one port.
func BenchmarkPolicyFlowSetSetOnePeerPodMore(b *testing.B) {
	const m = 250
	var pods []Pod
	var peers []*net.IPNet
	for i := 0; i < m+1; i++ {
		ip := net.IPv4(10, 250, byte(i/200), byte(i%200+1)).To4()
		pods = append(pods, Pod{OFPort: uint32(10 + i), IPs: []net.IP{ip}, OwnerID: uint32(i + 1)})
		peers = append(peers, &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)})
	}
	ports := []PolicyPort{{Proto: 6, Port: 80, Mask: 0xffff}}
	cfg := testConfig()
	cfg.Policy = true
	s := NewPolicyFlowSet(cfg)
	s.Set(PolicyRule{ID: 7, Pods: pods[:m], Peers: peers[:m], Ports: ports})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := m + 1 - i%2
		if ch := s.Set(PolicyRule{ID: 7, Pods: pods[:k], Peers: peers[:k], Ports: ports}); len(ch) != 2 {
			b.Fatalf("Set of a rule with one pod and peer more or less changed %d flows, want 2", len(ch))
		}
	}
}
