package flows

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// testDualStackConfig is the golden node made dual-stack: IPv6 pod subnet
// fd00:10:244:1::/64, gateway fd00:10:244:1::1, NetworkPolicy off.
func testDualStackConfig() NodeConfig {
	cfg := testConfig()
	cfg.PodSubnetIPv6 = mustCIDR6("fd00:10:244:1::/64")
	cfg.GatewayIPv6 = net.ParseIP("fd00:10:244:1::1")
	return cfg
}

// testDualPodA is pod A with IPv6 address fd00:10:244:1::5 beside 10.244.1.5.
func testDualPodA() Pod {
	p := testPodA()
	p.IPs = append(p.IPs, net.ParseIP("fd00:10:244:1::5"))
	return p
}

// testDualPodB is pod B with IPv6 address fd00:10:244:1::6 beside 10.244.1.6.
func testDualPodB() Pod {
	p := testPodB()
	p.IPs = append(p.IPs, net.ParseIP("fd00:10:244:1::6"))
	return p
}

// goldenDualStackNode is the dual-stack golden node's own flows: an IPv4-only node's
// (goldenPipeline) and, in spoof_guard, nd and l3_forwarding, its IPv6 ones.
var goldenDualStackNode = []string{
	`cookie=0x500070100000000, table=classifier, priority=100,in_port=1 actions=load:0x3->NXM_NX_REG0[0..3],goto_table:"tunnel_ingress"`,
	`cookie=0x500070100000000, table=classifier, priority=100,in_port=2 actions=load:0x1->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x500070100000000, table=classifier, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=133 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=134 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=135 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=136 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=200,icmp6,icmp_type=137 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,ip,reg0=0x1/0xf actions=goto_table:service`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,arp,reg0=0x1/0xf actions=goto_table:arp`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,icmp6,reg0=0x1/0xf,icmp_type=135 actions=goto_table:nd`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,icmp6,reg0=0x1/0xf,icmp_type=136 actions=goto_table:nd`,
	`cookie=0x500070100000000, table="spoof_guard", priority=50,ipv6,reg0=0x1/0xf actions=goto_table:service`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=133 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=134 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=137 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=120,icmp6,reg0=0x2/0xf,icmp_type=135 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=120,icmp6,reg0=0x2/0xf,icmp_type=136 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=nd, priority=110,icmp6,dl_dst=0a:58:0a:f4:01:01 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fd00:10:244:1::1 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=nd, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=arp, priority=100,arp,arp_tpa=10.244.1.1 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=arp, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=service, priority=100,ip,reg0=0x2/0xf,nw_dst=10.96.0.0/12 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=service, priority=1 actions=goto_table:"l3_forwarding"`,
	`cookie=0x500070100000000, table=service, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=100,ip,nw_dst=10.244.1.1 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=10,ip,nw_dst=10.244.1.0/24 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=1,ip actions=goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=100,ipv6,ipv6_dst=fd00:10:244:1::1 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=10,ipv6,ipv6_dst=fd00:10:244:1::/64 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=1,ipv6 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=remote, priority=10,ip,reg1=0,nw_dst=10.244.0.0/16 actions=drop`,
	`cookie=0x500070100000000, table=remote, priority=1 actions=goto_table:egress`,
	`cookie=0x500070100000000, table=remote, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=100,ip,reg0=0x2/0xf,reg1=0 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=egress, priority=50,reg1=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=1 actions=goto_table:output`,
	`cookie=0x500070100000000, table=egress, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=output, priority=1 actions=output:NXM_NX_REG1[]`,
	`cookie=0x500070100000000, table=output, priority=0 actions=drop`,
}

// testDualPeerB is peer B made dual-stack: IPv6 pod subnet fd00:10:244:2::/64 beside
// 10.244.2.0/24, same node IP and owner id.
func testDualPeerB() Peer {
	p := testPeerB()
	p.PodSubnetIPv6 = mustCIDR6("fd00:10:244:2::/64")
	return p
}

