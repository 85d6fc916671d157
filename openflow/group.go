package openflow

// Groups: OFPT_GROUP_MOD, OFPMP_GROUP_DESC and OFPMP_GROUP statistics, encoded here.
//
// Design history. libOpenflow's GroupMod codec computes the message length in a uint16
// without a check (a group above 65,535 bytes is sent with a wrapped length and the switch
// reads garbage), drops the actions' marshalling errors and logs every bucket through
// logrus; it has no group description or statistics decoders. The messages are small
// fixed structures around libOpenflow's actions, so they are encoded here and the actions
// are marshalled with libOpenflow (the same codec the flow mods use). Tests check the
// bytes with `ovs-ofctl ofp-print` and the groups against a real switch (`dump-groups`,
// `dump-group-stats`).
//
// Seen on OVS 3.1 (userspace datapath): a flow whose actions name a group the switch lacks
// is refused with OFPBAC_BAD_OUT_GROUP, so groups must exist before such flows are added
// (and flows go before their groups are deleted); adding a group that exists fails with
// OFPGMFC_GROUP_EXISTS; groups live in ovs-vswitchd only, so a restarted ovs-vswitchd has
// none. One OpenFlow message is at most 65,535 bytes (the ofp_header length is 16 bits,
// OpenFlow 1.3.5 §7.1), which bounds the buckets one group mod can carry: the caller
// splits larger sets (GroupModLen tells the size before sending).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/contiv/libOpenflow/openflow13"
)

// Group mod commands and group types (OpenFlow 1.3.5 §7.3.4.2, enum ofp_group_mod_command,
// ofp_group_type).
const (
	// GroupAdd is OFPGC_ADD: create a group (fails with OFPGMFC_GROUP_EXISTS if it exists).
	GroupAdd uint16 = 0
	// GroupModify is OFPGC_MODIFY: replace a group's type and buckets (fails with
	// OFPGMFC_UNKNOWN_GROUP if it does not exist).
	GroupModify uint16 = 1
	// GroupDelete is OFPGC_DELETE: delete a group and every flow that uses it (a group
	// that does not exist is not an error).
	GroupDelete uint16 = 2
	// GroupAddOrModify is OVS's extension OFPGC11_ADD_OR_MOD (0x8000, ovs-ofctl mod-group
	// --may-create): create the group, or replace its type and buckets if it exists,
	// without touching the flows that use it. Seen on OVS 3.1 in plain batches and inside
	// bundles; other switches answer OFPGMFC_BAD_COMMAND.
	GroupAddOrModify uint16 = 0x8000

	// GroupTypeAll is OFPGT_ALL: every bucket is executed (multicast, flooding).
	GroupTypeAll uint8 = 0
	// GroupTypeSelect is OFPGT_SELECT: one bucket is executed, chosen by the switch by a
	// hash of the packet's flow, weighted by the buckets' weights.
	GroupTypeSelect uint8 = 1
	// GroupTypeIndirect is OFPGT_INDIRECT: exactly one bucket, executed always.
	GroupTypeIndirect uint8 = 2

	// MaxGroupID is OFPG_MAX, the highest usable group id.
	MaxGroupID uint32 = openflow13.OFPG_MAX
	// GroupAll is OFPG_ALL: every group, for GroupDelete and the statistics requests.
	GroupAll uint32 = openflow13.OFPG_ALL

	// MaxMessageLen is the largest OpenFlow message, in bytes (a 16-bit ofp_header length).
	MaxMessageLen = 0xffff

	// groupModFixedLen is sizeof(ofp_group_mod) without buckets: header 8, command 2,
	// type 1, pad 1, group_id 4.
	groupModFixedLen = 16
	// bucketFixedLen is sizeof(ofp_bucket) without actions: len 2, weight 2, watch_port 4,
	// watch_group 4, pad 4.
	bucketFixedLen = 16
	// multipartGroup and multipartGroupDesc are OFPMP_GROUP (6) and OFPMP_GROUP_DESC (7).
	multipartGroup     uint16 = 6
	multipartGroupDesc uint16 = 7
	// errGroupModFailed is OFPET_GROUP_MOD_FAILED (6); codes below.
	errGroupModFailed   uint16 = 6
	errCodeGroupExists  uint16 = 0 // OFPGMFC_GROUP_EXISTS
	errCodeUnknownGroup uint16 = 8 // OFPGMFC_UNKNOWN_GROUP
)

