package flows

// NetworkPolicy in the pipeline: conntrack, the egress and ingress rule stages, commit.
//
// Design history. A NetworkPolicy rule allows (local pod × peer × port) combinations.
// Expanding them gives N·M·K flows; OVS's conjunctive match (ovs-fields(7) "Conjunctive
// Match Fields") gives N+M+K+1: one flow per value of each dimension with a
// conjunction(id, k/n) action, and one flow matching conj_id=id that allows. A flow whose
// match is a clause of several conjunctions carries all their conjunction actions, so the
// flows of different rules share matches; PolicyFlowSet keeps, per match, which
// conjunctions use it and rebuilds only the flows whose set changed (Antrea's
// conjMatchFlowContext does the same).
//
// Stateful: only new connections are judged. Conntrack runs once per packet in a zone of
// ofsdn's own (ConntrackZone); established and related packets (replies included) skip
// the rule stages, so a reply passes whatever the other side's policy, and an ICMP error
// of an allowed connection passes too. An allowed new connection is committed after both
// the egress (source pod, on its node) and the ingress (destination pod, on its node)
// stages let it through; across nodes each node judges the side it owns and commits in
// its own conntrack.
//
// The node and its pods talk freely: the Kubernetes documentation makes traffic from a
// pod's node always allowed (kubelet probes), and to it. Traffic from the gateway whose
// source is the gateway's or the node's address, and traffic to those addresses, skips
// conntrack and the rules. Traffic the host only routes (external clients) comes from
// the gateway with other sources and is judged like any other. Service traffic is not:
// the host masquerades pod traffic kube-proxy DNATed to the gateway address (package
// masq, the service return path), so it enters from the gateway as node traffic and skips
// the rules in both directions (a known limit, README "NetworkPolicy").
//
// SCTP: the userspace datapath's conntrack (OVS 3.1) tracks SCTP without its ports (seen
// here: dpctl/dump-conntrack shows sport=0,dport=0, and a new association to another port
// between the same two addresses is +est). So SCTP packets in a connection's original
// direction are judged by the rules every time (conntrack_state sends -new-rpl-inv+trk
// SCTP back to egress_rules); only replies (+rpl) skip. Ports are then enforced; what
// remains is that the peer of an allowed association can open associations back while the
// address pair's conntrack entry lives.
//
// Deny: an isolated pod's default-deny flows are the pod's own (owner OwnerPod, built by
// PodPolicyFlows), one per isolated direction, so their packet counters are that pod's
// denied new connections, and they go with the pod's other flows.

import (
	"encoding/binary"
	"net"
	"slices"
	"sort"
)

// ConntrackZone is the conntrack zone of every ct action ofsdn issues (0..65535): its
// connections never mix with the host's (zone 0) or another controller's.
const ConntrackZone uint16 = 0xff00

// DenyLogMeter is the OpenFlow meter id the default-deny flows use when
// NodeConfig.DenyLog is on: it limits the packet-ins of denied connections (the
// controller creates it, OpenFlow 1.3.5 §7.3.4.4).
const DenyLogMeter uint32 = 1

// DenyLogMaxLen is how many bytes of a denied packet go to the controller: enough for
// the Ethernet, IPv4 or IPv6 (40 bytes, and a few extension headers) and
// TCP/UDP/SCTP/ICMP headers.
const DenyLogMaxLen uint16 = 128

// Priorities within the policy stages.
const (
	// PriorityNodeTraffic (200) in conntrack: node <-> pod traffic skips policy.
	PriorityNodeTraffic uint16 = 200
	// PrioritySCTPRecheck (210) in conntrack_state: SCTP in the original direction is
	// judged again (conntrack here ignores SCTP ports).
	PrioritySCTPRecheck uint16 = 210
	// PriorityTracked (200) in conntrack_state: established or related skip the rules.
	PriorityTracked uint16 = 200
	// PriorityInvalid (190) in conntrack_state: invalid packets drop.
	PriorityInvalid uint16 = 190
	// PriorityServiceCIDR (220) in egress_rules: service traffic goes on to the host
	// (kube-proxy); see egressRulesNode for why policy does not judge it afterwards.
	PriorityServiceCIDR uint16 = 220
	// PriorityPolicyAllowAll (210): a rule that allows everything to or from a pod (a
	// single clause) is a plain flow above the conjunctions.
	PriorityPolicyAllowAll uint16 = 210
	// PriorityPolicyRule (200): conjunction clause flows and conj_id flows.
	PriorityPolicyRule uint16 = 200
	// PriorityPolicyDeny (100): an isolated pod's default deny.
	PriorityPolicyDeny uint16 = 100
)

// The policy stages' names (pipeline.go declares them).
const (
	// StageConntrack sends IP through conntrack; node <-> pod traffic skips policy.
	StageConntrack = "conntrack"
	// StageConntrackState lets established and related packets skip the rules.
	StageConntrackState = "conntrack_state"
	// StageEgressRules holds the egress rules and egress-isolated pods' default deny.
	StageEgressRules = "egress_rules"
	// StageIngressRules holds the ingress rules and ingress-isolated pods' default deny.
	StageIngressRules = "ingress_rules"
	// StageConntrackCommit commits the new connections that got through.
	StageConntrackCommit = "conntrack_commit"
)

