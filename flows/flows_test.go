package flows

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

// testConfig is the node of the golden tests: tunnel ofport 1, gateway ofport 2, pod
// subnet 10.244.1.0/24 of cluster CIDR 10.244.0.0/16, service CIDR 10.96.0.0/12, node IP
// 172.16.0.1.
func testConfig() NodeConfig {
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	return NodeConfig{
		GatewayOFPort: 2,
		GatewayMAC:    mustMAC("0a:58:0a:f4:01:01"),
		GatewayIP:     net.ParseIP("10.244.1.1"),
		PodSubnet:     subnet,
		Generation:    7,
		ClusterCIDR:   mustCIDR("10.244.0.0/16"),
		ServiceCIDR:   mustCIDR("10.96.0.0/12"),
		TunnelOFPort:  1,
		NodeIP:        net.ParseIP("172.16.0.1"),
	}
}

// testPeerB is node B of the golden tests: node IP 172.16.0.2, pod subnet 10.244.2.0/24,
// owner id 0x0af40200 (its subnet's address, the id an upgraded node gives it).
func testPeerB() Peer {
	return Peer{Name: "node-b", NodeIP: net.ParseIP("172.16.0.2"), PodSubnet: mustCIDR("10.244.2.0/24"), OwnerID: 0x0af40200}
}

// testPeerC is node C: node IP 172.16.0.3, pod subnet 10.244.3.0/24, owner id 0x0af40300.
func testPeerC() Peer {
	return Peer{Name: "node-c", NodeIP: net.ParseIP("172.16.0.3"), PodSubnet: mustCIDR("10.244.3.0/24"), OwnerID: 0x0af40300}
}

func testPodA() Pod {
	return Pod{OFPort: 3, MAC: mustMAC("0a:58:0a:f4:01:05"), IPs: []net.IP{net.ParseIP("10.244.1.5")}, OwnerID: 0x0af40105}
}

func testPodB() Pod {
	return Pod{OFPort: 4, MAC: mustMAC("0a:58:0a:f4:01:06"), IPs: []net.IP{net.ParseIP("10.244.1.6")}, OwnerID: 0x0af40106}
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func mustCIDR(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip.To4() // keep host bits: the renderer must mask them as OVS does
	return n
}

// table returns the table id of the stage named name.
func table(name string) TableID {
	id, ok := StageTable(name)
	if !ok {
		panic("no stage " + name)
	}
	return id
}

func lines(fs []Flow, ports PortNames) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Format(ports)
	}
	return out
}

func compareLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	t.Errorf("%s differ.\ngot:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("first difference at line %d:\n got  %s\n want %s", i, g, w)
			return
		}
	}
}

// goldenPipeline is PipelineFlows(testConfig()) as ovs-ofctl dump-flows --names prints it
// (ports by number: the golden config's ports have no names).
var goldenPipeline = []string{
	`cookie=0x500070100000000, table=classifier, priority=100,in_port=1 actions=load:0x3->NXM_NX_REG0[0..3],goto_table:"tunnel_ingress"`,
	`cookie=0x500070100000000, table=classifier, priority=100,in_port=2 actions=load:0x1->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x500070100000000, table=classifier, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="tunnel_ingress", priority=0 actions=drop`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,ip,reg0=0x1/0xf actions=goto_table:service`,
	`cookie=0x500070100000000, table="spoof_guard", priority=100,arp,reg0=0x1/0xf actions=goto_table:arp`,
	`cookie=0x500070100000000, table="spoof_guard", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=arp, priority=100,arp,arp_tpa=10.244.1.1 actions=load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=arp, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=service, priority=100,ip,reg0=0x2/0xf,nw_dst=10.96.0.0/12 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=service, priority=1 actions=goto_table:"l3_forwarding"`,
	`cookie=0x500070100000000, table=service, priority=0 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=100,ip,nw_dst=10.244.1.1 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=10,ip,nw_dst=10.244.1.0/24 actions=drop`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=1,ip actions=goto_table:remote`,
	`cookie=0x500070100000000, table="l3_forwarding", priority=0 actions=drop`,
	`cookie=0x500070100000000, table=remote, priority=10,ip,reg1=0,nw_dst=10.244.0.0/16 actions=drop`,
	`cookie=0x500070100000000, table=remote, priority=1 actions=goto_table:egress`,
	`cookie=0x500070100000000, table=remote, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=100,ip,reg0=0x2/0xf,reg1=0 actions=set_field:0a:58:0a:f4:01:01->eth_dst,load:0x2->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x500070100000000, table=egress, priority=50,reg1=0 actions=drop`,
	`cookie=0x500070100000000, table=egress, priority=1 actions=goto_table:output`,
	`cookie=0x500070100000000, table=egress, priority=0 actions=drop`,
	`cookie=0x500070100000000, table=output, priority=1 actions=output:NXM_NX_REG1[]`,
	`cookie=0x500070100000000, table=output, priority=0 actions=drop`,
}

