package flows

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// testIPv6OnlyConfig is the golden node made IPv6-only with an IPv6 underlay: IPv6 pod
// subnet fd00:10:244:1::/64, gateway fd00:10:244:1::1, no IPv4 pod subnet (so no IPv4
// cluster or service CIDR), node IP fd00:172:16::1.
func testIPv6OnlyConfig() NodeConfig {
	cfg := testDualStackConfig()
	cfg.PodSubnet, cfg.GatewayIP, cfg.ClusterCIDR, cfg.ServiceCIDR = nil, nil, nil, nil
	cfg.NodeIP = net.ParseIP("fd00:172:16::1")
	return cfg
}

// testV6PodA is pod A of the IPv6-only node: fd00:10:244:1::5 alone, with the MAC ofsdn
// derives from it (podnet.MACFromIPv6: 0a:58 and its last 4 bytes).
func testV6PodA() Pod {
	p := testPodA()
	p.IPs, p.MAC = []net.IP{net.ParseIP("fd00:10:244:1::5")}, mustMAC("0a:58:00:00:00:05")
	return p
}

// testV6PodB is pod B of the IPv6-only node: fd00:10:244:1::6 alone.
func testV6PodB() Pod {
	p := testPodB()
	p.IPs, p.MAC = []net.IP{net.ParseIP("fd00:10:244:1::6")}, mustMAC("0a:58:00:00:00:06")
	return p
}

// testV6PeerB is peer B as an IPv6-only node: IPv6 pod subnet fd00:10:244:2::/64, node
// IP fd00:172:16::2 (the IPv6 underlay), owner id 0x0af40200.
func testV6PeerB() Peer {
	return Peer{Name: "node-b", NodeIP: net.ParseIP("fd00:172:16::2"), PodSubnetIPv6: mustCIDR6("fd00:10:244:2::/64"), OwnerID: 0x0af40200}
}

// goldenIPv6OnlyNode is the IPv6-only node's own flows: the dual-stack node's without
// any IPv4 or ARP flow of its own (the stages keep their miss flows) and without the arp
// stage (feature ipv4 off).
var goldenIPv6OnlyNode = []string{
	`cookie=0x500070100000000, table=classifier, priority=100,in_port=1 actions=load:0x3->NXM_NX_REG0[0..3],goto_table:"tunnel_ingress"`,
	`cookie=0x500070100000000, table=classifier, priority=100,in_port=2 actions=load:0x1->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x500070100000000, table=classifier, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=133 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=134 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=135 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=136 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=137 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,icmp6,reg0=0x1/0xf,icmp_type=135 actions=goto_table:nd`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,icmp6,reg0=0x1/0xf,icmp_type=136 actions=goto_table:nd`,
	`cookie=0x500070100000000, table="spoof_guard", priority=50,ipv6,reg0=0x1/0xf actions=goto_table:"l3_forwarding"`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=133 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=134 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=137 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=120,icmp6,reg0=0x2/0xf,icmp_type=135 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=120,icmp6,reg0=0x2/0xf,icmp_type=136 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=nd, priority=110,icmp6,dl_dst=0a:58:0a:f4:01:01 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fd00:10:244:1::1 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=nd, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=100,ipv6,ipv6_dst=fd00:10:244:1::1 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=10,ipv6,ipv6_dst=fd00:10:244:1::/64 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=1,ipv6 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=remote, priority=1 actions=goto_table:egress`,
	`cookie=0x500070100000000, table=remote, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=50,reg1=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=1 actions=goto_table:output`,
	`cookie=0x500070100000000, table=egress, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=output, priority=1 actions=output:NXM_NX_REG1[]`,
	`cookie=0x500070100000000, table=output, priority=0 actions=drop`,
}

// goldenV6PodA is pod A's flows on the IPv6-only node: its classifier flow and its IPv6
// flows (goldenDualPodA less the IPv4 and ARP ones).
var goldenV6PodA = []string{
	`cookie=0x50007020af40105, table=classifier, priority=100,in_port=3 actions=load:0x2->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5 actions=goto_table:"l3_forwarding"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5 actions=goto_table:"l3_forwarding"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5,icmp_type=135,nd_sll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5,icmp_type=135,nd_sll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5,icmp_type=136,nd_target=fd00:10:244:1::5,nd_tll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5,icmp_type=136,nd_target=fd00:10:244:1::5,nd_tll=00:00:00:00:00:00 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5,icmp_type=136,nd_target=fe80::858:ff:fe00:5,nd_tll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5,icmp_type=136,nd_target=fe80::858:ff:fe00:5,nd_tll=00:00:00:00:00:00 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table=nd, priority=110,icmp6,dl_dst=0a:58:00:00:00:05 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fd00:10:244:1::5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fe80::858:ff:fe00:5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table="l3_forwarding", priority=100,ipv6,ipv6_dst=fd00:10:244:1::5 actions=set_field:0a:58:00:00:00:05->eth_dst,load:0x3->NXM_NX_REG1[],goto_table:remote`,
}

