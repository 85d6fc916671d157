package flows

// IPv6 match fields: their checks, their ovs-ofctl text and their OXM encoding.
//
// Design history: the IP family is data in a Match (its EthType), not an assumption of the
// package; these fields are what dual-stack pods and Services will match on. The OXM
// fields are OpenFlow 1.3.5 §7.2.3.7 basic-class fields (class OFPXMC_OPENFLOW_BASIC
// 0x8000): IPV6_SRC 26, IPV6_DST 27, IPV6_FLABEL 28, ICMPV6_TYPE 29, ICMPV6_CODE 30,
// IPV6_ND_TARGET 31, IPV6_ND_SLL 32, IPV6_ND_TLL 33 (libOpenflow's OXM_FIELD_* numbers are
// these). libOpenflow has constructors only for IPV6_SRC and IPV6_DST, so the others are
// built here from its value types (its IcmpTypeField, IcmpCodeField, Ipv6DstField,
// EthSrcField; a Uint32Message for the flow label, which libOpenflow cannot decode back).
// The text follows OVS's match_format (lib/match.c, OVS 3.1): ipv6_src, ipv6_dst and
// ipv6_label where IPv4 prints nw_src and nw_dst; icmp_type, icmp_code, nd_target, nd_sll,
// nd_tll where it prints tp_dst. TestIPv6FlowsOnSwitch checks both against a real OVS.

import (
	"fmt"
	"net"

	"github.com/contiv/libOpenflow/openflow13"
)

// ipv6LabelBits is the mask of the 20-bit flow label (RFC 8200 §3).
const ipv6LabelBits = 0xfffff

// checkIPv6 returns what is wrong with the match's IPv6 fields, naming the field and the
// missing prerequisite, or "".
func (m Match) checkIPv6() string {
	const ipv6 = "EthType 0x86dd (ipv6)"
	isIPv6 := m.EthType == EthTypeIPv6
	need := func(field, what string) string { return fmt.Sprintf("%s needs %s", field, what) }
	for _, p := range []struct {
		name string
		n    *net.IPNet
	}{{"ipv6_src", m.IPv6Src}, {"ipv6_dst", m.IPv6Dst}} {
		if p.n == nil {
			continue
		}
		if !isIPv6 {
			return need(p.name, ipv6)
		}
		if len(p.n.IP) != net.IPv6len || p.n.IP.To4() != nil || len(p.n.Mask) != net.IPv6len {
			return fmt.Sprintf("%s %s is not an IPv6 prefix (an IPv4 or IPv4-mapped address goes in IPSrc/IPDst)", p.name, p.n)
		}
	}
	if m.IPv6LabelMask != 0 || m.IPv6Label != 0 {
		if !isIPv6 {
			return need("ipv6_label", ipv6)
		}
		switch {
		case m.IPv6LabelMask == 0:
			return fmt.Sprintf("ipv6_label %#x has IPv6LabelMask 0: set 0xfffff for the exact label", m.IPv6Label)
		case m.IPv6LabelMask&^ipv6LabelBits != 0:
			return fmt.Sprintf("ipv6_label mask %#x is wider than the 20-bit flow label", m.IPv6LabelMask)
		case m.IPv6Label&^m.IPv6LabelMask != 0:
			return fmt.Sprintf("ipv6_label %#x has bits outside its mask %#x", m.IPv6Label, m.IPv6LabelMask)
		}
	}
	icmp := []struct {
		name string
		set  bool
	}{{"icmpv6_type", m.ICMPv6Type != nil}, {"icmpv6_code", m.ICMPv6Code != nil},
		{"nd_target", m.NDTarget != nil}, {"nd_sll", m.NDSLL != nil}, {"nd_tll", m.NDTLL != nil}}
	for _, f := range icmp {
		if !f.set {
			continue
		}
		if !isIPv6 {
			return need(f.name, ipv6)
		}
		if m.IPProto != IPProtoICMPv6 {
			return need(f.name, "IPProto 58 (icmp6)")
		}
	}
	typ := -1
	if m.ICMPv6Type != nil {
		typ = int(*m.ICMPv6Type)
	}
	nd := m.NDTarget != nil || m.NDSLL != nil || m.NDTLL != nil
	switch {
	case m.NDTarget != nil && typ != int(ICMPv6NeighborSolicit) && typ != int(ICMPv6NeighborAdvert):
		return need("nd_target", "icmpv6_type 135 (neighbor solicitation) or 136 (neighbor advertisement)")
	case m.NDSLL != nil && typ != int(ICMPv6NeighborSolicit):
		return need("nd_sll", "icmpv6_type 135 (neighbor solicitation)")
	case m.NDTLL != nil && typ != int(ICMPv6NeighborAdvert):
		return need("nd_tll", "icmpv6_type 136 (neighbor advertisement)")
	case nd && m.ICMPv6Code != nil && *m.ICMPv6Code != 0:
		return fmt.Sprintf("nd fields need icmpv6_code 0 or no code match (got %d): OVS refuses them otherwise", *m.ICMPv6Code)
	}
	if m.NDTarget != nil && (len(m.NDTarget) != net.IPv6len || m.NDTarget.To4() != nil) {
		return fmt.Sprintf("nd_target %s is not an IPv6 address", m.NDTarget)
	}
	for _, mac := range []struct {
		name string
		mac  net.HardwareAddr
	}{{"nd_sll", m.NDSLL}, {"nd_tll", m.NDTLL}} {
		if mac.mac != nil && len(mac.mac) != 6 {
			return fmt.Sprintf("%s %s is not 48 bits", mac.name, mac.mac)
		}
	}
	return ""
}

