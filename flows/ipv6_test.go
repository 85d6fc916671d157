package flows

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

func mustCIDR6(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip // keep host bits: the renderer and encoder must mask them as OVS does
	return n
}

// ipv6Sink returns flows that use every IPv6 match field, each with its prerequisites,
// outside the pipeline's tables (210..212), for the renderer, encoder and switch checks.
func ipv6Sink() []Flow {
	mac1, mac2 := mustMAC("0a:00:00:00:00:01"), mustMAC("0a:00:00:00:00:02")
	// A non-CIDR mask: the first and third groups.
	odd := &net.IPNet{IP: net.ParseIP("fd00:1:2:3::9"), Mask: net.IPMask(net.ParseIP("ffff:0:ffff::"))}
	return []Flow{
		{Table: 210, Priority: 10, Cookie: 0x66,
			Match:   Match{EthType: EthTypeIPv6, IPv6Src: mustCIDR6("fd00:10:244:1::5/64"), IPv6Dst: mustCIDR6("fd00:10:96::a/108")},
			Actions: []Action{Output{Port: 2}}},
		{Table: 210, Priority: 11,
			Match:   Match{EthType: EthTypeIPv6, InPort: 3, EthSrc: mac1, IPv6Src: mustCIDR6("fd00:10:244:1::5/128"), IPv6Dst: odd},
			Actions: []Action{GotoTable{211}}},
		{Table: 210, Priority: 12, Match: Match{EthType: EthTypeIPv6, IPv6Label: 0x12345, IPv6LabelMask: 0xfffff},
			Actions: []Action{Drop{}}},
		{Table: 210, Priority: 13, Match: Match{EthType: EthTypeIPv6, IPv6Src: mustCIDR6("2001:db8::/32"), IPv6Label: 0x12300, IPv6LabelMask: 0xfff00},
			Actions: []Action{Drop{}}},
		{Table: 210, Priority: 14, Match: Match{EthType: EthTypeIPv6, IPProto: 47, Regs: []RegMark{FromPod}},
			Actions: []Action{Drop{}}},
		{Table: 210, Priority: 15, Match: Match{EthType: EthTypeIPv6},
			Actions: []Action{CT{Zone: 65280, Table: 211}}},
		// ICMPv6: echo, code only, neighbor solicitation and advertisement.
		{Table: 211, Priority: 20, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6EchoRequest), ICMPv6Code: new(uint8(0))},
			Actions: []Action{Output{Port: 2}}},
		{Table: 211, Priority: 21, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Code: new(uint8(4))},
			Actions: []Action{Drop{}}},
		{Table: 211, Priority: 22, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6},
			Actions: []Action{Drop{}}},
		{Table: 211, Priority: 23,
			Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6NeighborSolicit),
				NDTarget: net.ParseIP("fd00:10:244:1::1"), NDSLL: mac1, InPort: 3, EthSrc: mac1},
			Actions: []Action{Output{Port: 2}}},
		{Table: 211, Priority: 24,
			Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6NeighborAdvert), ICMPv6Code: new(uint8(0)),
				NDTarget: net.ParseIP("fd00:10:244:1::5"), NDTLL: mac2, IPv6Src: mustCIDR6("fd00:10:244:1::5/128")},
			Actions: []Action{Output{Port: 3}}},
		{Table: 211, Priority: 25, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6NeighborSolicit), NDTarget: net.ParseIP("fe80::1")},
			Actions: []Action{Drop{}}},
		{Table: 211, Priority: 26, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6NeighborAdvert), NDTLL: mac2},
			Actions: []Action{Drop{}}},
		{Table: 211, Priority: 27, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6RouterAdvert), IPv6Dst: mustCIDR6("ff02::1/128")},
			Actions: []Action{Drop{}}},
		// Transport ports, conntrack state and conjunctions over IPv6 (policy, Services).
		{Table: 212, Priority: 30, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoTCP, IPv6Dst: mustCIDR6("fd00:10:96::/108"), TPDst: 80, TPDstMask: 0xffff},
			Actions: []Action{Conjunction{ID: 9, Clause: 2, NClauses: 2}}},
		{Table: 212, Priority: 30, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoUDP, TPDst: 1000, TPDstMask: 0xfff8},
			Actions: []Action{Conjunction{ID: 9, Clause: 2, NClauses: 2}}},
		{Table: 212, Priority: 30, Match: Match{EthType: EthTypeIPv6, IPProto: IPProtoSCTP, TPDst: 9, TPDstMask: 0xffff},
			Actions: []Action{Conjunction{ID: 9, Clause: 2, NClauses: 2}}},
		{Table: 212, Priority: 30, Match: Match{EthType: EthTypeIPv6, IPv6Src: mustCIDR6("fd00:10:244:2::/64")},
			Actions: []Action{Conjunction{ID: 9, Clause: 1, NClauses: 2}}},
		{Table: 212, Priority: 30, Match: Match{ConjID: 9, EthType: EthTypeIPv6}, Actions: []Action{GotoTable{213}}},
		{Table: 212, Priority: 40, Match: Match{CTState: &CTState{Set: CTTrk, Clear: CTNew | CTInv}, EthType: EthTypeIPv6},
			Actions: []Action{GotoTable{213}}},
		{Table: 212, Priority: 1, Match: Match{CTState: &CTState{Set: CTNew | CTTrk}, EthType: EthTypeIPv6},
			Actions: []Action{CT{Commit: true, Zone: 65280}, GotoTable{213}}},
	}
}

