// Package flows declares ofsdn's OpenFlow 1.3 pipeline on the integration bridge (br-int)
// and builds its flows as values: pure functions from node state (NodeConfig, Pod) to
// []Flow. It knows nothing of sockets or OVSDB; the controller package installs the flows
// (Flow.FlowMod) and diffs them against the switch (Flow.MatchKey).
//
// # The pipeline
//
// Every stage is one flow table with a name (the bridge's Flow_Table rows carry the names,
// so `ovs-ofctl -O OpenFlow13 dump-flows --names br-int` and `ofproto/trace` show them).
// Table ids are spaced by 10 so later stages fit between. A packet enters table 0 and only
// moves forward, by goto_table (OpenFlow 1.3.5 §5.1). Every table ends in an explicit
// priority-0 "actions=drop" flow, so every drop is counted by some flow's n_packets.
// Reserved stages pass everything on with one priority-1 goto_table flow.
//
//	id stage           does                                                      registers
//	 0 classifier      sorts by in_port: gateway port → reg0[0..3]=1, a pod's    sets reg0[0..3]
//	                   port → reg0[0..3]=2 (then spoof_guard); the tunnel port →
//	                   reg0[0..3]=3 (then tunnel_ingress). Unknown ports drop.
//	10 tunnel_ingress  per peer: tun_src = the peer's node IP and nw_src in its
//	                   pod subnet → service; anything else from the tunnel drops.
//	20 spoof_guard     a pod may send only with its own MAC and IP: IP needs      reads reg0[0..3]
//	                   in_port+dl_src+nw_src, ARP needs in_port+dl_src+arp_spa+
//	                   arp_sha. Gateway traffic (reg0=1, the host) is trusted.
//	                   IP → service, ARP → arp, anything else drops.
//	30 arp             ARP requests and replies go to the port owning arp_tpa     sets reg1
//	                   (a local pod or the gateway): reg1=that ofport → output.
//	                   The real interfaces answer. Per peer: the host's requests
//	                   (reg0=1) for the peer's pod subnet are answered in OVS with
//	                   VirtualRouterMAC (IN_PORT). ARP for other addresses drops.
//	40 service         pod IP to the service CIDR → gateway (eth_dst, reg1),       sets reg1
//	                   where kube-proxy on the host handles it; the rest passes.
//	50 l3_forwarding   nw_dst = a local pod or the gateway IP → eth_dst=its MAC,  sets reg1
//	                   reg1=its ofport. Another address in the pod subnet (no such
//	                   pod) drops; off-subnet IP goes on with reg1=0.
//	60 network_policy  reserved: default allow.
//	70 remote          per peer: nw_dst in the peer's pod subnet → tun_dst=its    sets reg1
//	                   node IP, reg1=tunnel ofport. Undecided (reg1=0) IP for any
//	                   other cluster-CIDR address drops; the rest passes.
//	80 egress          reg1=0 from a pod (off-subnet) → eth_dst=GatewayMAC,        reads reg0, sets reg1
//	                   reg1=gateway ofport, where the host routes and masquerades.
//	                   reg1=0 from anywhere else drops; decided packets go on.
//	90 output          output:reg1.                                              reads reg1
//
// Registers (fields.go): reg0[0..3] source class (1 gateway, 2 pod, 3 tunnel), reg1 output
// ofport (0 = undecided), reg2 scratch within one action list (ARP responder). Cookies (fields.go): pipeline version, generation, owner kind,
// stage, owner id; PodCookie selects one pod's flows.
//
// # Design history
//
// The layout follows OpenShift SDN's table map (ovscontroller.go) with Antrea's practice
// of naming tables in one place (pipeline.go) and keeping registers and cookie fields
// typed (fields.go). Local ARP is forwarded, not answered: every local address a pod can
// ARP for belongs to a real interface (a pod's veth or the gateway internal port), so
// the owner answers and OVS only needs to deliver the request (broadcast: matched by
// arp_tpa, not by eth_dst).
//
// Across nodes the pipeline routes, it does not bridge (the choice issue 3 asked for):
// a pod's only routes are its own subnet on-link and a default route via GatewayIP, so
// it sends every remote-pod packet to the gateway MAC, the remote stage picks the peer by
// nw_dst and sets tun_dst, and the receiving node's l3_forwarding rewrites eth_dst to
// the destination pod's MAC, exactly as for local traffic. No pod ever ARPs across the
// tunnel, and no ARP enters from it. The host reaches remote pods by one static route
// (cluster CIDR on-link via the gateway port, source GatewayIP); its ARP requests for a
// peer's subnet are answered in the arp stage with VirtualRouterMAC (peer.go). Removing a
// peer removes its responder and remote flows, and the cluster-CIDR miss in the remote
// stage drops what was sent to it, so its pods are unreachable at once. Pod traffic
// outside the cluster CIDR and the service CIDR goes to the gateway: the host
// masquerades it (package masq) or kube-proxy translates it. L3 forwarding still rewrites eth_dst so that the output port
// decided by reg1 always receives a frame addressed to it. Off-subnet traffic leaves by
// the gateway because a pod's default route is via GatewayIP (the first address of the
// pod subnet); the host then routes it. The output decision is carried in reg1 through
// the reserved network_policy and remote stages so that policy sees the destination
// port, and a single output stage does the output:reg1 (NXAST_OUTPUT_REG).
package flows

