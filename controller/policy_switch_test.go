package controller

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/switchstate"
)

// TestPolicyFlowsPairAfterDump: policy flows (conj_id, ct_state, nw_proto, masked tp_dst,
// conjunction and ct actions, meter) installed on a real switch come back from a flow
// dump with the same flowKey, so the flow audit and ofsdnctl flows pair them with the
// desired flows instead of deleting and re-adding them.
func TestPolicyFlowsPairAfterDump(t *testing.T) { policyFlowsPairAfterDump(t, false) }

// TestDualStackPolicyFlowsPairAfterDump: the same on a dual-stack node (issue 23), with
// the IPv6 policy flows (ipv6_src/ipv6_dst prefixes, tcp6/udp6/sctp6, conj_id with
// ipv6, the IPv6 default deny) and an IPv6 peer among the rules'.
func TestDualStackPolicyFlowsPairAfterDump(t *testing.T) { policyFlowsPairAfterDump(t, true) }

func policyFlowsPairAfterDump(t *testing.T, dual bool) {
	ovs, sw := ofTestBridge(t, openflow.Options{})
	ovs.Ofctl(t, "add-meter", ovs.MgmtSocket("br-int"), "meter=1,pktps,band=type=drop,rate=100")
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	mac, _ := net.ParseMAC("0a:58:0a:f4:01:01")
	cfg := flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: mac, GatewayIP: net.ParseIP("10.244.1.1"), PodSubnet: subnet,
		Generation: 3, Policy: true, DenyLog: true, NodeIP: net.ParseIP("172.16.0.1"), TunnelOFPort: 1,
		ServiceCIDR: &net.IPNet{IP: net.ParseIP("10.96.0.0").To4(), Mask: net.CIDRMask(12, 32)}}
	pod := flows.Pod{OFPort: 3, MAC: mac, IPs: []net.IP{net.ParseIP("10.244.1.5")}}
	_, peer, _ := net.ParseCIDR("10.244.2.0/24")
	peers := []*net.IPNet{peer}
	if dual {
		_, cfg.PodSubnetIPv6, _ = net.ParseCIDR("fd00:10:244:1::/64")
		cfg.GatewayIPv6 = net.ParseIP("fd00:10:244:1::1")
		pod.IPs = append(pod.IPs, net.ParseIP("fd00:10:244:1::5"))
		pod.MAC, _ = net.ParseMAC("0a:58:0a:f4:01:05") // its nd flow by MAC is not the gateway's
		_, peer6, _ := net.ParseCIDR("fd00:10:244:2::/65")
		peers = append(peers, peer6)
	}
	set := flows.NewPolicyFlowSet(cfg)
	set.Set(flows.PolicyRule{ID: 9, Egress: false, Pods: []flows.Pod{pod}, Peers: peers,
		Ports: []flows.PolicyPort{{Proto: flows.IPProtoTCP, Port: 1000, Mask: 0xfff8}, {Proto: flows.IPProtoSCTP, Port: 80, Mask: 0xffff}, {Proto: flows.IPProtoUDP}}})
	set.Set(flows.PolicyRule{ID: 10, Egress: true, Pods: []flows.Pod{pod}, Peers: peers, AnyPort: true})
	want := append(flows.PipelineFlows(cfg), flows.PodFlows(cfg, pod)...)
	want = append(want, flows.PodPolicyFlows(cfg, pod, true, true)...)
	want = append(want, set.Flows()...)
	var ops []openflow.FlowModOp
	for _, f := range want {
		if err := f.Validate(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_ADD), Name: f.String()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sw.Apply(ctx, ops); err != nil {
		t.Fatal(err)
	}
	stats, err := sw.DumpFlows(ctx, openflow13.OFPTT_ALL, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, f := range want {
		keys[switchstate.FlowKey(f)] = f.String()
	}
	seen := map[string]string{}
	for _, f := range want {
		if o, dup := seen[switchstate.FlowKey(f)]; dup {
			t.Errorf("two desired flows with one key:\n%s\n%s", o, f)
		}
		seen[switchstate.FlowKey(f)] = f.String()
	}
	if len(stats) != len(want) {
		t.Fatalf("switch holds %d flows, want %d", len(stats), len(want))
	}
	for _, s := range stats {
		k := switchstate.StatsKey(s)
		if _, ok := keys[k]; !ok {
			t.Errorf("dumped flow table %d priority %d cookie %#x (%d match fields) pairs with no desired flow", s.TableId, s.Priority, s.Cookie, len(s.Match.Fields))
		}
		delete(keys, k)
	}
	for _, f := range keys {
		t.Errorf("desired flow not paired: %s", f)
	}
}
