package flows

// IPv6 Service ports (issue 23) on a dual-stack node: the golden lines of each builder
// (checked against a real switch by TestServiceIPv6OnSwitch).

import (
	"net"
	"strings"
	"testing"
)

// testIPv6ServicePorts are the golden IPv6 Service ports: TCP with two endpoints (one of
// weight 3), an external IP and a load-balancer IP with a source range; TCP without
// endpoints; UDP with two endpoints (hash slots); TCP with session affinity.
func testIPv6ServicePorts() []ServicePort {
	_, r, _ := net.ParseCIDR("2001:db8:1::/48")
	return []ServicePort{
		{ID: 9, ClusterIP: net.ParseIP("fd00:96::10"), Proto: IPProtoTCP, Port: 80,
			Frontends: []ServiceFrontend{{IP: net.ParseIP("2001:db8::7"), Port: 80},
				{IP: net.ParseIP("2001:db8::8"), Port: 80, SourceRanges: []*net.IPNet{r}}},
			Endpoints: []ServiceEndpoint{{IP: net.ParseIP("fd00:10:244:1::6"), Port: 8080},
				{IP: net.ParseIP("fd00:10:244:2::9"), Port: 8080, Weight: 3}}},
		{ID: 10, ClusterIP: net.ParseIP("fd00:96::11"), Proto: IPProtoTCP, Port: 80},
		{ID: 11, ClusterIP: net.ParseIP("fd00:96::a"), Proto: IPProtoUDP, Port: 53,
			Endpoints: []ServiceEndpoint{{IP: net.ParseIP("fd00:10:244:1::6"), Port: 8053},
				{IP: net.ParseIP("fd00:10:244:2::9"), Port: 8053}}},
		{ID: 12, ClusterIP: net.ParseIP("fd00:96::12"), Proto: IPProtoTCP, Port: 80, AffinitySeconds: 10800,
			Endpoints: []ServiceEndpoint{{IP: net.ParseIP("fd00:10:244:1::6"), Port: 8080, AffinityID: 21},
				{IP: net.ParseIP("fd00:10:244:2::9"), Port: 8080, AffinityID: 22}}},
	}
}

// TestServiceIPv6FlowsGolden: IPv6 Service ports match tcp6/udp6 and ipv6_dst, their
// buckets and slot flows DNAT to [IPv6]:port in the same zone as IPv4's, a source range
// is ipv6_src, and session affinity learns ipv6_src with the endpoint's affinity id in
// reg3 (an IPv6 address does not fit it).
func TestServiceIPv6FlowsGolden(t *testing.T) {
	cfg := testDualStackConfig()
	cfg.Services = true
	var got []string
	for _, sp := range testIPv6ServicePorts() {
		if err := sp.Validate(); err != nil {
			t.Fatal(err)
		}
		fs, gs := ServicePortFlows(cfg, sp)
		for _, f := range fs {
			got = append(got, f.String())
		}
		for _, g := range gs {
			got = append(got, g.String())
		}
	}
	compareLines(t, "IPv6 Service port flows", got, goldenIPv6ServicePorts)
}

