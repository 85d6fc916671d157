package switchstate

// The store against a real, private Open vSwitch (test/sandbox, userspace datapath): a
// meter, a select group and flows that use both come back after ovs-vswitchd is killed
// and started again (the replay, in the order OVS accepts) and after the group is deleted
// by hand (the audit); a second store replays onto a switch that still holds them (a
// daemon restart: no GROUP_EXISTS, no METER_EXISTS, no group deleted under live flows);
// stale groups and meters of ofsdn's ranges go, foreign ones stay; packets go through the
// group and the meter.

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// serviceOwner is the test's owner of a group and a meter (kind pipeline, id 7).
var serviceOwner = flows.Owner{Kind: flows.OwnerPipeline, ID: 7}

// serviceState is serviceOwner's desired state: meter 9 (1000 packets/s), a select group
// over ofports 1 (weight 3) and 2 (weight 1), a flow that sends IPv4 through both and a
// drop flow below it, and an all and an indirect group no flow uses.
func serviceState() Desired {
	g := flows.Group{ID: flows.GroupIDMin + 5, Type: flows.GroupSelect, Buckets: []flows.Bucket{
		{Weight: 3, Actions: []flows.Action{flows.Output{Port: 1}}},
		{Weight: 1, Actions: []flows.Action{flows.Output{Port: 2}}},
	}}
	cookie, _ := serviceOwner.Cookie()
	f := flows.Flow{Table: 0, Priority: 50, Cookie: flows.Cookie(cookie), Match: flows.Match{EthType: flows.EthTypeIPv4},
		Actions: []flows.Action{flows.GroupAction{ID: g.ID}}, Meter: 9}
	other := flows.Flow{Table: 0, Priority: 10, Cookie: flows.Cookie(cookie), Actions: []flows.Action{flows.Drop{}}}
	// An all group and an indirect one too, so the audit's comparison meets each type as
	// OVS returns it.
	all := flows.Group{ID: flows.GroupIDMin + 6, Type: flows.GroupAll, Buckets: []flows.Bucket{
		{Actions: []flows.Action{flows.Output{Port: 1}}}, {Actions: []flows.Action{flows.Output{Port: 2}}}}}
	ind := flows.Group{ID: flows.GroupIDMin + 7, Type: flows.GroupIndirect, Buckets: []flows.Bucket{{Actions: []flows.Action{flows.DecTTL{}, flows.Output{Port: 2}}}}}
	return Desired{Flows: []flows.Flow{f, other}, Groups: []flows.Group{g, all, ind}, Meters: []flows.Meter{{ID: 9, Rate: 1000, Burst: 1000}}}
}

// switchState is what the switch holds: dump-groups, dump-meters (on one line each) and
// dump-flows lines without their counters.
type switchState struct{ groups, meters, flows []string }

func readSwitch(t *testing.T, ovs *sandbox.OVS) switchState {
	t.Helper()
	br := ovs.MgmtSocket("br-int")
	var st switchState
	for _, l := range strings.Split(ovs.Ofctl(t, "dump-groups", br), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") {
			st.groups = append(st.groups, l)
		}
	}
	// dump-meters prints "meter=N flags bands=" and each band on the next line.
	var cur string
	for _, l := range strings.Split(ovs.Ofctl(t, "dump-meters", br), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "meter="):
			if cur != "" {
				st.meters = append(st.meters, cur)
			}
			cur = l
		case strings.HasPrefix(l, "type=") && cur != "":
			cur += l
		}
	}
	if cur != "" {
		st.meters = append(st.meters, cur)
	}
	for _, l := range ofDumpLines(t, ovs) {
		st.flows = append(st.flows, stripCounters(l))
	}
	return st
}

// stripCounters turns a dump-flows line into "cookie=..., table=..., priority=...,match actions=..."
// without duration and counters.
func stripCounters(l string) string {
	var keep []string
	for _, part := range strings.Split(l, ", ") {
		if strings.HasPrefix(part, "duration=") || strings.HasPrefix(part, "n_packets=") || strings.HasPrefix(part, "n_bytes=") ||
			strings.HasPrefix(part, "idle_age=") {
			continue
		}
		keep = append(keep, part)
	}
	return strings.Join(keep, ", ")
}

