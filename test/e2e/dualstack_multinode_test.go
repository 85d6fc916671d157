package e2e

// Two dual-stack nodes (issue 23, second slice): the multi-node harness (multinode_test.go:
// each node a sandbox OVS on the userspace datapath in a namespace of its own, its
// underlay NIC on a br-phy bridge holding the IPv4 node IP, joined by a Linux bridge in
// the test's underlay namespace) with podSubnets [IPv4, IPv6] on every node and peer.
// Pods on different nodes reach each other over IPv6 (ICMPv6 echo, TCP, UDP) through the
// tunnel on the IPv4 underlay, VXLAN and Geneve, with the hop limit as the IPv4 path
// leaves the TTL; a pod cannot send IPv6 across with a source that is not its own; a
// peer's IPv6 subnet moved in the topology moves its flows, and a peer removed from the
// topology leaves no IPv6 flow and no IPv6 path, and comes back when re-added. With the
// IPv6 cluster CIDR in the topology (clusterCIDRIPv6), a pod's IPv6 to an "outside"
// namespace on the underlay (a ULA prefix of its own, on-link to the nodes' br-phy) leaves
// masqueraded to its node's underlay IPv6 address, while pod-to-pod IPv6 keeps the pod's
// address.

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/flows"
)

// dualClusterNode is a cluster node with its IPv6 pod subnet and its underlay IPv6
// address (on br-phy, beside the IPv4 node IP).
type dualClusterNode struct {
	*clusterNode
	subnet6, ip6 string
}

const (
	dualClusterCIDR6 = "fd00:10:244::/56"
	outsideIP6       = "fd00:30::200" // the outside's address on the underlay's fd00:30::/64
)

// dualTopologyYAML is node self's topology file listing peers, every node dual-stack.
func dualTopologyYAML(self *dualClusterNode, peers ...*dualClusterNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusterCIDR: 10.244.0.0/16\nclusterCIDRIPv6: %s\nnodeName: %s\npodSubnets: [%s, %s]\nnodeIP: %s\nnodeIPv6: %s\npeers:\n", dualClusterCIDR6, self.name, self.subnet, self.subnet6, self.ip, self.ip6)
	for _, p := range peers {
		fmt.Fprintf(&b, "- {name: %s, podSubnets: [%s, %s], nodeIP: %s, nodeIPv6: %s}\n", p.name, p.subnet, p.subnet6, p.ip, p.ip6)
	}
	return b.String()
}

// startDualCluster makes an underlay namespace with a Linux bridge and two dual-stack
// nodes on it, each knowing the other from its topology file, with extra daemon flags.
// Node i (1, 2) has node IP 172.30.0.(10+off+i), underlay IPv6 address fd00:30::(10+off+i),
// pod subnets 10.244.(off+i).0/24 and fd00:10:244:(off+i)::/64 (off decimal, as a hex
// group: distinct for distinct offsets). It returns the underlay namespace's name too.
func startDualCluster(t *testing.T, off int, extra ...string) (string, *dualClusterNode, *dualClusterNode) {
	t.Helper()
	ul := filepath.Base(newNetns(t, "ofsdn-ul"))
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")
	var nodes []*dualClusterNode
	for i, name := range []string{"node-a", "node-b"} {
		cn := startClusterNode(t, ul, name, fmt.Sprintf("172.30.0.%d", 10+off+i+1), fmt.Sprintf("10.244.%d.0/24", off+i+1), i+1)
		dn := &dualClusterNode{clusterNode: cn, subnet6: fmt.Sprintf("fd00:10:244:%d::/64", off+i+1), ip6: fmt.Sprintf("fd00:30::%d", 10+off+i+1)}
		cn.OVS.Exec(t, "ip", "addr", "add", dn.ip6+"/64", "dev", "br-phy", "nodad")
		nodes = append(nodes, dn)
	}
	a, b := nodes[0], nodes[1]
	writeTopology(t, a.topo, dualTopologyYAML(a, b))
	writeTopology(t, b.topo, dualTopologyYAML(b, a))
	for _, n := range nodes {
		n.extra = extra
		n.start()
	}
	return ul, a, b
}