// PolicyOwner is the owner of the policy-rule flows of conjunction id (0 for flows shared
// by several conjunctions' clauses).
func PolicyOwner(id uint32) Owner { return Owner{Kind: OwnerPolicy, ID: id} }

// conntrackNode: the node's own addresses skip conntrack and the rules, and the rest goes
// through conntrack. (Without policy the stage is not in use: l3_forwarding continues past
// the policy stages.)
//
//	table=conntrack, priority=200,ip,reg0=0x1/0xf,nw_src=GWIP actions=goto_table:remote
//	table=conntrack, priority=200,ip,nw_dst=GWIP actions=goto_table:remote
//	table=conntrack, priority=1,ip actions=ct(table="conntrack_state",zone=65280)
func conntrackNode(b builder) []Flow {
	s := b.in(StageConntrack)
	var fs []Flow
	if !b.cfg.IPv4() {
		return conntrackNodeIPv6(b) // an IPv6-only node: its IPv6 flows alone
	}
	for _, a := range nodeAddresses(b.cfg) {
		fs = append(fs,
			s.flow(PipelineOwner, PriorityNodeTraffic, Match{EthType: EthTypeIPv4, Regs: []RegMark{FromGateway}, IPSrc: hostPrefix(a)}, b.goTo("remote")),
			s.flow(PipelineOwner, PriorityNodeTraffic, Match{EthType: EthTypeIPv4, IPDst: hostPrefix(a)}, b.goTo("remote")),
		)
	}
	fs = append(fs, conntrackNodeIPv6(b)...)
	if b.uses(FeatureServices) {
		// service_conntrack tracked every IP packet in ConntrackZone already, with nat: a
		// second lookup of the translated packet would not find its connection.
		return append(fs, s.flow(PipelineOwner, PriorityPass, Match{EthType: EthTypeIPv4}, b.goTo(StageConntrackState)))
	}
	return append(fs, s.flow(PipelineOwner, PriorityPass, Match{EthType: EthTypeIPv4}, CT{Zone: ConntrackZone, Table: b.goTo(StageConntrackState).Table}))
}

// conntrackNodeIPv6: on a dual-stack or IPv6-only node, IPv6 from the host's gateway
// address and to it skips conntrack and the rules as IPv4 does, and the rest of IPv6 goes
// through conntrack in the same zone, or, with Services in OVS, on to conntrack_state
// (service_conntrack tracked IPv6 with nat as it tracks IPv4). Nothing on an IPv4-only
// node.
//
//	table=conntrack, priority=200,ipv6,reg0=0x1/0xf,ipv6_src=GW6 actions=goto_table:remote
//	table=conntrack, priority=200,ipv6,ipv6_dst=GW6 actions=goto_table:remote
//	table=conntrack, priority=1,ipv6 actions=ct(table="conntrack_state",zone=65280)
func conntrackNodeIPv6(b builder) []Flow {
	if !ipv6On(b.cfg) {
		return nil
	}
	s := b.in(StageConntrack)
	gw := hostPrefix6(b.cfg.GatewayIPv6)
	fs := []Flow{
		s.flow(PipelineOwner, PriorityNodeTraffic, Match{EthType: EthTypeIPv6, Regs: []RegMark{FromGateway}, IPv6Src: gw}, b.goTo("remote")),
		s.flow(PipelineOwner, PriorityNodeTraffic, Match{EthType: EthTypeIPv6, IPv6Dst: gw}, b.goTo("remote")),
	}
	if b.uses(FeatureServices) {
		return append(fs, s.flow(PipelineOwner, PriorityPass, Match{EthType: EthTypeIPv6}, b.goTo(StageConntrackState)))
	}
	return append(fs, s.flow(PipelineOwner, PriorityPass, Match{EthType: EthTypeIPv6}, CT{Zone: ConntrackZone, Table: b.goTo(StageConntrackState).Table}))
}

// ipFamilies are the EtherTypes the policy and Services stages handle on node cfg: IPv4,
// and IPv6 on a dual-stack node; IPv6 alone on an IPv6-only node.
func ipFamilies(cfg NodeConfig) []uint16 {
	switch {
	case !cfg.IPv4():
		return []uint16{EthTypeIPv6}
	case ipv6On(cfg):
		return []uint16{EthTypeIPv4, EthTypeIPv6}
	}
	return []uint16{EthTypeIPv4}
}