// goldenPodA is PodFlows(testConfig(), testPodA()); 0x0af40105 in the cookie is 10.244.1.5.
var goldenPodA = []string{
	`cookie=0x50007020af40105, table=classifier, priority=100,in_port=3 actions=load:0x2->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,ip,in_port=3,dl_src=0a:58:0a:f4:01:05,nw_src=10.244.1.5 actions=goto_table:service`,
	`cookie=0x50007020af40105, table="spoof_guard", priority=100,arp,in_port=3,dl_src=0a:58:0a:f4:01:05,arp_spa=10.244.1.5,arp_sha=0a:58:0a:f4:01:05 actions=goto_table:arp`,
	`cookie=0x50007020af40105, table=arp, priority=100,arp,arp_tpa=10.244.1.5 actions=load:0x3->NXM_NX_REG1[],goto_table:output`,
	`cookie=0x50007020af40105, table="l3_forwarding", priority=100,ip,nw_dst=10.244.1.5 actions=set_field:0a:58:0a:f4:01:05->eth_dst,load:0x3->NXM_NX_REG1[],goto_table:remote`,
}

func TestPipelineFlowsGolden(t *testing.T) {
	compareLines(t, "pipeline flows", lines(PipelineFlows(testConfig()), nil), goldenPipeline)
}

func TestPodFlowsGolden(t *testing.T) {
	compareLines(t, "pod flows", lines(PodFlows(testConfig(), testPodA()), nil), goldenPodA)
}

func TestFormatNamesPorts(t *testing.T) {
	names := PortNames{2: "gw0", 3: "ofs-3a9f"}
	got := PodFlows(testConfig(), testPodA())[0].Format(names)
	want := `cookie=0x50007020af40105, table=classifier, priority=100,in_port="ofs-3a9f" actions=load:0x2->NXM_NX_REG0[0..3],goto_table:"spoof_guard"`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	got = Flow{Table: 200, Priority: 5, Actions: []Action{Output{Port: 2}}}.Format(names)
	if want := "table=200, priority=5 actions=output:gw0"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestTables(t *testing.T) {
	want := []struct {
		id   uint8
		name string
	}{{0, "classifier"}, {10, "tunnel_ingress"}, {20, "spoof_guard"}, {25, "nd"}, {28, "service_affinity"}, {30, "arp"}, {32, "service_hairpin"}, {34, "service_conntrack"}, {36, "service_lb"}, {38, "service_endpoint"}, {40, "service"},
		{50, "l3_forwarding"}, {60, "conntrack"}, {62, "conntrack_state"}, {64, "egress_rules"}, {66, "ingress_rules"},
		{68, "conntrack_commit"}, {70, "remote"}, {80, "egress"}, {90, "output"}}
	got := Tables()
	if len(got) != len(want) {
		t.Fatalf("%d tables, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].ID != w.id || got[i].Name != w.name || got[i].Purpose == "" {
			t.Errorf("stage %d = %+v, want id %d name %s and a purpose", i, got[i], w.id, w.name)
		}
		if s, ok := TableID(w.id).Stage(); !ok || int(s) != i {
			t.Errorf("TableID(%d).Stage() = %d, %v; want %d", w.id, s, ok, i)
		}
		if TableNames()[int(w.id)] != w.name {
			t.Errorf("TableNames()[%d] = %q, want %q", w.id, TableNames()[int(w.id)], w.name)
		}
	}
	// No limit of 16 stages any more: cookies have not named stages since PipelineVersion 4.
	got[0].Name = "changed"
	if Tables()[0].Name != "classifier" {
		t.Error("Tables() returned the package's own slice")
	}
}

// TestEveryTableEndsInDrop checks the pipeline's rule: each table has an explicit
// priority-0 drop, and each stage declared MissNext passes everything else to the next
// stage with a priority-1 catch-all. Which stages pass is pinned by the goldens.
func TestEveryTableEndsInDrop(t *testing.T) {
	for _, policy := range []bool{false, true} {
		cfg := testConfig()
		cfg.Policy = policy
		checkMissFlows(t, std, cfg, PipelineFlows(cfg))
	}
}

// checkMissFlows checks the rule of TestEveryTableEndsInDrop for the stages of p in use on
// a node with config cfg (the pass goes to the next stage in use); the stages of features
// that are off must hold no flow at all.
func checkMissFlows(t *testing.T, p *pipeline, cfg NodeConfig, fs []Flow) {
	t.Helper()
	b := builder{p: p, cfg: cfg}
	for i, st := range p.stages {
		table := TableID(st.ID)
		if !p.on(i, cfg) {
			for _, f := range fs {
				if f.Table == table {
					t.Errorf("stage %s of feature %s, off on this node, has a flow: %s", st.Name, st.Feature, f)
				}
			}
			continue
		}
		var drop, pass bool
		for _, f := range fs {
			if f.Table != table || f.MatchKey() != (Flow{Table: table, Priority: f.Priority}).MatchKey() {
				continue // another table, or a flow that matches something
			}
			if f.Priority == PriorityDrop && len(f.Actions) == 1 && f.Actions[0] == (Drop{}) {
				drop = true
			}
			if st.Miss == MissNext && f.Priority == PriorityPass && len(f.Actions) == 1 && f.Actions[0] == (inStage{b: b, i: i}.next()) {
				pass = true
			}
		}
		if !drop {
			t.Errorf("table %s has no priority-0 drop-all flow", st.Name)
		}
		if st.Miss == MissNext && !pass {
			t.Errorf("stage %s (miss: next) has no priority-1 goto next stage", st.Name)
		}
	}
}

func TestBuildersValidate(t *testing.T) {
	cfg := testConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	all := append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...)
	keys := map[string]string{}
	for _, f := range append(all, PodFlows(cfg, testPodB())...) {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		if prev, dup := keys[f.MatchKey()]; dup {
			t.Errorf("two flows with one match key %s:\n %s\n %s", f.MatchKey(), prev, f)
		}
		keys[f.MatchKey()] = f.String()
	}
}

