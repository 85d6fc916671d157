package controller

import (
	"fmt"
	"math/rand"
	"net"
	"testing"
)

// TestSubnetIndexMatchesScan: the pod subnet index answers every overlap question as the
// scan over every peer it replaced, for random peers of mixed prefix lengths (/20../28)
// added, moved and removed (only non-overlapping ones are added, as the overlay does),
// with the asking peer's own subnet excluded.
func TestSubnetIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	random := func() *net.IPNet {
		ones := 20 + rng.Intn(9)
		ip := net.IPv4(10, byte(rng.Intn(4)), byte(rng.Intn(256)), byte(rng.Intn(256)))
		return &net.IPNet{IP: ip.Mask(net.CIDRMask(ones, 32)), Mask: net.CIDRMask(ones, 32)}
	}
	var x subnetIndex
	held := map[string]*net.IPNet{}
	scan := func(n *net.IPNet, except string) (string, bool) {
		for k, cur := range held {
			if k != except && (cur.Contains(n.IP) || n.Contains(cur.IP)) {
				return k, true
			}
		}
		return "", false
	}
	for step := 0; step < 5000; step++ {
		key := fmt.Sprintf("node-%d", rng.Intn(300))
		n := random()
		want, wantOK := scan(n, key)
		got, ok := x.overlapping(n, key)
		if ok != wantOK || (ok && !(held[got].Contains(n.IP) || n.Contains(held[got].IP))) {
			t.Fatalf("step %d: overlapping(%v, except %s) = %q %v; the scan finds %q %v", step, n, key, got, ok, want, wantOK)
		}
		switch {
		case rng.Intn(5) == 0:
			x.set(key, nil)
			delete(held, key)
		case !ok:
			x.set(key, n)
			held[key] = n
		}
	}
	if len(x.r) != len(held) || len(x.byKey) != len(held) {
		t.Errorf("index holds %d ranges, %d keys; want %d", len(x.r), len(x.byKey), len(held))
	}
}
