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

import (
	"fmt"
	"sync"
)

// ConjIDs allocates conjunction ids (1..0xfffffffe; 0 is "no conjunction" in a conj_id
// match and 0xffffffff is kept out). Safe for concurrent use.
type ConjIDs struct {
	mu      sync.Mutex
	next    uint32
	used    map[uint32]bool // allocated, not yet freed
	limit   uint32          // largest id handed out (tests lower it)
	pending map[uint32]bool // released by the engine, flows maybe still on the switch
}

// NewConjIDs returns an allocator whose first id is 1.
func NewConjIDs() *ConjIDs {
	return &ConjIDs{next: 1, used: map[uint32]bool{}, pending: map[uint32]bool{}, limit: 0xfffffffe}
}

// Allocate returns an id no one holds: neither allocated nor released-but-not-freed. The
// error says the id space is exhausted (every id 1..0xfffffffe held), which needs more
// than four billion live conjunctions.
func (a *ConjIDs) Allocate() (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if uint64(len(a.used)) >= uint64(a.limit) {
		return 0, fmt.Errorf("conjunction ids: all %d ids are held; delete network policies or restart the daemon", a.limit)
	}
	for {
		id := a.next
		a.next++
		if a.next == 0 || a.next > a.limit {
			a.next = 1
		}
		if !a.used[id] {
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
		}
	}
}

// InUse returns how many ids are held (allocated or released but not freed).
func (a *ConjIDs) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}