func TestValidateRejects(t *testing.T) {
	for name, f := range map[string]Flow{
		"nw_dst without ip":      {Match: Match{IPDst: mustCIDR("10.0.0.1/32")}},
		"arp_tpa without arp":    {Match: Match{EthType: EthTypeIPv4, ARPTpa: net.ParseIP("10.0.0.1")}},
		"ipv6 nw_dst":            {Match: Match{EthType: EthTypeIPv4, IPDst: mustCIDR("fd00::1/128")}},
		"reg value too wide":     {Match: Match{Regs: []RegMark{{Range: SourceClassField, Value: 16}}}},
		"overlapping reg marks":  {Match: Match{Regs: []RegMark{FromPod, FromGateway}}},
		"goto not last":          {Actions: []Action{GotoTable{table("arp")}, Output{Port: 1}}},
		"goto backwards":         {Table: table("arp"), Actions: []Action{GotoTable{table("spoof_guard")}}},
		"drop with output":       {Actions: []Action{Drop{}, Output{Port: 1}}},
		"load too wide":          {Actions: []Action{Load{Dst: SourceClassField, Value: 0x10}}},
		"move widths differ":     {Actions: []Action{Move{Src: SourceClassField, Dst: OutPortField}}},
		"short MAC":              {Match: Match{EthSrc: net.HardwareAddr{1, 2}}},
		"set arp_op without arp": {Match: Match{EthType: EthTypeIPv4}, Actions: []Action{SetARPOp{ARPReply}}},
		"move ip_src without ip": {Actions: []Action{Move{Src: Whole(FieldIPSrc), Dst: Whole(FieldIPDst)}}},
		"nw_proto without ip":    {Match: Match{IPProto: IPProtoTCP}},
		"tp_dst without proto":   {Match: Match{EthType: EthTypeIPv4, TPDst: 80, TPDstMask: 0xffff}},
		"tp_dst on icmp":         {Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoICMP, TPDst: 80, TPDstMask: 0xffff}},
		"tp_dst mask not prefix": {Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoTCP, TPDst: 0, TPDstMask: 0xff0f}},
		"tp_dst outside mask":    {Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoTCP, TPDst: 1001, TPDstMask: 0xfff8}},
		"ct_state set and clear": {Match: Match{EthType: EthTypeIPv4, CTState: &CTState{Set: CTNew, Clear: CTNew}}},
		"ct_state empty":         {Match: Match{EthType: EthTypeIPv4, CTState: &CTState{}}},
		"conjunction one clause": {Match: Match{EthType: EthTypeIPv4}, Actions: []Action{Conjunction{ID: 1, Clause: 1, NClauses: 1}}},
		"conjunction clause 0":   {Match: Match{EthType: EthTypeIPv4}, Actions: []Action{Conjunction{ID: 1, Clause: 0, NClauses: 2}}},
		"conjunction id 0":       {Match: Match{EthType: EthTypeIPv4}, Actions: []Action{Conjunction{ID: 0, Clause: 1, NClauses: 2}}},
		"conjunction with goto":  {Match: Match{EthType: EthTypeIPv4}, Actions: []Action{Conjunction{ID: 1, Clause: 1, NClauses: 2}, GotoTable{table("arp")}}},
		"ct table not last":      {Match: Match{EthType: EthTypeIPv4}, Actions: []Action{CT{Table: table("arp")}, Output{Port: 1}}},
		"ct table backwards":     {Table: table("arp"), Match: Match{EthType: EthTypeIPv4}, Actions: []Action{CT{Table: table("spoof_guard")}}},
		"ct without ip":          {Actions: []Action{CT{Commit: true}}},
	} {
		if err := f.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %s", name, f)
		}
	}
}

