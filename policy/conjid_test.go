package policy

import (
	"fmt"
	"testing"
)

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

// TestConjIDsPreferredAndChanges: a key gets the id recorded for it (Prefer) while that id
// is free, no other key gets a preferred id before DropPreferences, and TakeChanges lists
// every id given and freed in order, a key given a newer id keeping it when its older id
// is freed.
func TestConjIDsPreferredAndChanges(t *testing.T) {
	a := NewConjIDs()
	a.Prefer(map[string]uint32{"x/p ingress[0] *": 2, "x/p ingress[1] *": 1, "gone": 3}, 7)
	other, err := a.AllocateFor("x/q egress[0] TCP/80")
	if err != nil || other != 8 {
		t.Fatalf("a key without a recorded id got %d (err %v): want 8, after the recorded last id 7 (ids 4..7 were rules deleted before the restart)", other, err)
	}
	if id, _ := a.AllocateFor("x/p ingress[0] *"); id != 2 {
		t.Errorf("x/p ingress[0] got id %d, want its recorded 2", id)
	}
	if id, _ := a.AllocateFor("x/p ingress[1] *"); id != 1 {
		t.Errorf("x/p ingress[1] got id %d, want its recorded 1", id)
	}
	if dropped := a.DropPreferences(); len(dropped) != 1 || dropped[0] != "gone" {
		t.Errorf("DropPreferences = %v, want [gone]", dropped)
	}
	// x/p ingress[0]'s group goes, comes back with a new id, then its old id is freed.
	a.Release(2)
	again, _ := a.AllocateFor("x/p ingress[0] *")
	a.Free(2)
	got := a.TakeChanges()
	want := []ConjIDChange{{Key: "x/q egress[0] TCP/80", ID: other}, {Key: "x/p ingress[0] *", ID: 2}, {Key: "x/p ingress[1] *", ID: 1}, {Key: "x/p ingress[0] *", ID: again}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v (the old id's free not listed: the key holds %d)", got, want, again)
	}
	a.Release(again)
	a.Free(again)
	if got := a.TakeChanges(); len(got) != 1 || got[0] != (ConjIDChange{Key: "x/p ingress[0] *", Free: true}) {
		t.Errorf("changes after freeing the key's id: %v, want its free", got)
	}
}
