package controller

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/switchstate"
)

// Unit tests of the record of peer owner ids (PeerIDsFile); no switch, no root.

func mustReadPeerIDs(t *testing.T, path string) *peerIDs {
	t.Helper()
	r, err := readPeerIDs(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPeerIDsAllocatedRecordedAndKept: each peer gets an id of its own, recorded in the
// file before assign returns; a reopened record gives every peer its id back; a freed id
// is gone from the file and is not handed out again while another peer holds it, nor at
// once (round robin, the cursor survives a reopen).
func TestPeerIDsAllocatedRecordedAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), PeerIDsFile)
	r := mustReadPeerIDs(t, path)
	if r.found {
		t.Fatal("a missing record reads as found")
	}
	ids := map[string]uint32{}
	seen := map[uint32]string{}
	for _, name := range []string{"node-b", "node-c", "node-d"} {
		id, err := r.assign(name)
		if err != nil {
			t.Fatal(err)
		}
		if id == 0 {
			t.Fatalf("%s got owner id 0", name)
		}
		if other, dup := seen[id]; dup {
			t.Fatalf("%s and %s share owner id %d", other, name, id)
		}
		if again, err := r.assign(name); err != nil || again != id {
			t.Fatalf("assign(%s) again: %d, %v; want its id %d", name, again, err, id)
		}
		// Recorded before assign returned: a reader of the file sees it now.
		if got, ok := mustReadPeerIDs(t, path).get(name); !ok || got != id {
			t.Fatalf("after assign(%s) = %d the file records %d (%v)", name, id, got, ok)
		}
		ids[name], seen[id] = id, name
	}
	if err := r.free("node-c"); err != nil {
		t.Fatal(err)
	}
	if _, ok := mustReadPeerIDs(t, path).get("node-c"); ok {
		t.Error("freed id of node-c still in the file")
	}
	delete(ids, "node-c")
	// Reopened: every peer gets its id back, and new ones are none of the held or the
	// freed id.
	r2 := mustReadPeerIDs(t, path)
	if !r2.found {
		t.Error("the written record reads as missing")
	}
	for name, id := range ids {
		if got, ok := r2.get(name); !ok || got != id {
			t.Errorf("after reopen %s has id %d (%v), want %d", name, got, ok, id)
		}
	}
	e, err := r2.assign("node-e")
	if err != nil {
		t.Fatal(err)
	}
	if seen[e] != "" {
		t.Errorf("new peer got id %d, which %s holds or held until just now (%v)", e, seen[e], seen)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("files left beside the record: %v", ents)
	}
}

// TestPeerIDsRoundRobinSkipsHeld: with the cursor just before an id a peer holds (a
// legacy id in the round robin's way), the next id skips it; a freed id comes back only
// after the cursor has passed the rest of the space (here: wrapped past 2^32-1).
func TestPeerIDsRoundRobinSkipsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), PeerIDsFile)
	r := mustReadPeerIDs(t, path)
	if id, _ := r.reserve("legacy", 5); id != 5 {
		t.Fatalf("reserve with a free wanted id gave %d, want 5", id)
	}
	r.cursor = 4
	if id, err := r.assign("next"); err != nil || id != 6 {
		t.Fatalf("assign after cursor 4 with 5 held: %d, %v; want 6", id, err)
	}
	if id, _ := r.reserve("taken", 5); id == 5 || id == 6 || id == 0 {
		t.Errorf("reserve with a held wanted id gave %d, want a fresh one", id)
	}
	if err := r.free("legacy"); err != nil {
		t.Fatal(err)
	}
	if id, err := r.assign("after-free"); err != nil || id == 5 {
		t.Errorf("assign right after freeing 5: %d, %v; want another id", id, err)
	}
	r.cursor = 0xffffffff
	if id, err := r.assign("wrapped"); err != nil || id != 1 {
		t.Errorf("assign at the end of the space: %d, %v; want 1 (0 is never an id)", id, err)
	}
}

// TestPeerIDsCorruptFile: a record that is not JSON of this layout, or holds id 0, one id
// twice or an empty name, is an error that names the file.
func TestPeerIDsCorruptFile(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":      `{"version":1,"peers":`,
		"other version": `{"version":2,"peers":{}}`,
		"id 0":          `{"version":1,"peers":{"node-b":0}}`,
		"duplicate id":  `{"version":1,"peers":{"node-b":7,"node-c":7}}`,
		"empty name":    `{"version":1,"peers":{"":7}}`,
	} {
		path := filepath.Join(t.TempDir(), PeerIDsFile)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readPeerIDs(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: readPeerIDs error %v, want one naming %s", name, err, path)
		}
	}
}

