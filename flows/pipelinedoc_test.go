package flows

import (
	"bufio"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// docPorts are the port names of docs/pipeline.md's node (the golden config's ports).
var docPorts = PortNames{1: "vxlan0", 2: "gw0", 3: "pod-a"}

// TestPipelineDoc: the dump-flows lines of docs/pipeline.md are exactly what the builders
// print for its node (the golden tests' config with NetworkPolicy on, pod A ingress-
// isolated with one ingress rule, peer B, ports by name), stage by
// stage in the order OVS's dump shows them (priority, then the pipeline's, the pods' and
// the peers' flows), and every stage of the pipeline has its section. So the document
// cannot go stale: change a flow, and this test prints the lines to paste.
func TestPipelineDoc(t *testing.T) {
	f, err := os.Open("../docs/pipeline.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	heading := regexp.MustCompile(`^## ([a-z_0-9]+) \((\d+)[,)]`)
	doc := map[string][]string{}
	var order []string
	stage, inBlock := "", false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if m := heading.FindStringSubmatch(l); m != nil {
			stage = m[1]
			order = append(order, stage)
			continue
		}
		if strings.HasPrefix(l, "## ") {
			stage = ""
		}
		if strings.HasPrefix(l, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock && stage != "" && strings.HasPrefix(l, " cookie=") {
			doc[stage] = append(doc[stage], strings.TrimPrefix(l, " "))
		}
	}

	_, all := docFlows()
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Cookie.Owner() < b.Cookie.Owner()
	})
	want := map[string][]string{}
	for _, fl := range all {
		want[fl.Table.Name()] = append(want[fl.Table.Name()], fl.Format(docPorts))
	}
	var names []string
	for _, st := range Tables() {
		names = append(names, st.Name)
	}
	if strings.Join(order, " ") != strings.Join(names, " ") {
		t.Errorf("docs/pipeline.md has sections %v, want one per stage in pipeline order %v", order, names)
	}
	for _, name := range names {
		compareLines(t, "docs/pipeline.md, stage "+name+" (with a leading space in the file)", doc[name], want[name])
	}
}

// docFlows is docs/pipeline.md's node: the golden config with NetworkPolicy on, pod A
// (isolated for ingress, allowed from peer B's pod subnet on TCP/80 by conjunction 1),
// and peer B.
func docFlows() (NodeConfig, []Flow) {
	cfg := testConfig()
	cfg.Policy = true
	all := append(PipelineFlows(cfg), PodFlows(cfg, testPodA())...)
	all = append(all, PodPolicyFlows(cfg, testPodA(), true, false)...)
	set := NewPolicyFlowSet(cfg)
	set.Set(PolicyRule{ID: 1, Pods: []Pod{testPodA()}, Peers: []*net.IPNet{mustCIDR("10.244.2.0/24")},
		Ports: []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}})
	all = append(all, set.Flows()...)
	return cfg, append(all, PeerFlows(cfg, testPeerB())...)
}

// docSection returns the dump lines of docs/pipeline.md's section title (its "## "
// heading, up to the next one): the lines of its code blocks that start with " cookie=",
// and with groups also " group_id=", without the leading space.
func docSection(t *testing.T, title string, groups bool) []string {
	t.Helper()
	data, err := os.ReadFile("../docs/pipeline.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n"+title+"\n")
	if !ok {
		t.Fatalf("docs/pipeline.md has no section %q", title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var doc []string
	inBlock := false
	for _, l := range strings.Split(section, "\n") {
		if strings.HasPrefix(l, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock && (strings.HasPrefix(l, " cookie=") || groups && strings.HasPrefix(l, " group_id=")) {
			doc = append(doc, strings.TrimPrefix(l, " "))
		}
	}
	return doc
}

// sortDumpOrder sorts fs as ovs-ofctl dump-flows lists them: by table, then priority
// (highest first), then owner kind, otherwise keeping their order.
func sortDumpOrder(fs []Flow) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Cookie.Owner() < b.Cookie.Owner()
	})
}

