package flows

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
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
		case StageServiceAffinity, StageServiceConntrack, StageServiceLB, StageServiceEndpoint:
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
		`cookie=0x500070100000000, table="service_affinity", priority=0 actions=drop`,
		`cookie=0x500070100000000, table="service_conntrack", priority=105,ct_state=+rpl+trk,ip actions=load:0x1->NXM_NX_REG0[4],ct(table="service_lb",zone=65280,nat)`,
		`cookie=0x500070100000000, table="service_conntrack", priority=1,ip actions=ct(table="service_lb",zone=65280,nat)`,
		`cookie=0x500070100000000, table="service_conntrack", priority=0 actions=drop`,
		`cookie=0x500070100000000, table="service_lb", priority=1 actions=goto_table:"service_endpoint"`,
		`cookie=0x500070100000000, table="service_lb", priority=0 actions=drop`,
		`cookie=0x500070100000000, table="service_endpoint", priority=1 actions=goto_table:service`,
		`cookie=0x500070100000000, table="service_endpoint", priority=0 actions=drop`,
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
		if n := f.Table.Name(); n == StageServiceConntrack || n == StageServiceLB || n == StageServiceHairpin {
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
		"IPv6 ClusterIP, IPv4 endpoint": func() ServicePort {
			s := ok
			s.ClusterIP = net.ParseIP("fd00::1")
			s.Endpoints = []ServiceEndpoint{{IP: net.ParseIP("10.244.1.6"), Port: 53}}
			return s
		}(),
		"ICMP":   func() ServicePort { s := ok; s.Proto = 1; return s }(),
		"port 0": func() ServicePort { s := ok; s.Port = 0; return s }(),
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

// testAffinityPort is a TCP Service port with session affinity and two endpoints.
func testAffinityPort() ServicePort {
	return ServicePort{ID: 8, ClusterIP: net.ParseIP("10.96.0.11"), Proto: IPProtoTCP, Port: 80, AffinitySeconds: 10800,
		Endpoints: []ServiceEndpoint{{IP: net.ParseIP("10.244.1.6"), Port: 8080, AffinityID: 1},
			{IP: net.ParseIP("10.244.2.9"), Port: 8080, AffinityID: 2}}}
}

// TestServiceAffinityFlowsGolden: a Service port with sessionAffinity ClientIP: the
// service_lb flow looks the client up (resubmit to service_affinity) and goes on to
// service_endpoint, whose per-endpoint hit flows relearn and DNAT and whose port flow
// sends the rest to the group, whose buckets name their endpoint in reg3/reg4 and
// resubmit to its hit flow (a learn action in a group bucket learned nothing on OVS 3.1's
// userspace datapath, TestServiceOnSwitch). Timeouts: 10800 s is learned as is;
// 86400 s is learned as 65535 s with send_flow_rem (the daemon carries the remainder);
// UDP and SCTP learn their own port field. TestServiceProxy checks them on OVS.
func TestServiceAffinityFlowsGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services, cfg.Policy = true, true
	sp := testAffinityPort()
	if err := sp.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	fs, gs := ServicePortFlows(cfg, sp)
	for _, f := range fs {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		got = append(got, f.String())
	}
	for _, g := range gs {
		if err := g.Validate(); err != nil {
			t.Error(err)
		}
		got = append(got, g.String())
	}
	learn := func(idle string, ep, port string, id int) string {
		return `learn(table="service_affinity",idle_timeout=` + idle + `,priority=200,cookie=0x50007060000000` + string(rune('0'+id)) +
			`,eth_type=0x800,NXM_OF_IP_SRC[],NXM_NX_REG5[],load:` + ep + `->NXM_NX_REG3[],load:` + port + `->NXM_NX_REG4[0..16])`
	}
	want := []string{
		`cookie=0x500070500000008, table="service_lb", priority=100,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_dst=10.96.0.11,tp_dst=80 actions=load:0x8->NXM_NX_REG5[],resubmit(,"service_affinity"),goto_table:"service_endpoint"`,
		`cookie=0x500070500000008, table="service_endpoint", priority=200,ip,reg3=0xaf40106,reg4=0x11f90/0x1ffff,reg5=0x8 actions=` +
			learn("10800", "0xaf40106", "0x11f90", 1) + `,ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.1.6:8080))`,
		`cookie=0x500070500000008, table="service_endpoint", priority=200,ip,reg3=0xaf40209,reg4=0x11f90/0x1ffff,reg5=0x8 actions=` +
			learn("10800", "0xaf40209", "0x11f90", 2) + `,ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.2.9:8080))`,
		`cookie=0x500070500000008, table="service_endpoint", priority=100,ip,reg5=0x8 actions=group:1048584`,
		`group_id=1048584,type=select,bucket=actions=load:0xaf40106->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16],resubmit(,"service_endpoint"),` +
			`bucket=actions=load:0xaf40209->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16],resubmit(,"service_endpoint")`,
	}
	compareLines(t, "affinity flows", got, want)

	// 86400 s: the learn action's idle timeout stops at 65535 s and asks for the
	// flow-removed message that carries the remainder.
	sp.AffinitySeconds = 86400
	fs, _ = ServicePortFlows(cfg, sp)
	if g := fs[1].String(); !strings.Contains(g, `idle_timeout=65535,priority=200,send_flow_rem,cookie=`) {
		t.Errorf("86400 s affinity: endpoint flow %s, want learn with idle_timeout=65535,priority=200,send_flow_rem", g)
	}
	if idle, rem := AffinityLearnTimeout(cfg, 86400); idle != 65535 || !rem {
		t.Errorf("AffinityLearnTimeout(86400) = %d, %v; want 65535, true", idle, rem)
	}
	if idle, rem := AffinityLearnTimeout(cfg, 65535); idle != 65535 || rem {
		t.Errorf("AffinityLearnTimeout(65535) = %d, %v; want 65535, false", idle, rem)
	}
	// A lowered learn limit (tests): 6 s is learned as 2 s with send_flow_rem.
	low := cfg
	low.AffinityLearnMax = 2
	sp.AffinitySeconds = 6
	fs, _ = ServicePortFlows(low, sp)
	if g := fs[1].String(); !strings.Contains(g, `idle_timeout=2,priority=200,send_flow_rem,cookie=`) {
		t.Errorf("6 s affinity with a 2 s limit: endpoint flow %s, want learn with idle_timeout=2,priority=200,send_flow_rem", g)
	}
	sp.AffinitySeconds = 86400
	// UDP and SCTP learn alike: the port's id in reg5 names the protocol too.
	for _, proto := range []uint8{IPProtoUDP, IPProtoSCTP} {
		sp.Proto = proto
		fs, _ = ServicePortFlows(cfg, sp)
		if g := fs[1].String(); !strings.Contains(g, "eth_type=0x800,NXM_OF_IP_SRC[],NXM_NX_REG5[],load:") {
			t.Errorf("protocol %d: endpoint flow %s, want the learn keyed on the client and reg5", proto, g)
		}
	}
	// More frontends (an external IP, a node address at the NodePort): a service_lb flow
	// each, all loading the port's id; the endpoint flows and the learned flows are the
	// port's, not the frontend's (one affinity per Service port, as kube-proxy's).
	sp = testAffinityPort()
	sp.Frontends = []ServiceFrontend{{IP: net.ParseIP("192.0.2.10"), Port: 80}, {IP: net.ParseIP("172.30.0.71"), Port: 30080, NodePort: true}}
	fs, _ = ServicePortFlows(cfg, sp)
	var lbs, eps int
	for _, f := range fs {
		switch tbl := f.Table.Name(); {
		case tbl == StageServiceLB && strings.Contains(f.String(), "actions=load:0x8->NXM_NX_REG5[],resubmit(,\"service_affinity\")"):
			lbs++
		case tbl == StageServiceEndpoint:
			eps++
		}
	}
	if lbs != 3 || eps != 3 {
		t.Errorf("3 frontends: %d service_lb flows loading the port id (want 3), %d service_endpoint flows (want 3: 2 endpoints and the group)", lbs, eps)
	}
	// Validation: above the API's maximum, and an endpoint without an affinity id.
	sp = testAffinityPort()
	sp.AffinitySeconds = 86401
	if sp.Validate() == nil {
		t.Error("Validate accepted an affinity timeout of 86401 s")
	}
	sp = testAffinityPort()
	sp.Endpoints[1].AffinityID = 0
	if sp.Validate() == nil {
		t.Error("Validate accepted an affinity endpoint without an affinity id")
	}
}

