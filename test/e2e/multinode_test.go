package e2e

// Three nodes on one machine: each is a private OVS (userspace datapath) in a network
// namespace of its own with its own ofsdn-node, joined by an underlay: a veth pair per
// node into a Linux bridge in a namespace of the test's own. As docs/design.md records, with
// the userspace datapath the tunnel's outer packets must leave through an OVS bridge that
// owns the underlay address, so each node's underlay NIC is on a br-phy bridge whose
// internal port holds the node IP. The nodes learn each other from topology files (the
// static-file source); an "outside" namespace on the underlay, outside the cluster CIDR,
// stands for the world. Every address is private and inside namespaces the test made.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/metrics"
	"github.com/ofsdn/ofsdn/test/harness"
)

const (
	underlayMTU = 1400 // bytes; not the default, so the pod MTU shows it was derived
	outsideIP   = "172.30.0.200"
)

type clusterNode struct {
	*testNode
	name, ip, subnet string
	topo             string   // topology file path
	extra            []string // more daemon flags (e.g. -tunnel-type)
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
	n := &testNode{harness.NewNode(t, subnet, "ofsdn-e2e")}
	n.Name = name + " ofsdn-node"
	o := n.OVS
	cn := &clusterNode{testNode: n, name: name, ip: ip, subnet: subnet, topo: filepath.Join(o.Dir, "topology.yaml")}

	// Underlay: veth ul-N (on the test's bridge) ↔ uplink0 (in the node), both MTU 1400.
	host := fmt.Sprintf("ul-%d", idx)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", host, "mtu", fmt.Sprint(underlayMTU), "type", "veth",
		"peer", "name", "uplink0", "mtu", fmt.Sprint(underlayMTU), "netns", o.Netns)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", host, "master", "br0", "up")
	o.Exec(t, "ip", "link", "set", "uplink0", "up")
	o.Vsctl(t, "add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev",
		"--", "add-port", "br-phy", "uplink0", "--", "set", "interface", "br-phy", fmt.Sprintf("mtu_request=%d", underlayMTU))
	if strings.Contains(ip, ":") { // an IPv6 underlay (ipv6only_test.go): no DAD wait
		o.Exec(t, "ip", "addr", "add", ip+"/64", "dev", "br-phy", "nodad")
	} else {
		o.Exec(t, "ip", "addr", "add", ip+"/24", "dev", "br-phy")
	}
	o.Exec(t, "ip", "link", "set", "br-phy", "up")

	// Runs before the harness's clean-up, which logs the daemon's log and flows if the
	// test failed.
	t.Cleanup(func() {
		n.stopDaemon()
		b, _ := os.ReadFile(n.LogPath)
		if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			t.Errorf("%s: the race detector reported a data race in ofsdn-node (log below)", name)
		}
	})
	return cn
}

