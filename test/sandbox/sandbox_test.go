package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestSandboxStartsOVSAndCleansUp(t *testing.T) {
	testenv.Privileged(t)
	var o *OVS
	t.Run("run", func(t *testing.T) {
		o = Start(t)
		o.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "protocols=OpenFlow13")
		if out := o.Ofctl(t, "dump-flows", o.MgmtSocket("br-int")); !strings.Contains(out, "OFPST_FLOW reply") {
			t.Fatalf("no flow dump from the bridge: %s", out)
		}
		if links := o.Exec(t, "ip", "-br", "link"); !strings.Contains(links, "br-int") {
			t.Fatalf("bridge's tap device not in the sandbox netns: %s", links)
		}
	})
	if _, err := os.Stat(o.NetnsPath()); !os.IsNotExist(err) {
		t.Fatalf("netns %s left behind after cleanup (stat err %v)", o.Netns, err)
	}
	if pids := processesMentioning(t, o.Dir); len(pids) > 0 {
		t.Fatalf("OVS daemons of %s still running: pids %v", o.Dir, pids)
	}
}

// processesMentioning returns the pids whose command line contains s (read from /proc, so
// the check does not depend on procps being installed).
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if strings.Contains(string(cmdline), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
