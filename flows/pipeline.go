// Package flows declares ofsdn's OpenFlow 1.3 pipeline on the integration bridge (br-int)
// and builds its flows as values: pure functions from node state (NodeConfig, Pod, Peer) to
// []Flow. It knows nothing of sockets or OVSDB; package controller keeps the desired flows
// per owner and installs them (Flow.FlowMod) through package openflow.
//
// # The pipeline
//
// Every stage is one flow table with a name (the bridge's Flow_Table rows carry the names,
// so `ovs-ofctl -O OpenFlow13 dump-flows --names br-int` and `ofproto/trace` show them).
// The stages are declared once, by feature, in the list `features` below: pod forwarding
// (always on), IPv4's arp stage (off on an IPv6-only node), the overlay, the host's
// service path (kube-proxy), NetworkPolicy and its
// deny log, Services in OVS, and a dual-stack node's IPv6 (dualstack.go), each with its
// stages in order, each stage with its table id, name, purpose,
// miss behaviour and the node's own flows in it. The pipeline is every feature's stages
// in table-id order. A packet enters table 0 and only moves forward, by goto_table
// (OpenFlow 1.3.5 §5.1), to the next stage in use or to a stage named by a builder; no
// builder names a table id. A feature that is off on a node (Feature.On false for its
// NodeConfig) installs no flow in its stages, and the stage before them continues past
// them (inStage.next and builder.goTo skip them). Every table in use ends in an explicit
// priority-0 "actions=drop" flow, so every drop is counted by some flow's n_packets; a
// stage whose miss is MissNext puts a priority-1 catch-all goto_table to the next stage
// in use above it. Both are generated from the declaration (missFlows). Table ids are
// spaced (by 10, the policy stages by 2) so later stages fit between without renumbering.
// docs/pipeline.md shows every stage's flows (a test keeps it equal to the builders'
// output).
//
// Registers (fields.go): reg0[0..3] source class (1 gateway, 2 pod, 3 tunnel), reg1 output
// ofport (0 = undecided), reg2 scratch within one action list (ARP responder). Cookies
// (fields.go): pipeline version, generation, owner kind, owner id; an Owner (kind +
// id) selects one owner's flows (PodCookie, PeerCookie).
//
// Adding a stage: one entry in its feature's Stages (with its node flows, if any) with a
// free table id between its neighbours', builders that reach it by name or as the next
// stage of the stage before it, a new PipelineVersion if a node that uses it gets
// different flows, and the goldens and docs/pipeline.md that the tests then ask for. No
// other stage's flows change: cookies do not name stages. Adding a feature: one entry in
// `features` with its On predicate (a NodeConfig field) and its stages.
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
// masquerades it (package masq) or kube-proxy translates it. L3 forwarding still rewrites
// eth_dst so that the output port decided by reg1 always receives a frame addressed to
// it. Off-subnet traffic leaves by the gateway because a pod's default route is via
// GatewayIP (the first address of the pod subnet); the host then routes it. The output
// decision is carried in reg1 through the policy and remote stages so that policy sees
// the destination port, and a single output stage does the output:reg1
// (NXAST_OUTPUT_REG). NetworkPolicy (issue 13) replaced the reserved network_policy
// stage with five (conntrack .. conntrack_commit); policy.go has their design history.
//
// Stages were first TableX constants, a separate list of names, a package-doc table and
// two functions for the miss flows, and builders jumped to literal table ids: a new stage
// touched five places. Issue 11 made one list the declaration; the policy stages then
// held pass-through flows on nodes without NetworkPolicy. Issue 21 split the list by
// feature (after Antrea's pkg/agent/openflow, where each feature declares its tables and
// only the enabled features' tables are realized), so an off feature's stages are empty
// and skipped (PipelineVersion 5). Unlike Antrea, which allocates table ids at start-up
// from the enabled features (so ids shift with the config and with every added table),
// ofsdn keeps each stage's id in its declaration: a table id means the same stage on
// every node and across builds, so an upgrade's first bundle replaces each table's flows
// in place and tests and tools can name tables statically (StageTable).
package flows

import (
	"fmt"
	"sort"
)

// PipelineVersion is the version of the flows this package builds (cookie bits 63..56,
// 1..255). Bump it whenever any builder's output changes; TestPipelineVersion fails until
// you do (after OpenShift SDN's TestRuleVersion).
const PipelineVersion uint8 = 5

