package flows

// NetworkPolicy on a dual-stack node (issue 23): the policy stages' IPv6 flows, the rule
// clauses per family, the default deny of both families, and (on a real OVS) the text
// dump-flows prints and the verdicts ofproto/trace gives, neighbor discovery included.

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

func dualPolicyConfig() NodeConfig {
	cfg := testDualStackConfig()
	cfg.Policy = true
	return cfg
}

// goldenDualPolicyStages are the policy stages' flows of the dual-stack golden node with
// NetworkPolicy: the IPv4-only node's (goldenPolicyPipeline) and their IPv6 twins.
var goldenDualPolicyStages = []string{
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,reg0=0x1/0xf,nw_src=10.244.1.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,nw_dst=10.244.1.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,reg0=0x1/0xf,nw_src=172.16.0.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,nw_dst=172.16.0.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ipv6,reg0=0x1/0xf,ipv6_src=fd00:10:244:1::1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ipv6,ipv6_dst=fd00:10:244:1::1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=1,ipv6 actions=ct(table="conntrack_state",zone=65280)`,
	`cookie=0x500070100000000, table=conntrack, priority=1,ip actions=ct(table="conntrack_state",zone=65280)`,
	`cookie=0x500070100000000, table=conntrack, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=210,ct_state=-new-rpl-inv+trk,sctp actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=200,ct_state=-new-inv+trk,ip actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_state", priority=190,ct_state=+inv+trk,ip actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=210,ct_state=-new-rpl-inv+trk,sctp6 actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=200,ct_state=-new-inv+trk,ipv6 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_state", priority=190,ct_state=+inv+trk,ipv6 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=1 actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="egress_rules", priority=220,ip,nw_dst=10.96.0.0/12 actions=goto_table:"ingress_rules"`,
	`cookie=0x500070100000000, table="egress_rules", priority=1 actions=goto_table:"ingress_rules"`,
	`cookie=0x500070100000000, table="egress_rules", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="ingress_rules", priority=1 actions=goto_table:"conntrack_commit"`,
	`cookie=0x500070100000000, table="ingress_rules", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=100,ct_state=+new+trk,ip actions=ct(commit,zone=65280),goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=100,ct_state=+new+trk,ipv6 actions=ct(commit,zone=65280),goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=0 actions=drop`,
}

func TestDualStackPolicyPipelineGolden(t *testing.T) {
	cfg := dualPolicyConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var stages []Flow
	for _, f := range PipelineFlows(cfg) {
		if f.Table >= table(StageConntrack) && f.Table <= table(StageConntrackCommit) {
			stages = append(stages, f)
		}
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	compareLines(t, "dual-stack policy stages", lines(stages, nil), goldenDualPolicyStages)
	// With Services in OVS, service_conntrack tracked IPv6 already (with nat): the
	// conntrack stage sends it on to conntrack_state without a second lookup, as IPv4.
	svc := dualPolicyConfig()
	svc.Services = true
	var ct []string
	for _, f := range PipelineFlows(svc) {
		if f.Table == table(StageConntrack) && f.Priority == PriorityPass {
			ct = append(ct, f.String())
		}
	}
	compareLines(t, "conntrack pass flows with Services in OVS", ct, []string{
		`cookie=0x500070100000000, table=conntrack, priority=1,ipv6 actions=goto_table:"conntrack_state"`,
		`cookie=0x500070100000000, table=conntrack, priority=1,ip actions=goto_table:"conntrack_state"`,
	})
	// The IPv6 forwarding flows enter conntrack with policy on.
	for _, f := range PipelineFlows(cfg) {
		if f.Table == table("l3_forwarding") && f.Match.EthType == EthTypeIPv6 && f.Priority != PriorityLow {
			if g := f.Actions[len(f.Actions)-1]; g != (GotoTable{table(StageConntrack)}) {
				t.Errorf("IPv6 l3_forwarding flow with policy: %s, want goto conntrack", f)
			}
		}
	}
}

func TestDualStackPodPolicyFlowsGolden(t *testing.T) {
	cfg := dualPolicyConfig()
	compareLines(t, "deny flows", lines(PodPolicyFlows(cfg, testDualPodA(), true, true), nil), []string{
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ip,nw_src=10.244.1.5 actions=drop`,
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ipv6,ipv6_src=fd00:10:244:1::5 actions=drop`,
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ipv6,ipv6_src=fe80::858:aff:fef4:105 actions=drop`,
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ip,reg1=0x3 actions=drop`,
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ipv6,reg1=0x3 actions=drop`,
	})
	cfg.DenyLog = true
	compareLines(t, "deny flows with the log", lines(PodPolicyFlows(cfg, testDualPodA(), true, true), nil), []string{
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ip,nw_src=10.244.1.5 actions=meter:1,CONTROLLER:128`,
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ipv6,ipv6_src=fd00:10:244:1::5 actions=meter:1,CONTROLLER:128`,
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ipv6,ipv6_src=fe80::858:aff:fef4:105 actions=meter:1,CONTROLLER:128`,
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ip,reg1=0x3 actions=meter:1,CONTROLLER:128`,
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ipv6,reg1=0x3 actions=meter:1,CONTROLLER:128`,
	})
	// An IPv4-only node's deny flows of the same pod are its IPv4 ones.
	compareLines(t, "IPv4-only node", lines(PodPolicyFlows(policyConfig(), testDualPodA(), true, true), nil), []string{
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ip,nw_src=10.244.1.5 actions=drop`,
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ip,reg1=0x3 actions=drop`,
	})
}

// dualRuleGolden: ingress rule 5 on the dual-stack node for pods A and B from an IPv4
// pod, an IPv6 pod and an IPv6 ipBlock with an except (split), on TCP/80 and a UDP range.
var dualRuleGolden = []string{
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,reg1=0x3 actions=conjunction(5,1/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,reg1=0x4 actions=conjunction(5,1/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,reg1=0x3 actions=conjunction(5,1/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,reg1=0x4 actions=conjunction(5,1/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,nw_src=10.244.2.7 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,ipv6_src=fd00:10:244:2::7 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,ipv6_src=2001:db8::/33 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,ipv6,ipv6_src=2001:db8:8000::/34 actions=conjunction(5,2/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,tcp,tp_dst=80 actions=conjunction(5,3/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,tcp6,tp_dst=80 actions=conjunction(5,3/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,udp,tp_dst=0x3e8/0xfff8 actions=conjunction(5,3/3)`,
	`cookie=0x500070400000000, table="ingress_rules", priority=200,udp6,tp_dst=0x3e8/0xfff8 actions=conjunction(5,3/3)`,
	`cookie=0x500070400000005, table="ingress_rules", priority=200,conj_id=5,ip actions=goto_table:"conntrack_commit"`,
	`cookie=0x500070400000005, table="ingress_rules", priority=200,conj_id=5,ipv6 actions=goto_table:"conntrack_commit"`,
}

func dualRule5() PolicyRule {
	return testRule(5, false, []Pod{testDualPodA(), testDualPodB()},
		[]string{"10.244.2.7/32", "fd00:10:244:2::7/128", "2001:db8::/33", "2001:db8:8000::/34"},
		[]PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}, {Proto: IPProtoUDP, Port: 1000, Mask: 0xfff8}})
}