// goldenIPv6ServicePorts are testIPv6ServicePorts' flows and groups, in builder order.
var goldenIPv6ServicePorts = []string{
	`cookie=0x500070500000009, table="service_lb", priority=100,ct_state=+new+trk,tcp6,reg0=0x2/0xf,ipv6_dst=fd00:96::10,tp_dst=80 actions=group:1048585`,
	`cookie=0x500070500000009, table="service_lb", priority=100,ct_state=+new+trk,tcp6,reg0=0x2/0xf,ipv6_dst=2001:db8::7,tp_dst=80 actions=group:1048585`,
	`cookie=0x500070500000009, table="service_lb", priority=101,ct_state=+new+trk,tcp6,reg0=0x2/0xf,ipv6_src=2001:db8:1::/48,ipv6_dst=2001:db8::8,tp_dst=80 actions=group:1048585`,
	`cookie=0x500070500000009, table="service_lb", priority=100,ct_state=+new+trk,tcp6,reg0=0x2/0xf,ipv6_dst=2001:db8::8,tp_dst=80 actions=drop`,
	`group_id=1048585,type=select,bucket=actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=[fd00:10:244:1::6]:8080)),bucket=weight:3,actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=[fd00:10:244:2::9]:8080))`,
	`cookie=0x50007050000000a, table="service_lb", priority=100,ct_state=+new+trk,tcp6,reg0=0x2/0xf,ipv6_dst=fd00:96::11,tp_dst=80 actions=meter:2,CONTROLLER:128`,
	`cookie=0x50007050000000b, table="service_lb", priority=100,ct_state=+new+trk,udp6,reg0=0x2/0xf,ipv6_dst=fd00:96::a,tp_dst=53 actions=load:0xb->NXM_NX_REG5[],multipath(symmetric_l3l4+udp,0,modulo_n,2,0,NXM_NX_REG6[0..15]),goto_table:"service_endpoint"`,
	`cookie=0x50007050000000b, table="service_endpoint", priority=150,udp6,reg5=0xb,reg6=0/0xffff actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=[fd00:10:244:1::6]:8053))`,
	`cookie=0x50007050000000b, table="service_endpoint", priority=150,udp6,reg5=0xb,reg6=0x1/0xffff actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=[fd00:10:244:2::9]:8053))`,
	`cookie=0x50007050000000c, table="service_lb", priority=100,ct_state=+new+trk,tcp6,reg0=0x2/0xf,ipv6_dst=fd00:96::12,tp_dst=80 actions=load:0xc->NXM_NX_REG5[],resubmit(,"service_affinity"),goto_table:"service_endpoint"`,
	`cookie=0x50007050000000c, table="service_endpoint", priority=200,ipv6,reg3=0x15,reg4=0x11f90/0x1ffff,reg5=0xc actions=learn(table="service_affinity",idle_timeout=10800,priority=200,cookie=0x500070600000015,eth_type=0x86dd,NXM_NX_IPV6_SRC[],NXM_NX_REG5[],load:0x15->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16]),ct(commit,table="l3_forwarding",zone=65280,nat(dst=[fd00:10:244:1::6]:8080))`,
	`cookie=0x50007050000000c, table="service_endpoint", priority=200,ipv6,reg3=0x16,reg4=0x11f90/0x1ffff,reg5=0xc actions=learn(table="service_affinity",idle_timeout=10800,priority=200,cookie=0x500070600000016,eth_type=0x86dd,NXM_NX_IPV6_SRC[],NXM_NX_REG5[],load:0x16->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16]),ct(commit,table="l3_forwarding",zone=65280,nat(dst=[fd00:10:244:2::9]:8080))`,
	`cookie=0x50007050000000c, table="service_endpoint", priority=100,ipv6,reg5=0xc actions=group:1048588`,
	`group_id=1048588,type=select,bucket=actions=load:0x15->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16],resubmit(,"service_endpoint"),bucket=actions=load:0x16->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16],resubmit(,"service_endpoint")`,
}

