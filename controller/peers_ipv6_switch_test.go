package controller

import (
	"net"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
)

// testPeer6 is testPeer with an IPv6 pod subnet.
func testPeer6(name, subnet, subnet6, ip string) flows.Peer {
	p := testPeer(name, subnet, ip)
	_, p.PodSubnetIPv6, _ = net.ParseCIDR(subnet6)
	return p
}

// TestOverlayIPv6PeersOnSwitch, against a sandbox switch: on a dual-stack node a
// dual-stack peer has its IPv4 flows and two IPv6 ones under its owner, an IPv4-only peer
// its IPv4 ones; a peer whose IPv6 subnet overlaps another's is refused naming both; a
// moved IPv6 subnet moves the flows; a deleted peer leaves no flow naming its IPv6
// subnet. On an IPv4-only node the same peers have their IPv4 flows only, and an
// overlapping IPv6 subnet is no reason to refuse one.
func TestOverlayIPv6PeersOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, false)
	_, cluster, _ := net.ParseCIDR("10.244.0.0/16")
	_, sn6, _ := net.ParseCIDR("fd00:10:244:1::/64")
	n.cfg.ClusterCIDR, n.cfg.TunnelOFPort, n.cfg.NodeIP = cluster, 1, net.ParseIP("172.16.0.1").To4()
	n.cfg.Policy = false
	n.cfg.PodSubnetIPv6, n.cfg.GatewayIPv6 = sn6, net.ParseIP("fd00:10:244:1::1")
	b := testPeer6("node-b", "10.244.2.0/24", "fd00:10:244:2::/64", "172.16.0.2")
	c := testPeer("node-c", "10.244.3.0/24", "172.16.0.3")
	o := newOverlay(n, OverlayOptions{})
	n.overlay = o
	if err := o.load([]flows.Peer{b, c}); err != nil {
		t.Fatal(err)
	}
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	ids := func() map[string]uint32 {
		m := map[string]uint32{}
		for _, p := range o.Peers() {
			m[p.Name] = p.OwnerID
		}
		return m
	}
	naming := func(s string) []string {
		var out []string
		for _, l := range ofDumpLines(t, ovs) {
			if strings.Contains(l, s) {
				out = append(out, l)
			}
		}
		return out
	}
	byID, _ := switchPeerFlows(t, ovs)
	if got := len(byID[ids()["node-b"]]); got != 5 {
		t.Errorf("dual-stack peer: %d flows, want 5 (3 IPv4, 2 IPv6): %v", got, byID[ids()["node-b"]])
	}
	if got := len(byID[ids()["node-c"]]); got != 3 {
		t.Errorf("IPv4-only peer: %d flows, want 3", got)
	}
	if got := naming("fd00:10:244:2::/64"); len(got) != 2 {
		t.Errorf("flows naming node-b's IPv6 subnet: %v, want tunnel_ingress and remote", got)
	}

	err := o.AddPeer(ctx, testPeer6("node-x", "10.244.9.0/24", "fd00:10:244:2:8000::/65", "172.16.0.9"))
	if err == nil || !strings.Contains(err.Error(), "pod subnet fd00:10:244:2:8000::/65 overlaps peer node-b's fd00:10:244:2::/64") {
		t.Errorf("AddPeer with an IPv6 subnet inside node-b's: %v", err)
	}
	moved := testPeer6("node-b", "10.244.2.0/24", "fd00:10:244:12::/64", "172.16.0.2")
	if err := o.UpdatePeer(ctx, b, moved); err != nil {
		t.Fatal(err)
	}
	if old, cur := naming("fd00:10:244:2::/64"), naming("fd00:10:244:12::/64"); len(old) != 0 || len(cur) != 2 {
		t.Errorf("after the move: %v for the old subnet, %v for the new one", old, cur)
	}
	if err := o.AddPeer(ctx, testPeer6("node-y", "10.244.8.0/24", "fd00:10:244:2::/64", "172.16.0.8")); err != nil {
		t.Errorf("node-b's former IPv6 subnet not free again: %v", err)
	}
	if err := o.DeletePeer(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if left := naming("fd00:10:244:12::/64"); len(left) != 0 {
		t.Errorf("deleted peer's IPv6 flows left: %v", left)
	}

	// An IPv4-only node: IPv6 subnets are ignored, overlapping or not.
	ovs4, sw4, n4, ctx4 := switchTestNode(t, false)
	n4.cfg.ClusterCIDR, n4.cfg.TunnelOFPort, n4.cfg.NodeIP = cluster, 1, net.ParseIP("172.16.0.1").To4()
	o4 := newOverlay(n4, OverlayOptions{})
	n4.overlay = o4
	if err := o4.load([]flows.Peer{b}); err != nil {
		t.Fatal(err)
	}
	if err := n4.store.Sync(ctx4, sw4, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := o4.AddPeer(ctx4, testPeer6("node-x", "10.244.9.0/24", "fd00:10:244:2::/64", "172.16.0.9")); err != nil {
		t.Errorf("IPv4-only node refused a peer for its IPv6 subnet: %v", err)
	}
	for _, l := range ofDumpLines(t, ovs4) {
		if strings.Contains(l, "ipv6") {
			t.Errorf("IPv4-only node has an IPv6 flow: %s", l)
		}
	}
	for _, p := range o4.Peers() {
		if p.PodSubnetIPv6 != nil {
			t.Errorf("IPv4-only node keeps peer %s's IPv6 subnet %v", p.Name, p.PodSubnetIPv6)
		}
	}
}
