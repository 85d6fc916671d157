package e2e

import (
	"testing"

	"github.com/ofsdn/ofsdn/test/harness"
)

// TestIPForwardWarning: a daemon on a node that does not forward IPv4 warns at start,
// naming the sysctl (host ports mapped by portmap are unreachable from other hosts
// without it), and leaves the setting alone; with forwarding on it says nothing.
func TestIPForwardWarning(t *testing.T) {
	serial(t)
	n := &testNode{harness.NewNode(t, "10.155.0.0/24", netA)}
	const sysctl = "/proc/sys/net/ipv4/ip_forward"
	set := func(v string) { n.OVS.Exec(t, "sh", "-c", "echo "+v+" > "+sysctl) }
	const warning = "set net.ipv4.ip_forward=1"

	set("0")
	n.startDaemon()
	if got := n.logCount(warning); got != 1 {
		t.Errorf("with ip_forward 0: %d warnings naming the sysctl, want 1", got)
	}
	if v := n.OVS.Exec(t, "cat", sysctl); v != "0" {
		t.Errorf("the daemon changed net.ipv4.ip_forward to %s", v)
	}
	n.stopDaemon()

	set("1")
	n.startDaemon()
	if got := n.logCount(warning); got != 1 {
		t.Errorf("with ip_forward 1: a new warning (%d in the log)", got)
	}
}
