package flows

// Services load-balanced in OVS (issue 22, feature "services", NodeConfig.Services): the
// stages service_conntrack and service_lb, and per Service port a select group.
//
// Design history. kube-proxy on the host translated Service traffic, so the pipeline
// sent it to the gateway and the host masqueraded the endpoint's reply back through
// itself: NetworkPolicy saw the gateway's address, never the client's (policy.go). Here,
// as Antrea's AntreaProxy and OVN's load balancers do, the switch translates:
//
//   - service_conntrack sends every IP packet through ct(nat) in ofsdn's one conntrack
//     zone (ConntrackZone) before anything else looks at its addresses: a packet of a
//     translated connection gets its translation again (the original direction its
//     endpoint, a reply the ClusterIP:port as source), and everything else is only looked
//     up (+trk), not committed. Pods, the gateway and the tunnel all go through it: a
//     reply from an endpoint on another node comes back through the tunnel to the client's
//     node, the one that translated it.
//   - service_lb: a pod's new connection (+new+trk) to ClusterIP:port goes to the Service
//     port's select group (a UDP port: multipath, "UDP Service ports" below); the switch
//     picks a bucket by a hash of the packet's 5-tuple (weighted), and the bucket runs
//     ct(commit, zone=ConntrackZone, nat(dst=EP:port), table=l3_forwarding): the
//     connection is committed with its translation, and the translated packet goes on to
//     l3_forwarding (local endpoint) or remote (tunnel), as any pod-to-pod packet does.
//     With no endpoints the flow sends the packet to the controller (meter
//     ServiceRejectMeter) to be rejected (TCP RST / ICMP port unreachable, built by the
//     daemon); it is the Service port's own flow, so its n_packets counts the refused
//     connections.
//   - NetworkPolicy judges after the translation: its stages (60..68) come after
//     l3_forwarding and see the endpoint as nw_dst and the client pod as nw_src. The
//     policy stages and the NAT agree on one conntrack zone and one lookup: with Services
//     on, the conntrack stage issues no ct of its own but reads the state
//     service_conntrack left (a second ct in the same zone also works on OVS 3.1's
//     userspace datapath, which reuses the connection cached with the packet, and
//     TestServiceOnSwitch passes either way; one lookup is cheaper and does not depend on
//     that cache), so a new Service connection is +new+dnat there (and judged), its later
//     packets +est, the endpoint's replies +est+rpl; conntrack_commit commits only
//     connections without +dnat (a Service connection was committed at its DNAT). Antrea
//     does the same: one ct(nat) up front, one zone for NAT and policy, committed at DNAT.
//     A connection that policy then refuses stays committed but unreplied until conntrack
//     times it out; its retransmissions keep their endpoint and are refused again.
//   - The select group's bucket choice is OVS's: on OVS 3.1 an OpenFlow 1.3 select group
//     of at most 64 buckets uses dp_hash with the symmetric L3/L4 hash (the datapath's
//     hash action, OVS_HASH_ALG_SYM_L4: flow_hash_symmetric_l3l4 without UDP ports), and
//     a larger one the default selection, flow_hash_symmetric_l4, which leaves UDP ports
//     out too. TCP and SCTP connections of one client spread over the endpoints. UDP
//     ports choose otherwise (below, "UDP Service ports").
//
// UDP Service ports. Through a select group every UDP flow between one client address
// and one ClusterIP went to one endpoint (measured on OVS 3.1's userspace datapath: 200
// flows from distinct client ports, all to one of 4 endpoints; with the group padded
// above 64 buckets, the default selection, the same). kube-proxy picks an endpoint for
// each new conntrack entry at random, so a DNS client's queries spread. Choosing the
// group's hash fields needs OpenFlow 1.5's selection_method, and our connection speaks
// 1.3. So a UDP port (ServiceHashSelect) has no group: its flow loads the port's id into
// reg5 (ServicePortField) and runs the multipath action (Multipath: fields
// symmetric_l3l4+udp, modulo_n over the port's slots) into reg6[0..15]
// (ServiceSlotField), and goes on to service_endpoint, where the port's slot flows
// (PriorityServiceSlot, one per aligned block of an endpoint's slots, serviceSlots) do
// what its bucket did: the DNAT. An endpoint owns as many slots as its weight (weights
// divided by their greatest common divisor: the controller's weights of 1 give one slot
// each), so every new flow, a distinct client port, picks on its own with the weights'
// shares (modulo_n over a 32-bit hash: equal to within one in 2^32/slots, where dp_hash
// quantizes to 2^k hash values). ovs-vswitchd computes the hash when it translates, and
// the datapath flow it installs matches the hashed fields exactly, so each new UDP flow
// is one upcall (only +new packets pass service_lb; later datagrams follow conntrack).
// With session affinity the port's flow in service_endpoint (the miss of the learned
// flows) chooses and resubmits, and the slot flow runs the learn action before its DNAT,
// as the endpoint's hit flow does (no group bucket is in the way, so no reg3/reg4 hop).
// One multipath action chooses among at most MaxMultipathLinks (65,536) slots: a UDP
// port with more endpoints keeps the select group (and its parts), as before. A port of
// one endpoint has one slot and no multipath (reg6 is 0).
//
// IPv6 (issue 23, a dual-stack node): a Service port is of one family, its ClusterIP's
// (ServicePort.IPv6), with frontends, source ranges and endpoints of that family only, as
// kube-proxy's per-family proxiers; a dual-stack Service port is two ServicePorts, two
// owners, two groups. Its flows are the IPv4 ones with tcp6/udp6/sctp6, ipv6_dst and
// ipv6_src, its DNAT nat(dst=[IP6]:PORT) in the same ConntrackZone (conntrack keys its
// entries by address family); the Services stages have IPv6's own ct(nat) flows
// (serviceConntrackNode). Session affinity learns ipv6_src; reg3 (32 bits) cannot hold
// an IPv6 endpoint, so the learned flows, buckets and hit flows name it by its affinity
// id (unique among the port's live endpoints; reg5 names the port). Hairpin SNATs to
// HairpinSNATIPv6, in fc00::/8, which no one may allocate (RFC 4193) and which the pod
// routes through its gateway, as it does 169.254.0.252.
//
// Group ids: GroupIDMin + ServicePort.ID, in ofsdn's group range (group.go), so the
// Service port's owner id (allocated by the caller per owner kind, kept across restarts)
// names its group too.
//
// Hairpin: a pod that reaches itself through its own Service gets itself as the endpoint.
// After the DNAT its packet is nw_src = nw_dst = the pod's IP, and it must leave by the
// port it came in by; the pod would also drop a packet from its own address (a martian
// source). So, as kube-proxy (masquerade) and Antrea (a virtual SNAT address) do, the
// switch SNATs such connections to HairpinSNATIP in a conntrack zone of their own
// (HairpinZone) and sends them back out of their in_port:
//
//   - l3_forwarding, per local pod (Services on): nw_src = nw_dst = the pod → eth_dst and
//     reg1 as for any packet to it, the hairpin mark (reg0[4]), ct(commit, zone=HairpinZone,
//     nat(src=HairpinSNATIP), table=output). The packet skips the NetworkPolicy stages: a
//     pod talking to itself is not judged (kube-proxy's masquerade makes it node traffic,
//     which policy allows; Antrea allows it too). The connection was committed in
//     ConntrackZone at its DNAT already.
//   - service_hairpin, before service_conntrack (a pod's IP goes there from spoof_guard):
//     the pod's reply goes to HairpinSNATIP, and a packet for that address goes through
//     ct(nat) in HairpinZone (un-SNAT: nw_dst back to the pod's own address and port).
//     In service_conntrack a packet that conntrack called a reply there gets the hairpin
//     mark and the usual ct(nat) in ConntrackZone (un-DNAT: nw_src back to
//     ClusterIP:port); a packet to HairpinSNATIP that is no reply goes on unmarked (to the
//     gateway, as any off-subnet address).
//   - output: the hairpin mark → eth_src = the gateway MAC, IN_PORT (an output to reg1 =
//     in_port is dropped by OpenFlow).
//
// The un-SNAT must come before the un-DNAT, since the ConntrackZone entry's reply tuple
// is the pod's own address. One flow per pod (a match cannot compare nw_src with nw_dst);
// nothing changes for a node without Services in OVS.
//
// Frontends other than the ClusterIP (ServicePort.Frontends): a pod's new connection to
// an external IP or load-balancer IP at the Service port, or to a node's address at the
// NodePort, has a service_lb flow of its own (the same match but nw_dst/tp_dst) to the
// port's group, reject or drop: one group per port, however many frontends. kube-proxy's
// nftables proxier looks a packet up in its service-ips map (ClusterIP, external IPs,
// load-balancer IPs) before its service-nodeports map, so node addresses have a lower
// priority (PriorityServiceNodePort); a load-balancer IP with loadBalancerSourceRanges
// has a flow per range (PriorityServiceSourceRange) above a drop of every other source,
// as kube-proxy's firewall chain drops them before its NAT. Node addresses are every
// Node's InternalIP the daemon knows (its own and its peers'), kube-proxy's nftables
// default (--nodeport-addresses primary); the NodePort on another node's address is
// translated here too, so it never leaves the node untranslated. The reply is un-NATed by
// service_conntrack as for a ClusterIP, with the frontend as its source; a reject
// answers from the frontend. With session affinity every frontend's flow loads the
// Service port's id into reg5 (ServicePortField) and the learned flows key on it, so a
// client's affinity is one per Service port across its frontends, as kube-proxy's (all of
// its frontends jump to the one service chain, whose per-endpoint affinity sets key on
// the client's address alone).
//
// Session affinity (sessionAffinity: ClientIP): an affinity port's service_lb flows
// load the port's id into reg5 and resubmit to service_affinity, where the switch's
// learned flows (one per client address and Service port: nw_src and reg5, owner kind
// OwnerServiceAffinity) load the remembered endpoint into
// reg3/reg4, then goes on to service_endpoint: an endpoint flow matching reg3/reg4
// (so only an endpoint still in the port) runs the learn action again and DNATs; anything
// else goes to the group, whose bucket loads its endpoint into reg3/reg4 and resubmits to
// that endpoint's flow (a learn action in the bucket itself learned nothing on OVS 3.1's
// userspace datapath), or for a UDP port to the multipath choice and its slot flow, which
// learns and DNATs. Idle timeout min(T, the learn limit: NodeConfig.AffinityLearnMax);
// above it send_flow_rem, and when the switch removes such a flow at its idle timeout the
// daemon adds its remainder flow (AffinityRemainder: the same match, cookie and loads,
// priority PriorityAffinityRemainder, idle timeout T minus the limit), so the client's
// window is T exactly (docs/design.md, "Session affinity"). The daemon
// builds these flows with config serviceProxy: ofsdn (controller/services.go).