// goldenDualPeerB is the dual-stack peer B's flows on the dual-stack node: its IPv4 ones
// (goldenPeerB), then tunnel ingress and the remote route for its IPv6 pod subnet, to
// the same (IPv4) node IP.
var goldenDualPeerB = append(append([]string(nil), goldenPeerB...),
	`cookie=0x50007030af40200, table="tunnel_ingress", priority=100,ipv6,tun_src=172.16.0.2,ipv6_src=fd00:10:244:2::/64 actions=goto_table:service`,
	`cookie=0x50007030af40200, table=remote, priority=100,ipv6,ipv6_dst=fd00:10:244:2::/64 actions=set_field:172.16.0.2->tun_dst,load:0x1->NXM_NX_REG1[],goto_table:egress`,
)

// TestDualStackPeerFlows: a dual-stack peer's flows on a dual-stack node are its IPv4
// flows, unchanged, and its two IPv6 ones, all under its owner (so a Node delete removes
// them by its cookie); an IPv4-only node builds exactly the IPv4 peer's flows for it,
// and a dual-stack node exactly those for an IPv4-only peer. A peer's new IPv6 subnet is
// a diff of the same owner.
func TestDualStackPeerFlows(t *testing.T) {
	cfg := testDualStackConfig()
	p := testDualPeerB()
	if err := p.Validate(cfg); err != nil {
		t.Fatal(err)
	}
	compareLines(t, "dual-stack peer B on the dual-stack node", lines(PeerFlows(cfg, p), nil), goldenDualPeerB)
	compareLines(t, "dual-stack peer B on an IPv4-only node", lines(PeerFlows(testConfig(), p), nil), goldenPeerB)
	compareLines(t, "IPv4-only peer B on the dual-stack node", lines(PeerFlows(cfg, testPeerB()), nil), goldenPeerB)
	cookie, mask := PeerCookie(p)
	keys := map[string]string{}
	all := append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...)
	c := testPeerC()
	c.PodSubnetIPv6 = mustCIDR6("fd00:10:244:3::/64")
	all = append(all, PeerFlows(cfg, c)...)
	for _, f := range all {
		if selects(f, cookie, mask) {
			t.Errorf("B's cookie selects a flow not B's: %s", f)
		}
		keys[f.MatchKey()] = f.String()
	}
	for _, f := range PeerFlows(cfg, p) {
		if !selects(f, cookie, mask) {
			t.Errorf("B's cookie does not select B's flow %s", f)
		}
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		if prev, dup := keys[f.MatchKey()]; dup {
			t.Errorf("two flows with one match key %s:\n %s\n %s", f.MatchKey(), prev, f)
		}
	}
	moved := p
	moved.PodSubnetIPv6 = mustCIDR6("fd00:10:244:12::/64")
	if got, want := lines(PeerFlows(cfg, moved), nil)[4], strings.ReplaceAll(goldenDualPeerB[4], "fd00:10:244:2::", "fd00:10:244:12::"); got != want {
		t.Errorf("moved IPv6 subnet: %s, want %s", got, want)
	}
}

// TestDualStackPeerValidate: a dual-stack node refuses a peer whose IPv6 pod subnet is
// not one or overlaps its own, naming the fix; an IPv4-only node ignores it.
func TestDualStackPeerValidate(t *testing.T) {
	for _, c := range []struct {
		name, subnet, want string
	}{
		{"overlaps own", "fd00:10:244::/48", "overlaps this node's fd00:10:244:1::/64"},
		{"same as own", "fd00:10:244:1::/64", "overlaps this node's"},
		{"IPv4", "10.9.0.0/24", "is not an IPv6 prefix"},
		{"link-local", "fe80::/64", "is not an IPv6 prefix"},
		{"multicast", "ff05::/64", "is not an IPv6 prefix"},
		{"/127", "fd00:10:244:2::/127", "/126 or shorter"},
	} {
		p := testPeerB()
		_, p.PodSubnetIPv6, _ = net.ParseCIDR(c.subnet)
		if c.subnet == "10.9.0.0/24" {
			p.PodSubnetIPv6 = mustCIDR(c.subnet)
		}
		if err := p.Validate(testDualStackConfig()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error saying %q", c.name, err, c.want)
		}
		if err := p.Validate(testConfig()); err != nil {
			t.Errorf("%s on an IPv4-only node: %v", c.name, err)
		}
	}
}

