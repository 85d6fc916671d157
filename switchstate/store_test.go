package switchstate

// Unit tests of the flow store's diff with a fake connection: what SetOwner, DeleteOwner,
// Sync (the replay) and Rebuild send. switch_test.go runs the store against a real OVS.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sort"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// fakeConn records what the store sends: one entry per Apply or ApplyBundle, each flow
// mod as "ADD|DELETE_STRICT|DELETE <name>" with the cookie/mask of deletes by cookie.
type fakeConn struct {
	calls  [][]string
	kinds  []string
	fail   error                // returned by the next Apply/ApplyBundle (which is still recorded)
	failOn string               // "bundle": the next ApplyBundle fails
	down   error                // Err's answer
	groups []openflow.GroupDesc // DumpGroups' answer
	meters []uint32             // MeterStats(MeterAll)'s ids
}

func (c *fakeConn) record(kind string, ops []openflow.FlowModOp) error {
	var got []string
	for _, op := range ops {
		switch {
		case op.Group != nil:
			cmd := map[uint16]string{openflow.GroupAdd: "GROUP_ADD", openflow.GroupModify: "GROUP_MOD",
				openflow.GroupDelete: "GROUP_DELETE", openflow.GroupAddOrModify: "GROUP_ADD_OR_MOD"}[op.Group.Command]
			got = append(got, cmd+" "+op.Name)
		case op.Meter != nil:
			cmd := map[uint16]string{openflow.MeterAdd: "METER_ADD", openflow.MeterModify: "METER_MOD", openflow.MeterDelete: "METER_DELETE"}[op.Meter.Command]
			got = append(got, cmd+" "+op.Name)
		case op.Mod.Command == openflow13.FC_ADD:
			got = append(got, "ADD "+op.Name)
		case op.Mod.Command == openflow13.FC_DELETE_STRICT:
			got = append(got, "DELETE_STRICT "+op.Name)
		case op.Mod.Command == openflow13.FC_DELETE:
			got = append(got, fmt.Sprintf("DELETE cookie=%#x/%#x", op.Mod.Cookie, op.Mod.CookieMask))
		default:
			got = append(got, fmt.Sprintf("command %d %s", op.Mod.Command, op.Name))
		}
	}
	c.calls = append(c.calls, got)
	c.kinds = append(c.kinds, kind)
	err := c.fail
	c.fail = nil
	if c.failOn == kind {
		c.failOn = ""
		err = errors.New("rejected by the fake switch")
	}
	return err
}

func (c *fakeConn) Apply(ctx context.Context, ops []openflow.FlowModOp) error {
	return c.record("apply", ops)
}
func (c *fakeConn) ApplyBundle(ctx context.Context, ops []openflow.FlowModOp) error {
	return c.record("bundle", ops)
}
func (c *fakeConn) Err() error { return c.down }
func (c *fakeConn) DumpFlows(ctx context.Context, tableID uint8, cookie, cookieMask uint64) ([]*openflow13.FlowStats, error) {
	return nil, nil
}
func (c *fakeConn) DumpGroups(ctx context.Context) ([]openflow.GroupDesc, error) {
	return c.groups, nil
}
func (c *fakeConn) MeterStats(ctx context.Context, id uint32) ([]openflow.MeterStats, error) {
	var out []openflow.MeterStats
	for _, m := range c.meters {
		out = append(out, openflow.MeterStats{ID: m})
	}
	return out, nil
}

// take returns the recorded calls and clears them.
func (c *fakeConn) take() ([]string, [][]string) {
	k, cs := c.kinds, c.calls
	c.kinds, c.calls = nil, nil
	return k, cs
}

func storeTestConfig() flows.NodeConfig {
	_, subnet, _ := net.ParseCIDR("10.150.0.0/24")
	return flows.NodeConfig{GatewayOFPort: 1, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x96, 0, 1},
		GatewayIP: net.ParseIP("10.150.0.1").To4(), PodSubnet: subnet, Generation: 7}
}

func storePod(i int, ofport uint32) flows.Pod {
	return flows.Pod{OFPort: ofport, MAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x96, 0, byte(i)}, IPs: []net.IP{net.IPv4(10, 150, 0, byte(i)).To4()}, OwnerID: uint32(0x0a960000 + i)}
}

