package flows

import (
	"net"
	"testing"
)

// TestServiceFlowsGolden: the Services feature's node flows, one Service port's flow and
// group (two endpoints, one of weight 3), the no-endpoint flow, and the policy stages'
// flows that change with Services on (TestServiceOnSwitch checks the same text on OVS).
func TestServiceFlowsGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services, cfg.Policy = true, true
	var got []string
	for _, f := range PipelineFlows(cfg) {
		switch f.Table.Name() {
		case StageServiceConntrack, StageServiceLB:
			got = append(got, f.String())
		case StageConntrack, StageConntrackCommit:
			if f.Priority == PriorityPass && f.Table.Name() == StageConntrack || f.Priority == PriorityNormal {
				got = append(got, f.String())
			}
		}
	}
	sp := ServicePort{ID: 7, ClusterIP: net.ParseIP("10.96.0.10"), Proto: IPProtoTCP, Port: 80, Endpoints: []ServiceEndpoint{
		{IP: net.ParseIP("10.244.1.6"), Port: 8080}, {IP: net.ParseIP("10.244.2.9"), Port: 8080, Weight: 3}}}
	if err := sp.Validate(); err != nil {
		t.Fatal(err)
	}
	fs, gs := ServicePortFlows(cfg, sp)
	for _, f := range fs {
		got = append(got, f.String())
	}
	for _, g := range gs {
		if err := g.Validate(); err != nil {
			t.Error(err)
		}
		got = append(got, g.String())
	}
	sp.Endpoints = nil
	fs, gs = ServicePortFlows(cfg, sp)
	if len(gs) != 0 {
		t.Errorf("a Service port without endpoints has groups %v", gs)
	}
	got = append(got, fs[0].String())
	want := []string{
		`cookie=0x500070100000000, table="service_conntrack", priority=1,ip actions=ct(table="service_lb",zone=65280,nat)`,
		`cookie=0x500070100000000, table="service_conntrack", priority=0 actions=drop`,
		`cookie=0x500070100000000, table="service_lb", priority=1 actions=goto_table:service`,
		`cookie=0x500070100000000, table="service_lb", priority=0 actions=drop`,
		`cookie=0x500070100000000, table=conntrack, priority=1,ip actions=goto_table:"conntrack_state"`,
		`cookie=0x500070100000000, table="conntrack_commit", priority=100,ct_state=+new+trk-dnat,ip actions=ct(commit,zone=65280),goto_table:remote`,
		`cookie=0x500070500000007, table="service_lb", priority=100,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_dst=10.96.0.10,tp_dst=80 actions=group:1048583`,
		`group_id=1048583,type=select,bucket=actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.1.6:8080)),bucket=weight:3,actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.2.9:8080))`,
		`cookie=0x500070500000007, table="service_lb", priority=100,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_dst=10.96.0.10,tp_dst=80 actions=meter:2,CONTROLLER:128`,
	}
	compareLines(t, "service flows", got, want)
	// Services off: the Service port builder is a bug (its stage holds no flow).
	cfg.Services = false
	for _, f := range PipelineFlows(cfg) {
		if n := f.Table.Name(); n == StageServiceConntrack || n == StageServiceLB {
			t.Errorf("Services off, yet %s", f)
		}
	}
}

// TestServicePortValidate: what cannot be a Service port is refused.
func TestServicePortValidate(t *testing.T) {
	ok := ServicePort{ID: 1, ClusterIP: net.ParseIP("10.96.0.1"), Proto: IPProtoUDP, Port: 53}
	for what, sp := range map[string]ServicePort{
		"id 0":       func() ServicePort { s := ok; s.ID = 0; return s }(),
		"id too big": func() ServicePort { s := ok; s.ID = GroupIDMax; return s }(),
		"IPv6":       func() ServicePort { s := ok; s.ClusterIP = net.ParseIP("fd00::1"); return s }(),
		"ICMP":       func() ServicePort { s := ok; s.Proto = 1; return s }(),
		"port 0":     func() ServicePort { s := ok; s.Port = 0; return s }(),
		"endpoint port": func() ServicePort {
			s := ok
			s.Endpoints = []ServiceEndpoint{{IP: net.ParseIP("10.244.1.6")}}
			return s
		}(),
	} {
		if err := sp.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %v", what, sp)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}
