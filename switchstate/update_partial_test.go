package switchstate

import (
	"context"
	"math/rand"
	"net"
	"reflect"
	"sort"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
)

// TestUpdatePartialSendsTheSameAsAFullDiff: an Update without Replace diffs only the flows
// it names (issue 21: the policy owner holds thousands of rule flows and each runner round
// changes a few), and must send exactly what comparing the owner's whole state would: the
// ADDs of new and changed flows, the strict deletes of named flows the owner had, nothing
// for unchanged ones or unknown deletes; an owner named twice in one Update takes both
// parts, and a Replace part among them still diffs the whole owner. A model (the owner's
// flows by MatchKey) checks each step's ops and the store's state after it.
func TestUpdatePartialSendsTheSameAsAFullDiff(t *testing.T) {
	cfg := storeTestConfig()
	c := &fakeConn{}
	s := New()
	if err := s.Sync(context.Background(), c, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.take()
	o := flows.PolicyOwner(0)
	table, _ := flows.StageTable(flows.StageIngressRules)
	flow := func(i, variant int) flows.Flow {
		_, ip, _ := net.ParseCIDR(net.IPv4(10, 251, byte(i/200), byte(i%200+1)).String() + "/32")
		f := flows.Flow{Table: table, Priority: flows.PriorityPolicyRule, Match: flows.Match{EthType: flows.EthTypeIPv4, IPSrc: ip},
			Actions: []flows.Action{flows.Conjunction{ID: uint32(1 + variant), Clause: 2, NClauses: 3}}}
		f.Cookie = flows.NewCookie(cfg.Generation, o.Kind, o.ID)
		return f
	}
	model := map[string]flows.Flow{}
	r := rand.New(rand.NewSource(21))
	var all []flows.Flow
	for i := 0; i < 600; i++ {
		all = append(all, flow(i, 0))
	}
	if err := s.Update(context.Background(), []OwnerUpdate{{Owner: o, Replace: true, Flows: all}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range all {
		model[f.MatchKey()] = f
	}
	c.take()
	kinds := map[string]int{}
	for step := 0; step < 300; step++ {
		var ups []OwnerUpdate
		next := map[string]flows.Flow{}
		for k, f := range model {
			next[k] = f
		}
		for part := 0; part < 1+r.Intn(2); part++ {
			u := OwnerUpdate{Owner: o}
			if r.Intn(25) == 0 {
				u.Replace = true
				next = map[string]flows.Flow{}
				kinds["replace"]++
			}
			for n := r.Intn(6); n > 0; n-- {
				f := flow(r.Intn(700), r.Intn(3)) // new (600..699), changed or the same
				u.Flows = append(u.Flows, f)
			}
			if !u.Replace {
				for n := r.Intn(4); n > 0; n-- {
					u.Delete = append(u.Delete, flow(r.Intn(700), 0).MatchKey()) // some unknown
				}
				for _, k := range u.Delete {
					delete(next, k)
				}
			}
			for _, f := range u.Flows {
				next[f.MatchKey()] = f
			}
			ups = append(ups, u)
		}
		if len(ups) > 1 {
			kinds["owner twice"]++
		}
		var want []string
		for k, f := range next {
			if old, ok := model[k]; !ok || old.String() != f.String() {
				want = append(want, "ADD "+o.String()+": "+f.String())
			}
		}
		for k, f := range model {
			if _, ok := next[k]; !ok {
				want = append(want, "DELETE_STRICT "+o.String()+": delete "+f.String())
			}
		}
		if err := s.Update(context.Background(), ups); err != nil {
			t.Fatal(err)
		}
		_, calls := c.take()
		var got []string
		for _, call := range calls {
			got = append(got, call...)
		}
		if !reflect.DeepEqual(sorted(got), sorted(want)) {
			t.Fatalf("step %d: Update %+v sent %v, want %v", step, ups, sorted(got), sorted(want))
		}
		if len(want) == 0 {
			kinds["nothing to send"]++
		}
		model = next
		have, _ := s.Owner(o)
		var hs, ms []string
		for _, f := range have {
			hs = append(hs, f.String())
		}
		for _, f := range model {
			ms = append(ms, f.String())
		}
		sort.Strings(hs)
		sort.Strings(ms)
		if !reflect.DeepEqual(hs, ms) {
			t.Fatalf("step %d: the store holds %d flows, the model %d", step, len(hs), len(ms))
		}
	}
	for _, k := range []string{"replace", "owner twice", "nothing to send"} {
		if kinds[k] == 0 {
			t.Errorf("no %q step: the walk is degenerate", k)
		}
	}
}

// TestLazyChangeFailedOrChainedKeepsTheStore: a change that names its flows is recorded
// without copying the owner's other flows (a lazy state laid over the stored one). A
// change the switch refuses leaves the stored flows exactly as they were (nothing of it
// applied to the map it lies over), and a change prepared over another one's uncommitted
// state (pipelining) is recorded with both, after both commit; a chained change whose
// predecessor failed is discarded and changes nothing.
func TestLazyChangeFailedOrChainedKeepsTheStore(t *testing.T) {
	cfg := storeTestConfig()
	ctx := context.Background()
	c := &fakeConn{}
	s := New()
	if err := s.Sync(ctx, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	o := flows.PolicyOwner(0)
	table, _ := flows.StageTable(flows.StageIngressRules)
	flow := func(i, variant int) flows.Flow {
		_, ip, _ := net.ParseCIDR(net.IPv4(10, 252, 0, byte(i+1)).String() + "/32")
		f := flows.Flow{Table: table, Priority: flows.PriorityPolicyRule, Match: flows.Match{EthType: flows.EthTypeIPv4, IPSrc: ip},
			Actions: []flows.Action{flows.Conjunction{ID: uint32(1 + variant), Clause: 2, NClauses: 3}}}
		f.Cookie = flows.NewCookie(cfg.Generation, o.Kind, o.ID)
		return f
	}
	held := func() map[string]string {
		fs, _ := s.Owner(o)
		m := map[string]string{}
		for _, f := range fs {
			m[f.MatchKey()] = f.String()
		}
		return m
	}
	want := func(fs ...flows.Flow) map[string]string {
		m := map[string]string{}
		for _, f := range fs {
			m[f.MatchKey()] = f.String()
		}
		return m
	}
	if err := s.Update(ctx, []OwnerUpdate{{Owner: o, Replace: true, Flows: []flows.Flow{flow(0, 0), flow(1, 0), flow(2, 0)}}}); err != nil {
		t.Fatal(err)
	}

	// Refused: flow 1 changed, flow 2 deleted, flow 3 added; the store keeps 0, 1, 2.
	c.failOn = "bundle"
	err := s.Update(ctx, []OwnerUpdate{{Owner: o, Flows: []flows.Flow{flow(1, 1), flow(3, 0)}, Delete: []string{flow(2, 0).MatchKey()}}})
	if err == nil {
		t.Fatal("Update succeeded although the switch refused its bundle")
	}
	if got, w := held(), want(flow(0, 0), flow(1, 0), flow(2, 0)); !reflect.DeepEqual(got, w) {
		t.Fatalf("after a refused change the store holds %v, want %v", got, w)
	}

	// Chained: p2 over p1's uncommitted state; both commit: the store holds both.
	p1, err := s.Prepare(ctx, []OwnerUpdate{{Owner: o, Flows: []flows.Flow{flow(1, 2)}, Delete: []string{flow(0, 0).MatchKey()}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Prepare(ctx, []OwnerUpdate{{Owner: o, Flows: []flows.Flow{flow(4, 0)}, Delete: []string{flow(1, 2).MatchKey()}}}, p1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, w := held(), want(flow(1, 2), flow(2, 0)); !reflect.DeepEqual(got, w) {
		t.Fatalf("after the first of two chained changes the store holds %v, want %v", got, w)
	}
	if err := p2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, w := held(), want(flow(2, 0), flow(4, 0)); !reflect.DeepEqual(got, w) {
		t.Fatalf("after both chained changes the store holds %v, want %v", got, w)
	}

	// Chained over a refused change: the second is discarded, the store unchanged.
	p3, err := s.Prepare(ctx, []OwnerUpdate{{Owner: o, Flows: []flows.Flow{flow(5, 0)}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p4, err := s.Prepare(ctx, []OwnerUpdate{{Owner: o, Flows: []flows.Flow{flow(6, 0)}, Delete: []string{flow(2, 0).MatchKey()}}}, p3)
	if err != nil {
		t.Fatal(err)
	}
	c.failOn = "bundle"
	if err := p3.Commit(ctx); err == nil {
		t.Fatal("p3 committed although the switch refused it")
	}
	if err := p4.Commit(ctx); err == nil {
		t.Fatal("p4 committed although the change it was prepared over failed")
	}
	if got, w := held(), want(flow(2, 0), flow(4, 0)); !reflect.DeepEqual(got, w) {
		t.Fatalf("after a refused change and the one chained over it the store holds %v, want %v", got, w)
	}
}