func TestConfigAndPodValidate(t *testing.T) {
	cfg := testConfig()
	bad := []NodeConfig{}
	c := cfg
	c.GatewayOFPort = 0
	bad = append(bad, c)
	c = cfg
	c.GatewayMAC = mustMAC("01:00:5e:00:00:01")
	bad = append(bad, c)
	c = cfg
	c.GatewayIP = net.ParseIP("10.9.9.9")
	bad = append(bad, c)
	c = cfg
	c.PodSubnet = nil
	bad = append(bad, c)
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("NodeConfig.Validate accepted %+v", c)
		}
	}
	for _, p := range []Pod{
		{OFPort: 2, MAC: testPodA().MAC, IPs: testPodA().IPs},                               // the gateway's port
		{OFPort: 3, MAC: testPodA().MAC, IPs: []net.IP{net.ParseIP("10.244.1.1")}},          // the gateway IP
		{OFPort: 3, MAC: testPodA().MAC, IPs: []net.IP{net.ParseIP("10.244.2.5")}},          // outside the subnet
		{OFPort: 3, MAC: mustMAC("ff:ff:ff:ff:ff:ff"), IPs: testPodA().IPs},                 // broadcast MAC
		{OFPort: 0xfffffffe, MAC: testPodA().MAC, IPs: []net.IP{net.ParseIP("10.244.1.7")}}, // LOCAL
	} {
		if err := p.Validate(cfg); err == nil {
			t.Errorf("Pod.Validate accepted %+v", p)
		}
	}
	if err := testPodA().Validate(cfg); err != nil {
		t.Error(err)
	}
}

// pipelineGolden records the pipeline's content hash for PipelineVersion (after
// OpenShift SDN's TestRuleVersion). When a builder changes what goes on the switch, the
// hash changes: bump PipelineVersion and record the new pair here in the same change.
var pipelineGolden = struct {
	version uint8
	hash    string
}{5, "d5cbb3b0b530bcacd502083931c60b92c1cfb61ffbd8853a6b8e02fdd163458e"}

func TestPipelineVersion(t *testing.T) {
	cfg := testConfig()
	fs := append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...)
	fs = append(fs, PeerFlows(cfg, testPeerB())...)
	h := sha256.New()
	for _, f := range fs {
		f.Cookie &^= Cookie(CookieVersionMask) // the hash covers content, not the version itself
		h.Write([]byte(f.String() + "\n"))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	switch {
	case sum != pipelineGolden.hash && PipelineVersion == pipelineGolden.version:
		t.Fatalf("the flows changed but PipelineVersion is still %d: bump PipelineVersion to %d and set pipelineGolden to {%d, %q}",
			PipelineVersion, PipelineVersion+1, PipelineVersion+1, sum)
	case sum != pipelineGolden.hash:
		t.Fatalf("PipelineVersion is %d: set pipelineGolden to {%d, %q}", PipelineVersion, PipelineVersion, sum)
	case PipelineVersion != pipelineGolden.version:
		t.Fatalf("PipelineVersion changed to %d but the flows did not: set pipelineGolden.version to %d or revert", PipelineVersion, PipelineVersion)
	}
}

func TestCookieLayout(t *testing.T) {
	c := NewCookie(0xbeef, OwnerKind(0xa7), 0x0af40105)
	if c.Version() != PipelineVersion || c.Generation() != 0xbeef || c.Owner() != 0xa7 || c.OwnerID() != 0x0af40105 {
		t.Fatalf("cookie %s decodes to version %d generation %#x owner %d id %#x",
			c, c.Version(), c.Generation(), c.Owner(), c.OwnerID())
	}
	if uint64(c) != uint64(PipelineVersion)<<56|0xbeef<<40|0xa7<<32|0x0af40105 {
		t.Fatalf("cookie %s has the wrong layout", c)
	}
	masks := []uint64{CookieVersionMask, CookieGenerationMask, CookieOwnerKindMask, CookieOwnerIDMask}
	var all uint64
	for _, m := range masks {
		if all&m != 0 {
			t.Fatalf("cookie masks overlap at %#x", m)
		}
		all |= m
	}
	if all != ^uint64(0) {
		t.Fatalf("cookie masks cover %#x, not all 64 bits", all)
	}
}

