package switchstate

// Changes to several owners as one change (network policy: a rule's flows and the
// default-deny flows of the pods it isolates, or a new pod's forwarding flows with the
// policy flows that let it talk, must reach the switch together; a Service's group with
// the flows that use it).

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// OwnerUpdate is one owner's part of Store.Update.
type OwnerUpdate struct {
	// Owner is the store owner.
	Owner flows.Owner
	// Replace: Flows, Groups and Meters are the owner's whole desired state (as Set);
	// what it had and they lack is deleted. Otherwise they are added or replaced (flows
	// by MatchKey, groups and meters by id), Delete, DeleteGroups and DeleteMeters name
	// what to remove, and the owner's other flows, groups and meters stay.
	Replace bool
	// Flows are the flows wanted.
	Flows []flows.Flow
	// Delete are MatchKeys of flows to remove (without Replace); unknown keys are ignored.
	Delete []string
	// Groups are the groups wanted (ids flows.GroupIDMin..GroupIDMax).
	Groups []flows.Group
	// DeleteGroups are ids of groups to remove (without Replace); unknown ids are ignored.
	DeleteGroups []uint32
	// Meters are the meters wanted (ids flows.MeterIDMin..MeterIDMax).
	Meters []flows.Meter
	// DeleteMeters are ids of meters to remove (without Replace); unknown ids are ignored.
	DeleteMeters []uint32
}

// apply returns have (nil: nothing) with u applied, and the MatchKeys of the flows u
// touched (nil for Replace: any flow may differ). Without Replace the owner's other
// flows are carried over as they are (not keyed again), so the caller need diff only
// the touched keys: an update of a few flows of an owner of thousands costs the few.
func (u OwnerUpdate) apply(have *state) (*state, map[string]bool, error) {
	if have == nil {
		have = &state{}
	}
	d := Desired{}
	if u.Replace {
		d.Flows, d.Groups, d.Meters = u.Flows, u.Groups, u.Meters
		st, err := newState(u.Owner, d)
		return st, nil, err
	}
	delG := map[uint32]bool{}
	for _, id := range u.DeleteGroups {
		delG[id] = true
	}
	for _, g := range u.Groups {
		delG[g.ID] = true // replaced below
	}
	for id, g := range have.groups {
		if !delG[id] {
			d.Groups = append(d.Groups, g)
		}
	}
	delM := map[uint32]bool{}
	for _, id := range u.DeleteMeters {
		delM[id] = true
	}
	for _, m := range u.Meters {
		delM[m.ID] = true
	}
	for id, m := range have.meters {
		if !delM[id] {
			d.Meters = append(d.Meters, m)
		}
	}
	d.Groups = append(d.Groups, u.Groups...)
	d.Meters = append(d.Meters, u.Meters...)
	st, err := newState(u.Owner, d)
	if err != nil {
		return nil, nil, err
	}
	// A lazy state over have (see state): the owner's other flows are not copied.
	over := make(map[string]*flows.Flow, len(u.Delete)+len(u.Flows))
	touched := make(map[string]bool, len(u.Delete)+len(u.Flows))
	for _, k := range u.Delete {
		over[k] = nil
		touched[k] = true
	}
	for i := range u.Flows { // later entries with the same MatchKey win
		f := u.Flows[i]
		k := f.MatchKey()
		over[k] = &f
		touched[k] = true
	}
	st.flows, st.base, st.over = nil, have, over
	return st, touched, nil
}

