package controller

// The desired-state flow store.
//
// Every flow the daemon wants on the switch is held here, grouped by owner (flows.Owner):
// the base pipeline (flows.PipelineOwner), one owner per local pod (flows.PodOwner: its
// IPv4 address) and one per peer node (flows.PeerOwner: its pod subnet). The owner is
// both the key here and, through Owner.Cookie, the cookie and mask that delete its flows
// on the switch. All changes go through SetOwner and DeleteOwner, which compute the
// difference between what the owner had and what it wants now, send only that difference
// as one batch of flow mods and wait for the barrier (or an atomic bundle where asked).
// Because the store keeps the whole desired state, a reconnect can replay it (Sync), and
// per-stage counts for metrics come from here rather than from dumping the switch
// (after Antrea's pkg/agent/openflow client and its flow caches).
//
// Connections. The store programs only the connection its last Sync made whole (the
// "synced" connection). Sync holds the store's write lock while it snapshots every owner
// and installs them as one atomic bundle, so a change is either in the snapshot or waits
// for the next connection; SetOwner and DeleteOwner hold the read lock, never wait for a
// Sync (TryRLock) and fail fast while one runs. While there is no live synced connection
// SetOwner fails with an error matching ErrOVSUnavailable, and DeleteOwner only forgets the
// owner: every new connection starts with a Sync that deletes all flows and re-adds the
// desired ones, so the owner's flows cannot survive it.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// FlowStore is the daemon's desired flow state, grouped by owner, and its sync to the
// switch's current connection. It is safe for concurrent use; changes to different owners
// proceed concurrently (only the in-memory bookkeeping is serialised, never a wait on the
// switch).
type FlowStore struct {
	observe func(kind string, n int, d time.Duration, err error)

	sync sync.RWMutex // write: Sync; read: SetOwner / DeleteOwner while they touch the switch
	// changes, read: SetOwner / DeleteOwner from their first switch call to their store
	// update; write: Audit from its dump to its repair (audit.go).
	changes sync.RWMutex

	mu     sync.Mutex
	synced FlowConn                              // connection made whole by the last Sync
	owners map[flows.Owner]map[string]flows.Flow // owner → MatchKey → flow

	// Group commit of SetOwner/DeleteOwner batches (see apply), guarded by gmu.
	gmu      sync.Mutex
	gpending []*flowReq
	gsending bool // the sender goroutine is running
	groups   int  // batches sent to the switch (tests)
}

// maxFlowGroup bounds how many owners' changes one group batch carries.
const maxFlowGroup = 64

// flowReq is one SetOwner/DeleteOwner batch waiting to be sent with others.
type flowReq struct {
	c        FlowConn
	ops      []openflow.FlowModOp
	deadline time.Time
	done     chan struct{}
	err      error
	alone    bool // the group failed: retry alone
}

// FlowConn is the part of an OpenFlow connection (openflow.Conn) the flow store programs.
type FlowConn interface {
	// Apply sends flow mods confirmed by a barrier (openflow.Conn.Apply).
	Apply(ctx context.Context, ops []openflow.FlowModOp) error
	// ApplyBundle installs flow mods all or nothing (openflow.Conn.ApplyBundle).
	ApplyBundle(ctx context.Context, ops []openflow.FlowModOp) error
	// DumpFlows returns the switch's flow entries (openflow.Conn.DumpFlows; the audit).
	DumpFlows(ctx context.Context, tableID uint8, cookie, cookieMask uint64) ([]*openflow13.FlowStats, error)
	// Err is nil while the connection is up, else why it ended (matching
	// openflow.ErrDisconnected).
	Err() error
}

// NewFlowStore returns an empty store with no connection; Load fills it, Sync attaches it
// to a connection.
func NewFlowStore() *FlowStore {
	return &FlowStore{owners: map[flows.Owner]map[string]flows.Flow{}}
}

// Load records fs as owner's desired flows without touching the switch; the next Sync
// installs them. The daemon uses it at start to gather the whole state before one bundle.
func (s *FlowStore) Load(owner flows.Owner, fs []flows.Flow) {
	want := make(map[string]flows.Flow, len(fs))
	for _, f := range fs {
		want[f.MatchKey()] = f
	}
	s.mu.Lock()
	s.owners[owner] = want
	s.mu.Unlock()
}

