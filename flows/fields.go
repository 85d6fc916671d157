package flows

// Register and cookie layout of the pipeline, defined once.
//
// Design history: flows never name a raw register or shift cookie bits themselves;
// they use the typed values below (after Antrea's pkg/agent/openflow/fields.go and
// cookie/allocator.go). Adding a register use or a cookie field is a change to this
// file, and to PipelineVersion when it changes what is on the switch.

import (
	"fmt"

	"github.com/contiv/libOpenflow/openflow13"
)

// NXMField is a packet or metadata field addressable by its NXM/OXM header, as the
// Nicira extension actions (move, load, output:field) and register matches name it.
// Bits is the field's width in bits.
type NXMField struct {
	// Name is the field's NXM name as ovs-ofctl prints it, e.g. "NXM_NX_REG0".
	Name string
	// Class is the NXM/OXM class (0x0000 NXM_OF, 0x0001 NXM_NX, 0x8000 OXM basic).
	Class uint16
	// Field is the field number within Class.
	Field uint8
	// Bits is the width of the field in bits (32 for a register, 48 for a MAC).
	Bits uint8
}

// header returns the field as a libOpenflow match field header (no value, no mask), the
// form the NXM actions carry (nicira-ext.h nx_action_reg_move, nx_action_reg_load).
func (f NXMField) header() *openflow13.MatchField {
	return &openflow13.MatchField{Class: f.Class, Field: f.Field, Length: f.Bits / 8}
}

// reg returns NXM_NX_REGn, a 32-bit scratch register that lives for one packet's trip
// through the pipeline (OVS registers, ovs-fields(7) "Register Fields").
func reg(n uint8) NXMField {
	return NXMField{Name: fmt.Sprintf("NXM_NX_REG%d", n), Class: openflow13.OXM_CLASS_NXM_1, Field: openflow13.NXM_NX_REG0 + n, Bits: 32}
}

// Fields that move and load actions may name. Registers are reached through the
// FieldRange values below (SourceClassField, OutPortField), never directly.
var (
	// FieldEthSrc is the Ethernet source address (NXM_OF_ETH_SRC, 48 bits).
	FieldEthSrc = NXMField{Name: "NXM_OF_ETH_SRC", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_ETH_SRC, Bits: 48}
	// FieldEthDst is the Ethernet destination address (NXM_OF_ETH_DST, 48 bits).
	FieldEthDst = NXMField{Name: "NXM_OF_ETH_DST", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_ETH_DST, Bits: 48}
	// FieldARPOp is the ARP opcode (NXM_OF_ARP_OP, 16 bits: 1 request, 2 reply).
	FieldARPOp = NXMField{Name: "NXM_OF_ARP_OP", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_ARP_OP, Bits: 16}
	// FieldARPSpa is the ARP sender protocol (IPv4) address (NXM_OF_ARP_SPA, 32 bits).
	FieldARPSpa = NXMField{Name: "NXM_OF_ARP_SPA", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_ARP_SPA, Bits: 32}
	// FieldARPTpa is the ARP target protocol (IPv4) address (NXM_OF_ARP_TPA, 32 bits).
	FieldARPTpa = NXMField{Name: "NXM_OF_ARP_TPA", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_ARP_TPA, Bits: 32}
	// FieldARPSha is the ARP sender hardware address (NXM_NX_ARP_SHA, 48 bits).
	FieldARPSha = NXMField{Name: "NXM_NX_ARP_SHA", Class: openflow13.OXM_CLASS_NXM_1, Field: openflow13.NXM_NX_ARP_SHA, Bits: 48}
	// FieldARPTha is the ARP target hardware address (NXM_NX_ARP_THA, 48 bits).
	FieldARPTha = NXMField{Name: "NXM_NX_ARP_THA", Class: openflow13.OXM_CLASS_NXM_1, Field: openflow13.NXM_NX_ARP_THA, Bits: 48}
	// FieldIPSrc is the IPv4 source address (NXM_OF_IP_SRC, 32 bits).
	FieldIPSrc = NXMField{Name: "NXM_OF_IP_SRC", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_IP_SRC, Bits: 32}
	// FieldIPDst is the IPv4 destination address (NXM_OF_IP_DST, 32 bits).
	FieldIPDst = NXMField{Name: "NXM_OF_IP_DST", Class: openflow13.OXM_CLASS_NXM_0, Field: openflow13.NXM_OF_IP_DST, Bits: 32}
	// FieldIPv6Src is the IPv6 source address (NXM_NX_IPV6_SRC, 128 bits): the client a
	// learned IPv6 session-affinity flow matches.
	FieldIPv6Src = NXMField{Name: "NXM_NX_IPV6_SRC", Class: openflow13.OXM_CLASS_NXM_1, Field: 19, Bits: 128}
)

