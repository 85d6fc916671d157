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

// dualRules are a dual-stack node's rules: IPv4 as TestEnsureIdempotentAndDelete's, IPv6
// pod subnet fd00:10:244:1::/64 in cluster CIDR fd00:10:244::/56.
func dualRules() Rules {
	return Rules{PodSubnet: cidr("10.244.1.0/24"), ClusterCIDR: cidr("10.244.0.0/16"), Masquerade: true,
		PodSubnetIPv6: cidr("fd00:10:244:1::/64"), ClusterCIDRIPv6: cidr("fd00:10:244::/56")}
}

// TestEnsureIPv6: a dual-stack node's rules add table ip6 ofsdn with the egress rules
// (cluster and multicast keep their source, the rest is masqueraded) beside the IPv4
// table, idempotently; masquerade off, an IPv4-only node and Delete leave no ip6 table.
func TestEnsureIPv6(t *testing.T) {
	name, n := newNetns(t)
	in(t, n, func() error { return Ensure(dualRules()) })
	first := dump(t, name)
	_, v6, _ := strings.Cut(first, "table ip6 ofsdn {")
	for _, want := range []string{
		"chain postrouting {",
		"type nat hook postrouting priority srcnat; policy accept;",
		`ip6 saddr fd00:10:244:1::/64 ip6 daddr fd00:10:244::/56 ct status dnat masquerade comment "ofsdn: service return path"`,
		`ip6 saddr fd00:10:244:1::/64 ip6 daddr fd00:10:244::/56 return comment "ofsdn: pod egress"`,
		`ip6 saddr fd00:10:244:1::/64 ip6 daddr ff00::/8 return comment "ofsdn: pod egress"`,
		`ip6 saddr fd00:10:244:1::/64 masquerade comment "ofsdn: pod egress"`,
	} {
		if !strings.Contains(v6, want) {
			t.Errorf("missing %s in table ip6 ofsdn:\n%s", want, first)
		}
	}
	if !strings.Contains(first, `ip saddr 10.244.1.0/24 masquerade comment "ofsdn: pod egress"`) {
		t.Errorf("IPv4 table changed:\n%s", first)
	}
	if i, j := strings.Index(v6, "ct status dnat masquerade"), strings.Index(v6, "return"); i < 0 || i > j {
		t.Errorf("table ip6 ofsdn: the service return path must come first, before the egress returns:\n%s", v6)
	}
	in(t, n, func() error { return Ensure(dualRules()) })
	if again := dump(t, name); again != first {
		t.Errorf("second Ensure changed the rules:\n%s\nvs\n%s", first, again)
	}
	for _, c := range []struct {
		name string
		mod  func(*Rules)
	}{
		{"masquerade off", func(r *Rules) { r.Masquerade = false }},
		{"IPv4-only", func(r *Rules) { r.PodSubnetIPv6, r.ClusterCIDRIPv6 = nil, nil }},
	} {
		in(t, n, func() error { return Ensure(dualRules()) })
		r := dualRules()
		c.mod(&r)
		in(t, n, func() error { return Ensure(r) })
		if got := dump(t, name); strings.Contains(got, "table ip6 ofsdn") || !strings.Contains(got, "table ip ofsdn") {
			t.Errorf("%s: want table ip ofsdn only:\n%s", c.name, got)
		}
	}
	in(t, n, func() error { return Ensure(dualRules()) })
	in(t, n, Delete)
	if left := dump(t, name); strings.Contains(left, "ofsdn") {
		t.Errorf("Delete left rules behind:\n%s", left)
	}
	r := dualRules()
	r.PodSubnetIPv6 = cidr("10.9.0.0/24")
	if err := Ensure(r); err == nil || !strings.Contains(err.Error(), "must be an IPv6 CIDR") {
		t.Errorf("Ensure with an IPv4 IPv6 pod subnet: %v", err)
	}
}