import (
	"fmt"
	"math/bits"
	"net"
	"slices"
	"strings"

	"github.com/contiv/libOpenflow/openflow13"
)

// The Services stages' names (pipeline.go declares them).
const (
	// StageServiceHairpin un-SNATs a pod's replies to a hairpin connection (HairpinZone).
	StageServiceHairpin = "service_hairpin"
	// StageServiceConntrack sends IP through ct(nat) in ConntrackZone.
	StageServiceConntrack = "service_conntrack"
	// StageServiceLB sends pods' new connections to a Service port's frontends (ClusterIP,
	// external and load-balancer IPs at the port, node addresses at the NodePort) to the
	// port's group.
	StageServiceLB = "service_lb"
	// StageServiceAffinity holds the learned session-affinity flows.
	StageServiceAffinity = "service_affinity"
	// StageServiceEndpoint DNATs an affinity hit to its endpoint, the rest to the group.
	StageServiceEndpoint = "service_endpoint"
)

// Session affinity (sessionAffinity: ClientIP). Priorities and the learn action's limit.
const (
	// PriorityAffinityLearned (200) is the priority of learned flows in
	// service_affinity and of the per-endpoint hit flows in service_endpoint.
	PriorityAffinityLearned uint16 = 200
	// PriorityAffinityRemainder (199) is the priority of the remainder flows the daemon
	// adds in service_affinity (AffinityRemainder), below the learned flows: a new
	// connection that hits a remainder flow learns a fresh flow at
	// PriorityAffinityLearned with the learn action's own timeouts and flags, which then
	// hides the remainder. At the learned flows' own priority the learn would modify the
	// remainder flow instead (OVS's learn is a modify-strict, which keeps an existing
	// flow's idle timeout and flags), and the client would keep only the remainder.
	PriorityAffinityRemainder uint16 = 199
	// MaxLearnTimeout is the largest idle timeout a learn action can give, seconds
	// (nx_action_learn.idle_timeout is 16 bits), and the default learn limit
	// (NodeConfig.AffinityLearnMax). A longer affinity timeout is learned with the limit
	// and LearnSendFlowRem, and the daemon carries the remainder from the flow-removed
	// message (AffinityRemainder).
	MaxLearnTimeout = 65535
)

// PriorityServiceSlot (150) in service_endpoint: a UDP Service port's slot flows
// (ServiceHashSelect), above an affinity port's per-frontend flows (PriorityServicePort),
// below the affinity hits (PriorityAffinityLearned), so that a slot flow's learn and DNAT
// run once the multipath chose, and a remembered endpoint wins before it.
const PriorityServiceSlot uint16 = 150

// ServiceRejectMeter is the meter id of the no-endpoint flows: it limits the packet-ins
// of connections to Services without endpoints (the controller creates it, as it creates
// DenyLogMeter; OpenFlow 1.3.5 §7.3.4.4).
const ServiceRejectMeter uint32 = 2

// ServiceRejectMaxLen is how many bytes of a refused packet go to the controller: the
// Ethernet, IPv4 or IPv6 and TCP/UDP/SCTP headers, what a reject (TCP RST, ICMP or
// ICMPv6 port unreachable quoting the packet) needs.
const ServiceRejectMaxLen uint16 = 128

// Hairpin (a pod reaching itself through its own Service): the SNAT address and zone.
var (
	// HairpinSNATIP is the source address a hairpin connection gets (link-local,
	// RFC 3927; never routed, never a pod's): the pod sees its own Service connection
	// come from it and replies to it through its default route (the gateway).
	HairpinSNATIP = net.IPv4(169, 254, 0, 252).To4()
	// HairpinSNATIPv6 is the source address an IPv6 hairpin connection gets: fc00::/8 is
	// the half of the unique local addresses (RFC 4193 §3.1, L=0) that no one may
	// allocate, so it is never a pod's, a node's or a Service's, and unlike a link-local
	// address (fe80::/10, on-link in every pod) the pod sends its reply to it through its
	// default route, the gateway, as it does for the IPv4 one. The low 32 bits are the
	// IPv4 one's.
	HairpinSNATIPv6 = net.ParseIP("fc00::a9fe:fc")
)

