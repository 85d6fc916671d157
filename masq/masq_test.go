package masq

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// newNetns makes a network namespace for the test, so the rules never touch the host's.
func newNetns(t *testing.T) (string, ns.NetNS) {
	t.Helper()
	name := fmt.Sprintf("ofsdn-masq-%d", time.Now().UnixNano()%1e9)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	n, err := ns.GetNS("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return name, n
}

func in(t *testing.T, n ns.NetNS, f func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

// dump returns the namespace's nat and filter rules as iptables -S prints them.
func dump(t *testing.T, name string) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"nat", "filter"} {
		out, err := exec.Command("ip", "netns", "exec", name, "iptables", "-w", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v\n%s", err, out)
		}
		b.Write(out)
	}
	return b.String()
}

func cidr(s string) *net.IPNet { _, n, _ := net.ParseCIDR(s); return n }

func TestEnsureIdempotentAndDelete(t *testing.T) {
	name, n := newNetns(t)
	r := Rules{PodSubnet: cidr("10.244.1.0/24"), ClusterCIDR: cidr("10.244.0.0/16")}
	in(t, n, func() error { return Ensure(r) })
	first := dump(t, name)
	for _, want := range []string{
		`-A POSTROUTING -m comment --comment "ofsdn: pod egress" -j OFSDN-POSTROUTING`,
		`-A OFSDN-POSTROUTING -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "ofsdn: pod egress" -j RETURN`,
		`-A OFSDN-POSTROUTING -s 10.244.1.0/24 -m comment --comment "ofsdn: pod egress" -j MASQUERADE`,
		`-A FORWARD -m comment --comment "ofsdn: pod egress" -j OFSDN-FORWARD`,
		`-A OFSDN-FORWARD -s 10.244.0.0/16 -m comment --comment "ofsdn: pod egress" -j ACCEPT`,
	} {
		if !strings.Contains(first, want) {
			t.Errorf("missing rule %s in:\n%s", want, first)
		}
	}
	in(t, n, func() error { return Ensure(r) })
	if again := dump(t, name); again != first {
		t.Errorf("second Ensure changed the rules:\n%s\nvs\n%s", first, again)
	}

	// A new pod subnet rewrites the chain: the old subnet's rules are gone.
	r2 := Rules{PodSubnet: cidr("10.244.7.0/24"), ClusterCIDR: cidr("10.244.0.0/16")}
	in(t, n, func() error { return Ensure(r2) })
	rewritten := dump(t, name)
	if strings.Contains(rewritten, "10.244.1.0/24") || !strings.Contains(rewritten, "-s 10.244.7.0/24 -m comment") ||
		strings.Count(rewritten, "-j OFSDN-POSTROUTING") != 1 {
		t.Errorf("after a subnet change:\n%s", rewritten)
	}

	in(t, n, Delete)
	if left := dump(t, name); strings.Contains(left, "OFSDN") || strings.Contains(left, "ofsdn") {
		t.Errorf("Delete left rules behind:\n%s", left)
	}
	in(t, n, Delete) // idempotent
}

func TestEnsureRejectsBadRules(t *testing.T) {
	if err := Ensure(Rules{}); err == nil {
		t.Fatal("Ensure without a pod subnet succeeded")
	}
}

func TestEnableIPForward(t *testing.T) {
	name, n := newNetns(t)
	in(t, n, EnableIPForward)
	out, err := exec.Command("ip", "netns", "exec", name, "cat", "/proc/sys/net/ipv4/ip_forward").Output()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("ip_forward in the namespace = %q (%v), want 1", out, err)
	}
}