// goldenDualPodA is pod A's flows on the dual-stack node: its IPv4 flows (goldenPodA)
// and its IPv6 guard (two source addresses, two NS, four NA flows), ND delivery and
// forwarding, in pipeline order.
var goldenDualPodA = []string{
	`cookie=0x50007020af40105, table=classifier, priority=100,in_port=3 actions=load:0x2->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ip,in_port=3,dl_src=0a:58:0a:f4:01:05,nw_src=10.244.1.5 actions=goto_table:service`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,arp,in_port=3,dl_src=0a:58:0a:f4:01:05,arp_spa=10.244.1.5,arp_sha=0a:58:0a:f4:01:05 actions=goto_table:arp`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fd00:10:244:1::5 actions=goto_table:service`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fe80::858:aff:fef4:105 actions=goto_table:service`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fd00:10:244:1::5,icmp_type=135,nd_sll=0a:58:0a:f4:01:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fe80::858:aff:fef4:105,icmp_type=135,nd_sll=0a:58:0a:f4:01:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fd00:10:244:1::5,icmp_type=136,nd_target=fd00:10:244:1::5,nd_tll=0a:58:0a:f4:01:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fd00:10:244:1::5,icmp_type=136,nd_target=fd00:10:244:1::5,nd_tll=00:00:00:00:00:00 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fe80::858:aff:fef4:105,icmp_type=136,nd_target=fe80::858:aff:fef4:105,nd_tll=0a:58:0a:f4:01:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fe80::858:aff:fef4:105,icmp_type=136,nd_target=fe80::858:aff:fef4:105,nd_tll=00:00:00:00:00:00 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table=arp, priority=100,arp,arp_tpa=10.244.1.5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=110,icmp6,dl_dst=0a:58:0a:f4:01:05 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fd00:10:244:1::5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fe80::858:aff:fef4:105 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table="l3_forwarding", priority=100,ip,nw_dst=10.244.1.5 actions=set_field:0a:58:0a:f4:01:05->eth_dst,load:0x3->NXM_NX_REG1[],goto_table:remote`,
	`cookie=0x50007020af40105, table="l3_forwarding", priority=100,ipv6,ipv6_dst=fd00:10:244:1::5 actions=set_field:0a:58:0a:f4:01:05->eth_dst,load:0x3->NXM_NX_REG1[],goto_table:remote`,
}