// selects reports whether an OFPFC_DELETE or flow stats request with cookie/mask would
// take f (OpenFlow 1.3.5 §7.3.4.1).
func selects(f Flow, cookie, mask uint64) bool { return uint64(f.Cookie)&mask == cookie&mask }

func TestPodCookieSelectsOnlyThatPod(t *testing.T) {
	cfg := testConfig()
	a, b := testPodA(), testPodB()
	cookie, mask := PodCookie(a)
	for _, f := range PodFlows(cfg, a) {
		if !selects(f, cookie, mask) {
			t.Errorf("PodCookie(a) misses a's flow %s", f)
		}
	}
	// Same pod, other generation and pipeline version: still selected.
	old := cfg
	old.Generation = 6
	for _, f := range PodFlows(old, a) {
		f.Cookie ^= Cookie(CookieVersionMask)
		if !selects(f, cookie, mask) {
			t.Errorf("PodCookie(a) misses a's flow of an older generation/version %s", f)
		}
	}
	for _, f := range append(PodFlows(cfg, b), PipelineFlows(cfg)...) {
		if selects(f, cookie, mask) {
			t.Errorf("PodCookie(a) selects a flow that is not a's: %s", f)
		}
	}
	// A pod whose address equals a peer's owner id must not match peer flows.
	peer := Flow{Cookie: NewCookie(7, OwnerPeer, ipv4ToUint32(a.IPv4()))}
	if selects(peer, cookie, mask) {
		t.Error("PodCookie(a) selects a peer flow with the same owner id")
	}
}

func TestGenerationCookie(t *testing.T) {
	cfg := testConfig()
	cookie, mask := GenerationCookie(cfg.Generation)
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...) {
		if !selects(f, cookie, mask) {
			t.Errorf("GenerationCookie(%d) misses %s", cfg.Generation, f)
		}
	}
	next := cfg
	next.Generation++
	for _, f := range append(PipelineFlows(next), PodFlows(next, testPodA())...) {
		if selects(f, cookie, mask) {
			t.Errorf("GenerationCookie(%d) selects a flow of generation %d: %s", cfg.Generation, next.Generation, f)
		}
	}
}

func TestMatchKey(t *testing.T) {
	cfg := testConfig()
	f := PodFlows(cfg, testPodA())[4]
	g := f
	g.Cookie = NewCookie(99, OwnerPod, 1)
	g.Actions = []Action{Drop{}}
	if f.MatchKey() != g.MatchKey() {
		t.Errorf("match key depends on cookie or actions: %s vs %s", f.MatchKey(), g.MatchKey())
	}
	g = f
	g.Priority++
	if f.MatchKey() == g.MatchKey() {
		t.Error("match key ignores the priority")
	}
	g = f
	g.Table = table("egress")
	if f.MatchKey() == g.MatchKey() {
		t.Error("match key ignores the table")
	}
	if want := "table=50,priority=100,ip,nw_dst=10.244.1.5"; f.MatchKey() != want {
		t.Errorf("MatchKey() = %q, want %q", f.MatchKey(), want)
	}
}

func TestQuoteName(t *testing.T) {
	for in, want := range map[string]string{
		"arp": "arp", "gw0": "gw0", "spoof_guard": `"spoof_guard"`, "ofs-ab12": `"ofs-ab12"`,
		"0abc": `"0abc"`, `a"b`: `"a\"b"`, "a<b": `"a<b"`,
	} {
		if got := quoteName(in); got != want {
			t.Errorf("quoteName(%q) = %s, want %s", in, got, want)
		}
	}
}