// TestAffinityRemainderGolden: the remainder flow of a learned flow that expired at the
// learn limit (lowered to 2 s, a timeout of 6 s): the learned flow's match, cookie and
// loads at priority 199 with the idle timeout T - limit; nothing for a flow that was
// deleted, expired at another idle timeout (a remainder itself), sits at another priority
// or table, names an endpoint or a frontend the port no longer has, carries another
// generation, or for a port whose timeout is within the limit. The 86400 s default gets
// 20865 s.
func TestAffinityRemainderGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services, cfg.AffinityLearnMax = true, 2
	sp := testAffinityPort()
	sp.AffinitySeconds = 6
	tbl, _ := StageTable(StageServiceAffinity)
	learned := AffinityRemoved{Table: tbl, Priority: PriorityAffinityLearned, Cookie: AffinityCookie(cfg.Generation, sp.Endpoints[1]),
		IdleTimeout: 2, IdleExpired: true, Client: net.ParseIP("10.244.1.5"), PortID: sp.ID}
	f, ok := AffinityRemainder(cfg, sp, learned)
	if !ok {
		t.Fatal("no remainder for a learned flow expired at the limit")
	}
	if err := f.Flow.Validate(); err != nil {
		t.Error(err)
	}
	compareLines(t, "remainder flow", []string{f.String()}, []string{
		`cookie=0x500070600000002, table="service_affinity", idle_timeout=4, priority=199,ip,reg5=0x8,nw_src=10.244.1.5 actions=load:0xaf40209->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16]`})
	if fm := f.FlowMod(); fm.Command != 0 /* OFPFC_ADD */ || fm.IdleTimeout != 4 || fm.HardTimeout != 0 || fm.Flags != 0 || fm.Priority != 199 {
		t.Errorf("flow mod: command %d idle %d hard %d flags %#x priority %d; want ADD, idle 4, no hard timeout, no flags, 199",
			fm.Command, fm.IdleTimeout, fm.HardTimeout, fm.Flags, fm.Priority)
	}
	other := cfg
	other.Generation++
	for name, mod := range map[string]func(*AffinityRemoved){
		"deleted":              func(r *AffinityRemoved) { r.IdleExpired = false },
		"a remainder expired":  func(r *AffinityRemoved) { r.IdleTimeout = 4; r.Priority = PriorityAffinityRemainder },
		"another idle timeout": func(r *AffinityRemoved) { r.IdleTimeout = 3 },
		"another table":        func(r *AffinityRemoved) { r.Table++ },
		"another port":         func(r *AffinityRemoved) { r.PortID = 9 },
		"no port":              func(r *AffinityRemoved) { r.PortID = 0 },
		"a gone endpoint":      func(r *AffinityRemoved) { r.Cookie = AffinityCookie(cfg.Generation, ServiceEndpoint{AffinityID: 9}) },
		"another generation":   func(r *AffinityRemoved) { r.Cookie = AffinityCookie(other.Generation, sp.Endpoints[1]) },
		"no client":            func(r *AffinityRemoved) { r.Client = nil },
	} {
		r := learned
		mod(&r)
		if f, ok := AffinityRemainder(cfg, sp, r); ok {
			t.Errorf("%s: remainder %s, want none", name, f)
		}
	}
	within := sp
	within.AffinitySeconds = 2
	if f, ok := AffinityRemainder(cfg, within, learned); ok {
		t.Errorf("timeout within the limit: remainder %s, want none", f)
	}
	// The default limit: 86400 s learned as 65535 s, carried on for 20865 s.
	cfg.AffinityLearnMax = 0
	sp.AffinitySeconds = 86400
	learned.IdleTimeout = 65535
	if f, ok := AffinityRemainder(cfg, sp, learned); !ok || f.IdleTimeout != 20865 {
		t.Errorf("86400 s: remainder %s (%v), want idle_timeout=20865", f, ok)
	}
}