// HairpinZone is the conntrack zone of the hairpin SNAT (ConntrackZone + 1): apart from
// the DNAT's zone, since a packet has one translation per zone and the hairpin needs two.
const HairpinZone uint16 = ConntrackZone + 1

// PriorityHairpin (110) in l3_forwarding (a pod's packet to itself, above the pod's own
// flow), service_hairpin (a packet to HairpinSNATIP) and output (the hairpin mark).
const PriorityHairpin uint16 = 110

// PriorityHairpinReply (105) in service_conntrack: a hairpin reply after its un-SNAT.
const PriorityHairpinReply uint16 = 105

// Priorities in service_lb (kube-proxy's nftables proxier looks a packet up in its
// service-ips map, ClusterIPs, external IPs and load-balancer IPs, before its
// service-nodeports map, and drops a load-balancer IP's disallowed sources before
// either).
const (
	// PriorityServicePort (100): a Service port's flow for its ClusterIP, an external IP
	// or a load-balancer IP; for a load-balancer IP with source ranges, the drop of every
	// other source.
	PriorityServicePort uint16 = 100
	// PriorityServiceSourceRange (101): a load-balancer IP's flow for one of its
	// loadBalancerSourceRanges.
	PriorityServiceSourceRange uint16 = 101
	// PriorityServiceNodePort (90): a Service port's flow for a node address at its
	// NodePort.
	PriorityServiceNodePort uint16 = 90
)

// ServiceFrontend is an address other than the ClusterIP at which this node's pods reach
// a Service port (kube-proxy's external destinations): an external IP or load-balancer
// ingress IP at the Service port, or a node's address at the NodePort. Its flows in
// service_lb share the port's group and verdict.
type ServiceFrontend struct {
	// IP is the frontend's address, of the port's family (ServicePort.IPv6):
	// spec.externalIPs[], status.loadBalancer.ingress[].ip, or a Node's InternalIP.
	IP net.IP
	// Port is spec.ports[].port, or spec.ports[].nodePort for a node address (1..65535).
	Port uint16
	// NodePort marks a node address at the NodePort (priority PriorityServiceNodePort,
	// below the Service IPs', as kube-proxy looks NodePorts up last).
	NodePort bool
	// SourceRanges are spec.loadBalancerSourceRanges (of the port's family) of a
	// load-balancer IP: only
	// clients in them reach it, the rest are dropped, as kube-proxy's firewall chain
	// does; nil = any client. Not for node addresses (kube-proxy does not apply them to
	// NodePorts).
	SourceRanges []*net.IPNet
}

// String names the frontend: "172.30.0.71:30080" (node address), "192.0.2.10:80".
func (fe ServiceFrontend) String() string {
	return net.JoinHostPort(fe.IP.String(), fmt.Sprint(fe.Port))
}

// ServicePort is one port of a Service the switch load-balances: ClusterIP, protocol,
// port, and the endpoints new connections go to.
type ServicePort struct {
	// ID is the Service port's owner id, 1..GroupIDMax-GroupIDMin, unique among live
	// Service ports; its group is GroupIDMin+ID (ServiceGroupID).
	ID uint32
	// ClusterIP is the Service's ClusterIP of one family (IPv4, or IPv6 on a dual-stack
	// node: the port is then IPv6 throughout, ServicePort.IPv6); nil for a port's external view (only
	// Frontends: with internalTrafficPolicy Local, pods' ClusterIP traffic and their
	// external traffic go to different endpoints, so the controller builds the external
	// frontends as a Service port of their own).
	ClusterIP net.IP
	// Frontends are the port's other addresses for pods (external IPs, load-balancer IPs,
	// node addresses at the NodePort), each with its own flow to the same group or
	// verdict.
	Frontends []ServiceFrontend
	// Proto is IPProtoTCP, IPProtoUDP or IPProtoSCTP.
	Proto uint8
	// Port is the Service port (1..65535).
	Port uint16
	// Endpoints are the ready endpoints, each a bucket (a UDP port's: its hash slots,
	// ServiceHashSelect); none = new connections are refused (sent to the controller).
	Endpoints []ServiceEndpoint
	// AffinitySeconds is sessionAffinity ClientIP's timeoutSeconds (1..86400, the API's
	// range); 0 = no affinity. With it every endpoint needs an AffinityID.
	AffinitySeconds uint32
	// GroupParts are the ids of the part groups when the endpoints' buckets do not fit
	// one group mod: exactly ServiceGroupParts(sp) of them (none below ~900 endpoints),
	// distinct, in GroupIDMin..GroupIDMax, no other group's (the caller allocates them
	// from the Service port ids and keeps them with the port). See "Endpoints beyond one
	// group mod".
	GroupParts []uint32
}

// ServiceEndpoint is one endpoint of a Service port: a pod address and its target port.
type ServiceEndpoint struct {
	// IP is the endpoint's address, of the port's family (a pod of this node or of
	// another).
	IP net.IP
	// Port is the endpoint's target port (1..65535).
	Port uint16
	// Weight is the endpoint's share of new connections, 1..65535; 0 counts as 1.
	Weight uint16
	// AffinityID is the owner id (kind OwnerServiceAffinity) of the flows the switch
	// learns for clients affined to this endpoint of this Service port, 1..2^32-1,
	// unique among live (Service port, endpoint) pairs; only with AffinitySeconds.
	AffinityID uint32
}

// String names the Service port for errors: "10.96.0.10:80/tcp (id 7)".
func (sp ServicePort) String() string {
	proto := map[uint8]string{IPProtoTCP: "tcp", IPProtoUDP: "udp", IPProtoSCTP: "sctp"}[sp.Proto]
	if proto == "" {
		proto = fmt.Sprintf("proto%d", sp.Proto)
	}
	if sp.ClusterIP == nil && len(sp.Frontends) > 0 {
		return fmt.Sprintf("%s/%s (id %d, external)", sp.Frontends[0], proto, sp.ID)
	}
	return fmt.Sprintf("%s/%s (id %d)", net.JoinHostPort(sp.ClusterIP.String(), fmt.Sprint(sp.Port)), proto, sp.ID)
}

// IPv6 reports whether sp is an IPv6 Service port: its ClusterIP (else its first
// frontend) is IPv6. Its frontends, source ranges and endpoints are all IPv6 then
// (Validate), and its flows match ipv6 (kube-proxy's per-family proxiers: a port of
// one family never reaches the other's endpoints).
func (sp ServicePort) IPv6() bool {
	ip := sp.ClusterIP
	if ip == nil && len(sp.Frontends) > 0 {
		ip = sp.Frontends[0].IP
	}
	return ip != nil && ip.To4() == nil
}

// ethType is sp's family's EthType.
func (sp ServicePort) ethType() uint16 {
	if sp.IPv6() {
		return EthTypeIPv6
	}
	return EthTypeIPv4
}

// setIPDst matches the destination ip of m's family (m.EthType): nw_dst or ipv6_dst.
func (m *Match) setIPDst(ip net.IP) {
	if m.EthType == EthTypeIPv6 {
		m.IPv6Dst = hostPrefix6(ip)
	} else {
		m.IPDst = hostPrefix(ip)
	}
}