// TestServiceIPv6NodeGolden: on a dual-stack node with Services, IPv6 goes through the
// Services stages: the gateway's IPv6 to service_conntrack, a pod's to service_hairpin;
// service_conntrack has IPv6's own ct(nat) flows in the same zone; hairpin over IPv6
// SNATs to HairpinSNATIPv6. Without Services, none of it (IPv6 goes to service).
func TestServiceIPv6NodeGolden(t *testing.T) {
	cfg := testDualStackConfig()
	cfg.Services = true
	var got []string
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...) {
		n := f.Table.Name()
		switch {
		case f.Match.EthType != EthTypeIPv6:
		case n == StageServiceHairpin, n == StageServiceConntrack,
			n == "l3_forwarding" && f.Priority == PriorityHairpin,
			n == "spoof_guard" && f.Priority <= PriorityNormal && f.Match.IPProto == 0:
			got = append(got, f.String())
		}
	}
	want := []string{
		`cookie=0x500070100000000, table="spoof_guard", priority=50,ipv6,reg0=0x1/0xf actions=goto_table:"service_conntrack"`,
		`cookie=0x500070100000000, table="service_hairpin", priority=110,ipv6,ipv6_dst=fc00::a9fe:fc actions=ct(table="service_conntrack",zone=65281,nat)`,
		`cookie=0x500070100000000, table="service_conntrack", priority=105,ct_state=+rpl+trk,ipv6 actions=load:0x1->NXM_NX_REG0[4],ct(table="service_lb",zone=65280,nat)`,
		`cookie=0x500070100000000, table="service_conntrack", priority=1,ipv6 actions=ct(table="service_lb",zone=65280,nat)`,
		`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fd00:10:244:1::5 actions=goto_table:"service_hairpin"`,
		`cookie=0x50007020af40105, table="spoof_guard", priority=100,ipv6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fe80::858:aff:fef4:105 actions=goto_table:"service_hairpin"`,
		`cookie=0x50007020af40105, table="l3_forwarding", priority=110,ipv6,ipv6_src=fd00:10:244:1::5,ipv6_dst=fd00:10:244:1::5 actions=set_field:0a:58:0a:f4:01:05->eth_dst,load:0x3->NXM_NX_REG1[],load:0x1->NXM_NX_REG0[4],ct(commit,table=output,zone=65281,nat(src=fc00::a9fe:fc))`,
	}
	compareLines(t, "dual-stack node's IPv6 Services flows", got, want)
	cfg.Services = false
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...) {
		if s := f.String(); f.Match.EthType == EthTypeIPv6 && (strings.Contains(s, "service_") || strings.Contains(s, "fc00::a9fe:fc")) {
			t.Errorf("Services off, yet %s", s)
		}
	}
}

// TestServicePortValidateFamilies: a Service port's frontends, source ranges and
// endpoints are all of its ClusterIP's family.
func TestServicePortValidateFamilies(t *testing.T) {
	for _, sp := range testIPv6ServicePorts() {
		if err := sp.Validate(); err != nil {
			t.Errorf("%v: %v", sp, err)
		}
	}
	_, r4, _ := net.ParseCIDR("192.0.2.0/24")
	v6 := ServicePort{ID: 1, ClusterIP: net.ParseIP("fd00:96::1"), Proto: IPProtoTCP, Port: 80}
	v4 := ServicePort{ID: 1, ClusterIP: net.ParseIP("10.96.0.1"), Proto: IPProtoTCP, Port: 80}
	for what, sp := range map[string]ServicePort{
		"IPv4 endpoint of an IPv6 ClusterIP": func() ServicePort {
			s := v6
			s.Endpoints = []ServiceEndpoint{{IP: net.ParseIP("10.244.1.6"), Port: 8080}}
			return s
		}(),
		"IPv6 endpoint of an IPv4 ClusterIP": func() ServicePort {
			s := v4
			s.Endpoints = []ServiceEndpoint{{IP: net.ParseIP("fd00:10:244:1::6"), Port: 8080}}
			return s
		}(),
		"IPv4 frontend of an IPv6 ClusterIP": func() ServicePort {
			s := v6
			s.Frontends = []ServiceFrontend{{IP: net.ParseIP("192.0.2.7"), Port: 80}}
			return s
		}(),
		"IPv4 source range of an IPv6 load-balancer IP": func() ServicePort {
			s := v6
			s.Frontends = []ServiceFrontend{{IP: net.ParseIP("2001:db8::8"), Port: 80, SourceRanges: []*net.IPNet{r4}}}
			return s
		}(),
	} {
		if err := sp.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %v", what, sp)
		}
	}
}