// goldenIPv6 is ipv6Sink() as OVS 3.1's `ovs-ofctl -O OpenFlow13 dump-flows --no-stats`
// prints it (TestIPv6FlowsOnSwitch checks each line on the switch).
var goldenIPv6 = []string{
	`cookie=0x66, table=210, priority=10,ipv6,ipv6_src=fd00:10:244:1::/64,ipv6_dst=fd00:10:96::/108 actions=output:2`,
	`table=210, priority=11,ipv6,in_port=3,dl_src=0a:00:00:00:00:01,ipv6_src=fd00:10:244:1::5,ipv6_dst=fd00:0:2::/ffff:0:ffff:: actions=goto_table:211`,
	`table=210, priority=12,ipv6,ipv6_label=0x12345 actions=drop`,
	`table=210, priority=13,ipv6,ipv6_src=2001:db8::/32,ipv6_label=0x12300/0xfff00 actions=drop`,
	`table=210, priority=14,ipv6,reg0=0x2/0xf,nw_proto=47 actions=drop`,
	`table=210, priority=15,ipv6 actions=ct(table=211,zone=65280)`,
	`table=211, priority=20,icmp6,icmp_type=128,icmp_code=0 actions=output:2`,
	`table=211, priority=21,icmp6,icmp_code=4 actions=drop`,
	`table=211, priority=22,icmp6 actions=drop`,
	`table=211, priority=23,icmp6,in_port=3,dl_src=0a:00:00:00:00:01,icmp_type=135,nd_target=fd00:10:244:1::1,nd_sll=0a:00:00:00:00:01 actions=output:2`,
	`table=211, priority=24,icmp6,ipv6_src=fd00:10:244:1::5,icmp_type=136,icmp_code=0,nd_target=fd00:10:244:1::5,nd_tll=0a:00:00:00:00:02 actions=output:3`,
	`table=211, priority=25,icmp6,icmp_type=135,nd_target=fe80::1 actions=drop`,
	`table=211, priority=26,icmp6,icmp_type=136,nd_tll=0a:00:00:00:00:02 actions=drop`,
	`table=211, priority=27,icmp6,ipv6_dst=ff02::1,icmp_type=134 actions=drop`,
	`table=212, priority=30,tcp6,ipv6_dst=fd00:10:96::/108,tp_dst=80 actions=conjunction(9,2/2)`,
	`table=212, priority=30,udp6,tp_dst=0x3e8/0xfff8 actions=conjunction(9,2/2)`,
	`table=212, priority=30,sctp6,tp_dst=9 actions=conjunction(9,2/2)`,
	`table=212, priority=30,ipv6,ipv6_src=fd00:10:244:2::/64 actions=conjunction(9,1/2)`,
	`table=212, priority=30,conj_id=9,ipv6 actions=goto_table:213`,
	`table=212, priority=40,ct_state=-new-inv+trk,ipv6 actions=goto_table:213`,
	`table=212, priority=1,ct_state=+new+trk,ipv6 actions=ct(commit,zone=65280),goto_table:213`,
}