// affinityEndpointValue is what names endpoint ep of sp in AffinityEndpointIPField
// (reg3), in the learned flows, the buckets and the endpoint's hit flow: an IPv4
// endpoint's address; an IPv6 endpoint's affinity id (128 bits do not fit a 32-bit
// register; the id is unique among the live endpoints of the port, and reg5 names
// the port).
func affinityEndpointValue(sp ServicePort, ep ServiceEndpoint) uint32 {
	if sp.IPv6() {
		return ep.AffinityID
	}
	return ipv4ToUint32(ep.IP)
}

// AllFrontends returns every frontend of sp: the ClusterIP at the port (when set) first,
// then Frontends.
func (sp ServicePort) AllFrontends() []ServiceFrontend {
	var out []ServiceFrontend
	if sp.ClusterIP != nil {
		out = append(out, ServiceFrontend{IP: sp.ClusterIP, Port: sp.Port})
	}
	return append(out, sp.Frontends...)
}

// Validate checks that sp can have flows and a group: an id in 1..GroupIDMax-GroupIDMin,
// a ClusterIP (or frontends), TCP, UDP or SCTP, a port, endpoints with ports, every
// address (frontends, source ranges, endpoints) of the ClusterIP's family, and the part
// group ids its endpoints need (ServiceGroupParts).
func (sp ServicePort) Validate() error {
	if sp.ID == 0 || sp.ID > GroupIDMax-GroupIDMin {
		return fmt.Errorf("service port %v: id %d outside 1..%d: allocate it from the Service port owner ids", sp, sp.ID, GroupIDMax-GroupIDMin)
	}
	if sp.ClusterIP == nil && len(sp.Frontends) == 0 {
		return fmt.Errorf("service port %v: no ClusterIP and no other frontend: give the Service's IPv4 ClusterIP", sp)
	}
	v6 := sp.IPv6()
	family := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
	isFamily := func(ip net.IP) bool {
		if v6 {
			return len(ip) == net.IPv6len && ip.To4() == nil
		}
		return ip.To4() != nil
	}
	if sp.ClusterIP != nil && !isFamily(sp.ClusterIP) {
		return fmt.Errorf("service port %v: ClusterIP %v is neither IPv4 nor IPv6: give the Service's ClusterIP of one family", sp, sp.ClusterIP)
	}
	for _, fe := range sp.Frontends {
		if !isFamily(fe.IP) || fe.Port == 0 {
			return fmt.Errorf("service port %v: frontend %v is not an %s address with a port (a Service port's frontends are of its ClusterIP's family, as kube-proxy's per-family proxiers): use the external IP, load-balancer IP or node InternalIP of that family with the port or NodePort", sp, fe, family)
		}
		for _, r := range fe.SourceRanges {
			if r == nil || !isFamily(r.IP) || len(r.Mask) != len(r.IP) {
				return fmt.Errorf("service port %v: frontend %v: source range %v is not an %s prefix: fix spec.loadBalancerSourceRanges", sp, fe, r, family)
			}
		}
		if fe.NodePort && len(fe.SourceRanges) > 0 {
			return fmt.Errorf("service port %v: node address %v with source ranges: loadBalancerSourceRanges apply to load-balancer IPs only", sp, fe)
		}
	}
	if sp.Proto != IPProtoTCP && sp.Proto != IPProtoUDP && sp.Proto != IPProtoSCTP {
		return fmt.Errorf("service port %v: protocol %d is not TCP, UDP or SCTP", sp, sp.Proto)
	}
	if sp.Port == 0 {
		return fmt.Errorf("service port %v: port 0: give the Service port's port", sp)
	}
	if sp.AffinitySeconds > 86400 {
		return fmt.Errorf("service port %v: session affinity timeout %d s above the API's maximum of 86400 s: use sessionAffinityConfig.clientIP.timeoutSeconds 1..86400", sp, sp.AffinitySeconds)
	}
	if want := ServiceGroupParts(sp); len(sp.GroupParts) != want {
		return fmt.Errorf("service port %v: %d endpoints need %d part groups, %d given: allocate ServiceGroupParts ids for GroupParts", sp, len(sp.Endpoints), want, len(sp.GroupParts))
	}
	seen := map[uint32]bool{ServiceGroupID(sp): true}
	for _, id := range sp.GroupParts {
		if !OwnedGroupID(id) || seen[id] {
			return fmt.Errorf("service port %v: part group id %d is outside %d..%d or used twice: allocate distinct ids from the Service port ids", sp, id, GroupIDMin, GroupIDMax)
		}
		seen[id] = true
	}
	if top := (Group{Buckets: make([]Bucket, len(sp.GroupParts))}); len(sp.GroupParts) > 0 {
		for i := range top.Buckets {
			top.Buckets[i].Actions = []Action{GroupAction{ID: sp.GroupParts[i]}}
		}
		if top.WireLen() > MaxGroupModLen {
			return fmt.Errorf("service port %v: %d endpoints need %d part groups, more than one group mod can chain: split the Service", sp, len(sp.Endpoints), len(sp.GroupParts))
		}
	}
	for _, ep := range sp.Endpoints {
		if !isFamily(ep.IP) || ep.Port == 0 {
			return fmt.Errorf("service port %v: endpoint %v is not an %s address with a port: use an address of the %s EndpointSlice (a ClusterIP never reaches the other family's endpoints) and the target port", sp, net.JoinHostPort(ep.IP.String(), fmt.Sprint(ep.Port)), family, family)
		}
		if sp.AffinitySeconds != 0 && ep.AffinityID == 0 {
			return fmt.Errorf("service port %v: endpoint %v:%d has no affinity id: allocate one per (Service port, endpoint) for session affinity", sp, ep.IP, ep.Port)
		}
	}
	return nil
}

// AffinityCookie is the cookie of the flows the switch learns for clients affined to
// endpoint ep of a Service port (kind OwnerServiceAffinity, id ep.AffinityID), in
// generation gen: delete by it (with CookieOwnerKindMask|CookieOwnerIDMask) to forget
// them.
func AffinityCookie(gen uint16, ep ServiceEndpoint) Cookie {
	return NewCookie(gen, OwnerServiceAffinity, ep.AffinityID)
}

// AffinityPortDelete returns the OFPFC_DELETE flow mod (OpenFlow 1.3.5 §7.3.4.1) that
// removes every learned affinity flow (and remainder flow) of Service port sp from
// service_affinity, whatever endpoint or affinity id it carries: match reg5 = sp.ID (the
// learned flows key on the port, ServicePortField), cookie = owner kind
// OwnerServiceAffinity under CookieOwnerKindMask, any priority. For a changed timeout or
// removed affinity (a learn action's modify of an existing learned flow takes the new
// cookie but keeps the old timeouts, so deleting by the old ids alone misses it) and a
// gone port (whose id may be given to another port).
func AffinityPortDelete(cfg NodeConfig, sp ServicePort) []*openflow13.FlowMod {
	b := builder{p: std, cfg: cfg}
	f := b.in(StageServiceAffinity).flow(Owner{Kind: OwnerServiceAffinity}, 0,
		Match{Regs: []RegMark{{Range: ServicePortField, Value: sp.ID}}})
	fm := f.FlowMod(openflow13.FC_DELETE)
	fm.Cookie, fm.CookieMask = uint64(OwnerServiceAffinity)<<cookieOwnerShift, CookieOwnerKindMask
	return []*openflow13.FlowMod{fm}
}