// TableID is an OpenFlow table id (OpenFlow 1.3.5 §7.3.4.1 ofp_flow_mod.table_id, 0..254).
type TableID uint8

// Miss is what a stage does with a packet that no other flow of its table takes.
type Miss uint8

const (
	// MissDrop: the table's priority-0 "actions=drop" flow drops it, counted.
	MissDrop Miss = iota
	// MissNext: a priority-1 catch-all flow sends it to the next stage (goto_table), counted;
	// the priority-0 drop stays below it, as in every table.
	MissNext
)

// String returns "drop" or "next".
func (m Miss) String() string {
	if m == MissNext {
		return "next"
	}
	return "drop"
}

// Stage declares one stage of the pipeline: one flow table.
type Stage struct {
	// ID is the OpenFlow table id (0..254). Ids ascend along the pipeline and never change
	// meaning: a new stage takes a free id between its neighbours (they are spaced for
	// that), so adding one renumbers nothing, and a table on a running switch means the
	// same stage to every build (an upgrade's first bundle replaces flows in place).
	ID uint8
	// Name is the stage name, as put in the bridge's Flow_Table rows and printed by
	// `ovs-ofctl --names`.
	Name string
	// Purpose is a one-line description of the stage.
	Purpose string
	// Miss is what happens to a packet no other flow of the stage takes: MissDrop or
	// MissNext (on to the next stage in use).
	Miss Miss
	// Feature is the name of the feature that declares the stage (set by the pipeline
	// from its Feature; empty in a declaration).
	Feature string

	// node builds the node's own flows in this stage (owner PipelineOwner), listed before
	// the generated miss flows; nil for none.
	node func(b builder) []Flow
}

// Feature is one capability of the pipeline (pod forwarding, the overlay, NetworkPolicy,
// ...) with the stages it declares, in order, and whether a node uses it. A feature that
// is off on a node installs no flow in its stages, not even their miss flows, and the
// stage before them continues past them (inStage.next, builder.goTo).
type Feature struct {
	// Name is the feature's name (lower case, e.g. "network_policy"), unique.
	Name string
	// Purpose is a one-line description.
	Purpose string
	// On reports whether a node with this config uses the feature; nil = always on.
	On func(NodeConfig) bool
	// Stages are the feature's stages, table ids ascending; none for a feature that only
	// changes other stages' flows (the deny log).
	Stages []Stage
}

// Feature names.
const (
	// FeaturePodForwarding: classify ports, guard sources, deliver ARP and IP to local
	// ports, output. Always on.
	FeaturePodForwarding = "pod_forwarding"
	// FeatureOverlay: peers through the tunnel port; on with NodeConfig.TunnelOFPort or
	// NodeConfig.ClusterCIDR (unknown cluster addresses drop).
	FeatureOverlay = "overlay"
	// FeatureServiceHost: pod traffic to the service CIDR goes to the host (kube-proxy);
	// on with NodeConfig.ServiceCIDR.
	FeatureServiceHost = "service_host"
	// FeatureNetworkPolicy: conntrack and the rule stages; on with NodeConfig.Policy.
	FeatureNetworkPolicy = "network_policy"
	// FeatureServices: Services load-balanced in OVS (service.go): conntrack with NAT and
	// per Service port a select group; on with NodeConfig.Services.
	FeatureServices = "services"
	// FeatureIPv4: IPv4's own stage, arp; on with NodeConfig.PodSubnet (every node but an
	// IPv6-only one, whose arp table would hold nothing but its miss).
	FeatureIPv4 = "ipv4"
	// FeatureIPv6: a dual-stack node's IPv6 (dualstack.go): the nd stage, and IPv6 flows
	// in the pod_forwarding stages; on with NodeConfig.PodSubnetIPv6.
	FeatureIPv6 = "ipv6"
	// FeatureDenyLog: default-deny flows send to the controller through DenyLogMeter; on
	// with NodeConfig.Policy and NodeConfig.DenyLog. It has no stage of its own.
	FeatureDenyLog = "deny_log"
)

