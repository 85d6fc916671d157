package ipam

// A Store of several pools (issue 21): one per pod subnet, at most one IPv4 and one
// IPv6, whose addresses a lease holds together, in one lease file.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// openPools opens dir with the pod subnets cidrs and the reserved addresses.
func openPools(t *testing.T, dir string, cidrs []string, reserved ...string) *Store {
	t.Helper()
	s, err := Open(dir, cidrList(t, cidrs...), ipList(reserved...)...)
	if err != nil {
		t.Fatalf("Open(%s, %v): %v", dir, cidrs, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cidrList(t testing.TB, cidrs ...string) []*net.IPNet {
	var out []*net.IPNet
	for _, c := range cidrs {
		out = append(out, mustCIDR(t, c))
	}
	return out
}

func ipList(ips ...string) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		out = append(out, net.ParseIP(ip))
	}
	return out
}

// strs renders addresses for comparisons.
func strs(ips []net.IP) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func allocAll(t *testing.T, s *Store, cid string) []string {
	t.Helper()
	ips, err := s.Allocate(cid, "eth0", "ns/"+cid)
	if err != nil {
		t.Fatalf("Allocate(%s): %v", cid, err)
	}
	return strs(ips)
}

func readState(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var dual = []string{"10.20.0.0/24", "fd00:20::/64"}

// Two pools: a lease gets one address of each, in pool order, IPv4 in its 4-byte form;
// Release and ReleaseIP (of either address) free both; each pool has its own cursor.
func TestPoolsAllocateAndReleaseTogether(t *testing.T) {
	s := openPools(t, t.TempDir(), dual, "10.20.0.1", "fd00:20::1")
	if got := fmt.Sprint(s.Subnets()); got != "[10.20.0.0/24 fd00:20::/64]" {
		t.Errorf("Subnets = %s", got)
	}
	if got := s.Sizes(); !reflect.DeepEqual(got, []int{253, IPv6PoolSpan - 2}) {
		t.Errorf("Sizes = %v, want [253 %d]", got, IPv6PoolSpan-2)
	}
	if s.Capacity() != 253 {
		t.Errorf("Capacity = %d, want 253", s.Capacity())
	}
	a := allocAll(t, s, "a")
	b := allocAll(t, s, "b")
	if !reflect.DeepEqual(a, []string{"10.20.0.2", "fd00:20::2"}) || !reflect.DeepEqual(b, []string{"10.20.0.3", "fd00:20::3"}) {
		t.Fatalf("a = %v, b = %v", a, b)
	}
	l, ok := s.Get("a", "eth0")
	if !ok || len(l.IPs) != 2 || len(l.IPs[0]) != net.IPv4len || len(l.IPs[1]) != net.IPv6len || !reflect.DeepEqual(strs(l.IPs), a) {
		t.Errorf("Get(a) = %+v, %v", l, ok)
	}
	if again := allocAll(t, s, "a"); !reflect.DeepEqual(again, a) {
		t.Errorf("retried Allocate(a) = %v, want %v", again, a)
	}
	if err := s.ReleaseIP(net.ParseIP("fd00:20::2")); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("a", "eth0"); ok || s.InUse() != 1 {
		t.Errorf("ReleaseIP of a's IPv6 address left a's lease (InUse %d)", s.InUse())
	}
	// Round robin in each pool: a's freed addresses are not handed out at once.
	if c := allocAll(t, s, "c"); !reflect.DeepEqual(c, []string{"10.20.0.4", "fd00:20::4"}) {
		t.Errorf("c = %v, want the addresses after b's", c)
	}
	if err := s.ReleaseIP(net.ParseIP("10.20.0.3")); err != nil {
		t.Fatal(err)
	}
	if err := s.Release("c", "eth0"); err != nil {
		t.Fatal(err)
	}
	if s.InUse() != 0 || len(s.List()) != 0 {
		t.Errorf("after releasing everything: InUse %d, List %v", s.InUse(), s.List())
	}
	for _, p := range s.pools {
		if len(p.byOff) != 0 {
			t.Errorf("pool %v still indexes %d addresses", p.subnet, len(p.byOff))
		}
	}
	// Not errors: an address of no lease, of no pool.
	for _, ip := range []string{"fd00:20::9", "10.99.0.1", "fd00:99::1"} {
		if err := s.ReleaseIP(net.ParseIP(ip)); err != nil {
			t.Errorf("ReleaseIP(%s): %v", ip, err)
		}
	}
}

// One pool exhausted: the allocation fails naming that pool, the other pool keeps its
// address and cursor (no lease with one family only), nothing is written; the same for
// either pool running out first, and for Restore.
func TestPoolsExhaustionRollsBackTheOther(t *testing.T) {
	for _, tc := range []struct {
		name     string
		subnets  []string
		full     string // the pool that runs out
		after    []string
		reserved []string
	}{
		// IPv6 /126: ::1 reserved, ::2 and ::3 allocatable.
		{"ipv6 first", []string{"10.21.0.0/28", "fd00:21::/126"}, "fd00:21::/126", []string{"10.21.0.4", "fd00:21::2"}, []string{"10.21.0.1", "fd00:21::1"}},
		// IPv4 /30: .1 and .2, no reserved address given.
		{"ipv4 first", []string{"fd00:22::/64", "10.22.0.0/30"}, "10.22.0.0/30", []string{"fd00:22::3", "10.22.0.1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openPools(t, dir, tc.subnets, tc.reserved...)
			allocAll(t, s, "a")
			allocAll(t, s, "b")
			before := readState(t, dir)
			_, err := s.Allocate("c", "eth0", "")
			if err == nil || !strings.Contains(err.Error(), "IP pool "+tc.full+" exhausted (2 in use") {
				t.Fatalf("3rd Allocate error = %v, want the pool %s exhausted", err, tc.full)
			}
			if _, ok := s.Get("c", "eth0"); ok || s.InUse() != 2 {
				t.Errorf("a failed Allocate left a lease (InUse %d)", s.InUse())
			}
			if got := readState(t, dir); got != before {
				t.Errorf("a failed Allocate wrote the lease file:\n%s\nwas\n%s", got, before)
			}
			for _, p := range s.pools {
				if len(p.byOff) != 2 {
					t.Errorf("pool %v indexes %d addresses after the failure, want 2", p.subnet, len(p.byOff))
				}
			}
			// Restore of an address of the other pool cannot complete the lease either.
			other := s.pools[0]
			if other.subnet.String() == tc.full {
				other = s.pools[1]
			}
			err = s.Restore(Lease{IPs: []net.IP{other.ip(other.last)}, ContainerID: "r", IfName: "eth0"})
			if err == nil || !strings.Contains(err.Error(), tc.full) {
				t.Errorf("Restore with an exhausted pool = %v, want an error naming %s", err, tc.full)
			}
			if _, ok := s.Get("r", "eth0"); ok {
				t.Error("failed Restore left a lease")
			}
			// The other pool's cursor did not move: after a release, c gets the address
			// after b's there, and a's freed one in the full pool.
			if err := s.Release("a", "eth0"); err != nil {
				t.Fatal(err)
			}
			if c := allocAll(t, s, "c"); !reflect.DeepEqual(c, tc.after) {
				t.Errorf("c = %v, want %v", c, tc.after)
			}
		})
	}
}

// A failed write rolls back both pools: addresses and cursors, so the next allocation
// gets the same addresses again.
func TestPoolsWriteFailureRollsBackBoth(t *testing.T) {
	dir := t.TempDir()
	s := openPools(t, dir, dual, "10.20.0.1", "fd00:20::1")
	allocAll(t, s, "a")
	s.writeHook = func() error { return errors.New("injected write failure") }
	if _, err := s.Allocate("b", "eth0", ""); err == nil {
		t.Fatal("Allocate with a failing write succeeded")
	}
	if err := s.Release("a", "eth0"); err == nil {
		t.Fatal("Release with a failing write succeeded")
	}
	s.writeHook = nil
	if l, ok := s.Get("a", "eth0"); !ok || !reflect.DeepEqual(strs(l.IPs), []string{"10.20.0.2", "fd00:20::2"}) {
		t.Errorf("a after a failed release = %+v, %v", l, ok)
	}
	if b := allocAll(t, s, "b"); !reflect.DeepEqual(b, []string{"10.20.0.3", "fd00:20::3"}) {
		t.Errorf("b after the failed write = %v, want the addresses the failed write had taken", b)
	}
	if c := copyOpenPools(t, dir, dual, "10.20.0.1", "fd00:20::1"); c != nil && c.InUse() != 2 {
		t.Errorf("lease file holds %d leases, want 2", c.InUse())
	}
}

// copyOpenPools is copyOpen for a list of subnets.
func copyOpenPools(t *testing.T, dir string, cidrs []string, reserved ...string) *Store {
	t.Helper()
	crashed := t.TempDir()
	if err := os.MkdirAll(filepath.Join(crashed, "ipam"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, "ipam", stateFile), []byte(readState(t, dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return openPools(t, crashed, cidrs, reserved...)
}

// An IPv6 pool: round robin from its cursor, the reserved gateway and the subnet-router
// anycast address skipped, wrapping at the end of a small subnet; the cap of
// IPv6PoolSpan addresses of a large one; an IPv6-only file (version 2) reopens.
func TestIPv6PoolRoundRobin(t *testing.T) {
	dir := t.TempDir()
	s := openPools(t, dir, []string{"fd00:30::/125"}, "fd00:30::1")
	if got := s.Sizes(); !reflect.DeepEqual(got, []int{6}) { // ::0 anycast, ::1 gateway of 8
		t.Errorf("Sizes = %v, want [6]", got)
	}
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, allocAll(t, s, fmt.Sprint("c", i))...)
	}
	if want := []string{"fd00:30::2", "fd00:30::3", "fd00:30::4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	if err := s.Release("c0", "eth0"); err != nil {
		t.Fatal(err)
	}
	got = nil
	for i := 3; i < 7; i++ {
		got = append(got, allocAll(t, s, fmt.Sprint("c", i))...)
	}
	// After ::4 come ::5..::7, then the scan wraps past ::0 and ::1 to the freed ::2.
	if want := []string{"fd00:30::5", "fd00:30::6", "fd00:30::7", "fd00:30::2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("allocated %v, want %v", got, want)
	}
	if _, err := s.Allocate("full", "eth0", ""); err == nil || !strings.Contains(err.Error(), "IP pool fd00:30::/125 exhausted (6 in use") {
		t.Errorf("Allocate of a full IPv6 pool = %v", err)
	}
	if data := readState(t, dir); !strings.HasPrefix(data, `{"version":2,"subnet":"fd00:30::/125","subnets":["fd00:30::/125"],"lastAllocated":"fd00:30::2","lastAllocatedIPs":["fd00:30::2"],"leases":{"fd00:30::2":{`) {
		t.Errorf("IPv6-only lease file:\n%s", data)
	}
	want := s.List()
	s.Close()
	s = openPools(t, dir, []string{"fd00:30::/125"}, "fd00:30::1")
	if got := s.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen List = %+v, want %+v", got, want)
	}

	// A /64: the pool is its first IPv6PoolSpan addresses but ::0.
	big := openPools(t, t.TempDir(), []string{"fd00:31::/64"})
	if got := big.Sizes(); !reflect.DeepEqual(got, []int{IPv6PoolSpan - 1}) {
		t.Errorf("Sizes of a /64 = %v, want [%d]", got, IPv6PoolSpan-1)
	}
	if err := big.Restore(Lease{IPs: ipList("fd00:31::ffff"), ContainerID: "last", IfName: "eth0"}); err != nil {
		t.Errorf("Restore of the pool's last address: %v", err)
	}
	for _, bad := range []string{"fd00:31::", "fd00:31::1:0", "fd00:31::1:0:0:1", "fd00:32::2", "10.0.0.2", "::ffff:10.0.0.2"} {
		if err := big.Restore(Lease{IPs: ipList(bad), ContainerID: "bad", IfName: "eth0"}); err == nil {
			t.Errorf("Restore of %s (not allocatable) succeeded", bad)
		}
	}
}

// The file of a single-stack IPv4 node is the layout of ofsdn before pools, byte for
// byte: read unchanged, and written back identical after changes that leave the state
// as it was.
func TestIPv4FileRoundTripsByteForByte(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ipam"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"version":1,"subnet":"10.128.0.0/24","lastAllocated":"10.128.0.9","leases":{` +
		`"10.128.0.2":{"containerID":"legacy","ifName":"eth0","allocated":"2025-01-02T03:04:05Z"},` +
		`"10.128.0.5":{"containerID":"rec","ifName":"eth0","owner":"ns/rec","network":"net-a","netns":"/var/run/netns/cni-1","hostVeth":"ofs0123456789ab","ofport":32775,"ownerID":7,"allocated":"2025-01-02T03:04:06Z"},` +
		`"10.128.0.9":{"containerID":"plain","ifName":"net1","owner":"ns/plain","ownerID":8,"allocated":"2025-01-02T03:04:07Z"}}}` + "\n"
	path := filepath.Join(dir, "ipam", stateFile)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	rec, ok := s.Get("rec", "eth0")
	if !ok || !reflect.DeepEqual(strs(rec.IPs), []string{"10.128.0.5"}) || rec.OwnerID != 7 || rec.OFPort != 32775 {
		t.Fatalf("lease rec = %+v, %v", rec, ok)
	}
	// A change and its undo: the record changed and back.
	changed := rec
	changed.OFPort = 40000
	if err := s.Record([]Lease{changed}); err != nil {
		t.Fatal(err)
	}
	if err := s.Record([]Lease{rec}); err != nil {
		t.Fatal(err)
	}
	if got := readState(t, dir); got != old {
		t.Errorf("after Record and its undo the file is\n%s\nwant\n%s", got, old)
	}
	// A lease dropped and restored (Restore does not move the cursor).
	plain, _ := s.Get("plain", "net1")
	if err := s.Release("plain", "net1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(plain); err != nil {
		t.Fatal(err)
	}
	if got := readState(t, dir); got != old {
		t.Errorf("after Release and Restore the file is\n%s\nwant\n%s", got, old)
	}
	// What a Store of one IPv4 pool writes has none of the keys of further pools.
	for _, k := range []string{"subnets", "lastAllocatedIPs", "moreIPs"} {
		if strings.Contains(string(realStateFile(t)), k) {
			t.Errorf("single-pool file holds %q", k)
		}
	}
}

// realDualStateFile returns the bytes of a leases.json written by a Store of two pools.
func realDualStateFile(t testing.TB) []byte {
	return writtenStateFile(t, cidrList(t, dual...), ipList("10.20.0.1", "fd00:20::1")...)
}

// A file of two pools reopened with the same subnets keeps every lease (addresses, owner
// ids, records) and both cursors; opened with other subnets (one of them, another
// order, another IPv6 subnet) it is an error naming the file and the subnets, and so is
// a single-pool file opened with two.
func TestPoolsFileReopen(t *testing.T) {
	dir := t.TempDir()
	s := openPools(t, dir, dual, "10.20.0.1", "fd00:20::1")
	for _, c := range []string{"a", "b", "c"} {
		allocAll(t, s, c)
	}
	if err := s.Release("b", "eth0"); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Get("a", "eth0")
	a.Netns, a.HostVeth, a.OFPort = "/var/run/netns/a", "ofsa", 32770
	if err := s.Record([]Lease{{ContainerID: "a", IfName: "eth0", IPs: a.IPs[1:], Netns: a.Netns, HostVeth: a.HostVeth, OFPort: a.OFPort}}); err != nil {
		t.Fatalf("Record naming the lease by its IPv6 address: %v", err)
	}
	want := s.List()
	if len(want) != 2 || want[0].OwnerID == 0 || want[0].OwnerID == want[1].OwnerID || want[0].OFPort != 32770 {
		t.Fatalf("List = %+v", want)
	}
	data := readState(t, dir)
	for _, k := range []string{`"version":2,`, `"subnet":"10.20.0.0/24","subnets":["10.20.0.0/24","fd00:20::/64"]`,
		`"lastAllocated":"10.20.0.4","lastAllocatedIPs":["10.20.0.4","fd00:20::4"]`, `"10.20.0.2":{"containerID":"a","ifName":"eth0","moreIPs":["fd00:20::2"]`} {
		if !strings.Contains(data, k) {
			t.Errorf("dual lease file lacks %s:\n%s", k, data)
		}
	}
	s.Close()

	s = openPools(t, dir, dual, "10.20.0.1", "fd00:20::1")
	if got := s.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen List = %+v\nwant %+v", got, want)
	}
	if d := allocAll(t, s, "d"); !reflect.DeepEqual(d, []string{"10.20.0.5", "fd00:20::5"}) {
		t.Errorf("d = %v, want the addresses after the cursors of the file", d)
	}
	s.Close()

	path := filepath.Join(dir, "ipam", stateFile)
	for _, other := range [][]string{
		{"10.20.0.0/24"},
		{"fd00:20::/64"},
		{"fd00:20::/64", "10.20.0.0/24"},
		{"10.20.0.0/24", "fd00:99::/64"},
	} {
		s, err := Open(dir, cidrList(t, other...))
		if err == nil {
			s.Close()
			t.Errorf("Open of a file of %v with %v succeeded", dual, other)
			continue
		}
		for _, name := range append([]string{path, "fd00:20::/64", "10.20.0.0/24"}, other...) {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("Open with %v: error %q does not name %s", other, err, name)
			}
		}
	}

	single := t.TempDir()
	alloc(t, openT(t, single, "10.20.0.0/24"), "x", "eth0")
	t.Run("single file, two pools", func(t *testing.T) {
		copyDir := t.TempDir()
		os.MkdirAll(filepath.Join(copyDir, "ipam"), 0o700)
		os.WriteFile(filepath.Join(copyDir, "ipam", stateFile), []byte(readState(t, single)), 0o600)
		if s, err := Open(copyDir, cidrList(t, dual...)); err == nil {
			s.Close()
			t.Error("Open of a single-pool file with two pools succeeded")
		} else if !strings.Contains(err.Error(), "fd00:20::/64") || !strings.Contains(err.Error(), stateFile) {
			t.Errorf("error %q does not name the file and the subnets", err)
		}
	})
}