// AffinityLearnTimeout returns the idle timeout, seconds, of a learned affinity flow for
// a timeout of seconds on a node of cfg: min(seconds, cfg's learn limit,
// NodeConfig.AffinityLearnLimit); and whether the learned flow asks for a flow-removed
// message (above the limit: the daemon then adds the remainder, AffinityRemainder).
func AffinityLearnTimeout(cfg NodeConfig, seconds uint32) (idle uint16, sendFlowRem bool) {
	if max := cfg.AffinityLearnLimit(); seconds > uint32(max) {
		return max, true
	}
	return uint16(seconds), false
}

// AffinityRemoved is a flow the switch removed from a table, as its OFPT_FLOW_REMOVED
// (OpenFlow 1.3.5 §7.4.2) tells it: what AffinityRemainder needs to judge it.
type AffinityRemoved struct {
	// Table, Priority, Cookie and IdleTimeout (seconds) are the removed flow's.
	Table       TableID
	Priority    uint16
	Cookie      Cookie
	IdleTimeout uint16
	// IdleExpired: the switch removed it at its idle timeout (OFPRR_IDLE_TIMEOUT), not
	// a delete, a hard timeout or an eviction.
	IdleExpired bool
	// Client (nw_src) and PortID (reg5, ServicePortField: the Service port's id) are
	// its match; nil and 0 when the match lacks them.
	Client net.IP
	PortID uint32
}

// AffinityRemainderFlow is the flow that carries on a client's session affinity after its
// learned flow expired at the learn limit: a flow in service_affinity at priority
// PriorityAffinityRemainder with IdleTimeout (seconds), sent as an OFPFC_ADD without
// flags (FlowMod): no flow-removed message, its end is the end of the affinity.
type AffinityRemainderFlow struct {
	Flow        Flow
	IdleTimeout uint16
}

// FlowMod returns the OFPFC_ADD (OpenFlow 1.3.5 §7.3.4.1) of f with its idle timeout. An
// ADD replaces a flow of the same match and priority (an earlier remainder of the client
// at that frontend) with its own timeout.
func (f AffinityRemainderFlow) FlowMod() *openflow13.FlowMod {
	fm := f.Flow.FlowMod(openflow13.FC_ADD)
	fm.IdleTimeout = f.IdleTimeout
	return fm
}

// String is f as ovs-ofctl dump-flows --no-stats prints it:
//
//	cookie=0x..., table="service_affinity", idle_timeout=4, priority=199,ip,reg5=ID,nw_src=CLIENT actions=load:EP->NXM_NX_REG3[],load:1<<16|PORT->NXM_NX_REG4[0..16]
func (f AffinityRemainderFlow) String() string {
	return strings.Replace(f.Flow.String(), "priority=", fmt.Sprintf("idle_timeout=%d, priority=", f.IdleTimeout), 1)
}

// AffinityRemainder returns the remainder flow of a learned affinity flow of Service port
// sp that the switch removed (r), on a node of cfg: when sp's affinity timeout T is above
// the learn limit L (NodeConfig.AffinityLearnLimit) and r is one of sp's learned flows
// that expired idle after L seconds: table service_affinity, priority
// PriorityAffinityLearned, idle timeout L, the cookie AffinityCookie(cfg.Generation, ep)
// of one of sp's endpoints ep (so of this run's generation, and an endpoint that is still
// sp's), and sp's id in reg5 (ServicePortField). The flow has r's
// match, the cookie (so every delete of the endpoint's or the port's learned flows takes
// it too: by cookie, or AffinityPortDelete's non-strict delete of any priority), the
// loads of ep and idle timeout T − L (at most MaxLearnTimeout: only a lowered limit gets
// there). false: nothing to add.
func AffinityRemainder(cfg NodeConfig, sp ServicePort, r AffinityRemoved) (AffinityRemainderFlow, bool) {
	limit := cfg.AffinityLearnLimit()
	if sp.AffinitySeconds <= uint32(limit) || !r.IdleExpired || r.IdleTimeout != limit ||
		r.Priority != PriorityAffinityLearned || r.PortID != sp.ID || r.Client == nil || (r.Client.To4() == nil) != sp.IPv6() {
		return AffinityRemainderFlow{}, false
	}
	if t, ok := StageTable(StageServiceAffinity); !ok || r.Table != t {
		return AffinityRemainderFlow{}, false
	}
	i := slices.IndexFunc(sp.Endpoints, func(ep ServiceEndpoint) bool { return AffinityCookie(cfg.Generation, ep) == r.Cookie })
	if i < 0 {
		return AffinityRemainderFlow{}, false
	}
	ep := sp.Endpoints[i]
	b := builder{p: std, cfg: cfg}
	m := Match{EthType: sp.ethType(), Regs: []RegMark{{Range: ServicePortField, Value: sp.ID}}}
	if sp.IPv6() {
		m.IPv6Src = hostPrefix6(r.Client)
	} else {
		m.IPSrc = hostPrefix(r.Client)
	}
	f := b.in(StageServiceAffinity).flow(Owner{Kind: OwnerServiceAffinity, ID: ep.AffinityID}, PriorityAffinityRemainder,
		m, Load{Dst: AffinityEndpointIPField, Value: uint64(affinityEndpointValue(sp, ep))},
		Load{Dst: AffinityEndpointField, Value: uint64(ep.Port) | 1<<16})
	return AffinityRemainderFlow{Flow: f, IdleTimeout: uint16(min(sp.AffinitySeconds-uint32(limit), MaxLearnTimeout))}, true
}

// affinityLearn is the learn action that remembers ep for the packet's client and Service
// port (the packet's nw_src and reg5, which service_lb loaded with sp.ID).
func (b builder) affinityLearn(sp ServicePort, ep ServiceEndpoint) Learn {
	idle, rem := AffinityLearnTimeout(b.cfg, sp.AffinitySeconds)
	client := FieldIPSrc
	if sp.IPv6() {
		client = FieldIPv6Src
	}
	l := Learn{Table: b.goTo(StageServiceAffinity).Table, IdleTimeout: idle, Priority: PriorityAffinityLearned,
		Cookie: AffinityCookie(b.cfg.Generation, ep),
		Match: []LearnMatch{{Field: fieldEthType, Imm: uint64(sp.ethType()), HasImm: true},
			{Field: client}, {Field: ServicePortField.Field}},
		Load: []LearnLoad{{Dst: AffinityEndpointIPField, Value: uint64(affinityEndpointValue(sp, ep))},
			{Dst: AffinityEndpointField, Value: uint64(ep.Port) | 1<<16}}}
	if rem {
		l.Flags |= LearnSendFlowRem
	}
	return l
}

// ServicePortOwner is the owner of sp's flows and group (kind OwnerService, id sp.ID).
func ServicePortOwner(sp ServicePort) Owner { return Owner{Kind: OwnerService, ID: sp.ID} }

// ServiceGroupID is the group id of sp: GroupIDMin + sp.ID.
func ServiceGroupID(sp ServicePort) uint32 { return GroupIDMin + sp.ID }