// features is the pipeline by feature: the one place a stage is declared. The pipeline
// is every feature's stages in table-id order. Adding a stage is one entry in its
// feature with a free id between its neighbours'.
var features = []Feature{
	{Name: FeaturePodForwarding, Purpose: "local pods and the gateway: classify, guard, forward, output", Stages: []Stage{
		// 0: sorts by in_port: the gateway port → reg0[0..3]=1, a pod's port → 2 (both then
		// spoof_guard), the tunnel port → 3 (then tunnel_ingress). Unknown ports drop.
		{ID: 0, Name: "classifier", Miss: MissDrop, node: classifierNode,
			Purpose: "sort packets by ingress port: gateway, tunnel, pod (reg0[0..3])"},
		// 20: a pod may send only with its own MAC and IP (reads reg0): IP needs
		// in_port+dl_src+nw_src, ARP needs in_port+dl_src+arp_spa+arp_sha. Gateway traffic
		// (reg0=1, the host) is trusted. IP → service, ARP → arp, anything else drops.
		{ID: 20, Name: "spoof_guard", Miss: MissDrop, node: spoofGuardNode,
			Purpose: "a pod may send only with its own MAC and IP, ARP included"},
		// 50: nw_dst = a local pod or the gateway IP → eth_dst = its MAC, reg1 = its ofport.
		// Another address in the pod subnet (no such pod) drops; other IP goes on with reg1=0.
		{ID: 50, Name: "l3_forwarding", Miss: MissDrop, node: l3ForwardingNode,
			Purpose: "local pod and gateway IPs: eth_dst and output port (reg1)"},
		// 80: reg1=0 from a pod (off-subnet) → eth_dst = GatewayMAC, reg1 = the gateway
		// ofport, where the host routes and masquerades. reg1=0 from anywhere else drops;
		// decided packets (reg1 != 0) are the miss and go on.
		{ID: 80, Name: "egress", Miss: MissNext, node: egressNode,
			Purpose: "undecided pod traffic (off-subnet) to the gateway"},
		// 90: output:reg1.
		{ID: 90, Name: "output", Miss: MissDrop, node: outputNode,
			Purpose: "output to the port in reg1"},
	}},
	{Name: FeatureOverlay, Purpose: "peer nodes through the flow-based tunnel port", On: overlayOn, Stages: []Stage{
		// 10: per peer: tun_src = the peer's node IP and nw_src in its pod subnet → service;
		// anything else from the tunnel drops.
		{ID: 10, Name: "tunnel_ingress", Miss: MissDrop, node: tunnelIngressNode,
			Purpose: "accept tunnelled IP only from known peers and their pod subnets"},
		// 70: per peer: nw_dst in the peer's pod subnet → tun_dst = its node IP, reg1 = the
		// tunnel ofport. Undecided (reg1=0) IP for any other cluster-CIDR address drops; the
		// rest goes on.
		{ID: 70, Name: "remote", Miss: MissNext, node: remoteNode,
			Purpose: "peer pod subnets to the tunnel (tun_dst); unknown cluster addresses drop"},
	}},
	{Name: FeatureIPv4, Purpose: "IPv4: ARP delivered to the port owning its target (the IPv4 flows of the other stages are pod forwarding's and the overlay's)", On: func(c NodeConfig) bool { return c.IPv4() }, Stages: []Stage{
		// 30: ARP requests and replies go to the port owning arp_tpa (a local pod or the
		// gateway): reg1 = that ofport → output; the real interfaces answer. Per peer: the
		// host's requests (reg0=1) for the peer's pod subnet are answered in OVS with
		// VirtualRouterMAC (IN_PORT). ARP for other addresses drops. Not in use on an
		// IPv6-only node, which has no ARP to deliver.
		{ID: 30, Name: "arp", Miss: MissDrop, node: arpNode,
			Purpose: "deliver ARP to the port owning the target IP (reg1); answer the host for peer subnets"},
	}},
	{Name: FeatureIPv6, Purpose: "dual-stack: neighbor discovery delivered to the port owning its target (spoof guard and forwarding flows in the pod_forwarding stages)", On: ipv6On, Stages: []Stage{
		// 32: NS for the gateway's IPv6 address or a pod's address → that port; ND
		// addressed to a local MAC (advertisements, unicast probes) → that port. Only ND
		// the spoof guard let through gets here; the rest drops.
		{ID: 25, Name: "nd", Miss: MissDrop, node: ndNode,
			Purpose: "deliver neighbor discovery (RFC 4861) to the port owning the target or the destination MAC (reg1)"},
	}},
	{Name: FeatureServices, Purpose: "Services in OVS: DNAT to an endpoint by select group (UDP: multipath hash), un-NAT replies", On: func(c NodeConfig) bool { return c.Services }, Stages: []Stage{
		// 28 (before the other Services stages: only resubmit reaches it): the learned
		// session-affinity flows (one per client address and Service port, Learn from the
		// buckets and the endpoint flows): reached only by resubmit from a Service port's
		// service_lb flow; a hit loads the endpoint into reg3/reg4. (Table 32 until the
		// hairpin stage took that place: a resubmit target can be anywhere.)
		{ID: 28, Name: StageServiceAffinity, Miss: MissDrop,
			Purpose: "learned session affinity: client IP and Service port -> endpoint (reg3, reg4)"},
		// 32: a pod's reply to a hairpin connection (nw_dst = HairpinSNATIP) through
		// ct(nat) in HairpinZone (un-SNAT) before service_conntrack un-DNATs it; the rest
		// goes on.
		{ID: 32, Name: StageServiceHairpin, Miss: MissNext, node: serviceHairpinNode,
			Purpose: "un-SNAT hairpin replies (zone HairpinZone) before the un-DNAT"},
		// 34: all IP → ct(nat, zone=ConntrackZone) → service_lb: replies are un-NATed and
		// later packets of a translated connection get their endpoint again.
		{ID: 34, Name: StageServiceConntrack, Miss: MissDrop, node: serviceConntrackNode,
			Purpose: "IP through conntrack with nat (zone ConntrackZone): un-NAT replies, keep endpoints"},
		// 36: per Service port: a pod's new connection to ClusterIP:port → its select group
		// (a bucket per endpoint: ct(commit, nat(dst=EP:port)) → l3_forwarding), a UDP
		// port's → multipath into a hash slot (reg6) → service_endpoint; no endpoints → the
		// controller (reject), metered and counted. The rest goes on.
		{ID: 36, Name: StageServiceLB, Miss: MissNext,
			Purpose: "new connections to a ClusterIP:port to its select group (DNAT), UDP by multipath to a hash slot; no endpoints to the controller"},
		// 38: per affinity Service port: an affinity hit whose endpoint is still selected →
		// relearn and DNAT to it; otherwise the port's select group (a UDP port: its
		// multipath choice, resubmitted here). Per UDP Service port: its slot flows (reg5 =
		// the port's id, reg6 = the hash slot) → DNAT (with affinity, learn first). The
		// rest goes on.
		{ID: 38, Name: StageServiceEndpoint, Miss: MissNext,
			Purpose: "DNAT to the remembered endpoint if still selected (session affinity), else the select group; UDP ports' hash slots (reg5, reg6) to their endpoints"},
	}},
	{Name: FeatureServiceHost, Purpose: "service CIDR to the host's kube-proxy", On: func(c NodeConfig) bool { return c.ServiceCIDR != nil }, Stages: []Stage{
		// 40: a pod's IP to the service CIDR → gateway (eth_dst, reg1) → output, where
		// kube-proxy on the host handles it; the rest goes on.
		{ID: 40, Name: "service", Miss: MissNext, node: serviceNode,
			Purpose: "pod traffic to the service CIDR to the gateway (kube-proxy)"},
	}},
	{Name: FeatureNetworkPolicy, Purpose: "NetworkPolicy: conntrack, egress and ingress rules, commit", On: func(c NodeConfig) bool { return c.Policy }, Stages: []Stage{
		// 60..68: NetworkPolicy (policy.go). conntrack: traffic between the node and its pods
		// (from the gateway with the gateway's or the node's address as source, or to those
		// addresses) skips policy → remote; other IP → ct(table=conntrack_state,
		// zone=ConntrackZone).
		{ID: 60, Name: "conntrack", Miss: MissDrop, node: conntrackNode,
			Purpose: "IP through conntrack (zone ConntrackZone); node <-> pod traffic skips policy"},
		// 62: +est/+rel → remote; +inv drops; new → egress_rules. SCTP in the original
		// direction is judged again (the userspace datapath's conntrack ignores SCTP ports).
		{ID: 62, Name: "conntrack_state", Miss: MissNext, node: conntrackStateNode,
			Purpose: "established and related skip the rules; invalid drops"},
		// 64: the source pod's egress rules as conjunctions (local pods by nw_src, peers by
		// nw_dst, ports by tp_dst); allowed → ingress_rules; an egress-isolated pod's other
		// new connections drop (its own counted flow); the rest → ingress_rules.
		{ID: 64, Name: "egress_rules", Miss: MissNext, node: egressRulesNode,
			Purpose: "new connections: source pod's egress rules (conjunctions); egress-isolated pods' default deny"},
		// 66: the same for the destination pod (local pods by reg1, peers by nw_src);
		// allowed or not isolated → conntrack_commit.
		{ID: 66, Name: "ingress_rules", Miss: MissNext,
			Purpose: "new connections: destination pod's ingress rules (conjunctions); ingress-isolated pods' default deny"},
		// 68: +new → ct(commit) → remote; the rest → remote.
		{ID: 68, Name: "conntrack_commit", Miss: MissNext, node: conntrackCommitNode,
			Purpose: "commit new connections that got through"},
	}},
	{Name: FeatureDenyLog, Purpose: "denied new connections to the controller (DenyLogMeter)", On: func(c NodeConfig) bool { return c.Policy && c.DenyLog }},
}