// TestDualStackMultiNode: two dual-stack nodes, per tunnel type (VXLAN, Geneve).
func TestDualStackMultiNode(t *testing.T) {
	serialIPv6(t)
	for _, tc := range []struct {
		tunnel string
		off    int // address offset (startDualCluster)
	}{{"vxlan", 40}, {"geneve", 60}} {
		t.Run(tc.tunnel, func(t *testing.T) {
			t.Parallel() // separate namespaces and addresses; mostly waiting on the daemons
			testDualStackMultiNode(t, tc.tunnel, tc.off)
		})
	}
}

var pingTTLRe = regexp.MustCompile(`ttl=(\d+)`)

// pingTTL pings dst once from netnsPath and returns the TTL (IPv4) or hop limit (IPv6)
// of the reply as ping prints it.
func pingTTL(t *testing.T, netnsPath string, dst net.IP) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", filepath.Base(netnsPath), "ping", "-c", "1", "-W", "2", dst.String()).CombinedOutput()
	m := pingTTLRe.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("ping %s from %s: %v\n%s", dst, filepath.Base(netnsPath), err, out)
	}
	return string(m[1])
}

func testDualStackMultiNode(t *testing.T, tunnel string, off int) {
	ul, a, b := startDualCluster(t, off, "--tunnel-type", tunnel)
	pa, pb := a.addPod("dsmn-a"), b.addPod("dsmn-b")
	_, sn6b, _ := net.ParseCIDR(b.subnet6)
	if !sn6b.Contains(pb.ip6(t)) {
		t.Fatalf("pod on node-b has IPv6 address %s outside node-b's %s", pb.ip6(t), sn6b)
	}

	t.Run("pods on the two nodes reach each other over IPv6", func(t *testing.T) {
		// The first packets also resolve the underlay's ARP in the tunnel neighbour cache.
		waitUntil(t, "ping6 node-a → node-b", 30*time.Second, func() error { return ping6(pa.netns, pb.ip6(t)) })
		if err := ping6(pb.netns, pa.ip6(t)); err != nil {
			t.Fatal(err)
		}
		tcpExchange6(t, pa, pb, 100000)
		tcpExchange6(t, pb, pa, 1000)
		udpExchange6(t, pa, pb)
		udpExchange6(t, pb, pa)
		// IPv4 as before.
		if err := ping(pa.netns, pb.ip()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("hop limit as the IPv4 path leaves the TTL", func(t *testing.T) {
		ttl4, hlim := pingTTL(t, pa.netns, pb.ip()), pingTTL(t, pa.netns, pb.ip6(t))
		if ttl4 != hlim || hlim != "64" {
			t.Fatalf("reply from the other node's pod: IPv4 TTL %s, IPv6 hop limit %s; want both 64 (the pod's, untouched by the overlay)", ttl4, hlim)
		}
	})

	t.Run("each node's host reaches the other node's pods over IPv6, from its gateway address", func(t *testing.T) {
		for _, c := range []struct {
			from *dualClusterNode
			to   *testPod
		}{{a, pb}, {b, pa}} {
			waitUntil(t, fmt.Sprintf("ping6 %s host → pod %s", c.from.name, c.to.ip6(t)), 30*time.Second, func() error {
				return ping6(c.from.OVS.NetnsPath(), c.to.ip6(t))
			})
			// TCP: the pod sees the host by its gateway's IPv6 address (::1 of its subnet).
			var ln net.Listener
			inNetns(t, c.to.netns, func() (err error) {
				ln, err = net.Listen("tcp6", net.JoinHostPort(c.to.ip6(t).String(), "0"))
				return err
			})
			peer := make(chan string, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					peer <- err.Error()
					return
				}
				peer <- conn.RemoteAddr().(*net.TCPAddr).IP.String()
				conn.Close()
			}()
			inNetns(t, c.from.OVS.NetnsPath(), func() error {
				conn, err := net.DialTimeout("tcp6", ln.Addr().String(), 5*time.Second)
				if err != nil {
					return err
				}
				return conn.Close()
			})
			got := <-peer
			ln.Close()
			if want := strings.TrimSuffix(c.from.subnet6, "/64") + "1"; got != want {
				t.Errorf("pod %s saw host of %s as %s, want its gateway address %s", c.to.ip6(t), c.from.name, got, want)
			}
		}
	})

	t.Run("a pod's forged IPv6 source does not cross", func(t *testing.T) {
		// An address of node-b's subnet (as if pb's neighbour) and one of node-a's on pa's
		// eth0 (nodad: ofsdn pods have DAD off): the spoof guard of node-a drops both.
		for _, forged := range []string{strings.TrimSuffix(b.subnet6, "/64") + "99", strings.TrimSuffix(a.subnet6, "/64") + "99"} {
			mustRun(t, "ip", "-n", filepath.Base(pa.netns), "addr", "add", forged+"/128", "dev", "eth0", "nodad")
			// Off again at the end: the kernel would pick the address of node-b's subnet as
			// the source for node-b's pods (longest matching prefix, RFC 6724 rule 8).
			defer mustRun(t, "ip", "-n", filepath.Base(pa.netns), "addr", "del", forged+"/128", "dev", "eth0")
			if udpFrom6(t, pa, net.ParseIP(forged), pb) {
				t.Errorf("a datagram from pod on node-a with forged source %s reached node-b's pod", forged)
			}
		}
		udpExchange6(t, pa, pb) // its own address still does
	})

	t.Run("pod reaches the outside over IPv6, masqueraded to its node's address", func(t *testing.T) {
		outPath := newNetns(t, "ofsdn-out")
		out := filepath.Base(outPath)
		mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "ul-out6", "mtu", fmt.Sprint(underlayMTU), "type", "veth",
			"peer", "name", "eth0", "mtu", fmt.Sprint(underlayMTU), "netns", out)
		mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "ul-out6", "master", "br0", "up")
		mustRun(t, "ip", "netns", "exec", out, "ip", "addr", "add", outsideIP6+"/64", "dev", "eth0", "nodad")
		mustRun(t, "ip", "netns", "exec", out, "ip", "link", "set", "eth0", "up")
		// The outside has no route to the pods' prefixes: only masqueraded traffic (from
		// the node's fd00:30::/64 address) can be answered.
		waitUntil(t, "ping6 pod on node-a → the outside", 30*time.Second, func() error { return ping6(pa.netns, net.ParseIP(outsideIP6)) })
		for _, c := range []struct {
			pod  *testPod
			node *dualClusterNode
		}{{pa, a}, {pb, b}} {
			var conn *net.UDPConn
			inNetns(t, outPath, func() (err error) {
				conn, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.ParseIP(outsideIP6), Port: 9999})
				return err
			})
			inNetns(t, c.pod.netns, func() error {
				s, err := net.Dial("udp6", "["+outsideIP6+"]:9999")
				if err != nil {
					return err
				}
				defer s.Close()
				_, err = s.Write([]byte("hello6 from a pod"))
				return err
			})
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 64)
			k, from, err := conn.ReadFromUDP(buf)
			conn.Close()
			if err != nil {
				t.Fatalf("outside got nothing from %s: %v", c.pod.name, err)
			}
			if string(buf[:k]) != "hello6 from a pod" || !from.IP.Equal(net.ParseIP(c.node.ip6)) {
				t.Fatalf("outside got %q from %v, want the datagram of %s from %s's %s", buf[:k], from, c.pod.name, c.node.name, c.node.ip6)
			}
		}
		// Pod to pod (udpExchange6 checks the source each side sees) is not masqueraded.
		udpExchange6(t, pa, pb)
		tcpExchange6(t, pa, pb, 10000)
	})

	t.Run("an unknown address of the IPv6 cluster CIDR is dropped, not sent out", func(t *testing.T) {
		unknown := net.ParseIP(fmt.Sprintf("fd00:10:244:%d::5", off+9))
		before := flowPackets(t, a.testNode, "remote", "priority=10", "ipv6", dualClusterCIDR6)
		if err := ping6(pa.netns, unknown); err == nil {
			t.Fatalf("ping6 to %s answered", unknown)
		}
		if d := flowPackets(t, a.testNode, "remote", "priority=10", "ipv6", dualClusterCIDR6) - before; d < 1 {
			t.Fatalf("remote's IPv6 cluster miss counted %d packets, want the echo requests", d)
		}
	})

	t.Run("ofsdnctl peers shows the peer's IPv6 subnet and address", func(t *testing.T) {
		var peers []ctl.Peer
		if err := json.Unmarshal(runCtl(t, a.testNode, "peers", "-o", "json"), &peers); err != nil {
			t.Fatal(err)
		}
		if len(peers) != 1 || peers[0].Node != b.name || peers[0].PodSubnet != b.subnet || peers[0].PodSubnetIPv6 != b.subnet6 || peers[0].IPv6 != b.ip6 {
			t.Fatalf("ofsdnctl peers on node-a: %s, want node-b with %s and %s, IPv6 address %s", jsonString(peers), b.subnet, b.subnet6, b.ip6)
		}
		table := string(runCtl(t, a.testNode, "peers"))
		if !strings.Contains(table, b.subnet+","+b.subnet6) || !strings.Contains(table, b.ip+","+b.ip6) {
			t.Fatalf("ofsdnctl peers table lacks %s,%s or %s,%s:\n%s", b.subnet, b.subnet6, b.ip, b.ip6, table)
		}
	})

	v6Flows := func(n *dualClusterNode, peer *dualClusterNode, subnet6 string) []string {
		var out []string
		for _, l := range n.peerFlows(peer.clusterNode) {
			if strings.Contains(l, subnet6) {
				out = append(out, l)
			}
		}
		return out
	}

	t.Run("a peer's moved IPv6 subnet moves its flows", func(t *testing.T) {
		if got := v6Flows(a, b, b.subnet6); len(got) != 2 {
			t.Fatalf("node-a has %d flows for node-b's %s, want 2 (tunnel_ingress, remote):\n%s", len(got), b.subnet6, strings.Join(got, "\n"))
		}
		moved := *b
		moved.subnet6 = fmt.Sprintf("fd00:10:244:%d::/64", off+9)
		writeTopology(t, a.topo, dualTopologyYAML(a, &moved))
		waitUntil(t, "node-a's flows for node-b's moved IPv6 subnet", 30*time.Second, func() error {
			if old, cur := v6Flows(a, b, b.subnet6), v6Flows(a, b, moved.subnet6); len(old) != 0 || len(cur) != 2 {
				return fmt.Errorf("%d flows for the old subnet, %d for the new one", len(old), len(cur))
			}
			return nil
		})
		if err := ping6(pa.netns, pb.ip6(t)); err == nil {
			t.Fatal("node-b's pod still reached over IPv6 while node-a routes another subnet to node-b")
		}
		writeTopology(t, a.topo, dualTopologyYAML(a, b))
		waitUntil(t, "ping6 node-a → node-b after the move back", 30*time.Second, func() error { return ping6(pa.netns, pb.ip6(t)) })
	})

	t.Run("peer removed: no IPv6 flow and no IPv6 path left; re-added: back", func(t *testing.T) {
		bOwner := flows.Owner{Kind: flows.OwnerPeer, ID: a.peerOwnerID(b.clusterNode)}
		writeTopology(t, a.topo, dualTopologyYAML(a))
		waitUntil(t, "node-b's flows gone from node-a", 30*time.Second, func() error {
			if f := a.ownerFlows(bOwner); len(f) > 0 {
				return fmt.Errorf("still there: %s", strings.Join(f, "\n"))
			}
			return nil
		})
		prefix := strings.TrimSuffix(b.subnet6, "/64")
		for _, l := range flowLines(a.OVS.Ofctl(t, "dump-flows", "--no-stats", a.mgmt())) {
			if strings.Contains(l, prefix) {
				t.Errorf("node-a still has a flow naming node-b's IPv6 subnet: %s", l)
			}
		}
		if err := ping6(pa.netns, pb.ip6(t)); err == nil {
			t.Fatal("pod on node-a still reaches node-b's pod over IPv6")
		}
		writeTopology(t, a.topo, dualTopologyYAML(a, b))
		waitUntil(t, "ping6 node-a → node-b after re-adding", 30*time.Second, func() error { return ping6(pa.netns, pb.ip6(t)) })
	})
}

