package flows

// Flow values, their ovs-ofctl text and their OpenFlow 1.3 encoding.
//
// Design history: a Flow is plain data so that builders stay pure and tests can compare
// them as text. The text form is what `ovs-ofctl -O OpenFlow13 dump-flows --no-stats
// --names` prints for the flow on a bridge whose Flow_Table rows name the tables
// (verified against OVS 3.1 by TestFlowsOnSwitch): fields in OVS's match_format order
// (lib/match.c), values normalised the way the switch stores them (masked values,
// CIDR prefixes), names quoted unless alphanumeric (lib/namemap.c). The wire form uses
// OXM basic fields where OpenFlow 1.3 has them and Nicira extensions (NXM registers,
// NXAST_REG_LOAD, NXAST_REG_MOVE, NXAST_OUTPUT_REG) where it does not.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/contiv/libOpenflow/openflow13"
)

// Ethernet types matched by Match.EthType (IEEE 802 numbers).
const (
	// EthTypeIPv4 is IPv4 (0x0800), printed as "ip".
	EthTypeIPv4 uint16 = 0x0800
	// EthTypeARP is ARP (0x0806), printed as "arp".
	EthTypeARP uint16 = 0x0806
	// EthTypeIPv6 is IPv6 (0x86dd), printed as "ipv6" (or tcp6, udp6, sctp6, icmp6 with
	// Match.IPProto).
	EthTypeIPv6 uint16 = 0x86dd
)

// ARP opcodes (RFC 826), matched by Match.ARPOp and set by SetARPOp.
const (
	// ARPRequest is ARP opcode 1.
	ARPRequest uint16 = 1
	// ARPReply is ARP opcode 2.
	ARPReply uint16 = 2
)

// Flow is one flow entry (OpenFlow 1.3.5 §5.2): a table, a priority, a cookie, a match
// and actions. Actions run in order as one apply-actions instruction, except GotoTable,
// which becomes the goto-table instruction and must be last. No actions means drop.
type Flow struct {
	// Table is the flow table the entry lives in.
	Table TableID
	// Priority is the entry's priority (0..65535; higher wins, §5.3).
	Priority uint16
	// Cookie identifies the entry's owner, stage, generation and pipeline version.
	Cookie Cookie
	// Match selects packets (OpenFlow 1.3.5 §7.2.3).
	Match Match
	// Actions are applied in order; a GotoTable, if any, is last.
	Actions []Action
	// Meter is the OpenFlow meter the packet goes through before the actions (the
	// OFPIT_METER instruction, OpenFlow 1.3.5 §5.7: a meter band may drop it), printed
	// "meter:N" first in the actions; 0 = none.
	Meter uint32
}

// Match is a flow match (OpenFlow 1.3.5 §7.2.3 flow match fields). Zero values match
// anything: InPort 0 (not a valid ofport), EthType 0, nil addresses and pointers, ARPOp 0,
// masks 0. The IP family is the EthType: IPv4 fields (IPSrc, IPDst, ARP*) and IPv6 fields
// (IPv6Src, IPv6Dst, IPv6Label, ICMPv6Type, ICMPv6Code, ND*) each need theirs, and
// Flow.Validate names the field and the missing prerequisite (§7.2.3.6).
type Match struct {
	// InPort is the ingress ofport (OXM_OF_IN_PORT), 0 = any.
	InPort uint32
	// EthType is the Ethernet type (EthTypeIPv4, EthTypeIPv6, EthTypeARP), 0 = any. IP,
	// IPv6 and ARP fields below need the matching EthType (§7.2.3.6 prerequisites).
	EthType uint16
	// EthSrc is the Ethernet source address (dl_src), nil = any.
	EthSrc net.HardwareAddr
	// EthDst is the Ethernet destination address (dl_dst), nil = any.
	EthDst net.HardwareAddr
	// Regs are register bit ranges and their values (reg0=0x2/0xf). Marks on the same
	// register combine; they must not overlap.
	Regs []RegMark
	// TunSrc is the tunnel's outer source, nil = any: an IPv4 address matches
	// NXM_NX_TUN_IPV4_SRC (tun_src), an IPv6 one NXM_NX_TUN_IPV6_SRC (tun_ipv6_src, an
	// IPv6 underlay).
	TunSrc net.IP
	// TunDst is the tunnel's outer destination, nil = any: IPv4 NXM_NX_TUN_IPV4_DST
	// (tun_dst), IPv6 NXM_NX_TUN_IPV6_DST (tun_ipv6_dst).
	TunDst net.IP
	// IPSrc is the IPv4 source address or prefix (nw_src), nil = any; needs EthTypeIPv4.
	IPSrc *net.IPNet
	// IPDst is the IPv4 destination address or prefix (nw_dst), nil = any; needs EthTypeIPv4.
	IPDst *net.IPNet
	// ARPOp is the ARP opcode (ARPRequest, ARPReply), 0 = any; needs EthTypeARP.
	ARPOp uint16
	// ARPSpa is the ARP sender IPv4 address, nil = any; needs EthTypeARP.
	ARPSpa net.IP
	// ARPTpa is the ARP target IPv4 address, nil = any; needs EthTypeARP.
	ARPTpa net.IP
	// ARPTpaPrefix is an ARP target IPv4 prefix (arp_tpa=10.244.2.0/24, a masked
	// OXM_OF_ARP_TPA), nil = any; needs EthTypeARP; not together with ARPTpa.
	ARPTpaPrefix *net.IPNet
	// ARPSha is the ARP sender hardware address, nil = any; needs EthTypeARP.
	ARPSha net.HardwareAddr
	// ARPTha is the ARP target hardware address, nil = any; needs EthTypeARP.
	ARPTha net.HardwareAddr

	// ConjID is the conjunction id (NXM_NX_CONJ_ID), 0 = any: a flow matching conj_id=N
	// takes packets for which every clause of conjunction N matched (ovs-fields(7)
	// "Conjunctive Match Fields").
	ConjID uint32
	// CTState matches connection-tracking state flags (NXM_NX_CT_STATE), nil = any. Only
	// meaningful after a CT action with a Table (ct_state is set on recirculation).
	CTState *CTState
	// IPProto is the IPv4 protocol or IPv6 next header (OXM_OF_IP_PROTO: IPProtoTCP,
	// IPProtoUDP, IPProtoSCTP, IPProtoICMPv6, ...), 0 = any; needs EthTypeIPv4 or
	// EthTypeIPv6.
	IPProto uint8
	// TPDst is the transport destination port (tp_dst: OXM_OF_TCP_DST, UDP_DST or
	// SCTP_DST by IPProto) under TPDstMask; needs IPProto TCP, UDP or SCTP.
	TPDst uint16
	// TPDstMask selects the bits of TPDst compared: 0 = no port match, 0xffff = the
	// exact port, else a prefix mask (a block of ports, e.g. 0xfff8 = 8 ports).
	TPDstMask uint16

	// IPv6Src is the IPv6 source address under its mask (ipv6_src, OXM_OF_IPV6_SRC), nil
	// = any; needs EthTypeIPv6. The mask may be any bit mask (OVS stores the masked
	// address; a CIDR mask prints as /LEN, /128 not at all, another as an address).
	// IPv4 and IPv4-mapped addresses are refused.
	IPv6Src *net.IPNet
	// IPv6Dst is the IPv6 destination address under its mask (ipv6_dst,
	// OXM_OF_IPV6_DST), nil = any; needs EthTypeIPv6; masks as IPv6Src.
	IPv6Dst *net.IPNet
	// IPv6Label is the 20-bit IPv6 flow label (ipv6_label, OXM_OF_IPV6_FLABEL,
	// 0..0xfffff) under IPv6LabelMask; needs EthTypeIPv6.
	IPv6Label uint32
	// IPv6LabelMask selects the bits of IPv6Label compared: 0 = no label match, 0xfffff =
	// the exact label, else any mask within 20 bits.
	IPv6LabelMask uint32
	// ICMPv6Type is the ICMPv6 type (icmpv6_type, OXM_OF_ICMPV6_TYPE; ICMPv6EchoRequest,
	// ICMPv6NeighborSolicit, ...), nil = any; needs EthTypeIPv6 and IPProtoICMPv6.
	// Printed by OVS as icmp_type. Write it new(ICMPv6NeighborSolicit).
	ICMPv6Type *uint8
	// ICMPv6Code is the ICMPv6 code (icmpv6_code, OXM_OF_ICMPV6_CODE), nil = any; needs
	// EthTypeIPv6 and IPProtoICMPv6. Printed by OVS as icmp_code.
	ICMPv6Code *uint8
	// NDTarget is the neighbor discovery target address (nd_target,
	// OXM_OF_IPV6_ND_TARGET, RFC 4861 §4.3/§4.4), nil = any; needs ICMPv6Type
	// ICMPv6NeighborSolicit or ICMPv6NeighborAdvert (and ICMPv6Code nil or 0, which OVS
	// also requires of every ND field).
	NDTarget net.IP
	// NDSLL is the source link-layer address option of a neighbor solicitation (nd_sll,
	// OXM_OF_IPV6_ND_SLL), nil = any; needs ICMPv6Type ICMPv6NeighborSolicit.
	NDSLL net.HardwareAddr
	// NDTLL is the target link-layer address option of a neighbor advertisement (nd_tll,
	// OXM_OF_IPV6_ND_TLL), nil = any; needs ICMPv6Type ICMPv6NeighborAdvert.
	NDTLL net.HardwareAddr
}

