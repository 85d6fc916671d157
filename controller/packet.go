package controller

// The headers of a denied packet, decoded by hand for the deny log: Ethernet (with
// optional 802.1Q tags), IPv4 (RFC 791) or IPv6 (RFC 8200, with its hop-by-hop,
// routing, fragment, destination options and authentication extension headers skipped),
// then TCP (RFC 9293), UDP (RFC 768), SCTP (RFC 9260, the common header), ICMP (RFC 792)
// or ICMPv6 (RFC 4443). Only what the log line needs; the
// switch sends at most flows.DenyLogMaxLen bytes, enough for every header here.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IP protocol numbers the deny log names (IANA "Assigned Internet Protocol Numbers").
const (
	ipProtoICMP = 1
	ipProtoTCP  = 6
	ipProtoUDP  = 17
	ipProtoSCTP = 132
)

// ipProtoICMPv6 (58, IPv6 next header of ICMPv6) is declared with the IPv6 rejects
// (services.go).

// packetHeaders is what parsePacket finds in a frame.
type packetHeaders struct {
	Src, Dst netip.Addr
	// Proto is the IPv4 protocol number, or the IPv6 upper-layer header's (the last
	// next header after the extension headers).
	Proto uint8
	// SrcPort and DstPort are the TCP, UDP or SCTP ports (0 for other protocols).
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode are set for ICMP and ICMPv6.
	ICMPType, ICMPCode uint8
	// Fragment is true for an IPv4 or IPv6 fragment other than the first (no transport
	// header).
	Fragment bool
}

// protoName returns "TCP", "UDP", "SCTP", "ICMP", "ICMPv6" or the protocol number.
func (h packetHeaders) protoName() string {
	switch h.Proto {
	case ipProtoTCP:
		return "TCP"
	case ipProtoUDP:
		return "UDP"
	case ipProtoSCTP:
		return "SCTP"
	case ipProtoICMP:
		return "ICMP"
	case ipProtoICMPv6:
		return "ICMPv6"
	}
	return fmt.Sprintf("%d", h.Proto)
}

// parsePacket decodes an Ethernet frame carrying IPv4 or IPv6. Errors: a frame that is
// neither or is too short for the headers it announces (a truncated transport header, or
// IPv6 extension headers beyond the capture, leave the ports 0 and are not an error when
// the IP header is whole: the addresses still log).
func parsePacket(frame []byte) (packetHeaders, error) {
	var h packetHeaders
	if len(frame) < 14 {
		return h, fmt.Errorf("frame of %d bytes, shorter than an Ethernet header", len(frame))
	}
	off := 12
	et := binary.BigEndian.Uint16(frame[off:])
	for et == 0x8100 || et == 0x88a8 { // 802.1Q / 802.1ad tags
		off += 4
		if off+2 > len(frame) {
			return h, fmt.Errorf("frame of %d bytes ends inside its VLAN tags", len(frame))
		}
		et = binary.BigEndian.Uint16(frame[off:])
	}
	if et == 0x86dd {
		return parseIPv6(frame[off+2:])
	}
	if et != 0x0800 {
		return h, fmt.Errorf("ethertype %#04x, not IPv4 or IPv6", et)
	}
	ip := frame[off+2:]
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return h, fmt.Errorf("not a whole IPv4 header (%d bytes, version %d)", len(ip), ip[0]>>4)
	}
	ihl := int(ip[0]&0xf) * 4
	if ihl < 20 || len(ip) < ihl {
		return h, fmt.Errorf("IPv4 header length %d bytes with %d bytes captured", ihl, len(ip))
	}
	h.Proto = ip[9]
	h.Src = netip.AddrFrom4([4]byte(ip[12:16]))
	h.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
	if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
		h.Fragment = true
		return h, nil
	}
	h.transport(ip[ihl:])
	return h, nil
}

// transport fills in the ports or ICMP type and code from l4, the upper-layer header
// (what of it was captured).
func (h *packetHeaders) transport(l4 []byte) {
	switch h.Proto {
	case ipProtoTCP, ipProtoUDP, ipProtoSCTP:
		if len(l4) >= 4 {
			h.SrcPort = binary.BigEndian.Uint16(l4[0:])
			h.DstPort = binary.BigEndian.Uint16(l4[2:])
		}
	case ipProtoICMP, ipProtoICMPv6:
		if len(l4) >= 2 {
			h.ICMPType, h.ICMPCode = l4[0], l4[1]
		}
	}
}

// IPv6 extension headers parseIPv6 steps over (IANA "IPv6 Extension Header Types").
const (
	ip6HopByHop = 0
	ip6Routing  = 43
	ip6Fragment = 44
	ip6AH       = 51
	ip6DestOpts = 60
)

// parseIPv6 decodes an IPv6 packet (RFC 8200): the addresses, then the extension headers
// up to the upper-layer one. A fragment with a non-zero offset has no transport header
// (Fragment); the chain cut by the capture leaves Proto at the last next header seen.
func parseIPv6(ip []byte) (packetHeaders, error) {
	var h packetHeaders
	if len(ip) < 40 || ip[0]>>4 != 6 {
		v := 0
		if len(ip) > 0 {
			v = int(ip[0] >> 4)
		}
		return h, fmt.Errorf("not a whole IPv6 header (%d bytes, version %d)", len(ip), v)
	}
	h.Src = netip.AddrFrom16([16]byte(ip[8:24]))
	h.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
	next, rest := ip[6], ip[40:]
	for {
		h.Proto = next
		var n int
		switch next {
		case ip6HopByHop, ip6Routing, ip6DestOpts:
			if len(rest) < 2 {
				return h, nil
			}
			n = (int(rest[1]) + 1) * 8
		case ip6AH:
			if len(rest) < 2 {
				return h, nil
			}
			n = (int(rest[1]) + 2) * 4
		case ip6Fragment:
			if len(rest) < 8 {
				return h, nil
			}
			n = 8
			if binary.BigEndian.Uint16(rest[2:])&0xfff8 != 0 {
				h.Proto, h.Fragment = rest[0], true
				return h, nil
			}
		default:
			h.transport(rest)
			return h, nil
		}
		if len(rest) < n {
			return h, nil
		}
		next, rest = rest[0], rest[n:]
	}
}