// conntrackStateNode: established and related go on to remote, SCTP in the original
// direction is judged again, invalid drops; new connections are the stage's miss (on to
// egress_rules).
//
//	table="conntrack_state", priority=210,ct_state=-new-rpl-inv+trk,sctp actions=goto_table:"egress_rules"
//	table="conntrack_state", priority=200,ct_state=-new-inv+trk,ip actions=goto_table:remote
//	table="conntrack_state", priority=190,ct_state=+inv+trk,ip actions=drop
//
// On a dual-stack node the same three flows for IPv6 (sctp6, ipv6); on an IPv6-only node
// those alone.
func conntrackStateNode(b builder) []Flow {
	s := b.in(StageConntrackState)
	var fs []Flow
	for _, et := range ipFamilies(b.cfg) {
		fs = append(fs,
			s.flow(PipelineOwner, PrioritySCTPRecheck,
				Match{EthType: et, IPProto: IPProtoSCTP, CTState: &CTState{Set: CTTrk, Clear: CTNew | CTRpl | CTInv}}, s.next()),
			s.flow(PipelineOwner, PriorityTracked,
				Match{EthType: et, CTState: &CTState{Set: CTTrk, Clear: CTNew | CTInv}}, b.goTo("remote")),
			s.flow(PipelineOwner, PriorityInvalid,
				Match{EthType: et, CTState: &CTState{Set: CTInv | CTTrk}}, Drop{}),
		)
	}
	return fs
}

// egressRulesNode: traffic to the service CIDR goes on to the host (kube-proxy). After
// the host's DNAT it comes back from the gateway masqueraded to the gateway address, as
// node traffic, which policy does not judge (a known limit, README "NetworkPolicy").
//
//	table="egress_rules", priority=220,ip,nw_dst=SVC actions=goto_table:"ingress_rules"
func egressRulesNode(b builder) []Flow {
	if b.cfg.ServiceCIDR == nil {
		return nil
	}
	s := b.in(StageEgressRules)
	return []Flow{s.flow(PipelineOwner, PriorityServiceCIDR, Match{EthType: EthTypeIPv4, IPDst: b.cfg.ServiceCIDR}, s.next())}
}

// conntrackCommitNode: new connections that got through are committed; the rest (SCTP
// judged again) is the stage's miss, on to remote.
//
//	table="conntrack_commit", priority=100,ct_state=+new+trk,ip actions=ct(commit,zone=65280),goto_table:remote
func conntrackCommitNode(b builder) []Flow {
	s := b.in(StageConntrackCommit)
	st := &CTState{Set: CTNew | CTTrk}
	if b.uses(FeatureServices) {
		st.Clear = CTDnat // a Service connection was committed with its DNAT (service.go)
	}
	var fs []Flow
	for _, et := range ipFamilies(b.cfg) {
		fs = append(fs, s.flow(PipelineOwner, PriorityNormal,
			Match{EthType: et, CTState: st}, CT{Commit: true, Zone: ConntrackZone}, s.next()))
	}
	return fs
}

// nodeAddresses returns the node's own IPv4 addresses as pods see them: the gateway IP
// and, when set, the node IP.
func nodeAddresses(cfg NodeConfig) []net.IP {
	out := []net.IP{cfg.GatewayIP.To4()}
	if ip := cfg.NodeIP.To4(); ip != nil && !ip.Equal(out[0]) {
		out = append(out, ip)
	}
	return out
}

// PodPolicyFlows returns local pod's default-deny flows for the directions it is
// isolated in (owner OwnerPod, so PodCookie deletes them with the pod): egress in
// egress_rules by nw_src, ingress in ingress_rules by reg1 (its ofport); on a dual-stack
// node the same for IPv6 (by ipv6_src, its IPv6 address's and its link-local one's, when
// the pod has an IPv6 address, and reg1); on an IPv6-only node the IPv6 ones alone. With
// cfg.DenyLog the denied packet also goes to the controller through DenyLogMeter.
// Nothing without cfg.Policy.
//
//	table="egress_rules", priority=100,ip,nw_src=IP actions=drop
//	table="ingress_rules", priority=100,ip,reg1=P actions=drop
//	table="egress_rules", priority=100,ipv6,ipv6_src=IP6 actions=drop (dual-stack)
//	table="egress_rules", priority=100,ipv6,ipv6_src=LL actions=drop (dual-stack)
//	table="ingress_rules", priority=100,ipv6,reg1=P actions=drop (dual-stack)
func PodPolicyFlows(cfg NodeConfig, pod Pod, ingress, egress bool) []Flow {
	if !cfg.Policy {
		return nil
	}
	b := builder{p: std, cfg: cfg}
	var fs []Flow
	deny := func(stage string, m Match) Flow {
		f := b.in(stage).flow(PodOwner(pod), PriorityPolicyDeny, m, Drop{})
		if FeatureOn(FeatureDenyLog, cfg) {
			f.Meter = DenyLogMeter
			f.Actions = []Action{OutputController{MaxLen: DenyLogMaxLen}}
		}
		return f
	}
	v4 := cfg.IPv4()
	if egress {
		if v4 {
			fs = append(fs, deny(StageEgressRules, Match{EthType: EthTypeIPv4, IPSrc: hostPrefix(pod.IPv4())}))
		}
		if ip6 := pod.IPv6(); ip6 != nil && ipv6On(cfg) {
			fs = append(fs, deny(StageEgressRules, Match{EthType: EthTypeIPv6, IPv6Src: hostPrefix6(ip6)}))
			// Its link-local address is no pod IP, so no rule allows it; without this flow
			// IP from it (to a local pod's global address, say) would pass the isolated
			// pod's egress. Neighbor discovery from it never comes here.
			if ll := LinkLocalFromMAC(pod.MAC); ll != nil {
				fs = append(fs, deny(StageEgressRules, Match{EthType: EthTypeIPv6, IPv6Src: hostPrefix6(ll)}))
			}
		}
	}
	if ingress {
		if v4 {
			fs = append(fs, deny(StageIngressRules, Match{EthType: EthTypeIPv4, Regs: []RegMark{{Range: OutPortField, Value: pod.OFPort}}}))
		}
		if ipv6On(cfg) {
			fs = append(fs, deny(StageIngressRules, Match{EthType: EthTypeIPv6, Regs: []RegMark{{Range: OutPortField, Value: pod.OFPort}}}))
		}
	}
	return fs
}