// TestIPv6EgressMasqueraded: a node namespace routes between a pod namespace (pod subnet
// fd00:10:244:1::/64 behind its gw veth), another node's pod (fd00:10:244:2::/64, inside
// the IPv6 cluster CIDR) and the outside (fd00:30::/64 on its uplink), with Ensure's
// rules and IPv6 forwarding on: the outside receives the pod's datagram from the node's
// uplink address, the other node's pod from the pod's own address.
func TestIPv6EgressMasqueraded(t *testing.T) {
	node, nodeNS := newNetns(t)
	pod, podNS := newNetns(t)
	out, outNS := newNetns(t)
	other, otherNS := newNetns(t)
	run := func(args ...string) {
		t.Helper()
		if o, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, o)
		}
	}
	link := func(peerNS, nodeIf, nodeAddr, peerAddr, peerGW string) {
		run("ip", "-n", node, "link", "add", nodeIf, "type", "veth", "peer", "name", "eth0", "netns", peerNS)
		run("ip", "-n", node, "addr", "add", nodeAddr, "dev", nodeIf, "nodad")
		run("ip", "-n", node, "link", "set", nodeIf, "up")
		run("ip", "-n", peerNS, "addr", "add", peerAddr, "dev", "eth0", "nodad")
		run("ip", "-n", peerNS, "link", "set", "eth0", "up")
		if peerGW != "" {
			run("ip", "-n", peerNS, "-6", "route", "add", "default", "via", peerGW)
		}
	}
	link(pod, "gw", "fd00:10:244:1::1/64", "fd00:10:244:1::5/64", "fd00:10:244:1::1")
	link(other, "tun", "fd00:10:244:2::1/64", "fd00:10:244:2::5/64", "fd00:10:244:2::1")
	link(out, "uplink", "fd00:30::1/64", "fd00:30::200/64", "") // no route back: replies go to the node
	in(t, nodeNS, EnableIPv6Forward)
	in(t, nodeNS, func() error { return Ensure(dualRules()) })

	// source returns the address a datagram from the pod to dst arrives from in ns.
	source := func(ns ns.NetNS, dst string) string {
		t.Helper()
		var srv *net.UDPConn
		in(t, ns, func() (err error) {
			srv, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.ParseIP(dst), Port: 9999})
			return err
		})
		defer srv.Close()
		in(t, podNS, func() error {
			c, err := net.Dial("udp6", "["+dst+"]:9999")
			if err != nil {
				return err
			}
			defer c.Close()
			for i := 0; i < 3; i++ { // the first may wait on neighbor discovery
				if _, err := c.Write([]byte("from a pod")); err != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
			}
			return nil
		})
		_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		_, from, err := srv.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("nothing arrived at %s: %v", dst, err)
		}
		return from.IP.String()
	}
	if got := source(outNS, "fd00:30::200"); got != "fd00:30::1" {
		t.Errorf("the outside got the pod's datagram from %s, want the node's fd00:30::1 (masqueraded)", got)
	}
	if got := source(otherNS, "fd00:10:244:2::5"); got != "fd00:10:244:1::5" {
		t.Errorf("the other node's pod got the datagram from %s, want the pod's own fd00:10:244:1::5", got)
	}
}

func TestEnableIPv6Forward(t *testing.T) {
	name, n := newNetns(t)
	in(t, n, EnableIPv6Forward)
	out, err := exec.Command("ip", "netns", "exec", name, "cat", "/proc/sys/net/ipv6/conf/all/forwarding").Output()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("IPv6 forwarding in the namespace = %q (%v), want 1", out, err)
	}
}

// TestEnsureIPv6Only: an IPv6-only node's rules (no IPv4 pod subnet) are table ip6 ofsdn
// alone: an ip ofsdn table left from before goes, the IPv6 egress rules are in.
func TestEnsureIPv6Only(t *testing.T) {
	name, n := newNetns(t)
	in(t, n, func() error { return Ensure(dualRules()) })
	r := dualRules()
	r.PodSubnet, r.ClusterCIDR = nil, nil
	in(t, n, func() error { return Ensure(r) })
	got := dump(t, name)
	if strings.Contains(got, "table ip ofsdn") || !strings.Contains(got, `ip6 saddr fd00:10:244:1::/64 masquerade comment "ofsdn: pod egress"`) {
		t.Fatalf("IPv6-only node: want table ip6 ofsdn alone with the egress rules:\n%s", got)
	}
	in(t, n, Delete)
	if left := dump(t, name); strings.Contains(left, "ofsdn") {
		t.Errorf("Delete left rules behind:\n%s", left)
	}
}
