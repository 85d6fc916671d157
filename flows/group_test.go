package flows

import (
	"strings"
	"testing"
)

func TestGroupAndMeterText(t *testing.T) {
	for _, tc := range []struct {
		g    Group
		want string
	}{
		{Group{ID: GroupIDMin, Type: GroupSelect, Buckets: []Bucket{{Weight: 3, Actions: []Action{Output{Port: 1}}}, {Weight: 1, Actions: []Action{Output{Port: 2}}}}},
			"group_id=1048576,type=select,bucket=weight:3,actions=output:1,bucket=actions=output:2"},
		{Group{ID: 7, Type: GroupAll, Buckets: []Bucket{{Actions: []Action{Output{Port: 3}}}, {}}},
			"group_id=7,type=all,bucket=actions=output:3,bucket=actions=drop"},
		{Group{ID: 8, Type: GroupIndirect, Buckets: []Bucket{{Actions: []Action{DecTTL{}, Output{Port: 4}}}}},
			"group_id=8,type=indirect,bucket=actions=dec_ttl,output:4"},
	} {
		if got := tc.g.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
		if err := tc.g.Validate(); err != nil {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
	f := Flow{Table: 0, Priority: 5, Match: Match{EthType: EthTypeIPv4}, Actions: []Action{GroupAction{ID: GroupIDMin}}, Meter: 2}
	if got := f.String(); !strings.HasSuffix(got, "actions=meter:2,group:1048576") {
		t.Errorf("flow to a group renders as %q", got)
	}
	if got, want := (Meter{ID: 1, Rate: 100, Burst: 100}).String(), "meter=1 pktps burst stats bands=type=drop rate=100 burst_size=100"; got != want {
		t.Errorf("meter text %q, want %q", got, want)
	}
	for _, bad := range []Group{
		{ID: 1, Type: GroupIndirect},
		{ID: 1, Type: GroupAll, Buckets: []Bucket{{Weight: 2}}},
		{ID: 1, Type: GroupSelect, Buckets: []Bucket{{Actions: []Action{GotoTable{Table: 3}}}}},
		{ID: 0xffffff01, Type: GroupSelect},
		{ID: 1, Type: 9},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated, want an error", bad)
		}
	}
	for _, bad := range []Meter{{ID: 0, Rate: 1}, {ID: 1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated, want an error", bad)
		}
	}
	if !OwnedGroupID(GroupIDMin) || OwnedGroupID(GroupIDMin-1) || OwnedGroupID(GroupIDMax+1) || !OwnedMeterID(DenyLogMeter) || OwnedMeterID(MeterIDMax+1) {
		t.Error("id ranges")
	}
}
