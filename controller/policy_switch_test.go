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
func TestPolicyFlowsPairAfterDump(t *testing.T) {
	ovs, sw := ofTestBridge(t, openflow.Options{})
	ovs.Ofctl(t, "add-meter", ovs.MgmtSocket("br-int"), "meter=1,pktps,band=type=drop,rate=100")
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	mac, _ := net.ParseMAC("0a:58:0a:f4:01:01")
	cfg := flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: mac, GatewayIP: net.ParseIP("10.244.1.1"), PodSubnet: subnet,
		Generation: 3, Policy: true, DenyLog: true, NodeIP: net.ParseIP("172.16.0.1"), TunnelOFPort: 1,
		ServiceCIDR: &net.IPNet{IP: net.ParseIP("10.96.0.0").To4(), Mask: net.CIDRMask(12, 32)}}
	pod := flows.Pod{OFPort: 3, MAC: mac, IPs: []net.IP{net.ParseIP("10.244.1.5")}}
	set := flows.NewPolicyFlowSet(cfg)
	_, peer, _ := net.ParseCIDR("10.244.2.0/24")
	set.Set(flows.PolicyRule{ID: 9, Egress: false, Pods: []flows.Pod{pod}, Peers: []*net.IPNet{peer},
		Ports: []flows.PolicyPort{{Proto: flows.IPProtoTCP, Port: 1000, Mask: 0xfff8}, {Proto: flows.IPProtoSCTP, Port: 80, Mask: 0xffff}, {Proto: flows.IPProtoUDP}}})
	set.Set(flows.PolicyRule{ID: 10, Egress: true, Pods: []flows.Pod{pod}, Peers: []*net.IPNet{peer}, AnyPort: true})
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
