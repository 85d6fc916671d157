package flows

import (
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// ctNATSink returns flows with every form of ct nat the package offers, IPv4 and IPv6, in
// tables 215..216 (outside the pipeline's).
func ctNATSink() []Flow {
	v4 := func(proto uint8) Match { return Match{EthType: EthTypeIPv4, IPProto: proto} }
	v6 := func(proto uint8) Match { return Match{EthType: EthTypeIPv6, IPProto: proto} }
	ip := net.ParseIP
	return []Flow{
		{Table: 215, Priority: 1, Match: v6(IPProtoTCP), Actions: []Action{CT{Commit: true, Zone: 65280, Table: 216,
			NAT: &CTNAT{DNAT: true, MinIP: ip("fd00:10:96::1"), MaxIP: ip("fd00:10:96::3"), MinPort: 80, MaxPort: 81}}}},
		{Table: 215, Priority: 2, Match: v6(IPProtoUDP), Actions: []Action{CT{Commit: true, Zone: 65280, Table: 216,
			NAT: &CTNAT{DNAT: true, MinIP: ip("fd00:10:244:1::5"), MinPort: 8080}}}},
		{Table: 215, Priority: 3, Match: v6(0), Actions: []Action{CT{Commit: true, Zone: 65280,
			NAT: &CTNAT{SNAT: true, MinIP: ip("fd00::1")}}, Output{Port: 2}}},
		{Table: 215, Priority: 4, Match: v6(0), Actions: []Action{CT{Commit: true, Zone: 65280,
			NAT: &CTNAT{SNAT: true, MinIP: ip("fd00::1"), MaxIP: ip("fd00::9")}}, Output{Port: 2}}},
		{Table: 215, Priority: 5, Match: v4(IPProtoUDP), Actions: []Action{CT{Commit: true, Zone: 65280, Table: 216,
			NAT: &CTNAT{DNAT: true, MinIP: ip("10.96.0.10"), MinPort: 53}}}},
		{Table: 215, Priority: 6, Match: v4(IPProtoTCP), Actions: []Action{CT{Commit: true, Zone: 65280,
			NAT: &CTNAT{SNAT: true, MinIP: ip("172.16.0.1"), MaxIP: ip("172.16.0.2"), MinPort: 1024, MaxPort: 65535}}, Output{Port: 2}}},
		{Table: 215, Priority: 7, Match: v6(0), Actions: []Action{CT{Zone: 65280, Table: 216, NAT: &CTNAT{}}}},
		{Table: 215, Priority: 8, Match: v4(0), Actions: []Action{CT{Zone: 65280, Table: 216, NAT: &CTNAT{}}}},
		// Zone 0 is not printed.
		{Table: 215, Priority: 9, Match: v6(0), Actions: []Action{CT{Table: 216, NAT: &CTNAT{}}}},
		{Table: 215, Priority: 10, Match: v4(0), Actions: []Action{CT{Commit: true}, Output{Port: 2}}},
	}
}

// goldenCTNAT is ctNATSink() as OVS 3.1's dump-flows prints it (TestCTNATOnSwitch).
var goldenCTNAT = []string{
	`table=215, priority=1,tcp6 actions=ct(commit,table=216,zone=65280,nat(dst=[fd00:10:96::1]-[fd00:10:96::3]:80-81))`,
	`table=215, priority=2,udp6 actions=ct(commit,table=216,zone=65280,nat(dst=[fd00:10:244:1::5]:8080))`,
	`table=215, priority=3,ipv6 actions=ct(commit,zone=65280,nat(src=fd00::1)),output:2`,
	`table=215, priority=4,ipv6 actions=ct(commit,zone=65280,nat(src=fd00::1-fd00::9)),output:2`,
	`table=215, priority=5,udp actions=ct(commit,table=216,zone=65280,nat(dst=10.96.0.10:53))`,
	`table=215, priority=6,tcp actions=ct(commit,zone=65280,nat(src=172.16.0.1-172.16.0.2:1024-65535)),output:2`,
	`table=215, priority=7,ipv6 actions=ct(table=216,zone=65280,nat)`,
	`table=215, priority=8,ip actions=ct(table=216,zone=65280,nat)`,
	`table=215, priority=9,ipv6 actions=ct(table=216,nat)`,
	`table=215, priority=10,ip actions=ct(commit),output:2`,
}

func TestCTNATGolden(t *testing.T) {
	compareLines(t, "ct nat flows", lines(ctNATSink(), nil), goldenCTNAT)
	for _, f := range ctNATSink() {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestCTNATValidate(t *testing.T) {
	ip := net.ParseIP
	v4, v6 := Match{EthType: EthTypeIPv4}, Match{EthType: EthTypeIPv6}
	for _, c := range []struct {
		name  string
		match Match
		nat   CTNAT
		want  string
	}{
		{"ipv6 range on ip", v4, CTNAT{DNAT: true, MinIP: ip("fd00::1")}, "IPv6 range fd00::1 needs a match on EthType 0x86dd (ipv6)"},
		{"ipv4 range on ipv6", v6, CTNAT{DNAT: true, MinIP: ip("10.0.0.1")}, "IPv4 range 10.0.0.1 needs a match on EthType 0x0800 (ip)"},
		{"mixed families", v6, CTNAT{DNAT: true, MinIP: ip("fd00::1"), MaxIP: ip("10.0.0.1")}, "mixes IPv4 and IPv6"},
		{"both sides", v6, CTNAT{SNAT: true, DNAT: true, MinIP: ip("fd00::1")}, "SNAT and DNAT both set"},
		{"range without side", v6, CTNAT{MinIP: ip("fd00::1")}, "needs SNAT or DNAT"},
		{"ports without address", v6, CTNAT{DNAT: true, MinPort: 80}, "needs MinIP"},
		{"range backwards", v6, CTNAT{DNAT: true, MinIP: ip("fd00::9"), MaxIP: ip("fd00::1")}, "ends below its start"},
		{"ports backwards", v6, CTNAT{DNAT: true, MinIP: ip("fd00::1"), MinPort: 90, MaxPort: 80}, "port range 90-80"},
	} {
		f := Flow{Table: 215, Match: c.match, Actions: []Action{CT{Commit: true, Zone: 1, NAT: &c.nat}}}
		err := f.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate(%s) = %v, want an error saying %q", c.name, f, err, c.want)
		}
	}
	f := Flow{Table: 215, Match: v6, Actions: []Action{CT{Zone: 1, NAT: &CTNAT{DNAT: true, MinIP: ip("fd00::1")}}}}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "needs Commit") {
		t.Errorf("nat range without commit: Validate = %v, want an error saying it needs Commit", err)
	}
}

func TestCTNATOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	sink := ctNATSink()
	dump := func() []string {
		var out []string
		for _, l := range strings.Split(n.ovs.Ofctl(t, "dump-flows", "--no-stats", n.mgmt, "table=215"), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "table=215,") {
				out = append(out, l)
			}
		}
		return sorted(out)
	}
	t.Run("text round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		n.addFlowsText(t, sink)
		compareLines(t, "dump-flows vs golden", dump(), sorted(goldenCTNAT))
	})
	t.Run("FlowMod round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		var mods []*openflow13.FlowMod
		for _, f := range sink {
			mods = append(mods, f.FlowMod(openflow13.FC_ADD))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows after our FlowMods vs golden", dump(), sorted(goldenCTNAT))
	})
	t.Run("switch refuses what Validate refuses", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		for name, f := range map[string]Flow{
			"ipv6 range on ip": {Table: 215, Match: Match{EthType: EthTypeIPv4},
				Actions: []Action{CT{Commit: true, Zone: 1, NAT: &CTNAT{DNAT: true, MinIP: net.ParseIP("fd00::1")}}}},
			"ipv4 range on ipv6": {Table: 215, Match: Match{EthType: EthTypeIPv6},
				Actions: []Action{CT{Commit: true, Zone: 1, NAT: &CTNAT{DNAT: true, MinIP: net.ParseIP("10.0.0.1")}}}},
			"range without commit": {Table: 215, Match: Match{EthType: EthTypeIPv6},
				Actions: []Action{CT{Zone: 1, NAT: &CTNAT{DNAT: true, MinIP: net.ParseIP("fd00::1")}}}},
		} {
			if err := f.Validate(); err == nil {
				t.Errorf("%s: Validate accepted %s", name, f)
			}
			if err := trySendFlowMods(t, n.mgmt, f.FlowMod(openflow13.FC_ADD)); err == nil {
				t.Errorf("%s: the switch accepted %s", name, f)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}
		if left := dump(); len(left) != 0 {
			t.Fatalf("refused flow mods left flows:\n%s", strings.Join(left, "\n"))
		}
	})
}
