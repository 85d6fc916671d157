package switchstate

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// groupTestOwner is test owner i: a pod owner with address 10.0.0.i.
func groupTestOwner(i int) flows.Owner {
	return flows.Owner{Kind: flows.OwnerPod, ID: 0x0a000000 + uint32(i)}
}

// groupTestFlows are two flows of owner i, told apart by in_port, with its cookie.
func groupTestFlows(i int) []flows.Flow {
	cookie, _ := groupTestOwner(i).Cookie()
	return []flows.Flow{
		{Table: 0, Priority: 100, Cookie: flows.Cookie(cookie), Match: flows.Match{InPort: uint32(100 + i)}, Actions: []flows.Action{flows.Drop{}}},
		{Table: 0, Priority: 90, Cookie: flows.Cookie(cookie), Match: flows.Match{InPort: uint32(1000 + i)}, Actions: []flows.Action{flows.Drop{}}},
	}
}

// TestFlowStoreGroupCommit, against a real OVS: concurrent SetOwner calls share batches
// (fewer batches than owners, counted by the store), every owner's flows are on the switch
// afterwards, an owner whose flow the switch rejects fails alone and the error names it,
// and concurrent DeleteOwner calls remove exactly their owners' flows.
func TestFlowStoreGroupCommit(t *testing.T) {
	ovs, sw := ofTestBridge(t, openflow.Options{})
	s := New()
	if err := s.Sync(context.Background(), sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	dump := func(i int) []string {
		cookie, mask := groupTestOwner(i).Cookie()
		var lines []string
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", ovs.MgmtSocket("br-int"), fmt.Sprintf("cookie=%#x/%#x", cookie, mask)), "\n") {
			if strings.Contains(l, "cookie=") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	const n = 24
	bad := 7
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fs := groupTestFlows(i)
			if i == bad {
				// ipv4_dst without eth_type=0x0800: OFPBMC_BAD_PREREQ.
				_, dst, _ := net.ParseCIDR("10.9.9.9/32")
				fs = append(fs, flows.Flow{Table: 0, Priority: 80, Cookie: fs[0].Cookie, Match: flows.Match{IPDst: dst}, Actions: []flows.Action{flows.Drop{}}})
			}
			<-start
			errs[i] = s.SetOwner(context.Background(), groupTestOwner(i), fs)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if i == bad {
			if err == nil || !strings.Contains(err.Error(), groupTestOwner(bad).String()) || !strings.Contains(err.Error(), "BAD_PREREQ") {
				t.Errorf("SetOwner of the bad owner: %v, want a rejection naming %s and OFPBMC_BAD_PREREQ", err, groupTestOwner(bad))
			}
			continue
		}
		if err != nil {
			t.Errorf("SetOwner %s: %v", groupTestOwner(i), err)
		}
	}
	for i := 0; i < n; i++ {
		if i == bad {
			continue
		}
		if got := dump(i); len(got) != 2 {
			t.Errorf("%s has %d flows on the switch, want 2: %v", groupTestOwner(i), len(got), got)
		}
	}
	s.gmu.Lock()
	groups := s.batches
	s.gmu.Unlock()
	t.Logf("%d concurrent SetOwner calls went to the switch in %d batches (plus retries alone)", n, groups)
	if groups >= n {
		t.Errorf("%d SetOwner calls took %d batches, want fewer", n, groups)
	}

	for i := 0; i < n; i += 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.DeleteOwner(context.Background(), groupTestOwner(i))
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if i == bad { // its good flows may be on the switch (a rejected batch is not atomic)
			continue
		}
		want := 2
		if i%2 == 0 {
			want = 0
			if errs[i] != nil {
				t.Errorf("DeleteOwner %s: %v", groupTestOwner(i), errs[i])
			}
		}
		if got := dump(i); len(got) != want {
			t.Errorf("%s has %d flows after the deletes, want %d", groupTestOwner(i), len(got), want)
		}
	}
}
