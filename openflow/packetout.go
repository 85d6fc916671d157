package openflow

// Packet-outs: a packet the controller built, sent out of one port (the Service proxy's
// rejects: a TCP reset or an ICMP port unreachable to the client).

import (
	"context"
	"encoding/binary"
	"fmt"
)

// OFPPController is OFPP_CONTROLLER (OpenFlow 1.3.5 §7.2.1): a packet-out's in_port
// when the packet comes from the controller itself.
const OFPPController uint32 = 0xfffffffd

// PacketOut sends frame (a whole Ethernet frame) out of ofport with an OFPT_PACKET_OUT
// (OpenFlow 1.3.5 §7.3.7: buffer_id OFP_NO_BUFFER, in_port OFPP_CONTROLLER, one
// OFPAT_OUTPUT action). The switch sends no reply to a packet-out that works; an error it
// returns is not waited for. Errors: the connection is down (ErrDisconnected), ofport 0,
// or a frame shorter than an Ethernet header.
func (s *Conn) PacketOut(ctx context.Context, ofport uint32, frame []byte) error {
	if ofport == 0 || len(frame) < 14 {
		return fmt.Errorf("packet-out: ofport %d, frame of %d bytes: want an ofport and a whole Ethernet frame", ofport, len(frame))
	}
	const hdr, act = 24, 16
	msg := make([]byte, hdr+act+len(frame))
	msg[0] = 4  // OFP_VERSION 1.3
	msg[1] = 13 // OFPT_PACKET_OUT
	binary.BigEndian.PutUint16(msg[2:], uint16(len(msg)))
	binary.BigEndian.PutUint32(msg[4:], s.nextXid())
	binary.BigEndian.PutUint32(msg[8:], 0xffffffff) // OFP_NO_BUFFER
	binary.BigEndian.PutUint32(msg[12:], OFPPController)
	binary.BigEndian.PutUint16(msg[16:], act)
	// action output: type 0, len 16, port, max_len, pad 6
	binary.BigEndian.PutUint16(msg[hdr+2:], act)
	binary.BigEndian.PutUint32(msg[hdr+4:], ofport)
	binary.BigEndian.PutUint16(msg[hdr+8:], 0xffff) // OFPCML_NO_BUFFER
	copy(msg[hdr+act:], frame)
	if len(msg) > 0xffff {
		return fmt.Errorf("packet-out of %d bytes: larger than an OpenFlow message", len(msg))
	}
	return s.write(ctx, [][]byte{msg})
}

// PacketOut is Conn.PacketOut on the current connection; it fails fast with an error
// matching ErrDisconnected while there is none.
func (s *Switch) PacketOut(ctx context.Context, ofport uint32, frame []byte) error {
	return onConnErr(s, func(c *Conn) error { return c.PacketOut(ctx, ofport, frame) })
}