// overlayOn: a node with a tunnel port or a cluster CIDR (whose unknown addresses drop in
// remote) uses the overlay's stages.
func overlayOn(c NodeConfig) bool { return c.TunnelOFPort != 0 || c.ClusterCIDR != nil }

// pipeline is a checked list of stages, what builders resolve stage names against.
type pipeline struct {
	stages   []Stage   // every feature's stages, table ids ascending
	features []Feature // the features, as declared
	feature  []int     // stage index → index in features
	byName   map[string]int
}

// std is the pipeline this package builds (features).
var std = mustPipeline(features)

// newPipeline checks a list of features and merges their stages into a pipeline: at least
// one stage (at most 255, one per table id 0..254), unique non-empty feature and stage
// names, unique table ids at most 254 ascending within each feature, known miss
// behaviours, and a last stage that does not pass on and belongs to an always-on feature
// (so every stage in use has a stage after it to pass to).
func newPipeline(fs []Feature) (*pipeline, error) {
	p := &pipeline{features: append([]Feature(nil), fs...), byName: map[string]int{}}
	type entry struct {
		s Stage
		f int
	}
	var all []entry
	featNames := map[string]bool{}
	ids := map[uint8]string{}
	for fi, f := range fs {
		if f.Name == "" {
			return nil, fmt.Errorf("flows: feature %d has no name", fi)
		}
		if featNames[f.Name] {
			return nil, fmt.Errorf("flows: two features named %q", f.Name)
		}
		featNames[f.Name] = true
		for i, s := range f.Stages {
			if s.Name == "" {
				return nil, fmt.Errorf("flows: stage %d (table %d) of feature %s has no name", i, s.ID, f.Name)
			}
			if i > 0 && s.ID <= f.Stages[i-1].ID {
				return nil, fmt.Errorf("flows: stage %s (table %d) of feature %s does not come after %s (table %d): table ids must ascend", s.Name, s.ID, f.Name, f.Stages[i-1].Name, f.Stages[i-1].ID)
			}
			if s.ID > 254 {
				return nil, fmt.Errorf("flows: stage %s has table id %d, above 254", s.Name, s.ID)
			}
			if other, dup := ids[s.ID]; dup {
				return nil, fmt.Errorf("flows: stages %s and %s both have table id %d: give %s a free id between its neighbours", other, s.Name, s.ID, s.Name)
			}
			ids[s.ID] = s.Name
			if s.Miss != MissDrop && s.Miss != MissNext {
				return nil, fmt.Errorf("flows: stage %s has unknown miss behaviour %d", s.Name, s.Miss)
			}
			s.Feature = f.Name
			all = append(all, entry{s, fi})
		}
	}
	if len(all) == 0 || len(all) > 255 {
		return nil, fmt.Errorf("flows: %d stages: a pipeline has 1..255 (one table each, ids 0..254)", len(all))
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].s.ID < all[j].s.ID })
	for i, e := range all {
		if _, dup := p.byName[e.s.Name]; dup {
			return nil, fmt.Errorf("flows: two stages named %q", e.s.Name)
		}
		p.byName[e.s.Name] = i
		p.stages = append(p.stages, e.s)
		p.feature = append(p.feature, e.f)
	}
	last := all[len(all)-1]
	if last.s.Miss == MissNext {
		return nil, fmt.Errorf("flows: the last stage %s cannot pass packets on", last.s.Name)
	}
	if fs[last.f].On != nil {
		return nil, fmt.Errorf("flows: the last stage %s belongs to feature %s, which can be off: the last stage must always be in use", last.s.Name, fs[last.f].Name)
	}
	return p, nil
}

