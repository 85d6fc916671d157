package e2e

// IPv6-only and IPv6-first nodes, and the IPv6 underlay (issue 23, third slice).
//
// TestIPv6OnlyMultiNode: two IPv6-only nodes (podSubnets [IPv6] in their topology files)
// on the multi-node harness (multinode_test.go) whose underlay is IPv6 alone: br-phy holds
// a ULA node IP (fd00:31::/64) and nothing else, so the tunnels (VXLAN and Geneve) run to
// the peers' IPv6 node IPs (tun_ipv6_dst). Pods get one IPv6 address; they reach each
// other across the nodes (ICMPv6 echo, TCP, UDP) with a pod MTU 70 bytes below the
// underlay's, a full-size packet crossing unfragmented; a forged source stays home.
//
// TestIPv6OnlyNode: one IPv6-only node's CNI result, CNI CHECK of its one address (a
// removed address is caught), a lease lost while the port lives rebuilt from the port's
// ofsdn-ipv6; and an IPv6-first dual-stack node's result order, its CHECK of both
// addresses.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/test/harness"
)

// v6TopologyYAML is IPv6-only node self's topology file listing peers: no IPv4 at all.
func v6TopologyYAML(self *clusterNode, peers ...*clusterNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusterCIDRIPv6: fd00:10:245::/56\nnodeName: %s\npodSubnets: [\"%s\"]\nnodeIP: \"%s\"\npeers:\n", self.name, self.subnet, self.ip)
	for _, p := range peers {
		fmt.Fprintf(&b, "- {name: %s, podSubnets: [\"%s\"], nodeIP: \"%s\"}\n", p.name, p.subnet, p.ip)
	}
	return b.String()
}

// TestIPv6OnlyMultiNode: two IPv6-only nodes on an IPv6 underlay, per tunnel type.
func TestIPv6OnlyMultiNode(t *testing.T) {
	serialIPv6(t)
	for _, tc := range []struct {
		tunnel string
		off    int
	}{{"vxlan", 1}, {"geneve", 3}} {
		t.Run(tc.tunnel, func(t *testing.T) {
			t.Parallel() // separate namespaces and addresses
			testIPv6OnlyMultiNode(t, tc.tunnel, tc.off)
		})
	}
}

