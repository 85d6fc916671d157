package flows

// Groups and meters as desired values: what an owner wants the switch to hold besides its
// flows (issue 21).
//
// Design history. Services load-balance over select groups, and the NetworkPolicy deny
// log rate-limits through a meter; both live in ovs-vswitchd only (a restarted daemon has
// none) and OVS refuses a flow naming one it lacks (OFPBAC_BAD_OUT_GROUP,
// OFPMMFC_INVALID_METER). So they are desired state like flows: pure values here, with
// their `ovs-ofctl dump-groups` / `dump-meters` text and the libOpenflow actions of their
// buckets, and package switchstate keeps them per owner, replays them before the flows
// and audits them. Groups and meters carry no cookie, so what is ofsdn's is told by id:
// ofsdn uses group ids GroupIDMin..GroupIDMax and meter ids MeterIDMin..MeterIDMax only,
// and treats every group and meter in those ranges as its own (switchstate deletes the
// ones no owner wants); ids outside them are an operator's or another tool's and are
// never touched.

import (
	"fmt"
	"strings"

	"github.com/contiv/libOpenflow/openflow13"
)

// Id ranges ofsdn owns on the switch (see the file comment): every group id
// GroupIDMin..GroupIDMax and meter id MeterIDMin..MeterIDMax is ofsdn's, others are never
// touched. Meter ids stay far below the userspace datapath's max_meter (262,144 on OVS
// 3.1, `ovs-ofctl meter-features`).
const (
	// GroupIDMin is the first group id ofsdn uses: 2^20 (1,048,576), so an operator's
	// small group numbers are never ofsdn's.
	GroupIDMin uint32 = 1 << 20
	// GroupIDMax is the last group id ofsdn uses: 2^24-1 (16,777,215).
	GroupIDMax uint32 = 1<<24 - 1
	// MeterIDMin is the first meter id ofsdn uses (DenyLogMeter is 1).
	MeterIDMin uint32 = 1
	// MeterIDMax is the last meter id ofsdn uses: 4,095. An operator's meters must use
	// higher ids.
	MeterIDMax uint32 = 4095
)

// GroupType is a group's type (OpenFlow 1.3.5 §5.6.1, enum ofp_group_type).
type GroupType uint8

// Group types.
const (
	// GroupAll (OFPGT_ALL) executes every bucket: multicast, flooding.
	GroupAll GroupType = 0
	// GroupSelect (OFPGT_SELECT) executes one bucket chosen by the switch from a hash of
	// the packet's flow, weighted by the buckets' weights: load balancing.
	GroupSelect GroupType = 1
	// GroupIndirect (OFPGT_INDIRECT) has exactly one bucket, always executed.
	GroupIndirect GroupType = 2
)

// String returns the type as ovs-ofctl prints it: all, select or indirect.
func (t GroupType) String() string {
	switch t {
	case GroupAll:
		return "all"
	case GroupSelect:
		return "select"
	case GroupIndirect:
		return "indirect"
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Bucket is one bucket of a group (ofp_bucket, OpenFlow 1.3.5 §7.3.4.2).
type Bucket struct {
	// Weight is the bucket's share in a select group (0..65535; a bucket of weight 0 is
	// never chosen); 0 for other group types.
	Weight uint16
	// Actions are the bucket's actions (an action set: no GotoTable); none = drop.
	Actions []Action
}

// Group is a desired group entry (OpenFlow 1.3.5 §5.6): an id, a type and buckets.
type Group struct {
	// ID is the group id, GroupIDMin..GroupIDMax for ofsdn's groups.
	ID uint32
	// Type is the group type.
	Type GroupType
	// Buckets are the group's buckets, in order (exactly one for GroupIndirect).
	Buckets []Bucket
}

// String returns the group as `ovs-ofctl -O OpenFlow13 dump-groups` prints it, e.g.
// "group_id=1048576,type=select,bucket=weight:3,actions=output:1,bucket=actions=output:2".
// OVS prints no weight for weight 1 of a select group (the default) nor for the buckets of
// other types.
func (g Group) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "group_id=%d,type=%s", g.ID, g.Type)
	for _, bk := range g.Buckets {
		b.WriteString(",bucket=")
		if g.Type == GroupSelect && bk.Weight != 1 {
			fmt.Fprintf(&b, "weight:%d,", bk.Weight)
		}
		b.WriteString("actions=")
		formatActions(&b, bk.Actions, nil)
	}
	return b.String()
}

// Validate reports whether the switch can take g: an id at most OFPG_MAX (0xffffff00), a
// known type, exactly one bucket for an indirect group, weights only in select groups, no
// GotoTable in a bucket. Errors name the group and the fix.
func (g Group) Validate() error {
	if g.ID > openflow13.OFPG_MAX {
		return fmt.Errorf("group %d: id above OFPG_MAX (%#x)", g.ID, uint32(openflow13.OFPG_MAX))
	}
	switch g.Type {
	case GroupAll, GroupSelect:
	case GroupIndirect:
		if len(g.Buckets) != 1 {
			return fmt.Errorf("indirect group %d has %d buckets: give it exactly one", g.ID, len(g.Buckets))
		}
	default:
		return fmt.Errorf("group %d: unknown type %d (want GroupAll, GroupSelect or GroupIndirect)", g.ID, g.Type)
	}
	for i, bk := range g.Buckets {
		if bk.Weight != 0 && g.Type != GroupSelect {
			return fmt.Errorf("group %d (%s) bucket %d: weight %d, but only select groups have weights: leave it 0", g.ID, g.Type, i, bk.Weight)
		}
		for _, a := range bk.Actions {
			if _, ok := a.(GotoTable); ok {
				return fmt.Errorf("group %d bucket %d: goto_table is an instruction, not an action a bucket can hold", g.ID, i)
			}
		}
	}
	return nil
}

