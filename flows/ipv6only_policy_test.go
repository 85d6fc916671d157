package flows

// NetworkPolicy and Services in OVS on an IPv6-only node (issue 23): the policy and
// Services stages hold IPv6 flows only (no IPv4 node address, no IPv4 hairpin, no IPv4
// ct flows), the rules' clauses and conj_id flows are IPv6's alone (an IPv4 peer is left
// out), a pod's default deny is its IPv6 one; checked against goldens and on a real OVS.

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// testIPv6OnlyPolicyConfig is the IPv6-only golden node with NetworkPolicy and Services
// in OVS on.
func testIPv6OnlyPolicyConfig() NodeConfig {
	cfg := testIPv6OnlyConfig()
	cfg.Policy, cfg.Services = true, true
	return cfg
}

// goldenIPv6OnlyPolicyNode is the IPv6-only node's own flows with NetworkPolicy and
// Services on: goldenIPv6OnlyNode's through the Services and policy stages, whose flows
// are all IPv6.
var goldenIPv6OnlyPolicyNode = []string{
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
	`cookie=0x500070100000000, table="spoof_guard", priority=50,ipv6,reg0=0x1/0xf actions=goto_table:"service_conntrack"`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=133 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=134 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=137 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=120,icmp6,reg0=0x2/0xf,icmp_type=135 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=120,icmp6,reg0=0x2/0xf,icmp_type=136 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=nd, priority=110,icmp6,dl_dst=0a:58:0a:f4:01:01 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fd00:10:244:1::1 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=nd, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="service_affinity", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="service_hairpin", priority=110,ipv6,ipv6_dst=fc00::a9fe:fc actions=ct(table="service_conntrack",zone=65281,nat)`,
	`cookie=0x500070100000000, table="service_hairpin", priority=1 actions=goto_table:"service_conntrack"`,
	`cookie=0x500070100000000, table="service_hairpin", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="service_conntrack", priority=105,ct_state=+rpl+trk,ipv6 actions=load:0x1->NXM_NX_REG0[4],ct(table="service_lb",zone=65280,nat)`,
	`cookie=0x500070100000000, table="service_conntrack", priority=1,ipv6 actions=ct(table="service_lb",zone=65280,nat)`,
	`cookie=0x500070100000000, table="service_conntrack", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="service_lb", priority=1 actions=goto_table:"service_endpoint"`,
	`cookie=0x500070100000000, table="service_lb", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="service_endpoint", priority=1 actions=goto_table:"l3_forwarding"`,
	`cookie=0x500070100000000, table="service_endpoint", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=100,ipv6,ipv6_dst=fd00:10:244:1::1 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:conntrack`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=10,ipv6,ipv6_dst=fd00:10:244:1::/64 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=1,ipv6 actions=goto_table:conntrack`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ipv6,reg0=0x1/0xf,ipv6_src=fd00:10:244:1::1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ipv6,ipv6_dst=fd00:10:244:1::1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=1,ipv6 actions=goto_table:"conntrack_state"`,
	`cookie=0x500070100000000, table=conntrack, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=210,ct_state=-new-rpl-inv+trk,sctp6 actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=200,ct_state=-new-inv+trk,ipv6 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_state", priority=190,ct_state=+inv+trk,ipv6 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=1 actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="egress_rules", priority=1 actions=goto_table:"ingress_rules"`,
	`cookie=0x500070100000000, table="egress_rules", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="ingress_rules", priority=1 actions=goto_table:"conntrack_commit"`,
	`cookie=0x500070100000000, table="ingress_rules", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=100,ct_state=+new+trk-dnat,ipv6 actions=ct(commit,zone=65280),goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=remote, priority=1 actions=goto_table:egress`,
	`cookie=0x500070100000000, table=remote, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=50,reg1=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=1 actions=goto_table:output`,
	`cookie=0x500070100000000, table=egress, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=output, priority=110,reg0=0x10/0x10 actions=set_field:0a:58:0a:f4:01:01->eth_src,IN_PORT`,
	`cookie=0x500070100000000, table=output, priority=1 actions=output:NXM_NX_REG1[]`,
	`cookie=0x500070100000000, table=output, priority=0 actions=drop`,
}