// start runs the daemon with the topology file and waits until CNI STATUS passes.
func (cn *clusterNode) start() {
	t := cn.T
	t.Helper()
	// Built with -race when the tests are (daemonBinary), so data races in the daemon
	// show up in its log.
	args := []string{"--log-level", "debug", "--topology-file", cn.topo, "--mtu", "0"}
	if !strings.Contains(cn.subnet, ":") { // an IPv6-only node has no IPv4 service CIDR
		args = append(args, "--service-cidr", "10.96.0.0/12")
	}
	cn.StartDaemon(daemonBinary(t), 60*time.Second, append(args, cn.extra...)...)
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

// peerIDRecord returns the peer owner ids node n's daemon recorded (controller.PeerIDsFile
// with controller.PeerIDsJournal applied, by peer name); nil when there is no record (a
// build before it).
func (n *testNode) peerIDRecord(t *testing.T) map[string]uint32 {
	t.Helper()
	_, errSnap := os.Stat(filepath.Join(n.DataDir, controller.PeerIDsFile))
	_, errJournal := os.Stat(filepath.Join(n.DataDir, controller.PeerIDsJournal))
	if errors.Is(errSnap, fs.ErrNotExist) && errors.Is(errJournal, fs.ErrNotExist) {
		return nil
	}
	rec, err := controller.RecordedPeerIDs(n.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// peerOwnerID returns the owner id of peer's flows on cn: the one cn's daemon recorded for
// it, else (no record: a build before it, or a peer no longer recorded) the id older
// builds derived, its pod subnet's address.
func (cn *clusterNode) peerOwnerID(peer *clusterNode) uint32 {
	if id, ok := cn.peerIDRecord(cn.T)[peer.name]; ok {
		return id
	}
	_, subnet, _ := net.ParseCIDR(peer.subnet)
	return flows.LegacyPeerID(flows.Peer{PodSubnet: subnet})
}

// peerFlows returns the flows on n's bridge that carry the cookie of peer (owner kind peer,
// owner id = peerOwnerID), as dump-flows prints them.
func (cn *clusterNode) peerFlows(peer *clusterNode) []string {
	return cn.ownerFlows(flows.Owner{Kind: flows.OwnerPeer, ID: cn.peerOwnerID(peer)})
}

// ownerFlows returns the flows on n's bridge whose cookie carries owner o, as dump-flows
// prints them.
func (n *testNode) ownerFlows(o flows.Owner) []string {
	cookie, mask := o.Cookie()
	return flowLines(n.OVS.Ofctl(n.T, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask)))
}

// startCluster makes an underlay namespace with a Linux bridge and three nodes on it, each
// knowing the other two from its topology file, and starts their daemons with extra flags.
// Node i (1..3) has node IP 172.30.0.(10+off+i) and pod subnet 10.244.(off+i).0/24, so two
// clusters in one test run never share addresses. It returns the underlay namespace's name
// and the nodes.
func startCluster(t *testing.T, off int, extra ...string) (string, *clusterNode, *clusterNode, *clusterNode) {
	t.Helper()
	ul := filepath.Base(newNetns(t, "ofsdn-ul"))
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")
	var nodes []*clusterNode
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, startClusterNode(t, ul, name,
			fmt.Sprintf("172.30.0.%d", 10+off+i+1), fmt.Sprintf("10.244.%d.0/24", off+i+1), i+1))
	}
	for _, n := range nodes {
		var peers []*clusterNode
		for _, p := range nodes {
			if p != n {
				peers = append(peers, p)
			}
		}
		writeTopology(t, n.topo, topologyYAML(n, peers))
		n.extra = extra
		n.start()
	}
	return ul, nodes[0], nodes[1], nodes[2]
}

// TestMultiNode: three nodes, per tunnel type. Over VXLAN (the default) and Geneve: pods on
// every node pair reach each other, the host reaches a remote pod, and the pod MTU is the
// underlay's minus 50 bytes, which a don't-fragment ping of that size crosses (Geneve as
// ofsdn sends it carries no options: the same 50 bytes as VXLAN). Over VXLAN also:
// masqueraded egress, and a peer removed from and added back to the topology.
func TestMultiNode(t *testing.T) {
	serial(t)
	for _, tc := range []struct {
		tunnel string
		off    int  // address offset (startCluster)
		full   bool // the egress and topology-change subtests too
	}{{"vxlan", 0, true}, {"geneve", 20, false}} {
		t.Run(tc.tunnel, func(t *testing.T) {
			t.Parallel() // separate namespaces and addresses; mostly waiting on the daemons
			testMultiNode(t, tc.tunnel, tc.off, tc.full)
		})
	}
}

