package openflow

// Packet-ins: OFPT_PACKET_IN from the switch, decoded here and handed to a bounded queue.
//
// Design history. ovs-vswitchd sends asynchronous messages to a service connection (the
// bridge's .mgmt socket, which is what Conn dials) only once that connection has set a
// nonzero miss_send_len with OFPT_SET_CONFIG (OVS "Asynchronous Messages" in
// ovs-vswitchd's design notes; ovs-ofctl monitor does the same), so Dial sends one when
// Options.PacketIns is set. The reader goroutine must never block behind a slow consumer
// (barrier and echo replies queue behind it), so it offers each packet-in to the queue
// without waiting and counts what does not fit. The queue outlives connections: a Switch
// passes the same Options to every connection it dials.

import (
	"encoding/binary"
	"fmt"

	"github.com/contiv/libOpenflow/openflow13"
)

// PacketIn is one OFPT_PACKET_IN (ofp_packet_in, OpenFlow 1.3.5 §7.4.1).
type PacketIn struct {
	// BufferID is the switch's buffer id, 0xffffffff (OFP_NO_BUFFER) when the packet is
	// not buffered (OVS never buffers).
	BufferID uint32
	// TotalLen is the full length of the packet in bytes; Data may be shorter (max_len).
	TotalLen uint16
	// Reason is OFPR_NO_MATCH (0), OFPR_ACTION (1, an output to the controller) or
	// OFPR_INVALID_TTL (2).
	Reason uint8
	// TableID is the table of the flow that sent the packet.
	TableID uint8
	// Cookie is that flow's cookie (0xffffffffffffffff if unknown).
	Cookie uint64
	// InPort is the OXM in_port of the packet-in's match, 0 if absent.
	InPort uint32
	// Data is the packet from its Ethernet header, at most the action's max_len bytes.
	Data []byte
}

// PacketInQueue is a bounded queue of packet-ins shared by every connection of a Switch
// (Options.PacketIns). All methods are safe for concurrent use.
type PacketInQueue = Queue[PacketIn]

// NewPacketInQueue returns a queue holding at most size packet-ins (size < 1 means 1).
func NewPacketInQueue(size int) *PacketInQueue { return newQueue[PacketIn](size) }

// packetInMissSendLen is the miss_send_len Dial sets when packet-ins are wanted (bytes
// of a table-miss packet sent to the controller; 128 as OVS's default for a controller).
const packetInMissSendLen = 128

// setConfigMsg returns an OFPT_SET_CONFIG (ofp_switch_config, OpenFlow 1.3.5 §7.3.2):
// flags 0 (OFPC_FRAG_NORMAL), miss_send_len.
func setConfigMsg(xid uint32, missSendLen uint16) []byte {
	b := make([]byte, 12)
	b[0], b[1] = ofpVersion13, openflow13.Type_SetConfig
	binary.BigEndian.PutUint16(b[2:], 12)
	binary.BigEndian.PutUint32(b[4:], xid)
	binary.BigEndian.PutUint16(b[10:], missSendLen)
	return b
}

// decodePacketIn decodes an OFPT_PACKET_IN: header 8, buffer_id 4, total_len 2, reason 1,
// table_id 1, cookie 8, then ofp_match (type 2, length 2, OXM TLVs, padded to a multiple
// of 8), 2 bytes of pad, then the packet.
func decodePacketIn(msg []byte) (PacketIn, error) {
	var p PacketIn
	if len(msg) < 32 || msg[1] != openflow13.Type_PacketIn {
		return p, fmt.Errorf("malformed packet-in: message type %d, %d bytes", msg[1], len(msg))
	}
	p.BufferID = binary.BigEndian.Uint32(msg[8:])
	p.TotalLen = binary.BigEndian.Uint16(msg[12:])
	p.Reason = msg[14]
	p.TableID = msg[15]
	p.Cookie = binary.BigEndian.Uint64(msg[16:])
	ml := int(binary.BigEndian.Uint16(msg[26:]))
	if binary.BigEndian.Uint16(msg[24:]) != openflow13.MatchType_OXM || ml < 4 || 24+ml > len(msg) {
		return p, fmt.Errorf("malformed packet-in match: type %d, length %d, message %d bytes", binary.BigEndian.Uint16(msg[24:]), ml, len(msg))
	}
	for off := 28; off+4 <= 24+ml; {
		class, field, l := binary.BigEndian.Uint16(msg[off:]), msg[off+2]>>1, int(msg[off+3])
		if off+4+l > 24+ml {
			return p, fmt.Errorf("malformed packet-in match field at offset %d (length %d)", off, l)
		}
		if class == openflow13.OXM_CLASS_OPENFLOW_BASIC && field == openflow13.OXM_FIELD_IN_PORT && l == 4 {
			p.InPort = binary.BigEndian.Uint32(msg[off+4:])
		}
		off += 4 + l
	}
	data := 24 + (ml+7)/8*8 + 2
	if data > len(msg) {
		return p, fmt.Errorf("malformed packet-in: match of %d bytes leaves no data in %d bytes", ml, len(msg))
	}
	p.Data = msg[data:]
	return p, nil
}