// mustPipeline is newPipeline for the package's own list; an error is a bug in it.
func mustPipeline(fs []Feature) *pipeline {
	p, err := newPipeline(fs)
	if err != nil {
		panic(err)
	}
	return p
}

// index returns the index of the stage named name; it panics for a name not in the
// pipeline, a builder bug the golden tests catch.
func (p *pipeline) index(name string) int {
	i, ok := p.byName[name]
	if !ok {
		panic(fmt.Sprintf("flows: no stage named %q in the pipeline", name))
	}
	return i
}

// on reports whether stage i is in use on a node with config cfg (its feature is on).
func (p *pipeline) on(i int, cfg NodeConfig) bool {
	f := p.features[p.feature[i]]
	return f.On == nil || f.On(cfg)
}

// stageOf returns the index of table t in p and whether t is one of p's tables.
func (p *pipeline) stageOf(t TableID) (int, bool) {
	for i, s := range p.stages {
		if s.ID == uint8(t) {
			return i, true
		}
	}
	return 0, false
}

// Tables returns every stage of the pipeline in order (table ids ascending), in use on
// a node or not, each with the feature that declares it: the bridge names them all. The
// caller may modify the returned slice.
func Tables() []Stage {
	return append([]Stage(nil), std.stages...)
}

// TablesOn returns the stages a node with config cfg uses (those of its features that
// are on), in order: the only tables its flows are in.
func TablesOn(cfg NodeConfig) []Stage {
	var out []Stage
	for i, s := range std.stages {
		if std.on(i, cfg) {
			out = append(out, s)
		}
	}
	return out
}

