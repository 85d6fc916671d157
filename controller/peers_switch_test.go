package controller

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/switchstate"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// switchPeerFlows returns, per owner id, the flows of owner kind peer on br-int, and the
// generations those flows carry.
func switchPeerFlows(t *testing.T, ovs *sandbox.OVS) (map[uint32][]string, map[uint16]bool) {
	t.Helper()
	byID, gens := map[uint32][]string{}, map[uint16]bool{}
	for _, l := range ofDumpLines(t, ovs) {
		v, err := strconv.ParseUint(reCookie.FindStringSubmatch(l)[1], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		if c := flows.Cookie(v); c.Owner() == flows.OwnerPeer {
			byID[c.OwnerID()] = append(byID[c.OwnerID()], l)
			gens[c.Generation()] = true
		}
	}
	return byID, gens
}

// TestOverlayPeerIDsOnSwitch, against a sandbox switch: a node without a record gives its
// initial peers their subnet addresses as owner ids (the ids an older build's flows
// carry); a peer added later gets a round-robin id, recorded; a subnet change keeps the
// peer's id; a deleted peer's flows and record entry go; a peer whose id cannot be
// recorded gets no flows; and after a restart (new generation, the earlier one swept in
// the first sync) every peer's flows carry the id they had and no peer flow of another id
// or generation is left.
func TestOverlayPeerIDsOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, false)
	dir := t.TempDir()
	_, cluster, _ := net.ParseCIDR("10.244.0.0/16")
	overlayNode := func(n *Node) {
		n.opts.DataDir = dir
		n.cfg.ClusterCIDR, n.cfg.TunnelOFPort, n.cfg.NodeIP = cluster, 1, net.ParseIP("172.16.0.1").To4()
	}
	overlayNode(n)
	b, c := testPeer("node-b", "10.244.2.0/24", "172.16.0.2"), testPeer("node-c", "10.244.3.0/24", "172.16.0.3")
	o := newOverlay(n, OverlayOptions{})
	n.overlay = o
	if err := o.load([]flows.Peer{b, c}); err != nil {
		t.Fatal(err)
	}
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	record := func() map[string]uint32 {
		t.Helper()
		return mustReadPeerIDs(t, filepath.Join(dir, PeerIDsFile)).byKey
	}
	// check: the switch holds exactly 3 flows per recorded peer, under its recorded id.
	check := func(when string, want map[string]uint32, gen uint16) {
		t.Helper()
		if got := record(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: record %v, want %v", when, got, want)
		}
		byID, gens := switchPeerFlows(t, ovs)
		ids := map[uint32]bool{}
		for name, id := range want {
			ids[id] = true
			if len(byID[id]) != 3 {
				t.Errorf("%s: %s has %d flows under owner id %#x, want 3: %v", when, name, len(byID[id]), id, byID[id])
			}
		}
		for id, ls := range byID {
			if !ids[id] {
				t.Errorf("%s: peer flows of owner id %#x, which no recorded peer holds: %v", when, id, ls)
			}
		}
		if len(gens) > 1 || (len(gens) == 1 && !gens[gen]) {
			t.Errorf("%s: peer flows of generations %v, want only %d", when, gens, gen)
		}
	}
	want := map[string]uint32{"node-b": 0x0af40200, "node-c": 0x0af40300}
	check("first start without a record", want, 3)

	d := testPeer("node-d", "10.244.4.0/24", "172.16.0.4")
	if err := o.AddPeer(ctx, d); err != nil {
		t.Fatal(err)
	}
	want["node-d"] = record()["node-d"]
	if id := want["node-d"]; id == 0 || id == flows.LegacyPeerID(d) || id == want["node-b"] || id == want["node-c"] {
		t.Errorf("peer added at run time got id %#x: want a round-robin id no peer holds", id)
	}
	check("node-d added", want, 3)

	moved := testPeer("node-c", "10.244.30.0/24", "172.16.0.33")
	if err := o.UpdatePeer(ctx, c, moved); err != nil {
		t.Fatal(err)
	}
	check("node-c moved to a new subnet", want, 3)
	if byID, _ := switchPeerFlows(t, ovs); !strings.Contains(strings.Join(byID[want["node-c"]], "\n"), "nw_dst=10.244.30.0/24") {
		t.Errorf("node-c's flows after the subnet change: %v", byID[want["node-c"]])
	}

	// Overlapping pod subnets are refused, against the peers' current subnets: inside
	// node-c's new one, or covering node-d's; node-c's old one is free again.
	for _, bad := range []struct{ subnet, holder string }{{"10.244.30.128/25", "node-c"}, {"10.244.0.0/16", ""}} {
		err := o.AddPeer(ctx, testPeer("node-x", bad.subnet, "172.16.0.9"))
		if err == nil || !strings.Contains(err.Error(), "overlaps peer "+bad.holder) {
			t.Errorf("AddPeer with pod subnet %s: %v, want an error naming the peer it overlaps %s", bad.subnet, err, bad.holder)
		}
	}
	y := testPeer("node-y", "10.244.3.0/24", "172.16.0.8")
	if err := o.AddPeer(ctx, y); err != nil {
		t.Errorf("AddPeer with node-c's former pod subnet: %v", err)
	} else if err := o.DeletePeer(ctx, y); err != nil {
		t.Fatal(err)
	}
	check("overlaps refused, a freed subnet taken and given back", want, 3)

	if err := o.DeletePeer(ctx, b); err != nil {
		t.Fatal(err)
	}
	delete(want, "node-b")
	check("node-b deleted", want, 3)

	// The record cannot be written (its journal's path is a non-empty directory): the new
	// peer gets no flows, and the error names the file.
	path := filepath.Join(dir, PeerIDsJournal)
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	e := testPeer("node-e", "10.244.5.0/24", "172.16.0.5")
	if err := o.AddPeer(ctx, e); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("AddPeer with an unwritable record: %v, want an error naming %s", err, path)
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	check("a peer whose id could not be recorded", want, 3)

	// Restart: a new node of generation 4 on the same switch and data directory; its first
	// sync adds its flows and deletes generation 3's in one bundle, as onConnect does.
	sw2, err := openflow.Dial(ctx, ovs.MgmtSocket("br-int"), openflow.Options{})
	if err != nil {
		t.Fatalf("openflow.Dial: %v", err)
	}
	t.Cleanup(func() { sw2.Close() })
	n2 := &Node{log: n.log, runCtx: ctx, store: flowStore{switchstate.New()}, cfg: n.cfg}
	n2.cfg.Generation = 4
	overlayNode(n2)
	o2 := newOverlay(n2, OverlayOptions{})
	n2.overlay = o2
	if err := o2.load([]flows.Peer{moved, d}); err != nil {
		t.Fatal(err)
	}
	cookie, mask := flows.GenerationCookie(3)
	if err := n2.store.Sync(ctx, sw2, nil, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(cookie, mask), Name: "delete generation 3"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range o2.Peers() {
		if p.OwnerID != want[p.Name] {
			t.Errorf("after the restart %s has owner id %#x, want %#x", p.Name, p.OwnerID, want[p.Name])
		}
	}
	check("after a restart", want, 4)
}
