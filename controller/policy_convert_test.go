package controller

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/ofsdn/ofsdn/policy"
)

// TestRuleConverterEqualsRuleOf: the runner's cached conversion gives exactly ruleOf's
// rule through the changes an ADD, a DEL, a peer change and an address change on a reused
// ofport make, whether the engine hands the same peers slice again or a new one.
func TestRuleConverterEqualsRuleOf(t *testing.T) {
	lp := func(name string, port uint32, ips ...string) policy.LocalPod {
		p := policy.LocalPod{Namespace: "ns", Name: name, OFPort: port}
		for _, ip := range ips {
			p.IPs = append(p.IPs, netip.MustParseAddr(ip))
		}
		return p
	}
	peers := []netip.Prefix{netip.MustParsePrefix("10.244.2.5/32"), netip.MustParsePrefix("fd00::5/128"), netip.MustParsePrefix("10.0.0.0/8")}
	c := &policy.Conjunction{ID: 7, Pods: []policy.LocalPod{lp("a", 3, "10.244.1.3")}, Peers: peers,
		Ports: []policy.PortMatch{{Protocol: 6, PortMask: policy.PortMask{Value: 80, Mask: 0xffff}}}}
	rc := newRuleConverter()
	check := func(step string, c *policy.Conjunction) {
		t.Helper()
		for _, dual := range []bool{false, true, false} {
			if got, want := rc.rule(c, dual), ruleOf(c, dual); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (dual %v): got %+v, want %+v", step, dual, got, want)
			}
		}
	}
	check("first", c)
	// An ADD: one pod more, the same peers slice.
	c2 := *c
	c2.Pods = append(append([]policy.LocalPod(nil), c.Pods...), lp("b", 4, "10.244.1.4", "fd00:1::4"))
	check("add", &c2)
	// The same peers array, shorter: a peer gone (the cache is told by its length).
	c3 := c2
	c3.Peers = peers[:2]
	check("peer gone, same array", &c3)
	// The same array written again in place would be a caller's bug; a new slice with
	// other peers is converted anew.
	c4 := c2
	c4.Peers = []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}
	check("new peers", &c4)
	// A DEL, then ofport 4 reused by a pod with other addresses.
	rc.forget(7)
	delete(rc.pods, 4)
	c5 := c4
	c5.Pods = []policy.LocalPod{lp("a", 3, "10.244.1.3"), lp("c", 4, "10.244.1.9")}
	check("ofport reused", &c5)
	// Without the DEL's cleanup too: the addresses tell the pods apart.
	c6 := c5
	c6.Pods = []policy.LocalPod{lp("a", 3, "10.244.1.3"), lp("d", 4, "10.244.1.10")}
	check("ofport reused, no cleanup", &c6)
	// No peers (any peer).
	c7 := c6
	c7.Peers, c7.AnyPeer = nil, true
	check("any peer", &c7)
}