// IP protocol numbers matched by Match.IPProto (IANA).
const (
	// IPProtoICMP is ICMP (1), printed "icmp".
	IPProtoICMP uint8 = 1
	// IPProtoTCP is TCP (6), printed "tcp" ("tcp6" with EthTypeIPv6).
	IPProtoTCP uint8 = 6
	// IPProtoUDP is UDP (17), printed "udp" ("udp6" with EthTypeIPv6).
	IPProtoUDP uint8 = 17
	// IPProtoSCTP is SCTP (132), printed "sctp" ("sctp6" with EthTypeIPv6).
	IPProtoSCTP uint8 = 132
	// IPProtoICMPv6 is ICMPv6 (58, RFC 4443), printed "icmp6" with EthTypeIPv6.
	IPProtoICMPv6 uint8 = 58
)

// ICMPv6 types (RFC 4443 §2.1, RFC 4861 §4) matched by Match.ICMPv6Type.
const (
	// ICMPv6EchoRequest is type 128 (RFC 4443 §4.1).
	ICMPv6EchoRequest uint8 = 128
	// ICMPv6EchoReply is type 129 (RFC 4443 §4.2).
	ICMPv6EchoReply uint8 = 129
	// ICMPv6RouterSolicit is type 133 (RFC 4861 §4.1).
	ICMPv6RouterSolicit uint8 = 133
	// ICMPv6RouterAdvert is type 134 (RFC 4861 §4.2).
	ICMPv6RouterAdvert uint8 = 134
	// ICMPv6NeighborSolicit is type 135 (RFC 4861 §4.3), the prerequisite of NDTarget
	// and NDSLL.
	ICMPv6NeighborSolicit uint8 = 135
	// ICMPv6NeighborAdvert is type 136 (RFC 4861 §4.4), the prerequisite of NDTarget
	// and NDTLL.
	ICMPv6NeighborAdvert uint8 = 136
)

// Connection-tracking state flags (ovs-fields(7) ct_state), bits of CTState.Set/Clear.
const (
	// CTNew: the packet starts a new connection (not yet committed).
	CTNew uint8 = 0x01
	// CTEst: the packet belongs to a committed connection.
	CTEst uint8 = 0x02
	// CTRel: the packet is related to a committed connection (e.g. an ICMP error).
	CTRel uint8 = 0x04
	// CTRpl: the packet is in the reply direction of its connection.
	CTRpl uint8 = 0x08
	// CTInv: conntrack could not make sense of the packet.
	CTInv uint8 = 0x10
	// CTTrk: the packet went through conntrack.
	CTTrk uint8 = 0x20
	// CTSnat: the connection's source is translated (a nat(src=...) was committed).
	CTSnat uint8 = 0x40
	// CTDnat: the connection's destination is translated (a nat(dst=...) was committed).
	CTDnat uint8 = 0x80
)

var ctStateNames = []struct {
	bit  uint8
	name string
}{{CTNew, "new"}, {CTEst, "est"}, {CTRel, "rel"}, {CTRpl, "rpl"}, {CTInv, "inv"}, {CTTrk, "trk"}, {CTSnat, "snat"}, {CTDnat, "dnat"}}

// CTState is a ct_state match: the flags in Set must be on, those in Clear off, others
// are not looked at. Printed as OVS does, flags in bit order: ct_state=-new-inv+trk.
type CTState struct {
	// Set are the CT* flags that must be on.
	Set uint8
	// Clear are the CT* flags that must be off; Set&Clear must be 0.
	Clear uint8
}

// String returns the state as ovs-fields(7) spells a ct_state match ("+new+trk"), the
// form dump-flows prints.
func (c CTState) String() string {
	var b strings.Builder
	for _, f := range ctStateNames {
		switch {
		case c.Set&f.bit != 0:
			b.WriteString("+" + f.name)
		case c.Clear&f.bit != 0:
			b.WriteString("-" + f.name)
		}
	}
	return b.String()
}