func TestDualStackPolicyRuleFlowsGolden(t *testing.T) {
	s := NewPolicyFlowSet(dualPolicyConfig())
	s.Set(dualRule5())
	want := sorted(dualRuleGolden)
	compareLines(t, "ingress rule flows", lines(s.Flows(), nil), want)

	s = NewPolicyFlowSet(dualPolicyConfig())
	s.Set(testRule(6, true, []Pod{testDualPodA()}, []string{"fd00:10:244:2::7/128"}, nil))
	s.Set(testRule(7, true, []Pod{testDualPodB()}, nil, nil))
	want = sorted([]string{
		`cookie=0x500070400000000, table="egress_rules", priority=200,ip,nw_src=10.244.1.5 actions=conjunction(6,1/2)`,
		`cookie=0x500070400000000, table="egress_rules", priority=200,ipv6,ipv6_src=fd00:10:244:1::5 actions=conjunction(6,1/2)`,
		`cookie=0x500070400000000, table="egress_rules", priority=200,ipv6,ipv6_dst=fd00:10:244:2::7 actions=conjunction(6,2/2)`,
		`cookie=0x500070400000006, table="egress_rules", priority=200,conj_id=6,ip actions=goto_table:"ingress_rules"`,
		`cookie=0x500070400000006, table="egress_rules", priority=200,conj_id=6,ipv6 actions=goto_table:"ingress_rules"`,
		`cookie=0x500070400000000, table="egress_rules", priority=210,ip,nw_src=10.244.1.6 actions=goto_table:"ingress_rules"`,
		`cookie=0x500070400000000, table="egress_rules", priority=210,ipv6,ipv6_src=fd00:10:244:1::6 actions=goto_table:"ingress_rules"`,
	})
	compareLines(t, "egress rule flows (two clauses; one clause = plain allow)", lines(s.Flows(), nil), want)
	for _, f := range s.Flows() {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	// The same rules on an IPv4-only node: IPv4 flows only, the IPv6 peer's flow none.
	s = NewPolicyFlowSet(policyConfig())
	s.Set(dualRule5())
	for _, l := range lines(s.Flows(), nil) {
		if strings.Contains(l, "ipv6") || strings.Contains(l, "tcp6") || strings.Contains(l, "udp6") {
			// An IPv6 peer still gets its flow (the engine gives an IPv4-only node none).
			if !strings.Contains(l, "ipv6_src=") {
				t.Errorf("IPv4-only node: IPv6 flow %s", l)
			}
		}
	}
}

// TestDualStackPolicyIncremental: on a dual-stack node the incremental path (pods and
// peers added and removed, IPv6 ones among them) leaves the same flows as a rebuild.
func TestDualStackPolicyIncremental(t *testing.T) {
	pods := []Pod{testDualPodA(), testDualPodB(), testPodA()}
	pods[2].OFPort, pods[2].IPs = 9, []net.IP{net.ParseIP("10.244.1.9")} // an IPv4-only pod
	peers := []string{"10.244.2.7/32", "fd00:10:244:2::7/128", "fd00:10:244:3::/64", "2001:db8::/33"}
	for _, egress := range []bool{false, true} {
		inc, full := NewPolicyFlowSet(dualPolicyConfig()), NewPolicyFlowSet(dualPolicyConfig())
		full.full = true
		ports := []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}
		steps := [][2][]int{{{0}, {0}}, {{0, 1}, {0, 1, 2}}, {{1, 2}, {1, 3}}, {{2}, {3}}, {{0, 1, 2}, {0, 1, 2, 3}}}
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
			changed := inc.Set(r)
			full.Set(r)
			compareLines(t, fmt.Sprintf("egress=%v step %d: incremental vs rebuilt", egress, i), lines(inc.Flows(), nil), lines(full.Flows(), nil))
			if len(changed) == 0 {
				t.Errorf("egress=%v step %d: no changed keys", egress, i)
			}
		}
	}
}

