package flows

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// goldenPeerB is PeerFlows(testConfig(), testPeerB()); 0x0af40200 in the cookie is the
// peer's owner id, 10.244.2.0 (its pod subnet's address, as an upgraded node gives it).
var goldenPeerB = []string{
	`cookie=0x50007030af40200, table="tunnel_ingress", priority=100,ip,tun_src=172.16.0.2,nw_src=10.244.2.0/24 actions=goto_table:service`,
	`cookie=0x50007030af40200, table=arp, priority=100,arp,reg0=0x1/0xf,arp_tpa=10.244.2.0/24,arp_op=1 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:aa:bb:cc:dd:ee:ff->eth_src,set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:aa:bb:cc:dd:ee:ff->arp_sha,move:NXM_OF_ARP_TPA[]->NXM_NX_REG2[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],move:NXM_NX_REG2[]->NXM_OF_ARP_SPA[],IN_PORT`,
	`cookie=0x50007030af40200, table=remote, priority=100,ip,nw_dst=10.244.2.0/24 actions=set_field:172.16.0.2->tun_dst,load:0x1->NXM_NX_REG1[],goto_table:egress`,
}

func TestPeerFlowsGolden(t *testing.T) {
	compareLines(t, "peer flows", lines(PeerFlows(testConfig(), testPeerB()), nil), goldenPeerB)
}

// TestPeerFlowsValidAndDistinct checks that the peer flows pass Validate, encode, and never
// share a match key with the pipeline's, a pod's or another peer's flows (the switch
// would let one replace the other).
func TestPeerFlowsValidAndDistinct(t *testing.T) {
	cfg := testConfig()
	all := append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...)
	all = append(all, PeerFlows(cfg, testPeerB())...)
	all = append(all, PeerFlows(cfg, testPeerC())...)
	keys := map[string]string{}
	for _, f := range all {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		if _, err := f.FlowMod(openflow13.FC_ADD).MarshalBinary(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if prev, dup := keys[f.MatchKey()]; dup {
			t.Errorf("two flows with one match key %s:\n %s\n %s", f.MatchKey(), prev, f)
		}
		keys[f.MatchKey()] = f.String()
	}
}

// TestPeerCookieSelectsOnlyThatPeer: deleting peer B by its cookie takes all of B's flows
// and nothing of C, the pipeline or a pod; the cookie does not depend on the node IP.
func TestPeerCookieSelectsOnlyThatPeer(t *testing.T) {
	cfg := testConfig()
	b, c := testPeerB(), testPeerC()
	cookie, mask := PeerCookie(b)
	for _, f := range PeerFlows(cfg, b) {
		if !selects(f, cookie, mask) {
			t.Errorf("B's cookie does not select B's flow %s", f)
		}
	}
	others := append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...)
	others = append(others, PeerFlows(cfg, c)...)
	// A pod whose IP equals B's subnet address must not collide (owner kind differs).
	others = append(others, PodFlows(cfg, Pod{OFPort: 9, MAC: testPodA().MAC, IPs: []net.IP{net.ParseIP("10.244.2.0")}})...)
	for _, f := range others {
		if selects(f, cookie, mask) {
			t.Errorf("B's cookie selects %s", f)
		}
	}
	moved := b
	moved.NodeIP = net.ParseIP("172.16.0.22")
	if c2, m2 := PeerCookie(moved); c2 != cookie || m2 != mask {
		t.Errorf("peer cookie changed with the node IP: %#x/%#x vs %#x/%#x", c2, m2, cookie, mask)
	}
	if LegacyPeerID(b) != 0x0af40200 {
		t.Errorf("LegacyPeerID(B) = %#x, want 0x0af40200 (10.244.2.0)", LegacyPeerID(b))
	}
}

