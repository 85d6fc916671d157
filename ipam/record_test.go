package ipam

// The attachment record in a lease (issue 20, item 1): netns, host veth and ofport, kept
// on the node's disk so a lost OVS database cannot take what the node needs to re-create
// the attachment's port.

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRecordPersisted: ReserveLease records the attachment, Record replaces it, both
// survive a reopen; a file written before the record existed (no netns, hostVeth, ofport
// keys, the version 1 layout unchanged) opens with empty records and gets one; leases
// without a record write none of the keys.
func TestRecordPersisted(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	ip, durable, err := first3(s.ReserveLease(Lease{ContainerID: "a", IfName: "eth0", Owner: "ns/a", Network: "net-a",
		Netns: "/var/run/netns/a", HostVeth: "ofsaaaa", OFPort: 32770}))
	if err != nil || durable() != nil {
		t.Fatalf("ReserveLease: %v, %v", err, durable())
	}
	alloc(t, s, "old", "eth0")
	s.Close()

	s = openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	l, ok := s.Get("a", "eth0")
	if !ok || !one(l.IPs).Equal(ip) || l.Netns != "/var/run/netns/a" || l.HostVeth != "ofsaaaa" || l.OFPort != 32770 || l.Network != "net-a" || l.Owner != "ns/a" {
		t.Errorf("lease of a after reopen: %+v", l)
	}
	old, _ := s.Get("old", "eth0")
	if old.Netns != "" || old.HostVeth != "" || old.OFPort != 0 {
		t.Errorf("lease without a record after reopen: %+v", old)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if strings.Count(string(b), `"ofport"`) != 1 || strings.Count(string(b), `"hostVeth"`) != 1 || strings.Count(string(b), `"netns"`) != 1 {
		t.Errorf("lease file holds the record once, for a only:\n%s", b)
	}

	old.Netns, old.HostVeth, old.OFPort = "/var/run/netns/old", "ofsold", 32771
	l.OFPort = 32999
	if err := s.Record([]Lease{old, l}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	if got, _ := s.Get("old", "eth0"); got.Netns != old.Netns || got.HostVeth != old.HostVeth || got.OFPort != 32771 || got.Owner != "ns/old" {
		t.Errorf("recorded lease after reopen: %+v", got)
	}
	if got, _ := s.Get("a", "eth0"); got.OFPort != 32999 || got.Netns != "/var/run/netns/a" || got.Allocated != l.Allocated {
		t.Errorf("re-recorded lease after reopen: %+v", got)
	}

	// Refused: an unknown key, another address, an ofport out of range.
	for _, bad := range []Lease{
		{ContainerID: "nobody", IfName: "eth0", IPs: []net.IP{ip}},
		{ContainerID: "a", IfName: "eth0", IPs: []net.IP{one(old.IPs)}},
		{ContainerID: "a", IfName: "eth0", IPs: []net.IP{ip}, OFPort: MaxOFPort + 1},
	} {
		if err := s.Record([]Lease{bad}); err == nil {
			t.Errorf("Record(%+v) succeeded", bad)
		}
	}
	if _, _, err := s.ReserveLease(Lease{ContainerID: "b", IfName: "eth0", OFPort: -1}); err == nil {
		t.Error("ReserveLease with ofport -1 succeeded")
	}
}

// TestRecordOldFileUnchanged: a version 1 lease file as an ofsdn before the record wrote
// it opens as it is, and writing it again keeps every field it had.
func TestRecordOldFileUnchanged(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ipam"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"version":1,"subnet":"10.128.0.0/24","lastAllocated":"10.128.0.3","leases":{` +
		`"10.128.0.2":{"containerID":"c2","ifName":"eth0","owner":"ns/p2","network":"net-a","allocated":"2025-01-02T03:04:05Z"},` +
		`"10.128.0.3":{"containerID":"c3","ifName":"eth0","allocated":"2025-01-02T03:04:06Z"}}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "ipam", stateFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	l, ok := s.Get("c2", "eth0")
	if !ok || l.Owner != "ns/p2" || l.Network != "net-a" || l.Netns != "" || l.OFPort != 0 {
		t.Fatalf("old lease: %+v, %v", l, ok)
	}
	alloc(t, s, "c4", "eth0") // rewrites the file
	b, _ := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	for _, want := range []string{
		`"10.128.0.2":{"containerID":"c2","ifName":"eth0","owner":"ns/p2","network":"net-a","allocated":"2025-01-02T03:04:05Z"}`,
		`"10.128.0.3":{"containerID":"c3","ifName":"eth0","allocated":"2025-01-02T03:04:06Z"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("rewritten lease file lacks %s:\n%s", want, b)
		}
	}
}

// TestRecordWriteFailureRollsBack: a Record whose write fails leaves every lease with its
// old record, in memory and on disk.
func TestRecordWriteFailureRollsBack(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	alloc(t, s, "a", "eth0")
	alloc(t, s, "b", "eth0")
	before, _ := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	var fail atomic.Bool
	fail.Store(true)
	s.writeHook = func() error {
		if fail.Load() {
			return errors.New("injected write failure")
		}
		return nil
	}
	la, _ := s.Get("a", "eth0")
	lb, _ := s.Get("b", "eth0")
	la.OFPort, lb.OFPort = 33000, 33001
	if err := s.Record([]Lease{la, lb}); err == nil {
		t.Fatal("Record succeeded although its write failed")
	}
	for _, k := range []string{"a", "b"} {
		if l, ok := s.Get(k, "eth0"); !ok || l.OFPort != 0 {
			t.Errorf("lease of %s after the failed Record: %+v, %v", k, l, ok)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ipam", stateFile)); string(after) != string(before) {
		t.Errorf("lease file changed by a failed write:\n%s\nwant\n%s", after, before)
	}
	fail.Store(false)
	if err := s.Release("a", "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("a", "eth0"); ok {
		t.Error("lease a still there after Release")
	}
}
