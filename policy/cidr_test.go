package policy

import (
	"math/rand"
	"net/netip"
	"testing"
)

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExceptCIDRsExamples(t *testing.T) {
	for _, tc := range []struct {
		cidr   string
		except []string
		want   []string
	}{
		{"10.0.0.0/24", nil, []string{"10.0.0.0/24"}},
		{"10.0.0.7/24", nil, []string{"10.0.0.0/24"}},
		{"10.0.0.0/24", []string{"10.0.0.0/24"}, nil},
		{"10.0.0.0/24", []string{"10.0.0.0/16"}, nil},
		{"10.0.0.0/24", []string{"10.1.0.0/24"}, []string{"10.0.0.0/24"}},
		{"10.0.0.0/24", []string{"10.0.0.0/25"}, []string{"10.0.0.128/25"}},
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, []string{"10.0.0.0/32", "10.0.0.2/31"}},
		{"0.0.0.0/0", []string{"10.0.0.0/8"}, []string{"0.0.0.0/5", "8.0.0.0/7", "11.0.0.0/8", "12.0.0.0/6", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1"}},
		{"10.0.0.0/24", []string{"fd00::/8"}, []string{"10.0.0.0/24"}},
	} {
		var ex []netip.Prefix
		for _, e := range tc.except {
			ex = append(ex, mustPrefix(t, e))
		}
		got := ExceptCIDRs(mustPrefix(t, tc.cidr), ex)
		if len(got) != len(tc.want) {
			t.Fatalf("%s except %v = %v, want %v", tc.cidr, tc.except, got, tc.want)
		}
		for i := range got {
			if got[i].String() != tc.want[i] {
				t.Fatalf("%s except %v = %v, want %v", tc.cidr, tc.except, got, tc.want)
			}
		}
	}
	if got := ExceptCIDRs(netip.Prefix{}, nil); got != nil {
		t.Fatalf("invalid cidr = %v, want nil", got)
	}
	// IPv6 blocks: TestExceptCIDRsIPv6.
}

// TestExceptCIDRsBruteForce checks random /24 blocks with random excepts address by
// address, and that no two output prefixes could be merged (fewest prefixes).
func TestExceptCIDRsBruteForce(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	base := netip.MustParseAddr("10.9.8.0")
	addr := func(i int) netip.Addr {
		a := base.As4()
		a[3] = byte(i)
		return netip.AddrFrom4(a)
	}
	for iter := 0; iter < 3000; iter++ {
		cidr := netip.PrefixFrom(addr(r.Intn(256)), 24+r.Intn(9)).Masked()
		var ex []netip.Prefix
		for n := r.Intn(5); n > 0; n-- {
			ex = append(ex, netip.PrefixFrom(addr(r.Intn(256)), 22+r.Intn(11)).Masked())
		}
		got := ExceptCIDRs(cidr, ex)
		for i := 0; i < 256; i++ {
			a := addr(i)
			want := cidr.Contains(a)
			for _, e := range ex {
				if e.Contains(a) {
					want = false
				}
			}
			n := 0
			for _, p := range got {
				if p.Contains(a) {
					n++
				}
			}
			if (n > 0) != want || n > 1 {
				t.Fatalf("%s except %v = %v: %s covered %d times, want %v", cidr, ex, got, a, n, want)
			}
		}
		// Fewest: no two outputs are the halves of one prefix.
		set := map[netip.Prefix]bool{}
		for _, p := range got {
			set[p] = true
		}
		for _, p := range got {
			if p.Bits() == 0 {
				continue
			}
			parent := netip.PrefixFrom(p.Addr(), p.Bits()-1).Masked()
			lo, hi := halves(parent)
			if set[lo] && set[hi] {
				t.Fatalf("%s except %v = %v: %s and %s should be one %s", cidr, ex, got, lo, hi, parent)
			}
		}
	}
}
