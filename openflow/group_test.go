package openflow

// Groups against a real sandbox OVS (userspace datapath): our OFPT_GROUP_MOD bytes as
// ovs-ofctl reads them, the groups as dump-groups shows them, add/modify/delete and the
// switch's errors, a flow that forwards through a select group counted per bucket, and the
// size bound of one group mod.

import (
	"context"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/contiv/libOpenflow/openflow13"
)

func outputBucket(weight uint16, port uint32) Bucket {
	return Bucket{Weight: weight, Actions: []openflow13.Action{openflow13.NewActionOutput(port)}}
}

func TestGroupModBytesAsOvsOfctlReadsThem(t *testing.T) {
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Fatal("ovs-ofctl not installed (hack/install-deps.sh)")
	}
	for _, tc := range []struct {
		m    GroupMod
		want string
	}{
		{GroupMod{Command: GroupAdd, Type: GroupTypeSelect, ID: 7, Buckets: []Bucket{outputBucket(10, 1), outputBucket(30, 2)}},
			"ADD group_id=7,type=select,bucket=weight:10,actions=output:1,bucket=weight:30,actions=output:2"},
		{GroupMod{Command: GroupModify, Type: GroupTypeAll, ID: 8, Buckets: []Bucket{outputBucket(0, 3), outputBucket(0, 4)}},
			"MOD group_id=8,type=all,bucket=actions=output:3,bucket=actions=output:4"},
		{GroupMod{Command: GroupAdd, Type: GroupTypeIndirect, ID: 9, Buckets: []Bucket{outputBucket(0, 5)}},
			"ADD group_id=9,type=indirect,bucket=actions=output:5"},
		{GroupMod{Command: GroupDelete, ID: 7}, "DEL group_id=7"},
		{GroupMod{Command: GroupDelete, ID: GroupAll}, "DEL group_id=4294967292"}, // OFPG_ALL, as OVS prints it at OF1.3,
	} {
		b, err := encodeGroupMod(tc.m, 0x42)
		if err != nil {
			t.Fatalf("%+v: %v", tc.m, err)
		}
		if len(b) != GroupModLen(tc.m) {
			t.Errorf("%+v: %d bytes, GroupModLen says %d", tc.m, len(b), GroupModLen(tc.m))
		}
		out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(b)).CombinedOutput()
		if err != nil {
			t.Fatalf("ofp-print: %v\n%s", err, out)
		}
		got := strings.Join(strings.Fields(string(out)), "")
		want := strings.Join(strings.Fields("OFPT_GROUP_MOD (OF1.3) (xid=0x42): "+tc.want), "")
		if !strings.Contains(got, want) || strings.Contains(got, "error") {
			t.Errorf("%+v encodes as\n%s\nwant it to contain %q", tc.m, out, tc.want)
		}
	}
	for _, bad := range []GroupMod{
		{Command: GroupAdd, Type: GroupTypeIndirect, ID: 1, Buckets: []Bucket{outputBucket(0, 1), outputBucket(0, 2)}},
		{Command: GroupAdd, Type: GroupTypeAll, ID: 1, Buckets: []Bucket{outputBucket(5, 1)}},
		{Command: GroupAdd, Type: GroupTypeSelect, ID: MaxGroupID + 1},
		{Command: 9, Type: GroupTypeSelect, ID: 1},
		{Command: GroupAdd, Type: 3, ID: 1},
	} {
		if _, err := encodeGroupMod(bad, 1); err == nil {
			t.Errorf("%+v encoded, want an error", bad)
		}
	}
}

func TestGroupModAboveOneMessageIsRefusedBeforeSending(t *testing.T) {
	// 4,095 output buckets of 32 bytes each fill 131,056 bytes: twice what one OpenFlow
	// message can hold. The error names the group and says to split it.
	m := GroupMod{Command: GroupAdd, Type: GroupTypeSelect, ID: 3}
	for i := range 4095 {
		m.Buckets = append(m.Buckets, outputBucket(1, uint32(i+1)))
	}
	_, err := encodeGroupMod(m, 1)
	if err == nil || !strings.Contains(err.Error(), "group 3 with 4095 buckets") || !strings.Contains(err.Error(), "split") {
		t.Fatalf("oversized group mod: err %v, want one naming group 3 and the split", err)
	}
	// The largest that fits: (65535-16)/32 = 2047 buckets.
	m.Buckets = m.Buckets[:2047]
	if _, err := encodeGroupMod(m, 1); err != nil {
		t.Fatalf("2047 buckets (%d bytes): %v", GroupModLen(m), err)
	}
}

