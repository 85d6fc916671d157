package openflow

// Meters: OFPT_METER_MOD and the OFPMP_METER statistics, encoded here.
//
// Design history. libOpenflow's MeterMod codec works for the common case but a band
// built without NewMeterBandHeader has length 0 (OVS answers OFPMMFC_BAD_BAND), a delete
// that carries bands panics (Len leaves them out, MarshalBinary still copies them) and it
// logs every band through logrus; it has no meter statistics at all. Both messages are
// small fixed structures, so they are encoded and decoded here, and the tests check the
// bytes with `ovs-ofctl ofp-print` and against a real switch (`ovs-ofctl dump-meters`,
// `meter-stats`).
//
// Seen on OVS 3.1 (userspace datapath, netdev): meter features max_meter 262144,
// max_bands 8, band types drop, capabilities kbps pktps burst stats. A flow whose
// instructions name a meter the switch lacks is refused with OFPMMFC_INVALID_METER, so
// the meter must exist before such flows are added; adding a meter that exists fails with
// OFPMMFC_METER_EXISTS (SetDropMeter then modifies it). Meters live in ovs-vswitchd only:
// a restarted ovs-vswitchd has none, so the caller creates them in its OnConnect hook.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/contiv/libOpenflow/openflow13"
)

// Meter mod commands, flags and band types (OpenFlow 1.3.5 §7.3.4.4, enum
// ofp_meter_mod_command, ofp_meter_flags, ofp_meter_band_type).
const (
	// MeterAdd is OFPMC_ADD: create a meter (fails with OFPMMFC_METER_EXISTS if it exists).
	MeterAdd uint16 = 0
	// MeterModify is OFPMC_MODIFY: replace a meter's flags and bands (fails with
	// OFPMMFC_UNKNOWN_METER if it does not exist).
	MeterModify uint16 = 1
	// MeterDelete is OFPMC_DELETE: delete a meter and every flow that uses it.
	MeterDelete uint16 = 2

	// MeterFlagKbps is OFPMF_KBPS: rates in kilobits per second.
	MeterFlagKbps uint16 = 1 << 0
	// MeterFlagPktps is OFPMF_PKTPS: rates in packets per second.
	MeterFlagPktps uint16 = 1 << 1
	// MeterFlagBurst is OFPMF_BURST: the bands' burst_size applies.
	MeterFlagBurst uint16 = 1 << 2
	// MeterFlagStats is OFPMF_STATS: the switch keeps the meter's statistics.
	MeterFlagStats uint16 = 1 << 3

	// MeterBandDrop is OFPMBT_DROP: packets above the band's rate are dropped.
	MeterBandDrop uint16 = 1

	// meterModFixedLen is sizeof(ofp_meter_mod) without bands: header 8, command 2,
	// flags 2, meter_id 4.
	meterModFixedLen = 16
	// meterBandDropLen is sizeof(ofp_meter_band_drop): type, len, rate, burst_size, pad[4].
	meterBandDropLen = 16
	// multipartMeter is OFPMP_METER (9), the meter statistics multipart type.
	multipartMeter uint16 = 9
	// errMeterModFailed is OFPET_METER_MOD_FAILED (12); codes below.
	errMeterModFailed   uint16 = 12
	errCodeMeterExists  uint16 = 1 // OFPMMFC_METER_EXISTS
	errCodeUnknownMeter uint16 = 3 // OFPMMFC_UNKNOWN_METER
)

// MeterMod is one OFPT_METER_MOD with a single drop band (OpenFlow 1.3.5 §7.3.4.4):
// traffic through meter ID above Rate is dropped.
type MeterMod struct {
	// Command is MeterAdd, MeterModify or MeterDelete.
	Command uint16
	// ID is the meter id, 1..0xffff0000 (OFPM_MAX).
	ID uint32
	// Flags are MeterFlag* bits; exactly one of MeterFlagKbps and MeterFlagPktps for add
	// and modify.
	Flags uint16
	// Rate is the drop band's rate, in packets per second with MeterFlagPktps, else in
	// kb/s; at least 1 for add and modify.
	Rate uint32
	// Burst is the drop band's burst size, in packets with MeterFlagPktps, else in
	// kilobits; used only with MeterFlagBurst.
	Burst uint32
}

