package policy

// ipBlock with except, as plain CIDRs.
//
// OpenFlow has no "not" in a match, so cidr minus its excepts becomes the CIDRs that
// cover exactly the difference: the maximal nodes of the address trie under cidr that
// touch no except. They are found by halving cidr until each half is either clear of
// every except (kept whole) or inside one (dropped). Like the port-range split, this is
// the fewest prefixes for the set.

import (
	"net/netip"
	"sort"
)

// ExceptCIDRs returns the prefixes that together hold exactly the addresses of cidr that
// are in none of except (networking.k8s.io/v1 IPBlock: "except is a list of CIDRs that
// should not be included within an IPBlock"), sorted by address, of cidr's family (IPv4
// or IPv6). Excepts outside cidr, or of the other family (the API server refuses both:
// an except must be a strict subset of cidr), are ignored; an except holding all of cidr
// leaves nothing (nil). Prefixes are masked (10.1.2.3/16 is 10.1.0.0/16). An invalid
// cidr gives nil. An IPv4-mapped IPv6 cidr is IPv6 (it holds no IPv4 address, as for the
// API server's net.IPNet).
func ExceptCIDRs(cidr netip.Prefix, except []netip.Prefix) []netip.Prefix {
	if !cidr.IsValid() {
		return nil
	}
	cidr = cidr.Masked()
	var ex []netip.Prefix
	for _, e := range except {
		if e.IsValid() && e.Addr().Is4() == cidr.Addr().Is4() && e.Overlaps(cidr) {
			ex = append(ex, e.Masked())
		}
	}
	out := subtract(cidr, ex)
	sort.Slice(out, func(i, j int) bool { return prefixLess(out[i], out[j]) })
	return out
}

// subtract returns p minus the union of ex (each overlapping p) as maximal prefixes.
func subtract(p netip.Prefix, ex []netip.Prefix) []netip.Prefix {
	var inside []netip.Prefix
	for _, e := range ex {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return nil // an except holds all of p
		}
		if e.Overlaps(p) {
			inside = append(inside, e)
		}
	}
	if len(inside) == 0 {
		return []netip.Prefix{p}
	}
	lo, hi := halves(p)
	return append(subtract(lo, inside), subtract(hi, inside)...)
}

// halves splits a masked prefix shorter than its family's full length (/32, /128) into
// its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	a := p.Addr().AsSlice()
	i := p.Bits() // the bit that tells the halves apart, counted from the first
	a[i/8] |= 0x80 >> (i % 8)
	ha, _ := netip.AddrFromSlice(a)
	return lo, netip.PrefixFrom(ha, bits)
}

// prefixLess orders prefixes by address, then by length (shorter first).
func prefixLess(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}
