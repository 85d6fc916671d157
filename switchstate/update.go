package controller

// Changes to several owners in one atomic bundle (network policy: a rule's flows and the
// default-deny flows of the pods it isolates, or a new pod's forwarding flows with the
// policy flows that let it talk, must reach the switch together).

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// OwnerUpdate is one owner's part of FlowStore.Update.
type OwnerUpdate struct {
	// Owner is the flow store owner.
	Owner flows.Owner
	// Replace: Flows is the owner's whole desired set (as SetOwner); flows it had and
	// Flows lacks are deleted. Otherwise Flows are added or replaced (by MatchKey) and
	// Delete names the MatchKeys to remove; the owner's other flows stay.
	Replace bool
	// Flows are the flows wanted.
	Flows []flows.Flow
	// Delete are MatchKeys of flows to remove (without Replace); unknown keys are ignored.
	Delete []string
}

// Update applies the owners' changes as ONE atomic bundle (ONF EXT-230 bundles for
// OpenFlow 1.3: OVS commits all of it or nothing), sending only what differs from the
// store's current state: OFPFC_ADD for new or changed flows, OFPFC_DELETE_STRICT for
// removed ones. The store records the new state only after the commit succeeded; on error
// it keeps the previous state, so a retry sends the difference again. Owners not known yet
// are created. Like SetOwner it fails at once (ErrOVSUnavailable) while the switch is
// disconnected or being resynchronised, and waits for a running audit.
func (s *FlowStore) Update(ctx context.Context, ups []OwnerUpdate) error {
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
		return fmt.Errorf("flows of %s: %w", name, err)
	}
	s.changes.RLock()
	defer s.changes.RUnlock()

	s.mu.Lock()
	next := make(map[flows.Owner]map[string]flows.Flow, len(ups))
	var ops []openflow.FlowModOp
	for _, u := range ups {
		have := s.owners[u.Owner]
		if prev, ok := next[u.Owner]; ok {
			have = prev // an owner named twice: the later part applies on top
		}
		want := make(map[string]flows.Flow, len(have)+len(u.Flows))
		if !u.Replace {
			for k, f := range have {
				want[k] = f
			}
			for _, k := range u.Delete {
				delete(want, k)
			}
		}
		for _, f := range u.Flows {
			want[f.MatchKey()] = f
		}
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f := want[k]
			if old, ok := have[k]; ok && old.String() == f.String() {
				continue
			}
			ops = append(ops, openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_ADD), Name: u.Owner.String() + ": " + f.String()})
		}
		for k, f := range have {
			if _, ok := want[k]; !ok {
				ops = append(ops, openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_DELETE_STRICT), Name: u.Owner.String() + ": delete " + f.String()})
			}
		}
		next[u.Owner] = want
	}
	s.mu.Unlock()

	if len(ops) > 0 {
		start := time.Now()
		err := c.ApplyBundle(ctx, ops)
		if s.observe != nil {
			s.observe("bundle", len(ops), time.Since(start), err)
		}
		if err != nil {
			return fmt.Errorf("flows of %s: %w", name, err)
		}
	}
	s.mu.Lock()
	for o, m := range next {
		s.owners[o] = m
	}
	s.mu.Unlock()
	return nil
}