// PolicyRule is one compiled conjunction of a NetworkPolicy rule (policy.Conjunction in
// the flows' terms): traffic is allowed when the local pod, the peer and the port each
// match one of their values.
type PolicyRule struct {
	// ID is the conjunction id (1..0xfffffffe), unique among live rules.
	ID uint32
	// Egress is true for an egress rule (local pods are sources, peers destinations),
	// false for ingress.
	Egress bool
	// Pods are the local pods the rule applies to. None: the rule's peer and port clauses
	// and its conj_id flow only (its pods are scheduled to the node and not attached yet:
	// the conjunction matches nothing until a pod clause flow joins it); a rule with
	// neither a peer nor a port clause then has no flows.
	Pods []Pod
	// AnyPeer: every peer address matches (no peer clause); else Peers (IPv4 prefixes).
	AnyPeer bool
	Peers   []*net.IPNet
	// AnyPort: every protocol and port (no port clause); else Ports.
	AnyPort bool
	Ports   []PolicyPort
}

// PolicyPort is one port clause value: an IP protocol and a masked destination port
// (Mask 0 = every port of Proto).
type PolicyPort struct {
	// Proto is IPProtoTCP, IPProtoUDP or IPProtoSCTP.
	Proto uint8
	// Port is the destination port under Mask.
	Port uint16
	// Mask is 0 (any port), 0xffff (exactly Port) or a prefix mask.
	Mask uint16
}

// policyEntry is one flow of the set: its match (table, priority) and the contributions of
// the rules that share it.
type policyEntry struct {
	flow  Flow                   // without actions
	conj  map[uint32]Conjunction // conjunction id → this flow's clause of it
	allow map[uint32]bool        // rules for which this flow alone allows (single clause)
	id    uint32                 // conj id of a conj_id flow (its owner id)
}

// PolicyFlowSet holds the flows of every live policy rule, merged by match: a flow used
// as a clause by several conjunctions carries all their conjunction actions. Set and
// Remove return the match keys whose flow changed; Flow gives the flow now wanted for a
// key (absent = delete it). It is pure (no I/O) and not safe for concurrent use.
type PolicyFlowSet struct {
	cfg     NodeConfig
	entries map[string]*policyEntry // MatchKey → entry
	rules   map[uint32][]string     // conj id → the keys it contributes to
	last    map[uint32]PolicyRule   // conj id → the rule as last Set (setPodsPeers)
	// full makes every Set recompute the rule's contributions (tests: the reference the
	// incremental path is checked against).
	full bool
}

// NewPolicyFlowSet returns an empty set building flows for cfg (its generation goes in
// the cookies).
func NewPolicyFlowSet(cfg NodeConfig) *PolicyFlowSet {
	return &PolicyFlowSet{cfg: cfg, entries: map[string]*policyEntry{}, rules: map[uint32][]string{}, last: map[uint32]PolicyRule{}}
}