// ServicePortFlows returns the Service port's flows in service_lb (one per frontend:
// ServicePort.AllFrontends, a load-balancer IP one per source range and a drop) and,
// with endpoints, its select group (owner ServicePortOwner; the group must be on the
// switch before the flow, switchstate's replay order), last, after its part groups when
// its endpoints need them ("Endpoints beyond one group mod"), or a UDP port's slot flows.
// cfg must have Services on, sp must be valid (ServicePort.Validate).
//
//	table="service_lb", priority=100,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_dst=VIP,tp_dst=PORT actions=group:G
//	table="service_lb", priority=90,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_dst=NODEIP,tp_dst=NODEPORT actions=group:G
//	group_id=G,type=select,bucket=actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=EP:TPORT)),...
//	no endpoints: ... actions=meter:2,controller(max_len=128)
//
// A UDP port (ServiceHashSelect) has no group: its flows choose by multipath and its slot
// flows in service_endpoint DNAT (serviceSlotFlows).
func ServicePortFlows(cfg NodeConfig, sp ServicePort) ([]Flow, []Group) {
	return builder{p: std, cfg: cfg}.servicePortFlows(sp)
}

func (b builder) servicePortFlows(sp ServicePort) ([]Flow, []Group) {
	s := b.in(StageServiceLB)
	// lb returns the port's flows in service_lb, one per frontend (and source range),
	// each running acts (and meter); a load-balancer IP's disallowed sources are dropped.
	lb := func(meter uint32, acts ...Action) []Flow {
		var fs []Flow
		for _, fe := range sp.AllFrontends() {
			m := Match{EthType: sp.ethType(), IPProto: sp.Proto, Regs: []RegMark{FromPod},
				TPDst: fe.Port, TPDstMask: 0xffff, CTState: &CTState{Set: CTNew | CTTrk}}
			m.setIPDst(fe.IP)
			prio := PriorityServicePort
			if fe.NodePort {
				prio = PriorityServiceNodePort
			}
			if len(fe.SourceRanges) == 0 {
				f := s.flow(ServicePortOwner(sp), prio, m, acts...)
				f.Meter = meter
				fs = append(fs, f)
				continue
			}
			for _, r := range fe.SourceRanges {
				rm := m
				if sp.IPv6() {
					rm.IPv6Src = r
				} else {
					rm.IPSrc = r
				}
				f := s.flow(ServicePortOwner(sp), PriorityServiceSourceRange, rm, acts...)
				f.Meter = meter
				fs = append(fs, f)
			}
			fs = append(fs, s.flow(ServicePortOwner(sp), prio, m))
		}
		return fs
	}
	if len(sp.Endpoints) == 0 {
		return lb(ServiceRejectMeter, OutputController{MaxLen: ServiceRejectMaxLen}), nil
	}
	l3, epTable := b.goTo("l3_forwarding").Table, TableID(0)
	if sp.AffinitySeconds != 0 {
		epTable = b.goTo(StageServiceEndpoint).Table
	}
	dnat := func(ep ServiceEndpoint) CT { return serviceDNAT(ep, l3) }
	// choose is what picks the endpoint: the port's select group, or for a UDP port
	// (ServiceHashSelect) the multipath hash into a slot and its slot flows.
	var choose []Action
	var groups []Group
	var slots []Flow
	if ServiceHashSelect(sp) {
		choose, slots = b.serviceSlotFlows(sp, dnat)
	} else {
		var buckets []Bucket
		for _, ep := range sp.Endpoints {
			buckets = append(buckets, serviceBucket(sp, ep, l3, epTable))
		}
		groups = serviceGroups(sp, buckets)
		choose = []Action{GroupAction{ID: groups[len(groups)-1].ID}}
	}
	if sp.AffinitySeconds == 0 {
		if slots != nil {
			return append(lb(0, append(choose, b.goTo(StageServiceEndpoint))...), slots...), nil
		}
		return lb(0, choose...), groups
	}
	if slots != nil {
		// service_lb loaded reg5 already (below); the slot flows are in service_endpoint
		// itself: resubmit there.
		choose = append(choose[1:], Resubmit{Table: epTable})
	}
	// Affinity: every frontend names the port in reg5 and looks the client up in the
	// learned flows (one per client and port, whatever the frontend), then DNATs to the
	// endpoint they name if it is still one of the port's, else goes to the port's choice:
	// the group (whose bucket names its endpoint for the same endpoint flow, which
	// learns) or, UDP, the multipath and the slot flows (priority 150, above the port's
	// flow: they learn). The DNAT's reply is un-NATed to whichever frontend the client
	// used (conntrack).
	port := RegMark{Range: ServicePortField, Value: sp.ID}
	fs := lb(0, LoadMark(port), Resubmit{Table: b.goTo(StageServiceAffinity).Table}, s.next())
	e := b.in(StageServiceEndpoint)
	for _, ep := range sp.Endpoints {
		hm := Match{EthType: sp.ethType(), Regs: []RegMark{{Range: AffinityEndpointIPField, Value: affinityEndpointValue(sp, ep)},
			{Range: AffinityEndpointField, Value: uint32(ep.Port) | 1<<16}, port}}
		fs = append(fs, e.flow(ServicePortOwner(sp), PriorityAffinityLearned, hm, b.affinityLearn(sp, ep), dnat(ep)))
	}
	fs = append(fs, e.flow(ServicePortOwner(sp), PriorityServicePort, Match{EthType: sp.ethType(), Regs: []RegMark{port}}, choose...))
	return append(fs, slots...), groups
}

// ServiceHashSelect reports whether a new flow to sp picks its endpoint by the multipath
// hash and sp's slot flows in service_endpoint rather than by a select group: a UDP port
// with 1..MaxMultipathLinks endpoints ("UDP Service ports"). Such a port has no group.
func ServiceHashSelect(sp ServicePort) bool {
	return sp.Proto == IPProtoUDP && len(sp.Endpoints) > 0 && len(sp.Endpoints) <= MaxMultipathLinks
}

// serviceSlotFlows returns a hash-selected port's choice (ServiceHashSelect): the actions
// that load its id into ServicePortField and the new flow's slot into ServiceSlotField
// (multipath over the port's slots; no multipath for one slot, the register's 0 is it),
// and the port's slot flows in service_endpoint, one per aligned block of an endpoint's
// slots (serviceSlots, slotBlocks): its DNAT, with session affinity after the learn
// action (as the endpoint's hit flow does).
//
//	table="service_lb", ...,udp,...,nw_dst=VIP,tp_dst=PORT actions=load:ID->NXM_NX_REG5[],multipath(symmetric_l3l4+udp,0,modulo_n,N,0,NXM_NX_REG6[0..15]),goto_table:"service_endpoint"
//	table="service_endpoint", priority=150,udp,reg5=ID,reg6=SLOT actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=EP:TPORT))
func (b builder) serviceSlotFlows(sp ServicePort, dnat func(ServiceEndpoint) CT) ([]Action, []Flow) {
	starts, counts, total := serviceSlots(sp)
	port := RegMark{Range: ServicePortField, Value: sp.ID}
	choose := []Action{LoadMark(port)}
	if total > 1 {
		choose = append(choose, Multipath{Fields: HashSymmetricL3L4UDP, Algorithm: MultipathModuloN, Links: total, Dst: ServiceSlotField})
	}
	e := b.in(StageServiceEndpoint)
	var fs []Flow
	for i, ep := range sp.Endpoints {
		acts := []Action{dnat(ep)}
		if sp.AffinitySeconds != 0 {
			acts = []Action{b.affinityLearn(sp, ep), dnat(ep)}
		}
		for _, blk := range slotBlocks(starts[i], counts[i]) {
			m := Match{EthType: sp.ethType(), IPProto: sp.Proto, Regs: []RegMark{port, blk}}
			fs = append(fs, e.flow(ServicePortOwner(sp), PriorityServiceSlot, m, acts...))
		}
	}
	return choose, fs
}