// Update applies the owners' changes as ONE change, sending only what differs from the
// store's current state: first the new and changed meters (OFPMC_ADD/OFPMC_MODIFY, one
// batch with a barrier: OVS takes no meter mods in bundles), then ONE atomic bundle (ONF
// EXT-230 bundles for OpenFlow 1.3: OVS commits all of it or nothing) of the new and
// changed groups (ADD_OR_MOD), new and changed flows (OFPFC_ADD), removed flows
// (OFPFC_DELETE_STRICT) and removed groups (OFPGC_DELETE), last the removed meters
// (OFPMC_DELETE). The store records the new state only after the bundle committed; on
// error it keeps the previous state, so a retry sends the difference again (meters it
// added before a failed bundle are modified by the retry, or deleted by the audit as
// stale). A failed delete of a removed meter is no error: it is reported to the observer
// and the audit deletes it. Owners not known yet are created. It is Prepare then Commit.
//
// Errors: a group or meter that is invalid, outside ofsdn's id ranges or held by another
// owner (nothing is sent); those of Apply and ApplyBundle. Like SetOwner it fails at once
// (matching openflow.ErrDisconnected) while the switch is disconnected or being
// resynchronised, and waits for a running audit.
func (s *Store) Update(ctx context.Context, ups []OwnerUpdate) error {
	p, err := s.Prepare(ctx, ups, nil)
	if err != nil || p == nil {
		return err
	}
	return p.Commit(ctx)
}

// Prepared is a change Store.Prepare computed and made ready on the switch: its meters
// added, its bundle opened with every mod added and checked by the switch, nothing of it
// committed and nothing recorded in the store. Commit or Discard it, exactly once, from
// one goroutine at a time; until then it holds the store's read locks (a Sync or an audit
// waits for it).
type Prepared struct {
	s     *Store
	c     Conn
	name  string
	next  map[flows.Owner]*state
	ops   changeOps
	b     *openflow.Bundle // nil: no bundle opened (nothing to send, or a Conn that cannot open one: ApplyBundle at Commit)
	after *Prepared
	start time.Time // the bundle's open (the observer's timing)
	// outcome: 0 open, 1 committed and recorded, 2 failed or discarded. Read by the
	// Prepared after it (possibly another goroutine's).
	outcome atomic.Int32
}

// Prepare is the first half of Update, for pipelining: it computes the difference ups
// make, adds the new and changed meters, and opens the change's bundle on the switch with
// every mod added (openflow.Conn.OpenBundle), without committing it. With after (a change
// prepared earlier and not committed yet, or whose Commit is in flight), the difference is
// taken from the state after leaves the owners in, so this change may be opened while
// after's commit is in flight; it may be committed only once after's commit is confirmed
// (Commit checks, and discards it otherwise). So a caller pays one round trip to the
// switch per change instead of two: the switch answers this bundle's adds in the same
// pass as after's commit.
//
// It returns nil, nil when ups is empty. Errors: as Update's before its bundle is
// committed (nothing is recorded; meters it added stay, as with a failed Update).
func (s *Store) Prepare(ctx context.Context, ups []OwnerUpdate, after *Prepared) (*Prepared, error) {
	if len(ups) == 0 {
		return nil, nil
	}
	name := ups[0].Owner.String()
	if len(ups) > 1 {
		name = fmt.Sprintf("%s and %d other owners", ups[0].Owner, len(ups)-1)
	}
	if after != nil && after.outcome.Load() == 2 {
		return nil, fmt.Errorf("switch state of %s: the change before it was not confirmed by the switch", name)
	}
	if err := s.readLock(ups[0].Owner); err != nil {
		return nil, err
	}
	c, err := s.conn()
	if err != nil {
		s.sync.RUnlock()
		return nil, fmt.Errorf("switch state of %s: %w", name, err)
	}
	if err := s.changesRLock(ctx, name); err != nil {
		s.sync.RUnlock()
		return nil, err
	}
	p := &Prepared{s: s, c: c, name: name, after: after, start: time.Now()}
	fail := func(err error) (*Prepared, error) {
		p.outcome.Store(2)
		p.unlock()
		return nil, err
	}

	s.mu.Lock()
	next := make(map[flows.Owner]*state, len(ups))
	base := make(map[flows.Owner]*state, len(ups))
	touched := make(map[flows.Owner]map[string]bool, len(ups)) // nil: diff every flow
	var order []flows.Owner
	for _, u := range ups {
		have, seen := next[u.Owner] // an owner named twice: the later part applies on top
		if !seen {
			have = s.owners[u.Owner]
			if after != nil {
				if st, ok := after.next[u.Owner]; ok {
					have = st
				}
			}
			base[u.Owner] = have
			order = append(order, u.Owner)
		}
		want, keys, err := u.apply(have)
		if err != nil {
			s.mu.Unlock()
			return fail(fmt.Errorf("switch state of %s: %w", name, err))
		}
		next[u.Owner] = want
		switch prev, had := touched[u.Owner]; {
		case !had:
			touched[u.Owner] = keys
		case prev == nil || keys == nil:
			touched[u.Owner] = nil
		default:
			for k := range keys {
				prev[k] = true
			}
		}
	}
	if err := s.conflictLocked(next); err != nil {
		s.mu.Unlock()
		return fail(fmt.Errorf("switch state of %s: %w", name, err))
	}
	for _, o := range order {
		diffOps(&p.ops, o, base[o], next[o], touched[o])
	}
	s.mu.Unlock()
	p.next = next

	if err := s.applyMeters(ctx, c, p.ops.meters); err != nil {
		return fail(fmt.Errorf("meters of %s: %w", name, err))
	}
	if oc, ok := c.(*openflow.Conn); ok && len(p.ops.bundle) > 0 {
		p.start = time.Now() // the observer times the bundle from its open to its commit reply
		b, err := oc.OpenBundle(ctx, p.ops.bundle)
		if err != nil {
			s.report("bundle", len(p.ops.bundle), p.start, err)
			return fail(fmt.Errorf("switch state of %s: %w", name, err))
		}
		p.b = b
	}
	return p, nil
}

