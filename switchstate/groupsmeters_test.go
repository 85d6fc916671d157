package switchstate

// Unit tests with a fake connection of what the store sends for groups and meters: the
// order of one change (meters in a batch before the bundle, groups before the flows in
// it, deletes the other way round, removed meters after), the replay (meters add or
// modify by what the switch has, groups ADD_OR_MOD, stale ones of ofsdn's ranges
// deleted, foreign ones not), the refusals, and the audit's plan and repair order.

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// unitState is serviceState with its select group only.
func unitState() Desired {
	d := serviceState()
	d.Groups = d.Groups[:1]
	return d
}

// prefixes returns the first word (the command) of each recorded op.
func prefixes(ops []string) []string {
	var out []string
	for _, o := range ops {
		out = append(out, strings.Fields(o)[0])
	}
	return out
}

func TestChangeOrderMetersGroupsFlows(t *testing.T) {
	ctx := context.Background()
	c := &fakeConn{}
	s := New()
	if err := s.Sync(ctx, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.take()
	d := unitState()

	if err := s.Set(ctx, serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	kinds, calls := c.take()
	if !reflect.DeepEqual(kinds, []string{"apply", "bundle"}) {
		t.Fatalf("adding a meter, a group and flows sent %v %v; want a meter batch, then one bundle", kinds, calls)
	}
	if !reflect.DeepEqual(prefixes(calls[0]), []string{"METER_ADD"}) ||
		!reflect.DeepEqual(prefixes(calls[1]), []string{"GROUP_ADD_OR_MOD", "ADD", "ADD"}) {
		t.Fatalf("adding sent %v; want METER_ADD, then GROUP_ADD_OR_MOD before the flows", calls)
	}

	// Same state again: nothing. A changed group and meter: METER_MOD, GROUP_ADD_OR_MOD.
	if err := s.Set(ctx, serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	if _, calls := c.take(); len(calls) != 0 {
		t.Fatalf("the same state again sent %v", calls)
	}
	d.Groups[0].Buckets[0].Weight = 7
	d.Meters[0].Rate = 10
	if err := s.Set(ctx, serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	if _, calls := c.take(); len(calls) != 2 || !reflect.DeepEqual(prefixes(calls[0]), []string{"METER_MOD"}) || !reflect.DeepEqual(prefixes(calls[1]), []string{"GROUP_ADD_OR_MOD"}) {
		t.Fatalf("changed weight and rate sent %v; want METER_MOD, then GROUP_ADD_OR_MOD alone", calls)
	}

	// A failed bundle keeps the old state: the retry sends the same difference.
	d2 := Desired{Flows: d.Flows[1:]}
	c.fail = nil
	c.failOn = "bundle"
	if err := s.Set(ctx, serviceOwner, d2); err == nil {
		t.Fatal("Set ignored the failed bundle")
	}
	c.take()
	// Everything removed: flows, then the group, in the bundle; the meter after it.
	if err := s.Set(ctx, serviceOwner, d2); err != nil {
		t.Fatal(err)
	}
	kinds, calls = c.take()
	if !reflect.DeepEqual(kinds, []string{"bundle", "apply"}) || !reflect.DeepEqual(prefixes(calls[0]), []string{"DELETE_STRICT", "GROUP_DELETE"}) ||
		!reflect.DeepEqual(prefixes(calls[1]), []string{"METER_DELETE"}) {
		t.Fatalf("removing the group and meter sent %v %v; want a bundle (flow delete, group delete), then the meter delete", kinds, calls)
	}
	if st, _ := s.OwnerState(serviceOwner); len(st.Groups)+len(st.Meters) != 0 || len(st.Flows) != 1 {
		t.Fatalf("state after the removal: %+v", st)
	}

	// SetOwner changes flows only: the owner's group and meter stay.
	if err := s.Set(ctx, serviceOwner, unitState()); err != nil {
		t.Fatal(err)
	}
	c.take()
	if err := s.SetOwner(ctx, serviceOwner, nil); err != nil {
		t.Fatal(err)
	}
	if _, calls := c.take(); len(calls) != 1 || !reflect.DeepEqual(prefixes(calls[0]), []string{"DELETE_STRICT", "DELETE_STRICT"}) {
		t.Fatalf("SetOwner with no flows sent %v; want the two flow deletes only", calls)
	}
	if st, _ := s.OwnerState(serviceOwner); len(st.Groups) != 1 || len(st.Meters) != 1 {
		t.Fatalf("SetOwner dropped the owner's group or meter: %+v", st)
	}
	// DeleteOwner: flows by cookie, then the group, then the meter, in one batch.
	if err := s.DeleteOwner(ctx, serviceOwner); err != nil {
		t.Fatal(err)
	}
	if _, calls := c.take(); len(calls) != 1 || !reflect.DeepEqual(prefixes(calls[0]), []string{"DELETE", "GROUP_DELETE", "METER_DELETE"}) {
		t.Fatalf("DeleteOwner sent %v; want flows, group, meter deletes in that order", calls)
	}
}

func TestReplayOrderAndStaleGroupsAndMeters(t *testing.T) {
	ctx := context.Background()
	s := New()
	d := unitState()
	if err := s.LoadState(serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	s.Load(flows.PipelineOwner, []flows.Flow{{Table: 0, Priority: 1, Actions: []flows.Action{flows.Drop{}}}})
	// The switch still has meter 9 (a reconnect to the same ovs-vswitchd), a stale meter
	// 77 and group of ours, and a foreign meter 5000 and group 5.
	c := &fakeConn{meters: []uint32{9, 77, 5000},
		groups: []openflow.GroupDesc{{ID: 5}, {ID: flows.GroupIDMin + 99}, {ID: d.Groups[0].ID}}}
	pre := []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "pre"}}
	if err := s.Sync(ctx, c, pre, nil); err != nil {
		t.Fatal(err)
	}
	kinds, calls := c.take()
	if !reflect.DeepEqual(kinds, []string{"apply", "bundle", "apply"}) {
		t.Fatalf("replay sent %v %v; want meters, bundle, stale meters", kinds, calls)
	}
	if !reflect.DeepEqual(prefixes(calls[0]), []string{"METER_MOD"}) {
		t.Errorf("replay's meters %v: want METER_MOD of the meter the switch has", calls[0])
	}
	if got := prefixes(calls[1]); !reflect.DeepEqual(got, []string{"DELETE", "GROUP_ADD_OR_MOD", "ADD", "ADD", "ADD", "GROUP_DELETE"}) ||
		!strings.Contains(calls[1][5], "group_id=1048675") {
		t.Errorf("replay bundle %v: want pre, the group, the flows, the stale group's delete", calls[1])
	}
	if len(calls[2]) != 1 || calls[2][0] != "METER_DELETE stale: delete meter=77" {
		t.Errorf("after the bundle %v: want the stale meter 77 deleted, not the foreign 5000", calls[2])
	}

	// Meters the switch lacks are added.
	c2 := &fakeConn{}
	if err := s.Sync(ctx, c2, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, calls := c2.take(); !reflect.DeepEqual(prefixes(calls[0]), []string{"METER_ADD"}) {
		t.Errorf("replay onto an empty switch sent meters %v, want METER_ADD", calls[0])
	}
}

func TestGroupAndMeterRefusals(t *testing.T) {
	ctx := context.Background()
	s := New()
	c := &fakeConn{}
	if err := s.Sync(ctx, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.take()
	out := Desired{Groups: []flows.Group{{ID: 5, Type: flows.GroupAll}}}
	if err := s.Set(ctx, serviceOwner, out); err == nil || !strings.Contains(err.Error(), "outside ofsdn's group ids") {
		t.Errorf("group 5: %v, want a refusal naming the range", err)
	}
	if err := s.Set(ctx, serviceOwner, Desired{Meters: []flows.Meter{{ID: 5000, Rate: 1}}}); err == nil || !strings.Contains(err.Error(), "outside ofsdn's meter ids") {
		t.Errorf("meter 5000: %v, want a refusal naming the range", err)
	}
	if err := s.Set(ctx, serviceOwner, unitState()); err != nil {
		t.Fatal(err)
	}
	other := flows.Owner{Kind: flows.OwnerPipeline, ID: 8}
	if err := s.Set(ctx, other, Desired{Meters: unitState().Meters}); err == nil || !strings.Contains(err.Error(), "meter 9 is wanted by") {
		t.Errorf("meter 9 for a second owner: %v, want a refusal naming both", err)
	}
	c.take()
	if err := s.Set(ctx, other, Desired{Groups: unitState().Groups}); err == nil {
		t.Error("a group of another owner was accepted")
	}
	if _, calls := c.take(); len(calls) != 0 {
		t.Errorf("refused changes sent %v", calls)
	}
}

func TestPlanAuditGroupsAndMeters(t *testing.T) {
	d := unitState()
	st, err := newState(serviceOwner, d)
	if err != nil {
		t.Fatal(err)
	}
	desired := map[flows.Owner]*state{serviceOwner: st}
	g := d.Groups[0]
	var raw [][]byte
	for _, b := range g.Buckets {
		var r []byte
		for _, a := range b.OFActions() {
			ab, _ := a.MarshalBinary()
			r = append(r, ab...)
		}
		raw = append(raw, r)
	}
	same := openflow.GroupDesc{ID: g.ID, Type: uint8(g.Type), Weights: []uint16{3, 1}, Raw: raw}
	if p := planAudit(desired, nil, []openflow.GroupDesc{same}, []uint32{9}, 0, 0); len(p.MissingGroups)+len(p.UnexpectedGroups)+len(p.MissingMeters)+len(p.UnexpectedMeters) != 0 {
		t.Errorf("switch as desired: %+v", p)
	}
	changed := same
	changed.Weights = []uint16{1, 1}
	p := planAudit(desired, nil, []openflow.GroupDesc{changed, {ID: 5}, {ID: flows.GroupIDMin}}, []uint32{1, 4096}, 0, 0)
	if len(p.MissingGroups) != 1 || !reflect.DeepEqual(p.UnexpectedGroups, []uint32{flows.GroupIDMin}) || !reflect.DeepEqual(p.ForeignGroups, []uint32{5}) ||
		len(p.MissingMeters) != 1 || !reflect.DeepEqual(p.UnexpectedMeters, []uint32{1}) || !reflect.DeepEqual(p.ForeignMeters, []uint32{4096}) {
		t.Fatalf("plan %+v", p)
	}
	ops := repairOps(desired, p)
	var order []string
	for _, op := range ops {
		switch {
		case op.Meter != nil && op.Meter.Command == openflow.MeterDelete:
			order = append(order, "meter-delete")
		case op.Meter != nil:
			order = append(order, "meter")
		case op.Group != nil && op.Group.Command == openflow.GroupDelete:
			order = append(order, "group-delete")
		case op.Group != nil:
			order = append(order, "group")
		default:
			order = append(order, "flow")
		}
	}
	want := []string{"meter", "group", "flow", "flow", "group-delete", "meter-delete"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("repair order %v, want %v", order, want)
	}
}