// Bucket is one ofp_bucket of a group (OpenFlow 1.3.5 §7.3.4.2).
type Bucket struct {
	// Weight is the bucket's relative weight in a select group (0..65535; a bucket of
	// weight 0 is never selected); ignored by other group types, where it must be 0.
	Weight uint16
	// Actions are the bucket's actions (an action set, OpenFlow 1.3.5 §5.10), in the
	// libOpenflow codec the flow mods use.
	Actions []openflow13.Action
}

// GroupMod is one OFPT_GROUP_MOD (OpenFlow 1.3.5 §7.3.4.2).
type GroupMod struct {
	// Command is GroupAdd, GroupModify, GroupAddOrModify or GroupDelete.
	Command uint16
	// Type is GroupTypeAll, GroupTypeSelect or GroupTypeIndirect (ignored by GroupDelete).
	Type uint8
	// ID is the group id, 0..MaxGroupID (GroupAll for a GroupDelete of every group).
	ID uint32
	// Buckets are the group's buckets (none for GroupDelete; exactly one for
	// GroupTypeIndirect).
	Buckets []Bucket
}

// GroupModLen returns the size in bytes of m on the wire, which must not exceed
// MaxMessageLen; an action that cannot be sized counts as its libOpenflow Len.
func GroupModLen(m GroupMod) int {
	n := groupModFixedLen
	if m.Command == GroupDelete {
		return n
	}
	for _, b := range m.Buckets {
		n += bucketLen(b)
	}
	return n
}

func bucketLen(b Bucket) int {
	n := bucketFixedLen
	for _, a := range b.Actions {
		n += int(a.Len())
	}
	return (n + 7) / 8 * 8
}

// encodeGroupMod returns the wire bytes of m with transaction id xid. Errors: an id above
// MaxGroupID (other than GroupAll for a delete), an unknown command or type, an indirect
// group without exactly one bucket, a weight on a bucket of a group that is not a select
// group, an action that does not marshal, and a message above MaxMessageLen (naming the
// group and its bucket count: split the buckets over several groups).
func encodeGroupMod(m GroupMod, xid uint32) ([]byte, error) {
	if m.ID > MaxGroupID && !(m.Command == GroupDelete && m.ID == GroupAll) {
		return nil, fmt.Errorf("group id %#x: want 0..%#x (OFPG_MAX)", m.ID, MaxGroupID)
	}
	switch m.Command {
	case GroupAdd, GroupModify, GroupAddOrModify:
	case GroupDelete:
		m.Buckets = nil
	default:
		return nil, fmt.Errorf("group %d: unknown group mod command %d (want OFPGC_ADD, OFPGC_MODIFY, OFPGC_DELETE or OFPGC11_ADD_OR_MOD)", m.ID, m.Command)
	}
	if m.Command != GroupDelete {
		switch m.Type {
		case GroupTypeAll, GroupTypeSelect:
		case GroupTypeIndirect:
			if len(m.Buckets) != 1 {
				return nil, fmt.Errorf("indirect group %d has %d buckets, want exactly 1", m.ID, len(m.Buckets))
			}
		default:
			return nil, fmt.Errorf("group %d: unsupported group type %d (want all, select or indirect)", m.ID, m.Type)
		}
	}
	n := GroupModLen(m)
	if n > MaxMessageLen {
		return nil, fmt.Errorf("group %d with %d buckets is %d bytes, above the %d bytes one OpenFlow message can hold: split its buckets over several groups",
			m.ID, len(m.Buckets), n, MaxMessageLen)
	}
	b := make([]byte, groupModFixedLen, n)
	b[0], b[1] = ofpVersion13, openflow13.Type_GroupMod
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	binary.BigEndian.PutUint32(b[4:], xid)
	binary.BigEndian.PutUint16(b[8:], m.Command)
	b[10] = m.Type
	binary.BigEndian.PutUint32(b[12:], m.ID)
	for i, bk := range m.Buckets {
		if bk.Weight != 0 && m.Type != GroupTypeSelect {
			return nil, fmt.Errorf("group %d bucket %d: weight %d on a group of type %d (weights are for select groups only)", m.ID, i, bk.Weight, m.Type)
		}
		l := bucketLen(bk)
		start := len(b)
		b = b[:start+bucketFixedLen]
		binary.BigEndian.PutUint16(b[start:], uint16(l))
		binary.BigEndian.PutUint16(b[start+2:], bk.Weight)
		binary.BigEndian.PutUint32(b[start+4:], openflow13.P_ANY)
		binary.BigEndian.PutUint32(b[start+8:], openflow13.OFPG_ANY)
		for j, a := range bk.Actions {
			ab, err := a.MarshalBinary()
			if err != nil {
				return nil, fmt.Errorf("group %d bucket %d action %d: %w", m.ID, i, j, err)
			}
			if len(ab) != int(a.Len()) {
				return nil, fmt.Errorf("group %d bucket %d action %d: marshalled %d bytes, its length says %d", m.ID, i, j, len(ab), a.Len())
			}
			b = append(b, ab...)
		}
		for len(b) < start+l {
			b = append(b, 0)
		}
	}
	return b, nil
}