// FieldRange is the bit range Start..End (inclusive, bit 0 = least significant) of a
// field, as OVS writes it: NXM_NX_REG0[0..3]; the whole field prints as NXM_NX_REG1[].
type FieldRange struct {
	// Field is the field the range lies in.
	Field NXMField
	// Start is the first (lowest) bit of the range.
	Start uint8
	// End is the last (highest) bit of the range, inclusive; End >= Start, End < Field.Bits.
	End uint8
}

// Whole returns the range covering all of f.
func Whole(f NXMField) FieldRange { return FieldRange{Field: f, Start: 0, End: f.Bits - 1} }

// Bits returns the width of the range in bits (1..64).
func (r FieldRange) Bits() uint8 { return r.End - r.Start + 1 }

// Mask returns the range as a mask over a 32-bit register (for register matches);
// it is only meaningful for fields of at most 32 bits.
func (r FieldRange) Mask() uint32 {
	return uint32((uint64(1)<<r.Bits() - 1) << r.Start)
}

// ofsNbits encodes the range as NXM actions carry it: offset << 6 | (nbits - 1)
// (nicira-ext.h, "ofs_nbits").
func (r FieldRange) ofsNbits() uint16 { return uint16(r.Start)<<6 | uint16(r.Bits()-1) }

// String returns the range as ovs-ofctl prints it: NXM_NX_REG0[0..3], NXM_NX_REG1[],
// or NXM_NX_REG0[5] for a single bit.
func (r FieldRange) String() string {
	switch {
	case r.Start == 0 && r.End == r.Field.Bits-1:
		return r.Field.Name + "[]"
	case r.Start == r.End:
		return fmt.Sprintf("%s[%d]", r.Field.Name, r.Start)
	default:
		return fmt.Sprintf("%s[%d..%d]", r.Field.Name, r.Start, r.End)
	}
}

// RegMark is a value in a register bit range: matched with Match.Regs, set with
// LoadMark. Value is in units of the range (not shifted): SourceClassField = 2 is
// reg0=0x2/0xf.
type RegMark struct {
	// Range is the register bit range.
	Range FieldRange
	// Value is the value of the range, 0 .. 2^Range.Bits()-1.
	Value uint32
}

// Registers used by the pipeline (OVS has 32-bit registers reg0..reg15, ovs-fields(7)).
// They start at 0 for every packet and live for its one pass through the tables.
var (
	// SourceClassField is reg0[0..3]: which kind of port the packet entered by, set by
	// the classifier stage. Values: SourceGateway (1), SourcePod (2), SourceTunnel (3);
	// 0 never leaves the classifier (unknown ports are dropped there).
	SourceClassField = FieldRange{Field: reg(0), Start: 0, End: 3}

	// OutPortField is reg1 (all 32 bits): the ofport the packet leaves by, set in the arp,
	// l3_forwarding and egress stages and used by the output stage (output:reg1).
	// 0 means "not decided yet": ofport 0 is not a valid port (OpenFlow 1.3.5 §7.2.1).
	OutPortField = FieldRange{Field: reg(1), Start: 0, End: 31}

	// HairpinField is reg0[4]: set on a hairpin packet (a pod reaching itself through its
	// own Service, either direction; service.go), which the output stage sends back out
	// of its in_port.
	HairpinField = FieldRange{Field: reg(0), Start: 4, End: 4}

	// ScratchField is reg2 (all 32 bits): a temporary within one flow's action list, e.g.
	// the ARP responder's swap of arp_spa and arp_tpa (PeerFlows). No flow matches it and
	// no stage reads a value another stage wrote there.
	ScratchField = FieldRange{Field: reg(2), Start: 0, End: 31}

	// AffinityEndpointIPField is reg3 (all 32 bits): the IPv4 endpoint a learned
	// session-affinity flow remembers for the packet's client and Service port, loaded in
	// service_affinity and matched in service_endpoint (0 = none).
	AffinityEndpointIPField = FieldRange{Field: reg(3), Start: 0, End: 31}
	// AffinityEndpointField is reg4[0..16]: the remembered endpoint's port (bits 0..15)
	// and bit 16 set when a learned flow matched, loaded and matched with
	// AffinityEndpointIPField.
	AffinityEndpointField = FieldRange{Field: reg(4), Start: 0, End: 16}

	// ServicePortField is reg5 (all 32 bits): the owner id (ServicePort.ID) of the Service
	// port a new connection is for (0 = none: ids start at 1). A UDP port loads it with
	// the hash slot in ServiceSlotField before the multipath action, and its slot flows in
	// service_endpoint match it; a session-affinity port's service_lb flows (every
	// frontend's) load it before the look-up in service_affinity, and the learned flows
	// key on it and the client's address, so a client has one affinity per Service port
	// whatever frontend it comes through, as kube-proxy's.
	ServicePortField = FieldRange{Field: reg(5), Start: 0, End: 31}
	// ServiceSlotField is reg6[0..15]: the hash slot, 0..slots-1, the multipath action
	// chose for a new UDP flow to a Service port (service.go, "UDP Service ports").
	ServiceSlotField = FieldRange{Field: reg(6), Start: 0, End: 15}
)