func TestIPv6Golden(t *testing.T) {
	compareLines(t, "IPv6 flows", lines(ipv6Sink(), nil), goldenIPv6)
	for _, f := range ipv6Sink() {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// TestIPv6Prerequisites checks that Validate refuses each IPv6 field without its
// prerequisite and names the field and what it needs (OpenFlow 1.3.5 §7.2.3.6), and
// refuses addresses of the other family.
func TestIPv6Prerequisites(t *testing.T) {
	mac := mustMAC("0a:00:00:00:00:01")
	icmp6 := func(m Match) Match { m.EthType, m.IPProto = EthTypeIPv6, IPProtoICMPv6; return m }
	for _, c := range []struct {
		name  string
		match Match
		want  string // in the error
	}{
		{"ipv6_src without eth_type", Match{IPv6Src: mustCIDR6("fd00::1/128")}, "ipv6_src needs EthType 0x86dd (ipv6)"},
		{"ipv6_dst on ip", Match{EthType: EthTypeIPv4, IPv6Dst: mustCIDR6("fd00::/64")}, "ipv6_dst needs EthType 0x86dd (ipv6)"},
		{"ipv6_label without eth_type", Match{IPv6Label: 1, IPv6LabelMask: 0xfffff}, "ipv6_label needs EthType 0x86dd (ipv6)"},
		{"icmpv6_type without eth_type", Match{IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6EchoRequest)}, "icmpv6_type needs EthType 0x86dd (ipv6)"},
		{"icmpv6_type without ip_proto", Match{EthType: EthTypeIPv6, ICMPv6Type: new(ICMPv6EchoRequest)}, "icmpv6_type needs IPProto 58 (icmp6)"},
		{"icmpv6_type on tcp6", Match{EthType: EthTypeIPv6, IPProto: IPProtoTCP, ICMPv6Type: new(ICMPv6EchoRequest)}, "icmpv6_type needs IPProto 58 (icmp6)"},
		{"icmpv6_code without ip_proto", Match{EthType: EthTypeIPv6, ICMPv6Code: new(uint8(0))}, "icmpv6_code needs IPProto 58 (icmp6)"},
		{"nd_target without eth_type", Match{NDTarget: net.ParseIP("fd00::1")}, "nd_target needs EthType 0x86dd (ipv6)"},
		{"nd_target without ip_proto", Match{EthType: EthTypeIPv6, NDTarget: net.ParseIP("fd00::1")}, "nd_target needs IPProto 58 (icmp6)"},
		{"nd_target without type", icmp6(Match{NDTarget: net.ParseIP("fd00::1")}), "nd_target needs icmpv6_type 135 (neighbor solicitation) or 136 (neighbor advertisement)"},
		{"nd_target on echo", icmp6(Match{ICMPv6Type: new(ICMPv6EchoRequest), NDTarget: net.ParseIP("fd00::1")}), "nd_target needs icmpv6_type 135"},
		{"nd_sll without type", icmp6(Match{NDSLL: mac}), "nd_sll needs icmpv6_type 135 (neighbor solicitation)"},
		{"nd_sll on advertisement", icmp6(Match{ICMPv6Type: new(ICMPv6NeighborAdvert), NDSLL: mac}), "nd_sll needs icmpv6_type 135 (neighbor solicitation)"},
		{"nd_tll on solicitation", icmp6(Match{ICMPv6Type: new(ICMPv6NeighborSolicit), NDTLL: mac}), "nd_tll needs icmpv6_type 136 (neighbor advertisement)"},
		{"nd_tll without ip_proto", Match{EthType: EthTypeIPv6, ICMPv6Type: new(ICMPv6NeighborAdvert), NDTLL: mac}, "icmpv6_type needs IPProto 58 (icmp6)"},
		{"nd_target with code 1", icmp6(Match{ICMPv6Type: new(ICMPv6NeighborSolicit), ICMPv6Code: new(uint8(1)), NDTarget: net.ParseIP("fd00::1")}), "nd fields need icmpv6_code 0"},
		{"ipv4 in ipv6_src", Match{EthType: EthTypeIPv6, IPv6Src: mustCIDR("10.0.0.0/8")}, "ipv6_src 10.0.0.0/8 is not an IPv6 prefix"},
		{"ipv4-mapped in ipv6_dst", Match{EthType: EthTypeIPv6, IPv6Dst: mustCIDR6("::ffff:10.0.0.1/128")}, "is not an IPv6 prefix"},
		{"ipv4 nd_target", icmp6(Match{ICMPv6Type: new(ICMPv6NeighborSolicit), NDTarget: net.ParseIP("10.0.0.1")}), "nd_target 10.0.0.1 is not an IPv6 address"},
		{"short nd_sll", icmp6(Match{ICMPv6Type: new(ICMPv6NeighborSolicit), NDSLL: net.HardwareAddr{1, 2}}), "nd_sll 01:02 is not 48 bits"},
		{"label without mask", Match{EthType: EthTypeIPv6, IPv6Label: 5}, "IPv6LabelMask 0"},
		{"label mask too wide", Match{EthType: EthTypeIPv6, IPv6Label: 5, IPv6LabelMask: 0x1fffff}, "wider than the 20-bit flow label"},
		{"label outside mask", Match{EthType: EthTypeIPv6, IPv6Label: 0x10005, IPv6LabelMask: 0xf0000}, "bits outside its mask"},
		{"ipv6 in nw_src", Match{EthType: EthTypeIPv6, IPSrc: mustCIDR6("fd00::/64")}, "nw_src/nw_dst need EthType 0x0800 (ip)"},
		{"nw_proto without eth_type", Match{IPProto: IPProtoICMPv6}, "nw_proto needs EthType 0x0800 (ip) or 0x86dd (ipv6)"},
	} {
		err := Flow{Table: 210, Match: c.match}.Validate()
		if err == nil {
			t.Errorf("%s: Validate accepted %s", c.name, Flow{Match: c.match})
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.want)
		}
	}
	// ct over IPv6 is fine; ct without an IP family is not.
	if err := (Flow{Table: 210, Match: Match{EthType: EthTypeIPv6}, Actions: []Action{CT{Commit: true}}}).Validate(); err != nil {
		t.Errorf("ct over ipv6 refused: %v", err)
	}
	if err := (Flow{Table: 210, Actions: []Action{CT{Commit: true}}}).Validate(); err == nil || !strings.Contains(err.Error(), "0x86dd (ipv6)") {
		t.Errorf("ct without eth_type: error %v, want one naming ip and ipv6", err)
	}
}