// overlayTestNode is an overlay node without a switch (loadOverlay touches only the record
// and the flow store): pod subnet 10.244.1.0/24, tunnel ofport 1, data directory dir.
func overlayTestNode(dir string) *Node {
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	_, cluster, _ := net.ParseCIDR("10.244.0.0/16")
	return &Node{opts: NodeOptions{DataDir: dir}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		store: flowStore{switchstate.New()},
		cfg: flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 1, 1},
			GatewayIP: net.ParseIP("10.244.1.1").To4(), PodSubnet: subnet, ClusterCIDR: cluster,
			TunnelOFPort: 1, NodeIP: net.ParseIP("172.16.0.1").To4(), Generation: 1}}
}

func testPeer(name, subnet, ip string) flows.Peer {
	_, sn, _ := net.ParseCIDR(subnet)
	return flows.Peer{Name: name, NodeIP: net.ParseIP(ip).To4(), PodSubnet: sn}
}

// TestOverlayLoadSeedsLegacyIDs: a node without the record (an upgrade) gives each
// initial peer its IPv4 pod subnet's address, the id its flows carry from the earlier
// build, and records it; at the next start a peer no longer listed is freed, the others
// keep their ids, and a new one gets a round-robin id none of them holds; an invalid peer
// takes no id.
func TestOverlayLoadSeedsLegacyIDs(t *testing.T) {
	dir := t.TempDir()
	b, c := testPeer("node-b", "10.244.2.0/24", "172.16.0.2"), testPeer("node-c", "10.244.3.0/24", "172.16.0.3")
	bad := testPeer("node-x", "10.99.0.0/24", "172.16.0.9") // outside the cluster CIDR
	o := newOverlay(overlayTestNode(dir), OverlayOptions{})
	if err := o.load([]flows.Peer{b, c, bad}); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, p := range o.Peers() {
		got[p.Name] = p.OwnerID
	}
	want := map[string]uint32{"node-b": flows.LegacyPeerID(b), "node-c": flows.LegacyPeerID(c)}
	if len(got) != 2 || got["node-b"] != want["node-b"] || got["node-c"] != want["node-c"] {
		t.Fatalf("peers after the first start %v, want the legacy ids %v", got, want)
	}
	rec := mustReadPeerIDs(t, filepath.Join(dir, PeerIDsFile))
	if len(rec.byKey) != 2 || rec.byKey["node-b"] != want["node-b"] || rec.byKey["node-c"] != want["node-c"] {
		t.Fatalf("record after the first start %v, want %v", rec.byKey, want)
	}
	for _, f := range o.n.store.All() {
		if f.Cookie.Owner() == flows.OwnerPeer && f.Cookie.OwnerID() != want["node-b"] && f.Cookie.OwnerID() != want["node-c"] {
			t.Errorf("flow store holds a peer flow of owner id %#x, not a recorded one: %s", f.Cookie.OwnerID(), f)
		}
	}

	// Restart: node-c is gone, node-d is new.
	d := testPeer("node-d", "10.244.4.0/24", "172.16.0.4")
	o2 := newOverlay(overlayTestNode(dir), OverlayOptions{})
	if err := o2.load([]flows.Peer{b, d}); err != nil {
		t.Fatal(err)
	}
	got = map[string]uint32{}
	for _, p := range o2.Peers() {
		got[p.Name] = p.OwnerID
	}
	if got["node-b"] != want["node-b"] {
		t.Errorf("node-b after the restart has id %#x, want its recorded %#x", got["node-b"], want["node-b"])
	}
	if id := got["node-d"]; id == 0 || id == want["node-b"] || id == flows.LegacyPeerID(d) {
		t.Errorf("new peer node-d got id %#x: want a round-robin id (not its subnet address, not node-b's)", id)
	}
	rec = mustReadPeerIDs(t, filepath.Join(dir, PeerIDsFile))
	if _, ok := rec.get("node-c"); ok || len(rec.byKey) != 2 || rec.byKey["node-d"] != got["node-d"] {
		t.Errorf("record after the restart %v: want node-b and node-d only (%v)", rec.byKey, got)
	}
}