// Features returns the pipeline's features as declared, each with its stages (Feature
// set). The caller may modify the returned slice, not the stages' slices.
func Features() []Feature {
	out := append([]Feature(nil), std.features...)
	for i := range out {
		ss := append([]Stage(nil), out[i].Stages...)
		for j := range ss {
			ss[j].Feature = out[i].Name
		}
		out[i].Stages = ss
	}
	return out
}

// FeatureOn reports whether a node with config cfg uses the feature called name (false
// for an unknown name).
func FeatureOn(name string, cfg NodeConfig) bool {
	for _, f := range std.features {
		if f.Name == name {
			return f.On == nil || f.On(cfg)
		}
	}
	return false
}

// TableNames returns table id → stage name for every stage, the form the bridge's
// flow_tables column takes (OVSDB Bridge.flow_tables → Flow_Table.name).
func TableNames() map[int]string {
	m := make(map[int]string, len(std.stages))
	for _, t := range std.stages {
		m[int(t.ID)] = t.Name
	}
	return m
}

// StageTable returns the table id of the stage named name and whether the pipeline has
// such a stage, e.g. StageTable("spoof_guard") = 20, true.
func StageTable(name string) (TableID, bool) {
	i, ok := std.byName[name]
	if !ok {
		return 0, false
	}
	return TableID(std.stages[i].ID), true
}

// Name returns the stage name of table t, or "" for a table outside the pipeline.
func (t TableID) Name() string {
	if i, ok := std.stageOf(t); ok {
		return std.stages[i].Name
	}
	return ""
}

// Stage returns the index of t in Tables() and whether t is a table of the pipeline.
func (t TableID) Stage() (uint8, bool) {
	i, ok := std.stageOf(t)
	return uint8(i), ok
}

// builder builds the flows of one pipeline for one node. Builders get a builder and
// place their flows with in (a stage by name) and move on with inStage.next or goTo, so
// they never name a table id; both skip the stages of features that are off on the node.
type builder struct {
	p   *pipeline
	cfg NodeConfig
}