// TestAffinityPortDelete: the delete of a Service port's learned affinity flows selects
// table service_affinity, the port's id in reg5 and owner kind 6 by cookie, any id, one
// flow mod whatever the frontends.
func TestAffinityPortDelete(t *testing.T) {
	cfg := testConfig()
	cfg.Services = true
	sp := testAffinityPort()
	sp.Frontends = []ServiceFrontend{{IP: net.ParseIP("192.0.2.10"), Port: 80}}
	fms := AffinityPortDelete(cfg, sp)
	if len(fms) != 1 {
		t.Fatalf("%d flow mods for a port with two frontends, want 1", len(fms))
	}
	fm := fms[0]
	tbl, _ := StageTable(StageServiceAffinity)
	if fm.Command != 3 /* OFPFC_DELETE */ || fm.TableId != uint8(tbl) {
		t.Errorf("command %d table %d, want OFPFC_DELETE (3) in table %d", fm.Command, fm.TableId, tbl)
	}
	if fm.Cookie != uint64(OwnerServiceAffinity)<<32 || fm.CookieMask != CookieOwnerKindMask {
		t.Errorf("cookie %#x/%#x, want kind 6 under the owner kind mask", fm.Cookie, fm.CookieMask)
	}
	if n := len(fm.Match.Fields); n != 1 {
		t.Errorf("%d match fields, want 1 (reg5)", n)
	}
}