// wantSwitch is what the switch must hold for d: its groups and meters by their text, its
// flows as dump-flows prints them.
func wantSwitch(d Desired) switchState {
	var st switchState
	for _, g := range d.Groups {
		st.groups = append(st.groups, g.String())
	}
	for _, m := range d.Meters {
		st.meters = append(st.meters, m.String())
	}
	for _, f := range d.Flows {
		st.flows = append(st.flows, fmt.Sprintf("cookie=%#x, table=%d, priority=%d%s actions=%s", uint64(f.Cookie), f.Table, f.Priority, matchText(f), actionText(f)))
	}
	return st
}

func matchText(f flows.Flow) string {
	s := f.String()
	i := strings.Index(s, "priority=")
	j := strings.Index(s, " actions=")
	rest := s[i:j] // priority=N[,match]
	if k := strings.Index(rest, ","); k >= 0 {
		return rest[k:]
	}
	return ""
}

func actionText(f flows.Flow) string {
	s := f.String()
	return s[strings.Index(s, " actions=")+len(" actions="):]
}

// normMeter collapses whitespace so dump-meters' two lines compare with Meter.String.
func normMeter(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "bands=", "bands= ")), " ")
}

func checkSwitch(t *testing.T, ovs *sandbox.OVS, want switchState, when string, extraGroups, extraMeters []string) {
	t.Helper()
	got := readSwitch(t, ovs)
	wantGroups := append(append([]string(nil), want.groups...), extraGroups...)
	wantMeters := append(append([]string(nil), want.meters...), extraMeters...)
	same := func(a, b []string, norm func(string) string) bool {
		if len(a) != len(b) {
			return false
		}
		m := map[string]int{}
		for _, x := range a {
			m[norm(x)]++
		}
		for _, x := range b {
			m[norm(x)]--
		}
		for _, v := range m {
			if v != 0 {
				return false
			}
		}
		return true
	}
	id := func(s string) string { return s }
	if !same(got.groups, wantGroups, id) || !same(got.meters, wantMeters, normMeter) || !same(got.flows, want.flows, id) {
		t.Fatalf("%s the switch holds\n groups %q\n meters %q\n flows %q\nwant\n groups %q\n meters %q\n flows %q",
			when, got.groups, got.meters, got.flows, wantGroups, wantMeters, want.flows)
	}
}

func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// udpFrame is an IPv4/UDP frame from 10.9.0.1 to 10.9.0.2, source port sport.
func udpFrame(sport int) string {
	b := []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
		0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2,
		byte(sport >> 8), byte(sport), 0, 53, 0, 8, 0, 0}
	return hex.EncodeToString(b)
}