// TestPeerOwnerIsAllocatedID: a peer's flows carry its OwnerID, not its subnet, so the
// cookie stays with the peer when its pod subnet changes; a peer without one is refused.
func TestPeerOwnerIsAllocatedID(t *testing.T) {
	cfg := testConfig()
	p := testPeerB()
	p.OwnerID = 7
	for _, f := range PeerFlows(cfg, p) {
		if f.Cookie.Owner() != OwnerPeer || f.Cookie.OwnerID() != 7 {
			t.Errorf("peer flow with owner id 7 has cookie %v (kind %d id %d): %s", f.Cookie, f.Cookie.Owner(), f.Cookie.OwnerID(), f)
		}
	}
	moved := p
	moved.PodSubnet = mustCIDR("10.244.9.0/24")
	if PeerOwner(moved) != PeerOwner(p) {
		t.Errorf("owner changed with the pod subnet: %v vs %v", PeerOwner(moved), PeerOwner(p))
	}
	if s := PeerOwner(p).String(); s != "peer owner 7" {
		t.Errorf("PeerOwner.String() = %q, want \"peer owner 7\"", s)
	}
	p.OwnerID = 0
	if err := p.Validate(cfg); err == nil || !strings.Contains(err.Error(), "owner id 0") {
		t.Errorf("Validate of a peer without owner id: %v, want an error about owner id 0", err)
	}
}

// TestPeerIPChangeRewritesSameKeys: a new node IP for the same subnet gives flows with the
// same match keys except the tunnel_ingress one (it matches tun_src), so a flow store
// diff modifies the remote flow in place and swaps the ingress flow.
func TestPeerIPChangeRewritesSameKeys(t *testing.T) {
	cfg := testConfig()
	old, moved := testPeerB(), testPeerB()
	moved.NodeIP = net.ParseIP("172.16.0.22")
	a, b := PeerFlows(cfg, old), PeerFlows(cfg, moved)
	for i := range a {
		sameKey := a[i].MatchKey() == b[i].MatchKey()
		if a[i].Table == table("tunnel_ingress") {
			if sameKey || !strings.Contains(b[i].String(), "tun_src=172.16.0.22") {
				t.Errorf("ingress flow after the IP change: %s", b[i])
			}
			continue
		}
		if !sameKey {
			t.Errorf("match key changed with the node IP:\n %s\n %s", a[i], b[i])
		}
	}
	if !strings.Contains(b[2].String(), "set_field:172.16.0.22->tun_dst") {
		t.Errorf("remote flow does not send to the new IP: %s", b[2])
	}
}

func TestPeerValidate(t *testing.T) {
	cfg := testConfig()
	if err := testPeerB().Validate(cfg); err != nil {
		t.Fatal(err)
	}
	noTunnel := cfg
	noTunnel.TunnelOFPort = 0
	if err := testPeerB().Validate(noTunnel); err == nil {
		t.Error("peer accepted on a node without a tunnel port")
	}
	for name, p := range map[string]Peer{
		"own node IP":           {Name: "x", NodeIP: net.ParseIP("172.16.0.1"), PodSubnet: mustCIDR("10.244.2.0/24"), OwnerID: 1},
		"ipv6 node IP":          {Name: "x", NodeIP: net.ParseIP("fd00::2"), PodSubnet: mustCIDR("10.244.2.0/24"), OwnerID: 1},
		"no subnet":             {Name: "x", NodeIP: net.ParseIP("172.16.0.2"), OwnerID: 1},
		"overlaps local subnet": {Name: "x", NodeIP: net.ParseIP("172.16.0.2"), PodSubnet: mustCIDR("10.244.0.0/23"), OwnerID: 1},
		"outside cluster CIDR":  {Name: "x", NodeIP: net.ParseIP("172.16.0.2"), PodSubnet: mustCIDR("10.245.2.0/24"), OwnerID: 1},
		"no owner id":           {Name: "x", NodeIP: net.ParseIP("172.16.0.2"), PodSubnet: mustCIDR("10.244.2.0/24")},
	} {
		if err := p.Validate(cfg); err == nil {
			t.Errorf("%s: Peer.Validate accepted %+v", name, p)
		}
	}
	for name, c := range map[string]NodeConfig{
		"cluster CIDR not containing the subnet": func() NodeConfig { c := cfg; c.ClusterCIDR = mustCIDR("10.250.0.0/16"); return c }(),
		"service CIDR overlapping the subnet":    func() NodeConfig { c := cfg; c.ServiceCIDR = mustCIDR("10.244.1.0/28"); return c }(),
		"tunnel on the gateway's port":           func() NodeConfig { c := cfg; c.TunnelOFPort = 2; return c }(),
		"tunnel without node IP":                 func() NodeConfig { c := cfg; c.NodeIP = nil; return c }(),
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: NodeConfig.Validate accepted it", name)
		}
	}
}