// Set makes the set hold rule r's flows (replacing those of the rule with the same ID)
// and returns the keys of the flows that changed, sorted: a flow whose contribution from
// r is the same as before (the same clause of the same conjunction, or the same allow) is
// not among them, so a rule that gains one pod reports that pod's flow only. A rule with
// no peers or no ports and not Any, or with no pods and neither a peer nor a port
// clause, has no flows; a rule with no pods otherwise has its peer, port and conj_id
// flows (PolicyRule.Pods).
//
// A rule whose direction and ports are those it was last Set with, and that had and has
// flows (a pod attached or detached: the runner re-sets each rule selecting it; a peer
// pod's address came or went: each rule whose peers list it), costs O(M+N) comparisons
// and the flows of the pods and peers that changed only, not a rebuild of its M+N+K
// contributions (setPodsPeers). At a node's density that is the difference between a
// CNI ADD whose rule updates cost O(pods on the node) and one whose cost is flat
// (bench/RESULTS.md "Density").
func (s *PolicyFlowSet) Set(r PolicyRule) []string {
	r = s.nodePeers(r)
	if old, ok := s.last[r.ID]; ok && !s.full && sameShape(old, r) && old.hasFlows() && r.hasFlows() && peersKnown(old) && peersKnown(r) {
		return s.setPodsPeers(old, r)
	}
	// What r's id contributed before, by key.
	type part struct {
		conj   Conjunction
		inConj bool
		allow  bool
		id     uint32
	}
	before := make(map[string]part, len(s.rules[r.ID]))
	for _, k := range s.rules[r.ID] {
		if e := s.entries[k]; e != nil {
			c, in := e.conj[r.ID]
			pt := part{conj: c, inConj: in, allow: e.allow[r.ID]}
			if e.id == r.ID {
				pt.id = e.id
			}
			before[k] = pt
		}
	}
	removed := s.remove(r.ID)
	s.last[r.ID] = r.clone()
	after := map[string]part{}
	for _, c := range s.contributions(r) {
		k := c.key
		if k == "" { // the single-clause path does not dedupe
			k = c.flow.MatchKey()
		}
		e := s.entries[k]
		if e == nil {
			e = &policyEntry{flow: c.flow, conj: map[uint32]Conjunction{}, allow: map[uint32]bool{}}
			s.entries[k] = e
		}
		pt := after[k]
		switch {
		case c.conjID != 0:
			e.id = c.conjID
			e.allow[r.ID] = true
			pt.id, pt.allow = c.conjID, true
		case c.allow:
			e.allow[r.ID] = true
			pt.allow = true
		default:
			e.conj[r.ID] = c.conj
			pt.conj, pt.inConj = c.conj, true
		}
		after[k] = pt
		s.rules[r.ID] = append(s.rules[r.ID], k)
	}
	changed := map[string]bool{}
	for _, k := range removed {
		if pt, ok := after[k]; !ok || pt != before[k] {
			changed[k] = true
		}
	}
	for k, pt := range after {
		if old, ok := before[k]; !ok || old != pt {
			changed[k] = true
		}
	}
	return sortedKeys(changed)
}

// Remove drops rule id's flows and returns the keys of the flows that changed, sorted.
func (s *PolicyFlowSet) Remove(id uint32) []string {
	changed := map[string]bool{}
	for _, k := range s.remove(id) {
		changed[k] = true
	}
	return sortedKeys(changed)
}

func (s *PolicyFlowSet) remove(id uint32) []string {
	keys := s.rules[id]
	delete(s.rules, id)
	delete(s.last, id)
	for _, k := range keys {
		e := s.entries[k]
		if e == nil {
			continue
		}
		delete(e.conj, id)
		delete(e.allow, id)
		if len(e.conj) == 0 && len(e.allow) == 0 {
			delete(s.entries, k)
		}
	}
	return keys
}

// Flow returns the flow wanted for key, and false if none is (delete it).
func (s *PolicyFlowSet) Flow(key string) (Flow, bool) {
	e := s.entries[key]
	if e == nil {
		return Flow{}, false
	}
	f := e.flow
	b := builder{p: std, cfg: s.cfg}
	switch {
	case e.id != 0 || len(e.allow) > 0:
		f.Actions = []Action{b.in(f.Table.Name()).next()} // allowed: on to the next stage
	default:
		ids := make([]uint32, 0, len(e.conj))
		for id := range e.conj {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			f.Actions = append(f.Actions, e.conj[id])
		}
	}
	o := PolicyOwner(e.id)
	f.Cookie = NewCookie(s.cfg.Generation, o.Kind, o.ID)
	return f, true
}

// Flows returns every flow of the set, sorted by text.
func (s *PolicyFlowSet) Flows() []Flow {
	out := make([]Flow, 0, len(s.entries))
	for k := range s.entries {
		f, _ := s.Flow(k)
		out = append(out, f)
	}
	return sortByText(out)
}

// RuleFlows returns the flows rule id contributes to, sorted by text (for inspection).
func (s *PolicyFlowSet) RuleFlows(id uint32) []Flow {
	var out []Flow
	for _, k := range s.rules[id] {
		if f, ok := s.Flow(k); ok {
			out = append(out, f)
		}
	}
	return sortByText(out)
}

// RuleFlowsAnyOrder is RuleFlows in no particular order: it formats no flow, so a caller
// holding a lock can copy a rule's flows cheaply and sort them (SortByText) after.
func (s *PolicyFlowSet) RuleFlowsAnyOrder(id uint32) []Flow {
	out := make([]Flow, 0, len(s.rules[id]))
	for _, k := range s.rules[id] {
		if f, ok := s.Flow(k); ok {
			out = append(out, f)
		}
	}
	return out
}

// SortByText returns fs sorted by their text (Flow.String), each flow formatted once.
func SortByText(fs []Flow) []Flow { return sortByText(fs) }

// sortByText sorts fs by String(), formatting each flow once (not once per comparison:
// at scale Flows holds tens of thousands).
func sortByText(fs []Flow) []Flow {
	if len(fs) < 2 {
		return fs
	}
	text := make([]string, len(fs))
	idx := make([]int, len(fs))
	for i, f := range fs {
		text[i], idx[i] = f.String(), i
	}
	sort.Slice(idx, func(a, b int) bool { return text[idx[a]] < text[idx[b]] })
	out := make([]Flow, len(fs))
	for i, j := range idx {
		out[i] = fs[j]
	}
	return out
}

// Len returns the number of flows in the set.
func (s *PolicyFlowSet) Len() int { return len(s.entries) }