// kitchenSink returns flows that use every match field and action kind the package
// offers, outside the pipeline's tables, for the renderer and encoder checks.
func kitchenSink() []Flow {
	mac1, mac2 := mustMAC("0a:00:00:00:00:01"), mustMAC("0a:00:00:00:00:02")
	pair := FieldRange{Field: reg(2), Start: 4, End: 7}
	return []Flow{
		{Table: 200, Priority: 7, Cookie: 0x42,
			Match: Match{EthType: EthTypeIPv4, InPort: 3, EthSrc: mac1, EthDst: mac2,
				IPSrc: mustCIDR("10.1.2.3/16"), IPDst: mustCIDR("10.2.3.4/32"),
				Regs:   []RegMark{{Range: pair, Value: 5}, FromPod, {Range: Whole(reg(3)), Value: 0}},
				TunSrc: net.ParseIP("192.168.0.1"), TunDst: net.ParseIP("192.168.0.2")},
			Actions: []Action{DecTTL{}, SetEthSrc{mac2}, SetEthDst{mac1}, Load{Dst: Whole(reg(4)), Value: 0},
				Move{Src: SourceClassField, Dst: pair}, OutputReg{Src: FieldRange{Field: reg(1), Start: 0, End: 15}},
				Output{Port: 2}, GotoTable{201}}},
		{Table: 200, Priority: 8,
			Match: Match{EthType: EthTypeARP, ARPOp: ARPRequest, ARPSpa: net.ParseIP("10.0.0.1"), ARPTpa: net.ParseIP("10.0.0.2"),
				ARPSha: mac1, ARPTha: net.HardwareAddr{0, 0, 0, 0, 0, 0}},
			Actions: []Action{Move{Src: Whole(FieldEthSrc), Dst: Whole(FieldEthDst)}, SetEthSrc{mac2},
				SetARPOp{ARPReply}, Move{Src: Whole(FieldARPSha), Dst: Whole(FieldARPTha)},
				Move{Src: Whole(FieldARPSpa), Dst: Whole(FieldARPTpa)},
				SetARPSha{mac2}, SetARPSpa{net.ParseIP("10.0.0.2")}, SetARPTha{mac1}, SetARPTpa{net.ParseIP("10.0.0.1")},
				OutputInPort{}}},
		{Table: 201, Priority: 32768, Match: Match{EthType: 0x88cc}, Actions: []Action{Drop{}}},
		{Table: 201, Priority: 9, Match: Match{EthType: EthTypeIPv4, Regs: []RegMark{{Range: FieldRange{Field: reg(5), Start: 31, End: 31}, Value: 1}}},
			Actions: []Action{Move{Src: Whole(FieldIPSrc), Dst: Whole(FieldIPDst)}}},
		{Table: 201, Priority: 10, Match: Match{EthType: EthTypeARP, ARPTpaPrefix: mustCIDR("10.0.1.7/24")},
			Actions: []Action{SetTunDst{net.ParseIP("192.168.0.9")}, Output{Port: 2}}},
		// Conntrack and conjunctions (network policy).
		{Table: 202, Priority: 200, Match: Match{EthType: EthTypeIPv4, IPSrc: mustCIDR("10.0.0.5/32")},
			Actions: []Action{Conjunction{ID: 7, Clause: 1, NClauses: 3}, Conjunction{ID: 8, Clause: 1, NClauses: 2}}},
		{Table: 202, Priority: 200, Match: Match{EthType: EthTypeIPv4, Regs: []RegMark{{Range: Whole(reg(1)), Value: 3}}},
			Actions: []Action{Conjunction{ID: 7, Clause: 2, NClauses: 3}}},
		{Table: 202, Priority: 200, Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoTCP, TPDst: 1000, TPDstMask: 0xfff8},
			Actions: []Action{Conjunction{ID: 7, Clause: 3, NClauses: 3}}},
		{Table: 202, Priority: 200, Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoSCTP, TPDst: 80, TPDstMask: 0xffff},
			Actions: []Action{Conjunction{ID: 7, Clause: 3, NClauses: 3}}},
		{Table: 202, Priority: 200, Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoUDP, IPDst: mustCIDR("10.0.0.0/8"), TPDst: 81, TPDstMask: 0xffff},
			Actions: []Action{Conjunction{ID: 8, Clause: 2, NClauses: 2}}},
		{Table: 202, Priority: 200, Match: Match{EthType: EthTypeIPv4, IPProto: IPProtoICMP},
			Actions: []Action{Conjunction{ID: 7, Clause: 3, NClauses: 3}}},
		{Table: 202, Priority: 200, Match: Match{ConjID: 7, EthType: EthTypeIPv4}, Actions: []Action{GotoTable{203}}},
		{Table: 202, Priority: 210, Match: Match{CTState: &CTState{Set: CTTrk, Clear: CTNew | CTInv}, EthType: EthTypeIPv4},
			Actions: []Action{GotoTable{203}}},
		{Table: 202, Priority: 190, Match: Match{CTState: &CTState{Set: CTInv | CTTrk}, EthType: EthTypeIPv4}, Actions: []Action{Drop{}}},
		{Table: 202, Priority: 5, Match: Match{EthType: EthTypeIPv4, IPProto: 47, Regs: []RegMark{FromGateway}, IPSrc: mustCIDR("10.0.0.1/32")},
			Actions: []Action{OutputController{MaxLen: 128}}},
		{Table: 202, Priority: 1, Match: Match{EthType: EthTypeIPv4}, Actions: []Action{CT{Zone: 65280, Table: 203}}},
		{Table: 203, Priority: 1, Match: Match{CTState: &CTState{Set: CTNew | CTTrk}, EthType: EthTypeIPv4},
			Actions: []Action{CT{Commit: true, Zone: 65280}, GotoTable{204}}},
	}
}