// Restore with a subset of the pools' addresses allocates the missing family's; its
// refusals.
func TestPoolsRestore(t *testing.T) {
	s := openPools(t, t.TempDir(), dual, "10.20.0.1", "fd00:20::1")
	if err := s.Restore(Lease{IPs: ipList("10.20.0.7"), ContainerID: "v4", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Get("v4", "eth0"); !reflect.DeepEqual(strs(l.IPs), []string{"10.20.0.7", "fd00:20::2"}) {
		t.Errorf("restored from its IPv4 address: %v, want an IPv6 address allocated", strs(l.IPs))
	}
	if err := s.Restore(Lease{IPs: ipList("fd00:20::9"), ContainerID: "v6", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Get("v6", "eth0"); !reflect.DeepEqual(strs(l.IPs), []string{"10.20.0.2", "fd00:20::9"}) {
		t.Errorf("restored from its IPv6 address: %v, want an IPv4 address allocated", strs(l.IPs))
	}
	// Both given, in either order; the cursors stay.
	if err := s.Restore(Lease{IPs: ipList("fd00:20::20", "10.20.0.20"), ContainerID: "both", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Get("both", "eth0"); !reflect.DeepEqual(strs(l.IPs), []string{"10.20.0.20", "fd00:20::20"}) {
		t.Errorf("restored from both: %v", strs(l.IPs))
	}
	// Again with what the key holds, or part of it: a no-op.
	for _, ips := range [][]string{{"10.20.0.20"}, {"fd00:20::20"}, {"10.20.0.20", "fd00:20::20"}} {
		if err := s.Restore(Lease{IPs: ipList(ips...), ContainerID: "both", IfName: "eth0"}); err != nil {
			t.Errorf("Restore of held %v: %v", ips, err)
		}
	}
	for _, bad := range []Lease{
		{ContainerID: "r", IfName: "eth0"},                                              // no address
		{IPs: ipList("10.20.0.30", "10.20.0.31"), ContainerID: "r", IfName: "eth0"},     // two of one pool
		{IPs: ipList("10.20.0.30", "fd00:20::9"), ContainerID: "r", IfName: "eth0"},     // IPv6 held by v6
		{IPs: ipList("10.20.0.20", "fd00:20::21"), ContainerID: "both", IfName: "eth0"}, // the key holds another
		{IPs: ipList("fd00:20::1"), ContainerID: "r", IfName: "eth0"},                   // reserved
		{IPs: ipList("fd00:20::"), ContainerID: "r", IfName: "eth0"},                    // subnet-router anycast
	} {
		if err := s.Restore(bad); err == nil {
			t.Errorf("Restore(%v of %s) succeeded", strs(bad.IPs), bad.ContainerID)
		}
	}
	if _, ok := s.Get("r", "eth0"); ok || s.InUse() != 3 {
		t.Errorf("refused Restores left a lease (InUse %d)", s.InUse())
	}
	if ips := allocAll(t, s, "next"); !reflect.DeepEqual(ips, []string{"10.20.0.3", "fd00:20::3"}) {
		t.Errorf("next = %v: the cursors moved only for the allocated addresses", ips)
	}
}

// Open refuses a list of subnets that is not one or two of different families, naming
// the subnets.
func TestOpenPoolsErrors(t *testing.T) {
	for _, tc := range []struct {
		subnets  []string
		reserved []string
		want     string
	}{
		{nil, nil, "0 pod subnets"},
		{[]string{"10.0.0.0/24", "10.1.0.0/24"}, nil, "two IPv4 subnets, 10.0.0.0/24 and 10.1.0.0/24"},
		{[]string{"fd00::/64", "fd01::/64"}, nil, "two IPv6 subnets"},
		{[]string{"10.0.0.0/24", "fd00::/64", "10.1.0.0/24"}, nil, "3 pod subnets"},
		{[]string{"fd00::/127"}, nil, "/126 or shorter"},
		{[]string{"10.0.0.0/24", "fd00::/64"}, []string{"fd01::1"}, "not in pod subnets [10.0.0.0/24 fd00::/64]"},
	} {
		s, err := Open(t.TempDir(), cidrList(t, tc.subnets...), ipList(tc.reserved...)...)
		if err == nil {
			s.Close()
			t.Errorf("Open(%v) succeeded", tc.subnets)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%v) = %v, want %q", tc.subnets, err, tc.want)
		}
	}
}

// decodeState refuses a malformed file of pools.
func TestDecodePoolsRejects(t *testing.T) {
	const l = `"containerID":"a","ifName":"eth0"`
	for name, doc := range map[string]string{
		"no subnets":        `{"version":2,"subnet":"10.0.0.0/24","leases":{}}`,
		"first not subnet":  `{"version":2,"subnet":"10.0.0.0/24","subnets":["fd00::/64","10.0.0.0/24"],"leases":{}}`,
		"v2 one ipv4":       `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24"],"leases":{}}`,
		"two ipv4":          `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","10.1.0.0/24"],"leases":{}}`,
		"subnets in v1":     `{"version":1,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24"],"leases":{}}`,
		"moreIPs in v1":     `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00::2"]}}}`,
		"no moreIPs":        `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `}}}`,
		"two moreIPs":       `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00::2","fd00::3"]}}}`,
		"moreIPs ipv4":      `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["10.0.0.3"]}}}`,
		"moreIPs anycast":   `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00::"]}}}`,
		"moreIPs past span": `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00::1:0"]}}}`,
		"moreIPs long form": `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00:0::2"]}}}`,
		"moreIPs dup":       `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00::2"]},"10.0.0.3":{"containerID":"b","ifName":"eth0","moreIPs":["fd00::2"]}}}`,
		"cursors count":     `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"lastAllocated":"10.0.0.2","lastAllocatedIPs":["10.0.0.2"],"leases":{}}`,
		"cursors disagree":  `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"lastAllocated":"10.0.0.2","lastAllocatedIPs":["10.0.0.3","fd00::2"],"leases":{}}`,
		"cursor outside":    `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"lastAllocatedIPs":["","fd01::2"],"leases":{}}`,
		"v6 key long form":  `{"version":2,"subnet":"fd00::/64","subnets":["fd00::/64"],"leases":{"fd00:0::2":{` + l + `}}}`,
		"v6 subnet in v1":   `{"version":1,"subnet":"fd00::/64","leases":{}}`,
		"version 3":         `{"version":3,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"leases":{}}`,
	} {
		if _, err := decodeState([]byte(doc)); err == nil {
			t.Errorf("%s: decodeState accepted %s", name, doc)
		}
	}
	ok := `{"version":2,"subnet":"10.0.0.0/24","subnets":["10.0.0.0/24","fd00::/64"],"lastAllocatedIPs":["","fd00::2"],"leases":{"10.0.0.2":{` + l + `,"moreIPs":["fd00::2"]}}}`
	if _, err := decodeState([]byte(ok)); err != nil {
		t.Errorf("decodeState refused %s: %v", ok, err)
	}
}

// An IPv6-first node's pools ([IPv6, IPv4], issue 23): a lease's addresses come IPv6
// first, the order the CNI result gives them, and stay so when the file is reopened; the
// same subnets in the other order are another node's list and refused (drain first).
// An IPv6-only node's one pool restores a lease with its recorded IPv6 address alone.
func TestPoolsIPv6FirstAndIPv6Only(t *testing.T) {
	dir := t.TempDir()
	first := []string{"fd00:20::/64", "10.20.0.0/24"}
	s := openPools(t, dir, first, "fd00:20::1", "10.20.0.1")
	if a := allocAll(t, s, "a"); !reflect.DeepEqual(a, []string{"fd00:20::2", "10.20.0.2"}) {
		t.Fatalf("IPv6-first lease = %v, want [fd00:20::2 10.20.0.2]", a)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openPools(t, dir, first, "fd00:20::1", "10.20.0.1")
	if l, ok := s.Get("a", "eth0"); !ok || fmt.Sprint(strs(l.IPs)) != "[fd00:20::2 10.20.0.2]" {
		t.Fatalf("reopened IPv6-first lease = %+v, %v", l, ok)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var nets []*net.IPNet
	for _, c := range dual {
		_, n, _ := net.ParseCIDR(c)
		nets = append(nets, n)
	}
	if _, err := Open(dir, nets); err == nil {
		t.Fatal("a lease file of [IPv6, IPv4] opened as [IPv4, IPv6]")
	}

	v6 := openPools(t, t.TempDir(), []string{"fd00:21::/64"}, "fd00:21::1")
	if err := v6.Restore(Lease{IPs: []net.IP{net.ParseIP("fd00:21::7")}, ContainerID: "r", IfName: "eth0", OwnerID: 9}); err != nil {
		t.Fatal(err)
	}
	if l, ok := v6.Get("r", "eth0"); !ok || fmt.Sprint(strs(l.IPs)) != "[fd00:21::7]" || l.OwnerID != 9 {
		t.Fatalf("restored IPv6-only lease = %+v, %v", l, ok)
	}
	if b := allocAll(t, v6, "b"); !reflect.DeepEqual(b, []string{"fd00:21::2"}) {
		t.Fatalf("IPv6-only allocation = %v", b)
	}
}