// LenIn returns the number of flows of the set in table t (without building them).
func (s *PolicyFlowSet) LenIn(t TableID) int {
	n := 0
	for _, e := range s.entries {
		if e.flow.Table == t {
			n++
		}
	}
	return n
}

type contribution struct {
	flow   Flow   // match, table, priority
	key    string // flow.MatchKey(), computed once (dedupe)
	conj   Conjunction
	allow  bool   // a single-clause rule: this flow allows
	conjID uint32 // the conj_id flow of conjunction conjID
}

// clone returns r with its own slices (the set keeps it; the caller may reuse its own).
func (r PolicyRule) clone() PolicyRule {
	r.Pods, r.Peers, r.Ports = slices.Clone(r.Pods), slices.Clone(r.Peers), slices.Clone(r.Ports)
	return r
}

// hasFlows reports whether rule r has flows at all (contributions is not empty).
func (r PolicyRule) hasFlows() bool {
	return (len(r.Pods) > 0 || !r.AnyPeer || !r.AnyPort) && (r.AnyPeer || len(r.Peers) > 0) && (r.AnyPort || len(r.Ports) > 0)
}

// sameShape reports whether a and b differ at most in their pods and peers: same
// direction, the same "any peer" and "any port", and the same ports (so the same
// clauses, numbered the same).
func sameShape(a, b PolicyRule) bool {
	if a.Egress != b.Egress || a.AnyPeer != b.AnyPeer || a.AnyPort != b.AnyPort || len(a.Ports) != len(b.Ports) {
		return false
	}
	for i, p := range a.Ports {
		if p != b.Ports[i] {
			return false
		}
	}
	return true
}

// podMatches returns the matches of local pod p's clause in a rule of direction egress,
// one per IP family of node cfg: ingress by its ofport (reg1), egress by its address
// (an IPv6 one only when the pod has one; an IPv4 one only on a node with IPv4).
func podMatches(cfg NodeConfig, egress bool, p Pod) []Match {
	if !egress {
		var ms []Match
		for _, et := range ipFamilies(cfg) {
			ms = append(ms, Match{EthType: et, Regs: []RegMark{{Range: OutPortField, Value: p.OFPort}}})
		}
		return ms
	}
	var ms []Match
	if cfg.IPv4() {
		ms = append(ms, Match{EthType: EthTypeIPv4, IPSrc: hostPrefix(p.IPv4())})
	}
	if ip6 := p.IPv6(); ip6 != nil && ipv6On(cfg) {
		ms = append(ms, Match{EthType: EthTypeIPv6, IPv6Src: hostPrefix6(ip6)})
	}
	return ms
}

// peerMatch returns the match of peer prefix pr in a rule of direction egress: nw_src or
// nw_dst for an IPv4 prefix, ipv6_src or ipv6_dst for an IPv6 one.
func peerMatch(egress bool, pr *net.IPNet) Match {
	if pr.IP.To4() == nil {
		if egress {
			return Match{EthType: EthTypeIPv6, IPv6Dst: pr}
		}
		return Match{EthType: EthTypeIPv6, IPv6Src: pr}
	}
	if egress {
		return Match{EthType: EthTypeIPv4, IPDst: pr}
	}
	return Match{EthType: EthTypeIPv4, IPSrc: pr}
}

// podClauses returns rule r's contributions for pod p, one per IP family: its clause of
// the conjunction (or, for a rule with only its pod dimension, its allow flows), with the
// flows' match keys.
func (s *PolicyFlowSet) podClauses(r PolicyRule, p Pod) []contribution {
	t, _ := StageTable(StageIngressRules)
	if r.Egress {
		t, _ = StageTable(StageEgressRules)
	}
	n := uint8(1)
	if !r.AnyPeer {
		n++
	}
	if !r.AnyPort {
		n++
	}
	var out []contribution
	for _, m := range podMatches(s.cfg, r.Egress, p) {
		if n == 1 {
			f := Flow{Table: t, Priority: PriorityPolicyAllowAll, Match: m}
			out = append(out, contribution{flow: f, key: f.MatchKey(), allow: true})
			continue
		}
		f := Flow{Table: t, Priority: PriorityPolicyRule, Match: m}
		out = append(out, contribution{flow: f, key: f.MatchKey(), conj: Conjunction{ID: r.ID, Clause: 1, NClauses: n}})
	}
	return out
}

// peerClause returns rule r's contribution for peer pr (a rule with a peer dimension,
// !r.AnyPeer): its peer clause, 2, of the conjunction, with the flow's match key.
func (s *PolicyFlowSet) peerClause(r PolicyRule, pr *net.IPNet) contribution {
	t, _ := StageTable(StageIngressRules)
	if r.Egress {
		t, _ = StageTable(StageEgressRules)
	}
	n := uint8(2)
	if !r.AnyPort {
		n++
	}
	f := Flow{Table: t, Priority: PriorityPolicyRule, Match: peerMatch(r.Egress, pr)}
	return contribution{flow: f, key: f.MatchKey(), conj: Conjunction{ID: r.ID, Clause: 2, NClauses: n}}
}