// SourceClass values of SourceClassField (reg0[0..3]).
const (
	// SourceGateway: from the gateway port (the host). Trusted for source addresses.
	SourceGateway uint32 = 1
	// SourcePod: from a local pod's port. Checked by the spoof_guard stage.
	SourcePod uint32 = 2
	// SourceTunnel: from the tunnel port (VXLAN/Geneve from a peer node). Checked by the
	// tunnel_ingress stage.
	SourceTunnel uint32 = 3
)

// Register marks matched and set by the pipeline.
var (
	// FromGateway marks a packet that entered by the gateway port (reg0[0..3]=1).
	FromGateway = RegMark{Range: SourceClassField, Value: SourceGateway}
	// FromPod marks a packet that entered by a local pod's port (reg0[0..3]=2).
	FromPod = RegMark{Range: SourceClassField, Value: SourcePod}
	// FromTunnel marks a packet that entered by the tunnel port (reg0[0..3]=3).
	FromTunnel = RegMark{Range: SourceClassField, Value: SourceTunnel}
	// HairpinMark marks a hairpin packet (reg0[4]=1).
	HairpinMark = RegMark{Range: HairpinField, Value: 1}
	// OutPortUnset matches a packet whose output port is not decided yet (reg1=0).
	OutPortUnset = RegMark{Range: OutPortField, Value: 0}
)

