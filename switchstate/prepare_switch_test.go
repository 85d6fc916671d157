package switchstate

// Pipelined changes (Store.Prepare, Prepared.Commit) against a real, private Open vSwitch:
// a change prepared while the one before it is not committed yet is diffed against the
// state that one leaves; when the switch refuses the first at commit, the second is
// discarded and neither is on the switch or in the store; a connection cut before the
// commits leaves the store as it was and its locks free for the next Sync.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

func TestPreparedPipelineOnSwitch(t *testing.T) {
	ovs, sw := ofTestBridge(t, openflow.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := New()
	if err := store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	ownerX := flows.Owner{Kind: flows.OwnerPipeline, ID: 11}
	ownerY := flows.Owner{Kind: flows.OwnerPipeline, ID: 12}
	ownerZ := flows.Owner{Kind: flows.OwnerPipeline, ID: 13}
	flow := func(o flows.Owner, inPort uint32, a flows.Action) flows.Flow {
		c, _ := o.Cookie()
		return flows.Flow{Table: 0, Priority: 100, Cookie: flows.Cookie(c), Match: flows.Match{InPort: inPort}, Actions: []flows.Action{a}}
	}
	// The store and the switch hold the same flows, and the audit finds nothing to do.
	same := func(when string) {
		t.Helper()
		want := cookieCounts(store.All())
		if got := switchCookieCounts(t, ovs); !sameCounts(got, want) {
			t.Fatalf("%s the switch has\n%sthe store wants\n%s", when, fmtCounts(got), fmtCounts(want))
		}
		if res, err := store.Audit(ctx, 0, 0); err != nil || len(res.Repairs()) != 0 {
			t.Fatalf("%s the audit: %+v, %v; want nothing to repair", when, res, err)
		}
	}

	// 1. p2 prepared while p1 is open: it changes f1 and deletes f2, both only in p1.
	// Diffed against the store's confirmed state (without p1) the delete of f2 would be
	// an unknown key, ignored, and f2 would stay on the switch.
	f1 := flow(ownerX, 1, flows.Drop{})
	f2 := flow(ownerX, 2, flows.Drop{})
	f1b := flow(ownerX, 1, flows.Output{Port: 7})
	g1 := flow(ownerY, 3, flows.Drop{})
	p1, err := store.Prepare(ctx, []OwnerUpdate{{Owner: ownerX, Replace: true, Flows: []flows.Flow{f1, f2}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := store.Prepare(ctx, []OwnerUpdate{
		{Owner: ownerX, Flows: []flows.Flow{f1b}, Delete: []string{f2.MatchKey()}},
		{Owner: ownerY, Flows: []flows.Flow{g1}},
	}, p1)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(switchCookieCounts(t, ovs)); got != 0 {
		t.Fatalf("flows of %d owners on the switch before any commit", got)
	}
	if err := p1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if fs, _ := store.Owner(ownerX); len(fs) != 1 || fs[0].String() != f1b.String() {
		t.Fatalf("owner X in the store after both commits: %v; want only %s", fs, f1b)
	}
	same("after two pipelined commits")

	// 2. The switch refuses p3 at commit (a flow naming a group it lacks:
	// OFPBAC_BAD_OUT_GROUP, the bundle rolled back); p4, prepared after p3, is discarded.
	bad := flow(ownerZ, 4, flows.GroupAction{ID: flows.GroupIDMin + 50})
	p3, err := store.Prepare(ctx, []OwnerUpdate{{Owner: ownerZ, Flows: []flows.Flow{bad}}, {Owner: ownerY, Replace: true}}, nil)
	if err != nil {
		t.Fatalf("prepare of the change the switch refuses at commit: %v", err)
	}
	f3 := flow(ownerX, 5, flows.Drop{})
	p4, err := store.Prepare(ctx, []OwnerUpdate{{Owner: ownerX, Replace: true, Flows: []flows.Flow{f3}}}, p3)
	if err != nil {
		t.Fatal(err)
	}
	if err := p3.Commit(ctx); err == nil {
		t.Fatal("the switch took a flow naming a missing group")
	}
	if err := p4.Commit(ctx); err == nil {
		t.Fatal("a change prepared after a refused one was committed")
	}
	if _, ok := store.Owner(ownerZ); ok {
		t.Fatal("the refused change's owner is in the store")
	}
	if fs, _ := store.Owner(ownerY); len(fs) != 1 {
		t.Fatalf("owner Y in the store after the refused change: %v; want its flow kept", fs)
	}
	same("after a refused commit and the discarded change behind it")
	// The discarded change goes through on its own.
	if err := store.Update(ctx, []OwnerUpdate{{Owner: ownerX, Replace: true, Flows: []flows.Flow{f3}}}); err != nil {
		t.Fatal(err)
	}
	same("after the discarded change sent again")

	// 3. The connection is cut with two changes prepared: both fail, the store keeps its
	// state, and the next connection's Sync (which needs the store's locks) goes through.
	before := cookieCounts(store.All())
	p5, err := store.Prepare(ctx, []OwnerUpdate{{Owner: ownerX, Replace: true, Flows: []flows.Flow{f1}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p6, err := store.Prepare(ctx, []OwnerUpdate{{Owner: ownerY, Replace: true}}, p5)
	if err != nil {
		t.Fatal(err)
	}
	sw.Close()
	if err := p5.Commit(ctx); !errors.Is(err, openflow.ErrDisconnected) {
		t.Fatalf("commit over a closed connection: %v; want ErrDisconnected", err)
	}
	if err := p6.Commit(ctx); err == nil {
		t.Fatal("a change prepared after a failed one was committed")
	}
	if got := cookieCounts(store.All()); !sameCounts(got, before) {
		t.Fatalf("the store after the cut holds\n%swant as before\n%s", fmtCounts(got), fmtCounts(before))
	}
	c2, err := openflow.Dial(ctx, ovs.MgmtSocket("br-int"), openflow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	synced := make(chan error, 1)
	go func() {
		synced <- store.Sync(ctx, c2, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow"}}, nil)
	}()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Sync on a new connection waited 20 s: the failed changes kept the store's locks")
	}
	same("after the cut and the next connection's Sync")
}