func TestGroupsAndMetersSurviveVswitchdRestartAndManualDelete(t *testing.T) {
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	for i := 1; i <= 2; i++ {
		ovs.Vsctl(t, "add-port", "br-int", fmt.Sprintf("p%d", i), "--", "set", "interface", fmt.Sprintf("p%d", i),
			"type=internal", fmt.Sprintf("ofport_request=%d", i))
	}
	br := ovs.MgmtSocket("br-int")
	d := serviceState()
	want := wantSwitch(d)
	store := New()
	if err := store.LoadState(serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	syncs := 0
	var syncErr error
	sw := openflow.NewSwitch(br, openflow.SwitchOptions{}, func(ctx context.Context, c *openflow.Conn, first bool) error {
		var pre []openflow.FlowModOp
		if !first {
			pre = []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow before the replay"}}
		}
		syncErr = store.Sync(ctx, c, pre, nil)
		if syncErr == nil {
			syncs++
		}
		return syncErr
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	checkSwitch(t, ovs, want, "after the first replay", nil, nil)
	conn, err := sw.Conn()
	if err != nil {
		t.Fatal(err)
	}
	// A synchronised switch has nothing to repair: our group compares equal to the bytes
	// OVS returns.
	if res, err := store.Audit(ctx, 0, 0); err != nil || len(res.Repairs()) != 0 || len(res.ForeignGroups)+len(res.ForeignMeters) != 0 {
		t.Fatalf("audit of a synchronised switch: %+v, %v", res, err)
	}

	// Packets go through the meter and the group: 20 UDP flows from p1, each to one
	// bucket.
	for i := 0; i < 20; i++ {
		ovs.Ofctl(t, "packet-out", br, "in_port=1,packet="+udpFrame(1000+i)+",actions=resubmit(,0)")
	}
	gs, err := conn.GroupStats(ctx, d.Groups[0].ID)
	if err != nil || len(gs) != 1 || gs[0].Packets != 20 {
		t.Fatalf("group stats after 20 packets: %+v, %v", gs, err)
	}
	ms, err := conn.MeterStats(ctx, 9)
	if err != nil || len(ms) != 1 || ms[0].PacketsIn != 20 {
		t.Fatalf("meter stats after 20 packets: %+v, %v", ms, err)
	}

	// ovs-vswitchd crashes and starts again with no groups, meters or flows: the replay
	// brings all of them back, meters and groups before the flows that name them (OVS
	// would refuse the flow otherwise: OFPBAC_BAD_OUT_GROUP, OFPMMFC_INVALID_METER).
	ovs.KillVswitchd(t)
	waitFor(t, 20*time.Second, "the connection to drop", func() bool { return !sw.Connected() })
	ovs.StartVswitchd(t, false)
	waitFor(t, 60*time.Second, "the reconnect and replay", func() bool { return sw.Connected() })
	if syncs != 2 {
		t.Fatalf("%d replays, want 2 (last error %v)", syncs, syncErr)
	}
	checkSwitch(t, ovs, want, "after ovs-vswitchd was killed and started again", nil, nil)

	// Someone deletes the group by hand (OVS deletes the flow that used it with it); a
	// stale group and meter of ofsdn's ranges, and a foreign group and meter, appear.
	ovs.Ofctl(t, "del-groups", br, fmt.Sprintf("group_id=%d", d.Groups[0].ID))
	stale := flows.Group{ID: flows.GroupIDMin + 99, Type: flows.GroupAll, Buckets: []flows.Bucket{{Actions: []flows.Action{flows.Output{Port: 2}}}}}
	foreign := flows.Group{ID: 5, Type: flows.GroupAll, Buckets: []flows.Bucket{{Actions: []flows.Action{flows.Output{Port: 1}}}}}
	ovs.Ofctl(t, "add-group", br, stale.String())
	ovs.Ofctl(t, "add-group", br, foreign.String())
	ovs.Ofctl(t, "add-meter", br, "meter=77,pktps,band=type=drop,rate=5")
	ovs.Ofctl(t, "add-meter", br, "meter=5000,pktps,band=type=drop,rate=5")
	got := readSwitch(t, ovs)
	if len(got.flows) != 1 {
		t.Fatalf("after del-groups the switch holds flows %q; want only the flow without the group", got.flows)
	}
	conn, err = sw.Conn()
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Audit(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Repairs()
	if rep[RepairMissingGroup] != 1 || rep[RepairMissing] != 1 || rep[RepairUnexpectedGroup] != 1 || rep[RepairUnexpectedMeter] != 1 ||
		rep[RepairMissingMeter] != 0 || len(res.ForeignGroups) != 1 || len(res.ForeignMeters) != 1 {
		t.Fatalf("audit after the manual changes: repairs %v, result %+v; want the group and its flow re-created, the stale group and meter deleted, one foreign group and meter", rep, res)
	}
	foreignMeter := "meter=5000 pktps bands= type=drop rate=5"
	checkSwitch(t, ovs, want, "after the audit", []string{foreign.String()}, []string{foreignMeter})
	if res, err := store.Audit(ctx, 0, 0); err != nil || len(res.Repairs()) != 0 {
		t.Fatalf("second audit: %+v, %v; want nothing to repair", res, err)
	}

	// A daemon restart: a new store with the same desired state replays onto the switch
	// that still holds the group and meter under live flows (no pre: the first
	// connection). ADD_OR_MOD and the meter modify make it go through.
	sw.Close()
	c2, err := openflow.Dial(ctx, br, openflow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	again := New()
	if err := again.LoadState(serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	if err := again.Sync(ctx, c2, nil, nil); err != nil {
		t.Fatalf("replay onto a switch that holds the state: %v", err)
	}
	checkSwitch(t, ovs, want, "after the second store's replay", []string{foreign.String()}, []string{foreignMeter})

	// Changes: the group's weights change and the meter's rate, in one Set; then the
	// owner is deleted: flows, group and meter go, the foreign ones stay.
	d.Groups[0].Buckets[1].Weight = 5
	d.Meters[0].Rate = 200
	if err := again.Set(ctx, serviceOwner, d); err != nil {
		t.Fatal(err)
	}
	checkSwitch(t, ovs, wantSwitch(d), "after the change", []string{foreign.String()}, []string{foreignMeter})
	if err := again.DeleteOwner(ctx, serviceOwner); err != nil {
		t.Fatal(err)
	}
	checkSwitch(t, ovs, switchState{}, "after DeleteOwner", []string{foreign.String()}, []string{foreignMeter})
}
