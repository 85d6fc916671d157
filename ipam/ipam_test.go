package ipam

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustCIDR(t testing.TB, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func openT(t *testing.T, dir, cidr string, reserved ...string) *Store {
	t.Helper()
	var rs []net.IP
	for _, r := range reserved {
		rs = append(rs, net.ParseIP(r))
	}
	s, err := Open(dir, []*net.IPNet{mustCIDR(t, cidr)}, rs...)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", dir, cidr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// one is the first address of ips (a single-pool Store's only one), nil if there is none.
func one(ips []net.IP) net.IP {
	if len(ips) == 0 {
		return nil
	}
	return ips[0]
}

// first2 is Allocate's result with one address (one).
func first2(ips []net.IP, err error) (net.IP, error) { return one(ips), err }

// first3 is Reserve's result with one address (one).
func first3(ips []net.IP, durable func() error, err error) (net.IP, func() error, error) {
	return one(ips), durable, err
}

func alloc(t *testing.T, s *Store, cid, ifn string) string {
	t.Helper()
	ip, err := first2(s.Allocate(cid, ifn, "ns/"+cid))
	if err != nil {
		t.Fatalf("Allocate(%s, %s): %v", cid, ifn, err)
	}
	return ip.String()
}

func TestAllocateIdempotent(t *testing.T) {
	s := openT(t, t.TempDir(), "10.128.0.0/24", "10.128.0.1")
	a := alloc(t, s, "c1", "eth0")
	if a != "10.128.0.2" {
		t.Errorf("first allocation = %s, want 10.128.0.2 (network .0 and gateway .1 are excluded)", a)
	}
	if b := alloc(t, s, "c1", "eth0"); b != a {
		t.Errorf("retry of the same key gave %s, want %s", b, a)
	}
	if c := alloc(t, s, "c1", "net1"); c == a {
		t.Errorf("a second interface of the same container got the same IP %s", c)
	}
	if s.InUse() != 2 {
		t.Errorf("InUse = %d, want 2", s.InUse())
	}
	l, ok := s.Get("c1", "eth0")
	if !ok || one(l.IPs).String() != a || l.Owner != "ns/c1" || l.ContainerID != "c1" || l.IfName != "eth0" || l.Allocated.IsZero() {
		t.Errorf("Get = %+v, %v", l, ok)
	}
	if _, ok := s.Get("c2", "eth0"); ok {
		t.Error("Get of an unknown key reported a lease")
	}
	if _, err := s.Allocate("", "eth0", ""); err == nil {
		t.Error("Allocate with an empty container ID succeeded")
	}
}

func TestExhaustionSlash29(t *testing.T) {
	s := openT(t, t.TempDir(), "10.0.0.0/29", "10.0.0.1")
	if s.Capacity() != 5 { // .0 network, .7 broadcast, .1 gateway
		t.Fatalf("Size = %d, want 5", s.Capacity())
	}
	got := map[string]bool{}
	for i := 0; i < 5; i++ {
		got[alloc(t, s, fmt.Sprint("c", i), "eth0")] = true
	}
	for _, bad := range []string{"10.0.0.0", "10.0.0.1", "10.0.0.7"} {
		if got[bad] {
			t.Errorf("allocated excluded address %s", bad)
		}
	}
	_, err := s.Allocate("c5", "eth0", "")
	if err == nil || !strings.HasPrefix(err.Error(), "IP pool 10.0.0.0/29 exhausted (5 in use)") {
		t.Fatalf("6th Allocate error = %v, want IP pool 10.0.0.0/29 exhausted (5 in use)", err)
	}
	if s.InUse() != 5 {
		t.Errorf("InUse = %d after failed allocation, want 5", s.InUse())
	}
	// The retry of an existing key still works on a full pool.
	if _, err := s.Allocate("c0", "eth0", ""); err != nil {
		t.Errorf("retry on full pool: %v", err)
	}
}

func TestReleaseReuseOrder(t *testing.T) {
	s := openT(t, t.TempDir(), "10.0.0.0/29", "10.0.0.1")
	a := alloc(t, s, "a", "eth0") // .2
	b := alloc(t, s, "b", "eth0") // .3
	if err := s.Release("a", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release("a", "eth0"); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, ok := s.Get("a", "eth0"); ok {
		t.Fatal("lease still present after Release")
	}
	// Round-robin: .4, .5, .6 come before the freed .2.
	var seq []string
	for _, c := range []string{"c", "d", "e", "f"} {
		seq = append(seq, alloc(t, s, c, "eth0"))
	}
	want := []string{"10.0.0.4", "10.0.0.5", "10.0.0.6", a}
	if !reflect.DeepEqual(seq, want) {
		t.Errorf("allocation order after release = %v, want %v (b=%s)", seq, want, b)
	}
	if err := s.ReleaseIP(net.ParseIP(b)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("b", "eth0"); ok {
		t.Error("ReleaseIP left the lease")
	}
	if err := s.ReleaseIP(net.ParseIP(b)); err != nil {
		t.Errorf("second ReleaseIP: %v", err)
	}
	list := s.List()
	var ips []string
	for _, l := range list {
		ips = append(ips, one(l.IPs).String())
	}
	if want := []string{"10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"}; !reflect.DeepEqual(ips, want) {
		t.Errorf("List = %v, want %v", ips, want)
	}
}

func TestPersistenceAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.1.0.0/24", "10.1.0.1")
	a := alloc(t, s, "a", "eth0")
	b := alloc(t, s, "b", "eth0")
	c := alloc(t, s, "c", "eth0")
	if err := s.Release("b", "eth0"); err != nil {
		t.Fatal(err)
	}
	before := s.List()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Allocate("x", "eth0", ""); err == nil {
		t.Error("Allocate on a closed Store succeeded")
	}

	s2 := openT(t, dir, "10.1.0.0/24", "10.1.0.1")
	if after := s2.List(); !reflect.DeepEqual(before, after) {
		t.Errorf("leases after reopen = %+v, want %+v", after, before)
	}
	if l, _ := s2.Get("a", "eth0"); one(l.IPs).String() != a {
		t.Errorf("a = %v, want %s", one(l.IPs), a)
	}
	if ip := alloc(t, s2, "a", "eth0"); ip != a {
		t.Errorf("retry after reopen = %s, want %s", ip, a)
	}
	// The round-robin cursor survives too: the next address follows c, not b.
	if d := alloc(t, s2, "d", "eth0"); d == b || d != "10.1.0.5" {
		t.Errorf("first allocation after reopen = %s, want 10.1.0.5 (after %s, not the freed %s)", d, c, b)
	}
}

func TestConcurrentAllocate(t *testing.T) {
	s := openT(t, t.TempDir(), "10.2.0.0/24", "10.2.0.1")
	const n = 32
	ips := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip, err := first2(s.Allocate(fmt.Sprint("c", i), "eth0", ""))
			ips[i], errs[i] = ip.String(), err
			// A concurrent retry must agree.
			if ip2, err := first2(s.Allocate(fmt.Sprint("c", i), "eth0", "")); err != nil || !ip2.Equal(ip) {
				errs[i] = fmt.Errorf("retry gave %v, %v", ip2, err)
			}
		}()
	}
	wg.Wait()
	seen := map[string]int{}
	for i, ip := range ips {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if j, dup := seen[ip]; dup {
			t.Fatalf("goroutines %d and %d both got %s", j, i, ip)
		}
		seen[ip] = i
	}
	if s.InUse() != n {
		t.Errorf("InUse = %d, want %d", s.InUse(), n)
	}
}

// TestCrashSafety checks that what Allocate returned is on disk at once (a
// copy of the directory taken without Close, as a crash would leave it,
// opens with the lease), that no temp file is left behind, and that a stale
// temp file from a crash mid-write is ignored and removed.
func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.3.0.0/24", "10.3.0.1")
	var want []string
	for i := 0; i < 10; i++ {
		want = append(want, alloc(t, s, fmt.Sprint("c", i), "eth0"))
	}
	if err := s.Release("c3", "eth0"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "ipam"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}

	// "Crash": copy the state file as it is now, without Close.
	crashed := t.TempDir()
	os.MkdirAll(filepath.Join(crashed, "ipam"), 0o700)
	data, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(crashed, "ipam", stateFile), data, 0o600)
	// A crash between creating the temp file and the rename leaves this:
	stale := filepath.Join(crashed, "ipam", tmpPrefix+"123")
	os.WriteFile(stale, []byte(`{"version":1,"subnet":"10.3.0.0/24","leases":{}}`), 0o600)

	s2 := openT(t, crashed, "10.3.0.0/24", "10.3.0.1")
	for i, ip := range want {
		l, ok := s2.Get(fmt.Sprint("c", i), "eth0")
		if i == 3 {
			if ok {
				t.Errorf("released lease c3 is back after crash")
			}
			continue
		}
		if !ok || one(l.IPs).String() != ip {
			t.Errorf("after crash c%d = %v (%v), want %s", i, one(l.IPs), ok, ip)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file not removed by Open: %v", err)
	}
}

