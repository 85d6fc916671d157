package flows

// The learn and resubmit actions (Nicira extensions), for session affinity (service.go).

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/contiv/libOpenflow/openflow13"
	"github.com/contiv/libOpenflow/util"
)

// Transport destination port fields, as learn specs name them (ovs-fields(7)).
var (
	// FieldTCPDst is the TCP destination port (NXM_OF_TCP_DST, 16 bits).
	FieldTCPDst = NXMField{Name: "NXM_OF_TCP_DST", Class: openflow13.OXM_CLASS_NXM_0, Field: 10, Bits: 16}
	// FieldUDPDst is the UDP destination port (NXM_OF_UDP_DST, 16 bits).
	FieldUDPDst = NXMField{Name: "NXM_OF_UDP_DST", Class: openflow13.OXM_CLASS_NXM_0, Field: 12, Bits: 16}
	// FieldSCTPDst is the SCTP destination port (OXM_OF_SCTP_DST, 16 bits).
	FieldSCTPDst = NXMField{Name: "OXM_OF_SCTP_DST", Class: openflow13.OXM_CLASS_OPENFLOW_BASIC, Field: 23, Bits: 16}
	// fieldEthType and fieldIPProto are matched with immediate values in learn specs.
	fieldEthType = NXMField{Name: "eth_type", Class: openflow13.OXM_CLASS_NXM_0, Field: 3, Bits: 16}
	fieldIPProto = NXMField{Name: "nw_proto", Class: openflow13.OXM_CLASS_NXM_0, Field: 6, Bits: 8}
)

// nxmHeader is the 32-bit NXM/OXM header of f without a mask: class(16) field(7)
// hasmask(1) length(8).
func (f NXMField) nxmHeader() uint32 {
	return uint32(f.Class)<<16 | uint32(f.Field)<<9 | uint32(f.Bits+7)/8
}

// Learn flags (nicira-ext.h NX_LEARN_F_*).
const (
	// LearnSendFlowRem: the learned flow has OFPFF_SEND_FLOW_REM, so the switch sends a
	// flow-removed message when it times out (OpenFlow 1.3.5 §7.4.2).
	LearnSendFlowRem uint16 = 1 << 0
)

// LearnMatch is one match spec of a Learn action: the learned flow matches Field with
// the packet's own value of Field (Value nil) or with the immediate Value (eth_type,
// nw_proto).
type LearnMatch struct {
	Field NXMField
	// Imm is the immediate value (used when HasImm), in the field's width.
	Imm    uint64
	HasImm bool
}

// LearnLoad is one load spec of a Learn action: the learned flow's action
// load:Value->Dst.
type LearnLoad struct {
	Dst   FieldRange
	Value uint64
}

// Learn adds or refreshes a flow in Table (NXAST_LEARN, ovs-actions(7) "The learn
// action"): its match is built from the packet (Match), its actions are loads of
// immediate values (Load). IdleTimeout and HardTimeout are seconds, 0..65535 (0 = none);
// a learned flow whose match, priority, timeouts and actions equal an existing one only
// refreshes it, otherwise it replaces it (timeouts restart). Printed as OVS's
// learn_format:
//
//	learn(table="service_affinity",idle_timeout=10800,priority=200,cookie=0x...,eth_type=0x800,nw_proto=6,NXM_OF_IP_SRC[],...,load:0xaf40106->NXM_NX_REG3[])
type Learn struct {
	Table       TableID
	IdleTimeout uint16
	HardTimeout uint16
	Priority    uint16
	Cookie      Cookie
	// Flags are Learn* flags (LearnSendFlowRem).
	Flags uint16
	Match []LearnMatch
	Load  []LearnLoad
}

func (a Learn) format(b *strings.Builder, _ PortNames) {
	b.WriteString("learn(table=")
	formatTable(b, a.Table)
	if a.IdleTimeout != 0 {
		fmt.Fprintf(b, ",idle_timeout=%d", a.IdleTimeout)
	}
	if a.HardTimeout != 0 {
		fmt.Fprintf(b, ",hard_timeout=%d", a.HardTimeout)
	}
	if a.Priority != 0x8000 {
		fmt.Fprintf(b, ",priority=%d", a.Priority)
	}
	if a.Flags&LearnSendFlowRem != 0 {
		b.WriteString(",send_flow_rem")
	}
	if a.Cookie != 0 {
		fmt.Fprintf(b, ",cookie=%#x", uint64(a.Cookie))
	}
	for _, m := range a.Match {
		switch {
		case m.HasImm && m.Field == fieldEthType:
			fmt.Fprintf(b, ",%s=%#x", m.Field.Name, m.Imm)
		case m.HasImm:
			fmt.Fprintf(b, ",%s=%d", m.Field.Name, m.Imm)
		default:
			fmt.Fprintf(b, ",%s", Whole(m.Field))
		}
	}
	for _, l := range a.Load {
		if l.Value == 0 {
			fmt.Fprintf(b, ",load:0->%s", l.Dst)
		} else {
			fmt.Fprintf(b, ",load:%#x->%s", l.Value, l.Dst)
		}
	}
	b.WriteString(")")
}