func TestConnGroupsOnSwitch(t *testing.T) {
	ovs, c := ofTestBridge(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		ovs.Vsctl(t, "add-port", "br-int", "p"+string(rune('0'+i)), "--", "set", "interface", "p"+string(rune('0'+i)),
			"type=internal", "ofport_request="+string(rune('0'+i)))
	}
	mgmt := ovs.MgmtSocket("br-int")

	// A flow naming a group the switch lacks is refused: groups go first.
	if out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow13", "add-flow", mgmt,
		"table=0,priority=10,ip,actions=group:5").CombinedOutput(); err == nil || !strings.Contains(string(out), "OFPBAC_BAD_OUT_GROUP") {
		t.Fatalf("flow with missing group: err %v, output %s; want OFPBAC_BAD_OUT_GROUP", err, out)
	}

	sel := GroupMod{Command: GroupAdd, Type: GroupTypeSelect, ID: 5,
		Buckets: []Bucket{outputBucket(10, 1), outputBucket(20, 2), outputBucket(30, 3)}}
	if err := c.ApplyGroupMods(ctx, []GroupMod{sel}); err != nil {
		t.Fatalf("add select group: %v", err)
	}
	got := ovs.Ofctl(t, "dump-groups", mgmt)
	if !strings.Contains(got, "group_id=5,type=select,bucket=weight:10,actions=output:1,bucket=weight:20,actions=output:2,bucket=weight:30,actions=output:3") {
		t.Fatalf("dump-groups after add:\n%s", got)
	}
	if err := c.ApplyGroupMods(ctx, []GroupMod{sel}); !IsGroupExists(err) {
		t.Fatalf("second add: err %v, want OFPGMFC_GROUP_EXISTS", err)
	}
	if err := c.ApplyGroupMods(ctx, []GroupMod{{Command: GroupModify, Type: GroupTypeSelect, ID: 6, Buckets: []Bucket{outputBucket(1, 1)}}}); !IsUnknownGroup(err) {
		t.Fatalf("modify of a missing group: err %v, want OFPGMFC_UNKNOWN_GROUP", err)
	}

	// Our decoder reads what the switch holds.
	descs, err := c.DumpGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(descs) != 1 || descs[0].ID != 5 || descs[0].Type != GroupTypeSelect || len(descs[0].Weights) != 3 ||
		descs[0].Weights[0] != 10 || descs[0].Weights[2] != 30 {
		t.Fatalf("DumpGroups = %+v, want group 5, select, weights 10/20/30", descs)
	}

	// Traffic through the group is counted: 200 packet-outs into a flow that forwards
	// every IPv4 packet to group 5, spread over the buckets by their flows' hashes.
	ovs.Ofctl(t, "add-flow", mgmt, "table=0,priority=10,ip,actions=group:5")
	var bufs [][]byte
	for i := range 200 {
		bufs = append(bufs, packetOut(c.nextXid(), testFrame(i)))
	}
	if err := c.write(ctx, bufs); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err := c.GroupStats(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].ID != 5 || stats[0].Packets != 200 || stats[0].RefCount != 1 || len(stats[0].Buckets) != 3 {
		t.Fatalf("GroupStats = %+v, want group 5 with 200 packets, 1 flow, 3 buckets", stats)
	}
	var sum uint64
	for i, b := range stats[0].Buckets {
		if b.Packets == 0 {
			t.Errorf("bucket %d (weight %d) got no packet of 200 flows", i, sel.Buckets[i].Weight)
		}
		sum += b.Packets
	}
	if sum != 200 {
		t.Errorf("buckets counted %d packets, want 200", sum)
	}

	// Modify replaces the buckets; delete takes the group and the flow that used it.
	if err := c.ApplyGroupMods(ctx, []GroupMod{{Command: GroupModify, Type: GroupTypeSelect, ID: 5, Buckets: []Bucket{outputBucket(7, 2)}}}); err != nil {
		t.Fatalf("modify: %v", err)
	}
	if got := ovs.Ofctl(t, "dump-groups", mgmt); !strings.Contains(got, "group_id=5,type=select,bucket=weight:7,actions=output:2") || strings.Contains(got, "output:3") {
		t.Fatalf("dump-groups after modify:\n%s", got)
	}
	if err := c.ApplyGroupMods(ctx, []GroupMod{{Command: GroupDelete, ID: 5}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got := ovs.Ofctl(t, "dump-groups", mgmt); strings.Contains(got, "group_id=5") {
		t.Fatalf("dump-groups after delete:\n%s", got)
	}
	if lines := ofDumpLines(t, ovs); len(lines) != 0 {
		t.Fatalf("flows left after the group's delete: %q", lines)
	}
	if st, err := c.GroupStats(ctx, 5); err != nil || len(st) != 0 {
		t.Fatalf("group stats of a deleted group: %+v, %v; want none, no error", st, err)
	}
}