// encodeMeterMod returns the wire bytes of m with transaction id xid: ofp_meter_mod
// followed by one ofp_meter_band_drop (none for MeterDelete). Errors: an id outside
// 1..OFPM_MAX, a zero rate or no rate unit for add and modify.
func encodeMeterMod(m MeterMod, xid uint32) ([]byte, error) {
	if m.ID == 0 || m.ID > openflow13.OFPM13_MAX {
		return nil, fmt.Errorf("meter id %d: want 1..%d (OFPM_MAX)", m.ID, uint32(openflow13.OFPM13_MAX))
	}
	n := meterModFixedLen
	if m.Command != MeterDelete {
		if m.Rate == 0 {
			return nil, fmt.Errorf("meter %d: drop band rate 0, want at least 1", m.ID)
		}
		if (m.Flags&MeterFlagPktps != 0) == (m.Flags&MeterFlagKbps != 0) {
			return nil, fmt.Errorf("meter %d: flags %#x must hold exactly one of OFPMF_PKTPS and OFPMF_KBPS", m.ID, m.Flags)
		}
		n += meterBandDropLen
	}
	b := make([]byte, n)
	b[0], b[1] = ofpVersion13, openflow13.Type_MeterMod
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	binary.BigEndian.PutUint32(b[4:], xid)
	binary.BigEndian.PutUint16(b[8:], m.Command)
	binary.BigEndian.PutUint16(b[10:], m.Flags)
	binary.BigEndian.PutUint32(b[12:], m.ID)
	if m.Command != MeterDelete {
		band := b[meterModFixedLen:]
		binary.BigEndian.PutUint16(band[0:], MeterBandDrop)
		binary.BigEndian.PutUint16(band[2:], meterBandDropLen)
		binary.BigEndian.PutUint32(band[4:], m.Rate)
		binary.BigEndian.PutUint32(band[8:], m.Burst)
	}
	return b, nil
}

// ApplyMeterMod sends m followed by a barrier (OpenFlow 1.3.5 §7.3.4.4, §7.3.8) and waits
// for the barrier reply. Errors: a *RequestError with the switch's OFPET_METER_MOD_FAILED
// code (e.g. OFPMMFC_METER_EXISTS, OFPMMFC_BAD_RATE), ErrDisconnected, ctx, or an
// invalid m (see MeterMod).
func (s *Conn) ApplyMeterMod(ctx context.Context, m MeterMod) error {
	c := newCall()
	xid := s.nextXid()
	b, err := encodeMeterMod(m, xid)
	if err != nil {
		return err
	}
	c.labels[xid] = fmt.Sprintf("meter mod (command %d, meter %d)", m.Command, m.ID)
	c.final = s.nextXid()
	c.labels[c.final] = "barrier request"
	if err := s.roundTrip(ctx, c, [][]byte{b, headerOnly(openflow13.Type_BarrierRequest, c.final)}); err != nil {
		return fmt.Errorf("meter %d on bridge %s: %w", m.ID, s.bridge, err)
	}
	if len(c.errs) > 0 {
		return fmt.Errorf("bridge %s rejected meter %d: %w", s.bridge, m.ID, c.joinedErrs())
	}
	return nil
}

// SetDropMeter makes meter id exist with one drop band at rate packets per second and a
// burst of burst packets (flags OFPMF_PKTPS|OFPMF_BURST|OFPMF_STATS; OpenFlow 1.3.5
// §7.3.4.4): an OFPMC_ADD, and an OFPMC_MODIFY if the switch says the meter exists
// (OFPMMFC_METER_EXISTS: a reconnect to the same ovs-vswitchd, or an earlier run).
// Errors: as ApplyMeterMod; OFPMMFC_BAD_RATE/OFPMMFC_BAD_BURST for values the switch
// refuses (fix: a smaller policyDenyLogRate).
func (s *Conn) SetDropMeter(ctx context.Context, id, rate, burst uint32) error {
	m := MeterMod{Command: MeterAdd, ID: id, Flags: MeterFlagPktps | MeterFlagBurst | MeterFlagStats, Rate: rate, Burst: burst}
	err := s.ApplyMeterMod(ctx, m)
	if !isMeterError(err, errCodeMeterExists) {
		return err
	}
	m.Command = MeterModify
	return s.ApplyMeterMod(ctx, m)
}

// isMeterError reports whether err holds an OFPET_METER_MOD_FAILED error with code.
func isMeterError(err error, code uint16) bool {
	var oe *Error
	return errors.As(err, &oe) && oe.Type == errMeterModFailed && oe.Code == code
}

// IsMeterExists reports whether err is the switch's OFPET_METER_MOD_FAILED/
// OFPMMFC_METER_EXISTS (OpenFlow 1.3.5 §7.4.4): an add of a meter that exists.
func IsMeterExists(err error) bool { return isMeterError(err, errCodeMeterExists) }

// IsUnknownMeter reports whether err is the switch's OFPET_METER_MOD_FAILED/
// OFPMMFC_UNKNOWN_METER (OpenFlow 1.3.5 §7.4.4): the meter named does not exist.
func IsUnknownMeter(err error) bool { return isMeterError(err, errCodeUnknownMeter) }