// udpExchange6 sends a datagram from a to b over IPv6 (their IPv6 addresses) and b
// answers; both must arrive.
func udpExchange6(t *testing.T, a, b *testPod) {
	t.Helper()
	var srv *net.UDPConn
	inNetns(t, b.netns, func() (err error) {
		srv, err = net.ListenUDP("udp6", &net.UDPAddr{IP: b.ip6(t)})
		return err
	})
	defer srv.Close()
	src := make(chan net.IP, 10)
	go func() {
		buf := make([]byte, 2048)
		_ = srv.SetDeadline(time.Now().Add(5 * time.Second))
		for {
			k, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			select {
			case src <- from.IP:
			default:
			}
			_, _ = srv.WriteToUDP(append([]byte("re:"), buf[:k]...), from)
		}
	}()
	var cl *net.UDPConn
	inNetns(t, a.netns, func() (err error) {
		cl, err = net.DialUDP("udp6", &net.UDPAddr{IP: a.ip6(t)}, srv.LocalAddr().(*net.UDPAddr))
		return err
	})
	defer cl.Close()
	buf := make([]byte, 2048)
	for try := 0; try < 3; try++ { // the first datagram may wait on neighbor discovery
		if _, err := cl.Write([]byte("hello6 " + b.name)); err != nil {
			t.Fatal(err)
		}
		_ = cl.SetReadDeadline(time.Now().Add(time.Second))
		k, err := cl.Read(buf)
		if err == nil {
			if string(buf[:k]) != "re:hello6 "+b.name {
				t.Fatalf("UDP/IPv6 %s→%s: got %q", a.name, b.name, buf[:k])
			}
			if from := <-src; !from.Equal(a.ip6(t)) {
				t.Fatalf("UDP/IPv6 %s→%s: %s got the datagram from %s, want %s's own address %s", a.name, b.name, b.name, from, a.name, a.ip6(t))
			}
			return
		}
	}
	t.Fatalf("UDP/IPv6 %s→%s: no answer", a.name, b.name)
}

// udpFrom6 sends datagrams from pod a with IPv6 source address src to pod b's IPv6
// address and reports whether any arrived.
func udpFrom6(t *testing.T, a *testPod, src net.IP, b *testPod) bool {
	t.Helper()
	var srv *net.UDPConn
	inNetns(t, b.netns, func() (err error) {
		srv, err = net.ListenUDP("udp6", &net.UDPAddr{IP: b.ip6(t)})
		return err
	})
	defer srv.Close()
	var cl *net.UDPConn
	inNetns(t, a.netns, func() (err error) {
		cl, err = net.DialUDP("udp6", &net.UDPAddr{IP: src}, srv.LocalAddr().(*net.UDPAddr))
		return err
	})
	defer cl.Close()
	for i := 0; i < 5; i++ {
		_, _ = cl.Write([]byte("forged"))
		time.Sleep(50 * time.Millisecond)
	}
	_ = srv.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	_, _, err := srv.ReadFromUDP(buf)
	return err == nil
}
