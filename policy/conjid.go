package policy

// Conjunction ids.
//
// A conjunction id names one conjunctive match in OVS: the clause flows carry
// conjunction(id, k/n) actions and one flow matches conj_id=id. If an id were handed to a
// new rule while a flow of the old rule still carried it (a delete not yet confirmed by
// the switch, a failed batch), packets could complete the new rule's conjunction with the
// old rule's clauses. So an id is free again only after the caller says the flows holding
// it are gone (Free), and the allocator also moves forward through the id space instead of
// reusing the lowest free id, so an id comes back only after the other 2^32-2 have been
// used.
//
// Ids kept across restarts (issue 21): an id allocated for a conjunction (AllocateFor) is
// known by its conjunction's key (ConjKey.String), and every id given or freed is listed
// (TakeChanges) for the caller to record; a restarted daemon hands the recorded ids back
// as preferences (Prefer), so each rule's conjunctions get the ids, and so the cookies,
// they had. A preferred id is never given to another key; the preferences no conjunction
// claimed are dropped once the first realization is done (DropPreferences).

import (
	"fmt"
	"sync"
)

// ConjIDs allocates conjunction ids (1..0xfffffffe; 0 is "no conjunction" in a conj_id
// match and 0xffffffff is kept out). Safe for concurrent use.
type ConjIDs struct {
	mu      sync.Mutex
	next    uint32
	used    map[uint32]bool   // allocated, not yet freed
	limit   uint32            // largest id handed out (tests lower it)
	pending map[uint32]bool   // released by the engine, flows maybe still on the switch
	keys    map[uint32]string // ids given by AllocateFor → their key
	byKey   map[string]uint32 // each key's latest id (keys' inverse for that id)
	prefer  map[string]uint32 // recorded ids not yet claimed, by key
	held    map[uint32]string // prefer's ids → their key
	changes []ConjIDChange
}

// ConjIDChange is one id given to a conjunction key (ID set) or freed (Free), for the
// caller's record of ids.
type ConjIDChange struct {
	// Key is the conjunction's key (ConjKey.String).
	Key string
	// ID is the id given (1..0xfffffffe); 0 with Free.
	ID uint32
	// Free says Key's id was freed.
	Free bool
}

// NewConjIDs returns an allocator whose first id is 1.
func NewConjIDs() *ConjIDs {
	return &ConjIDs{next: 1, used: map[uint32]bool{}, pending: map[uint32]bool{}, limit: 0xfffffffe,
		keys: map[uint32]string{}, byKey: map[string]uint32{}, prefer: map[string]uint32{}, held: map[uint32]string{}}
}

// Prefer gives keys the ids recorded for them by an earlier run (key → id, ids in
// 1..0xfffffffe; others are ignored): AllocateFor(key) returns that id while it is free,
// and no other key gets it until DropPreferences. last is the last id that run handed
// out (0: none): new ids go on after it, so an id of a rule deleted before the restart
// does not come back at once. Call it before any allocation.
func (a *ConjIDs) Prefer(recorded map[string]uint32, last uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if last != 0 && last < a.limit {
		a.next = last + 1
	}
	for k, id := range recorded {
		if id == 0 || id > a.limit || a.used[id] {
			continue
		}
		if _, dup := a.held[id]; dup {
			continue
		}
		a.prefer[k], a.held[id] = id, k
	}
}

// DropPreferences forgets the preferences no conjunction claimed (their rules are gone)
// and returns their keys, for the caller to free them in its record.
func (a *ConjIDs) DropPreferences() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.prefer))
	for k := range a.prefer {
		out = append(out, k)
	}
	clear(a.prefer)
	clear(a.held)
	return out
}

// AllocateFor returns an id for the conjunction named key: the id Prefer recorded for
// it if that id is free, else Allocate's. The id is listed by TakeChanges. The error is
// Allocate's.
func (a *ConjIDs) AllocateFor(key string) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id, ok := a.prefer[key]; ok {
		delete(a.prefer, key)
		delete(a.held, id)
		if !a.used[id] {
			a.used[id] = true
			a.keys[id], a.byKey[key] = key, id
			a.changes = append(a.changes, ConjIDChange{Key: key, ID: id})
			return id, nil
		}
	}
	id, err := a.allocateLocked()
	if err != nil {
		return 0, err
	}
	a.keys[id], a.byKey[key] = key, id
	a.changes = append(a.changes, ConjIDChange{Key: key, ID: id})
	return id, nil
}

// TakeChanges returns the ids given to keys and freed since the last call, in order, and
// forgets them.
func (a *ConjIDs) TakeChanges() []ConjIDChange {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.changes
	a.changes = nil
	return out
}

// Allocate returns an id no one holds: neither allocated nor released-but-not-freed. The
// error says the id space is exhausted (every id 1..0xfffffffe held), which needs more
// than four billion live conjunctions.
func (a *ConjIDs) Allocate() (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allocateLocked()
}

// allocateLocked is Allocate; it skips the ids preferred for other keys. a.mu is held.
func (a *ConjIDs) allocateLocked() (uint32, error) {
	if uint64(len(a.used)+len(a.held)) >= uint64(a.limit) {
		return 0, fmt.Errorf("conjunction ids: all %d ids are held; delete network policies or restart the daemon", a.limit)
	}
	for {
		id := a.next
		a.next++
		if a.next == 0 || a.next > a.limit {
			a.next = 1
		}
		if _, preferred := a.held[id]; !a.used[id] && !preferred {
			a.used[id] = true
			return id, nil
		}
	}
}

// Release marks id as no longer wanted by any rule; it stays held until Free, which the
// caller calls once the switch has confirmed that no flow carries it any more. Releasing
// an id that is not allocated does nothing.
func (a *ConjIDs) Release(id uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used[id] {
		a.pending[id] = true
	}
}

// Pending returns the ids released but not yet freed.
func (a *ConjIDs) Pending() []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]uint32, 0, len(a.pending))
	for id := range a.pending {
		out = append(out, id)
	}
	return out
}

// Free makes released ids available again. Ids that were not released are left alone
// (Free never takes an id from a live rule).
func (a *ConjIDs) Free(ids ...uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if a.pending[id] {
			delete(a.pending, id)
			delete(a.used, id)
			if k, ok := a.keys[id]; ok {
				delete(a.keys, id)
				// A key given a newer id since (its rule's port group came back before
				// this id was freed) keeps that one.
				if a.byKey[k] == id {
					delete(a.byKey, k)
					a.changes = append(a.changes, ConjIDChange{Key: k, Free: true})
				}
			}
		}
	}
}

// InUse returns how many ids are held (allocated or released but not freed).
func (a *ConjIDs) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}
