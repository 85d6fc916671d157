package flows

import (
	"fmt"
	"net"
	"testing"
)

// featureConfigs are the golden node with each combination of what turns features on or
// off: NetworkPolicy (and its deny log), the overlay (tunnel port, cluster CIDR), the
// service CIDR (kube-proxy on the host).
func featureConfigs() map[string]NodeConfig {
	out := map[string]NodeConfig{}
	for _, policy := range []int{0, 1, 2} { // off, on, on with the deny log
		for _, overlay := range []bool{false, true} {
			for _, svc := range []bool{false, true} {
				for _, proxy := range []bool{false, true} {
					cfg := testConfig()
					cfg.Services = proxy
					cfg.Policy, cfg.DenyLog = policy > 0, policy == 2
					if !overlay {
						cfg.TunnelOFPort, cfg.NodeIP, cfg.ClusterCIDR = 0, nil, nil
					}
					if !svc {
						cfg.ServiceCIDR = nil
					}
					out[fmt.Sprintf("policy=%d overlay=%v serviceCIDR=%v services=%v", policy, overlay, svc, proxy)] = cfg
				}
			}
		}
	}
	return out
}

// featureFlows is every builder's output for cfg: the node's, two pods', their default
// deny and one ingress and one egress rule with policy, two peers with a tunnel.
func featureFlows(b builder) []Flow {
	fs := b.pipelineFlows()
	fs = append(fs, b.podFlows(testPodA())...)
	fs = append(fs, b.podFlows(testPodB())...)
	if b.cfg.TunnelOFPort != 0 {
		fs = append(fs, b.peerFlows(testPeerB())...)
		fs = append(fs, b.peerFlows(testPeerC())...)
	}
	if b.p == std && b.cfg.Services {
		for i, eps := range [][]ServiceEndpoint{nil, {{IP: net.ParseIP("10.244.1.6"), Port: 8080}, {IP: net.ParseIP("10.244.2.9"), Port: 8080, Weight: 3}}} {
			sf, _ := ServicePortFlows(b.cfg, ServicePort{ID: uint32(i + 1), ClusterIP: net.ParseIP("10.96.0.10"), Proto: IPProtoTCP, Port: uint16(80 + i), Endpoints: eps})
			fs = append(fs, sf...)
		}
		sf, _ := ServicePortFlows(b.cfg, testAffinityPort())
		fs = append(fs, sf...)
	}
	if b.p == std {
		fs = append(fs, PodPolicyFlows(b.cfg, testPodA(), true, true)...)
		if b.cfg.Policy {
			set := NewPolicyFlowSet(b.cfg)
			set.Set(PolicyRule{ID: 1, Pods: []Pod{testPodA()}, Peers: []*net.IPNet{mustCIDR("10.244.2.0/24")},
				Ports: []PolicyPort{{Proto: IPProtoTCP, Port: 80, Mask: 0xffff}}})
			set.Set(PolicyRule{ID: 2, Egress: true, Pods: []Pod{testPodB()}, AnyPeer: true, AnyPort: true})
			fs = append(fs, set.Flows()...)
		}
	}
	return fs
}

// TestFeatureOffInstallsNothing: on every combination of features, a feature that is off
// has no flow in its stages (not even the miss flows), every flow lies in a stage in use
// and every goto_table (or ct recirculation) goes forward to a stage in use; the stages in
// use end in their miss flows, the stage before an off feature's stages continues past
// them, and every stage in use that the node's ports can reach is reached from table 0.
func TestFeatureOffInstallsNothing(t *testing.T) {
	for name, cfg := range featureConfigs() {
		t.Run(name, func(t *testing.T) {
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			b := builder{p: std, cfg: cfg}
			fs := featureFlows(b)
			inUse := map[TableID]bool{}
			for _, st := range TablesOn(cfg) {
				inUse[TableID(st.ID)] = true
			}
			for _, f := range fs {
				if !inUse[f.Table] {
					t.Errorf("flow in table %d (%s, feature off or not a stage): %s", f.Table, f.Table.Name(), f)
				}
				if to, ok := gotoOf(f); ok && (!inUse[to] || to <= f.Table) {
					t.Errorf("flow goes to table %d (%s), not a later stage in use: %s", to, to.Name(), f)
				}
			}
			checkMissFlows(t, std, cfg, fs)
			seen := reachable(fs)
			for _, st := range TablesOn(cfg) {
				if st.Name == "tunnel_ingress" && cfg.TunnelOFPort == 0 {
					continue // the overlay is on for the cluster CIDR alone: no tunnel port to enter by
				}
				if !seen[TableID(st.ID)] {
					t.Errorf("stage %s (feature %s, on) is not reached from table 0", st.Name, st.Feature)
				}
			}
			for _, f := range Features() {
				if FeatureOn(f.Name, cfg) {
					continue
				}
				for _, st := range f.Stages {
					for _, fl := range fs {
						if to, ok := gotoOf(fl); ok && to == TableID(st.ID) {
							t.Errorf("a flow goes to stage %s of feature %s, which is off: %s", st.Name, f.Name, fl)
						}
					}
				}
			}
		})
	}
}

// TestFeatureTables: every stage belongs to exactly one feature, the features' stages
// together are Tables(), the always-on feature holds the first and the last stage, and
// TablesOn is Tables() less the off features' stages.
func TestFeatureTables(t *testing.T) {
	owner := map[string]string{}
	n := 0
	for _, f := range Features() {
		for _, st := range f.Stages {
			if prev, dup := owner[st.Name]; dup {
				t.Errorf("stage %s in features %s and %s", st.Name, prev, f.Name)
			}
			owner[st.Name] = f.Name
			n++
		}
	}
	all := Tables()
	if n != len(all) {
		t.Errorf("features declare %d stages, the pipeline has %d", n, len(all))
	}
	for _, st := range all {
		if owner[st.Name] != st.Feature || st.Feature == "" {
			t.Errorf("stage %s: Feature %q, declared by %q", st.Name, st.Feature, owner[st.Name])
		}
	}
	if all[0].Feature != FeaturePodForwarding || all[len(all)-1].Feature != FeaturePodForwarding {
		t.Errorf("first stage %s (%s), last %s (%s): both must be pod forwarding's (always on)", all[0].Name, all[0].Feature, all[len(all)-1].Name, all[len(all)-1].Feature)
	}
	cfg := testConfig() // policy off
	for _, st := range TablesOn(cfg) {
		if st.Feature == FeatureNetworkPolicy {
			t.Errorf("policy off, yet stage %s in use", st.Name)
		}
	}
	cfg.Policy, cfg.Services = true, true
	if got := len(TablesOn(cfg)); got != len(all)-1 {
		t.Errorf("golden node with policy: %d stages in use, want all %d but nd (IPv6 and NetworkPolicy exclude each other)", got, len(all)-1)
	}
	for _, st := range TablesOn(cfg) {
		if st.Feature == FeatureIPv6 {
			t.Errorf("IPv4-only node, yet stage %s in use", st.Name)
		}
	}
	ds := testDualStackConfig()
	ds.Services = true
	if got := len(TablesOn(ds)); got != len(all)-5 {
		t.Errorf("dual-stack node with Services: %d stages in use, want all %d but the 5 of NetworkPolicy", got, len(all)-5)
	}
	if FeatureOn("no_such_feature", cfg) {
		t.Error("an unknown feature is on")
	}
}