// setPodsPeers is Set for rule r whose shape (direction, ports) is that of old, its last
// Set (both with flows): only the pods' and the peers' clause flows differ. Pods are told
// apart by what their clause matches (the ofport for ingress, the addresses for egress),
// peers by their masked prefix, so only the pods and peers added and removed are turned
// into flows.
func (s *PolicyFlowSet) setPodsPeers(old, r PolicyRule) []string {
	s.last[r.ID] = r.clone()
	changed := map[string]bool{}
	gone := map[string]bool{}
	add := func(c contribution) {
		e := s.entries[c.key]
		if e == nil {
			e = &policyEntry{flow: c.flow, conj: map[uint32]Conjunction{}, allow: map[uint32]bool{}}
			s.entries[c.key] = e
		}
		if c.allow {
			e.allow[r.ID] = true
		} else {
			e.conj[r.ID] = c.conj
		}
		s.rules[r.ID] = append(s.rules[r.ID], c.key)
		changed[c.key] = true
	}
	drop := func(k string) {
		if e := s.entries[k]; e != nil {
			delete(e.conj, r.ID)
			delete(e.allow, r.ID)
			if len(e.conj) == 0 && len(e.allow) == 0 {
				delete(s.entries, k)
			}
		}
		gone[k] = true
		changed[k] = true
	}

	if !samePods(old.Pods, r.Pods) {
		type podKey struct {
			id  uint64
			ip6 [16]byte // egress on a dual-stack node: the IPv6 address (zero: none)
		}
		dual := ipv6On(s.cfg)
		podID := func(p Pod) podKey {
			if r.Egress {
				var k podKey
				if ip := p.IPv4(); len(ip) == net.IPv4len {
					k.id = 1<<32 | uint64(binary.BigEndian.Uint32(ip))
				} else {
					k.id = 1 << 33 // no address: all alike, as their (empty) matches are
				}
				if ip6 := p.IPv6(); dual && ip6 != nil {
					k.ip6 = [16]byte(ip6.To16())
				}
				return k
			}
			return podKey{id: uint64(p.OFPort)}
		}
		diffMembers(old.Pods, r.Pods, podID,
			func(p Pod) {
				for _, c := range s.podClauses(r, p) {
					add(c)
				}
			}, func(p Pod) {
				for _, c := range s.podClauses(r, p) {
					drop(c.key)
				}
			})
	}
	if !r.AnyPeer && !samePeers(old.Peers, r.Peers) {
		diffMembers(old.Peers, r.Peers, peerID,
			func(pr *net.IPNet) { add(s.peerClause(r, pr)) }, func(pr *net.IPNet) { drop(s.peerClause(r, pr).key) })
	}
	if len(gone) > 0 {
		keys := s.rules[r.ID][:0]
		for _, k := range s.rules[r.ID] {
			if !gone[k] {
				keys = append(keys, k)
			}
		}
		s.rules[r.ID] = keys
	}
	return sortedKeys(changed)
}

// peerID is a peer's identity as its flow matches it: the family (4 or 6), the masked
// address and the mask (peersKnown: every peer of a rule on the incremental path is an
// IPv4 or IPv6 prefix).
func peerID(pr *net.IPNet) (id [33]byte) {
	mask := pr.Mask
	if ip := pr.IP.To4(); ip != nil {
		if len(mask) == net.IPv6len {
			mask = mask[12:]
		}
		id[0] = 4
		copy(id[17:], mask)
		copy(id[1:], ip.Mask(mask))
		return id
	}
	id[0] = 6
	copy(id[17:], mask)
	copy(id[1:], pr.IP.To16().Mask(mask))
	return id
}

// peersKnown reports whether every peer of r is an IPv4 prefix (with an IPv4 or IPv6
// mask) or an IPv6 prefix with an IPv6 mask (what peerID tells apart).
func peersKnown(r PolicyRule) bool {
	for _, pr := range r.Peers {
		switch {
		case pr.IP.To4() != nil:
			if len(pr.Mask) != net.IPv4len && len(pr.Mask) != net.IPv6len {
				return false
			}
		case len(pr.IP) != net.IPv6len || len(pr.Mask) != net.IPv6len:
			return false
		}
	}
	return true
}

// samePods reports whether a and b list the same pods' clause matches in the same order.
func samePods(a, b []Pod) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].OFPort != b[i].OFPort || !a[i].IPv4().Equal(b[i].IPv4()) || !a[i].IPv6().Equal(b[i].IPv6()) {
			return false
		}
	}
	return true
}

// samePeers reports whether a and b list the same prefixes in the same order.
func samePeers(a, b []*net.IPNet) bool {
	if len(a) != len(b) {
		return false
	}
	for i, p := range a {
		q := b[i]
		if !p.IP.Equal(q.IP) || string(p.Mask) != string(q.Mask) {
			return false
		}
	}
	return true
}

// nodePeers returns r with only the peers of the node's families: on an IPv6-only node
// (no IPv4 pod subnet) its IPv4 prefixes are left out, as no IPv4 reaches its policy
// stages (a rule whose peers are all IPv4 then has no flows, and allows nothing). On
// other nodes r as it is (an IPv4-only node's caller leaves IPv6 peers out itself).
func (s *PolicyFlowSet) nodePeers(r PolicyRule) PolicyRule {
	if s.cfg.IPv4() || r.AnyPeer {
		return r
	}
	var v6 []*net.IPNet
	for _, pr := range r.Peers {
		if pr.IP.To4() == nil {
			v6 = append(v6, pr)
		}
	}
	if len(v6) != len(r.Peers) {
		r.Peers = v6
	}
	return r
}