func testIPv6OnlyMultiNode(t *testing.T, tunnel string, off int) {
	ul := filepath.Base(newNetns(t, "ofsdn-ul6"))
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")
	var nodes []*clusterNode
	for i, name := range []string{"node-a", "node-b"} {
		k := off + i
		nodes = append(nodes, startClusterNode(t, ul, name, fmt.Sprintf("fd00:31::%d", 10+k), fmt.Sprintf("fd00:10:245:%d::/64", k), i+1))
	}
	a, b := nodes[0], nodes[1]
	writeTopology(t, a.topo, v6TopologyYAML(a, b))
	writeTopology(t, b.topo, v6TopologyYAML(b, a))
	for _, n := range nodes {
		n.extra = []string{"--tunnel-type", tunnel}
		n.start()
	}
	pa, pb := a.addPod("v6mn-a"), b.addPod("v6mn-b")
	for _, c := range []struct {
		p *testPod
		n *clusterNode
	}{{pa, a}, {pb, b}} {
		_, sn, _ := net.ParseCIDR(c.n.subnet)
		if len(c.p.result.IPs) != 1 || !sn.Contains(c.p.ip()) {
			t.Fatalf("%s: CNI result IPs %s, want one address of %s", c.p.name, jsonString(c.p.result.IPs), sn)
		}
	}

	t.Run("pods on the two nodes reach each other over the IPv6 underlay", func(t *testing.T) {
		// The first packets also resolve the peer's underlay address by neighbor discovery.
		waitUntil(t, "ping6 node-a → node-b", 30*time.Second, func() error { return ping6(pa.netns, pb.ip6(t)) })
		if err := ping6(pb.netns, pa.ip6(t)); err != nil {
			t.Fatal(err)
		}
		tcpExchange6(t, pa, pb, 100000)
		tcpExchange6(t, pb, pa, 1000)
		udpExchange6(t, pa, pb)
		udpExchange6(t, pb, pa)
		for _, n := range nodes {
			if f := n.OVS.Ofctl(t, "dump-flows", n.mgmt()); !strings.Contains(f, "tun_ipv6_dst") || !strings.Contains(f, "tun_ipv6_src") {
				t.Fatalf("%s: no flow over the IPv6 underlay (tun_ipv6_src, tun_ipv6_dst):\n%s", n.name, f)
			}
		}
	})

	t.Run("pod MTU is 70 bytes below the IPv6 underlay's, and a full-size packet crosses", func(t *testing.T) {
		want := underlayMTU - 70
		for _, p := range []*testPod{pa, pb} {
			if got := p.result.Interfaces[1].Mtu; got != want {
				t.Errorf("%s: CNI result mtu %d, want %d (underlay %d − 70)", p.name, got, want, underlayMTU)
			}
			inNetns(t, p.netns, func() error {
				l, err := netlink.LinkByName("eth0")
				if err == nil && l.Attrs().MTU != want {
					t.Errorf("%s: eth0 MTU %d, want %d", p.name, l.Attrs().MTU, want)
				}
				return err
			})
		}
		// An echo request filling the pod MTU (IPv6 40 + ICMPv6 8 + payload), not to be
		// fragmented: with 50 bytes of overhead its outer packet would exceed the underlay.
		size := fmt.Sprint(want - 48)
		mustRun(t, "ip", "netns", "exec", filepath.Base(pa.netns), "ping", "-6", "-c", "2", "-W", "2", "-M", "do", "-s", size, pb.ip6(t).String())
	})

	t.Run("each node's host reaches the other node's pod (IPv6 cluster route)", func(t *testing.T) {
		for _, c := range []struct {
			from *clusterNode
			to   *testPod
		}{{a, pb}, {b, pa}} {
			waitUntil(t, fmt.Sprintf("ping6 %s host → pod %s", c.from.name, c.to.ip6(t)), 10*time.Second, func() error {
				return ping6(c.from.OVS.NetnsPath(), c.to.ip6(t))
			})
		}
	})

	t.Run("a pod's forged IPv6 source does not cross", func(t *testing.T) {
		// An address of node-b's subnet (node-b's tunnel_ingress would drop it too) and one
		// of node-a's own (only node-a's spoof guard drops it).
		for _, forged := range []string{strings.TrimSuffix(b.subnet, "/64") + "99", strings.TrimSuffix(a.subnet, "/64") + "99"} {
			mustRun(t, "ip", "-n", filepath.Base(pa.netns), "addr", "add", forged+"/128", "dev", "eth0", "nodad")
			if udpFrom6(t, pa, net.ParseIP(forged), pb) {
				t.Errorf("a datagram from pod on node-a with forged source %s reached node-b's pod", forged)
			}
			mustRun(t, "ip", "-n", filepath.Base(pa.netns), "addr", "del", forged+"/128", "dev", "eth0")
		}
		udpExchange6(t, pa, pb) // its own address still does
	})
}

