package sandbox

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestSandboxStartsOVSAndCleansUp(t *testing.T) {
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
	if out, _ := exec.Command("pgrep", "-f", o.Dir).Output(); len(out) > 0 {
		t.Fatalf("OVS daemons of %s still running: %s", o.Dir, out)
	}
}
