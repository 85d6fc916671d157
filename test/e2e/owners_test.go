package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/flows"
)

// TestOwnerIDsKeptAcrossRestart: each pod's flows carry the owner id its lease was given,
// not its address; the lease file and the pod's OVS interface record the id; after the
// daemon is killed and started again every pod's flows come back under the same id and
// the new generation, nothing of the earlier generation is left, a new pod gets an id no
// live pod holds, and a DEL removes exactly the pod's flows.
func TestOwnerIDsKeptAcrossRestart(t *testing.T) {
	serial(t)
	n := startNode(t, "10.171.0.0/24")
	p1, p2, p3 := n.addPod("o1"), n.addPod("o2"), n.addPod("o3")
	if err := n.delPod(p2); err != nil {
		t.Fatal(err)
	}
	n.assertGone(t, p2)
	live := []*testPod{p1, p3}
	ids := map[string]uint32{}
	for _, p := range live {
		n.podCookie(t, p)
		ip := p.ip().To4()
		if addr := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3]); p.ownerID == addr {
			t.Errorf("%s: owner id %#x is its address; want one allocated with its lease", p.name, p.ownerID)
		}
		for other, id := range ids {
			if id == p.ownerID {
				t.Fatalf("%s and %s share owner id %d", p.name, other, id)
			}
		}
		ids[p.name] = p.ownerID
	}
	for _, p := range live {
		if got := n.leaseFile(t)[p.containerID].OwnerID; got != p.ownerID {
			t.Errorf("%s: lease file records owner id %d, its interface %d", p.name, got, p.ownerID)
		}
	}
	check := func(when string, gen uint16) {
		t.Helper()
		for _, p := range live {
			cookie, mask := n.podCookie(t, p)
			lines := flowLines(n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask)))
			if len(lines) != podFlowCount {
				t.Errorf("%s: %s has %d flows under owner id %d, want %d:\n%v", when, p.name, len(lines), p.ownerID, podFlowCount, lines)
			}
			for _, l := range lines {
				if g := cookieGeneration(t, l); g != gen {
					t.Errorf("%s: %s's flow of generation %d, want %d: %s", when, p.name, g, gen, l)
				}
			}
		}
		for _, l := range n.podFlowLines(t) {
			if g := cookieGeneration(t, l); g != gen {
				t.Errorf("%s: a pod flow of generation %d is left (want only %d): %s", when, g, gen, l)
			}
		}
		if got, want := len(n.podFlowLines(t)), podFlowCount*len(live); got != want {
			t.Errorf("%s: %d pod flows on the switch, want %d", when, got, want)
		}
		if err := pingOnce(p1.netns, p3.ip()); err != nil {
			t.Errorf("%s: ping %s -> %s: %v", when, p1.name, p3.name, err)
		}
	}
	gen1 := n.generation(t)
	check("before the restart", gen1)

	n.stopDaemon() // SIGKILL
	n.startDaemon()
	n.waitStatus(30 * time.Second)
	gen2 := n.generation(t)
	if gen2 == gen1 {
		t.Fatalf("generation %d did not change across the restart", gen1)
	}
	waitFor(t, 30*time.Second, "the earlier generation's flows swept", func() bool {
		for _, l := range n.podFlowLines(t) {
			if cookieGeneration(t, l) != gen2 {
				return false
			}
		}
		return true
	})
	check("after the restart", gen2)

	p4 := n.addPod("o4")
	for name, id := range ids {
		if p4.ownerID == id {
			t.Errorf("new pod got owner id %d, which %s holds", id, name)
		}
	}
	live = append(live, p4)
	check("after a new pod", gen2)

	for _, p := range live {
		if err := n.delPod(p); err != nil {
			t.Fatal(err)
		}
		n.assertGone(t, p)
	}
	if lines := n.podFlowLines(t); len(lines) != 0 {
		t.Errorf("pod flows left after every DEL: %v", lines)
	}
}

// peerFlowsByID returns the flows of owner kind peer on n's bridge, by owner id.
func (n *testNode) peerFlowsByID(t *testing.T) map[uint32][]string {
	t.Helper()
	out := map[uint32][]string{}
	for _, l := range flowLines(n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt())) {
		m := cookieRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[1], 0, 64)
		if err != nil {
			t.Fatalf("cookie in %q: %v", l, err)
		}
		if c := flows.Cookie(v); c.Owner() == flows.OwnerPeer {
			out[c.OwnerID()] = append(out[c.OwnerID()], l)
		}
	}
	return out
}