// TestIPv6OnlyNode: an IPv6-only node's ADD, CHECK and lease restore; an IPv6-first
// dual-stack node's result order and CHECK.
func TestIPv6OnlyNode(t *testing.T) {
	serialIPv6(t)
	t.Run("IPv6-only", func(t *testing.T) {
		t.Parallel()
		const subnet, gw = "fd00:10:153::/64", "fd00:10:153::1"
		n := &testNode{harness.NewNode(t, subnet, "ofsdn-e2e")}
		start := func() {
			n.StartDaemon(filepath.Join(buildBinaries(t), "ofsdn-node"), 30*time.Second,
				"--pod-subnets", subnet, "--log-level", "debug")
		}
		start()
		pa, pb := n.addPod("v6-a"), n.addPod("v6-b")
		r := pa.result
		_, sn, _ := net.ParseCIDR(subnet)
		if len(r.IPs) != 1 || !sn.Contains(r.IPs[0].Address.IP) || !r.IPs[0].Gateway.Equal(net.ParseIP(gw)) ||
			len(r.Routes) != 1 || r.Routes[0].Dst.String() != "::/0" || !r.Routes[0].GW.Equal(net.ParseIP(gw)) {
			t.Fatalf("IPv6-only pod's CNI result %s, want one address of %s via %s and one route ::/0 via it", jsonString(r), subnet, gw)
		}
		if err := ping6(pa.netns, pb.ip6(t)); err != nil {
			t.Fatal(err)
		}
		if err := ping6(pa.netns, net.ParseIP(gw)); err != nil {
			t.Fatalf("pod to the gateway: %v", err)
		}
		if v := n.OVS.Vsctl(t, "get", "Interface", pa.result.Interfaces[0].Name, "external_ids"); strings.Contains(v, "ofsdn-ip=") || !strings.Contains(v, "ofsdn-ipv6=") {
			t.Fatalf("port external_ids %s: want ofsdn-ipv6 and no ofsdn-ip", v)
		}

		// A lease lost while the ports live is rebuilt from their ofsdn-ipv6 at start.
		n.StopDaemon()
		if err := os.Remove(filepath.Join(n.DataDir, "ipam", "leases.json")); err != nil {
			t.Fatal(err)
		}
		start()
		waitUntil(t, "ping6 between the pods after the restart", 10*time.Second, func() error { return ping6(pa.netns, pb.ip6(t)) })
		pc := n.addPod("v6-c")
		if pc.ip6(t).Equal(pa.ip6(t)) || pc.ip6(t).Equal(pb.ip6(t)) {
			t.Fatalf("new pod got %s, an address of a pod whose lease was rebuilt", pc.ip6(t))
		}

		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, pa.rt); err != nil {
			t.Fatalf("CHECK of an intact IPv6-only pod: %v", err)
		}
		addr := &net.IPNet{IP: pa.ip6(t), Mask: pa.result.IPs[0].Address.Mask}
		mustRun(t, "ip", "-n", filepath.Base(pa.netns), "addr", "del", addr.String(), "dev", "eth0")
		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, pa.rt); err == nil || !strings.Contains(err.Error(), "no address "+addr.String()) {
			t.Fatalf("CHECK of the pod without its IPv6 address: %v, want an error naming it", err)
		}
		for _, p := range []*testPod{pa, pb, pc} {
			if err := n.delPod(p); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []*testPod{pa, pb, pc} {
			if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); strings.Contains(ports, p.result.Interfaces[0].Name) {
				t.Fatalf("%s's port left after DEL: %s", p.name, ports)
			}
		}
	})
	t.Run("IPv6-first dual-stack", func(t *testing.T) {
		t.Parallel()
		const sub6, sub4 = "fd00:10:154::/64", "10.154.0.0/24"
		n := &testNode{harness.NewNode(t, sub4, "ofsdn-e2e")}
		n.StartDaemon(filepath.Join(buildBinaries(t), "ofsdn-node"), 30*time.Second,
			"--pod-subnets", sub6+","+sub4, "--log-level", "debug")
		p := n.addPod("v6first")
		r := p.result
		var got, routes []string
		for _, ip := range r.IPs {
			got = append(got, ip.Address.String()+" via "+ip.Gateway.String())
		}
		for _, rt := range r.Routes {
			routes = append(routes, rt.Dst.String()+" via "+rt.GW.String())
		}
		if len(got) != 2 || !strings.HasPrefix(got[0], "fd00:10:154::") || !strings.HasSuffix(got[0], "/64 via fd00:10:154::1") ||
			!strings.HasPrefix(got[1], "10.154.0.") || !strings.HasSuffix(got[1], "/24 via 10.154.0.1") {
			t.Fatalf("IPv6-first pod's CNI result IPs %v, want its IPv6 address first, then its IPv4 one", got)
		}
		if strings.Join(routes, ", ") != "::/0 via fd00:10:154::1, 0.0.0.0/0 via 10.154.0.1" {
			t.Fatalf("IPv6-first pod's routes %v, want the IPv6 default route first", routes)
		}
		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, p.rt); err != nil {
			t.Fatalf("CHECK of an intact IPv6-first pod: %v", err)
		}
		// CHECK looks at both families: the IPv6 address removed is caught.
		mustRun(t, "ip", "-n", filepath.Base(p.netns), "addr", "del", r.IPs[0].Address.String(), "dev", "eth0")
		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, p.rt); err == nil || !strings.Contains(err.Error(), "no address "+r.IPs[0].Address.String()) {
			t.Fatalf("CHECK of the dual-stack pod without its IPv6 address: %v, want an error naming it", err)
		}
	})
}
