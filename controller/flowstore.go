package controller

// The desired-state flow store.
//
// Every flow the daemon wants on the switch is held here, grouped by owner: the base
// pipeline ("pipeline"), one owner per local pod ("pod/<containerID>/<ifName>"), later one
// per peer node. All changes go through SetOwner and DeleteOwner, which compute the
// difference between what the owner had and what it wants now, send only that difference
// as one batch of flow mods and wait for the barrier (or an atomic bundle where asked).
// Because the store keeps the whole desired state, a reconnect can replay it (Replay), and
// per-stage counts for metrics come from here rather than from dumping the switch
// (after Antrea's pkg/agent/openflow client and its flow caches).

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
)

// FlowStore is the daemon's desired flow state, grouped by owner, and its sync to one
// OpenFlow switch. It is safe for concurrent use; changes to different owners proceed
// concurrently (only the in-memory bookkeeping is serialised, never a wait on the switch).
type FlowStore struct {
	sw      *OFSwitch
	observe func(kind string, n int, d time.Duration, err error)

	mu     sync.Mutex
	owners map[string]map[string]flows.Flow // owner → MatchKey → flow
}

// NewFlowStore returns an empty store that programs sw.
func NewFlowStore(sw *OFSwitch) *FlowStore {
	return &FlowStore{sw: sw, owners: map[string]map[string]flows.Flow{}}
}

// SetOwner makes the switch hold exactly fs for owner: flows new or changed since the last
// call are added (OFPFC_ADD replaces a flow with the same match and priority, OpenFlow
// 1.3.5 §6.4), flows no longer wanted are removed with OFPFC_DELETE_STRICT. The batch is
// confirmed with a barrier before SetOwner returns. On error the store keeps the owner's
// previous state, so a retry sends the difference again; the error names the failed flow.
func (s *FlowStore) SetOwner(ctx context.Context, owner string, fs []flows.Flow) error {
	want := make(map[string]flows.Flow, len(fs))
	for _, f := range fs {
		want[f.MatchKey()] = f
	}
	s.mu.Lock()
	have := s.owners[owner]
	s.mu.Unlock()

	var ops []FlowModOp
	for k, f := range want {
		if old, ok := have[k]; ok && old.String() == f.String() {
			continue
		}
		ops = append(ops, FlowModOp{Mod: f.FlowMod(openflow13.FC_ADD), Name: owner + ": " + f.String()})
	}
	for k, f := range have {
		if _, ok := want[k]; !ok {
			ops = append(ops, FlowModOp{Mod: f.FlowMod(openflow13.FC_DELETE_STRICT), Name: owner + ": delete " + f.String()})
		}
	}
	if len(ops) > 0 {
		if err := s.apply(ctx, ops); err != nil {
			return fmt.Errorf("flows of %s: %w", owner, err)
		}
	}
	s.mu.Lock()
	s.owners[owner] = want
	s.mu.Unlock()
	return nil
}

// DeleteOwner removes every flow of owner from the switch with one OFPFC_DELETE selected by
// cookie and cookieMask (OpenFlow 1.3.5 §6.4: cookie mask in delete requests), which also
// removes flows of that owner the store no longer remembers (e.g. from before a restart),
// then forgets the owner. Deleting an unknown owner is not an error.
func (s *FlowStore) DeleteOwner(ctx context.Context, owner string, cookie, cookieMask uint64) error {
	op := FlowModOp{Mod: flows.DeleteByCookie(cookie, cookieMask), Name: fmt.Sprintf("%s: delete cookie=%#x/%#x", owner, cookie, cookieMask)}
	if err := s.apply(ctx, []FlowModOp{op}); err != nil {
		return fmt.Errorf("flows of %s: %w", owner, err)
	}
	s.mu.Lock()
	delete(s.owners, owner)
	s.mu.Unlock()
	return nil
}

// apply sends ops as one batch confirmed by a barrier, and reports it to the observer.
func (s *FlowStore) apply(ctx context.Context, ops []FlowModOp) error {
	start := time.Now()
	err := s.sw.Apply(ctx, ops)
	if s.observe != nil {
		s.observe("flow_mod", len(ops), time.Since(start), err)
	}
	return err
}

// Owner returns the desired flows of owner, sorted by their text, and whether it is known.
func (s *FlowStore) Owner(owner string) ([]flows.Flow, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.owners[owner]
	out := make([]flows.Flow, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, ok
}

// All returns every desired flow of every owner, sorted by their text.
func (s *FlowStore) All() []flows.Flow {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []flows.Flow
	for _, m := range s.owners {
		for _, f := range m {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// CountByTable returns how many desired flows each flow table holds (table id → flows).
func (s *FlowStore) CountByTable() map[uint8]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[uint8]int{}
	for _, m := range s.owners {
		for _, f := range m {
			n[uint8(f.Table)]++
		}
	}
	return n
}
