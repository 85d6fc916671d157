package switchstate

// Changes to several owners as one change (network policy: a rule's flows and the
// default-deny flows of the pods it isolates, or a new pod's forwarding flows with the
// policy flows that let it talk, must reach the switch together; a Service's group with
// the flows that use it).

import (
	"context"
	"fmt"
	"time"

	"github.com/ofsdn/ofsdn/flows"
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
	fs := make(map[string]flows.Flow, len(have.flows)+len(u.Flows))
	for k, f := range have.flows {
		fs[k] = f
	}
	touched := make(map[string]bool, len(u.Delete)+len(u.Flows))
	for _, k := range u.Delete {
		delete(fs, k)
		touched[k] = true
	}
	for _, f := range u.Flows { // later entries with the same MatchKey win
		k := f.MatchKey()
		fs[k] = f
		touched[k] = true
	}
	st.flows = fs
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
// and the audit deletes it. Owners not known yet are created.
//
// Errors: a group or meter that is invalid, outside ofsdn's id ranges or held by another
// owner (nothing is sent); those of Apply and ApplyBundle. Like SetOwner it fails at once
// (matching openflow.ErrDisconnected) while the switch is disconnected or being
// resynchronised, and waits for a running audit.
func (s *Store) Update(ctx context.Context, ups []OwnerUpdate) error {
	if len(ups) == 0 {
		return nil
	}
	name := ups[0].Owner.String()
	if len(ups) > 1 {
		name = fmt.Sprintf("%s and %d other owners", ups[0].Owner, len(ups)-1)
	}
	if err := s.readLock(ups[0].Owner); err != nil {
		return err
	}
	defer s.sync.RUnlock()
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("switch state of %s: %w", name, err)
	}
	if err := s.changesRLock(ctx, name); err != nil {
		return err
	}
	defer s.changes.RUnlock()

	s.mu.Lock()
	next := make(map[flows.Owner]*state, len(ups))
	touched := make(map[flows.Owner]map[string]bool, len(ups)) // nil: diff every flow
	var order []flows.Owner
	for _, u := range ups {
		have, seen := next[u.Owner] // an owner named twice: the later part applies on top
		if !seen {
			have = s.owners[u.Owner]
			order = append(order, u.Owner)
		}
		want, keys, err := u.apply(have)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("switch state of %s: %w", name, err)
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
		return fmt.Errorf("switch state of %s: %w", name, err)
	}
	var ops changeOps
	for _, o := range order {
		diffOps(&ops, o, s.owners[o], next[o], touched[o])
	}
	s.mu.Unlock()

	if ops.empty() {
		s.record(next)
		return nil
	}
	if err := s.applyMeters(ctx, c, ops.meters); err != nil {
		return fmt.Errorf("meters of %s: %w", name, err)
	}
	if len(ops.bundle) > 0 {
		start := time.Now()
		err := c.ApplyBundle(ctx, ops.bundle)
		s.report("bundle", len(ops.bundle), start, err)
		if err != nil {
			return fmt.Errorf("switch state of %s: %w", name, err)
		}
	}
	s.record(next)
	if len(ops.meterDeletes) > 0 {
		start := time.Now()
		s.report("meter_mod", len(ops.meterDeletes), start, c.Apply(ctx, ops.meterDeletes))
	}
	return nil
}

// record stores next's owners.
func (s *Store) record(next map[flows.Owner]*state) {
	s.mu.Lock()
	for o, st := range next {
		s.owners[o] = st
	}
	s.mu.Unlock()
}