// goldenV6PeerB is peer B's flows on the IPv6-only node: tunnel ingress from its IPv6
// node IP (tun_ipv6_src) and the remote route into the tunnel to it (tun_ipv6_dst).
var goldenV6PeerB = []string{
	`cookie=0x50007030af40200, table="tunnel_ingress", priority=100,ipv6,tun_ipv6_src=fd00:172:16::2,ipv6_src=fd00:10:244:2::/64 actions=goto_table:"l3_forwarding"`,
	`cookie=0x50007030af40200, table=remote, priority=100,ipv6,ipv6_dst=fd00:10:244:2::/64 actions=set_field:fd00:172:16::2->tun_ipv6_dst,load:0x1->NXM_NX_REG1[],goto_table:egress`,
}

// TestIPv6OnlyFlows checks the IPv6-only node's, its pod's and its peer's flows against
// the goldens: no IPv4 or ARP flow of the node, the pod or the peer, tunnels over the
// IPv6 underlay.
func TestIPv6OnlyFlows(t *testing.T) {
	cfg := testIPv6OnlyConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Pod{testV6PodA(), testV6PodB()} {
		if err := p.Validate(cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := testV6PeerB().Validate(cfg); err != nil {
		t.Fatal(err)
	}
	compareLines(t, "IPv6-only node flows", lines(PipelineFlows(cfg), nil), goldenIPv6OnlyNode)
	compareLines(t, "IPv6-only pod A flows", lines(PodFlows(cfg, testV6PodA()), nil), goldenV6PodA)
	compareLines(t, "IPv6-only peer B flows", lines(PeerFlows(cfg, testV6PeerB()), nil), goldenV6PeerB)
	for _, fs := range [][]Flow{PipelineFlows(cfg), PodFlows(cfg, testV6PodA()), PeerFlows(cfg, testV6PeerB())} {
		for _, f := range fs {
			if err := f.Validate(); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestIPv6OnlyValidate: what an IPv6-only node, its pods and peers refuse.
func TestIPv6OnlyValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*NodeConfig)
		want string
	}{
		{"no subnet at all", func(c *NodeConfig) { c.PodSubnetIPv6, c.GatewayIPv6 = nil, nil }, "is not an IPv4 prefix"},
		{"IPv4 gateway without subnet", func(c *NodeConfig) { c.GatewayIP = net.ParseIP("10.244.1.1") }, "is not an IPv4 prefix"},
		{"IPv4 cluster CIDR", func(c *NodeConfig) { c.ClusterCIDR = mustCIDR("10.244.0.0/16") }, "on an IPv6-only node"},
		{"IPv4 service CIDR", func(c *NodeConfig) { c.ServiceCIDR = mustCIDR("10.96.0.0/12") }, "on an IPv6-only node"},
		{"link-local node IP", func(c *NodeConfig) { c.NodeIP = net.ParseIP("fe80::1") }, "is not a unicast IPv4 or IPv6 address"},
	} {
		cfg := testIPv6OnlyConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	cfg := testIPv6OnlyConfig()
	for _, c := range []struct {
		name string
		pod  Pod
		want string
	}{
		{"IPv4 address", testPodA(), "want exactly one IPv6 address on this IPv6-only node"},
		{"both families", testDualPodA(), "want exactly one IPv6 address on this IPv6-only node"},
		{"no address", Pod{OFPort: 3, MAC: mustMAC("0a:58:0a:f4:01:05"), OwnerID: 1}, "want exactly one IPv6 address"},
		{"outside the subnet", Pod{OFPort: 3, MAC: mustMAC("0a:58:0a:f4:01:05"), OwnerID: 1, IPs: []net.IP{net.ParseIP("fd00:10:244:9::5")}}, "is not an IPv6 address of pod subnet"},
	} {
		if err := c.pod.Validate(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pod %s: Validate() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		mod  func(*Peer)
		want string
	}{
		{"IPv4 node IP on an IPv6 underlay", func(p *Peer) { p.NodeIP = net.ParseIP("172.16.0.2") }, "is not an IPv6 address other than this node's"},
		{"this node's IP", func(p *Peer) { p.NodeIP = cfg.NodeIP }, "is not an IPv6 address other than this node's"},
		{"no IPv6 subnet", func(p *Peer) { p.PodSubnetIPv6, p.PodSubnet = nil, mustCIDR("10.244.2.0/24") }, "no IPv6 pod subnet, and this node is IPv6-only"},
		{"overlapping subnet", func(p *Peer) { p.PodSubnetIPv6 = mustCIDR6("fd00:10:244:1::/64") }, "overlaps this node's"},
	} {
		p := testV6PeerB()
		c.mod(&p)
		if err := p.Validate(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("peer %s: Validate() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// An IPv4 underlay node refuses an IPv6 peer node IP, as before.
	if err := testV6PeerB().Validate(testDualStackConfig()); err == nil || !strings.Contains(err.Error(), "is not an IPv4 address") {
		t.Errorf("IPv6 node IP on an IPv4 underlay: Validate() = %v, want it refused", err)
	}
	// A dual-stack peer on an IPv6-only node: its IPv4 subnet is ignored.
	p := testV6PeerB()
	p.PodSubnet = mustCIDR("10.244.2.0/24")
	if err := p.Validate(cfg); err != nil {
		t.Errorf("dual-stack peer on the IPv6-only node: %v", err)
	}
	compareLines(t, "dual-stack peer B on the IPv6-only node", lines(PeerFlows(cfg, p), nil), goldenV6PeerB)
}

// TestIPv6OnlyOnSwitch installs the IPv6-only node's, its two pods' and peer B's flows on
// a real OVS through both ovs-ofctl text and our FlowMods, checks dump-flows prints
// exactly the goldens' text (tun_ipv6_src, set_field:…->tun_ipv6_dst included), and
// traces: IPv6 between the pods, to and from peer B over the IPv6 underlay, its guard.
func TestIPv6OnlyOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.cfg = testIPv6OnlyConfig()
	n.podA, n.podB = testV6PodA(), testV6PodB()
	all := append(PipelineFlows(n.cfg), PodFlows(n.cfg, n.podA)...)
	all = append(all, PodFlows(n.cfg, n.podB)...)
	all = append(all, PeerFlows(n.cfg, testV6PeerB())...)

	n.addFlowsText(t, all)
	compareLines(t, "dump-flows --names vs Format(port names), from text", n.dump(t), sortedFormat(all, n.names))
	n.ovs.Ofctl(t, "del-flows", n.mgmt)
	var mods []*openflow13.FlowMod
	for _, f := range all {
		mods = append(mods, f.FlowMod(openflow13.FC_ADD))
	}
	sendFlowMods(t, n.mgmt, mods...)
	compareLines(t, "dump-flows --names vs Format(port names), from FlowMods", n.dump(t), sortedFormat(all, n.names))

	gw, a, b := n.cfg, n.podA, n.podB
	other := mustMAC("0a:58:0a:f4:01:99")
	ip6 := func(in uint32, src, dst net.HardwareAddr, s, d, rest string) string {
		return fmt.Sprintf("in_port=%d,ipv6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=64%s", in, src, dst, s, d, rest)
	}
	tun := func(src, packet string) string {
		return "tun_ipv6_src=" + src + ",tun_ipv6_dst=fd00:172:16::1," + packet
	}
	for _, c := range []struct {
		name   string
		packet string
		out    uint32 // 0: dropped
	}{
		{"pod to pod", ip6(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::5", "fd00:10:244:1::6", ",nw_proto=6,tp_dst=80"), b.OFPort},
		{"pod to gateway", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:1::1", ",nw_proto=6,tp_dst=80"), gw.GatewayOFPort},
		{"spoofed source dropped", ip6(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::6", "fd00:10:244:1::6", ",nw_proto=6,tp_dst=80"), 0},
		{"IPv4 from a pod dropped", fmt.Sprintf("in_port=%d,ip,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.1.6", a.OFPort, a.MAC, b.MAC), 0},
		{"ARP from a pod dropped", fmt.Sprintf("in_port=%d,arp,dl_src=%s,arp_spa=10.244.1.5,arp_tpa=10.244.1.1,arp_sha=%s,arp_op=1", a.OFPort, a.MAC, a.MAC), 0},
		{"from peer B's pod over the IPv6 underlay", tun("fd00:172:16::2", ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80")), a.OFPort},
		{"peer B's subnet from another node IP dropped", tun("fd00:172:16::3", ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80")), 0},
		{"peer B's subnet over an IPv4 underlay dropped", "tun_src=172.16.0.2,tun_dst=172.16.0.1," + ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80"), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet)
			if out, _ := traceResult(t, trace); out != c.out {
				t.Fatalf("packet %s left by port %d, want %d (0 = drop)\n%s", c.packet, out, c.out, trace)
			}
		})
	}
	trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:2::7", ",nw_proto=6,tp_dst=80"))
	m := traceFinalFlow.FindStringSubmatch(trace)
	if !strings.Contains(trace, "-> output port is 1") || m == nil || !strings.Contains(m[1], "tun_ipv6_dst=fd00:172:16::2,") {
		t.Fatalf("pod A to peer B's pod did not leave by the tunnel port to fd00:172:16::2\n%s", trace)
	}
}

// TestPipelineDocIPv6Only: the block of docs/pipeline.md's section "IPv6-only node over an
// IPv6 underlay" is exactly every flow of the IPv6-only node (testIPv6OnlyConfig with the
// IPv6 cluster CIDR), its pod A and its peer B, in the order of a dump (table, priority,
// owner kind).
func TestPipelineDocIPv6Only(t *testing.T) {
	doc := docSection(t, "## IPv6-only node over an IPv6 underlay", false)
	cfg := testIPv6OnlyConfig()
	cfg.ClusterCIDRIPv6 = mustCIDR6("fd00:10:244::/56")
	fs := append(append(PipelineFlows(cfg), PodFlows(cfg, testV6PodA())...), PeerFlows(cfg, testV6PeerB())...)
	sortDumpOrder(fs)
	compareLines(t, "docs/pipeline.md, IPv6-only section (with a leading space in the file)", doc, lines(fs, docPorts))
}