// serviceSlots returns the hash slots of sp's endpoints: endpoint i owns slots
// starts[i] .. starts[i]+counts[i]-1 of 0..total-1, in endpoint order, as many as its
// weight (0 counts as 1) after dividing every weight by their greatest common divisor;
// where the weights sum to more than MaxMultipathLinks, each endpoint gets 1 + its
// proportional share of the slots left after one each (so every endpoint keeps a slot and
// the shares stay within one slot of the weights'). Needs 1..MaxMultipathLinks endpoints.
func serviceSlots(sp ServicePort) (starts, counts []uint32, total uint32) {
	ws := make([]uint64, len(sp.Endpoints))
	var g, sum uint64
	for i, ep := range sp.Endpoints {
		ws[i] = uint64(max(ep.Weight, 1))
		a, b := g, ws[i]
		for b != 0 {
			a, b = b, a%b
		}
		g = a
	}
	for i := range ws {
		ws[i] /= g
		sum += ws[i]
	}
	starts, counts = make([]uint32, len(ws)), make([]uint32, len(ws))
	budget := uint64(MaxMultipathLinks - len(ws))
	for i, w := range ws {
		if sum > MaxMultipathLinks {
			w = 1 + w*budget/sum
		}
		starts[i], counts[i] = total, uint32(w)
		total += uint32(w)
	}
	return starts, counts, total
}

// slotBlocks returns the slots start .. start+n-1 as ServiceSlotField matches, the
// fewest aligned power-of-two blocks (a block of 2^k slots matches bits k..15 only).
func slotBlocks(start, n uint32) []RegMark {
	var out []RegMark
	for n > 0 {
		k := min(bits.TrailingZeros32(start), 15) // 32 for slot 0
		for uint32(1)<<k > n {
			k--
		}
		out = append(out, RegMark{Range: FieldRange{Field: ServiceSlotField.Field, Start: uint8(k), End: ServiceSlotField.End}, Value: start >> k})
		start += 1 << k
		n -= 1 << k
	}
	return out
}

// serviceConntrackNode: every IP packet through ct(nat) in ConntrackZone, then service_lb.
//
//	table="service_conntrack", priority=1,ip actions=ct(table="service_lb",zone=65280,nat)
//
// A hairpin reply comes here tracked, from service_hairpin's ct in HairpinZone (every
// other packet untracked): it gets the hairpin mark and the same ct(nat).
//
//	table="service_conntrack", priority=105,ct_state=+rpl+trk,ip actions=load:0x1->NXM_NX_REG0[4],ct(table="service_lb",zone=65280,nat)
//
// On a dual-stack node IPv6 has the same two flows (ipv6), in the same zone (on an
// IPv6-only node, the IPv6 ones alone): OVS's
// conntrack keys its entries by address family too (the tuple's dl_type), so an IPv6
// connection never meets an IPv4 one there, and the NetworkPolicy stages, which read
// the state this lookup leaves, keep one zone for both families.
func serviceConntrackNode(b builder) []Flow {
	s := b.in(StageServiceConntrack)
	var fs []Flow
	for _, et := range b.serviceFamilies() {
		fs = append(fs,
			s.flow(PipelineOwner, PriorityHairpinReply, Match{EthType: et, CTState: &CTState{Set: CTTrk | CTRpl}},
				LoadMark(HairpinMark), CT{Zone: ConntrackZone, Table: s.next().Table, NAT: &CTNAT{}}),
			s.flow(PipelineOwner, PriorityPass, Match{EthType: et},
				CT{Zone: ConntrackZone, Table: s.next().Table, NAT: &CTNAT{}}))
	}
	return fs
}

// serviceFamilies are the EthTypes whose Services the node load-balances: IPv4, and
// IPv6 on a dual-stack node; IPv6 alone on an IPv6-only node (ipFamilies).
func (b builder) serviceFamilies() []uint16 { return ipFamilies(b.cfg) }

// serviceHairpinNode: a packet for HairpinSNATIP (a pod's reply to a hairpin connection)
// through ct(nat) in HairpinZone, which turns its destination back into the pod's own
// address and port, then service_conntrack; the rest goes on (the miss).
//
//	table="service_hairpin", priority=110,ip,nw_dst=169.254.0.252 actions=ct(table="service_conntrack",zone=65281,nat)
//
// On a dual-stack node, the same for HairpinSNATIPv6 (on an IPv6-only node, that alone):
//
//	table="service_hairpin", priority=110,ipv6,ipv6_dst=fc00::a9fe:fc actions=ct(table="service_conntrack",zone=65281,nat)
func serviceHairpinNode(b builder) []Flow {
	s := b.in(StageServiceHairpin)
	var fs []Flow
	if b.cfg.IPv4() {
		fs = append(fs, s.flow(PipelineOwner, PriorityHairpin, Match{EthType: EthTypeIPv4, IPDst: hostPrefix(HairpinSNATIP)},
			CT{Zone: HairpinZone, Table: s.next().Table, NAT: &CTNAT{}}))
	}
	if ipv6On(b.cfg) {
		fs = append(fs, s.flow(PipelineOwner, PriorityHairpin, Match{EthType: EthTypeIPv6, IPv6Dst: hostPrefix6(HairpinSNATIPv6)},
			CT{Zone: HairpinZone, Table: s.next().Table, NAT: &CTNAT{}}))
	}
	return fs
}

// hairpinToPod: a pod's packet to itself (after the DNAT of its own Service) is SNATed to
// HairpinSNATIP in HairpinZone and sent back out of its port (output's hairpin flow).
//
//	table="l3_forwarding", priority=110,ip,nw_src=IP,nw_dst=IP actions=set_field:MAC->eth_dst,load:P->NXM_NX_REG1[],load:0x1->NXM_NX_REG0[4],ct(commit,table=output,zone=65281,nat(src=169.254.0.252))
func hairpinToPod(b builder, pod Pod) Flow {
	return b.in("l3_forwarding").flow(PodOwner(pod), PriorityHairpin,
		Match{EthType: EthTypeIPv4, IPSrc: hostPrefix(pod.IPv4()), IPDst: hostPrefix(pod.IPv4())},
		SetEthDst{pod.MAC}, Load{Dst: OutPortField, Value: uint64(pod.OFPort)}, LoadMark(HairpinMark),
		CT{Commit: true, Zone: HairpinZone, Table: b.goTo("output").Table, NAT: &CTNAT{SNAT: true, MinIP: HairpinSNATIP}})
}

