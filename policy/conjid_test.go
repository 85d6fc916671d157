package policy

import "testing"

func TestConjIDsNeverReusedWhileHeld(t *testing.T) {
	a := NewConjIDs()
	a.limit = 5
	got := map[uint32]bool{}
	for i := 0; i < 5; i++ {
		id, err := a.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		if id == 0 || id > 5 || got[id] {
			t.Fatalf("allocation %d gave id %d (held: %v)", i, id, got)
		}
		got[id] = true
	}
	if _, err := a.Allocate(); err == nil {
		t.Fatal("allocated a sixth id out of five")
	}
	// Released but not freed: still held.
	a.Release(3)
	if _, err := a.Allocate(); err == nil {
		t.Fatal("an id released but not freed was handed out again")
	}
	if p := a.Pending(); len(p) != 1 || p[0] != 3 {
		t.Fatalf("pending = %v, want [3]", p)
	}
	a.Free(4) // never released: must stay held
	a.Free(3)
	id, err := a.Allocate()
	if err != nil || id != 3 {
		t.Fatalf("after freeing 3: id %d, err %v; want 3", id, err)
	}
	if a.InUse() != 5 {
		t.Fatalf("in use = %d, want 5", a.InUse())
	}
}

func TestConjIDsMoveForward(t *testing.T) {
	a := NewConjIDs()
	x, _ := a.Allocate()
	a.Release(x)
	a.Free(x)
	y, _ := a.Allocate()
	if y == x {
		t.Fatalf("freed id %d came back at once; ids must move forward through the space", x)
	}
}
