package masq

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// newNetns makes a network namespace for the test, so the rules never touch the host's.
func newNetns(t *testing.T) (string, ns.NetNS) {
	t.Helper()
	testenv.Privileged(t)
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

// dump returns the namespace's nftables ruleset as `nft list ruleset` prints it (the
// command an operator runs).
func dump(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", name, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, out)
	}
	return string(out)
}

func cidr(s string) *net.IPNet { _, n, _ := net.ParseCIDR(s); return n }

func TestEnsureIdempotentAndDelete(t *testing.T) {
	name, n := newNetns(t)
	r := Rules{PodSubnet: cidr("10.244.1.0/24"), ClusterCIDR: cidr("10.244.0.0/16"), Masquerade: true}
	in(t, n, func() error { return Ensure(r) })
	first := dump(t, name)
	for _, want := range []string{
		"table ip ofsdn {",
		"chain postrouting {",
		"type nat hook postrouting priority srcnat; policy accept;",
		`ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 ct status dnat masquerade comment "ofsdn: service return path"`,
		`ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return comment "ofsdn: pod egress"`,
		`ip saddr 10.244.1.0/24 ip daddr 224.0.0.0/4 return comment "ofsdn: pod egress"`,
		`ip saddr 10.244.1.0/24 masquerade comment "ofsdn: pod egress"`,
	} {
		if !strings.Contains(first, want) {
			t.Errorf("missing %s in:\n%s", want, first)
		}
	}
	// The service rule comes first: DNAT'ed traffic inside the cluster is masqueraded
	// before the egress rules let cluster traffic keep its source.
	if strings.Index(first, "ct status dnat") > strings.Index(first, "return") {
		t.Errorf("service return-path rule after the egress rules:\n%s", first)
	}
	in(t, n, func() error { return Ensure(r) })
	if again := dump(t, name); again != first {
		t.Errorf("second Ensure changed the rules:\n%s\nvs\n%s", first, again)
	}

	// A new pod subnet rewrites the table: the old subnet's rules are gone.
	r2 := Rules{PodSubnet: cidr("10.244.7.0/24"), ClusterCIDR: cidr("10.244.0.0/16"), Masquerade: true}
	in(t, n, func() error { return Ensure(r2) })
	rewritten := dump(t, name)
	if strings.Contains(rewritten, "10.244.1.0/24") || !strings.Contains(rewritten, "ip saddr 10.244.7.0/24 masquerade") ||
		strings.Count(rewritten, "table ip ofsdn") != 1 || strings.Count(rewritten, "ct status dnat") != 1 {
		t.Errorf("after a subnet change:\n%s", rewritten)
	}

	// Egress masquerade off: only the service return path stays.
	in(t, n, func() error {
		return Ensure(Rules{PodSubnet: cidr("10.244.7.0/24"), ClusterCIDR: cidr("10.244.0.0/16")})
	})
	noEgress := dump(t, name)
	if strings.Contains(noEgress, "pod egress") || !strings.Contains(noEgress, "service return path") {
		t.Errorf("with masquerade off:\n%s", noEgress)
	}

	in(t, n, Delete)
	if left := dump(t, name); strings.Contains(left, "ofsdn") {
		t.Errorf("Delete left rules behind:\n%s", left)
	}
	in(t, n, Delete) // idempotent
}

// TestCoexistsWithIptables: kube-proxy (iptables mode, Debian's nft back end) keeps its
// own nat POSTROUTING; ours is a separate table, and neither disturbs the other.
func TestCoexistsWithIptables(t *testing.T) {
	name, n := newNetns(t)
	ipt := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", name, "iptables", "-w"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v\n%s", args, err, out)
		}
	}
	ipt("-t", "nat", "-N", "KUBE-POSTROUTING")
	ipt("-t", "nat", "-A", "POSTROUTING", "-j", "KUBE-POSTROUTING")
	ipt("-t", "nat", "-A", "KUBE-POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE")
	in(t, n, func() error {
		return Ensure(Rules{PodSubnet: cidr("10.244.1.0/24"), ClusterCIDR: cidr("10.244.0.0/16"), Masquerade: true})
	})
	in(t, n, Delete)
	out, err := exec.Command("ip", "netns", "exec", name, "iptables", "-w", "-t", "nat", "-S").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE") {
		t.Fatalf("kube-proxy's rules after Ensure and Delete (%v):\n%s", err, out)
	}
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