// hairpinToPodIPv6 is hairpinToPod for the pod's IPv6 address (a dual-stack node): SNAT
// to HairpinSNATIPv6.
//
//	table="l3_forwarding", priority=110,ipv6,ipv6_src=IP6,ipv6_dst=IP6 actions=set_field:MAC->eth_dst,load:P->NXM_NX_REG1[],load:0x1->NXM_NX_REG0[4],ct(commit,table=output,zone=65281,nat(src=fc00::a9fe:fc))
func hairpinToPodIPv6(b builder, pod Pod, ip net.IP) Flow {
	return b.in("l3_forwarding").flow(PodOwner(pod), PriorityHairpin,
		Match{EthType: EthTypeIPv6, IPv6Src: hostPrefix6(ip), IPv6Dst: hostPrefix6(ip)},
		SetEthDst{pod.MAC}, Load{Dst: OutPortField, Value: uint64(pod.OFPort)}, LoadMark(HairpinMark),
		CT{Commit: true, Zone: HairpinZone, Table: b.goTo("output").Table, NAT: &CTNAT{SNAT: true, MinIP: HairpinSNATIPv6}})
}

// outputHairpin sends a hairpin packet (either direction) back out of its in_port, from
// the gateway's MAC.
//
//	table=output, priority=110,reg0=0x10/0x10 actions=set_field:GWMAC->eth_src,IN_PORT
func outputHairpin(b builder) Flow {
	return b.in("output").flow(PipelineOwner, PriorityHairpin, Match{Regs: []RegMark{HairpinMark}},
		SetEthSrc{b.cfg.GatewayMAC}, OutputInPort{})
}

// serviceDNAT is an endpoint's translation: ct(commit, zone=ConntrackZone, nat(dst=EP:PORT),
// table=l3) (l3 is l3_forwarding's table).
func serviceDNAT(ep ServiceEndpoint, l3 TableID) CT {
	ip := ep.IP.To4()
	if ip == nil {
		ip = ep.IP.To16()
	}
	return CT{Commit: true, Zone: ConntrackZone, Table: l3, NAT: &CTNAT{DNAT: true, MinIP: ip, MinPort: ep.Port}}
}

// serviceBucket is endpoint ep's bucket in sp's select group: its DNAT (serviceDNAT to
// table l3), or with session affinity the loads of the endpoint into reg3/reg4 and a
// resubmit to service_endpoint (epTable), whose endpoint flow learns and DNATs.
func serviceBucket(sp ServicePort, ep ServiceEndpoint, l3, epTable TableID) Bucket {
	w := ep.Weight
	if w == 0 {
		w = 1
	}
	acts := []Action{serviceDNAT(ep, l3)}
	if sp.AffinitySeconds != 0 {
		// The bucket names the endpoint in reg3/reg4, as a learned flow does, and the
		// endpoint's flow in service_endpoint learns and DNATs.
		acts = []Action{Load{Dst: AffinityEndpointIPField, Value: uint64(affinityEndpointValue(sp, ep))},
			Load{Dst: AffinityEndpointField, Value: uint64(ep.Port) | 1<<16},
			Resubmit{Table: epTable}}
	}
	return Bucket{Weight: w, Actions: acts}
}

// Endpoints beyond one group mod. One OpenFlow message is at most 65,535 bytes
// (MaxGroupModLen), a bucket with its DNAT about 70 bytes, so one group mod carries some
// 900 endpoints; Antrea's OpenFlow 1.3 select groups stop there. OpenFlow 1.5's
// OFPGC_INSERT_BUCKET would let a group grow by several messages, but an OpenFlow 1.3
// switch has only whole-group mods. So a Service port whose buckets do not fit one group
// mod gets a two-level tree of select groups, each sent in one message: part groups
// (ServicePort.GroupParts, ids the caller allocates), a power of two of them (OVS's
// dp_hash maps 2^k hash values to a group's buckets, so 6 parts shared 3:2; 8 share
// evenly), holding an even share of the endpoints' buckets each, and the port's group (ServiceGroupID) with one bucket per part,
// group:PART, weighted by the sum of its endpoints' weights, so every endpoint keeps its
// share of new connections (scaled down, proportionally, where a part's sum exceeds a
// bucket weight's 65,535). The switch hashes twice: on OVS 3.1 the port's group (at most
// 64 buckets) uses dp_hash and the part groups (over 64 buckets each, since parts are
// even and only exist above ~900 endpoints) the default selection on the flow's fields,
// two different hashes, so the choice within a part does not depend on the choice of the
// part (TestServiceManyEndpointsOnSwitch counts the endpoints reached). All of it goes to
// the switch in the one bundle of the change (switchstate orders a group after the
// groups it chains to), so a client never sees a half-built tree. The port's group is at
// most MaxGroupModLen too: 2,048 parts (a power of two) of ~900, about 1.8 million
// endpoints per Service port (Validate says so beyond). Groups of at most 64 buckets keep
// OVS's dp_hash quantization: a 6-endpoint Service port shares 3:2 as well (left as is).

// ServiceGroupParts returns how many part groups sp's endpoints need: 0 when one group
// mod carries every bucket, else n ≥ 2 (ServicePort.GroupParts must then hold n ids).
func ServiceGroupParts(sp ServicePort) int {
	if ServiceHashSelect(sp) {
		return 0 // no group at all
	}
	bs := make([]Bucket, 0, len(sp.Endpoints))
	for _, ep := range sp.Endpoints {
		bs = append(bs, serviceBucket(sp, ep, 1, 1)) // table ids do not change the size
	}
	return len(splitBuckets(bs))
}

// splitBuckets returns bs split evenly into the fewest parts, a power of two, that each
// fit one group mod, or nil when all of bs fits one.
func splitBuckets(bs []Bucket) [][]Bucket {
	total := 0
	for _, b := range bs {
		total += b.wireLen()
	}
	if groupModFixedLen+total <= MaxGroupModLen {
		return nil
	}
	// A power of two of parts: OVS 3.1's dp_hash select maps 2^k hash values to the
	// buckets (16 for 6 buckets, 3 or 2 each), so only a power of two of equal parts
	// shares evenly (6 parts measured 375:250 per part).
	n := 2
	for n*(MaxGroupModLen-groupModFixedLen) < total {
		n *= 2
	}
	for ; ; n *= 2 {
		parts := make([][]Bucket, n)
		fits := true
		for i := range parts {
			parts[i] = bs[i*len(bs)/n : (i+1)*len(bs)/n]
			if (Group{Buckets: parts[i]}).WireLen() > MaxGroupModLen {
				fits = false
				break
			}
		}
		if fits {
			return parts
		}
	}
}

// serviceGroups returns sp's groups for buckets: its select group alone, or (above one
// group mod) the part groups, then the port's group over them. The port's group is last.
func serviceGroups(sp ServicePort, buckets []Bucket) []Group {
	parts := splitBuckets(buckets)
	if parts == nil {
		return []Group{{ID: ServiceGroupID(sp), Type: GroupSelect, Buckets: buckets}}
	}
	var out []Group
	sums := make([]uint64, len(parts))
	var most uint64
	for i, p := range parts {
		for _, b := range p {
			sums[i] += uint64(b.Weight)
		}
		most = max(most, sums[i])
		out = append(out, Group{ID: sp.GroupParts[i], Type: GroupSelect, Buckets: p})
	}
	top := Group{ID: ServiceGroupID(sp), Type: GroupSelect}
	for i := range parts {
		w := sums[i]
		if most > 65535 {
			w = max(1, w*65535/most)
		}
		top.Buckets = append(top.Buckets, Bucket{Weight: uint16(w), Actions: []Action{GroupAction{ID: out[i].ID}}})
	}
	return append(out, top)
}
