package ovsdb_test

import "testing"

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