// testFrontendPort is TCP port 80 of a Service with ClusterIP 10.96.0.12, external IP
// 192.0.2.10, load-balancer IP 198.51.100.7 open to 10.244.0.0/16 and 203.0.113.0/24, and
// NodePort 30080 on two node addresses.
func testFrontendPort() ServicePort {
	_, pods, _ := net.ParseCIDR("10.244.0.0/16")
	_, office, _ := net.ParseCIDR("203.0.113.0/24")
	return ServicePort{ID: 9, ClusterIP: net.ParseIP("10.96.0.12"), Proto: IPProtoTCP, Port: 80,
		Frontends: []ServiceFrontend{{IP: net.ParseIP("192.0.2.10"), Port: 80},
			{IP: net.ParseIP("198.51.100.7"), Port: 80, SourceRanges: []*net.IPNet{pods, office}},
			{IP: net.ParseIP("172.16.0.1"), Port: 30080, NodePort: true},
			{IP: net.ParseIP("172.16.0.2"), Port: 30080, NodePort: true}},
		Endpoints: []ServiceEndpoint{{IP: net.ParseIP("10.244.1.6"), Port: 8080}}}
}

// TestServiceFrontendsGolden: a Service port's external IP, load-balancer IP (with
// source ranges) and node addresses at its NodePort each get a service_lb flow to the
// same group (or, without endpoints, to the controller), the load-balancer IP's other
// sources a drop, node addresses a priority below the Service IPs' (kube-proxy's
// service-ips map before its service-nodeports map); an external view (no ClusterIP)
// has only its frontends; with affinity every frontend has its endpoint flows.
func TestServiceFrontendsGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services, cfg.Policy = true, true
	sp := testFrontendPort()
	if err := sp.Validate(); err != nil {
		t.Fatal(err)
	}
	render := func(sp ServicePort) []string {
		var got []string
		fs, gs := ServicePortFlows(cfg, sp)
		for _, f := range fs {
			if err := f.Validate(); err != nil {
				t.Error(err)
			}
			got = append(got, f.String())
		}
		for _, g := range gs {
			got = append(got, g.String())
		}
		return got
	}
	const c = `cookie=0x500070500000009, table="service_lb", `
	match := func(prio, dst, port string) string {
		return c + `priority=` + prio + `,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_dst=` + dst + `,tp_dst=` + port
	}
	matchSrc := func(src, dst string) string {
		return c + `priority=101,ct_state=+new+trk,tcp,reg0=0x2/0xf,nw_src=` + src + `,nw_dst=` + dst + `,tp_dst=80`
	}
	lines := func(acts string) []string {
		return []string{
			match("100", "10.96.0.12", "80") + ` actions=` + acts,
			match("100", "192.0.2.10", "80") + ` actions=` + acts,
			matchSrc("10.244.0.0/16", "198.51.100.7") + ` actions=` + acts,
			matchSrc("203.0.113.0/24", "198.51.100.7") + ` actions=` + acts,
			match("100", "198.51.100.7", "80") + ` actions=drop`,
			match("90", "172.16.0.1", "30080") + ` actions=` + acts,
			match("90", "172.16.0.2", "30080") + ` actions=` + acts,
		}
	}
	want := append(lines("group:1048585"),
		`group_id=1048585,type=select,bucket=actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.1.6:8080))`)
	compareLines(t, "frontends, one endpoint", render(sp), want)

	noEP := sp
	noEP.Endpoints = nil
	compareLines(t, "frontends, no endpoints", render(noEP), lines("meter:2,CONTROLLER:128"))

	// The external view: the same frontends without the ClusterIP.
	ext := sp
	ext.ClusterIP = nil
	if err := ext.Validate(); err != nil {
		t.Fatal(err)
	}
	compareLines(t, "external view", render(ext), append(lines("group:1048585")[1:], want[len(want)-1]))
	if got, w := ext.String(), "192.0.2.10:80/tcp (id 9, external)"; got != w {
		t.Errorf("external view String() = %q, want %q", got, w)
	}

	// Affinity with a NodePort frontend: its own lookup flow, which names the port in
	// reg5 as the ClusterIP's does; one set of endpoint flows for the port (one affinity
	// per Service port across its frontends, as kube-proxy's).
	aff := ServicePort{ID: 9, ClusterIP: net.ParseIP("10.96.0.12"), Proto: IPProtoTCP, Port: 80, AffinitySeconds: 60,
		Frontends: []ServiceFrontend{{IP: net.ParseIP("172.16.0.1"), Port: 30080, NodePort: true}},
		Endpoints: []ServiceEndpoint{{IP: net.ParseIP("10.244.1.6"), Port: 8080, AffinityID: 1}}}
	if err := aff.Validate(); err != nil {
		t.Fatal(err)
	}
	learn := `learn(table="service_affinity",idle_timeout=60,priority=200,cookie=0x500070600000001,eth_type=0x800,` +
		`NXM_OF_IP_SRC[],NXM_NX_REG5[],load:0xaf40106->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16])`
	const e = `cookie=0x500070500000009, table="service_endpoint", `
	compareLines(t, "affinity frontends", render(aff), []string{
		match("100", "10.96.0.12", "80") + ` actions=load:0x9->NXM_NX_REG5[],resubmit(,"service_affinity"),goto_table:"service_endpoint"`,
		match("90", "172.16.0.1", "30080") + ` actions=load:0x9->NXM_NX_REG5[],resubmit(,"service_affinity"),goto_table:"service_endpoint"`,
		e + `priority=200,ip,reg3=0xaf40106,reg4=0x11f90/0x1ffff,reg5=0x9 actions=` + learn +
			`,ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.1.6:8080))`,
		e + `priority=100,ip,reg5=0x9 actions=group:1048585`,
		`group_id=1048585,type=select,bucket=actions=load:0xaf40106->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16],resubmit(,"service_endpoint")`,
	})
	if n := len(AffinityPortDelete(cfg, aff)); n != 1 {
		t.Errorf("AffinityPortDelete of a port with 2 frontends: %d flow mods, want 1 (by the port's id)", n)
	}

	// Validation.
	for what, bad := range map[string]func(*ServicePort){
		"no frontend at all":         func(s *ServicePort) { s.ClusterIP, s.Frontends = nil, nil },
		"IPv6 frontend":              func(s *ServicePort) { s.Frontends[0].IP = net.ParseIP("2001:db8::1") },
		"frontend port 0":            func(s *ServicePort) { s.Frontends[0].Port = 0 },
		"IPv6 source range":          func(s *ServicePort) { _, r, _ := net.ParseCIDR("2001:db8::/32"); s.Frontends[1].SourceRanges[0] = r },
		"source range on a NodePort": func(s *ServicePort) { s.Frontends[2].SourceRanges = s.Frontends[1].SourceRanges },
	} {
		s := testFrontendPort()
		bad(&s)
		if s.Validate() == nil {
			t.Errorf("%s: Validate accepted %v", what, s)
		}
	}
}