var goldenKitchenSink = []string{
	`cookie=0x42, table=200, priority=7,ip,reg0=0x2/0xf,reg2=0x50/0xf0,reg3=0,tun_src=192.168.0.1,tun_dst=192.168.0.2,in_port=3,dl_src=0a:00:00:00:00:01,dl_dst=0a:00:00:00:00:02,nw_src=10.1.0.0/16,nw_dst=10.2.3.4 actions=dec_ttl,set_field:0a:00:00:00:00:02->eth_src,set_field:0a:00:00:00:00:01->eth_dst,load:0->NXM_NX_REG4[],move:NXM_NX_REG0[0..3]->NXM_NX_REG2[4..7],output:NXM_NX_REG1[0..15],output:2,goto_table:201`,
	`table=200, priority=8,arp,arp_spa=10.0.0.1,arp_tpa=10.0.0.2,arp_op=1,arp_sha=0a:00:00:00:00:01,arp_tha=00:00:00:00:00:00 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:0a:00:00:00:00:02->eth_src,set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:0a:00:00:00:00:02->arp_sha,set_field:10.0.0.2->arp_spa,set_field:0a:00:00:00:00:01->arp_tha,set_field:10.0.0.1->arp_tpa,IN_PORT`,
	`table=201, dl_type=0x88cc actions=drop`,
	`table=201, priority=9,ip,reg5=0x80000000/0x80000000 actions=move:NXM_OF_IP_SRC[]->NXM_OF_IP_DST[]`,
	`table=201, priority=10,arp,arp_tpa=10.0.1.0/24 actions=set_field:192.168.0.9->tun_dst,output:2`,
	`table=202, priority=200,ip,nw_src=10.0.0.5 actions=conjunction(7,1/3),conjunction(8,1/2)`,
	`table=202, priority=200,ip,reg1=0x3 actions=conjunction(7,2/3)`,
	`table=202, priority=200,tcp,tp_dst=0x3e8/0xfff8 actions=conjunction(7,3/3)`,
	`table=202, priority=200,sctp,tp_dst=80 actions=conjunction(7,3/3)`,
	`table=202, priority=200,udp,nw_dst=10.0.0.0/8,tp_dst=81 actions=conjunction(8,2/2)`,
	`table=202, priority=200,icmp actions=conjunction(7,3/3)`,
	`table=202, priority=200,conj_id=7,ip actions=goto_table:203`,
	`table=202, priority=210,ct_state=-new-inv+trk,ip actions=goto_table:203`,
	`table=202, priority=190,ct_state=+inv+trk,ip actions=drop`,
	`table=202, priority=5,ip,reg0=0x1/0xf,nw_src=10.0.0.1,nw_proto=47 actions=CONTROLLER:128`,
	`table=202, priority=1,ip actions=ct(table=203,zone=65280)`,
	`table=203, priority=1,ct_state=+new+trk,ip actions=ct(commit,zone=65280),goto_table:204`,
}

func TestKitchenSinkGolden(t *testing.T) {
	compareLines(t, "kitchen-sink flows", lines(kitchenSink(), nil), goldenKitchenSink)
}

// TestFlowModEncoding checks the wire form of every flow: the message parses back with
// libOpenflow, its header length is the byte count, and the fixed fields, match TLVs and
// instructions are what the flow says. TestFlowsOnSwitch checks the same bytes on OVS.
func TestFlowModEncoding(t *testing.T) {
	cfg := testConfig()
	all := append(append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...), kitchenSink()...)
	for _, f := range all {
		for _, cmd := range []uint8{openflow13.FC_ADD, openflow13.FC_MODIFY_STRICT, openflow13.FC_DELETE_STRICT} {
			data, err := f.FlowMod(cmd).MarshalBinary()
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if int(binary.BigEndian.Uint16(data[2:4])) != len(data) || len(data)%8 != 0 {
				t.Fatalf("%s: header length %d, %d bytes (must be equal and a multiple of 8)", f, binary.BigEndian.Uint16(data[2:4]), len(data))
			}
			msg, err := openflow13.Parse(data)
			if err != nil {
				t.Fatalf("%s: parse back: %v", f, err)
			}
			fm, ok := msg.(*openflow13.FlowMod)
			if !ok {
				t.Fatalf("%s: parsed as %T", f, msg)
			}
			if fm.Cookie != uint64(f.Cookie) || fm.TableId != uint8(f.Table) || fm.Priority != f.Priority || fm.Command != cmd ||
				fm.BufferId != 0xffffffff || fm.OutPort != openflow13.P_ANY || fm.OutGroup != openflow13.OFPG_ANY {
				t.Errorf("%s: decoded %+v", f, fm)
			}
			if n := len(fm.Match.Fields); n != f.Match.fieldCount() {
				t.Errorf("%s: %d match fields on the wire, want %d", f, n, f.Match.fieldCount())
			}
			if cmd == openflow13.FC_DELETE_STRICT {
				if len(fm.Instructions) != 0 {
					t.Errorf("%s: delete carries %d instructions", f, len(fm.Instructions))
				}
				continue
			}
			checkInstructions(t, f, fm.Instructions)
		}
	}
}