// Owned reports whether g's id is in ofsdn's range GroupIDMin..GroupIDMax.
func (g Group) Owned() bool { return OwnedGroupID(g.ID) }

// OwnedGroupID reports whether id is in ofsdn's group range GroupIDMin..GroupIDMax.
func OwnedGroupID(id uint32) bool { return id >= GroupIDMin && id <= GroupIDMax }

// OFActions returns the bucket's actions in the libOpenflow encoding the flow mods use
// (Drop and empty lists give none).
func (b Bucket) OFActions() []openflow13.Action {
	var out []openflow13.Action
	for _, a := range b.Actions {
		if oa := a.ofAction(); oa != nil {
			out = append(out, oa)
		}
	}
	return out
}

// GroupAction sends the packet to group ID (OFPAT_GROUP, OpenFlow 1.3.5 §7.2.5), printed
// "group:ID". The group must exist on the switch before a flow naming it is added.
type GroupAction struct {
	// ID is the group id.
	ID uint32
}

func (a GroupAction) format(b *strings.Builder, _ PortNames) { fmt.Fprintf(b, "group:%d", a.ID) }

func (a GroupAction) ofAction() openflow13.Action { return openflow13.NewActionGroup(a.ID) }

// Meter is a desired meter (OpenFlow 1.3.5 §5.7) with one drop band in packets per
// second: traffic through it above Rate packets/s, beyond a burst of Burst packets, is
// dropped; the switch keeps its statistics (flags OFPMF_PKTPS|OFPMF_BURST|OFPMF_STATS).
type Meter struct {
	// ID is the meter id, MeterIDMin..MeterIDMax for ofsdn's meters.
	ID uint32
	// Rate is the drop band's rate, packets per second, at least 1.
	Rate uint32
	// Burst is the drop band's burst size, packets.
	Burst uint32
}

// String returns the meter as `ovs-ofctl -O OpenFlow13 dump-meters` prints it, on one
// line: "meter=1 pktps burst stats bands=type=drop rate=100 burst_size=100".
func (m Meter) String() string {
	return fmt.Sprintf("meter=%d pktps burst stats bands=type=drop rate=%d burst_size=%d", m.ID, m.Rate, m.Burst)
}

// Validate reports whether the switch can take m: an id 1..OFPM_MAX (0xffff0000) and a
// rate of at least 1.
func (m Meter) Validate() error {
	if m.ID == 0 || m.ID > openflow13.OFPM13_MAX {
		return fmt.Errorf("meter %d: id outside 1..%d (OFPM_MAX)", m.ID, uint32(openflow13.OFPM13_MAX))
	}
	if m.Rate == 0 {
		return fmt.Errorf("meter %d: drop band rate 0 packets/s: give it at least 1", m.ID)
	}
	return nil
}

// OwnedMeterID reports whether id is in ofsdn's meter range MeterIDMin..MeterIDMax.
func OwnedMeterID(id uint32) bool { return id >= MeterIDMin && id <= MeterIDMax }

// MaxGroupModLen is the largest OpenFlow message, and so the largest group mod, a switch
// takes: 65,535 bytes (ofp_header.length is 16 bits, OpenFlow 1.3.5 §7.1).
const MaxGroupModLen = 65535

// Fixed sizes of a group mod (OpenFlow 1.3.5 §7.3.4.2): ofp_group_mod without buckets
// (ofp_header, command, type, pad, group_id) and ofp_bucket without actions (len, weight,
// watch_port, watch_group, pad).
const (
	groupModFixedLen = 16
	bucketFixedLen   = 16
)

// WireLen returns the bytes of g's group mod (OFPGC_ADD or ADD_OR_MOD) on the wire: 16
// for the ofp_group_mod, and per bucket 16 plus its actions, padded to 8 bytes. A group
// above MaxGroupModLen cannot be sent in one message.
func (g Group) WireLen() int {
	n := groupModFixedLen
	for _, b := range g.Buckets {
		n += b.wireLen()
	}
	return n
}

func (b Bucket) wireLen() int {
	n := bucketFixedLen
	for _, a := range b.OFActions() {
		n += int(a.Len())
	}
	return (n + 7) / 8 * 8
}

// Chains returns the ids of the groups g's buckets send to (group actions), in order:
// they must be on the switch before g, and g removed before them.
func (g Group) Chains() []uint32 {
	var out []uint32
	for _, b := range g.Buckets {
		for _, a := range b.Actions {
			if ga, ok := a.(GroupAction); ok {
				out = append(out, ga.ID)
			}
		}
	}
	return out
}
