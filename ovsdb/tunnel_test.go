package ovsdb_test

import (
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/ovsdb"
)

// TestEnsureTunnelPort creates the flow-based VXLAN port, checks what ovs-vswitchd made of
// it, re-ensures it unchanged, then switches the UDP port in place (same ofport).
func TestEnsureTunnelPort(t *testing.T) {
	o, c := setup(t)
	spec := ovsdb.TunnelSpec{Bridge: bridge, Name: "vxlan0", Type: ovsdb.TypeVXLAN}
	port, err := c.EnsureTunnelPort(ctxT(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := vsctlInt(t, o, "get", "interface", "vxlan0", "ofport"); got != port || port <= 0 {
		t.Fatalf("ofport %d, ovs-vsctl says %d", port, got)
	}
	if typ := o.Vsctl(t, "get", "interface", "vxlan0", "type"); typ != "vxlan" {
		t.Fatalf("type %s", typ)
	}
	opts := o.Vsctl(t, "get", "interface", "vxlan0", "options")
	if !strings.Contains(opts, `key=flow`) || !strings.Contains(opts, `remote_ip=flow`) || strings.Contains(opts, "dst_port") {
		t.Fatalf("options %s", opts)
	}
	if again, err := c.EnsureTunnelPort(ctxT(t), spec); err != nil || again != port {
		t.Fatalf("second ensure: ofport %d, %v", again, err)
	}
	spec.DstPort = 8472
	if moved, err := c.EnsureTunnelPort(ctxT(t), spec); err != nil || moved != port {
		t.Fatalf("dst_port change: ofport %d (was %d), %v", moved, port, err)
	}
	if opts := o.Vsctl(t, "get", "interface", "vxlan0", "options"); !strings.Contains(opts, `dst_port="8472"`) {
		t.Fatalf("options after dst_port change: %s", opts)
	}
	if _, err := c.EnsureTunnelPort(ctxT(t), ovsdb.TunnelSpec{Bridge: bridge, Name: "gre0", Type: "gre"}); err == nil {
		t.Fatal("type gre accepted")
	}
}
