package ovsdb_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/ovsdb"
)

// Ports of two bridges (br-int and an underlay bridge) added and deleted concurrently, so
// their Bridge.ports mutates share group-commit transactions: each port ends on its own
// bridge, the other bridge's ports are untouched, a delete naming the wrong bridge is
// refused and changes nothing; then the underlay bridge is deleted behind the client's
// back and re-created, and its ports can be added again.
func TestPortsOnTwoBridgesConcurrently(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	const ul = "br-ul"
	ulSpec := ovsdb.BridgeSpec{Name: ul, DatapathType: ovsdb.DatapathNetdev, FailMode: "secure", Protocols: []string{"OpenFlow13"}}
	if err := c.EnsureBridge(ctxT(t), ulSpec); err != nil {
		t.Fatal(err)
	}
	const n = 12
	a := veths(t, o, "ofs-a", n)
	b := veths(t, o, "ofs-b", n)
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := c.AddPort(ctxT(t), bridge, a[i], nil); err != nil {
				errs <- fmt.Errorf("add %s: %w", a[i], err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := c.AddPort(ctxT(t), ul, b[i], nil); err != nil {
				errs <- fmt.Errorf("add %s: %w", b[i], err)
			}
		}()
	}
	wg.Wait()
	// Half of each deleted, concurrently with adds of the other halves again (idempotent).
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				err = c.DeletePort(ctxT(t), bridge, a[i])
			} else {
				_, err = c.AddPort(ctxT(t), bridge, a[i], nil)
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", a[i], err)
			}
		}()
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 1 {
				err = c.DeletePort(ctxT(t), ul, b[i])
			} else {
				_, err = c.AddPort(ctxT(t), ul, b[i], nil)
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", b[i], err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var wantA, wantB []string
	for i := 0; i < n; i++ {
		if i%2 == 1 {
			wantA = append(wantA, a[i])
		} else {
			wantB = append(wantB, b[i])
		}
	}
	sort.Strings(wantA)
	sort.Strings(wantB)
	check := func(step, br string, want []string) {
		t.Helper()
		got := strings.Fields(o.Vsctl(t, "list-ports", br))
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: ports of %s %v, want %v", step, br, got, want)
		}
	}
	check("after the races", bridge, wantA)
	check("after the races", ul, wantB)
	// A delete naming the wrong bridge is refused and changes neither.
	if err := c.DeletePort(ctxT(t), bridge, b[0]); err == nil || !strings.Contains(err.Error(), ul) {
		t.Errorf("DeletePort of %s (on %s) from %s: %v, want an error naming %s", b[0], ul, bridge, err, ul)
	}
	if _, err := c.AddPort(ctxT(t), bridge, b[0], nil); err == nil {
		t.Errorf("AddPort of %s (on %s) to %s succeeded", b[0], ul, bridge)
	}
	check("after the wrong-bridge calls", bridge, wantA)
	check("after the wrong-bridge calls", ul, wantB)

	// The underlay bridge deleted behind the client's back: an add to it fails (never
	// reports a port that is not there); re-created, its ports can be added again.
	o.Vsctl(t, "del-br", ul)
	if _, err := c.AddPort(ctxT(t), ul, b[1], nil); err == nil {
		t.Errorf("AddPort to the deleted %s succeeded; ovs-vsctl: %s", ul, o.Vsctl(t, "show"))
	} else if !errors.Is(err, ovsdb.ErrUnavailable) {
		t.Logf("AddPort to the deleted %s: %v", ul, err)
	}
	if err := c.EnsureBridge(ctxT(t), ulSpec); err != nil {
		t.Fatal(err)
	}
	for _, d := range wantB {
		if _, err := c.AddPort(ctxT(t), ul, d, nil); err != nil {
			t.Fatalf("AddPort %s to the re-created %s: %v", d, ul, err)
		}
	}
	check("after the re-creation", ul, wantB)
	check("after the re-creation", bridge, wantA)
	for _, d := range wantB {
		if err := c.DeletePort(ctxT(t), ul, d); err != nil {
			t.Fatal(err)
		}
	}
	check("after the deletes", ul, nil)
	check("after the deletes", bridge, wantA)
}

// A bridge deleted after a port's transaction committed and before ovs-vswitchd gave
// the port an ofport (an administrator's del-br, or the node's bridge rebuilt) takes the
// port with it: AddPort answers at once that the bridge went (ErrUnavailable, which the
// daemon's ADD answers with CNI error 11), instead of waiting for an ofport that cannot
// come until its caller's deadline (addTimeout, 60 s, for a pod's ADD). ovs-vswitchd is
// held (SIGSTOP) so that no ofport is assigned before the bridge goes.
func TestAddPortFailsAtOnceWhenItsBridgeGoes(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	const ul = "br-gone"
	if err := c.EnsureBridge(ctxT(t), ovsdb.BridgeSpec{Name: ul, DatapathType: ovsdb.DatapathNetdev, FailMode: "secure"}); err != nil {
		t.Fatal(err)
	}
	dev := veth(t, o, "ofs-gone")
	o.StopVswitchd(t)
	stopped := true
	defer func() {
		if stopped {
			o.ContVswitchd(t)
		}
	}()
	type result struct {
		ofport int
		err    error
		took   time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		p, err := c.AddPort(ctxT(t), ul, dev, nil)
		done <- result{p, err, time.Since(start)}
	}()
	// The port committed (its Interface row is in the database), without an ofport.
	deadline := time.Now().Add(10 * time.Second)
	for o.Vsctl(t, "--no-wait", "--columns=name", "find", "Interface", "name="+dev) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the port's Interface row never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the client's cache shows it too
	o.Vsctl(t, "--no-wait", "del-br", ul)
	select {
	case r := <-done:
		if r.err == nil {
			t.Fatalf("AddPort on %s, deleted meanwhile, returned ofport %d and no error", ul, r.ofport)
		}
		if !errors.Is(r.err, ovsdb.ErrUnavailable) || !strings.Contains(r.err.Error(), ul) {
			t.Errorf("AddPort on %s, deleted meanwhile: %v; want ErrUnavailable naming the bridge", ul, r.err)
		}
		t.Logf("AddPort answered after %v: %v", r.took.Round(time.Millisecond), r.err)
	case <-time.After(5 * time.Second):
		o.ContVswitchd(t)
		stopped = false
		r := <-done
		t.Fatalf("AddPort on %s, deleted meanwhile, still waiting 5 s after; it answered once ovs-vswitchd ran again, %v after it started: ofport %d, %v", ul, r.took.Round(time.Millisecond), r.ofport, r.err)
	}
}
