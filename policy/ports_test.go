package policy

import (
	"math/rand"
	"testing"
)

// minBlocksDP is a brute force independent of rangeBlocks: the fewest aligned
// power-of-two blocks (each inside start..end) whose union is start..end, by shortest path
// over positions (dp[p] = fewest blocks covering start..p-1).
func minBlocksDP(start, end uint32, width uint) int {
	n := end - start + 2
	const inf = 1 << 30
	dp := make([]int, n)
	for i := range dp {
		dp[i] = inf
	}
	dp[0] = 0
	for off := uint32(0); off < n-1; off++ {
		if dp[off] == inf {
			continue
		}
		p := start + off
		for k := uint(0); k <= width; k++ {
			size := uint32(1) << k
			if p%size != 0 || p+size-1 > end {
				continue
			}
			if d := dp[off] + 1; d < dp[off+size] {
				dp[off+size] = d
			}
		}
	}
	return dp[n-1]
}

// checkBlocks verifies that blocks cover exactly start..end (every value of the field
// checked) with the fewest blocks.
func checkBlocks(t *testing.T, start, end uint32, width uint, blocks []block) {
	t.Helper()
	full := uint32(1)<<width - 1
	for v := uint32(0); v <= full; v++ {
		in := v >= start && v <= end
		hit := 0
		for _, b := range blocks {
			if v&b.mask == b.value {
				hit++
			}
		}
		if in != (hit > 0) {
			t.Fatalf("width %d range %d..%d: value %d matched=%v, want %v (blocks %v)", width, start, end, v, hit > 0, in, blocks)
		}
		if hit > 1 {
			t.Fatalf("width %d range %d..%d: value %d matched by %d blocks (overlap) %v", width, start, end, v, hit, blocks)
		}
	}
	for _, b := range blocks {
		if b.value&^b.mask != 0 {
			t.Fatalf("block %v has value bits outside its mask", b)
		}
		// mask is ones then zeros
		inv := ^b.mask & full
		if inv&(inv+1) != 0 {
			t.Fatalf("block %v: mask is not a prefix mask", b)
		}
	}
	if want := minBlocksDP(start, end, width); len(blocks) != want {
		t.Fatalf("width %d range %d..%d: %d blocks %v, the fewest is %d", width, start, end, len(blocks), blocks, want)
	}
}

// TestRangeBlocksExhaustive checks every range of every field width up to 8 bits against
// the brute force: exact cover, no overlap, fewest blocks.
func TestRangeBlocksExhaustive(t *testing.T) {
	for width := uint(1); width <= 8; width++ {
		full := uint32(1)<<width - 1
		for s := uint32(0); s <= full; s++ {
			for e := s; e <= full; e++ {
				checkBlocks(t, s, e, width, rangeBlocks(s, e, width))
			}
		}
	}
}

// TestRangeMasks16 checks 16-bit ports: every end for starts at the edges, and random
// ranges, each against the brute force over all 65536 ports.
func TestRangeMasks16(t *testing.T) {
	check := func(s, e uint16) {
		t.Helper()
		ms := RangeMasks(s, e)
		var bs []block
		for _, m := range ms {
			bs = append(bs, block{uint32(m.Value), uint32(m.Mask)})
		}
		checkBlocks(t, uint32(s), uint32(e), 16, bs)
	}
	for _, s := range []uint16{0, 1, 80, 1023, 1024, 32767, 32768, 65534, 65535} {
		for _, e := range []uint16{s, s + 1, 1024, 2047, 32000, 32768, 65534, 65535} {
			if e >= s {
				check(s, e)
			}
		}
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 60; i++ {
		a, b := uint16(r.Intn(65536)), uint16(r.Intn(65536))
		if a > b {
			a, b = b, a
		}
		check(a, b)
	}
	if got := RangeMasks(0, 65535); len(got) != 1 || got[0].Mask != 0 {
		t.Fatalf("0..65535 = %v, want one match with mask 0", got)
	}
	if got := RangeMasks(1, 65535); len(got) != 16 {
		t.Fatalf("1..65535 = %d matches, want 16", len(got))
	}
	if got := RangeMasks(81, 80); got != nil {
		t.Fatalf("empty range = %v", got)
	}
	want := []PortMask{{32000, 0xff00}, {32256, 0xfe00}, {32768, 0xffff}}
	got := RangeMasks(32000, 32768)
	if len(got) != len(want) {
		t.Fatalf("32000..32768 = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("32000..32768 = %v, want %v", got, want)
		}
	}
	if s := (PortMask{Value: 0x400, Mask: 0xfc00}).String(); s != "0x400/0xfc00" {
		t.Fatalf("String = %q", s)
	}
}