// TestPipelineDocDualStack: the block of docs/pipeline.md's section "Dual-stack node: the
// IPv6 flows" is exactly the flows the dual-stack node (the doc's node with an IPv6 pod
// subnet, its IPv6 cluster CIDR and NetworkPolicy off), its pod A and its dual-stack peer B have beyond the
// IPv4-only node's, in the order of a dump (table, priority, owner kind).
func TestPipelineDocDualStack(t *testing.T) {
	doc := docSection(t, "## Dual-stack node: the IPv6 flows", false)
	v4 := testConfig()
	old := map[string]bool{}
	for _, f := range append(append(PipelineFlows(v4), PodFlows(v4, testPodA())...), PeerFlows(v4, testPeerB())...) {
		old[f.Format(docPorts)] = true
	}
	cfg := testDualStackEgressConfig()
	var fs []Flow
	for _, f := range append(append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...), PeerFlows(cfg, testDualPeerB())...) {
		if !old[f.Format(docPorts)] {
			fs = append(fs, f)
		}
	}
	sortDumpOrder(fs)
	compareLines(t, "docs/pipeline.md, dual-stack section (with a leading space in the file)", doc, lines(fs, docPorts))
}

// TestPipelineDocIPv6Services: the dump lines of docs/pipeline.md's section "IPv6
// Services" are exactly what the builders print for the dual-stack node with Services on:
// the IPv6 flows of the Services stages (and the pod's and gateway's IPv6 into them) that
// the Services-off node does not have, then testIPv6ServicePorts' flows and groups in
// builder order.
func TestPipelineDocIPv6Services(t *testing.T) {
	doc := docSection(t, "## IPv6 Services (Services in OVS on a dual-stack node)", true)
	cfg := testDualStackConfig()
	cfg.Services = true
	var want []string
	for _, f := range append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...) {
		n := f.Table.Name()
		switch {
		case f.Match.EthType != EthTypeIPv6:
		case n == StageServiceHairpin, n == StageServiceConntrack,
			n == "l3_forwarding" && f.Priority == PriorityHairpin,
			n == "spoof_guard" && f.Priority <= PriorityNormal && f.Match.IPProto == 0:
			want = append(want, f.Format(docPorts))
		}
	}
	for _, sp := range testIPv6ServicePorts() {
		fs, gs := ServicePortFlows(cfg, sp)
		for _, f := range fs {
			want = append(want, f.Format(docPorts))
		}
		for _, g := range gs {
			want = append(want, g.String())
		}
	}
	compareLines(t, "docs/pipeline.md, IPv6 Services section (with a leading space in the file)", doc, want)
}

// TestPipelineDocDualStackPolicy: the block of docs/pipeline.md's section "Dual-stack
// node with NetworkPolicy: the IPv6 policy flows" is exactly the flows the dual-stack
// node with NetworkPolicy on (the doc's node: pod A, now with its IPv6 address, isolated
// for ingress, rule 1 allowing peer B's IPv4 and IPv6 pod subnets on TCP/80; peer B) has
// beyond the IPv4 doc node's and the dual-stack section's, in the order of a dump.
func TestPipelineDocDualStackPolicy(t *testing.T) {
	doc := docSection(t, "## Dual-stack node with NetworkPolicy: the IPv6 policy flows", false)
	old := map[string]bool{}
	_, v4 := docFlows()
	ds := testDualStackEgressConfig()
	v4 = append(v4, PipelineFlows(ds)...)
	v4 = append(v4, PodFlows(ds, testDualPodA())...)
	v4 = append(v4, PeerFlows(ds, testDualPeerB())...)
	for _, f := range v4 {
		old[f.Format(docPorts)] = true
	}
	cfg := testDualStackEgressConfig()
	cfg.Policy = true
	all := append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...)
	all = append(all, PodPolicyFlows(cfg, testDualPodA(), true, false)...)
	set := NewPolicyFlowSet(cfg)
	set.Set(PolicyRule{ID: 1, Pods: []Pod{testDualPodA()}, Peers: []*net.IPNet{mustCIDR("10.244.2.0/24"), mustCIDR6("fd00:10:244:2::/64")},
		Ports: []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}})
	all = append(all, set.Flows()...)
	all = append(all, PeerFlows(cfg, testDualPeerB())...)
	var fs []Flow
	for _, f := range all {
		if !old[f.Format(docPorts)] {
			fs = append(fs, f)
		}
	}
	sortDumpOrder(fs)
	compareLines(t, "docs/pipeline.md, dual-stack NetworkPolicy section (with a leading space in the file)", doc, lines(fs, docPorts))
}