// TestDualStackFlows checks the dual-stack node's and pod's flows against the goldens,
// that an IPv4-only node and pod build exactly what they built before this slice (the
// IPv6 feature adds nothing to them), and that a dual-stack pod's IPv6 flows are its
// IPv4-only flows plus the IPv6 ones.
func TestDualStackFlows(t *testing.T) {
	cfg := testDualStackConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := testDualPodA().Validate(cfg); err != nil {
		t.Fatal(err)
	}
	compareLines(t, "dual-stack node flows", lines(PipelineFlows(cfg), nil), goldenDualStackNode)
	compareLines(t, "dual-stack pod A flows", lines(PodFlows(cfg, testDualPodA()), nil), goldenDualPodA)

	// An IPv4 pod on the dual-stack node (an address of one family only, e.g. restored
	// from an IPv4-only lease) gets its IPv4 flows only.
	compareLines(t, "IPv4-only pod on a dual-stack node", lines(PodFlows(cfg, testPodA()), nil), goldenPodA)
	// Every IPv4 line of the IPv4-only node is a line of the dual-stack node.
	have := map[string]bool{}
	for _, l := range goldenDualStackNode {
		have[l] = true
	}
	for _, l := range lines(PipelineFlows(testConfig()), nil) {
		if !have[l] {
			t.Errorf("IPv4-only node flow missing on the dual-stack node: %s", l)
		}
	}
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...) {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestLinkLocalFromMAC(t *testing.T) {
	// RFC 4291 appendix A: 0a:58:0a:f4:01:05 → 0858:0aff:fef4:0105 (the U/L bit of 0x0a
	// inverted to 0x08).
	if got := LinkLocalFromMAC(mustMAC("0a:58:0a:f4:01:05")); !got.Equal(net.ParseIP("fe80::858:aff:fef4:105")) {
		t.Fatalf("LinkLocalFromMAC = %v, want fe80::858:aff:fef4:105", got)
	}
	if got := LinkLocalFromMAC(mustMAC("00:00:5e:00:53:01")); !got.Equal(net.ParseIP("fe80::200:5eff:fe00:5301")) {
		t.Fatalf("LinkLocalFromMAC = %v, want fe80::200:5eff:fe00:5301", got)
	}
	if LinkLocalFromMAC(net.HardwareAddr{1, 2, 3}) != nil {
		t.Fatal("a 24-bit MAC has a link-local address")
	}
}

// TestDualStackValidate: what a dual-stack config and pod may not be, each refused with
// an error naming the fix; NetworkPolicy and its deny log are accepted (policy_ipv6_test.go).
func TestDualStackValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*NodeConfig)
		want string
	}{
		{"no gateway", func(c *NodeConfig) { c.GatewayIPv6 = nil }, "gateway IPv6 address <nil>"},
		{"gateway outside", func(c *NodeConfig) { c.GatewayIPv6 = net.ParseIP("fd00:99::1") }, "is not an address of IPv6 pod subnet"},
		{"anycast gateway", func(c *NodeConfig) { c.GatewayIPv6 = net.ParseIP("fd00:10:244:1::") }, "subnet-router anycast"},
		{"IPv4 as IPv6 subnet", func(c *NodeConfig) { c.PodSubnetIPv6 = mustCIDR("10.9.0.0/24") }, "is not an IPv6 prefix"},
		{"link-local subnet", func(c *NodeConfig) { c.PodSubnetIPv6 = mustCIDR6("fe80::/64"); c.GatewayIPv6 = net.ParseIP("fe80::1") }, "is not an IPv6 prefix"},
		{"/127", func(c *NodeConfig) { c.PodSubnetIPv6 = mustCIDR6("fd00:10:244:1::/127") }, "/126 or shorter"},
	} {
		cfg := testDualStackConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	cfg := testDualStackConfig()
	cfg.Policy, cfg.DenyLog = true, true
	if err := cfg.Validate(); err != nil {
		t.Errorf("dual-stack node with NetworkPolicy and its deny log: %v", err)
	}
	cfg = testDualStackConfig()
	with := func(ips ...string) Pod {
		p := testPodA()
		p.IPs = nil
		for _, s := range ips {
			p.IPs = append(p.IPs, net.ParseIP(s))
		}
		return p
	}
	for _, c := range []struct {
		name string
		pod  Pod
		want string
	}{
		{"IPv6 only", with("fd00:10:244:1::5"), "has 0 IPv4 and 1 IPv6 addresses"},
		{"two IPv6", with("10.244.1.5", "fd00:10:244:1::5", "fd00:10:244:1::7"), "has 1 IPv4 and 2 IPv6 addresses"},
		{"IPv6 outside", with("10.244.1.5", "fd00:10:244:2::5"), "is not an IPv6 address of pod subnet fd00:10:244:1::/64"},
		{"IPv6 gateway", with("10.244.1.5", "fd00:10:244:1::1"), "other than the gateway"},
	} {
		if err := c.pod.Validate(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate(%v) = %v, want an error saying %q", c.name, c.pod.IPs, err, c.want)
		}
	}
	if err := with("fd00:10:244:1::5", "10.244.1.5").Validate(cfg); err != nil {
		t.Errorf("IPv6 listed first: %v", err)
	}
}