// TestSingleNodePipelineHasNoTunnelFlows: without tunnel, cluster and service CIDRs the
// pipeline is the single-node one: the overlay and service_host features are off, so no
// classifier flow for a tunnel port and no flow at all in tunnel_ingress, service and
// remote (their 3 + 2 + 3 flows and the tunnel's classifier flow: 8 fewer).
func TestSingleNodePipelineHasNoTunnelFlows(t *testing.T) {
	cfg := testConfig()
	cfg.TunnelOFPort, cfg.NodeIP, cfg.ClusterCIDR, cfg.ServiceCIDR = 0, nil, nil, nil
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	full := PipelineFlows(testConfig())
	single := PipelineFlows(cfg)
	if len(full)-len(single) != 8 {
		t.Fatalf("single-node pipeline has %d flows, full %d: want 8 fewer", len(single), len(full))
	}
	for _, f := range single {
		s := f.String()
		if n := f.Table.Name(); n == "tunnel_ingress" || n == "service" || n == "remote" {
			t.Errorf("single-node pipeline has a flow in %s: %s", n, s)
		}
		if strings.Contains(s, "tunnel_ingress\"") && f.Table == table("classifier") ||
			strings.Contains(s, "10.96.0.0") || strings.Contains(s, "10.244.0.0/16") {
			t.Errorf("single-node pipeline has %s", s)
		}
	}
}

// tracePeers traces the packets that leave through the tunnel or are answered by the ARP
// responder on the switch of TestPipelineOnSwitch (peers B and C installed). The sandbox
// has no underlay route, so the datapath cannot encapsulate ("native tunnel routing
// failed"); the OpenFlow verdict (output port 1 with tun_dst set) is what is checked.
func tracePeers(t *testing.T, n *switchNode) {
	a, gw := n.podA, n.cfg
	for _, c := range []struct {
		name, packet, tunDst string
	}{
		{"pod to peer B's pod", fmt.Sprintf("in_port=%d,ip,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.2.7,nw_ttl=64", a.OFPort, a.MAC, gw.GatewayMAC), "172.16.0.2"},
		{"pod to peer C's pod", fmt.Sprintf("in_port=%d,ip,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.3.7,nw_ttl=64", a.OFPort, a.MAC, gw.GatewayMAC), "172.16.0.3"},
		{"host to peer B's pod", fmt.Sprintf("in_port=%d,ip,dl_src=%s,dl_dst=%s,nw_src=10.244.1.1,nw_dst=10.244.2.7,nw_ttl=64", gw.GatewayOFPort, gw.GatewayMAC, VirtualRouterMAC), "172.16.0.2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet)
			m := traceFinalFlow.FindStringSubmatch(trace)
			if !strings.Contains(trace, "-> output port is 1") || m == nil || !strings.Contains(m[1], "tun_dst="+c.tunDst+",") {
				t.Fatalf("packet %s did not leave by the tunnel port to %s\n%s", c.packet, c.tunDst, trace)
			}
		})
	}
	t.Run("host ARP for peer B's pod answered", func(t *testing.T) {
		packet := fmt.Sprintf("in_port=%d,arp,dl_src=%s,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_sha=%s,arp_spa=10.244.1.1,arp_tpa=10.244.2.7",
			gw.GatewayOFPort, gw.GatewayMAC, gw.GatewayMAC)
		trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", packet)
		m := traceFinalFlow.FindStringSubmatch(trace)
		want := fmt.Sprintf("dl_src=%s,dl_dst=%s,arp_spa=10.244.2.7,arp_tpa=10.244.1.1,arp_op=2,arp_sha=%s,arp_tha=%s",
			VirtualRouterMAC, gw.GatewayMAC, VirtualRouterMAC, gw.GatewayMAC)
		dp := traceDatapath.FindStringSubmatch(trace)
		if m == nil || !strings.Contains(m[1], want) || dp == nil || dp[1] == "drop" || !strings.Contains(trace, "IN_PORT") {
			t.Fatalf("ARP request not answered back to the gateway with %s\n%s", want, trace)
		}
	})
}
