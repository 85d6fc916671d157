package ovsdb_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestHoldOFPort: a port re-created after the database lost it asks for the ofport it
// had: HoldOFPort holds that number (a second name cannot, nor ReserveOFPort choose it),
// refuses one another interface uses, and ovs-vswitchd gives the port the held number.
func TestHoldOFPort(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	other := veth(t, o, "ofs-hold-a")
	if got, err := c.AddPortWithOFPort(ctxT(t), bridge, other, 40100, nil); err != nil || got != 40100 {
		t.Fatalf("AddPortWithOFPort(40100) = %d, %v", got, err)
	}
	if _, err := c.HoldOFPort("ofs-hold-b", 40100); err == nil {
		t.Error("HoldOFPort of a number another interface has: no error")
	}
	if _, err := c.HoldOFPort("ofs-hold-b", 0); err == nil {
		t.Error("HoldOFPort(0): no error")
	}
	release, err := c.HoldOFPort("ofs-hold-b", 40200)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.HoldOFPort("ofs-hold-c", 40200); err == nil {
		t.Error("a second name held the same number")
	}
	if r, err := c.HoldOFPort("ofs-hold-b", 40200); err != nil {
		t.Errorf("holding a number the name holds again: %v", err)
	} else {
		r()
	}
	n, rel, err := c.ReserveOFPort("ofs-hold-d")
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if n == 40200 || n == 40100 {
		t.Errorf("ReserveOFPort chose %d, a number in use or held", n)
	}
	dev := veth(t, o, "ofs-hold-b")
	got, err := c.AddPortWithOFPort(ctxT(t), bridge, dev, 40200, nil)
	release()
	release() // idempotent
	if err != nil || got != 40200 {
		t.Errorf("port on the held number: ofport %d, %v; want 40200", got, err)
	}
}

// TestReconnectedOnEmptyDatabase: ovsdb-server comes back with a database made by
// `ovsdb-tool create` (no Open_vSwitch row, no bridge). The client reports the
// reconnection within seconds, with a cache showing the empty database, and the bridge
// can be ensured again with its ports. (Before issue 20 it reported it only once some
// other client inserted an Open_vSwitch row.)
func TestReconnectedOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	dev := veth(t, o, "ofs-empty")
	if _, err := c.AddPortWithOFPort(ctxT(t), bridge, dev, 40300, nil); err != nil {
		t.Fatal(err)
	}
	ch := c.Reconnected()
	o.KillOVSDB(t)
	db := filepath.Join(o.Dir, "conf.db")
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema").CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v\n%s", err, out)
	}
	o.StartOVSDB(t)
	start := time.Now()
	select {
	case <-ch:
		t.Logf("reconnection reported %s after ovsdb-server started on an empty database", time.Since(start).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("no reconnection reported 15 s after ovsdb-server started on an empty database")
	}
	if c.BridgeExists(bridge) {
		t.Error("the cache still shows the old database's bridge")
	}
	if _, ok := c.GetPort(dev); ok {
		t.Error("the cache still shows the old database's port")
	}
	if err := c.EnsureBridge(ctxT(t), brIntSpec()); err != nil {
		t.Fatalf("EnsureBridge on the empty database: %v", err)
	}
	if got, err := c.AddPortWithOFPort(ctxT(t), bridge, dev, 40300, nil); err != nil || got != 40300 {
		t.Errorf("port re-added on the empty database: ofport %d, %v; want 40300", got, err)
	}
}