// adds returns the names of ADDs of fs as owner o sends them, sorted.
func adds(o flows.Owner, fs ...flows.Flow) []string {
	var out []string
	for _, f := range fs {
		out = append(out, "ADD "+o.String()+": "+f.String())
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// TestFlowStoreSetOwnerSendsTheDiff: the first SetOwner adds every flow; the same flows
// again send nothing; a changed flow is re-added, a new one added and a dropped one
// deleted strictly, all in one batch; a failed batch leaves the desired state as it was,
// so a retry sends the same difference.
func TestFlowStoreSetOwnerSendsTheDiff(t *testing.T) {
	cfg := storeTestConfig()
	c := &fakeConn{}
	s := New()
	if err := s.Sync(context.Background(), c, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.take()
	pod := storePod(5, 10)
	o := flows.PodOwner(pod)
	fs := flows.PodFlows(cfg, pod)

	if err := s.SetOwner(context.Background(), o, fs); err != nil {
		t.Fatal(err)
	}
	kinds, calls := c.take()
	if len(calls) != 1 || kinds[0] != "apply" || !reflect.DeepEqual(sorted(calls[0]), adds(o, fs...)) {
		t.Fatalf("first SetOwner sent %v %v, want one batch adding the pod's %d flows", kinds, calls, len(fs))
	}

	if err := s.SetOwner(context.Background(), o, fs); err != nil {
		t.Fatal(err)
	}
	if _, calls := c.take(); len(calls) != 0 {
		t.Errorf("SetOwner with unchanged flows sent %v, want nothing", calls)
	}

	// The pod moves to another ofport: every flow naming the port changes (same match key
	// for the ARP and L3 flows, new match for the classifier and spoof guard ones).
	moved := flows.PodFlows(cfg, storePod(5, 11))
	keys := map[string]bool{}
	for _, f := range moved {
		keys[f.MatchKey()] = true
	}
	var want []string
	for _, f := range moved {
		want = append(want, "ADD "+o.String()+": "+f.String())
	}
	for _, f := range fs {
		if !keys[f.MatchKey()] {
			want = append(want, "DELETE_STRICT "+o.String()+": delete "+f.String())
		}
	}
	c.fail = errors.New("switch said no")
	if err := s.SetOwner(context.Background(), o, moved); err == nil {
		t.Fatal("SetOwner ignored the switch's error")
	}
	if got, _ := s.Owner(o); len(got) != len(fs) || got[0].String() != sortedFlows(fs)[0].String() {
		t.Error("a failed SetOwner changed the desired state")
	}
	_, failed := c.take()
	if err := s.SetOwner(context.Background(), o, moved); err != nil {
		t.Fatal(err)
	}
	_, calls = c.take()
	if len(calls) != 1 || !reflect.DeepEqual(sorted(calls[0]), sorted(want)) || !reflect.DeepEqual(sorted(failed[0]), sorted(want)) {
		t.Errorf("SetOwner after the port moved sent %v (failed attempt %v), want one batch %v", calls, failed, sorted(want))
	}
	if got, ok := s.Owner(o); !ok || !reflect.DeepEqual(flowStrings(got), flowStrings(sortedFlows(moved))) {
		t.Errorf("desired state %v, want the moved flows", flowStrings(got))
	}
}

// TestFlowStoreDeleteOwner: one delete by the owner's own cookie and mask (it takes flows
// the store forgot, e.g. of an earlier run), then the owner is forgotten; an unknown owner
// is deleted the same way without error; while disconnected it only forgets.
func TestFlowStoreDeleteOwner(t *testing.T) {
	cfg := storeTestConfig()
	c := &fakeConn{}
	s := New()
	a, b := storePod(5, 10), storePod(6, 11)
	s.Load(flows.PodOwner(a), flows.PodFlows(cfg, a))
	s.Load(flows.PodOwner(b), flows.PodFlows(cfg, b))
	if err := s.Sync(context.Background(), c, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.take()

	if err := s.DeleteOwner(context.Background(), flows.PodOwner(a)); err != nil {
		t.Fatal(err)
	}
	cookie, mask := flows.PodCookie(a)
	_, calls := c.take()
	want := []string{fmt.Sprintf("DELETE cookie=%#x/%#x", cookie, mask)}
	if len(calls) != 1 || !reflect.DeepEqual(calls[0], want) {
		t.Errorf("DeleteOwner sent %v, want %v", calls, want)
	}
	if _, ok := s.Owner(flows.PodOwner(a)); ok {
		t.Error("deleted owner still known")
	}
	if _, ok := s.Owner(flows.PodOwner(b)); !ok {
		t.Error("DeleteOwner of a removed b too")
	}

	if err := s.DeleteOwner(context.Background(), flows.PodOwner(storePod(9, 12))); err != nil {
		t.Errorf("DeleteOwner of an unknown owner: %v", err)
	}
	if _, calls := c.take(); len(calls) != 1 {
		t.Errorf("DeleteOwner of an unknown owner sent %v, want its delete by cookie", calls)
	}

	c.down = fmt.Errorf("gone: %w", openflow.ErrDisconnected)
	if err := s.DeleteOwner(context.Background(), flows.PodOwner(b)); err != nil {
		t.Errorf("DeleteOwner while disconnected: %v", err)
	}
	if _, calls := c.take(); len(calls) != 0 {
		t.Errorf("DeleteOwner while disconnected sent %v", calls)
	}
	if _, ok := s.Owner(flows.PodOwner(b)); ok {
		t.Error("DeleteOwner while disconnected did not forget the owner")
	}
	err := s.SetOwner(context.Background(), flows.PodOwner(a), flows.PodFlows(cfg, a))
	if !errors.Is(err, openflow.ErrDisconnected) {
		t.Errorf("SetOwner while disconnected: %v, want openflow.ErrDisconnected", err)
	}
	if _, ok := s.Owner(flows.PodOwner(a)); ok {
		t.Error("SetOwner that failed while disconnected changed the desired state")
	}
}

// TestFlowStoreReplay: Sync (a new connection) sends ONE bundle: pre, an add of every
// desired flow of every owner, post; from then on changes go to the new connection only.
// A failed bundle leaves the store on its old connection. Rebuild replaces the flows of
// known owners, skips unknown ones, and replays everything behind a delete of all flows.
func TestFlowStoreReplay(t *testing.T) {
	cfg := storeTestConfig()
	s := New()
	a, b := storePod(5, 10), storePod(6, 11)
	pipe := flows.PipelineFlows(cfg)
	s.Load(flows.PipelineOwner, pipe)
	s.Load(flows.PodOwner(a), flows.PodFlows(cfg, a))
	s.Load(flows.PodOwner(b), flows.PodFlows(cfg, b))
	pre := []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "pre"}}
	post := []openflow.FlowModOp{{Mod: flows.DeleteByCookie(flows.GenerationCookie(6)), Name: "post"}}

	old := &fakeConn{}
	if err := s.Sync(context.Background(), old, nil, nil); err != nil {
		t.Fatal(err)
	}
	old.take()
	c := &fakeConn{}
	if err := s.Sync(context.Background(), c, pre, post); err != nil {
		t.Fatal(err)
	}
	kinds, calls := c.take()
	if len(calls) != 1 || kinds[0] != "bundle" {
		t.Fatalf("Sync sent %v, want one bundle", kinds)
	}
	got := calls[0]
	gc, gm := flows.GenerationCookie(6)
	wantMid := append(append(adds(flows.PipelineOwner, pipe...), adds(flows.PodOwner(a), flows.PodFlows(cfg, a)...)...), adds(flows.PodOwner(b), flows.PodFlows(cfg, b)...)...)
	if len(got) != len(wantMid)+2 || got[0] != "DELETE cookie=0x0/0x0" || got[len(got)-1] != fmt.Sprintf("DELETE cookie=%#x/%#x", gc, gm) ||
		!reflect.DeepEqual(sorted(got[1:len(got)-1]), sorted(wantMid)) {
		t.Errorf("replay bundle:\n%v\nwant pre, the %d desired flows, post", got, len(wantMid))
	}

	if err := s.SetOwner(context.Background(), flows.PodOwner(a), flows.PodFlows(cfg, storePod(5, 12))); err != nil {
		t.Fatal(err)
	}
	if _, calls := old.take(); len(calls) != 0 {
		t.Errorf("a change after the replay went to the old connection: %v", calls)
	}
	if _, calls := c.take(); len(calls) != 1 {
		t.Errorf("a change after the replay sent %d batches to the new connection, want 1", len(calls))
	}

	bad := &fakeConn{fail: errors.New("bundle rejected")}
	if err := s.Sync(context.Background(), bad, nil, nil); err == nil {
		t.Fatal("Sync ignored the failed bundle")
	}
	if err := s.SetOwner(context.Background(), flows.PodOwner(b), flows.PodFlows(cfg, storePod(6, 13))); err != nil {
		t.Fatal(err)
	}
	if _, calls := c.take(); len(calls) != 1 {
		t.Error("after a failed Sync the store left its working connection")
	}

	// Rebuild: the pipeline's flows change (a new gateway ofport); an owner deleted
	// meanwhile is not brought back.
	cfg2 := cfg
	cfg2.GatewayOFPort = 2
	gone := storePod(7, 14)
	if err := s.Rebuild(context.Background(), map[flows.Owner][]flows.Flow{
		flows.PipelineOwner: flows.PipelineFlows(cfg2), flows.PodOwner(gone): flows.PodFlows(cfg2, gone),
	}); err != nil {
		t.Fatal(err)
	}
	_, calls = c.take()
	if len(calls) != 1 || calls[0][0] != "DELETE cookie=0x0/0x0" {
		t.Fatalf("Rebuild sent %v, want one bundle starting with a delete of every flow", calls)
	}
	if _, ok := s.Owner(flows.PodOwner(gone)); ok {
		t.Error("Rebuild brought back an owner the store did not have")
	}
	if got, _ := s.Owner(flows.PipelineOwner); !reflect.DeepEqual(flowStrings(got), flowStrings(sortedFlows(flows.PipelineFlows(cfg2)))) {
		t.Error("Rebuild did not replace the pipeline's flows")
	}
	for _, l := range calls[0][1:] {
		if l == "ADD "+flows.PodOwner(gone).String()+": "+flows.PodFlows(cfg2, gone)[0].String() {
			t.Error("Rebuild installed flows of an unknown owner")
		}
	}
}

func sortedFlows(fs []flows.Flow) []flows.Flow {
	out := append([]flows.Flow(nil), fs...)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func flowStrings(fs []flows.Flow) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

// TestFlowOpStrictDeleteNamesItsCookie: a strict delete selects the flow's own cookie
// under a full mask (OpenFlow 1.3.5 §6.4), so a flow whose match and priority another
// owner took over in the same change survives the old owner's delete
// (controller.TestServiceSinkFrontendsOnSwitch on a real switch); adds carry no mask.
func TestFlowOpStrictDeleteNamesItsCookie(t *testing.T) {
	o := groupTestOwner(7)
	f := groupTestFlows(7)[0]
	del := flowOp(o, f, openflow13.FC_DELETE_STRICT).Mod
	if del.Cookie != uint64(f.Cookie) || del.CookieMask != ^uint64(0) {
		t.Errorf("strict delete cookie %#x/%#x, want %#x/%#x", del.Cookie, del.CookieMask, uint64(f.Cookie), ^uint64(0))
	}
	if add := flowOp(o, f, openflow13.FC_ADD).Mod; add.CookieMask != 0 {
		t.Errorf("add with cookie mask %#x, want 0", add.CookieMask)
	}
}

// TestStoreLenCountsEveryOwnersFlows: Len is the number of desired flows over every owner
// (what All lists), and follows a deleted owner.
func TestStoreLenCountsEveryOwnersFlows(t *testing.T) {
	cfg := storeTestConfig()
	s := New()
	if n := s.Len(); n != 0 {
		t.Fatalf("empty store: Len %d", n)
	}
	s.Load(flows.PipelineOwner, flows.PipelineFlows(cfg))
	p1, p2 := storePod(5, 5), storePod(6, 6)
	s.Load(flows.PodOwner(p1), flows.PodFlows(cfg, p1))
	s.Load(flows.PodOwner(p2), flows.PodFlows(cfg, p2))
	if n, all := s.Len(), len(s.All()); n != all || n == 0 {
		t.Fatalf("Len %d, All lists %d flows", n, all)
	}
	if err := s.DeleteOwner(context.Background(), flows.PodOwner(p2)); err != nil { // not connected: only forgets it
		t.Fatal(err)
	}
	if n, all := s.Len(), len(s.All()); n != all {
		t.Fatalf("after deleting an owner: Len %d, All lists %d flows", n, all)
	}
}