// TestServiceHairpinFlowsGolden: the flows of a pod reaching itself through its own
// Service: the un-SNAT of its replies, the reply mark, the pod's SNAT flow and the
// output back out of the in_port (TestServiceOnSwitch runs them on OVS); with Services
// off none of them.
func TestServiceHairpinFlowsGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services = true
	var got []string
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...) {
		switch {
		case f.Table.Name() == StageServiceHairpin, f.Table.Name() == "output",
			f.Table.Name() == StageServiceConntrack && f.Priority == PriorityHairpinReply,
			f.Table.Name() == "l3_forwarding" && f.Priority == PriorityHairpin:
			got = append(got, f.String())
		}
	}
	want := []string{
		`cookie=0x500070100000000, table="service_hairpin", priority=110,ip,nw_dst=169.254.0.252 actions=ct(table="service_conntrack",zone=65281,nat)`,
		`cookie=0x500070100000000, table="service_hairpin", priority=1 actions=goto_table:"service_conntrack"`,
		`cookie=0x500070100000000, table="service_hairpin", priority=0 actions=drop`,
		`cookie=0x500070100000000, table="service_conntrack", priority=105,ct_state=+rpl+trk,ip actions=load:0x1->NXM_NX_REG0[4],ct(table="service_lb",zone=65280,nat)`,
		`cookie=0x500070100000000, table=output, priority=110,reg0=0x10/0x10 actions=set_field:0a:58:0a:f4:01:01->eth_src,IN_PORT`,
		`cookie=0x500070100000000, table=output, priority=1 actions=output:NXM_NX_REG1[]`,
		`cookie=0x500070100000000, table=output, priority=0 actions=drop`,
		`cookie=0x50007020af40105, table="l3_forwarding", priority=110,ip,nw_src=10.244.1.5,nw_dst=10.244.1.5 actions=set_field:0a:58:0a:f4:01:05->eth_dst,load:0x3->NXM_NX_REG1[],load:0x1->NXM_NX_REG0[4],ct(commit,table=output,zone=65281,nat(src=169.254.0.252))`,
	}
	compareLines(t, "hairpin flows", got, want)
	// The pod's spoof guard sends its IP to service_hairpin first.
	for _, f := range PodFlows(cfg, testPodA()) {
		if f.Table.Name() == "spoof_guard" && f.Match.EthType == EthTypeIPv4 && !strings.Contains(f.String(), `goto_table:"service_hairpin"`) {
			t.Errorf("pod's IP spoof guard does not go to service_hairpin: %s", f)
		}
	}
	cfg.Services = false
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...) {
		if f.Priority == PriorityHairpin || strings.Contains(f.String(), "65281") {
			t.Errorf("Services off, yet a hairpin flow: %s", f)
		}
	}
}

