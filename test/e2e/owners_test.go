package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestOwnerIDsKeptAcrossRestart: each pod's flows carry the owner id its lease was given,
// not its address; the lease file and the pod's OVS interface record the id; after the
// daemon is killed and started again every pod's flows come back under the same id and
// the new generation, nothing of the earlier generation is left, a new pod gets an id no
// live pod holds, and a DEL removes exactly the pod's flows.
func TestOwnerIDsKeptAcrossRestart(t *testing.T) {
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
