package e2e

// Three nodes on one machine: each is a private OVS (userspace datapath) in a network
// namespace of its own with its own ofsdn-node, joined by an underlay: a veth pair per
// node into a Linux bridge in a namespace of the test's own. As DESIGN.md records, with
// the userspace datapath the tunnel's outer packets must leave through an OVS bridge that
// owns the underlay address, so each node's underlay NIC is on a br-phy bridge whose
// internal port holds the node IP. The nodes learn each other from topology files (the
// static-file source); an "outside" namespace on the underlay, outside the cluster CIDR,
// stands for the world. Every address is private and inside namespaces the test made.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

const (
	underlayMTU = 1400 // bytes; not the default, so the pod MTU shows it was derived
	outsideIP   = "172.30.0.200"
)

type clusterNode struct {
	*testNode
	name, ip, subnet string
	topo             string // topology file path
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// topologyYAML is node self's topology file listing peers.
func topologyYAML(self *clusterNode, peers []*clusterNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusterCIDR: 10.244.0.0/16\nnodeName: %s\npodSubnet: %s\nnodeIP: %s\npeers:\n", self.name, self.subnet, self.ip)
	for _, p := range peers {
		fmt.Fprintf(&b, "- {name: %s, podSubnet: %s, nodeIP: %s}\n", p.name, p.subnet, p.ip)
	}
	return b.String()
}

// writeTopology replaces the file the way a ConfigMap update or an editor does.
func writeTopology(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// startClusterNode makes one node: sandbox OVS, underlay veth into the test's bridge, br-phy
// with the node IP, and ofsdn-node reading its topology file.
func startClusterNode(t *testing.T, ul, name, ip, subnet string, idx int) *clusterNode {
	t.Helper()
	bin := buildBinaries(t)
	o := sandbox.Start(t)
	n := &testNode{t: t, ovs: o, dir: o.Dir, socket: filepath.Join(o.Dir, "cni", "cni.sock"),
		dataDir: filepath.Join(o.Dir, "data"), subnet: subnet, logPath: filepath.Join(o.Dir, "ofsdn-node.log")}
	cn := &clusterNode{testNode: n, name: name, ip: ip, subnet: subnet, topo: filepath.Join(o.Dir, "topology.yaml")}

	// Underlay: veth ul-N (on the test's bridge) ↔ uplink0 (in the node), both MTU 1400.
	host := fmt.Sprintf("ul-%d", idx)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", host, "mtu", fmt.Sprint(underlayMTU), "type", "veth",
		"peer", "name", "uplink0", "mtu", fmt.Sprint(underlayMTU), "netns", o.Netns)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", host, "master", "br0", "up")
	o.Exec(t, "ip", "link", "set", "uplink0", "up")
	o.Vsctl(t, "add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev",
		"--", "add-port", "br-phy", "uplink0", "--", "set", "interface", "br-phy", fmt.Sprintf("mtu_request=%d", underlayMTU))
	o.Exec(t, "ip", "addr", "add", ip+"/24", "dev", "br-phy")
	o.Exec(t, "ip", "link", "set", "br-phy", "up")

	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ofsdn-e2e","plugins":[{"type":"ofsdn","socket":%q}]}`, n.socket)
	var err error
	if n.netconf, err = libcni.ConfListFromBytes([]byte(conf)); err != nil {
		t.Fatal(err)
	}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(o.Dir, "cni-cache"), nil)
	t.Cleanup(func() {
		n.stopDaemon()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("%s ofsdn-node log:\n%s", name, b)
			t.Logf("%s flows:\n%s", name, o.Ofctl(t, "dump-flows", "--names", n.mgmt()))
		}
	})
	return cn
}

// start runs the daemon with the topology file and waits until CNI STATUS passes.
func (cn *clusterNode) start() {
	n, t := cn.testNode, cn.t
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ovs.Netns, filepath.Join(binDir, "ofsdn-node"),
		"--ovsdb", n.ovs.OVSDBEndpoint(), "--ovs-rundir", n.dir, "--datapath-type", "netdev",
		"--socket", n.socket, "--data-dir", n.dataDir, "--log-level", "debug", "--metrics-address", "",
		"--topology-file", cn.topo, "--service-cidr", "10.96.0.0/12", "--mtu", "0")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.daemon = cmd
	waitUntil(t, cn.name+" ofsdn-node ready", 60*time.Second, func() error {
		return n.cni.GetStatusNetworkList(t.Context(), n.netconf)
	})
}

// waitFor polls cond until it returns nil or the (generous) deadline passes.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// peerFlows returns the flows on n's bridge that carry the cookie of peer (owner kind peer,
// owner id = its subnet), as dump-flows prints them.
func (cn *clusterNode) peerFlows(peer *clusterNode) []string {
	_, subnet, _ := net.ParseCIDR(peer.subnet)
	cookie, mask := flows.PeerCookie(flows.Peer{PodSubnet: subnet})
	out := cn.ovs.Ofctl(cn.t, "dump-flows", "--no-stats", cn.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_FLOW") {
			got = append(got, l)
		}
	}
	return got
}