// conn returns the live synced connection, or an error matching openflow.ErrDisconnected and
// ErrOVSUnavailable.
func (s *FlowStore) conn() (FlowConn, error) {
	s.mu.Lock()
	c := s.synced
	s.mu.Unlock()
	if c == nil {
		return nil, ovsUnavailable(fmt.Errorf("%w (no synchronised OpenFlow connection yet)", openflow.ErrDisconnected))
	}
	if err := c.Err(); err != nil {
		return nil, ovsUnavailable(err)
	}
	return c, nil
}

// readLock takes the read side of the sync lock without waiting: while a Sync runs (or
// waits to run) it fails with an error matching ErrOVSUnavailable.
func (s *FlowStore) readLock(owner flows.Owner) error {
	if !s.sync.TryRLock() {
		return ovsUnavailable(fmt.Errorf("flows of %s: %w (the switch's flow tables are being resynchronised after a reconnect)", owner, openflow.ErrDisconnected))
	}
	return nil
}

// Sync makes the flow tables behind c hold exactly what the store wants, as ONE atomic
// bundle (ApplyBundle: ONF EXT-230 bundles for OpenFlow 1.3, OVS commits all or nothing),
// and from then on programs c. The bundle is pre, then an OFPFC_ADD of every desired flow
// of every owner (OpenFlow 1.3.5 §6.4: an add replaces the entry with the same match and
// priority, cookie included), then post. On a reconnect the node passes pre = delete
// every flow (flows.DeleteByCookie(0, 0)) so that nothing but the desired state remains;
// at daemon start it passes post = delete each earlier generation by cookie mask, so the
// old flows keep forwarding until the new generation replaces them in the same commit.
//
// Sync waits for changes in flight to end (they are on the old, dead connection and fail
// fast) and makes new ones fail fast until it returns. Errors: those of ApplyBundle; the
// store is then still attached to its previous connection.
func (s *FlowStore) Sync(ctx context.Context, c FlowConn, pre, post []openflow.FlowModOp) error {
	s.sync.Lock()
	defer s.sync.Unlock()
	return ovsUnavailable(s.syncLocked(ctx, c, pre, post))
}

// syncLocked is Sync with the sync lock held.
func (s *FlowStore) syncLocked(ctx context.Context, c FlowConn, pre, post []openflow.FlowModOp) error {
	s.mu.Lock()
	ops := make([]openflow.FlowModOp, 0, len(pre)+len(post)+64)
	ops = append(ops, pre...)
	owners := make([]flows.Owner, 0, len(s.owners))
	for o := range s.owners {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool {
		if owners[i].Kind != owners[j].Kind {
			return owners[i].Kind < owners[j].Kind
		}
		return owners[i].ID < owners[j].ID
	})
	n := 0
	for _, o := range owners {
		keys := make([]string, 0, len(s.owners[o]))
		for k := range s.owners[o] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f := s.owners[o][k]
			ops = append(ops, openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_ADD), Name: o.String() + ": " + f.String()})
			n++
		}
	}
	s.mu.Unlock()
	ops = append(ops, post...)
	start := time.Now()
	err := c.ApplyBundle(ctx, ops)
	if s.observe != nil {
		s.observe("bundle", len(ops), time.Since(start), err)
	}
	if err != nil {
		return fmt.Errorf("synchronise %d desired flows of %d owners: %w", n, len(owners), err)
	}
	s.mu.Lock()
	s.synced = c
	s.mu.Unlock()
	return nil
}