// formatIPv6Addrs adds ipv6_src, ipv6_dst and ipv6_label as OVS prints them.
func (m Match) formatIPv6Addrs(add func(string, ...any)) {
	if m.IPv6Src != nil {
		add("ipv6_src=%s", formatIPv6Prefix(m.IPv6Src))
	}
	if m.IPv6Dst != nil {
		add("ipv6_dst=%s", formatIPv6Prefix(m.IPv6Dst))
	}
	switch {
	case m.IPv6LabelMask == ipv6LabelBits:
		// An exact label goes on the wire unmasked; OVS stores it with an all-ones mask
		// and prints no mask.
		add("ipv6_label=0x%05x", m.IPv6Label)
	case m.IPv6LabelMask != 0:
		add("ipv6_label=0x%05x/0x%05x", m.IPv6Label&m.IPv6LabelMask, m.IPv6LabelMask)
	}
}

// formatICMPv6 adds the ICMPv6 type and code and the neighbor discovery fields as OVS
// prints them for icmp6 (icmp_type and icmp_code, the names it shares with ICMPv4).
func (m Match) formatICMPv6(add func(string, ...any)) {
	if m.ICMPv6Type != nil {
		add("icmp_type=%d", *m.ICMPv6Type)
	}
	if m.ICMPv6Code != nil {
		add("icmp_code=%d", *m.ICMPv6Code)
	}
	if m.NDTarget != nil {
		add("nd_target=%s", m.NDTarget.To16())
	}
	if m.NDSLL != nil {
		add("nd_sll=%s", m.NDSLL)
	}
	if m.NDTLL != nil {
		add("nd_tll=%s", m.NDTLL)
	}
}

// formatIPv6Prefix prints an IPv6 address under a mask as OVS's ipv6_format_masked does:
// the masked address, then nothing for /128, /LEN for a CIDR mask, /MASK (as an address)
// for any other mask.
func formatIPv6Prefix(n *net.IPNet) string {
	ip := n.IP.To16().Mask(n.Mask)
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

// addICMPv6Fields appends the OXM TLVs of the ICMPv6 and ND fields, after ETH_TYPE and
// IP_PROTO and type before the ND fields (§7.2.3.6: a field's prerequisites come first).
func (m Match) addICMPv6Fields(om *openflow13.Match) {
	basic := func(field uint8, v interface {
		Len() uint16
		MarshalBinary() ([]byte, error)
		UnmarshalBinary([]byte) error
	}) {
		om.AddField(openflow13.MatchField{Class: openflow13.OXM_CLASS_OPENFLOW_BASIC, Field: field,
			Value: v, Length: uint8(v.Len())})
	}
	if m.ICMPv6Type != nil {
		basic(openflow13.OXM_FIELD_ICMPV6_TYPE, &openflow13.IcmpTypeField{Type: *m.ICMPv6Type})
	}
	if m.ICMPv6Code != nil {
		basic(openflow13.OXM_FIELD_ICMPV6_CODE, &openflow13.IcmpCodeField{Code: *m.ICMPv6Code})
	}
	if m.NDTarget != nil {
		basic(openflow13.OXM_FIELD_IPV6_ND_TARGET, &openflow13.Ipv6DstField{Ipv6Dst: m.NDTarget.To16()})
	}
	if m.NDSLL != nil {
		basic(openflow13.OXM_FIELD_IPV6_ND_SLL, &openflow13.EthSrcField{EthSrc: m.NDSLL})
	}
	if m.NDTLL != nil {
		basic(openflow13.OXM_FIELD_IPV6_ND_TLL, &openflow13.EthSrcField{EthSrc: m.NDTLL})
	}
}

// addIPv6Fields appends the OXM TLVs of ipv6_src, ipv6_dst (masked unless /128) and
// ipv6_label (masked unless exact: IPV6_FLABEL is a 32-bit field whose upper 12 bits are
// 0, §7.2.3.8).
func (m Match) addIPv6Fields(om *openflow13.Match) {
	if m.IPv6Src != nil {
		ip, mask := ipv6PrefixField(m.IPv6Src)
		om.AddField(*openflow13.NewIpv6SrcField(ip, mask))
	}
	if m.IPv6Dst != nil {
		ip, mask := ipv6PrefixField(m.IPv6Dst)
		om.AddField(*openflow13.NewIpv6DstField(ip, mask))
	}
	if m.IPv6LabelMask != 0 {
		f := openflow13.MatchField{Class: openflow13.OXM_CLASS_OPENFLOW_BASIC, Field: openflow13.OXM_FIELD_IPV6_FLABEL,
			Value: &openflow13.Uint32Message{Data: m.IPv6Label & m.IPv6LabelMask}, Length: 4}
		if m.IPv6LabelMask != ipv6LabelBits {
			f.HasMask = true
			f.Mask = &openflow13.Uint32Message{Data: m.IPv6LabelMask}
			f.Length = 8
		}
		om.AddField(f)
	}
}

// ipv6PrefixField returns the masked address and, unless the mask is all ones, the mask.
func ipv6PrefixField(n *net.IPNet) (net.IP, *net.IP) {
	ip := n.IP.To16().Mask(n.Mask)
	if ones, bits := n.Mask.Size(); ones == bits && bits == 8*net.IPv6len {
		return ip, nil
	}
	mask := net.IP(append([]byte(nil), n.Mask...))
	return ip, &mask
}