func TestMultiNode(t *testing.T) {
	ulPath := newNetns(t, "ofsdn-ul")
	ul := filepath.Base(ulPath)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")

	a := startClusterNode(t, ul, "node-a", "172.30.0.11", "10.244.1.0/24", 1)
	b := startClusterNode(t, ul, "node-b", "172.30.0.12", "10.244.2.0/24", 2)
	c := startClusterNode(t, ul, "node-c", "172.30.0.13", "10.244.3.0/24", 3)
	nodes := []*clusterNode{a, b, c}
	for _, n := range nodes {
		var peers []*clusterNode
		for _, p := range nodes {
			if p != n {
				peers = append(peers, p)
			}
		}
		writeTopology(t, n.topo, topologyYAML(n, peers))
		n.start()
	}

	// The outside: a namespace on the underlay with an address outside the cluster CIDR.
	outPath := newNetns(t, "ofsdn-out")
	out := filepath.Base(outPath)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "ul-out", "mtu", fmt.Sprint(underlayMTU), "type", "veth",
		"peer", "name", "eth0", "mtu", fmt.Sprint(underlayMTU), "netns", out)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "ul-out", "master", "br0", "up")
	mustRun(t, "ip", "netns", "exec", out, "ip", "addr", "add", outsideIP+"/24", "dev", "eth0")
	mustRun(t, "ip", "netns", "exec", out, "ip", "link", "set", "eth0", "up")

	pa, pb, pc := a.addPod("mn-a"), b.addPod("mn-b"), c.addPod("mn-c")
	pods := map[*clusterNode]*testPod{a: pa, b: pb, c: pc}

	t.Run("pods on every node pair reach each other", func(t *testing.T) {
		for _, from := range nodes {
			for _, to := range nodes {
				if from == to {
					continue
				}
				// The first packets also resolve the underlay's ARP in the tunnel neighbour
				// cache: allow retries until the path is up.
				waitUntil(t, fmt.Sprintf("ping %s → %s", from.name, to.name), 30*time.Second, func() error {
					return ping(pods[from].netns, pods[to].ip())
				})
			}
		}
	})

	t.Run("host reaches a remote pod", func(t *testing.T) {
		waitUntil(t, "ping node-a host → pod on node-b", 30*time.Second, func() error {
			return ping(a.ovs.NetnsPath(), pb.ip())
		})
	})

	t.Run("pod MTU is underlay MTU - 50 and a DF ping of that size crosses nodes", func(t *testing.T) {
		want := underlayMTU - 50
		if got := pa.result.Interfaces[1].Mtu; got != want {
			t.Fatalf("CNI result MTU %d, want %d", got, want)
		}
		inNetns(t, pa.netns, func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			if l.Attrs().MTU != want {
				return fmt.Errorf("pod eth0 MTU %d, want %d", l.Attrs().MTU, want)
			}
			return nil
		})
		size := fmt.Sprint(want - 28) // IPv4 20 + ICMP 8
		if err := ping(pa.netns, pc.ip(), "-M", "do", "-s", size); err != nil {
			t.Fatalf("DF ping of %d bytes from node-a to node-c: %v", want, err)
		}
	})

	t.Run("pod reaches the outside, masqueraded to its node's address", func(t *testing.T) {
		if err := ping(pa.netns, net.ParseIP(outsideIP)); err != nil {
			t.Fatal(err)
		}
		var conn *net.UDPConn
		inNetns(t, outPath, func() (err error) {
			conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(outsideIP), Port: 9999})
			return err
		})
		defer conn.Close()
		inNetns(t, pa.netns, func() error {
			s, err := net.Dial("udp4", outsideIP+":9999")
			if err != nil {
				return err
			}
			defer s.Close()
			_, err = s.Write([]byte("hello from a pod"))
			return err
		})
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, 64)
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("outside got nothing: %v", err)
		}
		if string(buf[:n]) != "hello from a pod" || !from.IP.Equal(net.ParseIP(a.ip)) {
			t.Fatalf("outside got %q from %v, want the pod's datagram from node-a's %s", buf[:n], from, a.ip)
		}
	})

	pidA := a.daemon.Process.Pid
	t.Run("peer removed from the topology: its flows go and its pods are unreachable", func(t *testing.T) {
		if len(a.peerFlows(c)) == 0 {
			t.Fatal("node-a has no flows for node-c before the removal")
		}
		writeTopology(t, a.topo, topologyYAML(a, []*clusterNode{b}))
		waitUntil(t, "node-c's flows gone from node-a", 30*time.Second, func() error {
			if f := a.peerFlows(c); len(f) > 0 {
				return fmt.Errorf("still there: %s", strings.Join(f, "\n"))
			}
			return nil
		})
		if err := ping(pa.netns, pc.ip()); err == nil {
			t.Fatal("pod on node-a still reaches node-c's pod")
		}
		if err := ping(pa.netns, pb.ip()); err != nil {
			t.Fatalf("node-b lost too: %v", err)
		}
	})

	t.Run("peer added back: reachable again without a restart", func(t *testing.T) {
		writeTopology(t, a.topo, topologyYAML(a, []*clusterNode{b, c}))
		waitUntil(t, "ping node-a → node-c after re-adding", 30*time.Second, func() error {
			return ping(pa.netns, pc.ip())
		})
		if a.daemon.Process.Pid != pidA || a.daemon.ProcessState != nil {
			t.Fatal("node-a's daemon was restarted")
		}
	})
}
