package flows

import (
	"fmt"
	"math/rand"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

func policyConfig() NodeConfig {
	cfg := testConfig()
	cfg.Policy = true
	return cfg
}

var goldenPolicyPipeline = []string{
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,reg0=0x1/0xf,nw_src=10.244.1.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,nw_dst=10.244.1.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,reg0=0x1/0xf,nw_src=172.16.0.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=200,ip,nw_dst=172.16.0.1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table=conntrack, priority=1,ip actions=ct(table="conntrack_state",zone=65280)`,
	`cookie=0x500070100000000, table=conntrack, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=210,ct_state=-new-rpl-inv+trk,sctp actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=200,ct_state=-new-inv+trk,ip actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_state", priority=190,ct_state=+inv+trk,ip actions=drop`,
	`cookie=0x500070100000000, table="conntrack_state", priority=1 actions=goto_table:"egress_rules"`,
	`cookie=0x500070100000000, table="conntrack_state", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="egress_rules", priority=220,ip,nw_dst=10.96.0.0/12 actions=goto_table:"ingress_rules"`,
	`cookie=0x500070100000000, table="egress_rules", priority=1 actions=goto_table:"ingress_rules"`,
	`cookie=0x500070100000000, table="egress_rules", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="ingress_rules", priority=1 actions=goto_table:"conntrack_commit"`,
	`cookie=0x500070100000000, table="ingress_rules", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=100,ct_state=+new+trk,ip actions=ct(commit,zone=65280),goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=1 actions=goto_table:remote`,
	`cookie=0x500070100000000, table="conntrack_commit", priority=0 actions=drop`,
}

func TestPolicyPipelineGolden(t *testing.T) {
	var stages []Flow
	for _, f := range PipelineFlows(policyConfig()) {
		if f.Table >= table(StageConntrack) && f.Table <= table(StageConntrackCommit) {
			stages = append(stages, f)
		}
	}
	compareLines(t, "policy stages", lines(stages, nil), goldenPolicyPipeline)
	// The service flow goes through conntrack with policy on.
	for _, f := range PipelineFlows(policyConfig()) {
		if f.Table == table("service") && f.Priority == PriorityNormal {
			if g := f.Actions[len(f.Actions)-1]; g != (GotoTable{table("conntrack")}) {
				t.Errorf("service flow with policy: %s, want goto conntrack", f)
			}
		}
	}
	for _, f := range PipelineFlows(policyConfig()) {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestPodPolicyFlowsGolden(t *testing.T) {
	cfg := policyConfig()
	compareLines(t, "deny flows", lines(PodPolicyFlows(cfg, testPodA(), true, true), nil), []string{
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ip,nw_src=10.244.1.5 actions=drop`,
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ip,reg1=0x3 actions=drop`,
	})
	compareLines(t, "ingress only", lines(PodPolicyFlows(cfg, testPodA(), true, false), nil), []string{
		`cookie=0x50007020af40105, table="ingress_rules", priority=100,ip,reg1=0x3 actions=drop`,
	})
	cfg.DenyLog = true
	compareLines(t, "deny flows with the log", lines(PodPolicyFlows(cfg, testPodA(), false, true), nil), []string{
		`cookie=0x50007020af40105, table="egress_rules", priority=100,ip,nw_src=10.244.1.5 actions=meter:1,CONTROLLER:128`,
	})
	if fs := PodPolicyFlows(testConfig(), testPodA(), true, true); len(fs) != 0 {
		t.Errorf("policy off: %d deny flows", len(fs))
	}
	// The pod's cookie selects its deny flows.
	c, m := PodCookie(testPodA())
	for _, f := range PodPolicyFlows(cfg, testPodA(), true, true) {
		if uint64(f.Cookie)&m != c&m {
			t.Errorf("%s: not selected by the pod cookie", f)
		}
	}
}

func testRule(id uint32, egress bool, pods []Pod, peers []string, ports []PolicyPort) PolicyRule {
	r := PolicyRule{ID: id, Egress: egress, Pods: pods, AnyPeer: peers == nil, AnyPort: ports == nil, Ports: ports}
	for _, p := range peers {
		if strings.Contains(p, ":") {
			r.Peers = append(r.Peers, mustCIDR6(p))
		} else {
			r.Peers = append(r.Peers, mustCIDR(p))
		}
	}
	return r
}

func TestPolicyRuleFlowsGolden(t *testing.T) {
	s := NewPolicyFlowSet(policyConfig())
	s.Set(testRule(5, false, []Pod{testPodA(), testPodB()}, []string{"10.244.2.7/32", "10.244.3.0/24", "192.0.2.0/24"},
		[]PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}, {Proto: IPProtoUDP, Port: 1000, Mask: 0xfff8}}))
	want := []string{
		`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,reg1=0x3 actions=conjunction(5,1/3)`,
		`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,reg1=0x4 actions=conjunction(5,1/3)`,
		`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,nw_src=10.244.2.7 actions=conjunction(5,2/3)`,
		`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,nw_src=10.244.3.0/24 actions=conjunction(5,2/3)`,
		`cookie=0x500070400000000, table="ingress_rules", priority=200,ip,nw_src=192.0.2.0/24 actions=conjunction(5,2/3)`,
		`cookie=0x500070400000000, table="ingress_rules", priority=200,tcp,tp_dst=80 actions=conjunction(5,3/3)`,
		`cookie=0x500070400000000, table="ingress_rules", priority=200,udp,tp_dst=0x3e8/0xfff8 actions=conjunction(5,3/3)`,
		`cookie=0x500070400000005, table="ingress_rules", priority=200,conj_id=5,ip actions=goto_table:"conntrack_commit"`,
	}
	sort.Strings(want)
	compareLines(t, "ingress rule flows", lines(s.Flows(), nil), want)

	s = NewPolicyFlowSet(policyConfig())
	s.Set(testRule(6, true, []Pod{testPodA()}, []string{"10.244.2.7/32"}, nil))
	s.Set(testRule(7, true, []Pod{testPodB()}, nil, nil))
	want = []string{
		`cookie=0x500070400000000, table="egress_rules", priority=200,ip,nw_src=10.244.1.5 actions=conjunction(6,1/2)`,
		`cookie=0x500070400000000, table="egress_rules", priority=200,ip,nw_dst=10.244.2.7 actions=conjunction(6,2/2)`,
		`cookie=0x500070400000006, table="egress_rules", priority=200,conj_id=6,ip actions=goto_table:"ingress_rules"`,
		`cookie=0x500070400000000, table="egress_rules", priority=210,ip,nw_src=10.244.1.6 actions=goto_table:"ingress_rules"`,
	}
	sort.Strings(want)
	compareLines(t, "egress rule flows (two clauses; one clause = plain allow)", lines(s.Flows(), nil), want)
	for _, f := range s.Flows() {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// TestPolicyFlowsGrowAsSum: N peers × M pods × K ports cost N+M+K+1 flows.
func TestPolicyFlowsGrowAsSum(t *testing.T) {
	for _, n := range []int{1, 3, 50} {
		for _, m := range []int{1, 4, 20} {
			for _, k := range []int{1, 2, 10} {
				var pods []Pod
				for i := 0; i < m; i++ {
					pods = append(pods, Pod{OFPort: uint32(3 + i), IPs: []net.IP{net.IPv4(10, 244, 1, byte(10+i))}})
				}
				var peers []string
				for i := 0; i < n; i++ {
					peers = append(peers, fmt.Sprintf("10.244.2.%d/32", i+1))
				}
				var ports []PolicyPort
				for i := 0; i < k; i++ {
					ports = append(ports, PolicyPort{Proto: IPProtoTCP, Port: uint16(8000 + i), Mask: 0xffff})
				}
				for _, egress := range []bool{false, true} {
					s := NewPolicyFlowSet(policyConfig())
					s.Set(testRule(1, egress, pods, peers, ports))
					if got, want := s.Len(), n+m+k+1; got != want {
						t.Errorf("N=%d M=%d K=%d egress=%v: %d flows, want %d", n, m, k, egress, got, want)
					}
				}
			}
		}
	}
}

// TestPolicyFlowSetChangedKeys applies random rule sets and removals and checks that the
// keys Set and Remove return are exactly the flows that changed (added, removed or
// different), and that the set always equals one built from scratch from the live rules.
func TestPolicyFlowSetChangedKeys(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	pods := []Pod{testPodA(), testPodB(), {OFPort: 9, IPs: []net.IP{net.ParseIP("10.244.1.9")}}}
	peerPool := []string{"10.244.2.7/32", "10.244.2.8/32", "10.244.0.0/16", "192.0.2.0/24"}
	portPool := []PolicyPort{{IPProtoTCP, 80, 0xffff}, {IPProtoTCP, 81, 0xffff}, {IPProtoUDP, 80, 0xffff}, {IPProtoSCTP, 0, 0}, {IPProtoTCP, 1000, 0xfff8}}
	randomRule := func(id uint32) PolicyRule {
		var ps []Pod
		for _, p := range pods {
			if r.Intn(2) == 0 {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			ps = pods[:1]
		}
		var peers []string
		if r.Intn(4) != 0 {
			for _, p := range peerPool {
				if r.Intn(2) == 0 {
					peers = append(peers, p)
				}
			}
			if peers == nil {
				peers = peerPool[:1]
			}
		}
		var ports []PolicyPort
		if r.Intn(4) != 0 {
			for _, p := range portPool {
				if r.Intn(2) == 0 {
					ports = append(ports, p)
				}
			}
			if ports == nil {
				ports = portPool[:1]
			}
		}
		return testRule(id, r.Intn(2) == 0, ps, peers, ports)
	}
	snap := func(s *PolicyFlowSet) map[string]string {
		m := map[string]string{}
		for _, f := range s.Flows() {
			m[f.MatchKey()] = f.String()
		}
		return m
	}
	s := NewPolicyFlowSet(policyConfig())
	live := map[uint32]PolicyRule{}
	steps := 2000
	if raceEnabled || testing.Short() {
		steps = 300
	}
	ops := map[string]int{}
	for step := 0; step < steps; step++ {
		before := snap(s)
		id := uint32(1 + r.Intn(6))
		var changed []string
		_, had := live[id]
		if r.Intn(3) == 0 {
			delete(live, id)
			changed = s.Remove(id)
			ops[map[bool]string{true: "remove", false: "remove absent"}[had]]++
		} else {
			rule := randomRule(id)
			live[id] = rule
			changed = s.Set(rule)
			ops[map[bool]string{true: "replace", false: "add"}[had]]++
		}
		for _, f := range s.Flows() {
			if n := strings.Count(f.String(), "conjunction("); n > 1 {
				ops["shared clause flow"]++
				break
			}
		}
		after := snap(s)
		var diff []string
		keys := map[string]bool{}
		for k := range before {
			keys[k] = true
		}
		for k := range after {
			keys[k] = true
		}
		for k := range keys {
			if before[k] != after[k] {
				diff = append(diff, k)
			}
		}
		sort.Strings(diff)
		// Set may report a key whose flow ends up identical (removed then re-added
		// with the same actions); it must never miss a change.
		reported := map[string]bool{}
		for _, k := range changed {
			reported[k] = true
		}
		for _, k := range diff {
			if !reported[k] {
				t.Fatalf("step %d: flow %s changed (%q -> %q) but was not reported", step, k, before[k], after[k])
			}
		}
		fresh := NewPolicyFlowSet(policyConfig())
		for _, rule := range live {
			fresh.Set(rule)
		}
		if a, b := strings.Join(lines(fresh.Flows(), nil), "\n"), strings.Join(lines(s.Flows(), nil), "\n"); a != b {
			t.Fatalf("step %d: incremental set differs from scratch:\n%s\n---\n%s", step, b, a)
		}
		for _, f := range s.Flows() {
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Guard against a degenerate walk: every kind of step happened.
	for _, k := range []string{"add", "replace", "remove", "remove absent", "shared clause flow"} {
		if ops[k] == 0 {
			t.Errorf("%d steps: no %q step; the random walk is degenerate", steps, k)
		}
	}
	t.Logf("%d steps: %v", steps, ops)
}

// TestPolicyOnSwitch installs a policy and traces packets (ofproto/trace, conntrack state
// given with --ct-next) to check where each leaves; the pipeline's real conntrack is
// exercised by the e2e tests.
func TestPolicyOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.cfg.Policy = true
	a, b := n.podA, n.podB
	set := NewPolicyFlowSet(n.cfg)
	// B: ingress isolated; allowed from A on TCP 80 and from 10.244.2.0/24 on any port.
	set.Set(testRule(11, false, []Pod{b}, []string{"10.244.1.5/32"}, []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}, {Proto: IPProtoSCTP, Port: 80, Mask: 0xffff}}))
	set.Set(testRule(12, false, []Pod{b}, []string{"10.244.2.0/24"}, nil))
	// A: egress isolated; allowed to B (any port) and to 192.0.2.0/24 UDP 53.
	set.Set(testRule(13, true, []Pod{a}, []string{"10.244.1.6/32"}, nil))
	set.Set(testRule(14, true, []Pod{a}, []string{"192.0.2.0/24"}, []PolicyPort{{Proto: IPProtoUDP, Port: 53, Mask: 0xffff}}))
	fs := n.desired()
	fs = append(fs, PodPolicyFlows(n.cfg, b, true, false)...)
	fs = append(fs, PodPolicyFlows(n.cfg, a, false, true)...)
	fs = append(fs, set.Flows()...)
	var mods []*openflow13.FlowMod
	for _, f := range fs {
		if err := f.Validate(); err != nil {
			t.Fatal(err)
		}
		mods = append(mods, f.FlowMod(openflow13.FC_ADD))
	}
	sendFlowMods(t, n.mgmt, mods...)
	compareLines(t, "flows on the switch", n.dump(t), sortedFormat(fs, n.names))

	gw := n.cfg
	tun := func(packet string) string { return "tun_src=172.16.0.2,tun_dst=172.16.0.1," + packet }
	aPkt := func(proto, dst string, port int) string {
		return fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64,tp_dst=%d", a.OFPort, proto, a.MAC, b.MAC, a.IPv4(), dst, port)
	}
	bPkt := func(proto, dst string, port int) string {
		return fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64,tp_dst=%d", b.OFPort, proto, b.MAC, a.MAC, b.IPv4(), dst, port)
	}
	for _, c := range []struct {
		name   string
		packet string
		ct     string // --ct-next state, "" = none (the packet must not reach conntrack)
		out    uint32
	}{
		{"A to B TCP 80 new: allowed by both", aPkt("tcp", "10.244.1.6", 80), "trk,new", b.OFPort},
		{"A to B TCP 81 new: B's ingress refuses", aPkt("tcp", "10.244.1.6", 81), "trk,new", 0},
		{"A to B TCP 81 established: passes", aPkt("tcp", "10.244.1.6", 81), "trk,est", b.OFPort},
		{"A to B related (ICMP error of an allowed connection)", aPkt("tcp", "10.244.1.6", 81), "trk,rel", b.OFPort},
		{"A to B invalid: dropped", aPkt("tcp", "10.244.1.6", 80), "trk,inv", 0},
		{"A to the world UDP 53: allowed", fmt.Sprintf("in_port=%d,udp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=192.0.2.9,nw_ttl=64,tp_dst=53", a.OFPort, a.MAC, gw.GatewayMAC, a.IPv4()), "trk,new", gw.GatewayOFPort},
		{"A to the world UDP 54: A's egress refuses", fmt.Sprintf("in_port=%d,udp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=192.0.2.9,nw_ttl=64,tp_dst=54", a.OFPort, a.MAC, gw.GatewayMAC, a.IPv4()), "trk,new", 0},
		{"A to the gateway (its node): always", aPkt("tcp", "10.244.1.1", 22), "", gw.GatewayOFPort},
		{"A to the node IP: always", fmt.Sprintf("in_port=%d,tcp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=172.16.0.1,nw_ttl=64,tp_dst=22", a.OFPort, a.MAC, gw.GatewayMAC, a.IPv4()), "", gw.GatewayOFPort},
		{"A to a service: on to the gateway (judged after DNAT)", aPkt("tcp", "10.96.0.10", 443), "trk,new", gw.GatewayOFPort},
		{"B to A new: A is not ingress-isolated, B not egress-isolated", bPkt("tcp", "10.244.1.5", 80), "trk,new", a.OFPort},
		{"host (gateway address) to B TCP 81: always", fmt.Sprintf("in_port=%d,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.1,nw_dst=10.244.1.6,nw_ttl=64,tp_dst=81", gw.GatewayOFPort, gw.GatewayMAC, b.MAC), "", b.OFPort},
		{"routed by the host (pod source) to B TCP 81: judged, refused", fmt.Sprintf("in_port=%d,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.3.9,nw_dst=10.244.1.6,nw_ttl=64,tp_dst=81", gw.GatewayOFPort, gw.GatewayMAC, b.MAC), "trk,new", 0},
		{"peer node's pod to B TCP 81: allowed by the second rule", tun(fmt.Sprintf("in_port=1,tcp,dl_src=0a:58:0a:f4:02:07,dl_dst=%s,nw_src=10.244.2.7,nw_dst=10.244.1.6,nw_ttl=64,tp_dst=81", gw.GatewayMAC)), "trk,new", b.OFPort},
		{"A to B SCTP 80 new: allowed", aPkt("sctp", "10.244.1.6", 80), "trk,new", b.OFPort},
		{"A to B SCTP 81 'established' (userspace conntrack ignores SCTP ports): judged, refused", aPkt("sctp", "10.244.1.6", 81), "trk,est", 0},
		{"B to A SCTP reply: passes", bPkt("sctp", "10.244.1.5", 5000), "trk,est,rpl", a.OFPort},
	} {
		t.Run(c.name, func(t *testing.T) {
			// ofproto/trace wants the protocol's own port field for UDP and SCTP.
			packet := c.packet
			for _, p := range []string{"udp", "sctp"} {
				if strings.Contains(packet, ","+p+",") {
					packet = strings.Replace(packet, "tp_dst=", p+"_dst=", 1)
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
				t.Fatalf("packet %s went through conntrack; node traffic must skip it\n%s", c.packet, trace)
			}
		})
	}
}
