package ovsdb_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/ovsdb"
)

// TestReserveOFPort chooses ofports for concurrent port inserts on a real ovs-vswitchd:
// every port gets the number it asked for (ovs-vswitchd's own count, via ovs-vsctl), all
// in the upper half and distinct; a number another interface holds, as ofport_request or
// as ofport, is never chosen; a port that exists keeps its number; a number freed is not
// handed out again at once.
func TestReserveOFPort(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	// The first choice on an empty bridge is the first of the upper half.
	first, release, err := c.ReserveOFPort("ofs-first")
	if err != nil || first != ovsdb.MinChosenOFPort {
		t.Fatalf("first ReserveOFPort = %d, %v; want %d", first, err, ovsdb.MinChosenOFPort)
	}
	release()
	// Another controller's port, created behind the client's back, asking for the next
	// number, 32769: it must be skipped.
	other := veth(t, o, "ofs-other")
	o.Vsctl(t, "add-port", bridge, other, "--", "set", "Interface", other, "ofport_request=32769")
	eventually(t, "the other port in the cache", 10*time.Second, func() bool {
		p, ok := c.GetPort(other)
		return ok && p.OFPort == 32769
	})

	const n = 8
	devs := veths(t, o, "ofs-r", n)
	chosen := make([]int, n)
	got := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, release, err := c.ReserveOFPort(devs[i])
			if err != nil {
				errs[i] = err
				return
			}
			defer release()
			chosen[i] = req
			got[i], errs[i] = c.AddPortWithOFPort(ctxT(t), bridge, devs[i], req, nil)
		}()
	}
	wg.Wait()
	seen := map[int]string{}
	for i, dev := range devs {
		if errs[i] != nil {
			t.Fatalf("port %s: %v", dev, errs[i])
		}
		vs := vsctlInt(t, o, "get", "interface", dev, "ofport")
		if got[i] != chosen[i] || vs != chosen[i] {
			t.Errorf("port %s asked for ofport %d, AddPortWithOFPort says %d, ovs-vsctl %d", dev, chosen[i], got[i], vs)
		}
		if chosen[i] <= first || chosen[i] > ovsdb.MaxOFPortRequest || chosen[i] == 32769 {
			t.Errorf("port %s: chosen ofport %d outside %d..%d or the other controller's 32769", dev, chosen[i], first+1, ovsdb.MaxOFPortRequest)
		}
		if prev, dup := seen[chosen[i]]; dup {
			t.Errorf("ofport %d chosen for both %s and %s", chosen[i], prev, dev)
		}
		seen[chosen[i]] = dev
	}

	// A port that exists keeps its number.
	if again, release, err := c.ReserveOFPort(devs[0]); err != nil || again != chosen[0] {
		t.Errorf("ReserveOFPort(%s) of an existing port = %d, %v; want its ofport %d", devs[0], again, err, chosen[0])
	} else {
		release()
	}

	// A freed number is not handed out again at once; the next one follows the last.
	last := 0
	for _, v := range chosen {
		last = max(last, v)
	}
	if err := c.DeletePort(ctxT(t), bridge, devs[0]); err != nil {
		t.Fatal(err)
	}
	next, release, err := c.ReserveOFPort("ofs-next")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if next == chosen[0] || next <= last {
		t.Errorf("after freeing %d (last chosen %d) ReserveOFPort gave %d; want a number after the last", chosen[0], last, next)
	}
	// Held numbers are not handed out twice; released ones are.
	a, releaseA, _ := c.ReserveOFPort("ofs-a")
	b, releaseB, _ := c.ReserveOFPort("ofs-b")
	if a == b {
		t.Errorf("two held reservations share ofport %d", a)
	}
	releaseA()
	releaseA() // idempotent
	releaseB()
}

// TestReserveOFPortAfterConnect checks that a new client (a restarted daemon) starts after
// the highest chosen number in use, so it does not hand out a number just freed by the
// previous one.
func TestReserveOFPortAfterConnect(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	dev := veth(t, o, "ofs-keep")
	if got, err := c.AddPortWithOFPort(ctxT(t), bridge, dev, 40000, nil); err != nil || got != 40000 {
		t.Fatalf("AddPortWithOFPort(40000) = %d, %v", got, err)
	}
	c2 := connect(t, o)
	next, release, err := c2.ReserveOFPort("ofs-new")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if next != 40001 {
		t.Errorf("a new client's first choice with 40000 in use: %d, want 40001", next)
	}
}