// Cookie is the 64-bit OpenFlow flow cookie (OpenFlow 1.3.5 §7.3.4.1, ofp_flow_mod.cookie)
// every ofsdn flow carries. Layout, most significant bit first:
//
//	bits 63..56  pipeline version  (8 bits)  PipelineVersion when the flow was built
//	bits 55..40  generation        (16 bits) NodeConfig.Generation: bumped at each daemon
//	                                          start so a restart can delete old flows
//	bits 39..32  owner kind        (8 bits)  OwnerPipeline (1), OwnerPod (2), OwnerPeer (3),
//	                                          OwnerPolicy (4), OwnerService (5)
//	bits 31..0   owner id          (32 bits) chosen per kind, below
//
// How each kind's owner id is chosen, and whether it survives a daemon restart:
//
//   - pipeline: always 0 (PipelineOwner), so the same at every run.
//   - pod: Pod.OwnerID, allocated with the pod's IP lease (ipam.Lease.OwnerID: round
//     robin over 1..2^32-1, unique among the node's leases) and recorded in the lease file
//     and on the pod's OVS interface: kept across restarts. A lease written before ofsdn
//     recorded owner ids has its IPv4 address as a big-endian uint32.
//   - peer: Peer.OwnerID, allocated by the controller (round robin over 1..2^32-1, unique
//     among the node's peers) and recorded, before any flow carries it, in the daemon's
//     data directory (controller.PeerIDsFile) under the peer's node name: kept across
//     restarts, and stable when the peer's node IP or pod subnet changes. A node without
//     that record (one upgraded from a build before it) gives each peer the id those
//     builds derived, the network address of its IPv4 pod subnet (LegacyPeerID).
//   - policy: the conjunction id of a conj_id flow (policy.ConjIDs), else 0 (every flow
//     shared by several conjunctions' clauses, PolicyOwner(0)). Conjunction ids are
//     allocated in memory: a restart renumbers them.
//   - service: ServicePort.ID, allocated in memory per Service port name
//     (controller/services.go): a restart renumbers them.
//
// Ids that a restart renumbers need no record: the new run's first flow sync replaces
// every flow of the earlier generation in one bundle (GenerationCookie), whatever its
// owner id, so no flow with an old id is left; a kept id only keeps an owner's cookie the
// same for operators and tools across the restart.
//
// Match cookies with a mask (OpenFlow 1.3.5 §7.3.4.1 cookie_mask; §7.3.5.2 flow stats):
// Owner.Cookie (PodCookie, PeerCookie), GenerationCookie.
//
// Design history: until PipelineVersion 3, bits 35..32 held the flow's stage (the index
// of its table), which no code read (the table id says it) and which capped the pipeline
// at 16 stages; the owner kind had 4 bits. Version 4 gives the owner kind those 8 bits.
// The version and generation fields kept their places, so a daemon of version 4 still
// finds and deletes the flows an older daemon left (GenerationCookie) and replaces them in
// one bundle at start, as at every restart.
type Cookie uint64

// OwnerKind says what a flow belongs to (cookie bits 39..32).
type OwnerKind uint8

// Owner kinds.
const (
	// OwnerPipeline: the node's own flows (table defaults, gateway), built by PipelineFlows.
	OwnerPipeline OwnerKind = 1
	// OwnerPod: one local pod's flows, built by PodFlows; owner id = Pod.OwnerID.
	OwnerPod OwnerKind = 2
	// OwnerPeer: one peer node's flows, built by PeerFlows; owner id = Peer.OwnerID.
	OwnerPeer OwnerKind = 3
	// OwnerPolicy: the NetworkPolicy rule flows (clauses and conj_id flows), built by
	// PolicyFlowSet; owner id = the conjunction id for conj_id flows, 0 for flows shared
	// by several conjunctions' clauses (PolicyOwner).
	OwnerPolicy OwnerKind = 4
	// OwnerService: one Service port's flows and its select group, built by
	// ServicePortFlows; owner id = ServicePort.ID (ServicePortOwner).
	OwnerService OwnerKind = 5
	// OwnerServiceAffinity: a learned session-affinity flow in service_affinity (not
	// built here: the switch learns it, service.go); owner id = the endpoint's
	// ServiceEndpoint.AffinityID, so deleting by that cookie forgets every client's
	// affinity to that endpoint of that Service port.
	OwnerServiceAffinity OwnerKind = 6
)

// SwitchState reports whether flows of owner kind k are the switch's own state rather
// than desired state: OwnerServiceAffinity's learned flows (made by the switch's learn
// actions). No owner of the store wants them, and
// the flow audit must leave them alone (never delete them as unexpected); they are
// deleted by their cookie or match when their endpoint or port changes.
func (k OwnerKind) SwitchState() bool { return k == OwnerServiceAffinity }

// Cookie field positions and masks.
const (
	cookieVersionShift    = 56
	cookieGenerationShift = 40
	cookieOwnerShift      = 32

	// CookieVersionMask selects the pipeline version bits (63..56) of a cookie.
	CookieVersionMask uint64 = 0xff << cookieVersionShift
	// CookieGenerationMask selects the generation bits (55..40) of a cookie.
	CookieGenerationMask uint64 = 0xffff << cookieGenerationShift
	// CookieOwnerKindMask selects the owner kind bits (39..32) of a cookie.
	CookieOwnerKindMask uint64 = 0xff << cookieOwnerShift
	// CookieOwnerIDMask selects the owner id bits (31..0) of a cookie.
	CookieOwnerIDMask uint64 = 0xffffffff
)