// TestServiceGroupPartsGolden: 2,000 endpoints (72-byte buckets, 144,016 bytes) need
// part groups: 4 (a power of two), 500 buckets each, each one group mod; the port's
// group chains to them by weight; 900 endpoints fit one group; a port without the part
// ids it needs is refused by Validate.
func TestServiceGroupPartsGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services = true
	sp := ServicePort{ID: 7, ClusterIP: net.ParseIP("10.96.0.10"), Proto: IPProtoTCP, Port: 80}
	for i := 0; i < 2000; i++ {
		sp.Endpoints = append(sp.Endpoints, ServiceEndpoint{IP: net.IPv4(10, 244, byte(2+i/250), byte(1+i%250)), Port: 8080})
	}
	if n := ServiceGroupParts(sp); n != 4 {
		t.Fatalf("2,000 endpoints: %d parts, want 4", n)
	}
	if err := sp.Validate(); err == nil || !strings.Contains(err.Error(), "need 4 part groups, 0 given") {
		t.Errorf("Validate without part ids: %v, want it to ask for 4", err)
	}
	sp.GroupParts = []uint32{GroupIDMin + 20, GroupIDMin + 21, GroupIDMin + 22, GroupIDMin + 23}
	if err := sp.Validate(); err != nil {
		t.Fatal(err)
	}
	fs, gs := ServicePortFlows(cfg, sp)
	if len(gs) != 5 {
		t.Fatalf("%d groups, want 4 parts and the port's", len(gs))
	}
	compareLines(t, "port group", []string{gs[4].String()}, []string{"group_id=1048583,type=select," +
		"bucket=weight:500,actions=group:1048596,bucket=weight:500,actions=group:1048597," +
		"bucket=weight:500,actions=group:1048598,bucket=weight:500,actions=group:1048599"})
	for i, g := range gs[:4] {
		if g.ID != sp.GroupParts[i] || len(g.Buckets) != 500 || g.WireLen() != 16+500*72 {
			t.Errorf("part %d: group %d, %d buckets, %d bytes: want group %d, 500 buckets, %d bytes", i, g.ID, len(g.Buckets), g.WireLen(), sp.GroupParts[i], 16+500*72)
		}
	}
	compareLines(t, "first bucket of part 1", []string{Group{ID: 1, Type: GroupSelect, Buckets: gs[1].Buckets[:1]}.String()},
		[]string{`group_id=1,type=select,bucket=actions=ct(commit,table="l3_forwarding",zone=65280,nat(dst=10.244.4.1:8080))`})
	if len(fs) != 1 || !strings.HasSuffix(fs[0].String(), "actions=group:1048583") {
		t.Errorf("service_lb flows %v, want one to the port's group", fs)
	}
	sp.Endpoints, sp.GroupParts = sp.Endpoints[:900], nil
	if n := ServiceGroupParts(sp); n != 0 {
		t.Errorf("900 endpoints: %d parts, want none (one group mod)", n)
	}
}

