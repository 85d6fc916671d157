package flows

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// withInserted returns the package's features with extra added, as one line, to the
// feature of stage after (its table id halfway to the next stage's, so nothing is
// renumbered), and the merged stages.
func withInserted(after int, extra Stage) ([]Feature, []Stage) {
	ss := Tables()
	extra.ID = ss[after].ID + (ss[after+1].ID-ss[after].ID)/2
	fs := Features()
	for i := range fs {
		if fs[i].Name != ss[after].Feature {
			continue
		}
		var st []Stage
		for _, s := range fs[i].Stages {
			st = append(st, s)
			if s.Name == ss[after].Name {
				st = append(st, extra)
			}
		}
		fs[i].Stages = st
	}
	extra.Feature = ss[after].Feature
	out := append([]Stage(nil), ss[:after+1]...)
	out = append(out, extra)
	return fs, append(out, ss[after+1:]...)
}

// allFlows is every builder's output on b: the node's, pod A's and B's, peer B's and C's.
func allFlows(b builder) []Flow {
	fs := b.pipelineFlows()
	a, pb := testPodA(), testPodB()
	peerB, peerC := testPeerB(), testPeerC()
	if b.cfg.PodSubnetIPv6 != nil {
		a, pb = testDualPodA(), testDualPodB()
	}
	if !b.cfg.IPv4() { // an IPv6-only node, its pods and peers
		a, pb, peerB = testV6PodA(), testV6PodB(), testV6PeerB()
		peerC = Peer{Name: "node-c", NodeIP: net.ParseIP("fd00:172:16::3"), PodSubnetIPv6: mustCIDR6("fd00:10:244:3::/64"), OwnerID: 0x0af40300}
	}
	fs = append(fs, b.podFlows(a)...)
	fs = append(fs, b.podFlows(pb)...)
	fs = append(fs, b.peerFlows(peerB)...)
	fs = append(fs, b.peerFlows(peerC)...)
	if b.cfg.Services && b.cfg.IPv4() {
		// A Service port with session affinity: the only flows reaching service_affinity
		// (resubmit) and service_endpoint.
		sfs, _ := b.servicePortFlows(testAffinityPort())
		fs = append(fs, sfs...)
	}
	return fs
}

// gotoOf returns the table f's goto_table instruction names, or the table a ct action
// continues in (recirculation), if any.
func gotoOf(f Flow) (TableID, bool) {
	for _, a := range f.Actions {
		switch a := a.(type) {
		case GotoTable:
			return a.Table, true
		case CT:
			if a.Table != 0 {
				return a.Table, true
			}
		}
	}
	return 0, false
}

// reachable returns the tables a packet can reach from table 0 by the flows' goto_table.
func reachable(fs []Flow) map[TableID]bool {
	seen := map[TableID]bool{0: true}
	for changed := true; changed; {
		changed = false
		for _, f := range fs {
			if to, ok := gotoOf(f); ok && seen[f.Table] && !seen[to] {
				seen[to], changed = true, true
			}
			for _, a := range f.Actions {
				if r, ok := a.(Resubmit); ok && seen[f.Table] && !seen[r.Table] {
					seen[r.Table], changed = true, true
				}
			}
		}
	}
	return seen
}

// continuesToNext are the stages whose traffic goes on to whatever stage follows them
// (their miss is MissNext, or their flows continue with next): a stage inserted after
// one of them sees that traffic. The others send packets to stages they name
// (classifier → tunnel_ingress or spoof_guard, spoof_guard → service or arp, arp →
// output), so a stage inserted after them is reached only by flows that name it.
var continuesToNext = map[string]bool{"service_conntrack": true, "service_lb": true, "service_endpoint": true, "service": true, "l3_forwarding": true, "conntrack_state": true, "egress_rules": true,
	"ingress_rules": true, "conntrack_commit": true, "remote": true, "egress": true}

// TestInsertedStage inserts a new stage that passes everything on (as a network policy
// or conntrack stage starts) after each stage in turn and builds the node's, two pods'
// and two peers' flows on that pipeline. Every flow must still lie in a table of the
// pipeline, with the cookie stage field of its index there; every goto_table must go
// forward to a table of the pipeline; every table must end in a counted miss flow (the
// priority-0 drop, and for a MissNext stage the priority-1 goto to its next stage); every
// stage must still be reached from table 0; and after a stage of continuesToNext the
// new stage must be reached, with no flow jumping past it.
//
// It runs on two nodes, which together use every stage: IPv4-only with every other
// feature on, and dual-stack with Services (IPv6 and NetworkPolicy exclude each other);
// and on an IPv6-only node over an IPv6 underlay.
// A stage of a feature that is off on the node is neither reached nor checked.
func TestInsertedStage(t *testing.T) {
	ipv4 := testConfig()
	ipv4.Policy, ipv4.Services = true, true
	dual := testDualStackConfig()
	dual.Services = true
	for _, c := range []struct {
		name string
		cfg  NodeConfig
	}{{"ipv4", ipv4}, {"dual-stack", dual}, {"ipv6-only", testIPv6OnlyConfig()}} {
		t.Run(c.name, func(t *testing.T) { testInsertedStage(t, c.cfg) })
	}
}