// unlock releases the store's read locks Prepare took.
func (p *Prepared) unlock() {
	p.s.changes.RUnlock()
	p.s.sync.RUnlock()
}

// Commit commits the prepared change's bundle and waits for the switch's reply; once the
// switch confirms it, the store records the change and deletes the meters it no longer
// wants. If the change was prepared after another, that one must have been committed and
// confirmed first: otherwise (it failed, was discarded or is still open) Commit discards
// this one and fails, as this one's difference was taken from the other's state. On any
// error the store keeps its state (a bundle the switch refused is rolled back whole).
// Errors: those of openflow.Bundle.Commit (ApplyBundle's), or the one above.
func (p *Prepared) Commit(ctx context.Context) error {
	if p.outcome.Load() != 0 {
		return fmt.Errorf("switch state of %s: change already committed or discarded", p.name)
	}
	if p.after != nil && p.after.outcome.Load() != 1 {
		p.Discard()
		return fmt.Errorf("switch state of %s: the change before it was not confirmed by the switch; discarded", p.name)
	}
	s := p.s
	defer p.unlock()
	var err error
	switch {
	case p.b != nil:
		err = p.b.Commit(ctx)
	case len(p.ops.bundle) > 0:
		p.start = time.Now()
		err = p.c.ApplyBundle(ctx, p.ops.bundle)
	}
	if len(p.ops.bundle) > 0 {
		s.report("bundle", len(p.ops.bundle), p.start, err)
	}
	if err != nil {
		p.outcome.Store(2)
		return fmt.Errorf("switch state of %s: %w", p.name, err)
	}
	s.record(p.next)
	p.outcome.Store(1)
	if len(p.ops.meterDeletes) > 0 {
		start := time.Now()
		s.report("meter_mod", len(p.ops.meterDeletes), start, p.c.Apply(ctx, p.ops.meterDeletes))
	}
	return nil
}

// Discard gives the prepared change up: its bundle is discarded on the switch (none of
// its flows or groups takes effect) and the store keeps its state. Meters it added stay
// until a later change or the audit removes them. It does nothing after Commit or
// Discard.
func (p *Prepared) Discard() {
	if !p.outcome.CompareAndSwap(0, 2) {
		return
	}
	if p.b != nil {
		p.b.Discard()
	}
	p.unlock()
}

// record stores next's owners, settling lazy states (see state).
func (s *Store) record(next map[flows.Owner]*state) {
	s.mu.Lock()
	for o, st := range next {
		st.settle()
		s.owners[o] = st
	}
	s.mu.Unlock()
}