// TestServiceUDPFlowsGolden: a UDP Service port picks its endpoint by the multipath hash
// (symmetric L3/L4 with UDP ports, modulo_n over its slots) into reg6 with its id in
// reg5, and its slot flows in service_endpoint DNAT (weights 1 and 3: one slot and three,
// the three as an aligned block of two and one); with session affinity the slot flows
// learn first and the port's flow in service_endpoint chooses and resubmits; a port of
// one endpoint has one slot and no multipath. No UDP port has a group.
// TestServiceUDPSpreadOnSwitch checks the same text on OVS.
func TestServiceUDPFlowsGolden(t *testing.T) {
	cfg := testConfig()
	cfg.Services, cfg.Policy = true, true
	sp := ServicePort{ID: 9, ClusterIP: net.ParseIP("10.96.0.10"), Proto: IPProtoUDP, Port: 53, Endpoints: []ServiceEndpoint{
		{IP: net.ParseIP("10.244.1.6"), Port: 5353, AffinityID: 1}, {IP: net.ParseIP("10.244.2.9"), Port: 5353, Weight: 3, AffinityID: 2}}}
	build := func(sp ServicePort) []string {
		t.Helper()
		if err := sp.Validate(); err != nil {
			t.Fatal(err)
		}
		fs, gs := ServicePortFlows(cfg, sp)
		if len(gs) != 0 || ServiceGroupParts(sp) != 0 || !ServiceHashSelect(sp) {
			t.Errorf("UDP port %v: groups %v, %d parts, hash select %v: want none, 0, true", sp, gs, ServiceGroupParts(sp), ServiceHashSelect(sp))
		}
		var got []string
		for _, f := range fs {
			if err := f.Validate(); err != nil {
				t.Error(err)
			}
			got = append(got, f.String())
		}
		return got
	}
	dnat := func(ep string) string {
		return `ct(commit,table="l3_forwarding",zone=65280,nat(dst=` + ep + `:5353))`
	}
	compareLines(t, "UDP port flows", build(sp), []string{
		`cookie=0x500070500000009, table="service_lb", priority=100,ct_state=+new+trk,udp,reg0=0x2/0xf,nw_dst=10.96.0.10,tp_dst=53 actions=load:0x9->NXM_NX_REG5[],multipath(symmetric_l3l4+udp,0,modulo_n,4,0,NXM_NX_REG6[0..15]),goto_table:"service_endpoint"`,
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0/0xffff actions=` + dnat("10.244.1.6"),
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0x1/0xffff actions=` + dnat("10.244.2.9"),
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0x2/0xfffe actions=` + dnat("10.244.2.9"),
	})

	aff := sp
	aff.AffinitySeconds = 10800
	learn := func(ep string, id int) string {
		return `learn(table="service_affinity",idle_timeout=10800,priority=200,cookie=0x50007060000000` + string(rune('0'+id)) +
			`,eth_type=0x800,NXM_OF_IP_SRC[],NXM_NX_REG5[],load:` + ep + `->NXM_NX_REG3[],load:0x114e9->NXM_NX_REG4[0..16])`
	}
	compareLines(t, "UDP affinity port flows", build(aff), []string{
		`cookie=0x500070500000009, table="service_lb", priority=100,ct_state=+new+trk,udp,reg0=0x2/0xf,nw_dst=10.96.0.10,tp_dst=53 actions=load:0x9->NXM_NX_REG5[],resubmit(,"service_affinity"),goto_table:"service_endpoint"`,
		`cookie=0x500070500000009, table="service_endpoint", priority=200,ip,reg3=0xaf40106,reg4=0x114e9/0x1ffff,reg5=0x9 actions=` + learn("0xaf40106", 1) + `,` + dnat("10.244.1.6"),
		`cookie=0x500070500000009, table="service_endpoint", priority=200,ip,reg3=0xaf40209,reg4=0x114e9/0x1ffff,reg5=0x9 actions=` + learn("0xaf40209", 2) + `,` + dnat("10.244.2.9"),
		`cookie=0x500070500000009, table="service_endpoint", priority=100,ip,reg5=0x9 actions=multipath(symmetric_l3l4+udp,0,modulo_n,4,0,NXM_NX_REG6[0..15]),resubmit(,"service_endpoint")`,
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0/0xffff actions=` + learn("0xaf40106", 1) + `,` + dnat("10.244.1.6"),
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0x1/0xffff actions=` + learn("0xaf40209", 2) + `,` + dnat("10.244.2.9"),
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0x2/0xfffe actions=` + learn("0xaf40209", 2) + `,` + dnat("10.244.2.9"),
	})

	one := sp
	one.Endpoints = sp.Endpoints[1:]
	compareLines(t, "UDP port of one endpoint", build(one), []string{
		`cookie=0x500070500000009, table="service_lb", priority=100,ct_state=+new+trk,udp,reg0=0x2/0xf,nw_dst=10.96.0.10,tp_dst=53 actions=load:0x9->NXM_NX_REG5[],goto_table:"service_endpoint"`,
		`cookie=0x500070500000009, table="service_endpoint", priority=150,udp,reg5=0x9,reg6=0/0xffff actions=` + dnat("10.244.2.9"),
	})
	// The multipath action's wire form (nx_action_multipath, 32 bytes).
	b, err := Multipath{Fields: HashSymmetricL3L4UDP, Algorithm: MultipathModuloN, Links: 4, Dst: ServiceSlotField}.ofAction().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(b), "ffff002000002320000a00030000000000000003000000000000000f00010c04"; got != want {
		t.Errorf("multipath encodes as %s, want %s", got, want)
	}
}