// ApplyGroupMods sends mods in order followed by one barrier (OpenFlow 1.3.5 §7.3.4.2,
// §7.3.8) and waits for the barrier reply. Mods are applied one by one, not atomically.
// Errors: a *RequestError per rejected mod with the switch's OFPET_GROUP_MOD_FAILED code
// (see IsGroupExists, IsUnknownGroup), joined; ErrDisconnected; ctx; an invalid mod (see
// encodeGroupMod's rules: nothing is sent then). An empty mods returns nil.
func (s *Conn) ApplyGroupMods(ctx context.Context, mods []GroupMod) error {
	if len(mods) == 0 {
		return nil
	}
	c := newCall()
	bufs := make([][]byte, 0, len(mods)+1)
	for _, m := range mods {
		xid := s.nextXid()
		b, err := encodeGroupMod(m, xid)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", s.bridge, err)
		}
		c.labels[xid] = fmt.Sprintf("group mod (command %d, group %d, %d buckets)", m.Command, m.ID, len(m.Buckets))
		bufs = append(bufs, b)
	}
	c.final = s.nextXid()
	c.labels[c.final] = "barrier request"
	bufs = append(bufs, headerOnly(openflow13.Type_BarrierRequest, c.final))
	if err := s.roundTrip(ctx, c, bufs); err != nil {
		return fmt.Errorf("apply %d group mods to bridge %s: %w", len(mods), s.bridge, err)
	}
	if len(c.errs) > 0 {
		return fmt.Errorf("bridge %s rejected %d of %d group mods: %w", s.bridge, len(c.errs), len(mods), c.joinedErrs())
	}
	return nil
}

// isGroupError reports whether err holds an OFPET_GROUP_MOD_FAILED error with code.
func isGroupError(err error, code uint16) bool {
	var oe *Error
	return errors.As(err, &oe) && oe.Type == errGroupModFailed && oe.Code == code
}

// IsGroupExists reports whether err is the switch's OFPET_GROUP_MOD_FAILED/
// OFPGMFC_GROUP_EXISTS (OpenFlow 1.3.5 §7.4.4): an add of a group that exists.
func IsGroupExists(err error) bool { return isGroupError(err, errCodeGroupExists) }

// IsUnknownGroup reports whether err is the switch's OFPET_GROUP_MOD_FAILED/
// OFPGMFC_UNKNOWN_GROUP (OpenFlow 1.3.5 §7.4.4): a modify of a group that does not exist.
func IsUnknownGroup(err error) bool { return isGroupError(err, errCodeUnknownGroup) }