// in returns the stage called name in b's pipeline, where a builder places a flow. It
// panics for a stage whose feature is off on b's node: a builder bug (such a stage holds
// no flow) the stage tests catch.
func (b builder) in(name string) inStage {
	i := b.p.index(name)
	if !b.p.on(i, b.cfg) {
		panic(fmt.Sprintf("flows: a flow in stage %s, whose feature %s is off on this node", name, b.p.stages[i].Feature))
	}
	return inStage{b: b, i: i}
}

// uses reports whether b's node uses the feature called name (false for an unknown name).
func (b builder) uses(name string) bool {
	for _, f := range b.p.features {
		if f.Name == name {
			return f.On == nil || f.On(b.cfg)
		}
	}
	return false
}

// from returns the first stage in use at index i or after it; it panics past the end (the
// last stage is always in use, newPipeline checks).
func (b builder) from(i int) int {
	for ; i < len(b.p.stages); i++ {
		if b.p.on(i, b.cfg) {
			return i
		}
	}
	panic("flows: no stage in use at the end of the pipeline")
}

// goTo continues the pipeline in the stage named name (goto_table, OpenFlow 1.3.5 §5.1),
// or, when its feature is off on b's node, in the first stage in use after it.
func (b builder) goTo(name string) GotoTable {
	return GotoTable{Table: TableID(b.p.stages[b.from(b.p.index(name))].ID)}
}

// inStage is one stage of a builder's pipeline.
type inStage struct {
	b builder
	i int
}

// flow is the one flow constructor: a flow of owner o in this stage with the given
// priority, match and actions; its cookie carries the node's generation and o
// (NewCookie).
func (s inStage) flow(o Owner, priority uint16, m Match, actions ...Action) Flow {
	return Flow{
		Table:    TableID(s.b.p.stages[s.i].ID),
		Priority: priority,
		Cookie:   NewCookie(s.b.cfg.Generation, o.Kind, o.ID),
		Match:    m,
		Actions:  actions,
	}
}

// next continues the pipeline in the first stage in use after this one. It panics for
// the last stage: a builder bug.
func (s inStage) next() GotoTable {
	if s.i+1 >= len(s.b.p.stages) {
		panic(fmt.Sprintf("flows: no stage after %s", s.b.p.stages[s.i].Name))
	}
	return GotoTable{Table: TableID(s.b.p.stages[s.b.from(s.i+1)].ID)}
}

// missFlows are the flows every stage in use ends in, generated from its declaration:
// with MissNext a priority-1 catch-all to the next stage in use, then (every stage) the
// priority-0 drop.
//
//	table=service, priority=1 actions=goto_table:"l3_forwarding"
//	table=T, priority=0 actions=drop
func (s inStage) missFlows() []Flow {
	var fs []Flow
	if s.b.p.stages[s.i].Miss == MissNext {
		fs = append(fs, s.flow(PipelineOwner, PriorityPass, Match{}, s.next()))
	}
	return append(fs, s.flow(PipelineOwner, PriorityDrop, Match{}, Drop{}))
}

// pipelineFlows is PipelineFlows on b's pipeline: per stage in use, its node flows, then
// its miss flows. The stages of features that are off get none.
func (b builder) pipelineFlows() []Flow {
	var fs []Flow
	for i, st := range b.p.stages {
		if !b.p.on(i, b.cfg) {
			continue
		}
		if st.node != nil {
			fs = append(fs, st.node(b)...)
		}
		fs = append(fs, inStage{b: b, i: i}.missFlows()...)
	}
	return fs
}

// Flow priorities (OpenFlow 1.3.5 §5.3: the highest-priority matching entry wins).
const (
	// PriorityDrop (0) is every table's explicit default: drop, counted.
	PriorityDrop uint16 = 0
	// PriorityPass (1) is a catch-all that passes packets on (a MissNext stage's miss,
	// and "anything else" flows).
	PriorityPass uint16 = 1
	// PriorityLow (10) is for broad matches that more specific flows override (a subnet).
	PriorityLow uint16 = 10
	// PriorityMid (50) is for rules between the specific and the broad.
	PriorityMid uint16 = 50
	// PriorityNormal (100) is for exact matches: a port, an address.
	PriorityNormal uint16 = 100
)
