package podnet

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// TestTeardownConcurrentShareOneDelete: deletions arriving while one is in flight are
// made together by one RTM_DELLINK of a link group; every pair is gone when its Teardown
// returns, and a bad member of the batch (a host link that is not a veth) fails alone and
// is left in place, as is a link of the namespace that is not in the batch.
func TestTeardownConcurrentShareOneDelete(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	const n = 6
	var specs []Spec
	for i := 0; i <= n; i++ {
		s := testSpec(t, pod, fmt.Sprintf("container-reap-%d", i))
		s.IfName = fmt.Sprintf("eth%d", i)
		s.HostVeth = HostVethName(fmt.Sprintf("container-reap-%d", i), s.IfName)
		s.Addr = cidr(t, fmt.Sprintf("10.200.0.%d/24", 10+i))
		if _, err := setupIn(t, host, s); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	in(t, host, func() error { return netlink.LinkAdd(newTap("ofsnotveth")) })
	in(t, host, func() error { return netlink.LinkAdd(newTap("ofsbystander")) })

	// Hold the first deletion until every other one has queued behind it.
	var mu sync.Mutex
	var batches [][]string
	queued := make(chan struct{})
	testHookReap = func(names []string) {
		mu.Lock()
		batches = append(batches, names)
		first := len(batches) == 1
		mu.Unlock()
		if first {
			<-queued
		}
	}
	t.Cleanup(func() { testHookReap = nil })
	before := groupDeleteCount()

	errs := make([]error, n+2)
	var wg sync.WaitGroup
	run := func(i int, name string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = host.Do(func(ns.NetNS) error { return Teardown(name, pod.Path(), "eth") })
		}()
	}
	run(0, specs[0].HostVeth)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(batches) == 1 })
	for i := 1; i <= n; i++ {
		run(i, specs[i].HostVeth)
	}
	run(n+1, "ofsnotveth")
	waitFor(t, func() bool {
		for _, r := range reapersSnapshot() {
			r.mu.Lock()
			l := len(r.queue)
			r.mu.Unlock()
			if l == n+1 {
				return true
			}
		}
		return false
	})
	close(queued)
	wg.Wait()

	for i := 0; i <= n; i++ {
		if errs[i] != nil {
			t.Errorf("Teardown %s: %v", specs[i].HostVeth, errs[i])
		}
	}
	if errs[n+1] == nil || !strings.Contains(errs[n+1].Error(), "ofsnotveth") {
		t.Errorf("Teardown of a tap: %v, want an error naming it", errs[n+1])
	}
	if len(batches) != 2 || len(batches[1]) != n+1 {
		t.Errorf("batches %v, want the first alone, then the other %d together", batches, n+1)
	}
	if got := groupDeleteCount() - before; got != 1 {
		t.Errorf("%d RTM_DELLINKs by group, want 1", got)
	}
	in(t, host, func() error {
		for _, s := range specs {
			if HostVethExists(s.HostVeth) {
				t.Errorf("host veth %s still exists", s.HostVeth)
			}
		}
		for _, name := range []string{"ofsnotveth", "ofsbystander"} {
			if _, err := netlink.LinkByName(name); err != nil {
				t.Errorf("link %s that was not ours to delete is gone: %v", name, err)
			}
		}
		return nil
	})
	in(t, pod, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "eth") {
				t.Errorf("pod end %s still exists", l.Attrs().Name)
			}
		}
		return nil
	})
}

func reapersSnapshot() []*reaper {
	reapersMu.Lock()
	defer reapersMu.Unlock()
	var out []*reaper
	for _, r := range reapers {
		out = append(out, r)
	}
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached in 10 s")
}

func groupDeleteCount() int {
	groupDeletes.Lock()
	defer groupDeletes.Unlock()
	return groupDeletes.n
}