import (
	"fmt"
)

// PipelineVersion is the version of the flows this package builds (cookie bits 63..56,
// 1..255). Bump it whenever any builder's output changes; TestPipelineVersion fails until
// you do (after OpenShift SDN's TestRuleVersion).
const PipelineVersion uint8 = 2

// TableID is an OpenFlow table id (OpenFlow 1.3.5 §7.3.4.1 ofp_flow_mod.table_id, 0..254).
type TableID uint8

// The pipeline's tables, by stage. Ids are spaced by 10 so later stages fit between.
const (
	// TableClassifier (0) sorts packets by ingress port and sets reg0[0..3].
	TableClassifier TableID = 0
	// TableTunnelIngress (10) accepts tunnelled IP only from known peers (PeerFlows).
	TableTunnelIngress TableID = 10
	// TableSpoofGuard (20) lets a pod send only with its own MAC and IP (ARP too).
	TableSpoofGuard TableID = 20
	// TableARP (30) delivers ARP to the port owning the target address.
	TableARP TableID = 30
	// TableService (40) sends pod traffic for the service CIDR to the gateway.
	TableService TableID = 40
	// TableL3Forwarding (50) resolves local pod and gateway destinations (eth_dst, reg1).
	TableL3Forwarding TableID = 50
	// TableNetworkPolicy (60) is reserved for network policy: default allow.
	TableNetworkPolicy TableID = 60
	// TableRemote (70) sends remote pod subnets into the tunnel (PeerFlows).
	TableRemote TableID = 70
	// TableEgress (80) sends undecided (off-subnet) pod traffic to the gateway.
	TableEgress TableID = 80
	// TableOutput (90) outputs to the port in reg1.
	TableOutput TableID = 90
)

// TableInfo describes one stage of the pipeline.
type TableInfo struct {
	// ID is the OpenFlow table id (0..254).
	ID uint8
	// Name is the stage name, as put in the bridge's Flow_Table rows and printed by
	// `ovs-ofctl --names`.
	Name string
	// Purpose is a one-line description of the stage.
	Purpose string
}

// pipeline is the pipeline, in order. A stage's index here is its cookie stage field.
var pipeline = []TableInfo{
	{uint8(TableClassifier), "classifier", "sort packets by ingress port: gateway, tunnel, pod (reg0[0..3])"},
	{uint8(TableTunnelIngress), "tunnel_ingress", "accept tunnelled IP only from known peers and their pod subnets"},
	{uint8(TableSpoofGuard), "spoof_guard", "a pod may send only with its own MAC and IP, ARP included"},
	{uint8(TableARP), "arp", "deliver ARP to the port owning the target IP (reg1); answer the host for peer subnets"},
	{uint8(TableService), "service", "pod traffic to the service CIDR to the gateway (kube-proxy)"},
	{uint8(TableL3Forwarding), "l3_forwarding", "local pod and gateway IPs: eth_dst and output port (reg1)"},
	{uint8(TableNetworkPolicy), "network_policy", "reserved: default allow"},
	{uint8(TableRemote), "remote", "peer pod subnets to the tunnel (tun_dst); unknown cluster addresses drop"},
	{uint8(TableEgress), "egress", "undecided pod traffic (off-subnet) to the gateway"},
	{uint8(TableOutput), "output", "output to the port in reg1"},
}

// Tables returns the pipeline's stages in order (table ids ascending). The caller may
// modify the returned slice.
func Tables() []TableInfo {
	return append([]TableInfo(nil), pipeline...)
}

// TableNames returns table id → stage name for every stage, the form the bridge's
// flow_tables column takes (OVSDB Bridge.flow_tables → Flow_Table.name).
func TableNames() map[int]string {
	m := make(map[int]string, len(pipeline))
	for _, t := range pipeline {
		m[int(t.ID)] = t.Name
	}
	return m
}

// Name returns the stage name of table t, or "" for a table outside the pipeline.
func (t TableID) Name() string {
	if i, ok := t.Stage(); ok {
		return pipeline[i].Name
	}
	return ""
}

// Stage returns the index of t in Tables() (the cookie's stage field) and whether t is
// a table of the pipeline.
func (t TableID) Stage() (uint8, bool) {
	for i, s := range pipeline {
		if s.ID == uint8(t) {
			return uint8(i), true
		}
	}
	return 0, false
}

// next returns the stage after t. It panics for the last stage or a table outside the
// pipeline: a builder bug.
func (t TableID) next() TableID {
	i, ok := t.Stage()
	if !ok || int(i)+1 >= len(pipeline) {
		panic(fmt.Sprintf("flows: no stage after table %d", t))
	}
	return TableID(pipeline[i+1].ID)
}

// Flow priorities (OpenFlow 1.3.5 §5.3: the highest-priority matching entry wins).
const (
	// PriorityDrop (0) is every table's explicit default: drop, counted.
	PriorityDrop uint16 = 0
	// PriorityPass (1) is a catch-all that passes packets on (reserved stages, and
	// "anything else" flows).
	PriorityPass uint16 = 1
	// PriorityLow (10) is for broad matches that more specific flows override (a subnet).
	PriorityLow uint16 = 10
	// PriorityMid (50) is for rules between the specific and the broad.
	PriorityMid uint16 = 50
	// PriorityNormal (100) is for exact matches: a port, an address.
	PriorityNormal uint16 = 100
)