// TestPeerOwnerIDsKeptAcrossRestart: a node started without a record of peer owner ids
// (as one upgraded from a build that derived them) gives each peer its pod subnet's
// address, the id those builds' flows carry, and records it in DATA_DIR/peer-ids.json; a
// peer removed from the topology loses its flows and its entry, a peer added gets a
// round-robin id no peer holds; after the daemon is killed and started again every peer's
// flows come back under the id it had and the new generation, and no peer flow of another
// id or of the earlier generation is left. The peers are topology entries only (no daemon
// behind them): their flows do not depend on it.
func TestPeerOwnerIDsKeptAcrossRestart(t *testing.T) {
	serial(t)
	ul := filepath.Base(newNetns(t, "ofsdn-ul"))
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")
	a := startClusterNode(t, ul, "node-a", "172.30.0.61", "10.244.61.0/24", 1)
	peer := func(name string, i int) *clusterNode {
		return &clusterNode{name: name, ip: fmt.Sprintf("172.30.0.%d", 61+i), subnet: fmt.Sprintf("10.244.%d.0/24", 61+i)}
	}
	b, c, d := peer("node-b", 1), peer("node-c", 2), peer("node-d", 3)
	writeTopology(t, a.topo, topologyYAML(a, []*clusterNode{b, c}))
	a.start()

	// check: the record names exactly want's peers with want's ids, and the switch holds
	// 3 flows of generation gen under each of them and no other peer flow.
	check := func(when string, want map[string]uint32, gen uint16) error {
		rec := a.peerIDRecord(t)
		if fmt.Sprint(rec) != fmt.Sprint(want) {
			return fmt.Errorf("%s: %s records %v, want %v", when, controller.PeerIDsFile, rec, want)
		}
		byID := a.peerFlowsByID(t)
		ids := map[uint32]bool{}
		for name, id := range want {
			ids[id] = true
			if len(byID[id]) != 3 {
				return fmt.Errorf("%s: %s has %d flows under owner id %#x, want 3:\n%s", when, name, len(byID[id]), id, strings.Join(byID[id], "\n"))
			}
		}
		for id, ls := range byID {
			if !ids[id] {
				return fmt.Errorf("%s: peer flows of owner id %#x, which no peer holds:\n%s", when, id, strings.Join(ls, "\n"))
			}
			for _, l := range ls {
				if g := cookieGeneration(t, l); g != gen {
					return fmt.Errorf("%s: peer flow of generation %d, want %d: %s", when, g, gen, l)
				}
			}
		}
		return nil
	}
	legacy := func(p *clusterNode) uint32 {
		_, sn, _ := net.ParseCIDR(p.subnet)
		return flows.LegacyPeerID(flows.Peer{PodSubnet: sn})
	}
	gen1 := a.generation(t)
	want := map[string]uint32{b.name: legacy(b), c.name: legacy(c)}
	if err := check("first start without a record", want, gen1); err != nil {
		t.Fatal(err)
	}

	writeTopology(t, a.topo, topologyYAML(a, []*clusterNode{b, d}))
	waitUntil(t, "node-c removed and node-d added", 30*time.Second, func() error {
		rec := a.peerIDRecord(t)
		if _, ok := rec[c.name]; ok || rec[d.name] == 0 {
			return fmt.Errorf("record %v", rec)
		}
		return nil
	})
	delete(want, c.name)
	want[d.name] = a.peerIDRecord(t)[d.name]
	if id := want[d.name]; id == legacy(d) || id == legacy(b) || id == legacy(c) {
		t.Errorf("node-d got owner id %#x: want a round-robin id, not a subnet address", id)
	}
	waitUntil(t, "node-d's flows under its recorded id, node-c's gone", 30*time.Second, func() error {
		return check("after the topology change", want, gen1)
	})

	a.stopDaemon() // SIGKILL
	a.start()
	gen2 := a.generation(t)
	if gen2 == gen1 {
		t.Fatalf("generation %d did not change across the restart", gen1)
	}
	waitUntil(t, "every peer's flows back under its id, the earlier generation swept", 30*time.Second, func() error {
		return check("after the restart", want, gen2)
	})
	var ps []ctl.Peer
	if err := json.Unmarshal(runCtl(t, a.testNode, "peers", "-o", "json"), &ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.OwnerID != want[p.Node] {
			t.Errorf("ofsdnctl peers: %s has ownerID %d, want %d", p.Node, p.OwnerID, want[p.Node])
		}
	}
	if len(ps) != len(want) {
		t.Errorf("ofsdnctl peers lists %d peers, want %d: %+v", len(ps), len(want), ps)
	}
}