// TestDualStackPolicyOnSwitch installs the dual-stack node with NetworkPolicy, two
// dual-stack pods, their default deny and IPv6 rules on a real OVS (text and FlowMods
// give the goldens' dump-flows text) and traces IPv6 and IPv4 packets: rules judge IPv6
// as IPv4, established and related IPv6 pass, the host's IPv6 skips policy, and neighbor
// discovery between the pods passes when both are isolated with nothing allowed.
func TestDualStackPolicyOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.cfg = dualPolicyConfig()
	n.cfg.ClusterCIDRIPv6 = mustCIDR6("fd00:10:244::/56") // IPv6 egress to the gateway
	n.podA, n.podB = testDualPodA(), testDualPodB()
	a, b, gw := n.podA, n.podB, n.cfg
	set := NewPolicyFlowSet(n.cfg)
	// B: ingress isolated; allowed from A's IPv6 on TCP 80 and from fd00:10:244:2::/64
	// except fd00:10:244:2::/65 (so fd00:10:244:2:8000::/65) on any port.
	set.Set(testRule(11, false, []Pod{b}, []string{"fd00:10:244:1::5/128"}, []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}, {Proto: IPProtoSCTP, Port: 80, Mask: 0xffff}}))
	set.Set(testRule(12, false, []Pod{b}, []string{"fd00:10:244:2:8000::/65"}, nil))
	// A: egress isolated; allowed to B's IPv6 (any port) and to 2001:db8::/32 UDP 53.
	set.Set(testRule(13, true, []Pod{a}, []string{"fd00:10:244:1::6/128"}, nil))
	set.Set(testRule(14, true, []Pod{a}, []string{"2001:db8::/32"}, []PolicyPort{{Proto: IPProtoUDP, Port: 53, Mask: 0xffff}}))
	fs := append(PipelineFlows(n.cfg), PodFlows(n.cfg, a)...)
	fs = append(fs, PodFlows(n.cfg, b)...)
	fs = append(fs, PeerFlows(n.cfg, testDualPeerB())...)
	fs = append(fs, PodPolicyFlows(n.cfg, b, true, false)...)
	fs = append(fs, PodPolicyFlows(n.cfg, a, false, true)...)
	fs = append(fs, set.Flows()...)
	n.addFlowsText(t, fs)
	compareLines(t, "dump-flows --names vs Format(port names), from text", n.dump(t), sortedFormat(fs, n.names))
	n.ovs.Ofctl(t, "del-flows", n.mgmt)
	var mods []*openflow13.FlowMod
	for _, f := range fs {
		if err := f.Validate(); err != nil {
			t.Fatal(err)
		}
		mods = append(mods, f.FlowMod(openflow13.FC_ADD))
	}
	sendFlowMods(t, n.mgmt, mods...)
	compareLines(t, "dump-flows --names vs Format(port names), from FlowMods", n.dump(t), sortedFormat(fs, n.names))
	ip6 := func(in uint32, src, dst net.HardwareAddr, s, d, rest string) string {
		return fmt.Sprintf("in_port=%d,ipv6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=64%s", in, src, dst, s, d, rest)
	}
	icmp := func(in uint32, src, dst net.HardwareAddr, s, d string, typ int, rest string) string {
		return fmt.Sprintf("in_port=%d,icmp6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,nw_ttl=255,icmpv6_type=%d,icmpv6_code=0%s", in, src, dst, s, d, typ, rest)
	}
	tun := func(packet string) string { return "tun_src=172.16.0.2,tun_dst=172.16.0.1," + packet }
	other := mustMAC("0a:58:0a:f4:02:07")
	snmA := mustMAC("33:33:ff:00:00:05")
	snmB := mustMAC("33:33:ff:00:00:06")
	const a6, b6 = "fd00:10:244:1::5", "fd00:10:244:1::6"
	for _, c := range []struct {
		name   string
		packet string
		ct     string // --ct-next state, "" = none (the packet must not reach conntrack)
		out    uint32
	}{
		{"A to B TCP 80 new over IPv6: allowed by both", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=80"), "trk,new", b.OFPort},
		{"A to B TCP 81 new over IPv6: B's ingress refuses", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=81"), "trk,new", 0},
		{"A to B TCP 81 established over IPv6: passes", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=81"), "trk,est", b.OFPort},
		{"A to B related over IPv6: passes", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=81"), "trk,rel", b.OFPort},
		{"A to B invalid over IPv6: dropped", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=6,tp_dst=80"), "trk,inv", 0},
		{"A to B TCP 80 over IPv4: B's ingress refuses (the rule names A's IPv6 only)", fmt.Sprintf("in_port=%d,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.1.6,nw_ttl=64,tp_dst=80", a.OFPort, a.MAC, b.MAC), "trk,new", 0},
		{"A to 2001:db8::9 UDP 53: allowed", ip6(a.OFPort, a.MAC, gw.GatewayMAC, a6, "2001:db8::9", ",nw_proto=17,tp_dst=53"), "trk,new", gw.GatewayOFPort},
		{"A to 2001:db8::9 UDP 54: A's egress refuses", ip6(a.OFPort, a.MAC, gw.GatewayMAC, a6, "2001:db8::9", ",nw_proto=17,tp_dst=54"), "trk,new", 0},
		{"A to the gateway's IPv6: always", ip6(a.OFPort, a.MAC, gw.GatewayMAC, a6, "fd00:10:244:1::1", ",nw_proto=6,tp_dst=22"), "", gw.GatewayOFPort},
		{"host (gateway IPv6) to B TCP 81: always", ip6(gw.GatewayOFPort, gw.GatewayMAC, b.MAC, "fd00:10:244:1::1", b6, ",nw_proto=6,tp_dst=81"), "", b.OFPort},
		{"peer's pod in the ipBlock to B TCP 81: allowed", tun(ip6(1, other, gw.GatewayMAC, "fd00:10:244:2:8000::7", b6, ",nw_proto=6,tp_dst=81")), "trk,new", b.OFPort},
		{"peer's pod in the except to B TCP 81: refused", tun(ip6(1, other, gw.GatewayMAC, "fd00:10:244:2::7", b6, ",nw_proto=6,tp_dst=81")), "trk,new", 0},
		{"B to A new over IPv6: A not ingress-isolated", ip6(b.OFPort, b.MAC, a.MAC, b6, a6, ",nw_proto=6,tp_dst=80"), "trk,new", a.OFPort},
		{"A to B SCTP 80 new over IPv6: allowed", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=132,tp_dst=80"), "trk,new", b.OFPort},
		{"A to B SCTP 81 'established' over IPv6: judged, refused", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=132,tp_dst=81"), "trk,est", 0},
		{"B to A SCTP reply over IPv6: passes", ip6(b.OFPort, b.MAC, a.MAC, b6, a6, ",nw_proto=132,tp_dst=5000"), "trk,est,rpl", a.OFPort},
		// Neighbor discovery skips the policy stages (as ARP does), also between pods
		// isolated with nothing allowed (below, deny-all).
		{"NS A to B: delivered", icmp(a.OFPort, a.MAC, snmB, a6, "ff02::1:ff00:6", 135, ",nd_target="+b6+",nd_sll="+a.MAC.String()), "", b.OFPort},
		{"NA B to A: delivered", icmp(b.OFPort, b.MAC, a.MAC, b6, a6, 136, ",nd_target="+b6+",nd_tll="+b.MAC.String()), "", a.OFPort},
		{"NS B to A: delivered", icmp(b.OFPort, b.MAC, snmA, b6, "ff02::1:ff00:5", 135, ",nd_target="+a6+",nd_sll="+b.MAC.String()), "", a.OFPort},
	} {
		t.Run(c.name, func(t *testing.T) {
			packet := c.packet
			for p, f := range map[string]string{"17": "udp_dst=", "132": "sctp_dst="} {
				if strings.Contains(packet, "nw_proto="+p+",") {
					packet = strings.Replace(packet, "tp_dst=", f, 1)
				}
			}
			args := []string{"ofproto/trace", "br-int", packet}
			if c.ct != "" {
				args = append(args, "--ct-next", c.ct)
			}
			trace := n.ovs.Appctl(t, args...)
			out, _ := traceResult(t, trace)
			if out != c.out {
				t.Fatalf("packet %s (ct %q) left by port %d, want %d (0 = drop)\n%s", c.packet, c.ct, out, c.out, trace)
			}
			if c.ct == "" && strings.Contains(trace, "ct(") {
				t.Fatalf("packet %s went through conntrack; it must skip it\n%s", c.packet, trace)
			}
			if strings.HasPrefix(c.name, "A to 2001:db8::9") && strings.Contains(trace, "conj_id=14,ipv6") != strings.Contains(c.name, "allowed") {
				t.Fatalf("packet %s: rule 14's conj_id flow matched = %v, want %v\n%s", c.packet, !strings.Contains(c.name, "allowed"), strings.Contains(c.name, "allowed"), trace)
			}
		})
	}

	// The golden text of rule 5 is what dump-flows prints for it.
	n.ovs.Ofctl(t, "del-flows", n.mgmt)
	s5 := NewPolicyFlowSet(n.cfg)
	s5.Set(dualRule5())
	n.addFlowsText(t, append(PipelineFlows(n.cfg), s5.Flows()...))
	var ruleLines []string
	for _, l := range strings.Split(n.ovs.Ofctl(t, "dump-flows", "--no-stats", "--names", n.mgmt), "\n") {
		if l = strings.TrimSpace(l); strings.Contains(l, "conj") {
			ruleLines = append(ruleLines, l)
		}
	}
	sort.Strings(ruleLines)
	compareLines(t, "dump-flows of rule 5 vs golden", ruleLines, sorted(dualRuleGolden))

	// Deny-all both ways for both pods (no rules): ND still flows, IPv6 does not.
	n.ovs.Ofctl(t, "del-flows", n.mgmt)
	fs = append(PipelineFlows(n.cfg), PodFlows(n.cfg, a)...)
	fs = append(fs, PodFlows(n.cfg, b)...)
	fs = append(fs, PodPolicyFlows(n.cfg, a, true, true)...)
	fs = append(fs, PodPolicyFlows(n.cfg, b, true, true)...)
	n.addFlowsText(t, fs)
	for _, c := range []struct {
		name   string
		packet string
		ct     string
		out    uint32
	}{
		{"deny-all: NS A to B delivered", icmp(a.OFPort, a.MAC, snmB, a6, "ff02::1:ff00:6", 135, ",nd_target="+b6+",nd_sll="+a.MAC.String()), "", b.OFPort},
		{"deny-all: NA B to A delivered", icmp(b.OFPort, b.MAC, a.MAC, b6, a6, 136, ",nd_target="+b6+",nd_tll="+b.MAC.String()), "", a.OFPort},
		{"deny-all: unicast NS probe B to A delivered", icmp(b.OFPort, b.MAC, a.MAC, b6, a6, 135, ",nd_target="+a6+",nd_sll="+b.MAC.String()), "", a.OFPort},
		{"deny-all: echo A to B refused", icmp(a.OFPort, a.MAC, b.MAC, a6, b6, 128, ""), "trk,new", 0},
		{"deny-all: echo reply of an established exchange passes", icmp(b.OFPort, b.MAC, a.MAC, b6, a6, 129, ""), "trk,est,rpl", a.OFPort},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"ofproto/trace", "br-int", c.packet}
			if c.ct != "" {
				args = append(args, "--ct-next", c.ct)
			}
			trace := n.ovs.Appctl(t, args...)
			out, _ := traceResult(t, trace)
			if out != c.out {
				t.Fatalf("packet %s (ct %q) left by port %d, want %d (0 = drop)\n%s", c.packet, c.ct, out, c.out, trace)
			}
			if c.ct == "" && strings.Contains(trace, "ct(") {
				t.Fatalf("packet %s went through conntrack; it must skip it\n%s", c.packet, trace)
			}
		})
	}

	// A egress-isolated with nothing allowed, B not isolated: A's link-local source is no
	// way around its egress isolation.
	n.ovs.Ofctl(t, "del-flows", n.mgmt)
	fs = append(PipelineFlows(n.cfg), PodFlows(n.cfg, a)...)
	fs = append(fs, PodFlows(n.cfg, b)...)
	fs = append(fs, PodPolicyFlows(n.cfg, a, false, true)...)
	n.addFlowsText(t, fs)
	llA := LinkLocalFromMAC(a.MAC).String()
	for _, c := range []struct {
		name   string
		packet string
		out    uint32
	}{
		{"egress-isolated A to B from its global address refused", ip6(a.OFPort, a.MAC, b.MAC, a6, b6, ",nw_proto=17,tp_dst=80"), 0},
		{"egress-isolated A to B from its link-local address refused", ip6(a.OFPort, a.MAC, b.MAC, llA, b6, ",nw_proto=17,tp_dst=80"), 0},
		{"B (not isolated) to A passes", ip6(b.OFPort, b.MAC, a.MAC, b6, a6, ",nw_proto=17,tp_dst=80"), a.OFPort},
	} {
		t.Run(c.name, func(t *testing.T) {
			packet := strings.Replace(c.packet, "tp_dst=", "udp_dst=", 1)
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", packet, "--ct-next", "trk,new")
			if out, _ := traceResult(t, trace); out != c.out {
				t.Fatalf("packet %s left by port %d, want %d (0 = drop)\n%s", c.packet, out, c.out, trace)
			}
		})
	}
}
