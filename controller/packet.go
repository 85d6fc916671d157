package controller

// The headers of a denied packet, decoded by hand for the deny log: Ethernet (with
// optional 802.1Q tags), IPv4 (RFC 791), then TCP (RFC 9293), UDP (RFC 768), SCTP
// (RFC 9260, the common header) or ICMP (RFC 792). Only what the log line needs; the
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

// packetHeaders is what parsePacket finds in a frame.
type packetHeaders struct {
	Src, Dst netip.Addr
	// Proto is the IPv4 protocol number.
	Proto uint8
	// SrcPort and DstPort are the TCP, UDP or SCTP ports (0 for other protocols).
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode are set for ICMP.
	ICMPType, ICMPCode uint8
	// Fragment is true for an IPv4 fragment other than the first (no transport header).
	Fragment bool
}

// protoName returns "TCP", "UDP", "SCTP", "ICMP" or the protocol number.
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
	}
	return fmt.Sprintf("%d", h.Proto)
}

// parsePacket decodes an Ethernet frame carrying IPv4. Errors: a frame that is not IPv4
// or is too short for the headers it announces (a truncated transport header leaves the
// ports 0 and is not an error when the IPv4 header is whole: the addresses still log).
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
	if et != 0x0800 {
		return h, fmt.Errorf("ethertype %#04x, not IPv4", et)
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
	l4 := ip[ihl:]
	switch h.Proto {
	case ipProtoTCP, ipProtoUDP, ipProtoSCTP:
		if len(l4) >= 4 {
			h.SrcPort = binary.BigEndian.Uint16(l4[0:])
			h.DstPort = binary.BigEndian.Uint16(l4[2:])
		}
	case ipProtoICMP:
		if len(l4) >= 2 {
			h.ICMPType, h.ICMPCode = l4[0], l4[1]
		}
	}
	return h, nil
}