// goldenV6PodAPolicy is pod A's flows on the IPv6-only node with NetworkPolicy and
// Services on (its IPv6 hairpin flow among them), then its default deny, isolated both
// ways: IPv6 only.
var goldenV6PodAPolicy = []string{
	`cookie=0x50007020af40105, table=classifier, priority=100,in_port=3 actions=load:0x2->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5 actions=goto_table:"service_hairpin"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5 actions=goto_table:"service_hairpin"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5,icmp_type=135,nd_sll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5,icmp_type=135,nd_sll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5,icmp_type=136,nd_target=fd00:10:244:1::5,nd_tll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fd00:10:244:1::5,icmp_type=136,nd_target=fd00:10:244:1::5,nd_tll=00:00:00:00:00:00 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5,icmp_type=136,nd_target=fe80::858:ff:fe00:5,nd_tll=0a:58:00:00:00:05 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=150,icmp6,in_port=3,dl_src=0a:58:00:00:00:05,ipv6_src=fe80::858:ff:fe00:5,icmp_type=136,nd_target=fe80::858:ff:fe00:5,nd_tll=00:00:00:00:00:00 actions=goto_table:nd`,
	`cookie=0x50007020af40105, table=nd, priority=110,icmp6,dl_dst=0a:58:00:00:00:05 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fd00:10:244:1::5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table=nd, priority=100,icmp6,icmp_type=135,nd_target=fe80::858:ff:fe00:5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table="l3_forwarding", priority=100,ipv6,ipv6_dst=fd00:10:244:1::5 actions=set_field:0a:58:00:00:00:05->eth_dst,load:0x3->NXM_NX_REG1[],goto_table:conntrack`,
	`cookie=0x50007020af40105, table="l3_forwarding", priority=110,ipv6,ipv6_src=fd00:10:244:1::5,ipv6_dst=fd00:10:244:1::5 actions=set_field:0a:58:00:00:00:05->eth_dst,load:0x3->NXM_NX_REG1[],load:0x1->NXM_NX_REG0[4],ct(commit,table=output,zone=65281,nat(src=fc00::a9fe:fc))`,
	`cookie=0x50007020af40105, table="egress_rules", priority=100,ipv6,ipv6_src=fd00:10:244:1::5 actions=drop`,
	`cookie=0x50007020af40105, table="egress_rules", priority=100,ipv6,ipv6_src=fe80::858:ff:fe00:5 actions=drop`,
	`cookie=0x50007020af40105, table="ingress_rules", priority=100,ipv6,reg1=0x3 actions=drop`,
}