// Rebuild replaces the desired flows of the given owners (owner → flows) and makes the
// switch hold the new desired state with one atomic bundle: delete every flow, then add
// every desired flow of every owner (as on a reconnect), so packets never meet a table
// with some owners rebuilt and others not. Owners the store no longer has (deleted
// meanwhile) are skipped, never brought back. The node uses it when the ofports its
// flows name change (a gateway or tunnel port created again after an OVSDB reconnection).
// While there is no live synced connection it only records the flows: the next
// connection's Sync installs them. Changes by SetOwner and DeleteOwner fail fast while it
// runs (ErrOVSUnavailable). Errors: those of ApplyBundle; the new flows stay recorded, so
// the next Sync (every reconnect) installs them.
func (s *FlowStore) Rebuild(ctx context.Context, owners map[flows.Owner][]flows.Flow) error {
	s.sync.Lock()
	defer s.sync.Unlock()
	s.mu.Lock()
	for o, fs := range owners {
		if _, ok := s.owners[o]; !ok {
			continue
		}
		want := make(map[string]flows.Flow, len(fs))
		for _, f := range fs {
			want[f.MatchKey()] = f
		}
		s.owners[o] = want
	}
	s.mu.Unlock()
	c, err := s.conn()
	if err != nil {
		return nil // the next connection starts with a full Sync
	}
	return ovsUnavailable(s.syncLocked(ctx, c, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow before the rebuild"}}, nil))
}

// SetOwner makes the switch hold exactly fs for owner: flows new or changed since the last
// call are added (OFPFC_ADD replaces a flow with the same match and priority, OpenFlow
// 1.3.5 §6.4), flows no longer wanted are removed with OFPFC_DELETE_STRICT. The batch is
// confirmed with a barrier before SetOwner returns. On error the store keeps the owner's
// previous state, so a retry sends the difference again; the error names the failed flow.
// While the switch is disconnected or being resynchronised it fails at once with an error
// matching ErrOVSUnavailable (and openflow.ErrDisconnected).
func (s *FlowStore) SetOwner(ctx context.Context, owner flows.Owner, fs []flows.Flow) error {
	want := make(map[string]flows.Flow, len(fs))
	for _, f := range fs {
		want[f.MatchKey()] = f
	}
	if err := s.readLock(owner); err != nil {
		return err
	}
	defer s.sync.RUnlock()
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("flows of %s: %w", owner, err)
	}
	s.changes.RLock()
	defer s.changes.RUnlock()
	s.mu.Lock()
	have := s.owners[owner]
	s.mu.Unlock()

	var ops []openflow.FlowModOp
	for k, f := range want {
		if old, ok := have[k]; ok && old.String() == f.String() {
			continue
		}
		ops = append(ops, openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_ADD), Name: owner.String() + ": " + f.String()})
	}
	for k, f := range have {
		if _, ok := want[k]; !ok {
			ops = append(ops, openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_DELETE_STRICT), Name: owner.String() + ": delete " + f.String()})
		}
	}
	if len(ops) > 0 {
		if err := s.apply(ctx, c, ops); err != nil {
			return fmt.Errorf("flows of %s: %w", owner, err)
		}
	}
	s.mu.Lock()
	s.owners[owner] = want
	s.mu.Unlock()
	return nil
}

// DeleteOwner removes every flow of owner from the switch with one OFPFC_DELETE selected by
// owner.Cookie() (OpenFlow 1.3.5 §6.4: cookie mask in delete requests), which also
// removes flows of that owner the store no longer remembers (e.g. from before a restart),
// then forgets the owner. Deleting an unknown owner is not an error. While the switch is
// disconnected it only forgets the owner and returns nil: the Sync that starts every new
// connection deletes all flows and re-adds only the desired ones. It fails (matching
// ErrOVSUnavailable) only while a Sync is running, or on a rejected delete.
func (s *FlowStore) DeleteOwner(ctx context.Context, owner flows.Owner) error {
	if err := s.readLock(owner); err != nil {
		return err
	}
	defer s.sync.RUnlock()
	forget := func() {
		s.mu.Lock()
		delete(s.owners, owner)
		s.mu.Unlock()
	}
	c, err := s.conn()
	if err != nil {
		forget()
		return nil
	}
	s.changes.RLock()
	defer s.changes.RUnlock()
	cookie, cookieMask := owner.Cookie()
	op := openflow.FlowModOp{Mod: flows.DeleteByCookie(cookie, cookieMask), Name: fmt.Sprintf("%s: delete cookie=%#x/%#x", owner, cookie, cookieMask)}
	if err := s.apply(ctx, c, []openflow.FlowModOp{op}); err != nil {
		if errors.Is(err, openflow.ErrDisconnected) {
			forget() // the next connection's Sync starts from an empty table
			return nil
		}
		return fmt.Errorf("flows of %s: %w", owner, err)
	}
	forget()
	return nil
}