// TestPeerIDsJournal: after the snapshot, each id given or freed is one journal line (the
// snapshot is not rewritten per change: at 5,000 peers that rewrite was half the daemon's
// CPU); a reopened record replays the journal; a torn last line is ignored; once the
// journal outgrows twice the peers plus ownerIDsCompactSlack lines it is folded into a
// snapshot and removed.
func TestPeerIDsJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, PeerIDsFile)
	r := mustReadPeerIDs(t, path)
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	snap, _ := os.ReadFile(path)
	want := map[string]uint32{}
	for i := 0; i < 50; i++ {
		name := "node-" + strconv.Itoa(i)
		id, err := r.assign(name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = id
	}
	for i := 0; i < 50; i += 5 {
		name := "node-" + strconv.Itoa(i)
		if err := r.free(name); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	if now, _ := os.ReadFile(path); string(now) != string(snap) {
		t.Errorf("the snapshot was rewritten by single changes:\n%s", now)
	}
	j, err := os.ReadFile(filepath.Join(dir, PeerIDsJournal))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(j), "\n"); n != 60 {
		t.Errorf("journal has %d lines, want 60 (50 given, 10 freed)", n)
	}
	// A crash mid-append leaves part of a line: it was never acknowledged, and is ignored.
	f, err := os.OpenFile(filepath.Join(dir, PeerIDsJournal), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"seq":61,"peer":"node-torn","id":9`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r2 := mustReadPeerIDs(t, path)
	if len(r2.byKey) != len(want) {
		t.Errorf("reopened record holds %d peers, want %d", len(r2.byKey), len(want))
	}
	for name, id := range want {
		if got, ok := r2.get(name); !ok || got != id {
			t.Errorf("reopened record: %s has id %d (%v), want %d", name, got, ok, id)
		}
	}
	if _, ok := r2.get("node-torn"); ok {
		t.Error("the torn last line was applied")
	}
	if r2.cursor != r.cursor {
		t.Errorf("reopened record's cursor %d, want %d", r2.cursor, r.cursor)
	}

	// Compaction: enough changes fold the journal into a snapshot.
	r3 := mustReadPeerIDs(t, path)
	if err := r3.save(); err != nil { // as Overlay.load does at start
		t.Fatal(err)
	}
	for i := 0; i < ownerIDsCompactSlack+2*len(want)+10; i++ {
		name := "churn-" + strconv.Itoa(i)
		if _, err := r3.assign(name); err != nil {
			t.Fatal(err)
		}
		if err := r3.free(name); err != nil {
			t.Fatal(err)
		}
	}
	if j, err := os.ReadFile(filepath.Join(dir, PeerIDsJournal)); err == nil && strings.Count(string(j), "\n") > 2*len(want)+ownerIDsCompactSlack {
		t.Errorf("journal has %d lines after %d changes: never folded", strings.Count(string(j), "\n"), 2*(ownerIDsCompactSlack+2*len(want)+10))
	}
	r4 := mustReadPeerIDs(t, path)
	if len(r4.byKey) != len(want) || r4.cursor != r3.cursor {
		t.Errorf("after compaction: %d peers, cursor %d; want %d, %d", len(r4.byKey), r4.cursor, len(want), r3.cursor)
	}
}

// TestPeerIDsJournalKeptAfterSnapshot: a crash after a new snapshot is written and before
// the journal is removed leaves lines the snapshot already holds; they are skipped by
// their sequence numbers, not applied again (here id 5 went from node-a to node-b: replayed,
// node-a's line would clash with node-b).
func TestPeerIDsJournalKeptAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, PeerIDsFile)
	journal := `{"seq":1,"peer":"node-a","id":5,"lastAllocated":5}` + "\n" +
		`{"seq":2,"peer":"node-a","free":true}` + "\n" +
		`{"seq":3,"peer":"node-b","id":5,"lastAllocated":5}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, PeerIDsJournal), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"lastAllocated":5,"peers":{"node-b":5,"node-c":7},"journalSeq":3}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustReadPeerIDs(t, path)
	if id, ok := r.get("node-b"); !ok || id != 5 {
		t.Errorf("node-b: %d %v, want 5", id, ok)
	}
	if _, ok := r.get("node-a"); ok || len(r.byKey) != 2 {
		t.Errorf("record %v, want node-b and node-c only", r.byKey)
	}
	// A line after the snapshot is applied.
	f, _ := os.OpenFile(filepath.Join(dir, PeerIDsJournal), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":4,"peer":"node-c","free":true}` + "\n")
	f.Close()
	if r := mustReadPeerIDs(t, path); len(r.byKey) != 1 {
		t.Errorf("after a later free: %v, want node-b only", r.byKey)
	}
}
