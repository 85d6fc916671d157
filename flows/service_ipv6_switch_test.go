package flows

// IPv6 Service ports against a real Open vSwitch (a private sandbox): the dual-stack
// node's Services flows and testIPv6ServicePorts' groups and flows, installed from our
// text and from our FlowMod bytes, are what dump-flows and dump-groups print. Needs root
// and OVS; does not skip.

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/contiv/libOpenflow/openflow13"
)

func TestServiceIPv6OnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	n.ovs.Ofctl(t, "add-meter", n.mgmt, "meter=2,pktps,band=type=drop,rate=100")
	cfg := testDualStackConfig()
	cfg.Services = true
	all := append(PipelineFlows(cfg), PodFlows(cfg, testDualPodA())...)
	var groups []Group
	for _, sp := range testIPv6ServicePorts() {
		fs, gs := ServicePortFlows(cfg, sp)
		all, groups = append(all, fs...), append(groups, gs...)
	}
	var wantGroups []string
	for _, g := range groups {
		n.ovs.Ofctl(t, "add-group", n.mgmt, g.String())
		wantGroups = append(wantGroups, g.String())
	}
	var gotGroups []string
	for _, l := range strings.Split(n.ovs.Ofctl(t, "dump-groups", "--names", n.mgmt), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") {
			gotGroups = append(gotGroups, l)
		}
	}
	sort.Strings(gotGroups)
	sort.Strings(wantGroups)
	compareLines(t, "dump-groups", gotGroups, wantGroups)

	t.Run("text round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		file := filepath.Join(t.TempDir(), "flows.txt")
		if err := os.WriteFile(file, []byte(strings.Join(lines(all, nil), "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		n.ovs.Ofctl(t, "add-flows", n.mgmt, file)
		compareLines(t, "dump-flows --names vs Format(port names)", n.dump(t), sortedFormat(all, n.names))
	})
	t.Run("FlowMod round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		var mods []*openflow13.FlowMod
		for _, f := range all {
			mods = append(mods, f.FlowMod(openflow13.FC_ADD))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows --names after our FlowMods vs Format(port names)", n.dump(t), sortedFormat(all, n.names))
	})
}