// GroupDesc is one group as the switch holds it (ofp_group_desc, OpenFlow 1.3.5
// §7.3.5.9): its id, type and buckets. Bucket actions are kept as the switch encoded
// them (Raw), since OVS may normalise actions; Weights are in bucket order.
type GroupDesc struct {
	// ID is the group id.
	ID uint32
	// Type is the group type (GroupType*).
	Type uint8
	// Weights are the buckets' weights, one per bucket, in the switch's order.
	Weights []uint16
	// Raw are the buckets' action bytes (ofp_action_header list), one per bucket.
	Raw [][]byte
}

// GroupStats is one group's counters (ofp_group_stats, OpenFlow 1.3.5 §7.3.5.10), counted
// since the group was created in ovs-vswitchd.
type GroupStats struct {
	// ID is the group id.
	ID uint32
	// RefCount is the number of flows (and groups) that forward to the group.
	RefCount uint32
	// Packets and Bytes processed by the group.
	Packets, Bytes uint64
	// Buckets are the per-bucket counters, in bucket order.
	Buckets []BucketStats
}

// BucketStats is ofp_bucket_counter: what one bucket processed.
type BucketStats struct {
	// Packets and Bytes the bucket processed.
	Packets, Bytes uint64
}

// groupMultipart sends an OFPMP_GROUP or OFPMP_GROUP_DESC request (the first with group
// id) and returns the replies' bodies after the 16-byte ofp_multipart_reply header.
func (s *Conn) groupMultipart(ctx context.Context, typ uint16, id uint32, what string) ([][]byte, error) {
	c := newCall()
	c.final = s.nextXid()
	c.multipart = true
	c.labels[c.final] = what
	n := 16
	if typ == multipartGroup {
		n = 24 // + ofp_group_stats_request: group_id 4, pad 4
	}
	b := make([]byte, n)
	b[0], b[1] = ofpVersion13, openflow13.Type_MultiPartRequest
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	binary.BigEndian.PutUint32(b[4:], c.final)
	binary.BigEndian.PutUint16(b[8:], typ)
	if typ == multipartGroup {
		binary.BigEndian.PutUint32(b[16:], id)
	}
	if err := s.roundTrip(ctx, c, [][]byte{b}); err != nil {
		return nil, fmt.Errorf("%s on bridge %s: %w", what, s.bridge, err)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%s on bridge %s: %w", what, s.bridge, c.joinedErrs())
	}
	var bodies [][]byte
	for _, r := range c.replies {
		if len(r) < 16 || r[1] != openflow13.Type_MultiPartReply || binary.BigEndian.Uint16(r[8:]) != typ {
			return nil, fmt.Errorf("%s on bridge %s: malformed reply: message type %d, %d bytes", what, s.bridge, r[1], len(r))
		}
		bodies = append(bodies, r[16:])
	}
	return bodies, nil
}

// DumpGroups returns every group of the bridge (OFPMP_GROUP_DESC multipart request,
// OpenFlow 1.3.5 §7.3.5.9), gathered over the replies. Errors: the switch's OFPT_ERROR, a
// malformed reply, ErrDisconnected, ctx.
func (s *Conn) DumpGroups(ctx context.Context) ([]GroupDesc, error) {
	bodies, err := s.groupMultipart(ctx, multipartGroupDesc, 0, "group description request")
	if err != nil {
		return nil, err
	}
	var out []GroupDesc
	for _, body := range bodies {
		gs, err := decodeGroupDescs(body)
		if err != nil {
			return nil, fmt.Errorf("group descriptions of bridge %s: %w", s.bridge, err)
		}
		out = append(out, gs...)
	}
	return out, nil
}