// PortNames maps ofport numbers to port names, as `ovs-ofctl --names` shows them.
type PortNames map[uint32]string

// Action is one action of a flow. The implementations are Output, OutputInPort,
// OutputReg, OutputController, GotoTable, SetEthSrc, SetEthDst, SetARPOp, SetARPSpa,
// SetARPTpa, SetARPSha, SetARPTha, SetTunDst, Load, Move, DecTTL, Conjunction, CT and
// Drop, and (Nicira extensions, learn.go and multipath.go) Learn, Resubmit and Multipath.
type Action interface {
	// format appends the action as ovs-ofctl prints it.
	format(b *strings.Builder, ports PortNames)
	// ofAction returns the action's OpenFlow encoding; nil for GotoTable and Drop.
	ofAction() openflow13.Action
}

// Output sends the packet out ofport Port (OFPAT_OUTPUT, OpenFlow 1.3.5 §7.2.5).
type Output struct {
	// Port is the ofport (1..0xffffff00).
	Port uint32
}

// OutputInPort sends the packet back out its ingress port (output to OFPP_IN_PORT),
// printed "IN_PORT". A plain Output to the ingress port is dropped by OVS.
type OutputInPort struct{}

// OutputReg sends the packet out the ofport held in a register range (NXAST_OUTPUT_REG),
// printed "output:NXM_NX_REG1[]".
type OutputReg struct {
	// Src is the register range holding the ofport.
	Src FieldRange
}

// GotoTable continues the pipeline in a later table (the OFPIT_GOTO_TABLE instruction,
// OpenFlow 1.3.5 §5.9); it must be the flow's last action.
type GotoTable struct {
	// Table is the next table; it must be greater than the flow's table.
	Table TableID
}

// SetEthSrc sets the Ethernet source address (OFPAT_SET_FIELD eth_src, §7.2.5).
type SetEthSrc struct {
	// MAC is the new address (48 bits).
	MAC net.HardwareAddr
}

// SetEthDst sets the Ethernet destination address (OFPAT_SET_FIELD eth_dst, §7.2.5).
type SetEthDst struct {
	// MAC is the new address (48 bits).
	MAC net.HardwareAddr
}

// SetARPOp sets the ARP opcode (OFPAT_SET_FIELD arp_op, §7.2.5).
type SetARPOp struct {
	// Op is the new opcode (ARPRequest, ARPReply).
	Op uint16
}

// SetARPSpa sets the ARP sender IPv4 address (OFPAT_SET_FIELD arp_spa, §7.2.5).
type SetARPSpa struct {
	// IP is the new IPv4 address.
	IP net.IP
}

// SetARPTpa sets the ARP target IPv4 address (OFPAT_SET_FIELD arp_tpa, §7.2.5).
type SetARPTpa struct {
	// IP is the new IPv4 address.
	IP net.IP
}

// SetARPSha sets the ARP sender hardware address (OFPAT_SET_FIELD arp_sha, §7.2.5).
type SetARPSha struct {
	// MAC is the new address (48 bits).
	MAC net.HardwareAddr
}

// SetARPTha sets the ARP target hardware address (OFPAT_SET_FIELD arp_tha, §7.2.5).
type SetARPTha struct {
	// MAC is the new address (48 bits).
	MAC net.HardwareAddr
}

// SetTunDst sets the tunnel's outer destination (OFPAT_SET_FIELD with the Nicira field
// NXM_NX_TUN_IPV4_DST, §7.2.5), printed "set_field:172.16.0.2->tun_dst", or for an IPv6
// address NXM_NX_TUN_IPV6_DST, printed "set_field:fd00::2->tun_ipv6_dst" (an IPv6
// underlay): a packet then output to a flow-based tunnel port (options:remote_ip=flow)
// is sent to IP.
type SetTunDst struct {
	// IP is the peer node's underlay address, IPv4 or IPv6.
	IP net.IP
}

// Load writes Value into a field range (NXAST_REG_LOAD), printed
// "load:0x2->NXM_NX_REG1[]". Value must fit in Dst.Bits() bits.
type Load struct {
	// Dst is the field range written.
	Dst FieldRange
	// Value is the value written into the range (not shifted).
	Value uint64
}

// LoadMark returns the Load that sets a register mark.
func LoadMark(m RegMark) Load { return Load{Dst: m.Range, Value: uint64(m.Value)} }

// Move copies a field range into another of the same width (NXAST_REG_MOVE), printed
// "move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]".
type Move struct {
	// Src is the range read.
	Src FieldRange
	// Dst is the range written; Dst.Bits() == Src.Bits().
	Dst FieldRange
}

// Conjunction makes the flow one clause of conjunctive match ID (NXAST_CONJUNCTION),
// printed "conjunction(ID,k/n)": the packet matches conjunction ID when, for each of the n
// clauses, some flow of that clause matches it; then the flow matching conj_id=ID (same
// table) takes it. All flows of one conjunction have the same priority, and a flow with
// Conjunction actions has no other kind of action (ovs-actions(7) "The conjunction
// action"). One flow may carry several Conjunction actions (one per conjunction its match
// is a clause of).
type Conjunction struct {
	// ID is the conjunction id (1..0xfffffffe).
	ID uint32
	// Clause is this flow's clause, 1..NClauses.
	Clause uint8
	// NClauses is the number of clauses, 2..64 (OVS refuses fewer than 2).
	NClauses uint8
}

// CT sends the packet through the connection tracker (NXAST_CT), printed
// "ct(commit,table=T,zone=Z,nat(...))" with the parts that are set (zone 0 is not printed) (ovs-actions(7) "The ct
// action"). With a Table the packet is tracked and continues in that table with ct_state
// set (recirculation): the CT action must then be the flow's last action. Without one it
// only commits (Commit) and the action list goes on with the packet as it was.
type CT struct {
	// Commit records the connection so later packets of it are +est (and replies +rpl).
	Commit bool
	// Zone is the conntrack zone (0..65535): connections in different zones are apart.
	Zone uint16
	// Table is where the tracked packet continues, 0 = none (no recirculation; table 0
	// is never a ct target here).
	Table TableID
	// NAT, if set, adds the nat part (NXAST_NAT inside the ct action's actions), printed
	// "ct(...,nat(dst=[fd00::1]-[fd00::2]:80))". See CTNAT.
	NAT *CTNAT
}