// NewCookie builds the cookie of a flow of this PipelineVersion.
func NewCookie(generation uint16, owner OwnerKind, ownerID uint32) Cookie {
	return Cookie(uint64(PipelineVersion)<<cookieVersionShift |
		uint64(generation)<<cookieGenerationShift |
		uint64(owner)<<cookieOwnerShift |
		uint64(ownerID))
}

// Version returns the pipeline version the flow was built with.
func (c Cookie) Version() uint8 { return uint8(uint64(c) >> cookieVersionShift) }

// Generation returns the daemon generation that installed the flow.
func (c Cookie) Generation() uint16 { return uint16(uint64(c) >> cookieGenerationShift) }

// Owner returns the owner kind.
func (c Cookie) Owner() OwnerKind { return OwnerKind(uint64(c) >> cookieOwnerShift) }

// OwnerID returns the owner id (a pod's Pod.OwnerID, a peer's Peer.OwnerID, 0 for the
// pipeline; see Cookie).
func (c Cookie) OwnerID() uint32 { return uint32(c) }

// String returns the cookie in hex as ovs-ofctl prints it (cookie=0x...).
func (c Cookie) String() string { return fmt.Sprintf("%#x", uint64(c)) }

// Owner identifies what a flow belongs to: the cookie's owner kind and owner id. One
// Owner value is both the key under which the controller keeps the owner's desired flows
// and, through Cookie, the cookie and mask that select exactly those flows on the switch,
// so the two cannot disagree. Owner is comparable (a map key).
type Owner struct {
	// Kind is the owner kind (cookie bits 39..32).
	Kind OwnerKind
	// ID is the owner id (cookie bits 31..0): see Cookie.
	ID uint32
}

// PipelineOwner owns the node's own flows (PipelineFlows).
var PipelineOwner = Owner{Kind: OwnerPipeline}

// PodOwner returns the owner of a local pod's flows (PodFlows): kind OwnerPod, id =
// p.OwnerID, unique among the node's live pods.
func PodOwner(p Pod) Owner { return Owner{Kind: OwnerPod, ID: p.OwnerID} }

// PeerOwner returns the owner of a peer's flows (PeerFlows): kind OwnerPeer, id =
// p.OwnerID, unique among the node's peers.
func PeerOwner(p Peer) Owner { return Owner{Kind: OwnerPeer, ID: p.OwnerID} }

// Cookie returns the cookie and mask that select exactly o's flows: owner kind and owner
// id, whatever their table, pipeline version and generation. Use them in an OFPFC_DELETE
// flow mod (DeleteByCookie) or a flow stats request (OpenFlow 1.3.5 §7.3.4.1, §7.3.5.2).
func (o Owner) Cookie() (cookie, mask uint64) {
	return uint64(o.Kind)<<cookieOwnerShift | uint64(o.ID), CookieOwnerKindMask | CookieOwnerIDMask
}

// String names the owner for logs and errors: "pipeline", "pod owner 7" (the pod's
// allocated owner id), "peer owner 3" (the peer's).
func (o Owner) String() string {
	switch o.Kind {
	case OwnerPipeline:
		if o.ID == 0 {
			return "pipeline"
		}
		return fmt.Sprintf("pipeline %#x", o.ID)
	case OwnerPod:
		return fmt.Sprintf("pod owner %d", o.ID)
	case OwnerPeer:
		return fmt.Sprintf("peer owner %d", o.ID)
	}
	return fmt.Sprintf("owner kind %d id %#x", o.Kind, o.ID)
}

// PodCookie returns the cookie and mask that select exactly pod's flows:
// PodOwner(pod).Cookie().
func PodCookie(pod Pod) (cookie, mask uint64) { return PodOwner(pod).Cookie() }

// PeerCookie returns the cookie and mask that select exactly peer p's flows:
// PeerOwner(p).Cookie(). They do not depend on the peer's node IP or pod subnet.
func PeerCookie(p Peer) (cookie, mask uint64) { return PeerOwner(p).Cookie() }

// GenerationCookie returns the cookie and mask that select every flow of one daemon
// generation, whatever its owner, table or pipeline version. After a restart with
// generation g, the daemon deletes generation g-1 (and older) with DeleteByCookie.
func GenerationCookie(generation uint16) (cookie, mask uint64) {
	return uint64(generation) << cookieGenerationShift, CookieGenerationMask
}