// apply sends ops as one batch confirmed by a barrier, and reports it to the observer.
//
// Group commit (the shape of ipam's and ovsdb's): when no batch is in flight ops go at
// once, alone. Batches of other owners that arrive while one is in flight wait for it and
// then go together, up to maxFlowGroup of them, as ONE batch of flow mods followed by ONE
// barrier, so N concurrent pod ADDs and DELs cost the switch one barrier instead of N
// (the switch processes a connection's messages in order, so waiting behind the batch in
// flight costs a caller nothing it would not have waited anyway). Every op of the group
// is idempotent (OFPFC_ADD replaces the same flow, OFPFC_DELETE* of nothing is no
// error), so when the switch rejects any mod of a group each member's batch is sent
// again alone, and only the member whose own mods are rejected gets an error, with the
// same meaning as without grouping. A plain batch rather than a bundle: one round trip
// instead of two, and per owner the same (non-atomic) meaning SetOwner always had.
func (s *FlowStore) apply(ctx context.Context, c FlowConn, ops []openflow.FlowModOp) error {
	r := &flowReq{c: c, ops: ops, done: make(chan struct{})}
	if d, ok := ctx.Deadline(); ok {
		r.deadline = d
	} else {
		r.deadline = time.Now().Add(time.Minute)
	}
	s.gmu.Lock()
	s.gpending = append(s.gpending, r)
	if !s.gsending {
		s.gsending = true
		go s.sendGroups()
	}
	s.gmu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		s.gmu.Lock()
		for i, p := range s.gpending {
			if p == r {
				s.gpending = append(s.gpending[:i], s.gpending[i+1:]...)
				s.gmu.Unlock()
				return fmt.Errorf("flow mods not sent: %w", ctx.Err())
			}
		}
		s.gmu.Unlock()
		return fmt.Errorf("waiting for the switch's reply to a group of flow mods: %w", ctx.Err())
	}
	if r.alone {
		return s.applyNow(ctx, c, ops)
	}
	return r.err
}

// applyNow sends ops as one batch and a barrier, and reports it to the observer.
func (s *FlowStore) applyNow(ctx context.Context, c FlowConn, ops []openflow.FlowModOp) error {
	start := time.Now()
	err := c.Apply(ctx, ops)
	if s.observe != nil {
		s.observe("flow_mod", len(ops), time.Since(start), err)
	}
	return ovsUnavailable(err)
}

// sendGroups is the sender goroutine: while batches are pending it sends those for the
// same connection as the oldest one (up to maxFlowGroup) as one batch and completes them.
func (s *FlowStore) sendGroups() {
	s.gmu.Lock()
	for len(s.gpending) > 0 {
		c := s.gpending[0].c
		var group, rest []*flowReq
		for _, r := range s.gpending {
			if r.c == c && len(group) < maxFlowGroup {
				group = append(group, r)
			} else {
				rest = append(rest, r)
			}
		}
		s.gpending = rest
		s.groups++
		s.gmu.Unlock()

		var ops []openflow.FlowModOp
		deadline := group[0].deadline
		for _, r := range group {
			ops = append(ops, r.ops...)
			if r.deadline.After(deadline) {
				deadline = r.deadline
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := s.applyNow(ctx, c, ops)
		cancel()
		for _, r := range group {
			if err != nil {
				if len(group) > 1 {
					r.alone = true
				} else {
					r.err = err
				}
			}
			close(r.done)
		}
		s.gmu.Lock()
	}
	s.gsending = false
	s.gmu.Unlock()
}

// Owner returns the desired flows of owner, sorted by their text, and whether it is known.
func (s *FlowStore) Owner(owner flows.Owner) ([]flows.Flow, bool) {
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