// CTNAT is the nat part of a CT action (ovs-actions(7) "The ct action", nat): with SNAT or
// DNAT and an address range it sets up the translation of a connection being committed;
// with neither ("nat" alone) it applies the translation a committed connection already
// has (for its later and reply packets). Ranges are IPv4 or IPv6, the family of the
// flow's EthType (OVS refuses a mismatch). Printed as OVS's format_NAT: "nat",
// "nat(src=10.0.0.1-10.0.0.9:1000-2000)", "nat(dst=fd00::1)" or, with ports, the IPv6
// addresses bracketed: "nat(dst=[fd00::1]-[fd00::2]:80)".
type CTNAT struct {
	// SNAT translates the source (nat(src=...)); not with DNAT.
	SNAT bool
	// DNAT translates the destination (nat(dst=...)); not with SNAT.
	DNAT bool
	// MinIP is the first address of the range, nil = no range (only with SNAT or DNAT).
	MinIP net.IP
	// MaxIP is the last address of the range, nil = MinIP alone; same family as MinIP and
	// not below it.
	MaxIP net.IP
	// MinPort is the first port of the range (1..65535), 0 = no port range; needs MinIP.
	MinPort uint16
	// MaxPort is the last port of the range, 0 = MinPort alone; not below MinPort.
	MaxPort uint16
}

// OutputController sends the packet to the controller as a packet-in (OFPAT_OUTPUT to
// OFPP_CONTROLLER, OpenFlow 1.3.5 §7.2.5) with at most MaxLen bytes of it, printed
// "CONTROLLER:MaxLen". The packet-in carries the flow's cookie and table.
type OutputController struct {
	// MaxLen is how many bytes of the packet to send (0..0xffe5).
	MaxLen uint16
}

// DecTTL decrements the IPv4 TTL and drops the packet when it reaches 0
// (OFPAT_DEC_NW_TTL, §7.2.5).
type DecTTL struct{}

// Drop states explicitly that the flow has no actions: the packet is dropped (§5.10:
// an empty action set). It must be the only action.
type Drop struct{}

// String renders the flow as `ovs-ofctl -O OpenFlow13 dump-flows --no-stats --names`
// prints it on a bridge whose tables are named after Tables(), without the leading space,
// with ports by number (as OVS prints ports it has no name for):
//
//	cookie=0x300071000000000, table=classifier, priority=100,in_port=2 actions=load:0x1->NXM_NX_REG0[0..3],goto_table:"spoof_guard"
func (f Flow) String() string { return f.Format(nil) }

// Format renders the flow like String, with ports named by ports (ofport → name) where
// it has them: exactly the dump-flows --names line when ports holds the bridge's ports.
func (f Flow) Format(ports PortNames) string {
	var b strings.Builder
	if f.Cookie != 0 {
		fmt.Fprintf(&b, "cookie=%#x, ", uint64(f.Cookie))
	}
	if name := f.Table.Name(); name != "" || f.Table != 0 {
		b.WriteString("table=")
		formatTable(&b, f.Table)
		b.WriteString(", ")
	}
	m := f.Match.format(ports)
	if f.Priority != 32768 { // OFP_DEFAULT_PRIORITY is not printed
		fmt.Fprintf(&b, "priority=%d", f.Priority)
		if m != "" {
			b.WriteByte(',')
		}
	}
	b.WriteString(m)
	if m != "" || f.Priority != 32768 {
		b.WriteByte(' ')
	}
	b.WriteString("actions=")
	if f.Meter != 0 {
		fmt.Fprintf(&b, "meter:%d,", f.Meter)
	}
	formatActions(&b, f.Actions, ports)
	return b.String()
}

// MatchKey returns the flow's identity in OpenFlow: table, priority and match (two
// entries with equal keys cannot coexist in a switch, OpenFlow 1.3.5 §6.4). Ports and
// tables are by number, so the key does not depend on names. Use it to diff desired
// flows against installed ones; a changed cookie or action list under the same key is a
// modify.
func (f Flow) MatchKey() string {
	return fmt.Sprintf("table=%d,priority=%d,%s", f.Table, f.Priority, f.Match.format(nil))
}

