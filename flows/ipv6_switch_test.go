package flows

// IPv6 match fields against a real Open vSwitch (a private sandbox): the renderer's text
// is what ovs-ofctl dump-flows prints for them, the OXM bytes install exactly those flows,
// and the switch refuses what Validate refuses. They need root and OVS, and do not skip.

import (
	"net"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// OpenFlow 1.3.5 §7.4.4 error type OFPET_BAD_MATCH and its code OFPBMC_BAD_PREREQ.
const (
	ofpetBadMatch   = 4
	ofpbmcBadPrereq = 9
)

// ipv6FirstTable is the first of the tables ipv6Sink uses (210..212, outside the
// pipeline's).
const ipv6FirstTable = 210

var ipv6Tables = regexp.MustCompile(`(^|, )table=21[0-9], `)

// dumpIPv6Tables returns the flows of tables 210..219 as dump-flows --no-stats prints
// them (with --names when names), one per line without the leading space, sorted.
func dumpIPv6Tables(t *testing.T, n *switchNode, names bool) []string {
	t.Helper()
	args := []string{"dump-flows", "--no-stats"}
	if names {
		args = append(args, "--names")
	}
	out := n.ovs.Ofctl(t, append(args, n.mgmt)...)
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); ipv6Tables.MatchString(l) {
			got = append(got, l)
		}
	}
	sort.Strings(got)
	return got
}

func sorted(lines []string) []string {
	out := append([]string(nil), lines...)
	sort.Strings(out)
	return out
}

func TestIPv6FlowsOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	sink := ipv6Sink()

	t.Run("text round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		n.addFlowsText(t, sink)
		compareLines(t, "dump-flows vs golden", dumpIPv6Tables(t, n, false), sorted(goldenIPv6))
		compareLines(t, "dump-flows --names vs Format(port names)", dumpIPv6Tables(t, n, true), sortedFormat(sink, n.names))
	})

	t.Run("FlowMod round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		var mods []*openflow13.FlowMod
		for _, f := range sink {
			mods = append(mods, f.FlowMod(openflow13.FC_ADD))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows after our FlowMods vs golden", dumpIPv6Tables(t, n, false), sorted(goldenIPv6))
		compareLines(t, "dump-flows --names after our FlowMods vs Format(port names)", dumpIPv6Tables(t, n, true), sortedFormat(sink, n.names))

		// The match is the flow's identity: modify-strict with the same flows changes
		// nothing, delete-strict of each removes exactly it.
		mods = mods[:0]
		for _, f := range sink {
			mods = append(mods, f.FlowMod(openflow13.FC_MODIFY_STRICT))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows after modify-strict", dumpIPv6Tables(t, n, false), sorted(goldenIPv6))
		mods = mods[:0]
		for _, f := range sink {
			mods = append(mods, f.FlowMod(openflow13.FC_DELETE_STRICT))
		}
		sendFlowMods(t, n.mgmt, mods...)
		if left := dumpIPv6Tables(t, n, false); len(left) != 0 {
			t.Fatalf("delete-strict of every IPv6 flow left:\n%s", strings.Join(left, "\n"))
		}
	})

	t.Run("switch refuses what Validate refuses", func(t *testing.T) {
		// nd_target with icmpv6_code 1: Validate says OVS refuses it; check that it does.
		f := Flow{Table: ipv6FirstTable, Priority: 1, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6,
			ICMPv6Type: new(ICMPv6NeighborSolicit), ICMPv6Code: new(uint8(1)), NDTarget: net.ParseIP("fd00::1")}}
		if err := f.Validate(); err == nil {
			t.Fatalf("Validate accepted %s", f)
		}
		checkBadPrereq(t, n, "nd_target with icmpv6_code 1", f.FlowMod(openflow13.FC_ADD))

		// Each IPv6 field without its prerequisite: Validate refuses it, and so does
		// the switch (sent anyway, OXM encoded as it is).
		mac := mustMAC("0a:00:00:00:00:01")
		icmp6 := func(m Match) Match { m.EthType, m.IPProto = EthTypeIPv6, IPProtoICMPv6; return m }
		for name, m := range map[string]Match{
			"ipv6_src on ip":            {EthType: EthTypeIPv4, IPv6Src: mustCIDR6("fd00::1/128")},
			"ipv6_label without type":   {IPv6Label: 1, IPv6LabelMask: 0xfffff},
			"icmpv6_type on tcp6":       {EthType: EthTypeIPv6, IPProto: IPProtoTCP, ICMPv6Type: new(ICMPv6EchoRequest)},
			"nd_target on echo request": icmp6(Match{ICMPv6Type: new(ICMPv6EchoRequest), NDTarget: net.ParseIP("fd00::1")}),
			"nd_sll on advertisement":   icmp6(Match{ICMPv6Type: new(ICMPv6NeighborAdvert), NDSLL: mac}),
			"nd_tll on solicitation":    icmp6(Match{ICMPv6Type: new(ICMPv6NeighborSolicit), NDTLL: mac}),
		} {
			f := Flow{Table: ipv6FirstTable, Priority: 1, Match: m}
			if err := f.Validate(); err == nil {
				t.Errorf("%s: Validate accepted %s", name, f)
			}
			checkBadPrereq(t, n, name, f.FlowMod(openflow13.FC_ADD))
		}

		// Order matters on the wire (§7.2.3.6): nd_target before icmpv6_type is refused,
		// which is why the encoder puts prerequisites first.
		good := Flow{Table: ipv6FirstTable, Priority: 1, Match: icmp6(Match{ICMPv6Type: new(ICMPv6NeighborSolicit), NDTarget: net.ParseIP("fd00::1")})}
		fm := good.FlowMod(openflow13.FC_ADD)
		fs := fm.Match.Fields // eth_type, ip_proto, icmpv6_type, nd_target
		if len(fs) != 4 || fs[2].Field != openflow13.OXM_FIELD_ICMPV6_TYPE || fs[3].Field != openflow13.OXM_FIELD_IPV6_ND_TARGET {
			t.Fatalf("unexpected TLVs %+v", fs)
		}
		fs[2], fs[3] = fs[3], fs[2]
		checkBadPrereq(t, n, "nd_target before icmpv6_type", fm)
		if left := dumpIPv6Tables(t, n, false); len(left) != 0 {
			t.Fatalf("refused flow mods left flows:\n%s", strings.Join(left, "\n"))
		}
		sendFlowMods(t, n.mgmt, good.FlowMod(openflow13.FC_ADD))
		compareLines(t, "the same TLVs in prerequisite order", dumpIPv6Tables(t, n, false),
			[]string{`table=210, priority=1,icmp6,icmp_type=135,nd_target=fd00::1 actions=drop`})
	})
}

// checkBadPrereq sends fm and checks that the switch refuses it with OFPBMC_BAD_PREREQ.
func checkBadPrereq(t *testing.T, n *switchNode, what string, fm *openflow13.FlowMod) {
	t.Helper()
	err := trySendFlowMods(t, n.mgmt, fm)
	se, ok := err.(*switchError)
	if !ok || se.Type != ofpetBadMatch || se.Code != ofpbmcBadPrereq {
		t.Errorf("%s: switch answered %v, want OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ (type %d code %d)", what, err, ofpetBadMatch, ofpbmcBadPrereq)
	}
}