// TestWriteFailureAllocatesNothing: when the lease file cannot be written,
// Allocate fails and the address is not handed out.
func TestWriteFailureAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.4.0.0/24", "10.4.0.1")
	a := alloc(t, s, "a", "eth0")
	if err := os.RemoveAll(filepath.Join(dir, "ipam")); err != nil {
		t.Fatal(err)
	}
	if ip, err := first2(s.Allocate("b", "eth0", "")); err == nil {
		t.Fatalf("Allocate with an unwritable directory returned %v", ip)
	}
	if s.InUse() != 1 {
		t.Errorf("InUse = %d after failed write, want 1", s.InUse())
	}
	if err := s.Release("a", "eth0"); err == nil {
		t.Error("Release with an unwritable directory succeeded")
	}
	if l, ok := s.Get("a", "eth0"); !ok || one(l.IPs).String() != a {
		t.Errorf("lease a lost after failed Release: %v %v", l, ok)
	}
	// Once the directory is back, the next allocation continues after a.
	os.MkdirAll(filepath.Join(dir, "ipam"), 0o700)
	if b := alloc(t, s, "b", "eth0"); b != "10.4.0.3" {
		t.Errorf("allocation after recovery = %s, want 10.4.0.3", b)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.5.0.0/24", "10.5.0.1")
	alloc(t, s, "a", "eth0")

	if _, err := Open(dir, []*net.IPNet{mustCIDR(t, "10.5.0.0/24")}); err == nil || !strings.Contains(err.Error(), "in use by another") {
		t.Errorf("second Open while the first is open: %v", err)
	}
	s.Close()

	_, err := Open(dir, []*net.IPNet{mustCIDR(t, "10.6.0.0/24")})
	if err == nil || !strings.Contains(err.Error(), "10.5.0.0/24") || !strings.Contains(err.Error(), "10.6.0.0/24") {
		t.Errorf("subnet mismatch error = %v, want both subnets named", err)
	}
	// The lease at 10.5.0.2 conflicts with a new reserved address.
	if _, err := Open(dir, []*net.IPNet{mustCIDR(t, "10.5.0.0/24")}, net.ParseIP("10.5.0.2")); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("lease on reserved address: %v", err)
	}
	// Host bits in the subnet are cleared: 10.5.0.7/24 is the same pool.
	s3, err := Open(dir, []*net.IPNet{{IP: net.ParseIP("10.5.0.7"), Mask: net.CIDRMask(24, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s3.Subnets()[0].String(); got != "10.5.0.0/24" {
		t.Errorf("Subnet = %s", got)
	}
	s3.Close()

	for _, tc := range []struct {
		cidr, reserved string
	}{
		{"fd00::/127", ""},
		{"10.0.0.0/31", ""},
		{"10.0.0.0/24", "10.0.1.1"},
	} {
		var rs []net.IP
		if tc.reserved != "" {
			rs = append(rs, net.ParseIP(tc.reserved))
		}
		if s, err := Open(t.TempDir(), []*net.IPNet{mustCIDR(t, tc.cidr)}, rs...); err == nil {
			s.Close()
			t.Errorf("Open(%s, reserved %s) succeeded", tc.cidr, tc.reserved)
		}
	}

	path := filepath.Join(dir, "ipam", stateFile)
	os.WriteFile(path, []byte(`{"version":1,"subnet":"10.5.0.0/24","leases":{"10.5.0.2":`), 0o600)
	if _, err := Open(dir, []*net.IPNet{mustCIDR(t, "10.5.0.0/24")}); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt file error = %v, want it to name %s", err, path)
	}
}

func TestDecodeStateRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"version":       `{"version":2,"subnet":"10.0.0.0/24","leases":{}}`,
		"subnet":        `{"version":1,"subnet":"10.0.0.0/33","leases":{}}`,
		"noncanonical":  `{"version":1,"subnet":"10.0.0.1/24","leases":{}}`,
		"v6":            `{"version":1,"subnet":"fd00::/64","leases":{}}`,
		"ip":            `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.x":{"containerID":"a","ifName":"eth0"}}}`,
		"outside":       `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.1.2":{"containerID":"a","ifName":"eth0"}}}`,
		"network":       `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.0":{"containerID":"a","ifName":"eth0"}}}`,
		"broadcast":     `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.255":{"containerID":"a","ifName":"eth0"}}}`,
		"mapped":        `{"version":1,"subnet":"10.0.0.0/24","leases":{"::ffff:10.0.0.2":{"containerID":"a","ifName":"eth0"}}}`,
		"emptykey":      `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.2":{"containerID":"","ifName":"eth0"}}}`,
		"dupkey":        `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.2":{"containerID":"a","ifName":"eth0"},"10.0.0.3":{"containerID":"a","ifName":"eth0"}}}`,
		"time":          `{"version":1,"subnet":"10.0.0.0/24","leases":{"10.0.0.2":{"containerID":"a","ifName":"eth0","allocated":"yesterday"}}}`,
		"lastAllocated": `{"version":1,"subnet":"10.0.0.0/24","lastAllocated":"10.9.0.1","leases":{}}`,
		"trailing":      `{"version":1,"subnet":"10.0.0.0/24","leases":{}} x`,
		"empty":         ``,
	} {
		if _, err := decodeState([]byte(doc)); err == nil {
			t.Errorf("%s: decodeState accepted %s", name, doc)
		}
	}
}