// Validate checks what the switch would refuse or silently change: field prerequisites
// (§7.2.3.6: ipv6_src needs EthTypeIPv6, icmpv6_type needs IPProtoICMPv6, nd_sll needs
// icmpv6_type 135, ...), register values that overflow their range, GotoTable not last or
// not forward, Drop mixed with other actions, addresses of the wrong family (an IPv6
// address in an IPv4 field, an IPv4 or IPv4-mapped one in an IPv6 field). It returns an
// error naming the flow, the field and the missing prerequisite or the problem.
func (f Flow) Validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("flow %q: %s", f.String(), fmt.Sprintf(format, a...))
	}
	m := f.Match
	ipFields := m.IPSrc != nil || m.IPDst != nil
	arpFields := m.ARPOp != 0 || m.ARPSpa != nil || m.ARPTpa != nil || m.ARPTpaPrefix != nil || m.ARPSha != nil || m.ARPTha != nil
	if ipFields && m.EthType != EthTypeIPv4 {
		return fail("nw_src/nw_dst need EthType %#04x (ip)", EthTypeIPv4)
	}
	if arpFields && m.EthType != EthTypeARP {
		return fail("arp fields need EthType %#04x (arp)", EthTypeARP)
	}
	for _, ip := range []net.IP{m.ARPSpa, m.ARPTpa} {
		if ip != nil && ip.To4() == nil {
			return fail("address %s is not IPv4", ip)
		}
	}
	for _, ip := range []net.IP{m.TunSrc, m.TunDst} {
		if ip != nil && ip.To4() == nil && len(ip) != net.IPv6len {
			return fail("tunnel address %s is neither IPv4 nor IPv6", ip)
		}
	}
	if m.ARPTpa != nil && m.ARPTpaPrefix != nil {
		return fail("ARPTpa and ARPTpaPrefix both set: use one")
	}
	if problem := m.checkIPv6(); problem != "" {
		return fail("%s", problem)
	}
	if m.IPProto != 0 && m.EthType != EthTypeIPv4 && m.EthType != EthTypeIPv6 {
		return fail("nw_proto needs EthType %#04x (ip) or %#04x (ipv6)", EthTypeIPv4, EthTypeIPv6)
	}
	if m.TPDstMask != 0 {
		if m.IPProto != IPProtoTCP && m.IPProto != IPProtoUDP && m.IPProto != IPProtoSCTP {
			return fail("tp_dst needs IPProto TCP, UDP or SCTP")
		}
		if inv := ^m.TPDstMask; inv&(inv+1) != 0 {
			return fail("tp_dst mask %#x is not a prefix mask", m.TPDstMask)
		}
		if m.TPDst&^m.TPDstMask != 0 {
			return fail("tp_dst %#x has bits outside its mask %#x", m.TPDst, m.TPDstMask)
		}
	}
	if c := m.CTState; c != nil && (c.Set&c.Clear != 0 || c.Set|c.Clear == 0) {
		return fail("ct_state %+v: flags both set and cleared, or none", *c)
	}
	for _, n := range []*net.IPNet{m.IPSrc, m.IPDst, m.ARPTpaPrefix} {
		if n != nil && (n.IP.To4() == nil || len(n.Mask) != net.IPv4len) {
			return fail("prefix %s is not IPv4", n)
		}
	}
	for _, mac := range []net.HardwareAddr{m.EthSrc, m.EthDst, m.ARPSha, m.ARPTha} {
		if mac != nil && len(mac) != 6 {
			return fail("MAC %s is not 48 bits", mac)
		}
	}
	var used [16]uint32
	for _, r := range m.Regs {
		if r.Range.Field.Class != openflow13.OXM_CLASS_NXM_1 || r.Range.Field.Field > openflow13.NXM_NX_REG15 {
			return fail("%s is not a register", r.Range)
		}
		if r.Range.End > 31 || r.Range.Start > r.Range.End {
			return fail("bad range %s", r.Range)
		}
		if uint64(r.Value) >= uint64(1)<<r.Range.Bits() {
			return fail("value %d does not fit %s", r.Value, r.Range)
		}
		if used[r.Range.Field.Field]&r.Range.Mask() != 0 {
			return fail("register marks overlap at %s", r.Range)
		}
		used[r.Range.Field.Field] |= r.Range.Mask()
	}
	conj := 0
	for _, a := range f.Actions {
		if _, ok := a.(Conjunction); ok {
			conj++
		}
	}
	if conj > 0 && conj != len(f.Actions) {
		return fail("conjunction actions cannot be mixed with other actions")
	}
	for i, a := range f.Actions {
		if need := actionEthType(a); need != 0 && m.EthType != need {
			return fail("action %d needs a match on EthType %#04x", i, need)
		}
		switch a := a.(type) {
		case GotoTable:
			if i != len(f.Actions)-1 {
				return fail("goto_table must be the last action")
			}
			if a.Table <= f.Table {
				return fail("goto_table:%d does not go forward from table %d", a.Table, f.Table)
			}
		case Drop:
			if len(f.Actions) != 1 {
				return fail("drop must be the only action")
			}
		case Load:
			if a.Dst.Bits() < 64 && a.Value >= uint64(1)<<a.Dst.Bits() {
				return fail("load value %#x does not fit %s", a.Value, a.Dst)
			}
		case Multipath:
			if problem := a.check(); problem != "" {
				return fail("action %d: %s", i, problem)
			}
		case Move:
			if a.Src.Bits() != a.Dst.Bits() {
				return fail("move %s->%s: widths differ", a.Src, a.Dst)
			}
		case SetARPSpa:
			if a.IP.To4() == nil {
				return fail("arp_spa %s is not IPv4", a.IP)
			}
		case SetARPTpa:
			if a.IP.To4() == nil {
				return fail("arp_tpa %s is not IPv4", a.IP)
			}
		case SetTunDst:
			if a.IP.To4() == nil && len(a.IP) != net.IPv6len {
				return fail("tun_dst %s is neither IPv4 nor IPv6", a.IP)
			}
		case Conjunction:
			if a.ID == 0 || a.NClauses < 2 || a.NClauses > 64 || a.Clause < 1 || a.Clause > a.NClauses {
				return fail("conjunction(%d,%d/%d): id 1.., clause 1..n, 2 <= n <= 64", a.ID, a.Clause, a.NClauses)
			}
		case CT:
			if a.Table != 0 {
				if i != len(f.Actions)-1 {
					return fail("ct with a table must be the last action")
				}
				if a.Table <= f.Table {
					return fail("ct(table=%d) does not go forward from table %d", a.Table, f.Table)
				}
			}
			if m.EthType != EthTypeIPv4 && m.EthType != EthTypeIPv6 {
				return fail("ct needs a match on EthType %#04x (ip) or %#04x (ipv6)", EthTypeIPv4, EthTypeIPv6)
			}
			if a.NAT != nil {
				if problem := a.NAT.check(m.EthType, a.Commit); problem != "" {
					return fail("action %d: %s", i, problem)
				}
			}
		}
	}
	return nil
}

// actionEthType returns the EthType an action's fields need in the match (§7.2.3.6
// prerequisites apply to set-field and to NXM move/load), or 0.
func actionEthType(a Action) uint16 {
	fieldType := func(f NXMField) uint16 {
		switch f {
		case FieldARPOp, FieldARPSpa, FieldARPTpa, FieldARPSha, FieldARPTha:
			return EthTypeARP
		case FieldIPSrc, FieldIPDst:
			return EthTypeIPv4
		}
		return 0
	}
	switch a := a.(type) {
	case SetARPOp, SetARPSpa, SetARPTpa, SetARPSha, SetARPTha:
		return EthTypeARP
	case Load:
		return fieldType(a.Dst.Field)
	case Move:
		if t := fieldType(a.Src.Field); t != 0 {
			return t
		}
		return fieldType(a.Dst.Field)
	}
	return 0
}

// formatTable appends a table as OVS prints it: its stage name (quoted unless
// alphanumeric) or its number.
func formatTable(b *strings.Builder, t TableID) {
	if name := t.Name(); name != "" {
		b.WriteString(quoteName(name))
		return
	}
	fmt.Fprintf(b, "%d", t)
}

// formatPort appends an ofport as OVS prints it: its name if ports has one (quoted
// unless alphanumeric), else its number.
func formatPort(b *strings.Builder, port uint32, ports PortNames) {
	if name, ok := ports[port]; ok && name != "" {
		b.WriteString(quoteName(name))
		return
	}
	fmt.Fprintf(b, "%d", port)
}

// quoteName quotes a port or table name the way OVS does (lib/namemap.c
// name_needs_quotes): names that start with a letter and are alphanumeric stay bare,
// others become JSON strings.
func quoteName(name string) string {
	bare := name != ""
	for i, c := range name {
		isAlpha := c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
		isDigit := c >= '0' && c <= '9'
		if !isAlpha && (i == 0 || !isDigit) {
			bare = false
			break
		}
	}
	if bare {
		return name
	}
	var q strings.Builder
	enc := json.NewEncoder(&q)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(name)
	return strings.TrimSuffix(q.String(), "\n")
}

// hex32 formats like C's "%#"PRIx32: 0 is "0", others "0x..".
func hex32(v uint32) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

