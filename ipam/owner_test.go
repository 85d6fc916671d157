package ipam

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each lease gets a flow owner id of its own, and keeps it when the daemon reopens the
// pool: a restarted node gives the pod's flows the cookie they had.
func TestOwnerIDsAllocatedAndKeptAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.9.0.0/24", "10.9.0.1")
	ids := map[string]uint32{}
	seen := map[uint32]string{}
	for _, cid := range []string{"a", "b", "c", "d"} {
		alloc(t, s, cid, "eth0")
		l, ok := s.Get(cid, "eth0")
		if !ok || l.OwnerID == 0 {
			t.Fatalf("lease of %s: %+v, want a non-zero owner id", cid, l)
		}
		if other, dup := seen[l.OwnerID]; dup {
			t.Fatalf("leases %s and %s share owner id %d", other, cid, l.OwnerID)
		}
		ids[cid], seen[l.OwnerID] = l.OwnerID, cid
	}
	if err := s.Release("b", "eth0"); err != nil {
		t.Fatal(err)
	}
	// A freed id is not handed out again at once (round robin).
	alloc(t, s, "e", "eth0")
	if l, _ := s.Get("e", "eth0"); l.OwnerID == ids["b"] || seen[l.OwnerID] != "" {
		t.Fatalf("new lease got owner id %d, held or freed just now (%v)", l.OwnerID, ids)
	}
	e, _ := s.Get("e", "eth0")
	ids["e"] = e.OwnerID
	delete(ids, "b")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, dir, "10.9.0.0/24", "10.9.0.1")
	for cid, id := range ids {
		if l, ok := s2.Get(cid, "eth0"); !ok || l.OwnerID != id {
			t.Errorf("after reopen, lease of %s has owner id %d, want %d", cid, l.OwnerID, id)
		}
	}
	alloc(t, s2, "f", "eth0")
	if l, _ := s2.Get("f", "eth0"); l.OwnerID == 0 || seen[l.OwnerID] == "a" || seen[l.OwnerID] == "c" || seen[l.OwnerID] == "d" || l.OwnerID == ids["e"] {
		t.Fatalf("after reopen, a new lease got owner id %d, which a live lease holds (%v)", l.OwnerID, ids)
	}
}

// A lease file from before owner ids were recorded: each lease's owner id is the one its
// flows carried then (its IPv4 address), a hand-edited duplicate gets a fresh one, and a
// new lease never takes an id a legacy lease holds.
func TestOwnerIDsOfOlderLeaseFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ipam"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"version":1,"subnet":"10.9.0.0/24","leases":{` +
		`"10.9.0.2":{"containerID":"old","ifName":"eth0","allocated":"2025-01-02T03:04:05Z"},` +
		`"10.9.0.3":{"containerID":"dup1","ifName":"eth0","ownerID":5,"allocated":"2025-01-02T03:04:05Z"},` +
		`"10.9.0.4":{"containerID":"dup2","ifName":"eth0","ownerID":5,"allocated":"2025-01-02T03:04:05Z"}}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "ipam", stateFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, "10.9.0.0/24", "10.9.0.1")
	l, _ := s.Get("old", "eth0")
	if want := ipToU32(net.ParseIP("10.9.0.2").To4()); l.OwnerID != want {
		t.Errorf("legacy lease owner id %#x, want its address %#x", l.OwnerID, want)
	}
	d1, _ := s.Get("dup1", "eth0")
	d2, _ := s.Get("dup2", "eth0")
	if d1.OwnerID == d2.OwnerID || d1.OwnerID == 0 || d2.OwnerID == 0 || (d1.OwnerID != 5 && d2.OwnerID != 5) {
		t.Errorf("duplicate owner ids in the file: got %d and %d, want 5 kept once and a fresh id", d1.OwnerID, d2.OwnerID)
	}
	alloc(t, s, "new", "eth0")
	n, _ := s.Get("new", "eth0")
	for _, other := range []uint32{l.OwnerID, d1.OwnerID, d2.OwnerID} {
		if n.OwnerID == other || n.OwnerID == 0 {
			t.Fatalf("new lease got owner id %d, held by a lease from the file", n.OwnerID)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"10.9.0.2":{"containerID":"old","ifName":"eth0","allocated":"2025-01-02T03:04:05Z"}`) {
		t.Errorf("the legacy lease's entry changed on rewrite (its owner id is its address, written as before):\n%s", data)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, dir, "10.9.0.0/24", "10.9.0.1")
	for _, want := range []Lease{l, d1, d2, n} {
		if got, _ := s2.Get(want.ContainerID, "eth0"); got.OwnerID != want.OwnerID {
			t.Errorf("after reopen, %s has owner id %d, want %d", want.ContainerID, got.OwnerID, want.OwnerID)
		}
	}
}

// Restore keeps the owner id it is given when no lease holds it, and allocates one when
// it is taken or absent.
func TestRestoreOwnerID(t *testing.T) {
	s := openT(t, t.TempDir(), "10.9.0.0/24", "10.9.0.1")
	alloc(t, s, "a", "eth0")
	a, _ := s.Get("a", "eth0")
	if err := s.Restore(Lease{IPs: []net.IP{net.ParseIP("10.9.0.50")}, ContainerID: "r1", IfName: "eth0", OwnerID: 4242}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(Lease{IPs: []net.IP{net.ParseIP("10.9.0.51")}, ContainerID: "r2", IfName: "eth0", OwnerID: a.OwnerID}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(Lease{IPs: []net.IP{net.ParseIP("10.9.0.52")}, ContainerID: "r3", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	r1, _ := s.Get("r1", "eth0")
	r2, _ := s.Get("r2", "eth0")
	r3, _ := s.Get("r3", "eth0")
	if r1.OwnerID != 4242 {
		t.Errorf("restored lease with a free owner id got %d, want 4242", r1.OwnerID)
	}
	if r2.OwnerID == a.OwnerID || r2.OwnerID == 0 || r3.OwnerID == 0 || r3.OwnerID == r2.OwnerID || r3.OwnerID == a.OwnerID || r3.OwnerID == 4242 {
		t.Errorf("restored leases got owner ids %d and %d beside %d and 4242: want fresh, distinct ids", r2.OwnerID, r3.OwnerID, a.OwnerID)
	}
}