// goldenV6Rule5 is rule 5 (ingress to pods A and B from an IPv4 pod, an IPv6 pod and an
// IPv6 ipBlock, TCP/80 and a UDP range) on the IPv6-only node: dualRuleGolden less its
// IPv4 flows (the IPv4 peer has none).
var goldenV6Rule5 = []string{
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,ipv6_src=2001:db8:8000::/34 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,ipv6_src=2001:db8::/33 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,ipv6_src=fd00:10:244:2::7 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,reg1=0x3 actions=conjunction(5,1/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,reg1=0x4 actions=conjunction(5,1/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,tcp6,tp_dst=80 actions=conjunction(5,3/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,udp6,tp_dst=0x3e8/0xfff8 actions=conjunction(5,3/3)`,
	`cookie=0x500070400000005, table="ingress_rules", priority=200,conj_id=5,ipv6 actions=goto_table:"conntrack_commit"`,
}

// v6Rule5 is dualRule5 for the IPv6-only node's pods.
func v6Rule5() PolicyRule {
	return testRule(5, false, []Pod{testV6PodA(), testV6PodB()},
		[]string{"10.244.2.7/32", "fd00:10:244:2::7/128", "2001:db8::/33", "2001:db8:8000::/34"},
		[]PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}, {Proto: IPProtoUDP, Port: 1000, Mask: 0xfff8}})
}

// noIPv4 fails the test for any flow of fs that matches or sets IPv4 or ARP.
func noIPv4(t *testing.T, what string, fs []Flow) {
	t.Helper()
	for _, f := range fs {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		s := f.String()
		if f.Match.EthType == EthTypeIPv4 || f.Match.EthType == EthTypeARP || strings.Contains(s, "169.254.") {
			t.Errorf("%s: IPv4 flow on the IPv6-only node: %s", what, s)
		}
	}
}

// TestIPv6OnlyPolicyServicesFlows: the IPv6-only node with NetworkPolicy and Services is
// valid, and its node, pod, deny, rule and Service port flows are the goldens, IPv6 only.
func TestIPv6OnlyPolicyServicesFlows(t *testing.T) {
	cfg := testIPv6OnlyPolicyConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	dl := cfg
	dl.DenyLog = true
	if err := dl.Validate(); err != nil {
		t.Fatalf("IPv6-only node with the deny log: %v", err)
	}
	node := PipelineFlows(cfg)
	compareLines(t, "IPv6-only node with policy and Services", lines(node, nil), goldenIPv6OnlyPolicyNode)
	noIPv4(t, "node", node)
	pod := append(PodFlows(cfg, testV6PodA()), PodPolicyFlows(cfg, testV6PodA(), true, true)...)
	compareLines(t, "IPv6-only pod A with policy and Services, isolated both ways", lines(pod, nil), goldenV6PodAPolicy)
	noIPv4(t, "pod A", pod)
	noIPv4(t, "pod A, deny log", PodPolicyFlows(dl, testV6PodA(), true, true))

	s := NewPolicyFlowSet(cfg)
	s.Set(v6Rule5())
	compareLines(t, "rule 5 on the IPv6-only node", lines(s.Flows(), nil), sorted(goldenV6Rule5))
	noIPv4(t, "rule 5", s.Flows())
	// A rule whose only peer is IPv4 has no flow there (it can admit nothing), and one
	// with a single clause (its pods) admits by IPv6 only.
	s = NewPolicyFlowSet(cfg)
	s.Set(testRule(6, true, []Pod{testV6PodA()}, []string{"10.244.2.7/32"}, nil))
	if s.Len() != 0 {
		t.Errorf("egress rule to an IPv4 peer alone: flows %v, want none", lines(s.Flows(), nil))
	}
	s.Set(testRule(7, true, []Pod{testV6PodB()}, nil, nil))
	compareLines(t, "single-clause rule", lines(s.Flows(), nil), []string{
		`cookie=0x500070400000000, table="egress_rules", priority=210,ipv6,ipv6_src=fd00:10:244:1::6 actions=goto_table:"ingress_rules"`,
	})

	// The incremental path (pods and peers added and removed, an IPv4 peer among them)
	// leaves the same flows as a rebuild.
	pods := []Pod{testV6PodA(), testV6PodB()}
	peers := []string{"10.244.2.7/32", "fd00:10:244:2::7/128", "fd00:10:244:3::/64", "2001:db8::/33"}
	for _, egress := range []bool{false, true} {
		inc, full := NewPolicyFlowSet(cfg), NewPolicyFlowSet(cfg)
		full.full = true
		ports := []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}
		steps := [][2][]int{{{0}, {1}}, {{0, 1}, {0, 1, 2}}, {{1}, {1, 3}}, {{0, 1}, {0, 3}}}
		for i, st := range steps {
			var ps []Pod
			for _, j := range st[0] {
				ps = append(ps, pods[j])
			}
			var prs []string
			for _, j := range st[1] {
				prs = append(prs, peers[j])
			}
			r := testRule(3, egress, ps, prs, ports)
			inc.Set(r)
			full.Set(r)
			compareLines(t, fmt.Sprintf("egress=%v step %d: incremental vs rebuilt", egress, i), lines(inc.Flows(), nil), lines(full.Flows(), nil))
			noIPv4(t, fmt.Sprintf("egress=%v step %d", egress, i), inc.Flows())
		}
	}

	// IPv6 Service ports build as on a dual-stack node.
	var got []string
	for _, sp := range testIPv6ServicePorts() {
		fs, gs := ServicePortFlows(cfg, sp)
		noIPv4(t, sp.String(), fs)
		got = append(got, lines(fs, nil)...)
		for _, g := range gs {
			got = append(got, g.String())
		}
	}
	compareLines(t, "IPv6 Service ports on the IPv6-only node", got, goldenIPv6ServicePorts)
}

// TestIPv6OnlyPolicyServicesOnSwitch installs the IPv6-only node with NetworkPolicy and
// Services, its two pods (B ingress-isolated, A egress-isolated), their rules, peer B
// and the IPv6 Service ports on a real OVS: text and FlowMods give the goldens'
// dump-flows text, dump-groups the groups'; traces show the rules judge IPv6, the
// gateway's IPv6 skips them, a new connection to a ClusterIP goes to its group and one
// to a port without endpoints to the controller.
func TestIPv6OnlyPolicyServicesOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.ovs.Ofctl(t, "add-meter", n.mgmt, "meter=2,pktps,band=type=drop,rate=100")
	n.cfg = testIPv6OnlyPolicyConfig()
	n.cfg.ClusterCIDRIPv6 = mustCIDR6("fd00:10:244::/56") // IPv6 egress to the gateway
	n.podA, n.podB = testV6PodA(), testV6PodB()
	a, b, gw := n.podA, n.podB, n.cfg
	set := NewPolicyFlowSet(n.cfg)
	// B: ingress isolated; allowed from A on TCP 80 (and from an IPv4 address, which
	// has no flow here), and from fd00:10:244:2:8000::/65 on any port.
	set.Set(testRule(11, false, []Pod{b}, []string{"fd00:10:244:1::5/128", "10.244.1.5/32"}, []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}))
	set.Set(testRule(12, false, []Pod{b}, []string{"fd00:10:244:2:8000::/65"}, nil))
	// A: egress isolated; allowed to B (any port) and to 2001:db8::/32 UDP 53.
	set.Set(testRule(13, true, []Pod{a}, []string{"fd00:10:244:1::6/128"}, nil))
	set.Set(testRule(14, true, []Pod{a}, []string{"2001:db8::/32"}, []PolicyPort{{Proto: IPProtoUDP, Port: 53, Mask: 0xffff}}))
	fs := append(PipelineFlows(n.cfg), PodFlows(n.cfg, a)...)
	fs = append(fs, PodFlows(n.cfg, b)...)
	fs = append(fs, PeerFlows(n.cfg, testV6PeerB())...)
	fs = append(fs, PodPolicyFlows(n.cfg, b, true, false)...)
	fs = append(fs, PodPolicyFlows(n.cfg, a, false, true)...)
	fs = append(fs, set.Flows()...)
	var groups []Group
	for _, sp := range testIPv6ServicePorts() {
		sfs, gs := ServicePortFlows(n.cfg, sp)
		fs, groups = append(fs, sfs...), append(groups, gs...)
	}
	noIPv4(t, "all", fs)
	var wantGroups []string
	for _, g := range groups {
		n.ovs.Ofctl(t, "add-group", n.mgmt, g.String())
		wantGroups = append(wantGroups, g.String())
	}
	var gotGroups []string
	for _, l := range strings.Split(n.ovs.Ofctl(t, "dump-groups", "--names", n.mgmt), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") {
			gotGroups = append(gotGroups, l)
		}
	}
	compareLines(t, "dump-groups", sorted(gotGroups), sorted(wantGroups))
	n.addFlowsText(t, fs)
	compareLines(t, "dump-flows --names vs Format(port names), from text", n.dump(t), sortedFormat(fs, n.names))
	n.ovs.Ofctl(t, "del-flows", n.mgmt)
	var mods []*openflow13.FlowMod
	for _, f := range fs {
		mods = append(mods, f.FlowMod(openflow13.FC_ADD))
	}
	sendFlowMods(t, n.mgmt, mods...)
	compareLines(t, "dump-flows --names vs Format(port names), from FlowMods", n.dump(t), sortedFormat(fs, n.names))

	ip6 := func(in uint32, src, dst net.HardwareAddr, s, d, rest string) string {
		return fmt.Sprintf("in_port=%d,ipv6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=64%s", in, src, dst, s, d, rest)
	}
	tun := func(packet string) string { return "tun_ipv6_src=fd00:172:16::2,tun_ipv6_dst=fd00:172:16::1," + packet }
	other := mustMAC("0a:58:0a:f4:02:07")
	const a6, b6, g6 = "fd00:10:244:1::5", "fd00:10:244:1::6", "fd00:10:244:1::1"
	for _, c := range []struct {
		name   string
		packet string
		ct     string // the --ct-next state of service_conntrack's lookup
		out    uint32 // 0: dropped
		want   string // in the trace, if set
	}{
		{"A to B TCP 80 new: allowed by both", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=80"), "trk,new", b.OFPort, "conj_id=11,ipv6"},
		{"A to B TCP 81 new: B's ingress refuses", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=81"), "trk,new", 0, ""},
		{"A to B TCP 81 established: passes", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=81"), "trk,est", b.OFPort, ""},
		{"A to B invalid: dropped", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=80"), "trk,inv", 0, ""},
		{"A to 2001:db8::9 UDP 53: allowed", ip6(a.OFPort, a.MAC, gw.GatewayMAC, a6, "2001:db8::9", ",nw_proto=17,udp_dst=53"), "trk,new", gw.GatewayOFPort, "conj_id=14,ipv6"},
		{"A to 2001:db8::9 UDP 54: A's egress refuses", ip6(a.OFPort, a.MAC, gw.GatewayMAC, a6, "2001:db8::9", ",nw_proto=17,udp_dst=54"), "trk,new", 0, ""},
		{"A to the gateway's IPv6: always", ip6(a.OFPort, a.MAC, gw.GatewayMAC, a6, g6, ",nw_proto=6,tp_dst=22"), "trk,new", gw.GatewayOFPort, ""},
		{"host (gateway IPv6) to B TCP 81: always", ip6(gw.GatewayOFPort, gw.GatewayMAC, b.MAC, g6, b6, ",nw_proto=6,tp_dst=81"), "trk,new", b.OFPort, ""},
		{"peer's pod in the ipBlock to B TCP 81: allowed", tun(ip6(1, other, gw.GatewayMAC, "fd00:10:244:2:8000::7", b6, ",nw_proto=6,tp_dst=81")), "trk,new", b.OFPort, "conj_id=12,ipv6"},
		{"peer's pod outside the ipBlock to B TCP 81: refused", tun(ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", b6, ",nw_proto=6,tp_dst=81")), "trk,new", 0, ""},
		{"B to A new: A not ingress-isolated", ip6(b.OFPort, b.MAC, a.MAC, b6, a6, ",nw_proto=6,tp_dst=80"), "trk,new", a.OFPort, ""},
		{"B to the ClusterIP [fd00:96::10]:80 new: its group", ip6(b.OFPort, b.MAC, gw.GatewayMAC, b6, "fd00:96::10", ",nw_proto=6,tp_dst=80"), "trk,new", 0, "group:1048585"},
		{"B to [fd00:96::11]:80 (no endpoints) new: the controller", ip6(b.OFPort, b.MAC, gw.GatewayMAC, b6, "fd00:96::11", ",nw_proto=6,tp_dst=80"), "trk,new", 0, "CONTROLLER:128"},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet, "--ct-next", c.ct)
			if c.want != "" && !strings.Contains(trace, c.want) {
				t.Fatalf("packet %s (ct %q): no %q in the trace\n%s", c.packet, c.ct, c.want, trace)
			}
			if strings.HasPrefix(c.want, "group:") || strings.HasPrefix(c.want, "CONTROLLER") {
				return
			}
			if out, _ := traceResult(t, trace); out != c.out {
				t.Fatalf("packet %s (ct %q) left by port %d, want %d (0 = drop)\n%s", c.packet, c.ct, out, c.out, trace)
			}
		})
	}
}

// docIPv6OnlyPolicyFlows are the flows of docs/pipeline.md's section "IPv6-only node with
// NetworkPolicy and Services": those the IPv6-only doc node (TestPipelineDocIPv6Only's)
// has with NetworkPolicy and Services on, pod A isolated for ingress, rule 1 admitting
// peer B's pod subnets (its IPv6 one, fd00:10:244:2::/64, and an IPv4 10.244.2.0/24,
// which has no flow here) on TCP/80, and the IPv6 Service port 9 (testIPv6ServicePorts),
// beyond the IPv6-only section's flows, in the order of a dump; then the port's group.
func docIPv6OnlyPolicyFlows() []string {
	base := testIPv6OnlyConfig()
	base.ClusterCIDRIPv6 = mustCIDR6("fd00:10:244::/56")
	old := map[string]bool{}
	for _, f := range append(append(PipelineFlows(base), PodFlows(base, testV6PodA())...), PeerFlows(base, testV6PeerB())...) {
		old[f.Format(docPorts)] = true
	}
	cfg := base
	cfg.Policy, cfg.Services = true, true
	all := append(PipelineFlows(cfg), PodFlows(cfg, testV6PodA())...)
	all = append(all, PodPolicyFlows(cfg, testV6PodA(), true, false)...)
	set := NewPolicyFlowSet(cfg)
	set.Set(PolicyRule{ID: 1, Pods: []Pod{testV6PodA()}, Peers: []*net.IPNet{mustCIDR("10.244.2.0/24"), mustCIDR6("fd00:10:244:2::/64")},
		Ports: []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}})
	all = append(all, set.Flows()...)
	all = append(all, PeerFlows(cfg, testV6PeerB())...)
	sfs, gs := ServicePortFlows(cfg, testIPv6ServicePorts()[0])
	all = append(all, sfs...)
	var fs []Flow
	for _, f := range all {
		if !old[f.Format(docPorts)] {
			fs = append(fs, f)
		}
	}
	sortDumpOrder(fs)
	out := lines(fs, docPorts)
	for _, g := range gs {
		out = append(out, g.String())
	}
	return out
}

// TestPipelineDocIPv6OnlyPolicy: the block of docs/pipeline.md's section "IPv6-only node
// with NetworkPolicy and Services" is exactly docIPv6OnlyPolicyFlows.
func TestPipelineDocIPv6OnlyPolicy(t *testing.T) {
	doc := docSection(t, "## IPv6-only node with NetworkPolicy and Services", true)
	compareLines(t, "docs/pipeline.md, IPv6-only NetworkPolicy and Services section (with a leading space in the file)", doc, docIPv6OnlyPolicyFlows())
}