// format renders the match fields in OVS's match_format order, each followed by a
// comma, without the final comma.
func (m Match) format(ports PortNames) string {
	var parts []string
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	if m.ConjID != 0 {
		add("conj_id=%d", m.ConjID)
	}
	if m.CTState != nil {
		add("ct_state=%s", m.CTState)
	}
	shorthand := false
	protoShort := false
	switch m.EthType {
	case EthTypeIPv4:
		switch m.IPProto {
		case IPProtoTCP:
			add("tcp")
			protoShort = true
		case IPProtoUDP:
			add("udp")
			protoShort = true
		case IPProtoSCTP:
			add("sctp")
			protoShort = true
		case IPProtoICMP:
			add("icmp")
			protoShort = true
		default:
			add("ip")
		}
		shorthand = true
	case EthTypeIPv6:
		protoShort = true
		switch m.IPProto {
		case IPProtoTCP:
			add("tcp6")
		case IPProtoUDP:
			add("udp6")
		case IPProtoSCTP:
			add("sctp6")
		case IPProtoICMPv6:
			add("icmp6")
		default:
			add("ipv6")
			protoShort = false
		}
		shorthand = true
	case EthTypeARP:
		add("arp")
		shorthand = true
	}
	values, masks := m.regs()
	for i := range values {
		if masks[i] == 0 {
			continue
		}
		if masks[i] == 0xffffffff {
			add("reg%d=%s", i, hex32(values[i]))
		} else {
			add("reg%d=%s/%s", i, hex32(values[i]), hex32(masks[i]))
		}
	}
	if m.TunSrc != nil {
		add("%s=%s", tunField(m.TunSrc, "src"), tunIP(m.TunSrc))
	}
	if m.TunDst != nil {
		add("%s=%s", tunField(m.TunDst, "dst"), tunIP(m.TunDst))
	}
	if m.InPort != 0 {
		var b strings.Builder
		formatPort(&b, m.InPort, ports)
		add("in_port=%s", b.String())
	}
	if m.EthSrc != nil {
		add("dl_src=%s", m.EthSrc)
	}
	if m.EthDst != nil {
		add("dl_dst=%s", m.EthDst)
	}
	if !shorthand && m.EthType != 0 {
		add("dl_type=0x%04x", m.EthType)
	}
	switch m.EthType {
	case EthTypeARP:
		if m.ARPSpa != nil {
			add("arp_spa=%s", m.ARPSpa.To4())
		}
		if m.ARPTpa != nil {
			add("arp_tpa=%s", m.ARPTpa.To4())
		}
		if m.ARPTpaPrefix != nil {
			add("arp_tpa=%s", formatPrefix(m.ARPTpaPrefix))
		}
		if m.ARPOp != 0 {
			add("arp_op=%d", m.ARPOp)
		}
		if m.ARPSha != nil {
			add("arp_sha=%s", m.ARPSha)
		}
		if m.ARPTha != nil {
			add("arp_tha=%s", m.ARPTha)
		}
	default:
		// A valid match has the fields of one family only (Validate), so printing each
		// that is set gives OVS's order for either; an invalid one shows all it has.
		if m.IPSrc != nil {
			add("nw_src=%s", formatPrefix(m.IPSrc))
		}
		if m.IPDst != nil {
			add("nw_dst=%s", formatPrefix(m.IPDst))
		}
		m.formatIPv6Addrs(add)
		if m.IPProto != 0 && !protoShort {
			add("nw_proto=%d", m.IPProto)
		}
		m.formatICMPv6(add)
		switch {
		case m.TPDstMask == 0xffff:
			add("tp_dst=%d", m.TPDst)
		case m.TPDstMask != 0:
			add("tp_dst=%#x/%#x", m.TPDst, m.TPDstMask)
		}
	}
	return strings.Join(parts, ",")
}

// regs combines Regs into per-register values and masks (values masked, as the switch
// stores them).
func (m Match) regs() (values, masks [16]uint32) {
	for _, r := range m.Regs {
		i := r.Range.Field.Field - openflow13.NXM_NX_REG0
		if int(i) >= len(values) {
			continue
		}
		mask := r.Range.Mask()
		values[i] = values[i]&^mask | (r.Value<<r.Range.Start)&mask
		masks[i] |= mask
	}
	return values, masks
}

// formatPrefix prints an IPv4 prefix as OVS's format_ip_netmask does: the masked
// address, then /LEN unless it is /32 (a non-CIDR mask prints as a dotted quad).
func formatPrefix(n *net.IPNet) string {
	ip := n.IP.To4().Mask(n.Mask)
	ones, bits := n.Mask.Size()
	switch {
	case bits == 0:
		return fmt.Sprintf("%s/%s", ip, net.IP(n.Mask))
	case ones == bits:
		return ip.String()
	default:
		return fmt.Sprintf("%s/%d", ip, ones)
	}
}

// formatActions appends the action list, or "drop" when it has none.
func formatActions(b *strings.Builder, actions []Action, ports PortNames) {
	n := 0
	for _, a := range actions {
		if _, ok := a.(Drop); ok {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		a.format(b, ports)
		n++
	}
	if n == 0 {
		b.WriteString("drop")
	}
}

func (a Output) format(b *strings.Builder, ports PortNames) {
	b.WriteString("output:")
	formatPort(b, a.Port, ports)
}

func (OutputInPort) format(b *strings.Builder, _ PortNames) { b.WriteString("IN_PORT") }

func (a OutputReg) format(b *strings.Builder, _ PortNames) {
	b.WriteString("output:" + a.Src.String())
}

func (a GotoTable) format(b *strings.Builder, _ PortNames) {
	b.WriteString("goto_table:")
	formatTable(b, a.Table)
}

func (a SetEthSrc) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->eth_src", a.MAC)
}

func (a SetEthDst) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->eth_dst", a.MAC)
}

func (a SetARPOp) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%d->arp_op", a.Op)
}

func (a SetARPSpa) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->arp_spa", a.IP.To4())
}

func (a SetARPTpa) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->arp_tpa", a.IP.To4())
}

func (a SetARPSha) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->arp_sha", a.MAC)
}

func (a SetARPTha) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->arp_tha", a.MAC)
}

func (a SetTunDst) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "set_field:%s->%s", tunIP(a.IP), tunField(a.IP, "dst"))
}

// tunField is the name dump-flows gives the tunnel's outer address field dir ("src" or
// "dst") for ip's family: tun_src, or tun_ipv6_src for an IPv6 underlay.
func tunField(ip net.IP, dir string) string {
	if ip.To4() == nil {
		return "tun_ipv6_" + dir
	}
	return "tun_" + dir
}

// tunIP is ip in its family's form: 4 bytes for IPv4, else 16.
func tunIP(ip net.IP) net.IP {
	if ip4 := ip.To4(); ip4 != nil {
		return ip4
	}
	return ip.To16()
}

func (a Load) format(b *strings.Builder, _ PortNames) {
	if a.Value == 0 {
		fmt.Fprintf(b, "load:0->%s", a.Dst)
		return
	}
	fmt.Fprintf(b, "load:%#x->%s", a.Value, a.Dst)
}