func (a Learn) ofAction() openflow13.Action {
	return &rawNXAction{subtype: nxastLearn, body: a.encode()}
}

// encode returns nx_action_learn after the 10-byte NX action header (nicira-ext.h):
// timeouts, priority, cookie, flags, table, pad, fin timeouts, the flow_mod_specs.
func (a Learn) encode() []byte {
	d := make([]byte, 22)
	binary.BigEndian.PutUint16(d[0:], a.IdleTimeout)
	binary.BigEndian.PutUint16(d[2:], a.HardTimeout)
	binary.BigEndian.PutUint16(d[4:], a.Priority)
	binary.BigEndian.PutUint64(d[6:], uint64(a.Cookie))
	binary.BigEndian.PutUint16(d[14:], a.Flags)
	d[16] = uint8(a.Table)
	imm := func(v uint64, nbits uint8) []byte {
		n := (int(nbits) + 15) / 16 * 2
		out := make([]byte, n)
		for i := n - 1; i >= 0; i-- {
			out[i] = byte(v)
			v >>= 8
		}
		return out
	}
	sub := func(r FieldRange) []byte {
		out := make([]byte, 6)
		binary.BigEndian.PutUint32(out, r.Field.nxmHeader())
		binary.BigEndian.PutUint16(out[4:], uint16(r.Start))
		return out
	}
	const srcImm, dstLoad = 1 << 13, 1 << 11
	for _, m := range a.Match {
		r := Whole(m.Field)
		if m.HasImm {
			d = binary.BigEndian.AppendUint16(d, srcImm|uint16(r.Bits()))
			d = append(d, imm(m.Imm, r.Bits())...)
		} else {
			d = binary.BigEndian.AppendUint16(d, uint16(r.Bits()))
			d = append(d, sub(r)...)
		}
		d = append(d, sub(r)...)
	}
	for _, l := range a.Load {
		d = binary.BigEndian.AppendUint16(d, srcImm|dstLoad|uint16(l.Dst.Bits()))
		d = append(d, imm(l.Value, l.Dst.Bits())...)
		d = append(d, sub(l.Dst)...)
	}
	return d
}

// Resubmit looks the packet up in Table and runs the matching flow's actions, then
// continues with the next action here (NXAST_RESUBMIT_TABLE, ovs-actions(7) "The
// resubmit action"); the table may be any, earlier ones included. Printed
// "resubmit(,TABLE)".
type Resubmit struct {
	Table TableID
}

func (a Resubmit) format(b *strings.Builder, _ PortNames) {
	b.WriteString("resubmit(,")
	formatTable(b, a.Table)
	b.WriteString(")")
}

func (a Resubmit) ofAction() openflow13.Action {
	return openflow13.NewNXActionResubmitTableAction(0xfff8, uint8(a.Table)) // OFPP_IN_PORT (16-bit): keep in_port
}

// rawNXAction is a Nicira vendor action (type 0xffff, vendor 0x2320) that libOpenflow
// does not encode: its subtype, then the body, the whole zero-padded to 8 bytes.
type rawNXAction struct {
	subtype uint16
	body    []byte
	hdr     openflow13.ActionHeader
}

// Nicira action subtypes (nicira-ext.h NXAST_*) encoded by rawNXAction.
const (
	nxastMultipath = 10
	nxastLearn     = 16
)

var _ util.Message = (*rawNXAction)(nil)

func (r *rawNXAction) Header() *openflow13.ActionHeader {
	r.hdr = openflow13.ActionHeader{Type: openflow13.ActionType_Experimenter, Length: r.Len()}
	return &r.hdr
}

func (r *rawNXAction) Len() uint16 { return uint16((10 + len(r.body) + 7) / 8 * 8) }

func (r *rawNXAction) MarshalBinary() ([]byte, error) {
	d := make([]byte, r.Len())
	binary.BigEndian.PutUint16(d[0:], openflow13.ActionType_Experimenter)
	binary.BigEndian.PutUint16(d[2:], r.Len())
	binary.BigEndian.PutUint32(d[4:], 0x00002320)
	binary.BigEndian.PutUint16(d[8:], r.subtype)
	copy(d[10:], r.body)
	return d, nil
}

func (r *rawNXAction) UnmarshalBinary([]byte) error {
	return fmt.Errorf("flows: decoding Nicira action subtype %d is not supported", r.subtype)
}