func testMultiNode(t *testing.T, tunnel string, off int, full bool) {
	ul, a, b, c := startCluster(t, off, "--tunnel-type", tunnel)
	nodes := []*clusterNode{a, b, c}
	for _, n := range nodes {
		if typ := n.OVS.Vsctl(t, "get", "Interface", tunnel+"0", "type"); typ != tunnel {
			t.Fatalf("%s: tunnel port %s0 has type %s, want %s", n.name, tunnel, typ, tunnel)
		}
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
			return ping(a.OVS.NetnsPath(), pb.ip())
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
			t.Fatalf("DF ping of %d bytes from node-a to node-c over %s: %v", want, tunnel, err)
		}
	})
	if !full {
		return
	}

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

	pidA := a.Daemon.Process.Pid
	t.Run("peer removed from the topology: its flows go and its pods are unreachable", func(t *testing.T) {
		if len(a.peerFlows(c)) == 0 {
			t.Fatal("node-a has no flows for node-c before the removal")
		}
		cOwner := flows.Owner{Kind: flows.OwnerPeer, ID: a.peerOwnerID(c)}
		writeTopology(t, a.topo, topologyYAML(a, []*clusterNode{b}))
		waitUntil(t, "node-c's flows gone from node-a", 30*time.Second, func() error {
			if f := a.ownerFlows(cOwner); len(f) > 0 {
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
		if a.Daemon.Process.Pid != pidA || a.Daemon.ProcessState != nil {
			t.Fatal("node-a's daemon was restarted")
		}
	})

	// With the userspace datapath a peer's underlay MAC sits in OVS's tunnel neighbour
	// cache for up to 15 minutes: node-a announces its node IP (gratuitous ARP) at start
	// and when the MAC of the interface holding it changes.
	t.Run("node IP announced at daemon start and on a MAC change", func(t *testing.T) {
		neighMAC := func(of *clusterNode) string {
			for _, l := range strings.Split(b.OVS.Appctl(t, "tnl/neigh/show"), "\n") {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == of.ip {
					return f[1]
				}
			}
			return ""
		}
		brPhyMAC := func() string { return a.OVS.Exec(t, "cat", "/sys/class/net/br-phy/address") }
		waitMAC := func(want, what string) {
			waitUntil(t, what, 30*time.Second, func() error {
				if got := neighMAC(a); got != want {
					return fmt.Errorf("node-b's tunnel neighbour cache has %q for node-a %s, want %s", got, a.ip, want)
				}
				return nil
			})
		}
		// node-b holds a stale MAC for node-a, as after node-a was replaced.
		b.OVS.Appctl(t, "tnl/neigh/set", "br-phy", a.ip, "02:00:00:00:00:01")
		if got := neighMAC(a); got != "02:00:00:00:00:01" {
			t.Fatalf("stale entry not set: %q", got)
		}
		a.stopDaemon()
		a.start()
		waitMAC(brPhyMAC(), "node-a's MAC announced at its daemon's start")
		waitUntil(t, "ping node-b → node-a after the announcement", 30*time.Second, func() error {
			return ping(pb.netns, pa.ip())
		})

		// The way an OVS bridge's own port changes MAC (a plain `ip link set address` on
		// a userspace internal port does not stick).
		a.OVS.Vsctl(t, "set", "bridge", "br-phy", "other-config:hwaddr=02:00:00:00:0a:0a")
		waitMAC("02:00:00:00:0a:0a", "node-a's new MAC announced")
		waitUntil(t, "ping node-b → node-a after the MAC change", 30*time.Second, func() error {
			return ping(pb.netns, pa.ip())
		})
	})
}

// ---- restarts in a cluster (issues 3 + 4) ------------------------------------------------

// pingSeqs is a continuous ping (one echo request every interval) from a pod; stop it to
// learn which sequence numbers were answered.
type pingSeqs struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

var icmpSeqRe = regexp.MustCompile(`icmp_seq=(\d+)`)

// startPings starts `ping -i interval` from netns to dst (root may go below 0.2 s).
func startPings(t *testing.T, netnsPath string, dst net.IP, interval string) *pingSeqs {
	t.Helper()
	p := &pingSeqs{out: &bytes.Buffer{}}
	// -D: each answer carries its arrival time, so a lost request can be placed in time
	// (sentAround) against the daemons' logs.
	p.cmd = exec.Command("ip", "netns", "exec", filepath.Base(netnsPath), "ping", "-n", "-D", "-i", interval, "-W", "2", dst.String())
	p.cmd.Stdout = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	return p
}

// stop ends the ping (SIGINT, so it flushes its output) and returns how many requests up
// to the last answered one were sent and how many of them went unanswered, with the
// unanswered sequence numbers. Requests after the last answer (in flight at the stop)
// are not counted.
func (p *pingSeqs) stop(t *testing.T) (sent, lost int, missing []int) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	_ = p.cmd.Wait()
	got := map[int]bool{}
	maxSeq := 0
	for _, m := range icmpSeqRe.FindAllStringSubmatch(p.out.String(), -1) {
		s, _ := strconv.Atoi(m[1])
		got[s] = true
		maxSeq = max(maxSeq, s)
	}
	for s := 1; s <= maxSeq; s++ {
		if !got[s] {
			missing = append(missing, s)
		}
	}
	return maxSeq, len(missing), missing
}

var pingAnswerRe = regexp.MustCompile(`^\[(\d+\.\d+)\].*icmp_seq=(\d+)`)

// sentAround places the unanswered request seq in time: the arrival times (UTC) of the
// last answer before it and the first after it, from ping -D's timestamps.
func (p *pingSeqs) sentAround(seq int) string {
	var before, after string
	for _, l := range strings.Split(p.out.String(), "\n") {
		m := pingAnswerRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s, _ := strconv.Atoi(m[2])
		f, _ := strconv.ParseFloat(m[1], 64)
		at := time.Unix(0, int64(f*1e9)).UTC().Format("15:04:05.000")
		switch {
		case s < seq:
			before = fmt.Sprintf("seq %d answered at %s", s, at)
		case s > seq && after == "":
			after = fmt.Sprintf("seq %d answered at %s", s, at)
		}
	}
	return fmt.Sprintf("request %d was sent between (%s) and (%s)", seq, before, after)
}

// flowGenerations returns the generations (cookie bits 55..40) found on cn's bridge.
func (cn *clusterNode) flowGenerations(t *testing.T) map[uint16]int {
	t.Helper()
	gens := map[uint16]int{}
	for _, l := range cn.flowSet(t) {
		gens[cookieGeneration(t, l)]++
	}
	return gens
}

// TestMultiNodeRestarts: on a three-node cluster, node-a's daemon is killed with SIGKILL
// while a pod on node-a pings a pod on node-b every 10 ms; no echo request may go
// unanswered while the daemon is down nor across its restart (the restarted daemon's first
// flow bundle already holds the tunnel port's and the peers' flows, so deleting the
// earlier generation in the same commit leaves no gap). After the restart node-a's table
// holds only the new generation, with both peers' flows. Then node-a's tunnel port is
// deleted from OVSDB (its ofport number taken by another port) and ovsdb-server is
// restarted: the daemon re-creates the tunnel port, rebuilds the pipeline and peer flows
// for the new ofport, and cross-node traffic works again without a daemon restart.
// ofsdnctl peers and the ofsdn_peers gauge list node-a's two peers, and ofsdnctl flows
// pairs every flow on the switch (MAC matches included) with a desired flow.
func TestMultiNodeRestarts(t *testing.T) {
	alone(t)
	_, a, b, c := startCluster(t, 10)
	pa, pb, pc := a.addPod("rs-a"), b.addPod("rs-b"), c.addPod("rs-c")
	for _, dst := range []*testPod{pb, pc} {
		waitUntil(t, "ping node-a → "+dst.name, 30*time.Second, func() error { return ping(pa.netns, dst.ip()) })
	}

	t.Run("daemon killed and restarted: cross-node pings never stop", func(t *testing.T) {
		gen1 := a.generation(t)
		pings := startPings(t, pa.netns, pb.ip(), "0.01")
		time.Sleep(500 * time.Millisecond)
		a.stopDaemon() // SIGKILL
		time.Sleep(time.Second)
		a.start() // returns once CNI STATUS passes: the node, overlay and peers are in place
		time.Sleep(time.Second)
		sent, lost, missing := pings.stop(t)
		t.Logf("node-a daemon SIGKILL + restart: %d echo requests every 10 ms to node-b's pod, %d unanswered %v", sent, lost, missing)
		if sent < 100 {
			t.Fatalf("only %d echo requests answered or lost: the ping did not run", sent)
		}
		if lost > 0 {
			t.Errorf("%d of %d echo requests node-a → node-b lost across node-a's daemon restart (seq %v)", lost, sent, missing)
		}
		gen2 := a.generation(t)
		if gen2 == gen1 {
			t.Fatalf("generation still %d after the restart", gen1)
		}
		if gens := a.flowGenerations(t); len(gens) != 1 || gens[gen2] == 0 {
			t.Errorf("flow generations on node-a after the restart %v, want only %d", gens, gen2)
		}
		for _, p := range []*clusterNode{b, c} {
			fs := a.peerFlows(p)
			if len(fs) != 3 {
				t.Errorf("node-a holds %d flows of peer %s after the restart, want 3:\n%s", len(fs), p.name, strings.Join(fs, "\n"))
			}
			for _, l := range fs {
				if g := cookieGeneration(t, l); g != gen2 {
					t.Errorf("peer %s flow of generation %d, want %d: %s", p.name, g, gen2, l)
				}
			}
		}
		if err := ping(pa.netns, pc.ip()); err != nil {
			t.Errorf("node-a → node-c after the restart: %v", err)
		}
	})

	t.Run("ovsdb-server restarted after the tunnel port was lost: port and flows rebuilt", func(t *testing.T) {
		pid := a.Daemon.Process.Pid
		old := strings.TrimSpace(a.OVS.Vsctl(t, "get", "Interface", "vxlan0", "ofport"))
		// The port goes and another port takes its ofport number, so the re-created
		// tunnel gets a new one and every flow naming it must be rebuilt.
		a.OVS.Vsctl(t, "del-port", "br-int", "vxlan0", "--", "add-port", "br-int", "steal0",
			"--", "set", "Interface", "steal0", "type=internal", "ofport_request="+old)
		if err := pingOnce(pa.netns, pb.ip()); err == nil {
			t.Fatal("node-a still reaches node-b without its tunnel port")
		}
		a.OVS.KillOVSDB(t)
		a.OVS.StartOVSDB(t)
		waitUntil(t, "node-a → node-b after the ovsdb-server restart", 60*time.Second, func() error {
			return pingOnce(pa.netns, pb.ip())
		})
		now := strings.TrimSpace(a.OVS.Vsctl(t, "get", "Interface", "vxlan0", "ofport"))
		t.Logf("tunnel port vxlan0 re-created: ofport %s, was %s", now, old)
		a.logDaemonLines(t, "re-ensured", "rebuil")
		if now == old {
			t.Errorf("vxlan0 kept ofport %s although steal0 holds it", old)
		}
		waitUntil(t, "node-c → node-a after the ovsdb-server restart", 30*time.Second, func() error {
			return ping(pc.netns, pa.ip())
		})
		if a.Daemon.Process.Pid != pid || a.Daemon.ProcessState != nil {
			t.Error("node-a's daemon was restarted")
		}
	})

	t.Run("ofsdnctl peers, ofsdn_peers gauge and ofsdnctl flows on node-a", func(t *testing.T) {
		var peers []ctl.Peer
		if err := json.Unmarshal(runCtl(t, a.testNode, "peers", "-o", "json"), &peers); err != nil {
			t.Fatal(err)
		}
		want := []ctl.Peer{{Node: b.name, IP: b.ip, PodSubnet: b.subnet}, {Node: c.name, IP: c.ip, PodSubnet: c.subnet}}
		if len(peers) != len(want) {
			t.Fatalf("ofsdnctl peers on node-a: %s, want %s", jsonString(peers), jsonString(want))
		}
		for i, w := range want {
			if peers[i].Node != w.Node || peers[i].IP != w.IP || peers[i].PodSubnet != w.PodSubnet {
				t.Errorf("ofsdnctl peers on node-a [%d] = %s, want %s", i, jsonString(peers[i]), jsonString(w))
			}
		}
		table := string(runCtl(t, a.testNode, "peers"))
		for _, w := range want {
			if !strings.Contains(table, w.Node) || !strings.Contains(table, w.IP) || !strings.Contains(table, w.PodSubnet) {
				t.Errorf("ofsdnctl peers table lacks %s:\n%s", jsonString(w), table)
			}
		}

		fams, _ := scrape(t, netnsHTTP(t, a.OVS.NetnsPath()))
		g, ok := fams[metrics.Peers]
		if !ok || len(g.Metric) != 1 || g.Metric[0].GetGauge().GetValue() != 2 {
			t.Errorf("%s on node-a: %v, want 2", metrics.Peers, g)
		}

		var stages []ctl.Stage
		if err := json.Unmarshal(runCtl(t, a.testNode, "flows", "-o", "json"), &stages); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, st := range stages {
			if len(st.Missing) > 0 {
				t.Errorf("stage %s: desired flows missing on the switch: %v", st.Name, st.Missing)
			}
			for _, f := range st.Flows {
				n++
				if !f.Desired {
					t.Errorf("stage %s: flow not paired with a desired flow: %s", st.Name, f.Flow)
				}
			}
		}
		if want := len(a.flowSet(t)); n != want {
			t.Errorf("ofsdnctl flows lists %d flows, the switch holds %d", n, want)
		}
	})
}