// MeterStats is one meter's statistics (ofp_meter_stats, OpenFlow 1.3.5 §7.3.5.12),
// counted since the meter was created in ovs-vswitchd.
type MeterStats struct {
	// ID is the meter id.
	ID uint32
	// FlowCount is the number of flows that use the meter.
	FlowCount uint32
	// PacketsIn and BytesIn count what entered the meter.
	PacketsIn, BytesIn uint64
	// Bands are the per-band counters, in the meter's band order: packets and bytes the
	// band applied to (for a drop band: dropped).
	Bands []MeterBandStats
}

// MeterBandStats is ofp_meter_band_stats: what one band applied to.
type MeterBandStats struct {
	// Packets and Bytes the band applied to (dropped, for a drop band).
	Packets, Bytes uint64
}

// MeterStats asks for meter id's statistics (OFPMP_METER multipart request, OpenFlow
// 1.3.5 §7.3.5.12; id OFPM_ALL, 0xffffffff, for every meter). Errors: the switch's
// OFPT_ERROR (a meter that does not exist: OFPMMFC_UNKNOWN_METER, see IsUnknownMeter,
// as OVS 3.1 answers), a malformed reply, ErrDisconnected, ctx.
func (s *Conn) MeterStats(ctx context.Context, id uint32) ([]MeterStats, error) {
	c := newCall()
	c.final = s.nextXid()
	c.multipart = true
	c.labels[c.final] = fmt.Sprintf("meter stats request (meter %d)", id)
	b := make([]byte, 24) // ofp_multipart_request (16) + ofp_meter_multipart_request (8)
	b[0], b[1] = ofpVersion13, openflow13.Type_MultiPartRequest
	binary.BigEndian.PutUint16(b[2:], 24)
	binary.BigEndian.PutUint32(b[4:], c.final)
	binary.BigEndian.PutUint16(b[8:], multipartMeter)
	binary.BigEndian.PutUint32(b[16:], id)
	if err := s.roundTrip(ctx, c, [][]byte{b}); err != nil {
		return nil, fmt.Errorf("meter stats of bridge %s: %w", s.bridge, err)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("meter stats of bridge %s: %w", s.bridge, c.joinedErrs())
	}
	var out []MeterStats
	for _, r := range c.replies {
		ms, err := decodeMeterStatsReply(r)
		if err != nil {
			return nil, fmt.Errorf("meter stats of bridge %s: %w", s.bridge, err)
		}
		out = append(out, ms...)
	}
	return out, nil
}

// decodeMeterStatsReply decodes one OFPMP_METER reply: ofp_multipart_reply (16 bytes),
// then ofp_meter_stats entries (40 bytes fixed: meter_id 4, len 2, pad 6, flow_count 4,
// packet_in_count 8, byte_in_count 8, duration_sec 4, duration_nsec 4; then 16 bytes
// per band: packet_band_count 8, byte_band_count 8), each sized by its len.
func decodeMeterStatsReply(msg []byte) ([]MeterStats, error) {
	if len(msg) < 16 || msg[1] != openflow13.Type_MultiPartReply || binary.BigEndian.Uint16(msg[8:]) != multipartMeter {
		return nil, fmt.Errorf("malformed meter stats reply: message type %d, %d bytes", msg[1], len(msg))
	}
	var out []MeterStats
	for off := 16; off < len(msg); {
		if off+40 > len(msg) {
			return nil, fmt.Errorf("malformed meter stats entry at offset %d: %d bytes left", off, len(msg)-off)
		}
		e := msg[off:]
		l := int(binary.BigEndian.Uint16(e[4:]))
		if l < 40 || off+l > len(msg) || (l-40)%16 != 0 {
			return nil, fmt.Errorf("malformed meter stats entry at offset %d: length %d", off, l)
		}
		ms := MeterStats{ID: binary.BigEndian.Uint32(e[0:]), FlowCount: binary.BigEndian.Uint32(e[12:]),
			PacketsIn: binary.BigEndian.Uint64(e[16:]), BytesIn: binary.BigEndian.Uint64(e[24:])}
		for p := 40; p < l; p += 16 {
			ms.Bands = append(ms.Bands, MeterBandStats{Packets: binary.BigEndian.Uint64(e[p:]), Bytes: binary.BigEndian.Uint64(e[p+8:])})
		}
		out = append(out, ms)
		off += l
	}
	return out, nil
}

// MeterStats is Conn.MeterStats on the current connection; it fails fast with an error
// matching ErrDisconnected while there is none.
func (s *Switch) MeterStats(ctx context.Context, id uint32) ([]MeterStats, error) {
	return onConn(s, func(c *Conn) ([]MeterStats, error) { return c.MeterStats(ctx, id) })
}