func (a Move) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "move:%s->%s", a.Src, a.Dst)
}

func (DecTTL) format(b *strings.Builder, _ PortNames) { b.WriteString("dec_ttl") }

func (a Conjunction) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "conjunction(%d,%d/%d)", a.ID, a.Clause, a.NClauses)
}

func (a CT) format(b *strings.Builder, _ PortNames) {
	// As OVS's format_CT: each part that is set, comma-separated; zone 0 is not printed.
	var parts []string
	if a.Commit {
		parts = append(parts, "commit")
	}
	if a.Table != 0 {
		var t strings.Builder
		t.WriteString("table=")
		formatTable(&t, a.Table)
		parts = append(parts, t.String())
	}
	if a.Zone != 0 {
		parts = append(parts, fmt.Sprintf("zone=%d", a.Zone))
	}
	if a.NAT != nil {
		var n strings.Builder
		a.NAT.format(&n)
		parts = append(parts, n.String())
	}
	b.WriteString("ct(" + strings.Join(parts, ",") + ")")
}

func (a OutputController) format(b *strings.Builder, _ PortNames) {
	fmt.Fprintf(b, "CONTROLLER:%d", a.MaxLen)
}

func (Drop) format(b *strings.Builder, _ PortNames) { b.WriteString("drop") }

// FlowMod encodes the flow as an OpenFlow 1.3 flow mod (OpenFlow 1.3.5 §7.3.4.1) with
// command (openflow13.FC_ADD, FC_MODIFY, FC_MODIFY_STRICT, FC_DELETE, FC_DELETE_STRICT).
// Add and modify carry the instructions (apply-actions, then goto-table); deletes carry
// none. Buffer id is OFP_NO_BUFFER, out_port/out_group ANY, cookie_mask 0, no flags, no
// timeouts. The header's xid comes from libOpenflow's counter; the sender may replace it.
// Call Validate first: FlowMod encodes what it is given.
//
// libOpenflow quirks this relies on: FlowMod.MarshalBinary writes OutPort into the
// out_group slot too (both are ANY here, so the bytes are right), and FlowMod.Len leaves
// instructions out for deletes (so deletes must carry none, as here).
func (f Flow) FlowMod(command uint8) *openflow13.FlowMod {
	fm := openflow13.NewFlowMod()
	fm.Cookie = uint64(f.Cookie)
	fm.CookieMask = 0
	fm.TableId = uint8(f.Table)
	fm.Command = command
	fm.Priority = f.Priority
	fm.BufferId = 0xffffffff // OFP_NO_BUFFER
	fm.OutPort = openflow13.P_ANY
	fm.OutGroup = openflow13.OFPG_ANY
	fm.Match = f.Match.ofMatch()
	if command == openflow13.FC_DELETE || command == openflow13.FC_DELETE_STRICT {
		return fm
	}
	if f.Meter != 0 {
		fm.AddInstruction(openflow13.NewInstrMeter(f.Meter))
	}
	apply := openflow13.NewInstrApplyActions()
	var gotoTable *openflow13.InstrGotoTable
	for _, a := range f.Actions {
		if g, ok := a.(GotoTable); ok {
			gotoTable = openflow13.NewInstrGotoTable(uint8(g.Table))
			continue
		}
		if oa := a.ofAction(); oa != nil {
			_ = apply.AddAction(oa, false)
		}
	}
	if len(apply.Actions) > 0 {
		fm.AddInstruction(apply)
	}
	if gotoTable != nil {
		fm.AddInstruction(gotoTable)
	}
	return fm
}

// DeleteByCookie returns an OFPFC_DELETE flow mod that removes, from every table
// (OFPTT_ALL), each flow whose cookie matches cookie under mask (OpenFlow 1.3.5
// §7.3.4.1: (flow.cookie & mask) == (cookie & mask)), whatever its match; out_port and
// out_group are ANY. Use PodCookie or GenerationCookie for the arguments.
func DeleteByCookie(cookie, mask uint64) *openflow13.FlowMod {
	fm := openflow13.NewFlowMod()
	fm.Command = openflow13.FC_DELETE
	fm.TableId = openflow13.OFPTT_ALL
	fm.Cookie = cookie & mask
	fm.CookieMask = mask
	fm.Priority = 0
	fm.BufferId = 0xffffffff // OFP_NO_BUFFER
	fm.OutPort = openflow13.P_ANY
	fm.OutGroup = openflow13.OFPG_ANY
	return fm
}

// ofMatch encodes the match as OXM/NXM TLVs, prerequisites first (§7.2.3.6).
func (m Match) ofMatch() openflow13.Match {
	om := openflow13.NewMatch()
	if m.InPort != 0 {
		om.AddField(*openflow13.NewInPortField(m.InPort))
	}
	if m.ConjID != 0 {
		om.AddField(*openflow13.NewConjIDMatchField(m.ConjID))
	}
	if c := m.CTState; c != nil {
		// NXM_NX_CT_STATE_W: 32-bit value and mask (nicira-ext.h).
		f, _ := openflow13.FindFieldHeaderByName("NXM_NX_CT_STATE", true)
		f.Value = &openflow13.Uint32Message{Data: uint32(c.Set)}
		f.Mask = &openflow13.Uint32Message{Data: uint32(c.Set | c.Clear)}
		om.AddField(*f)
	}
	values, masks := m.regs()
	for i := range values {
		if masks[i] == 0 {
			continue
		}
		f := openflow13.MatchField{
			Class: openflow13.OXM_CLASS_NXM_1,
			Field: openflow13.NXM_NX_REG0 + uint8(i),
			Value: &openflow13.Uint32Message{Data: values[i]},
		}
		f.Length = 4
		if masks[i] != 0xffffffff {
			f.HasMask = true
			f.Mask = &openflow13.Uint32Message{Data: masks[i]}
			f.Length = 8
		}
		om.AddField(f)
	}
	if m.TunSrc != nil {
		if ip4 := m.TunSrc.To4(); ip4 != nil {
			om.AddField(*openflow13.NewTunnelIpv4SrcField(ip4, nil))
		} else {
			om.AddField(*openflow13.NewTunnelIpv6SrcField(m.TunSrc.To16(), nil))
		}
	}
	if m.TunDst != nil {
		if ip4 := m.TunDst.To4(); ip4 != nil {
			om.AddField(*openflow13.NewTunnelIpv4DstField(ip4, nil))
		} else {
			om.AddField(*openflow13.NewTunnelIpv6DstField(m.TunDst.To16(), nil))
		}
	}
	if m.EthDst != nil {
		om.AddField(*openflow13.NewEthDstField(m.EthDst, nil))
	}
	if m.EthSrc != nil {
		om.AddField(*openflow13.NewEthSrcField(m.EthSrc, nil))
	}
	if m.EthType != 0 {
		om.AddField(*openflow13.NewEthTypeField(m.EthType))
	}
	if m.IPProto != 0 {
		om.AddField(*openflow13.NewIpProtoField(m.IPProto))
	}
	m.addICMPv6Fields(om)
	if m.TPDstMask != 0 {
		om.AddField(tpDstField(m.IPProto, m.TPDst, m.TPDstMask))
	}
	m.addIPv6Fields(om)
	if m.IPSrc != nil {
		ip, mask := prefixField(m.IPSrc)
		om.AddField(*openflow13.NewIpv4SrcField(ip, mask))
	}
	if m.IPDst != nil {
		ip, mask := prefixField(m.IPDst)
		om.AddField(*openflow13.NewIpv4DstField(ip, mask))
	}
	if m.ARPOp != 0 {
		om.AddField(*openflow13.NewArpOperField(m.ARPOp))
	}
	if m.ARPSpa != nil {
		om.AddField(*openflow13.NewArpSpaField(m.ARPSpa.To4()))
	}
	if m.ARPTpa != nil {
		om.AddField(*openflow13.NewArpTpaField(m.ARPTpa.To4()))
	}
	if m.ARPTpaPrefix != nil {
		ip, mask := prefixField(m.ARPTpaPrefix)
		f := openflow13.NewArpTpaField(ip)
		if mask != nil {
			f.HasMask = true
			f.Mask = &openflow13.ArpXPaField{ArpPa: *mask}
			f.Length *= 2
		}
		om.AddField(*f)
	}
	if m.ARPSha != nil {
		om.AddField(*openflow13.NewArpShaField(m.ARPSha))
	}
	if m.ARPTha != nil {
		om.AddField(*openflow13.NewArpThaField(m.ARPTha))
	}
	return *om
}