// TestDualStackOnSwitch installs the dual-stack node's, two dual-stack pods' and the
// dual-stack peer B's flows on a real OVS through both ovs-ofctl text and our FlowMods,
// checks dump-flows prints exactly the goldens' text, and traces IPv6 packets:
// forwarding between the pods and to the gateway, ND delivery, the spoof guard's drops,
// IPv6 to and from peer B through the tunnel and the tunnel's own guard.
func TestDualStackOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.cfg = testDualStackConfig()
	n.podA, n.podB = testDualPodA(), testDualPodB()
	all := append(PipelineFlows(n.cfg), PodFlows(n.cfg, n.podA)...)
	all = append(all, PodFlows(n.cfg, n.podB)...)
	all = append(all, PeerFlows(n.cfg, testDualPeerB())...)

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
	llA, llB := LinkLocalFromMAC(a.MAC), LinkLocalFromMAC(b.MAC)
	other := mustMAC("0a:58:0a:f4:01:99")
	snmA := mustMAC("33:33:ff:00:00:05") // solicited-node multicast of fd00:10:244:1::5
	ip6 := func(in uint32, src, dst net.HardwareAddr, s, d, rest string) string {
		return fmt.Sprintf("in_port=%d,ipv6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=64%s", in, src, dst, s, d, rest)
	}
	icmp := func(in uint32, src, dst net.HardwareAddr, s, d string, typ int, rest string) string {
		return fmt.Sprintf("in_port=%d,icmp6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=255,icmpv6_type=%d,icmpv6_code=0%s", in, src, dst, s, d, typ, rest)
	}
	zero := "00:00:00:00:00:00"
	tun := func(src, packet string) string { return "tun_src=" + src + ",tun_dst=172.16.0.1," + packet }
	for _, c := range []struct {
		name   string
		packet string
		out    uint32 // 0: dropped
		ethDst net.HardwareAddr
	}{
		{"pod to pod", ip6(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::5", "fd00:10:244:1::6", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0"), b.OFPort, b.MAC},
		{"pod to pod TCP", ip6(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::5", "fd00:10:244:1::6", ",nw_proto=6,tp_dst=80"), b.OFPort, b.MAC},
		{"pod to gateway", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:1::1", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0"), gw.GatewayOFPort, gw.GatewayMAC},
		{"host to pod", ip6(gw.GatewayOFPort, gw.GatewayMAC, a.MAC, "fd00:10:244:1::1", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80"), a.OFPort, a.MAC},
		{"packet too big passes", icmp(b.OFPort, b.MAC, a.MAC, "fd00:10:244:1::6", "fd00:10:244:1::5", 2, ""), a.OFPort, a.MAC},
		{"spoofed source dropped", ip6(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::6", "fd00:10:244:1::6", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0"), 0, nil},
		{"foreign link-local source dropped", ip6(a.OFPort, a.MAC, b.MAC, llB.String(), "fd00:10:244:1::6", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0"), 0, nil},
		{"spoofed MAC dropped", ip6(a.OFPort, other, b.MAC, "fd00:10:244:1::5", "fd00:10:244:1::6", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0"), 0, nil},
		{"to an unknown node's subnet dropped", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:9::7", ",nw_proto=6,tp_dst=80"), 0, nil},
		{"to an unknown address of the own subnet dropped", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:1::77", ",nw_proto=6,tp_dst=80"), 0, nil},
		{"from peer B's pod to pod, hop limit kept", tun("172.16.0.2", ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80")), a.OFPort, a.MAC},
		{"from peer B's host to pod", tun("172.16.0.2", ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::1", "fd00:10:244:1::6", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0")), b.OFPort, b.MAC},
		{"from peer B with a source outside its subnet dropped", tun("172.16.0.2", ip6(1, other, gw.GatewayMAC, "fd00:10:244:3::7", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80")), 0, nil},
		{"peer B's subnet from another node IP dropped", tun("172.16.0.3", ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", "fd00:10:244:1::5", ",nw_proto=6,tp_dst=80")), 0, nil},
		{"RA from the tunnel dropped", tun("172.16.0.2", icmp(1, other, a.MAC, "fd00:10:244:2::7", "fd00:10:244:1::5", 134, "")), 0, nil},
		{"redirect from the tunnel dropped", tun("172.16.0.2", icmp(1, other, a.MAC, "fd00:10:244:2::7", "fd00:10:244:1::5", 137, "")), 0, nil},
		{"NA from the tunnel dropped", tun("172.16.0.2", icmp(1, other, a.MAC, "fd00:10:244:2::7", "fd00:10:244:1::5", 136, ",nd_target=fd00:10:244:2::7,nd_tll="+other.String())), 0, nil},
		{"NS from the tunnel dropped", tun("172.16.0.2", icmp(1, other, a.MAC, "fd00:10:244:2::7", "fd00:10:244:1::5", 135, ",nd_target=fd00:10:244:1::5,nd_sll="+other.String())), 0, nil},
		{"to the outside dropped", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "2001:db8::1", ",nw_proto=6,tp_dst=80"), 0, nil},
		{"NS pod to pod", icmp(b.OFPort, b.MAC, snmA, "fd00:10:244:1::6", "ff02::1:ff00:5", 135, ",nd_target=fd00:10:244:1::5,nd_sll="+b.MAC.String()), a.OFPort, snmA},
		{"NS from link-local", icmp(b.OFPort, b.MAC, snmA, llB.String(), "ff02::1:ff00:5", 135, ",nd_target=fd00:10:244:1::5,nd_sll="+b.MAC.String()), a.OFPort, snmA},
		{"NS for gateway", icmp(a.OFPort, a.MAC, mustMAC("33:33:ff:00:00:01"), "fd00:10:244:1::5", "ff02::1:ff00:1", 135, ",nd_target=fd00:10:244:1::1,nd_sll="+a.MAC.String()), gw.GatewayOFPort, nil},
		{"NS unicast probe to gateway MAC", icmp(a.OFPort, a.MAC, gw.GatewayMAC, llA.String(), "fe80::1234", 135, ",nd_target=fe80::1234,nd_sll="+a.MAC.String()), gw.GatewayOFPort, nil},
		{"NS from host to pod", icmp(gw.GatewayOFPort, gw.GatewayMAC, snmA, "fd00:10:244:1::1", "ff02::1:ff00:5", 135, ",nd_target=fd00:10:244:1::5,nd_sll="+gw.GatewayMAC.String()), a.OFPort, nil},
		{"NA pod to pod", icmp(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::5", "fd00:10:244:1::6", 136, ",nd_target=fd00:10:244:1::5,nd_tll="+a.MAC.String()), b.OFPort, b.MAC},
		{"NA without tll", icmp(a.OFPort, a.MAC, b.MAC, "fd00:10:244:1::5", "fd00:10:244:1::6", 136, ",nd_target=fd00:10:244:1::5,nd_tll="+zero), b.OFPort, b.MAC},
		{"NA link-local to host", icmp(a.OFPort, a.MAC, gw.GatewayMAC, llA.String(), "fe80::1234", 136, ",nd_target="+llA.String()+",nd_tll="+a.MAC.String()), gw.GatewayOFPort, gw.GatewayMAC},
		{"NA from host to pod", icmp(gw.GatewayOFPort, gw.GatewayMAC, a.MAC, "fd00:10:244:1::1", "fd00:10:244:1::5", 136, ",nd_target=fd00:10:244:1::1,nd_tll="+gw.GatewayMAC.String()), a.OFPort, a.MAC},
		{"NS with foreign sll dropped", icmp(b.OFPort, b.MAC, snmA, "fd00:10:244:1::6", "ff02::1:ff00:5", 135, ",nd_target=fd00:10:244:1::5,nd_sll="+other.String()), 0, nil},
		{"NS from :: (DAD) dropped", icmp(b.OFPort, b.MAC, snmA, "::", "ff02::1:ff00:5", 135, ",nd_target=fd00:10:244:1::5,nd_sll="+zero), 0, nil},
		{"NS for an unknown address dropped", icmp(b.OFPort, b.MAC, snmA, "fd00:10:244:1::6", "ff02::1:ff00:77", 135, ",nd_target=fd00:10:244:1::77,nd_sll="+b.MAC.String()), 0, nil},
		{"NA with foreign target dropped", icmp(b.OFPort, b.MAC, a.MAC, "fd00:10:244:1::6", "fd00:10:244:1::5", 136, ",nd_target=fd00:10:244:1::1,nd_tll="+b.MAC.String()), 0, nil},
		{"NA for the pod's own target from another source dropped", icmp(b.OFPort, b.MAC, a.MAC, llB.String(), "fd00:10:244:1::5", 136, ",nd_target=fd00:10:244:1::6,nd_tll="+b.MAC.String()), 0, nil},
		{"NA with foreign tll dropped", icmp(b.OFPort, b.MAC, a.MAC, "fd00:10:244:1::6", "fd00:10:244:1::5", 136, ",nd_target=fd00:10:244:1::6,nd_tll="+other.String()), 0, nil},
		{"NA to all-nodes dropped", icmp(b.OFPort, b.MAC, mustMAC("33:33:00:00:00:01"), "fd00:10:244:1::6", "ff02::1", 136, ",nd_target=fd00:10:244:1::6,nd_tll="+b.MAC.String()), 0, nil},
		{"RA from pod dropped", icmp(b.OFPort, b.MAC, mustMAC("33:33:00:00:00:01"), llB.String(), "ff02::1", 134, ""), 0, nil},
		{"RA unicast from pod dropped", icmp(b.OFPort, b.MAC, a.MAC, llB.String(), llA.String(), 134, ""), 0, nil},
		{"RS from pod dropped", icmp(b.OFPort, b.MAC, mustMAC("33:33:00:00:00:02"), llB.String(), "ff02::2", 133, ""), 0, nil},
		{"redirect from pod dropped", icmp(b.OFPort, b.MAC, a.MAC, llB.String(), "fd00:10:244:1::5", 137, ""), 0, nil},
		{"MLD report dropped", icmp(b.OFPort, b.MAC, mustMAC("33:33:00:00:00:16"), llB.String(), "ff02::16", 143, ""), 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet)
			out, final := traceResult(t, trace)
			if out != c.out {
				t.Fatalf("packet %s left by port %d, want %d (0 = drop)\n%s", c.packet, out, c.out, trace)
			}
			if c.ethDst != nil && !strings.Contains(final, "dl_dst="+c.ethDst.String()) {
				t.Fatalf("packet %s left with %q, want dl_dst=%s\n%s", c.packet, final, c.ethDst, trace)
			}
			if c.out != 0 && strings.Contains(c.packet, "nw_ttl=64") && !strings.Contains(final, "nw_ttl=64") {
				t.Fatalf("packet %s left with %q: hop limit changed\n%s", c.packet, final, trace)
			}
		})
	}
	// Out through the tunnel (the sandbox has no underlay route, so the OpenFlow verdict
	// is checked, as in tracePeers).
	for _, c := range []struct {
		name, packet string
	}{
		{"pod to peer B's pod", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:2::7", ",nw_proto=6,tp_dst=80")},
		{"host to peer B's pod", ip6(gw.GatewayOFPort, gw.GatewayMAC, other, "fd00:10:244:1::1", "fd00:10:244:2::7", ",nw_proto=58,icmpv6_type=128,icmpv6_code=0")},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet)
			m := traceFinalFlow.FindStringSubmatch(trace)
			if !strings.Contains(trace, "-> output port is 1") || m == nil || !strings.Contains(m[1], "tun_dst=172.16.0.2,") {
				t.Fatalf("packet %s did not leave by the tunnel port to 172.16.0.2\n%s", c.packet, trace)
			}
		})
	}
}

// testDualStackEgressConfig is the dual-stack golden node with its IPv6 cluster CIDR
// fd00:10:244::/56: IPv6 egress on.
func testDualStackEgressConfig() NodeConfig {
	cfg := testDualStackConfig()
	cfg.ClusterCIDRIPv6 = mustCIDR6("fd00:10:244::/56")
	return cfg
}

// goldenDualStackEgress are the flows the IPv6 cluster CIDR adds to the dual-stack node:
// the cluster's IPv6 miss in remote, pods' undecided IPv6 to the gateway in egress.
var goldenDualStackEgress = []string{
	`cookie=0x500070100000000, table=remote, priority=10,ipv6,reg1=0,ipv6_dst=fd00:10:244::/56 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=100,ipv6,reg0=0x2/0xf,reg1=0 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:output`,
}

// TestDualStackEgressFlows: the IPv6 cluster CIDR adds exactly goldenDualStackEgress to
// the dual-stack node and nothing to its pods and peers; what it may not be is refused.
func TestDualStackEgressFlows(t *testing.T) {
	cfg := testDualStackEgressConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	without := map[string]bool{}
	for _, l := range lines(PipelineFlows(testDualStackConfig()), nil) {
		without[l] = true
	}
	var added []string
	for _, l := range lines(PipelineFlows(cfg), nil) {
		if !without[l] {
			added = append(added, l)
		} else {
			delete(without, l)
		}
	}
	compareLines(t, "flows the IPv6 cluster CIDR adds", added, goldenDualStackEgress)
	if len(without) != 0 {
		t.Errorf("flows the IPv6 cluster CIDR removes: %v", without)
	}
	compareLines(t, "pod A with IPv6 egress", lines(PodFlows(cfg, testDualPodA()), nil), goldenDualPodA)
	compareLines(t, "peer B with IPv6 egress", lines(PeerFlows(cfg, testDualPeerB()), nil), goldenDualPeerB)
	for _, f := range PipelineFlows(cfg) {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []struct {
		name string
		mod  func(*NodeConfig)
		want string
	}{
		{"not containing the subnet", func(c *NodeConfig) { c.ClusterCIDRIPv6 = mustCIDR6("fd00:10:245::/56") }, "containing IPv6 pod subnet fd00:10:244:1::/64"},
		{"IPv4", func(c *NodeConfig) { c.ClusterCIDRIPv6 = mustCIDR("10.0.0.0/8") }, "is not an IPv6 prefix"},
		{"::/0", func(c *NodeConfig) { c.ClusterCIDRIPv6 = mustCIDR6("::/0") }, "is not an IPv6 prefix (not ::/0)"},
		{"IPv4-only node", func(c *NodeConfig) { c.PodSubnetIPv6, c.GatewayIPv6 = nil, nil }, "on a node without an IPv6 pod subnet"},
	} {
		cfg := testDualStackEgressConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	p := testDualPeerB()
	p.PodSubnetIPv6 = mustCIDR6("fd00:10:245:2::/64")
	if err := p.Validate(cfg); err == nil || !strings.Contains(err.Error(), "outside IPv6 cluster CIDR fd00:10:244::/56") {
		t.Errorf("peer outside the IPv6 cluster CIDR: Validate = %v", err)
	}
}

// TestDualStackEgressOnSwitch traces IPv6 on a real OVS holding the egress node's, two
// pods' and peer B's flows: a pod's IPv6 to the outside goes to the gateway (the host
// masquerades it), to a peer's pod into the tunnel, to an unknown address of the IPv6
// cluster CIDR nowhere; the host's own off-subnet IPv6 is not sent back to it.
func TestDualStackEgressOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.cfg = testDualStackEgressConfig()
	n.podA, n.podB = testDualPodA(), testDualPodB()
	all := append(PipelineFlows(n.cfg), PodFlows(n.cfg, n.podA)...)
	all = append(all, PodFlows(n.cfg, n.podB)...)
	all = append(all, PeerFlows(n.cfg, testDualPeerB())...)
	var mods []*openflow13.FlowMod
	for _, f := range all {
		mods = append(mods, f.FlowMod(openflow13.FC_ADD))
	}
	sendFlowMods(t, n.mgmt, mods...)
	compareLines(t, "dump-flows --names vs Format(port names)", n.dump(t), sortedFormat(all, n.names))

	gw, a, b := n.cfg, n.podA, n.podB
	ip6 := func(in uint32, src, dst net.HardwareAddr, s, d string) string {
		return fmt.Sprintf("in_port=%d,tcp6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=64,tp_dst=80", in, src, dst, s, d)
	}
	for _, c := range []struct {
		name   string
		packet string
		out    uint32
	}{
		{"pod to the outside: to the gateway", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "2001:db8::1"), gw.GatewayOFPort},
		{"pod to the outside, ULA outside the cluster: to the gateway", ip6(b.OFPort, b.MAC, gw.GatewayMAC, "fd00:10:244:1::6", "fd00:30::200"), gw.GatewayOFPort},
		{"pod to pod stays local", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:1::6"), b.OFPort},
		{"pod to an unknown node's subnet of the cluster dropped", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:9::7"), 0},
		{"host's off-subnet IPv6 dropped", ip6(gw.GatewayOFPort, gw.GatewayMAC, a.MAC, "fd00:10:244:1::1", "2001:db8::1"), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet)
			if out, _ := traceResult(t, trace); out != c.out {
				t.Fatalf("packet %s left by port %d, want %d (0 = drop)\n%s", c.packet, out, c.out, trace)
			}
		})
	}
	trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", ip6(a.OFPort, a.MAC, gw.GatewayMAC, "fd00:10:244:1::5", "fd00:10:244:2::7"))
	if m := traceFinalFlow.FindStringSubmatch(trace); !strings.Contains(trace, "-> output port is 1") || m == nil || !strings.Contains(m[1], "tun_dst=172.16.0.2,") {
		t.Fatalf("pod to peer B's pod did not leave by the tunnel to 172.16.0.2\n%s", trace)
	}
}
