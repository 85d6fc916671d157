package policy

// Port ranges as masked matches.
//
// OpenFlow matches a transport port with a value and a bit mask (OXM_OF_TCP_DST_W and
// friends: the packet matches when port & mask == value & mask). A range start..end is
// covered exactly by a set of aligned power-of-two blocks, each one masked match; the
// greedy split below (take the largest aligned block that starts at the lowest uncovered
// port and fits) gives the fewest blocks, because the blocks of an interval are exactly the
// maximal nodes of the binary trie that lie inside it, and no two of them can merge.

import "fmt"

// PortMask is one masked transport-port match: a port p matches when p&Mask == Value.
// Value has no bits outside Mask. Mask 0xffff is an exact port; Mask 0 matches every port.
type PortMask struct {
	// Value is the port's bits under Mask (0..65535).
	Value uint16
	// Mask selects the bits compared (0..0xffff, a prefix of ones then zeros).
	Mask uint16
}

// Matches reports whether port p is covered by m.
func (m PortMask) Matches(p uint16) bool { return p&m.Mask == m.Value }

// String returns m as ovs-ofctl prints tp_dst: "80" for an exact port, "0x400/0xfc00"
// for a block.
func (m PortMask) String() string {
	if m.Mask == 0xffff {
		return fmt.Sprintf("%d", m.Value)
	}
	return fmt.Sprintf("%#x/%#x", m.Value, m.Mask)
}

// RangeMasks returns the fewest masked matches that together match exactly the ports
// start..end (inclusive), lowest first. It returns nil when start > end. The whole range
// 0..65535 is one match with Mask 0. NetworkPolicyPort.endPort (networking.k8s.io/v1)
// ranges go through it.
func RangeMasks(start, end uint16) []PortMask {
	var out []PortMask
	for _, b := range rangeBlocks(uint32(start), uint32(end), 16) {
		out = append(out, PortMask{Value: uint16(b.value), Mask: uint16(b.mask)})
	}
	return out
}

// block is an aligned power-of-two block in a field of some width: value with the low
// bits cleared, mask with ones above them.
type block struct{ value, mask uint32 }

// rangeBlocks is RangeMasks for a field of width bits (1..16), so tests can check every
// range of small widths exhaustively.
func rangeBlocks(start, end uint32, width uint) []block {
	full := uint32(1)<<width - 1
	if start > end || end > full {
		return nil
	}
	var out []block
	for {
		// Largest k such that start is a multiple of 2^k and start+2^k-1 <= end.
		k := uint(0)
		for k < width {
			size := uint32(1) << (k + 1)
			if start&(size-1) != 0 || start+size-1 > end {
				break
			}
			k++
		}
		size := uint32(1) << k
		out = append(out, block{value: start, mask: full &^ (size - 1)})
		if start+size-1 >= end {
			return out
		}
		start += size
	}
}