// tpDstField encodes tp_dst as the OXM of the protocol (OXM_OF_TCP_DST, UDP_DST,
// SCTP_DST), masked unless the mask is 0xffff. OpenFlow 1.3 defines these fields as not
// maskable, but OVS accepts a mask on them (ovs-fields(7): tcp_dst is "Maskable: bitwise")
// and TestFlowsOnSwitch checks the switch stores exactly the block asked for. libOpenflow
// has no masked constructor, so the field is built here.
func tpDstField(proto uint8, port, mask uint16) openflow13.MatchField {
	field := uint8(openflow13.OXM_FIELD_TCP_DST)
	switch proto {
	case IPProtoUDP:
		field = openflow13.OXM_FIELD_UDP_DST
	case IPProtoSCTP:
		field = openflow13.OXM_FIELD_SCTP_DST
	}
	f := openflow13.MatchField{Class: openflow13.OXM_CLASS_OPENFLOW_BASIC, Field: field,
		Value: openflow13.NewPortField(port), Length: 2}
	if mask != 0xffff {
		f.HasMask = true
		f.Mask = openflow13.NewPortField(mask)
		f.Length = 4
	}
	return f
}

// prefixField returns the masked address and, unless the prefix is /32, its mask.
func prefixField(n *net.IPNet) (net.IP, *net.IP) {
	ip := n.IP.To4().Mask(n.Mask)
	if ones, bits := n.Mask.Size(); ones == bits && bits == 32 {
		return ip, nil
	}
	mask := net.IP(append([]byte(nil), n.Mask...))
	return ip, &mask
}

func (a Output) ofAction() openflow13.Action { return openflow13.NewActionOutput(a.Port) }

func (OutputInPort) ofAction() openflow13.Action {
	return openflow13.NewActionOutput(openflow13.P_IN_PORT)
}

func (a OutputReg) ofAction() openflow13.Action {
	return openflow13.NewOutputFromField(a.Src.Field.header(), a.Src.ofsNbits())
}

func (GotoTable) ofAction() openflow13.Action { return nil }

func (a SetEthSrc) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewEthSrcField(a.MAC, nil))
}

func (a SetEthDst) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewEthDstField(a.MAC, nil))
}

func (a SetARPOp) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewArpOperField(a.Op))
}

func (a SetARPSpa) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewArpSpaField(a.IP.To4()))
}

func (a SetARPTpa) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewArpTpaField(a.IP.To4()))
}

func (a SetARPSha) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewArpShaField(a.MAC))
}

func (a SetARPTha) ofAction() openflow13.Action {
	return openflow13.NewActionSetField(*openflow13.NewArpThaField(a.MAC))
}

func (a SetTunDst) ofAction() openflow13.Action {
	if ip4 := a.IP.To4(); ip4 != nil {
		return openflow13.NewActionSetField(*openflow13.NewTunnelIpv4DstField(ip4, nil))
	}
	return openflow13.NewActionSetField(*openflow13.NewTunnelIpv6DstField(a.IP.To16(), nil))
}

func (a Load) ofAction() openflow13.Action {
	return openflow13.NewNXActionRegLoad(a.Dst.ofsNbits(), a.Dst.Field.header(), a.Value)
}

func (a Move) ofAction() openflow13.Action {
	return openflow13.NewNXActionRegMove(uint16(a.Src.Bits()), uint16(a.Src.Start), uint16(a.Dst.Start),
		a.Src.Field.header(), a.Dst.Field.header())
}

func (DecTTL) ofAction() openflow13.Action { return openflow13.NewActionDecNwTtl() }

func (a Conjunction) ofAction() openflow13.Action {
	// nx_action_conjunction carries the clause 0-based (ovs-ofctl prints it 1-based).
	return openflow13.NewNXActionConjunction(a.Clause-1, a.NClauses, a.ID)
}

func (a CT) ofAction() openflow13.Action {
	ct := openflow13.NewNXActionConnTrack().ZoneImm(a.Zone)
	if a.Commit {
		ct.Commit()
	}
	if a.Table != 0 {
		ct.Table(uint8(a.Table))
	}
	if a.NAT != nil {
		ct.AddAction(a.NAT.ofAction())
	}
	return ct
}

func (a OutputController) ofAction() openflow13.Action {
	o := openflow13.NewActionOutput(openflow13.P_CONTROLLER)
	o.MaxLen = a.MaxLen
	return o
}

func (Drop) ofAction() openflow13.Action { return nil }

// ipv4ToUint32 returns an IPv4 address as a big-endian uint32 (10.0.0.1 = 0x0a000001);
// 0 for anything that is not IPv4.
func ipv4ToUint32(ip net.IP) uint32 {
	ip4 := ip.To4()
	if ip4 == nil {
		return 0
	}
	return binary.BigEndian.Uint32(ip4)
}