// fieldCount is the number of match TLVs the flow's match encodes to.
func (m Match) fieldCount() int {
	n := 0
	for _, set := range []bool{m.InPort != 0, m.EthType != 0, m.EthSrc != nil, m.EthDst != nil, m.TunSrc != nil,
		m.TunDst != nil, m.IPSrc != nil, m.IPDst != nil, m.ARPOp != 0, m.ARPSpa != nil, m.ARPTpa != nil,
		m.ARPTpaPrefix != nil, m.ARPSha != nil, m.ARPTha != nil, m.ConjID != 0, m.CTState != nil,
		m.IPProto != 0, m.TPDstMask != 0, m.IPv6Src != nil, m.IPv6Dst != nil, m.IPv6LabelMask != 0,
		m.ICMPv6Type != nil, m.ICMPv6Code != nil, m.NDTarget != nil, m.NDSLL != nil, m.NDTLL != nil} {
		if set {
			n++
		}
	}
	_, masks := m.regs()
	for _, mask := range masks {
		if mask != 0 {
			n++
		}
	}
	return n
}

func checkInstructions(t *testing.T, f Flow, instrs []openflow13.Instruction) {
	t.Helper()
	var wantApply int
	var wantGoto *TableID
	for _, a := range f.Actions {
		switch a := a.(type) {
		case GotoTable:
			id := a.Table
			wantGoto = &id
		case Drop:
		default:
			wantApply++
		}
	}
	i := 0
	if wantApply > 0 {
		if i >= len(instrs) {
			t.Fatalf("%s: no apply-actions instruction", f)
		}
		apply, ok := instrs[i].(*openflow13.InstrActions)
		if !ok || apply.Type != openflow13.InstrType_APPLY_ACTIONS || len(apply.Actions) != wantApply {
			t.Errorf("%s: instruction %d is %#v, want apply-actions with %d actions", f, i, instrs[i], wantApply)
		}
		i++
	}
	if wantGoto != nil {
		if i >= len(instrs) {
			t.Fatalf("%s: no goto-table instruction", f)
		}
		g, ok := instrs[i].(*openflow13.InstrGotoTable)
		if !ok || g.TableId != uint8(*wantGoto) {
			t.Errorf("%s: instruction %d is %#v, want goto-table %d", f, i, instrs[i], *wantGoto)
		}
		i++
	}
	if i != len(instrs) {
		t.Errorf("%s: %d instructions, want %d", f, len(instrs), i)
	}
}

func TestDeleteByCookie(t *testing.T) {
	cookie, mask := PodCookie(testPodA())
	data, err := DeleteByCookie(cookie, mask).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// ofp_flow_mod after the 8-byte header: cookie, cookie_mask, table_id, command,
	// idle, hard, priority, buffer_id, out_port, out_group, flags, pad; then the match.
	b := data[8:]
	if got := binary.BigEndian.Uint64(b[0:]); got != cookie {
		t.Errorf("cookie %#x, want %#x", got, cookie)
	}
	if got := binary.BigEndian.Uint64(b[8:]); got != mask {
		t.Errorf("cookie mask %#x, want %#x", got, mask)
	}
	if b[16] != openflow13.OFPTT_ALL || b[17] != openflow13.FC_DELETE {
		t.Errorf("table %d command %d, want OFPTT_ALL and OFPFC_DELETE", b[16], b[17])
	}
	if op, og := binary.BigEndian.Uint32(b[28:]), binary.BigEndian.Uint32(b[32:]); op != openflow13.P_ANY || og != openflow13.OFPG_ANY {
		t.Errorf("out_port %#x out_group %#x, want ANY", op, og)
	}
	if len(data) != 8+40+8 { // empty match: 4-byte header padded to 8
		t.Errorf("delete flow mod is %d bytes, want 56 (no match fields, no instructions)", len(data))
	}
}
