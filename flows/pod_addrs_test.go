package flows

import (
	"net"
	"strings"
	"testing"
)

// TestPodAddressList checks the pod's address list on an IPv4-only node: one IPv4 address
// builds today's flows; an IPv6 address (alone or beside the IPv4 one: the node has no
// IPv6 pod subnet), a second IPv4 address or none is refused by Validate with an error
// that says why and what to do (dual-stack nodes: TestDualStackValidate).
func TestPodAddressList(t *testing.T) {
	cfg := testConfig()
	a := testPodA()
	if got := a.IPv4(); !got.Equal(net.ParseIP("10.244.1.5")) || len(got) != net.IPv4len {
		t.Fatalf("IPv4() = %v (%d bytes), want 10.244.1.5 in 4 bytes", got, len(got))
	}
	with := func(ips ...string) Pod {
		p := a
		p.IPs = nil
		for _, s := range ips {
			p.IPs = append(p.IPs, net.ParseIP(s))
		}
		return p
	}
	for _, c := range []struct {
		name string
		pod  Pod
		want string
	}{
		{"IPv6 only", with("fd00:10:244:1::5"), "address fd00:10:244:1::5 is IPv6 but this node has no IPv6 pod subnet"},
		{"dual-stack", with("10.244.1.5", "fd00:10:244:1::5"), "address fd00:10:244:1::5 is IPv6"},
		{"IPv6 first", with("fd00:10:244:1::5", "10.244.1.5"), "address fd00:10:244:1::5 is IPv6"},
		{"two IPv4", with("10.244.1.5", "10.244.1.7"), "has 2 addresses, want exactly one IPv4 address"},
		{"none", with(), "pod on ofport 3: has 0 addresses"},
	} {
		err := c.pod.Validate(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate(%v) = %v, want an error saying %q", c.name, c.pod.IPs, err, c.want)
		}
	}
	// A 4-byte and a 16-byte form of one IPv4 address build the same flows.
	p4 := with()
	p4.IPs = []net.IP{net.ParseIP("10.244.1.5").To4()}
	if err := p4.Validate(cfg); err != nil {
		t.Fatal(err)
	}
	compareLines(t, "pod flows from a 4-byte address", lines(PodFlows(cfg, p4), nil), goldenPodA)
}

// A pod's flow owner is its allocated owner id, not its address: the cookie follows
// Pod.OwnerID, and a pod without one is refused.
func TestPodOwnerIsAllocatedID(t *testing.T) {
	cfg := testConfig()
	a := testPodA()
	a.OwnerID = 7
	for _, f := range PodFlows(cfg, a) {
		if c := Cookie(f.Cookie); c.Owner() != OwnerPod || c.OwnerID() != 7 {
			t.Fatalf("flow %s: cookie owner kind %d id %d, want pod 7", f, c.Owner(), c.OwnerID())
		}
	}
	if err := a.Validate(cfg); err != nil {
		t.Fatalf("pod with owner id 7: %v", err)
	}
	a.OwnerID = 0
	if err := a.Validate(cfg); err == nil || !strings.Contains(err.Error(), "owner id") {
		t.Fatalf("pod without an owner id: Validate = %v, want an error naming the owner id", err)
	}
}