// TestServiceSlots: slots follow the weights (divided by their greatest common divisor),
// every slot belongs to exactly one endpoint, above MaxMultipathLinks the weights are
// scaled with a slot each kept, and slotBlocks covers a range exactly with aligned blocks.
// Above MaxMultipathLinks endpoints a UDP port keeps the select group.
func TestServiceSlots(t *testing.T) {
	port := func(ws ...uint16) ServicePort {
		sp := ServicePort{ID: 1, ClusterIP: net.ParseIP("10.96.0.1"), Proto: IPProtoUDP, Port: 53}
		for i, w := range ws {
			sp.Endpoints = append(sp.Endpoints, ServiceEndpoint{IP: net.IPv4(10, 244, byte(i>>8), byte(i)), Port: 53, Weight: w})
		}
		return sp
	}
	for _, c := range []struct {
		ws    []uint16
		want  []uint32
		total uint32
	}{
		{[]uint16{0, 1, 1}, []uint32{1, 1, 1}, 3},
		{[]uint16{5, 5}, []uint32{1, 1}, 2},
		{[]uint16{2, 6, 4}, []uint32{1, 3, 2}, 6},
		{[]uint16{65535, 65535, 1}, []uint32{32767, 32767, 1}, 65535},
		{[]uint16{65535, 2, 1}, []uint32{65531, 2, 1}, 65534},
	} {
		starts, counts, total := serviceSlots(port(c.ws...))
		if fmt.Sprint(counts) != fmt.Sprint(c.want) || total != c.total {
			t.Errorf("weights %v: slots %v of %d, want %v of %d", c.ws, counts, total, c.want, c.total)
		}
		// Exact cover: each slot 0..total-1 matched by exactly one block.
		hits := make([]int, total)
		for i := range starts {
			for _, blk := range slotBlocks(starts[i], counts[i]) {
				for s := uint32(0); s < total; s++ {
					if (s & blk.Range.Mask()) == blk.Value<<blk.Range.Start {
						hits[s]++
					}
				}
			}
		}
		for s, h := range hits {
			if h != 1 {
				t.Errorf("weights %v: slot %d matched by %d blocks", c.ws, s, h)
				break
			}
		}
	}
	many := port(make([]uint16, MaxMultipathLinks+1)...)
	if ServiceHashSelect(many) || ServiceGroupParts(many) == 0 {
		t.Errorf("%d UDP endpoints: hash select %v, %d parts; want the select group and its parts", len(many.Endpoints), ServiceHashSelect(many), ServiceGroupParts(many))
	}
	if !ServiceHashSelect(port(make([]uint16, MaxMultipathLinks)...)) {
		t.Errorf("%d UDP endpoints: want hash select", MaxMultipathLinks)
	}
}
