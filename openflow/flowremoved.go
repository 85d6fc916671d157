package openflow

// Flow-removed messages: OFPT_FLOW_REMOVED from the switch, decoded here and handed to a
// bounded queue, as packet-ins are (packetin.go).
//
// Design history. The switch sends one for a flow with OFPFF_SEND_FLOW_REM when it leaves
// the table (OpenFlow 1.3.5 §6.5, §7.4.2): its idle or hard timeout, a delete, an
// eviction. Session affinity uses them (the learned flows of a timeout above the learn
// action's 16 bits ask for one, controller/services.go carries the remainder). OVS sends
// asynchronous messages to a service connection (the .mgmt socket Conn dials) only once
// it has set a nonzero miss_send_len, so Dial sends OFPT_SET_CONFIG when either queue is
// set; an OpenFlow 1.3 connection's default asynchronous configuration (role equal)
// includes every flow-removed reason (OVS "Asynchronous Messages"; ovs-ofctl
// get-async-config shows it), so no OFPT_SET_ASYNC is needed. Messages sent while no
// connection is up are lost: the Sync that starts each connection starts from its own
// flows anyway.

import (
	"encoding/binary"
	"fmt"

	"github.com/contiv/libOpenflow/openflow13"
)

// Flow-removed reasons (ofp_flow_removed_reason, OpenFlow 1.3.5 §7.4.2).
const (
	// FlowRemovedIdleTimeout: the flow was idle for its idle_timeout.
	FlowRemovedIdleTimeout uint8 = 0
	// FlowRemovedHardTimeout: the flow's hard_timeout passed.
	FlowRemovedHardTimeout uint8 = 1
	// FlowRemovedDelete: a flow mod deleted it.
	FlowRemovedDelete uint8 = 2
	// FlowRemovedGroupDelete: the group it output to was deleted.
	FlowRemovedGroupDelete uint8 = 3
)

// OXMField is one field of an OXM match (OpenFlow 1.3.5 §7.2.3.2) as it came on the wire:
// class, field, value and mask (nil without one).
type OXMField struct {
	Class uint16
	Field uint8
	Value []byte
	Mask  []byte
}

// FlowRemoved is one OFPT_FLOW_REMOVED (ofp_flow_removed, OpenFlow 1.3.5 §7.4.2).
type FlowRemoved struct {
	// Cookie, Priority and TableID are the removed flow's.
	Cookie   uint64
	Priority uint16
	TableID  uint8
	// Reason is a FlowRemoved* reason.
	Reason uint8
	// DurationSec is how long the flow was in the table, seconds (whole part).
	DurationSec uint32
	// IdleTimeout and HardTimeout are the flow's timeouts, seconds (0 = none).
	IdleTimeout, HardTimeout uint16
	// PacketCount and ByteCount are the flow's counters.
	PacketCount, ByteCount uint64
	// Match is the flow's match, field by field in the switch's order.
	Match []OXMField
}

// Field returns the value of the match field class:field without a mask, and whether the
// match has it so.
func (f FlowRemoved) Field(class uint16, field uint8) ([]byte, bool) {
	for _, m := range f.Match {
		if m.Class == class && m.Field == field && m.Mask == nil {
			return m.Value, true
		}
	}
	return nil, false
}

// FlowRemovedQueue is a bounded queue of flow-removed messages shared by every connection
// of a Switch (Options.FlowRemoved). All methods are safe for concurrent use.
type FlowRemovedQueue = Queue[FlowRemoved]

// NewFlowRemovedQueue returns a queue holding at most size messages (size < 1 means 1).
func NewFlowRemovedQueue(size int) *FlowRemovedQueue { return newQueue[FlowRemoved](size) }

// decodeFlowRemoved decodes an OFPT_FLOW_REMOVED: header 8, cookie 8, priority 2, reason
// 1, table_id 1, duration_sec 4, duration_nsec 4, idle_timeout 2, hard_timeout 2,
// packet_count 8, byte_count 8, then ofp_match (type 2, length 2, OXM TLVs).
func decodeFlowRemoved(msg []byte) (FlowRemoved, error) {
	var f FlowRemoved
	if len(msg) < 56 || msg[1] != openflow13.Type_FlowRemoved {
		return f, fmt.Errorf("malformed flow-removed: message type %d, %d bytes", msg[1], len(msg))
	}
	f.Cookie = binary.BigEndian.Uint64(msg[8:])
	f.Priority = binary.BigEndian.Uint16(msg[16:])
	f.Reason = msg[18]
	f.TableID = msg[19]
	f.DurationSec = binary.BigEndian.Uint32(msg[20:])
	f.IdleTimeout = binary.BigEndian.Uint16(msg[28:])
	f.HardTimeout = binary.BigEndian.Uint16(msg[30:])
	f.PacketCount = binary.BigEndian.Uint64(msg[32:])
	f.ByteCount = binary.BigEndian.Uint64(msg[40:])
	ml := int(binary.BigEndian.Uint16(msg[50:]))
	if binary.BigEndian.Uint16(msg[48:]) != openflow13.MatchType_OXM || ml < 4 || 48+ml > len(msg) {
		return f, fmt.Errorf("malformed flow-removed match: type %d, length %d, message %d bytes", binary.BigEndian.Uint16(msg[48:]), ml, len(msg))
	}
	for off := 52; off < 48+ml; {
		if off+4 > 48+ml {
			return f, fmt.Errorf("malformed flow-removed match field at offset %d", off)
		}
		class, field, hasMask, l := binary.BigEndian.Uint16(msg[off:]), msg[off+2]>>1, msg[off+2]&1 == 1, int(msg[off+3])
		if off+4+l > 48+ml || hasMask && l%2 != 0 {
			return f, fmt.Errorf("malformed flow-removed match field at offset %d (length %d)", off, l)
		}
		v := append([]byte(nil), msg[off+4:off+4+l]...)
		m := OXMField{Class: class, Field: field, Value: v}
		if hasMask {
			m.Value, m.Mask = v[:l/2], v[l/2:]
		}
		f.Match = append(f.Match, m)
		off += 4 + l
	}
	return f, nil
}