// realStateFile returns the bytes of a leases.json written by a Store of one IPv4 pool.
func realStateFile(t testing.TB) []byte {
	return writtenStateFile(t, []*net.IPNet{mustCIDR(t, "10.128.0.0/24")}, net.ParseIP("10.128.0.1"))
}

// writtenStateFile returns the bytes of the leases.json a Store of subnets writes after
// three allocations and the release of the second.
func writtenStateFile(t testing.TB, subnets []*net.IPNet, reserved ...net.IP) []byte {
	dir := t.TempDir()
	s, err := Open(dir, subnets, reserved...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, owner := range []string{"default/web-0", "kube-system/coredns-abc", ""} {
		if _, err := s.Allocate(fmt.Sprintf("%064x", i+1), "eth0", owner); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(fmt.Sprintf("%064x", 2), "eth0"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzDecodeStore feeds arbitrary bytes to the leases.json decoder: it must
// never panic, and whatever it accepts must survive an encode/decode round
// trip unchanged.
func FuzzDecodeStore(f *testing.F) {
	f.Add(realStateFile(f))
	f.Add([]byte(`{"version":1,"subnet":"10.0.0.0/30","lastAllocated":"10.0.0.2","leases":{"10.0.0.1":{"containerID":"a","ifName":"eth0","allocated":"2025-01-02T03:04:05Z"}}}`))
	f.Add([]byte(`{"version":1,"subnet":"0.0.0.0/0","leases":null}`))
	f.Add([]byte(`{}`))
	f.Add(realDualStateFile(f))
	f.Add([]byte(`{"version":2,"subnet":"fd00:10::/120","subnets":["fd00:10::/120"],"lastAllocatedIPs":[""],"leases":{"fd00:10::1":{"containerID":"a","ifName":"eth0","allocated":"2025-01-02T03:04:05Z"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeState(data)
		if err != nil {
			return
		}
		s := &Store{pools: d.pools, byKey: map[key]*lease{}, byOwner: map[uint32]*lease{}}
		if _, err := newPools(subnetsOf(d.pools)); err != nil {
			t.Fatalf("decoded subnets %v are invalid: %v", subnetsOf(d.pools), err)
		}
		for _, l := range d.leases {
			for i, p := range s.pools {
				if l.off[i] < p.first || l.off[i] > p.last {
					t.Fatalf("decoded lease %s outside %v", p.ip(l.off[i]), p.subnet)
				}
				if _, dup := p.byOff[l.off[i]]; dup {
					t.Fatalf("decoded two leases for %s", p.ip(l.off[i]))
				}
			}
			s.put(l)
		}
		out, err := s.encodeState()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		d2, err := decodeState(out)
		if err != nil {
			t.Fatalf("re-decoding our own output failed: %v\n%s", err, out)
		}
		if !sameSubnets(d2.pools, d.pools) || len(d2.leases) != len(d.leases) {
			t.Fatalf("round trip changed the state: %v/%d → %v/%d", subnetsOf(d.pools), len(d.leases), subnetsOf(d2.pools), len(d2.leases))
		}
		for i, p := range d.pools {
			if d2.pools[i].cursor != p.cursor && p.lastAllocated() != "" {
				t.Fatalf("round trip changed the cursor of %v: %s → %s", p.subnet, p.lastAllocated(), d2.pools[i].lastAllocated())
			}
		}
		for _, l := range d2.leases {
			o := s.pools[0].byOff[l.off[0]]
			if o == nil || o.off != l.off || o.key != l.key || o.owner != l.owner || !o.allocated.Equal(l.allocated) {
				t.Fatalf("round trip changed lease %v: %+v → %+v", s.ips(l), o, l)
			}
		}
	})
}

// copyOpen copies leases.json of dir into a fresh directory, as a crash at
// this instant would leave it, and opens it.
func copyOpen(t *testing.T, dir, cidr string, reserved ...string) *Store {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Errorf("read lease file: %v", err)
		return nil
	}
	crashed := t.TempDir()
	if err := os.MkdirAll(filepath.Join(crashed, "ipam"), 0o700); err != nil {
		t.Error(err)
		return nil
	}
	if err := os.WriteFile(filepath.Join(crashed, "ipam", stateFile), data, 0o600); err != nil {
		t.Error(err)
		return nil
	}
	var rs []net.IP
	for _, r := range reserved {
		rs = append(rs, net.ParseIP(r))
	}
	s, err := Open(crashed, []*net.IPNet{mustCIDR(t, cidr)}, rs...)
	if err != nil {
		t.Errorf("Open of a copy of %s: %v", dir, err)
		return nil
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond (no timing asserted: it only waits for a state the
// test's goroutines are bound to reach).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 60000 { // ~60 s: something is stuck
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommit: 64 concurrent Allocates share a handful of file writes,
// and each lease is in the lease file (a copy of the directory taken right
// after Allocate returns opens with it) when its Allocate returns.
func TestGroupCommit(t *testing.T) {
	const n = 64
	for _, hold := range []bool{true, false} {
		t.Run(fmt.Sprintf("holdFirstWrite=%v", hold), func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, "10.7.0.0/24", "10.7.0.1")
			var writes atomic.Int64
			s.writeHook = func() error {
				// With hold, the first write waits until all n changes are in
				// memory, so they are all queued behind it: exactly 2 writes.
				if writes.Add(1) == 1 && hold {
					waitFor(t, "all allocations applied in memory", func() bool { return s.InUse() == n })
				}
				return nil
			}
			ips := make([]string, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cid := fmt.Sprint("c", i)
					ip, err := first2(s.Allocate(cid, "eth0", ""))
					if err != nil {
						t.Errorf("Allocate(%s): %v", cid, err)
						return
					}
					ips[i] = ip.String()
					c := copyOpen(t, dir, "10.7.0.0/24", "10.7.0.1")
					if c == nil {
						return
					}
					if l, ok := c.Get(cid, "eth0"); !ok || !one(l.IPs).Equal(ip) {
						t.Errorf("Allocate(%s) returned %s but the lease file holds %v (%v)", cid, ip, one(l.IPs), ok)
					}
				}()
			}
			wg.Wait()
			seen := map[string]bool{}
			for i, ip := range ips {
				if seen[ip] {
					t.Errorf("c%d got %s, already handed out", i, ip)
				}
				seen[ip] = true
			}
			w := writes.Load()
			t.Logf("%d concurrent Allocates, %d file writes", n, w)
			if hold && w > 2 {
				t.Errorf("%d concurrent Allocates took %d file writes, want at most 2", n, w)
			}
			if w >= n {
				t.Errorf("%d concurrent Allocates took %d file writes: no grouping", n, w)
			}
		})
	}
}

// TestWriteFailureRollsBackBatch: a write fails while a release is being
// written and allocations (one of them of the address being released) are
// queued behind it. Every caller gets the error, memory and the lease file
// are as before the batch, and the pool continues from there.
func TestWriteFailureRollsBackBatch(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.0.0.0/29", "10.0.0.1") // allocatable .2-.6
	entered := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	s.writeHook = func() error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
			return errors.New("injected write failure")
		}
		return nil
	}
	// The hook is armed only from the 5th write on: the setup writes succeed.
	calls.Store(-4)
	for _, c := range []string{"a", "b", "c", "d"} {
		alloc(t, s, c, "eth0") // .2 .3 .4 .5
	}
	before, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := map[string]error{}
	got := map[string]net.IP{}
	var mu sync.Mutex
	run := func(name string, f func() (net.IP, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip, err := f()
			mu.Lock()
			errs[name], got[name] = err, ip
			mu.Unlock()
		}()
	}
	run("release a", func() (net.IP, error) { return nil, s.Release("a", "eth0") })
	<-entered // the release is being written
	run("x", func() (net.IP, error) { return first2(s.Allocate("x", "eth0", "")) })
	waitFor(t, "x applied", func() bool { _, ok := s.Get("x", "eth0"); return ok })
	run("y", func() (net.IP, error) { return first2(s.Allocate("y", "eth0", "")) })
	waitFor(t, "y applied", func() bool { _, ok := s.Get("y", "eth0"); return ok })
	if l, _ := s.Get("y", "eth0"); one(l.IPs).String() != "10.0.0.2" {
		t.Fatalf("y got %v in memory, want 10.0.0.2 (a's address, released in the batch being written)", one(l.IPs))
	}
	close(release)
	wg.Wait()
	for _, name := range []string{"release a", "x", "y"} {
		if errs[name] == nil {
			t.Errorf("%s succeeded (%v) although its write failed", name, got[name])
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if string(after) != string(before) {
		t.Errorf("lease file changed by a failed write:\n%s\nwant\n%s", after, before)
	}
	if l, ok := s.Get("a", "eth0"); !ok || one(l.IPs).String() != "10.0.0.2" {
		t.Errorf("lease a after the failed release = %v %v, want 10.0.0.2", one(l.IPs), ok)
	}
	for _, c := range []string{"x", "y"} {
		if _, ok := s.Get(c, "eth0"); ok {
			t.Errorf("failed allocation %s is still in memory", c)
		}
	}
	if s.InUse() != 4 {
		t.Errorf("InUse = %d after the failed batch, want 4", s.InUse())
	}
	// The cursor is rolled back too: the next address is .6, then .2 is full.
	if ip := alloc(t, s, "z", "eth0"); ip != "10.0.0.6" {
		t.Errorf("allocation after the failed batch = %s, want 10.0.0.6", ip)
	}
	if c := copyOpen(t, dir, "10.0.0.0/29", "10.0.0.1"); c != nil && c.InUse() != 5 {
		t.Errorf("lease file after recovery holds %d leases, want 5", c.InUse())
	}
}

// TestRetryWaitsForWrite: a retried Allocate of a key whose lease is still
// being written, and a repeated Release of a key whose release is still being
// written, return only after that write, with its result.
func TestRetryWaitsForWrite(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("writeFails=%v", fail), func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, "10.8.0.0/24", "10.8.0.1")
			gate := make(chan struct{}, 2) // one token lets one write through
			s.writeHook = func() error {
				<-gate
				if fail {
					return errors.New("injected write failure")
				}
				return nil
			}
			// waiters is how many callers wait on the write that holds key
			// a's lease, or its release.
			waiters := func() int {
				s.mu.Lock()
				defer s.mu.Unlock()
				if l, ok := s.byKey[key{"a", "eth0"}]; ok && l.pending != nil {
					return l.pending.waiters
				}
				if b := s.releasing[key{"a", "eth0"}]; b != nil {
					return b.waiters
				}
				return 0
			}
			errs := make(chan error, 2)
			for i := 0; i < 2; i++ {
				go func() {
					ip, err := first2(s.Allocate("a", "eth0", ""))
					if err == nil && ip.String() != "10.8.0.2" {
						err = fmt.Errorf("got %v, want 10.8.0.2", ip)
					}
					errs <- err
				}()
				waitFor(t, "caller waiting on the write", func() bool { return waiters() == i+1 })
			}
			gate <- struct{}{} // both callers wait on this one write
			for i := 0; i < 2; i++ {
				if err := <-errs; fail != (err != nil) {
					t.Fatalf("Allocate (call %d): %v, with writeFails=%v", i, err, fail)
				}
			}
			if fail {
				if s.InUse() != 0 {
					t.Errorf("InUse = %d, want 0", s.InUse())
				}
				return
			}
			if c := copyOpen(t, dir, "10.8.0.0/24", "10.8.0.1"); c != nil && c.InUse() != 1 {
				t.Errorf("lease file holds %d leases after both Allocates returned, want 1", c.InUse())
			}
			for i := 0; i < 2; i++ {
				go func() { errs <- s.Release("a", "eth0") }()
				waitFor(t, "releaser waiting on the write", func() bool { return waiters() == i+1 })
			}
			gate <- struct{}{}
			for i := 0; i < 2; i++ {
				if err := <-errs; err != nil {
					t.Errorf("Release (call %d): %v", i, err)
				}
			}
			if c := copyOpen(t, dir, "10.8.0.0/24", "10.8.0.1"); c != nil && c.InUse() != 0 {
				t.Errorf("lease file holds %d leases after both Releases returned, want 0", c.InUse())
			}
		})
	}
}

// TestNetworkRecordedAndPersisted: AllocateIn records the CNI network name in the lease,
// on disk too; Allocate records none (a lease of every network); a retry keeps the first.
func TestNetworkRecordedAndPersisted(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	if _, err := s.AllocateIn("a", "eth0", "ns/a", "net-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AllocateIn("a", "eth0", "ns/a", "net-b"); err != nil {
		t.Fatal(err)
	}
	alloc(t, s, "old", "eth0")
	s.Close()
	s = openT(t, dir, "10.128.0.0/24", "10.128.0.1")
	if l, ok := s.Get("a", "eth0"); !ok || l.Network != "net-a" {
		t.Errorf("lease of a after reopen: %+v, want network net-a", l)
	}
	if l, ok := s.Get("old", "eth0"); !ok || l.Network != "" {
		t.Errorf("lease of old after reopen: %+v, want no network", l)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"network":"net-a"`) || strings.Count(string(b), `"network"`) != 1 {
		t.Errorf("lease file holds the network once, for a only:\n%s", b)
	}
}

// TestRestore: a lost lease is re-created at its address, durably; the address of
// another attachment, a reserved or foreign address, or a second address for the key
// are refused; a repeated Restore is a no-op; Allocate never hands a restored address
// out again.
func TestRestore(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.128.0.0/29", "10.128.0.1")
	ip := net.ParseIP("10.128.0.4")
	if err := s.Restore(Lease{IPs: []net.IP{ip}, ContainerID: "p", IfName: "eth0", Owner: "ns/p", Network: "net-a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(Lease{IPs: []net.IP{ip}, ContainerID: "p", IfName: "eth0"}); err != nil {
		t.Errorf("repeated Restore: %v", err)
	}
	for _, bad := range []Lease{
		{IPs: []net.IP{ip}, ContainerID: "q", IfName: "eth0"},                        // another holder
		{IPs: []net.IP{net.ParseIP("10.128.0.5")}, ContainerID: "p", IfName: "eth0"}, // second address
		{IPs: []net.IP{net.ParseIP("10.128.0.1")}, ContainerID: "r", IfName: "eth0"}, // reserved
		{IPs: []net.IP{net.ParseIP("10.128.0.7")}, ContainerID: "r", IfName: "eth0"}, // broadcast
		{IPs: []net.IP{net.ParseIP("10.9.0.2")}, ContainerID: "r", IfName: "eth0"},   // outside
		{IPs: []net.IP{net.ParseIP("10.128.0.3")}, ContainerID: "", IfName: "eth0"},  // no key
		{IPs: []net.IP{net.ParseIP("fd00::3")}, ContainerID: "r", IfName: "eth0"},    // not IPv4
		{IPs: []net.IP{net.ParseIP("10.128.0.0")}, ContainerID: "r", IfName: "eth0"}, // network
	} {
		if err := s.Restore(bad); err == nil {
			t.Errorf("Restore(%+v) accepted", bad)
		}
	}
	s.Close()
	s = openT(t, dir, "10.128.0.0/29", "10.128.0.1")
	if l, ok := s.Get("p", "eth0"); !ok || !one(l.IPs).Equal(ip) || l.Network != "net-a" || l.Owner != "ns/p" {
		t.Fatalf("restored lease after reopen: %+v", l)
	}
	for i := 0; i < 4; i++ { // .2 .3 .5 .6: everything but the restored .4
		got := alloc(t, s, fmt.Sprint("n", i), "eth0")
		if got == ip.String() {
			t.Fatalf("Allocate handed out the restored address %s", got)
		}
	}
	if _, err := s.Allocate("full", "eth0", ""); err == nil {
		t.Error("pool of 5 with one restored lease and 4 allocations still allocates")
	}
}

// onDisk returns the addresses leases.json holds.
func onDisk(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "ipam", stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeState(data)
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, l := range st.leases {
		ips = append(ips, st.pools[0].ip(l.off[0]).String())
	}
	sort.Strings(ips)
	return ips
}

// Reserve hands the address out while its write is still running (the caller overlaps
// its own work with the write), durable reports the write; a failed write leaves no lease
// (the address is handed out again, Release is a no-op), and a Release of a lease whose
// write is running ends with the lease on disk neither.
func TestReserve(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "10.5.0.0/24", "10.5.0.1")
	entered := make(chan struct{}, 1)
	release := make(chan error)
	s.writeHook = func() error {
		entered <- struct{}{}
		return <-release
	}

	// The write is held: Reserve has returned, memory has the lease, the disk not yet.
	ip, durable, err := first3(s.Reserve("a", "eth0", "ns/a", "net-a"))
	if err != nil || ip.String() != "10.5.0.2" {
		t.Fatalf("Reserve = %v, %v; want 10.5.0.2", ip, err)
	}
	<-entered
	if l, ok := s.Get("a", "eth0"); !ok || !one(l.IPs).Equal(ip) || l.Network != "net-a" {
		t.Errorf("Get during the write = %+v, %v; want the reserved lease", l, ok)
	}
	if got := onDisk(t, dir); len(got) != 0 {
		t.Errorf("leases.json holds %v before the write was let through", got)
	}
	// A retried ADD of the key gets the same address and waits for the same write.
	ip2, durable2, err := first3(s.Reserve("a", "eth0", "", ""))
	if err != nil || !ip2.Equal(ip) {
		t.Errorf("second Reserve = %v, %v; want %v", ip2, err, ip)
	}
	release <- nil
	if err := durable(); err != nil {
		t.Fatalf("durable: %v", err)
	}
	if err := durable2(); err != nil {
		t.Errorf("durable of the retry: %v", err)
	}
	if got := onDisk(t, dir); !reflect.DeepEqual(got, []string{"10.5.0.2"}) {
		t.Errorf("leases.json holds %v after durable, want [10.5.0.2]", got)
	}
	if _, d, _ := s.Reserve("a", "eth0", "", ""); d() != nil {
		t.Error("durable of a key already on disk failed")
	}

	// A failed write: durable says so, the lease is gone, Release is a no-op, and the
	// address goes to the next caller.
	ip, durable, err = first3(s.Reserve("b", "eth0", "ns/b", ""))
	if err != nil || ip.String() != "10.5.0.3" {
		t.Fatalf("Reserve b = %v, %v", ip, err)
	}
	<-entered
	release <- errors.New("injected write failure")
	if err := durable(); err == nil || !strings.Contains(err.Error(), "injected write failure") {
		t.Errorf("durable = %v, want the write's error", err)
	}
	if l, ok := s.Get("b", "eth0"); ok {
		t.Errorf("lease %+v kept after its write failed", l)
	}
	if err := s.Release("b", "eth0"); err != nil {
		t.Errorf("Release after a failed write: %v", err)
	}
	ip, durable, _ = first3(s.Reserve("c", "eth0", "", ""))
	<-entered
	release <- nil
	if err := durable(); err != nil || ip.String() != "10.5.0.3" {
		t.Errorf("Reserve c = %v (durable %v), want 10.5.0.3 again", ip, err)
	}

	// Release while the lease's write runs: both end, the disk holds neither.
	_, durable, _ = s.Reserve("d", "eth0", "", "")
	<-entered
	relErr := make(chan error)
	go func() { relErr <- s.Release("d", "eth0") }()
	release <- nil // the write of d's lease
	if err := durable(); err != nil {
		t.Errorf("durable of d: %v", err)
	}
	<-entered
	release <- nil // the write of its release
	if err := <-relErr; err != nil {
		t.Errorf("Release of d: %v", err)
	}
	if got := onDisk(t, dir); !reflect.DeepEqual(got, []string{"10.5.0.2", "10.5.0.3"}) {
		t.Errorf("leases.json holds %v, want a's and c's only", got)
	}
	s.writeHook = nil
}

// BenchmarkSnapshot renders leases.json for 500 leases, what the flusher does on every
// ADD and DEL of a node with 500 pods.
func BenchmarkSnapshot(b *testing.B) {
	s, err := Open(b.TempDir(), []*net.IPNet{mustCIDR(b, "10.128.0.0/22")}, net.ParseIP("10.128.0.1"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := range 500 {
		if _, err := s.Allocate(fmt.Sprintf("c%d", i), "eth0", "ns/p"); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		s.mu.Lock()
		data, err := s.encodeState()
		s.mu.Unlock()
		if err != nil || len(data) == 0 {
			b.Fatal(err)
		}
	}
}