// decodeGroupDescs decodes ofp_group_desc entries (length 2, type 1, pad 1, group_id 4,
// then ofp_bucket entries each sized by its len), each sized by its length.
func decodeGroupDescs(body []byte) ([]GroupDesc, error) {
	var out []GroupDesc
	for off := 0; off < len(body); {
		if off+8 > len(body) {
			return nil, fmt.Errorf("malformed group description at offset %d: %d bytes left", off, len(body)-off)
		}
		e := body[off:]
		l := int(binary.BigEndian.Uint16(e[0:]))
		if l < 8 || off+l > len(body) {
			return nil, fmt.Errorf("malformed group description at offset %d: length %d", off, l)
		}
		g := GroupDesc{Type: e[2], ID: binary.BigEndian.Uint32(e[4:])}
		for p := 8; p < l; {
			if p+bucketFixedLen > l {
				return nil, fmt.Errorf("group %d: malformed bucket at offset %d", g.ID, p)
			}
			bl := int(binary.BigEndian.Uint16(e[p:]))
			if bl < bucketFixedLen || p+bl > l {
				return nil, fmt.Errorf("group %d: malformed bucket at offset %d: length %d", g.ID, p, bl)
			}
			g.Weights = append(g.Weights, binary.BigEndian.Uint16(e[p+2:]))
			g.Raw = append(g.Raw, append([]byte(nil), e[p+bucketFixedLen:p+bl]...))
			p += bl
		}
		out = append(out, g)
		off += l
	}
	return out, nil
}

// GroupStats asks for group id's counters (OFPMP_GROUP multipart request, OpenFlow 1.3.5
// §7.3.5.10; GroupAll for every group). A group that does not exist has no entry (OVS 3.1
// answers an empty reply, no error). Errors: the switch's OFPT_ERROR, a malformed reply,
// ErrDisconnected, ctx.
func (s *Conn) GroupStats(ctx context.Context, id uint32) ([]GroupStats, error) {
	bodies, err := s.groupMultipart(ctx, multipartGroup, id, fmt.Sprintf("group stats request (group %d)", id))
	if err != nil {
		return nil, err
	}
	var out []GroupStats
	for _, body := range bodies {
		gs, err := decodeGroupStats(body)
		if err != nil {
			return nil, fmt.Errorf("group stats of bridge %s: %w", s.bridge, err)
		}
		out = append(out, gs...)
	}
	return out, nil
}

// decodeGroupStats decodes ofp_group_stats entries: length 2, pad 2, group_id 4,
// ref_count 4, pad 4, packet_count 8, byte_count 8, duration_sec 4, duration_nsec 4 (40
// bytes), then 16 bytes per bucket (packet_count 8, byte_count 8), each sized by length.
func decodeGroupStats(body []byte) ([]GroupStats, error) {
	var out []GroupStats
	for off := 0; off < len(body); {
		if off+40 > len(body) {
			return nil, fmt.Errorf("malformed group stats entry at offset %d: %d bytes left", off, len(body)-off)
		}
		e := body[off:]
		l := int(binary.BigEndian.Uint16(e[0:]))
		if l < 40 || off+l > len(body) || (l-40)%16 != 0 {
			return nil, fmt.Errorf("malformed group stats entry at offset %d: length %d", off, l)
		}
		g := GroupStats{ID: binary.BigEndian.Uint32(e[4:]), RefCount: binary.BigEndian.Uint32(e[8:]),
			Packets: binary.BigEndian.Uint64(e[16:]), Bytes: binary.BigEndian.Uint64(e[24:])}
		for p := 40; p < l; p += 16 {
			g.Buckets = append(g.Buckets, BucketStats{Packets: binary.BigEndian.Uint64(e[p:]), Bytes: binary.BigEndian.Uint64(e[p+8:])})
		}
		out = append(out, g)
		off += l
	}
	return out, nil
}

// ApplyGroupMods is Conn.ApplyGroupMods on the current connection; it fails fast with an
// error matching ErrDisconnected while there is none.
func (s *Switch) ApplyGroupMods(ctx context.Context, mods []GroupMod) error {
	return onConnErr(s, func(c *Conn) error { return c.ApplyGroupMods(ctx, mods) })
}

// GroupStats is Conn.GroupStats on the current connection; it fails fast with an error
// matching ErrDisconnected while there is none.
func (s *Switch) GroupStats(ctx context.Context, id uint32) ([]GroupStats, error) {
	return onConn(s, func(c *Conn) ([]GroupStats, error) { return c.GroupStats(ctx, id) })
}