// TestIPv6OXMBytes checks the match TLVs of an ND flow byte for byte against the OpenFlow
// 1.3.5 §7.2.3.7 encoding (class 0x8000, field<<1|hasmask, length, value[, mask]), in
// prerequisite order (§7.2.3.6), and that libOpenflow's FlowMod carries them as they are.
func TestIPv6OXMBytes(t *testing.T) {
	m := Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: new(ICMPv6NeighborAdvert), ICMPv6Code: new(uint8(0)),
		NDTarget: net.ParseIP("fd00::5"), NDTLL: mustMAC("0a:00:00:00:00:02"), NDSLL: nil,
		IPv6Src: mustCIDR6("fd00::5/64"), IPv6Dst: mustCIDR6("fd00::1/128"), IPv6Label: 0x12300, IPv6LabelMask: 0xfff00}
	want := strings.Join([]string{
		"80000a02" + "86dd", // ETH_TYPE 5
		"80001401" + "3a",   // IP_PROTO 10: 58
		"80003a01" + "88",   // ICMPV6_TYPE 29: 136
		"80003c01" + "00",   // ICMPV6_CODE 30: 0
		"80003e10" + "fd000000000000000000000000000005",                                      // IPV6_ND_TARGET 31
		"80004206" + "0a0000000002",                                                          // IPV6_ND_TLL 33
		"80003520" + "fd000000000000000000000000000000" + "ffffffffffffffff0000000000000000", // IPV6_SRC 26, masked
		"80003610" + "fd000000000000000000000000000001",                                      // IPV6_DST 27
		"80003908" + "00012300" + "000fff00",                                                 // IPV6_FLABEL 28, masked
	}, "")
	om := m.ofMatch()
	var got bytes.Buffer
	for _, f := range om.Fields {
		b, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got.Write(b)
	}
	if g := hex.EncodeToString(got.Bytes()); g != want {
		t.Fatalf("OXM TLVs\n got  %s\n want %s", g, want)
	}
	// The flow mod's ofp_match: type OFPMT_OXM, length 4 + TLVs, padded to 8 bytes.
	fm := Flow{Table: 210, Priority: 1, Match: m}.FlowMod(openflow13.FC_ADD)
	data, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	match := data[8+40:]
	if typ, n := binary.BigEndian.Uint16(match), binary.BigEndian.Uint16(match[2:]); typ != openflow13.MatchType_OXM || int(n) != 4+got.Len() {
		t.Fatalf("ofp_match type %d length %d, want %d and %d", typ, n, openflow13.MatchType_OXM, 4+got.Len())
	}
	if !bytes.Equal(match[4:4+got.Len()], got.Bytes()) {
		t.Fatalf("flow mod match TLVs differ from the fields'")
	}
	if int(binary.BigEndian.Uint16(data[2:])) != len(data) || len(data)%8 != 0 {
		t.Fatalf("flow mod header length %d, %d bytes", binary.BigEndian.Uint16(data[2:]), len(data))
	}
	// Exact label: unmasked, 4 bytes.
	exact := Match{EthType: EthTypeIPv6, IPv6Label: 0x12345, IPv6LabelMask: 0xfffff}.ofMatch()
	b, _ := exact.Fields[len(exact.Fields)-1].MarshalBinary()
	if g := hex.EncodeToString(b); g != "8000380400012345" {
		t.Fatalf("exact ipv6_label TLV %s, want 8000380400012345", g)
	}
}

// TestIPv6FlowModParse checks that libOpenflow parses the IPv6 flow mods back with one
// TLV per set field and the flow's fixed fields (flows with an ipv6_label are left out:
// libOpenflow has no decoder for OXM_OF_IPV6_FLABEL; TestIPv6OXMBytes checks its bytes).
func TestIPv6FlowModParse(t *testing.T) {
	for _, f := range ipv6Sink() {
		if f.Match.IPv6LabelMask != 0 {
			continue
		}
		data, err := f.FlowMod(openflow13.FC_ADD).MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		msg, err := openflow13.Parse(data)
		if err != nil {
			t.Fatalf("%s: parse back: %v", f, err)
		}
		fm, ok := msg.(*openflow13.FlowMod)
		if !ok {
			t.Fatalf("%s: parsed as %T", f, msg)
		}
		if fm.TableId != uint8(f.Table) || fm.Priority != f.Priority || fm.Cookie != uint64(f.Cookie) {
			t.Errorf("%s: decoded %+v", f, fm)
		}
		if n := len(fm.Match.Fields); n != f.Match.fieldCount() {
			t.Errorf("%s: %d match fields on the wire, want %d", f, n, f.Match.fieldCount())
		}
		checkInstructions(t, f, fm.Instructions)
	}
}