// contributions lists rule r's flows: one per pod, peer and port (clauses) and the
// conj_id flow; or, for a rule with only its pod dimension, one allow flow per pod. On a
// dual-stack node the pod, port and conj_id flows are there once per IP family (a pod's
// IPv6 clause by ipv6_src or reg1, a port's by tcp6/udp6/sctp6, conj_id with ipv6), and
// each peer prefix is a flow of its own family: a packet of one family matches only its
// family's flows, so a conjunction never mixes them, and an ipBlock matches its own
// family only.
//
//	egress:  table="egress_rules", priority=200,ip,nw_src=POD actions=conjunction(ID,1/3)
//	         table="egress_rules", priority=200,ip,nw_dst=PEER actions=conjunction(ID,2/3)
//	         table="egress_rules", priority=200,tcp,tp_dst=80 actions=conjunction(ID,3/3)
//	         table="egress_rules", priority=200,conj_id=ID,ip actions=goto_table:"ingress_rules"
//	ingress: the same in ingress_rules with reg1=POD's ofport and nw_src=PEER, then
//	         goto_table:"conntrack_commit"
func (s *PolicyFlowSet) contributions(r PolicyRule) []contribution {
	if !r.hasFlows() {
		return nil
	}
	t, _ := StageTable(StageIngressRules)
	if r.Egress {
		t, _ = StageTable(StageEgressRules)
	}
	n := uint8(1)
	if !r.AnyPeer {
		n++
	}
	if !r.AnyPort {
		n++
	}
	var out []contribution
	flow := func(prio uint16, m Match) Flow {
		return Flow{Table: t, Priority: prio, Match: m}
	}
	fams := ipFamilies(s.cfg)
	if n == 1 {
		for _, p := range r.Pods {
			for _, m := range podMatches(s.cfg, r.Egress, p) {
				out = append(out, contribution{flow: flow(PriorityPolicyAllowAll, m), allow: true})
			}
		}
		return out
	}
	clause := uint8(1)
	for _, p := range r.Pods {
		for _, m := range podMatches(s.cfg, r.Egress, p) {
			out = append(out, contribution{flow: flow(PriorityPolicyRule, m), conj: Conjunction{ID: r.ID, Clause: clause, NClauses: n}})
		}
	}
	if !r.AnyPeer {
		clause++
		for _, pr := range r.Peers {
			out = append(out, contribution{flow: flow(PriorityPolicyRule, peerMatch(r.Egress, pr)), conj: Conjunction{ID: r.ID, Clause: clause, NClauses: n}})
		}
	}
	if !r.AnyPort {
		clause++
		for _, pp := range r.Ports {
			for _, et := range fams {
				m := Match{EthType: et, IPProto: pp.Proto, TPDst: pp.Port & pp.Mask, TPDstMask: pp.Mask}
				out = append(out, contribution{flow: flow(PriorityPolicyRule, m), conj: Conjunction{ID: r.ID, Clause: clause, NClauses: n}})
			}
		}
	}
	for _, et := range fams {
		out = append(out, contribution{flow: flow(PriorityPolicyRule, Match{EthType: et, ConjID: r.ID}), conjID: r.ID})
	}
	return dedupe(out)
}

// dedupe drops contributions with the same match and conjunction (two ports that encode
// alike, a peer listed twice).
func dedupe(cs []contribution) []contribution {
	type dkey struct {
		match  string
		clause uint8
		conjID uint32
	}
	seen := make(map[dkey]bool, len(cs))
	out := cs[:0]
	for _, c := range cs {
		if c.key == "" {
			c.key = c.flow.MatchKey()
		}
		k := dkey{c.key, c.conj.Clause, c.conjID}
		if !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diffMembers calls added for each member of now whose id (the identity of its clause
// flow's match) no member of was has, and removed for each member of was whose id no
// member of now has; members with the same id count once (the same match twice).
func diffMembers[T any, K comparable](was, now []T, id func(T) K, added, removed func(T)) {
	// One map, of was's ids to their first index, and a mark per member of was: half the
	// allocation of a map per side (the runner diffs every changed rule's pods each round).
	before := make(map[K]int, len(was))
	for i, m := range was {
		if _, dup := before[id(m)]; !dup {
			before[id(m)] = i
		}
	}
	kept := make([]bool, len(was))
	var seenNew map[K]bool // ids of now that were not in was, when one repeats
	for _, m := range now {
		k := id(m)
		if i, ok := before[k]; ok {
			kept[i] = true
			continue
		}
		if seenNew == nil {
			seenNew = map[K]bool{}
		}
		if !seenNew[k] {
			seenNew[k] = true
			added(m)
		}
	}
	for _, i := range before {
		if !kept[i] {
			removed(was[i])
		}
	}
}