func testInsertedStage(t *testing.T, cfg NodeConfig) {
	orig := allFlows(builder{p: std, cfg: cfg})
	checkMissFlows(t, std, cfg, orig)
	n := len(Tables())
	for after := 0; after+1 < n; after++ {
		fe, ss := withInserted(after, Stage{Name: "inserted", Purpose: "test stage", Miss: MissNext})
		p, err := newPipeline(fe)
		if err != nil {
			t.Fatalf("pipeline with a stage after %s: %v", ss[after].Name, err)
		}
		name := fmt.Sprintf("stage inserted after %s", ss[after].Name)
		t.Run(name, func(t *testing.T) {
			fs := allFlows(builder{p: p, cfg: cfg})
			if !p.on(after+1, cfg) {
				// The inserted stage's feature is off on this node: nothing changes.
				if len(fs) != len(orig) {
					t.Errorf("%d flows, want the %d of the package's pipeline (the new stage's feature is off)", len(fs), len(orig))
				}
				return
			}
			if len(fs) != len(orig)+2 {
				t.Errorf("%d flows, want the %d of the package's pipeline and the new stage's 2 miss flows", len(fs), len(orig))
			}
			for _, f := range fs {
				_, ok := p.stageOf(f.Table)
				if !ok {
					t.Errorf("flow in table %d, not a table of the pipeline: %s", f.Table, f)
					continue
				}
				if to, ok := gotoOf(f); ok {
					if _, known := p.stageOf(to); !known {
						t.Errorf("flow goes to table %d, not a table of the pipeline: %s", to, f)
					}
				}
				if err := f.Validate(); err != nil {
					t.Error(err)
				}
			}
			checkMissFlows(t, p, cfg, fs)

			// Every stage is still reached from table 0; after a stage whose traffic goes on
			// to the next stage, the new stage is reached and nothing skips it.
			seen := reachable(fs)
			for i, st := range ss {
				if st.Name != "inserted" && p.on(i, cfg) && !seen[TableID(st.ID)] {
					t.Errorf("stage %s is no longer reached from table 0", st.Name)
				}
			}
			prev, ins, next := TableID(ss[after].ID), TableID(ss[after+1].ID), TableID(ss[after+2].ID)
			if !continuesToNext[ss[after].Name] {
				return
			}
			if !seen[ins] {
				t.Errorf("the stage inserted after %s is not reached", ss[after].Name)
			}
			for _, f := range fs {
				if to, ok := gotoOf(f); ok && f.Table == prev && to == next {
					t.Errorf("a flow of %s skips the inserted stage: %s", ss[after].Name, f)
				}
			}
		})
	}
}

// TestNewPipelineRejects: a feature list that cannot be a pipeline is refused, saying why.
func TestNewPipelineRejects(t *testing.T) {
	one := func(ss ...Stage) []Feature { return []Feature{{Name: "f", Stages: ss}} }
	fs := Features()
	swap := Features()
	for i := range swap {
		if len(swap[i].Stages) > 1 {
			swap[i].Stages[0], swap[i].Stages[1] = swap[i].Stages[1], swap[i].Stages[0]
			break
		}
	}
	dupName := Features()
	dupName[1].Stages[0].Name = dupName[0].Stages[0].Name
	dupID := Features()
	dupID[1].Stages[0].ID = dupID[0].Stages[1].ID
	lastPasses := Features()
	lastPasses[0].Stages[len(lastPasses[0].Stages)-1].Miss = MissNext
	lastOptional := append(Features(), Feature{Name: "late", On: func(NodeConfig) bool { return false },
		Stages: []Stage{{ID: 200, Name: "late_stage"}}})
	dupFeature := append(Features(), Feature{Name: fs[0].Name})
	var many []Stage // 40 stages: more than the old 4-bit cookie stage field allowed
	for i := 0; i < 40; i++ {
		many = append(many, Stage{ID: uint8(i), Name: fmt.Sprint("s", i)})
	}
	if _, err := newPipeline(one(many...)); err != nil {
		t.Errorf("40 stages: %v", err)
	}
	for what, c := range map[string]struct {
		features []Feature
		want     string
	}{
		"ids not ascending in a feature": {swap, "table ids must ascend"},
		"duplicate stage name":           {dupName, "two stages named"},
		"duplicate table id":             {dupID, "both have table id"},
		"duplicate feature name":         {dupFeature, "two features named"},
		"last stage passes":              {lastPasses, "cannot pass packets on"},
		"last stage can be off":          {lastOptional, "must always be in use"},
		"no stages":                      {nil, "a pipeline has 1..255"},
		"unnamed feature":                {[]Feature{{Stages: []Stage{{ID: 0, Name: "a"}}}}, "has no name"},
		"unnamed stage":                  {one(Stage{ID: 0}), "has no name"},
		"unknown miss":                   {one(Stage{ID: 0, Name: "a", Miss: 7}), "unknown miss behaviour"},
		"table id above 254":             {one(Stage{ID: 0, Name: "a"}, Stage{ID: 255, Name: "b"}), "above 254"},
	} {
		if _, err := newPipeline(c.features); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: newPipeline returned %v, want an error saying %q", what, err, c.want)
		}
	}
	if _, err := newPipeline(fs); err != nil {
		t.Errorf("the package's own features: %v", err)
	}
}
