// Package switchstate holds the switch's desired state, per owner, and keeps an OpenFlow
// connection's tables equal to it: flows, groups and meters.
//
// Every flow, group and meter the daemon wants on the switch is held here, grouped by
// owner (flows.Owner): the base pipeline (flows.PipelineOwner), one owner per local pod,
// one per peer node, the policy rules. The owner is both the key here and, through
// Owner.Cookie, the cookie and mask that delete its flows on the switch. All changes go
// through SetOwner, Set, Update (or Prepare and Commit: Update in two steps, pipelined)
// and DeleteOwner, which compute the difference between what the owners had and what
// they want now and send only that difference. Because the store
// keeps the whole desired state, a reconnect replays it (Sync), and per-stage counts for
// metrics come from here rather than from dumping the switch (after Antrea's
// pkg/agent/openflow client and its flow caches).
//
// Order. OVS refuses a flow naming a group or meter it lacks (OFPBAC_BAD_OUT_GROUP,
// OFPMMFC_INVALID_METER), and deleting a group or meter deletes the flows that use it. So
// every change and every replay goes meters, then groups, then flows; deletes the other
// way round: flows, then groups, then meters. OVS 3.1 takes group mods inside bundles (in
// order) but refuses meter mods there (OFPBFC_MSG_UNSUP; openflow/ops.go), so a change
// that touches meters sends its new and changed meters in a batch confirmed by a barrier
// before its bundle, and the meters it no longer wants after it. Groups are set with OVS's
// ADD_OR_MOD command, so a replay never deletes a group that live flows use (a plain ADD
// fails on an existing group, a DELETE takes its flows).
//
// Ownership of groups and meters. They carry no cookie, so the store tells its own by id:
// ofsdn uses the ids flows.GroupIDMin..GroupIDMax and flows.MeterIDMin..MeterIDMax only
// (owners outside them are refused), and every group or meter of those ranges on the
// switch that no owner wants is a stale one of ours (an earlier run's, or one left by a
// failed delete) and is deleted by the replay and the audit. Ids outside the ranges are an
// operator's or another tool's: reported by the audit, never touched. An id is held by at
// most one owner.
//
// Connections. The store programs only the connection its last Sync made whole (the
// "synced" connection). Sync holds the store's write lock while it snapshots every owner
// and installs them, so a change is either in the snapshot or waits for the next
// connection; changes hold the read lock, never wait for a Sync (TryRLock) and fail fast
// while one runs. While there is no live synced connection changes fail with an error
// matching openflow.ErrDisconnected, and DeleteOwner only forgets the owner: every new
// connection starts with a Sync that deletes all flows and re-adds the desired ones.
package switchstate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// Store is the daemon's desired switch state, grouped by owner, and its sync to the
// switch's current connection. It is safe for concurrent use; changes to different owners
// proceed concurrently (only the in-memory bookkeeping is serialised, never a wait on the
// switch).
type Store struct {
	observe func(kind string, n int, d time.Duration, err error)

	sync sync.RWMutex // write: Sync; read: changes while they touch the switch
	// changes, read: changes from their first switch call to their store update; write:
	// Audit from its dump to its repair (audit.go).
	changes sync.RWMutex

	mu     sync.Mutex
	synced Conn                   // connection made whole by the last Sync
	owners map[flows.Owner]*state // replaced; see state for the one change in place

	// Group commit of SetOwner/DeleteOwner batches (see apply), guarded by gmu.
	gmu      sync.Mutex
	gpending []*flowReq
	gsending bool // the sender goroutine is running
	batches  int  // group batches sent to the switch (tests)
}

// state is one owner's desired state. Its maps are never changed once stored, with one
// exception: a change that names the flows it touches (OwnerUpdate without Replace)
// makes a lazy state, base's flows with over laid on them, so that a change of a few
// flows of an owner of thousands (the policy owner, every policy round) neither copies
// nor hashes the thousands. The store records it by applying over to base's flow map in
// place (settle, under mu; base is the state the store held, or the lazy state of the
// change committed before it), and base is then no longer the store's. Every reader of a
// stored state's flows holds mu, or excludes changes (Audit: changes; Sync: sync), or
// reads its own owner's (SetOwner): an owner has one writer at a time, as the store's
// differences already assume (two unchained changes of one owner would each be diffed
// against the state before both).
type state struct {
	flows  map[string]flows.Flow  // MatchKey → flow; nil while lazy
	groups map[uint32]flows.Group // id → group
	meters map[uint32]flows.Meter // id → meter

	base *state                 // lazy: the state this one's flows are over
	over map[string]*flows.Flow // lazy: MatchKey → flow, nil for a flow deleted
}

// flow returns the flow of key k.
func (st *state) flow(k string) (flows.Flow, bool) {
	for s := st; s != nil; s = s.base {
		if s.over == nil {
			f, ok := s.flows[k]
			return f, ok
		}
		if f, ok := s.over[k]; ok {
			if f == nil {
				return flows.Flow{}, false
			}
			return *f, true
		}
	}
	return flows.Flow{}, false
}

// flowMap returns st's flows as a map: its own, or for a lazy state a new map (st and
// its bases unchanged).
func (st *state) flowMap() map[string]flows.Flow {
	if st.over == nil {
		return st.flows
	}
	return st.layOver(maps.Clone(st.base.flowMap()))
}

// settle makes a lazy st whole by applying its over to its base's flow map in place
// (its bases first), when the store records st. mu is held.
func (st *state) settle() {
	if st.over == nil {
		return
	}
	st.base.settle()
	st.flows, st.base, st.over = st.layOver(st.base.flows), nil, nil
}

// layOver applies st's over to m (nil: a new map) and returns it.
func (st *state) layOver(m map[string]flows.Flow) map[string]flows.Flow {
	if m == nil {
		m = map[string]flows.Flow{}
	}
	for k, f := range st.over {
		if f == nil {
			delete(m, k)
		} else {
			m[k] = *f
		}
	}
	return m
}

// Desired is one owner's whole desired state.
type Desired struct {
	// Flows are the owner's flows, keyed in the store by flows.Flow.MatchKey.
	Flows []flows.Flow
	// Groups are the owner's groups, ids flows.GroupIDMin..GroupIDMax.
	Groups []flows.Group
	// Meters are the owner's meters, ids flows.MeterIDMin..MeterIDMax.
	Meters []flows.Meter
}

// maxFlowGroup bounds how many owners' changes one group batch carries.
const maxFlowGroup = 64

// flowReq is one SetOwner/DeleteOwner batch waiting to be sent with others.
type flowReq struct {
	c        Conn
	ops      []openflow.FlowModOp
	deadline time.Time
	done     chan struct{}
	err      error
	alone    bool // the group failed: retry alone
}

// Conn is the part of an OpenFlow connection (*openflow.Conn) the store programs.
type Conn interface {
	// Apply sends mods confirmed by a barrier (openflow.Conn.Apply).
	Apply(ctx context.Context, ops []openflow.FlowModOp) error
	// ApplyBundle installs mods all or nothing (openflow.Conn.ApplyBundle).
	ApplyBundle(ctx context.Context, ops []openflow.FlowModOp) error
	// DumpFlows returns the switch's flow entries (openflow.Conn.DumpFlows; the audit).
	DumpFlows(ctx context.Context, tableID uint8, cookie, cookieMask uint64) ([]*openflow13.FlowStats, error)
	// DumpGroups returns the switch's groups (openflow.Conn.DumpGroups; replay, audit).
	DumpGroups(ctx context.Context) ([]openflow.GroupDesc, error)
	// MeterStats returns meter id's statistics, every meter's for MeterAll
	// (openflow.Conn.MeterStats; replay, audit).
	MeterStats(ctx context.Context, id uint32) ([]openflow.MeterStats, error)
	// Err is nil while the connection is up, else why it ended (matching
	// openflow.ErrDisconnected).
	Err() error
}

// MeterAll is OFPM_ALL (OpenFlow 1.3.5 §7.3.4.4): every meter, in a statistics request.
const MeterAll uint32 = 0xffffffff

// New returns an empty store with no connection; Load and LoadState fill it, Sync attaches it to a
// connection.
func New() *Store {
	return &Store{owners: map[flows.Owner]*state{}}
}

// SetObserver makes the store report every batch, bundle and meter batch it sends: kind
// "flow_mod" (a batch with a barrier), "bundle" or "meter_mod", n the messages, d the
// switch's time, err the outcome. Call it before the store is used.
func (s *Store) SetObserver(fn func(kind string, n int, d time.Duration, err error)) { s.observe = fn }

func (s *Store) report(kind string, n int, start time.Time, err error) {
	if s.observe != nil {
		s.observe(kind, n, time.Since(start), err)
	}
}

func flowMap(fs []flows.Flow) map[string]flows.Flow {
	m := make(map[string]flows.Flow, len(fs))
	for _, f := range fs {
		m[f.MatchKey()] = f
	}
	return m
}

// newState builds an owner's state from d, checking its groups and meters (Validate, the
// ofsdn id ranges, no id twice).
func newState(owner flows.Owner, d Desired) (*state, error) {
	st := &state{flows: flowMap(d.Flows), groups: map[uint32]flows.Group{}, meters: map[uint32]flows.Meter{}}
	for _, g := range d.Groups {
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", owner, err)
		}
		if !flows.OwnedGroupID(g.ID) {
			return nil, fmt.Errorf("%s: group %d is outside ofsdn's group ids %d..%d: allocate it from that range", owner, g.ID, flows.GroupIDMin, flows.GroupIDMax)
		}
		if _, dup := st.groups[g.ID]; dup {
			return nil, fmt.Errorf("%s: group %d given twice", owner, g.ID)
		}
		// A copy: the caller may change its buckets afterwards (the diff compares them).
		bs := make([]flows.Bucket, len(g.Buckets))
		for i, b := range g.Buckets {
			bs[i] = flows.Bucket{Weight: b.Weight, Actions: append([]flows.Action(nil), b.Actions...)}
		}
		g.Buckets = bs
		st.groups[g.ID] = g
	}
	for _, m := range d.Meters {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", owner, err)
		}
		if !flows.OwnedMeterID(m.ID) {
			return nil, fmt.Errorf("%s: meter %d is outside ofsdn's meter ids %d..%d: allocate it from that range", owner, m.ID, flows.MeterIDMin, flows.MeterIDMax)
		}
		if _, dup := st.meters[m.ID]; dup {
			return nil, fmt.Errorf("%s: meter %d given twice", owner, m.ID)
		}
		st.meters[m.ID] = m
	}
	return st, nil
}

// withFlows returns a copy of st (nil: empty) with flows fs; groups and meters are kept.
func (st *state) withFlows(fs map[string]flows.Flow) *state {
	n := &state{flows: fs, groups: map[uint32]flows.Group{}, meters: map[uint32]flows.Meter{}}
	if st != nil {
		n.groups, n.meters = st.groups, st.meters
	}
	return n
}

// LoadState records d as owner's whole desired state without touching the switch; the
// next Sync installs it. Errors: a group or meter that is invalid, outside ofsdn's id
// ranges or held by another owner (nothing is recorded then).
func (s *Store) LoadState(owner flows.Owner, d Desired) error {
	st, err := newState(owner, d)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.conflictLocked(map[flows.Owner]*state{owner: st}); err != nil {
		return err
	}
	s.owners[owner] = st
	return nil
}

// Load records fs as owner's desired flows without touching the switch, keeping the
// owner's groups and meters; the next Sync installs them. The daemon uses it at start to
// gather the whole state before one bundle.
func (s *Store) Load(owner flows.Owner, fs []flows.Flow) {
	s.mu.Lock()
	s.owners[owner] = s.owners[owner].withFlows(flowMap(fs))
	s.mu.Unlock()
}

// conflictLocked returns an error if a group or meter id of next is held by another
// owner (one not in next, or another one in next). s.mu is held.
func (s *Store) conflictLocked(next map[flows.Owner]*state) error {
	groups, meters := map[uint32]flows.Owner{}, map[uint32]flows.Owner{}
	check := func(o flows.Owner, st *state) error {
		for id := range st.groups {
			if prev, ok := groups[id]; ok && prev != o {
				return fmt.Errorf("group %d is wanted by %s and by %s: allocate another id for one of them", id, prev, o)
			}
			groups[id] = o
		}
		for id := range st.meters {
			if prev, ok := meters[id]; ok && prev != o {
				return fmt.Errorf("meter %d is wanted by %s and by %s: allocate another id for one of them", id, prev, o)
			}
			meters[id] = o
		}
		return nil
	}
	for o, st := range next {
		if err := check(o, st); err != nil {
			return err
		}
	}
	for o, st := range s.owners {
		if _, ok := next[o]; ok {
			continue
		}
		if err := check(o, st); err != nil {
			return err
		}
	}
	return nil
}

// conn returns the live synced connection, or an error matching openflow.ErrDisconnected.
func (s *Store) conn() (Conn, error) {
	s.mu.Lock()
	c := s.synced
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w (no synchronised OpenFlow connection yet)", openflow.ErrDisconnected)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// readLock takes the read side of the sync lock without waiting: while a Sync runs (or
// waits to run) it fails with an error matching openflow.ErrDisconnected.
func (s *Store) readLock(owner flows.Owner) error {
	if !s.sync.TryRLock() {
		return fmt.Errorf("switch state of %s: %w (the switch's tables are being resynchronised after a reconnect)", owner, openflow.ErrDisconnected)
	}
	return nil
}

// chainOrder returns the ids of m by id, but a group after every group of m it chains to
// (flows.Group.Chains: a bucket's group action), as OVS refuses a group whose bucket names
// a group it lacks (OFPBAC_BAD_OUT_GROUP); reverse gives the order to delete them in (a
// group before the groups it chains to). A chain that loops is ordered by id.
func chainOrder(m map[uint32]flows.Group, reverse bool) []uint32 {
	depth := make(map[uint32]int, len(m))
	var walk func(id uint32, hops int) int
	walk = func(id uint32, hops int) int {
		if d, ok := depth[id]; ok {
			return d
		}
		d := 0
		if hops < len(m) {
			for _, c := range m[id].Chains() {
				if _, ok := m[c]; ok && c != id {
					d = max(d, 1+walk(c, hops+1))
				}
			}
		}
		depth[id] = d
		return d
	}
	ids := sortedKeys(m)
	for _, id := range ids {
		walk(id, 0)
	}
	sort.SliceStable(ids, func(i, j int) bool {
		if reverse {
			return depth[ids[i]] > depth[ids[j]]
		}
		return depth[ids[i]] < depth[ids[j]]
	})
	return ids
}

// sortedOwners returns the owners of m by kind, then id.
func sortedOwners(m map[flows.Owner]*state) []flows.Owner {
	owners := make([]flows.Owner, 0, len(m))
	for o := range m {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool {
		if owners[i].Kind != owners[j].Kind {
			return owners[i].Kind < owners[j].Kind
		}
		return owners[i].ID < owners[j].ID
	})
	return owners
}

func sortedKeys[K string | uint32, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// Mods of one kind, as the store sends them (names say the owner and the value).

// A strict delete names the flow's cookie under a full mask (OpenFlow 1.3.5 §6.4: delete
// commands filter by cookie): a flow whose match and priority move to another owner in
// the same change (added first, with that owner's cookie) is not deleted with the old
// owner's.
func flowOp(owner flows.Owner, f flows.Flow, command uint8) openflow.FlowModOp {
	name := owner.String() + ": " + f.String()
	mod := f.FlowMod(command)
	if command == openflow13.FC_DELETE_STRICT {
		name = owner.String() + ": delete " + f.String()
		mod.CookieMask = ^uint64(0)
	}
	return openflow.FlowModOp{Mod: mod, Name: name}
}

func groupMod(g flows.Group, command uint16) *openflow.GroupMod {
	m := &openflow.GroupMod{Command: command, Type: uint8(g.Type), ID: g.ID}
	if command == openflow.GroupDelete {
		return m
	}
	for _, b := range g.Buckets {
		m.Buckets = append(m.Buckets, openflow.Bucket{Weight: b.Weight, Actions: b.OFActions()})
	}
	return m
}

func groupSetOp(owner flows.Owner, g flows.Group) openflow.FlowModOp {
	return openflow.FlowModOp{Group: groupMod(g, openflow.GroupAddOrModify), Name: owner.String() + ": " + g.String()}
}

func groupDeleteOp(who string, id uint32) openflow.FlowModOp {
	return openflow.FlowModOp{Group: &openflow.GroupMod{Command: openflow.GroupDelete, ID: id}, Name: fmt.Sprintf("%s: delete group_id=%d", who, id)}
}

func meterOp(owner flows.Owner, m flows.Meter, command uint16) openflow.FlowModOp {
	return openflow.FlowModOp{Meter: &openflow.MeterMod{Command: command, ID: m.ID,
		Flags: openflow.MeterFlagPktps | openflow.MeterFlagBurst | openflow.MeterFlagStats, Rate: m.Rate, Burst: m.Burst},
		Name: owner.String() + ": " + m.String()}
}

func meterDeleteOp(who string, id uint32) openflow.FlowModOp {
	return openflow.FlowModOp{Meter: &openflow.MeterMod{Command: openflow.MeterDelete, ID: id}, Name: fmt.Sprintf("%s: delete meter=%d", who, id)}
}

// changeOps is one change's difference in sending order.
type changeOps struct {
	meters       []openflow.FlowModOp // new (add) and changed (modify) meters: before the bundle
	bundle       []openflow.FlowModOp // groups set, flows added, flows deleted, groups deleted
	meterDeletes []openflow.FlowModOp // after the bundle
}

func (c changeOps) empty() bool {
	return len(c.meters) == 0 && len(c.bundle) == 0 && len(c.meterDeletes) == 0
}

// diffOps appends the difference from have (nil: nothing) to want of owner to ops: meters
// new or changed, groups new or changed (ADD_OR_MOD), flows new or changed (OFPFC_ADD
// replaces the entry with the same match and priority, OpenFlow 1.3.5 §6.4), flows gone
// (OFPFC_DELETE_STRICT), groups gone, meters gone; each kind in a stable order. keys, when
// not nil, are the only flow MatchKeys in which have and want may differ (an update
// without Replace: the owner's other flows were carried over); nil compares every flow.
func diffOps(ops *changeOps, owner flows.Owner, have, want *state, keys map[string]bool) {
	if have == nil {
		have = &state{}
	}
	var groupSets, flowAdds, flowDels, groupDels []openflow.FlowModOp
	for _, id := range sortedKeys(want.meters) {
		m := want.meters[id]
		if old, ok := have.meters[id]; !ok {
			ops.meters = append(ops.meters, meterOp(owner, m, openflow.MeterAdd))
		} else if old != m {
			ops.meters = append(ops.meters, meterOp(owner, m, openflow.MeterModify))
		}
	}
	for _, id := range chainOrder(want.groups, false) {
		g := want.groups[id]
		if old, ok := have.groups[id]; !ok || old.String() != g.String() {
			groupSets = append(groupSets, groupSetOp(owner, g))
		}
	}
	var wantKeys, haveKeys []string
	if keys != nil { // only these may differ: the rest was carried over unchanged
		wantKeys = sortedKeys(keys)
		haveKeys = wantKeys
	} else {
		wantKeys, haveKeys = sortedKeys(want.flowMap()), sortedKeys(have.flowMap())
	}
	for _, k := range wantKeys {
		f, wanted := want.flow(k)
		if !wanted {
			continue
		}
		if old, ok := have.flow(k); !ok || old.String() != f.String() {
			flowAdds = append(flowAdds, flowOp(owner, f, openflow13.FC_ADD))
		}
	}
	for _, k := range haveKeys {
		old, had := have.flow(k)
		if !had {
			continue
		}
		if _, ok := want.flow(k); !ok {
			flowDels = append(flowDels, flowOp(owner, old, openflow13.FC_DELETE_STRICT))
		}
	}
	for _, id := range chainOrder(have.groups, true) {
		if _, ok := want.groups[id]; !ok {
			groupDels = append(groupDels, groupDeleteOp(owner.String(), id))
		}
	}
	for _, id := range sortedKeys(have.meters) {
		if _, ok := want.meters[id]; !ok {
			ops.meterDeletes = append(ops.meterDeletes, meterDeleteOp(owner.String(), id))
		}
	}
	// Within the bundle: every owner's group sets first, flow adds, flow deletes, then
	// group deletes (an owner's new flow may name another owner's new group).
	ops.bundle = mergeBundle(ops.bundle, groupSets, flowAdds, flowDels, groupDels)
}

// mergeBundle keeps bundle ordered by kind (group sets, flow adds, flow deletes, group
// deletes) while appending each kind's new ops.
func mergeBundle(bundle []openflow.FlowModOp, kinds ...[]openflow.FlowModOp) []openflow.FlowModOp {
	var parts [4][]openflow.FlowModOp
	for _, op := range bundle {
		parts[opKind(op)] = append(parts[opKind(op)], op)
	}
	for i, k := range kinds {
		parts[i] = append(parts[i], k...)
	}
	out := make([]openflow.FlowModOp, 0, len(bundle)+len(parts[0])+len(parts[1])+len(parts[2])+len(parts[3]))
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// opKind is the bundle position of op: 0 group set, 1 flow add, 2 flow delete, 3 group
// delete.
func opKind(op openflow.FlowModOp) int {
	switch {
	case op.Group != nil && op.Group.Command == openflow.GroupDelete:
		return 3
	case op.Group != nil:
		return 0
	case op.Mod != nil && (op.Mod.Command == openflow13.FC_DELETE || op.Mod.Command == openflow13.FC_DELETE_STRICT):
		return 2
	default:
		return 1
	}
}

// applyMeters sends meter mods confirmed by a barrier; when the switch says a meter it
// was asked to add exists (an earlier run's, a reconnect to the same ovs-vswitchd), the
// adds are sent again as modifies. Errors: those of Apply.
func (s *Store) applyMeters(ctx context.Context, c Conn, ops []openflow.FlowModOp) error {
	if len(ops) == 0 {
		return nil
	}
	start := time.Now()
	err := c.Apply(ctx, ops)
	if openflow.IsMeterExists(err) {
		mods := make([]openflow.FlowModOp, 0, len(ops))
		for _, op := range ops {
			if op.Meter != nil && op.Meter.Command == openflow.MeterAdd {
				m := *op.Meter
				m.Command = openflow.MeterModify
				op.Meter = &m
			}
			mods = append(mods, op)
		}
		err = c.Apply(ctx, mods)
	}
	s.report("meter_mod", len(ops), start, err)
	return err
}

// Sync makes the switch behind c hold exactly what the store wants and from then on
// programs c. In order: the meters (add, or modify where the switch has them: MeterStats
// of every meter first) in one batch with a barrier; then ONE atomic bundle
// (ApplyBundle: ONF EXT-230 bundles for OpenFlow 1.3, OVS commits all or nothing) of pre,
// an ADD_OR_MOD of every desired group, an OFPFC_ADD of every desired flow of every owner
// (OpenFlow 1.3.5 §6.4: an add replaces the entry with the same match and priority,
// cookie included), post, and a delete of every group of ofsdn's id range no owner wants;
// last a delete of every meter of ofsdn's range no owner wants. On a reconnect the node
// passes pre = delete every flow (flows.DeleteByCookie(0, 0)) so that no flow but the
// desired ones remains; at daemon start it passes post = delete each earlier generation
// by cookie mask, so the old flows keep forwarding until the new generation replaces them
// in the same commit.
//
// Sync waits for changes in flight to end (they are on the old, dead connection and fail
// fast) and makes new ones fail fast until it returns. Errors: those of MeterStats and
// DumpGroups (only when the store wants meters, resp. groups: see listMeters), Apply and
// ApplyBundle; the store is then still attached to its previous
// connection. A failed delete of a stale meter is no error (reported to the observer; the
// audit deletes it).
func (s *Store) Sync(ctx context.Context, c Conn, pre, post []openflow.FlowModOp) error {
	s.sync.Lock()
	defer s.sync.Unlock()
	return s.syncLocked(ctx, c, pre, post)
}

// syncLocked is Sync with the sync lock held.
func (s *Store) syncLocked(ctx context.Context, c Conn, pre, post []openflow.FlowModOp) error {
	s.mu.Lock()
	owners := make(map[flows.Owner]*state, len(s.owners))
	for o, st := range s.owners {
		owners[o] = st
	}
	s.mu.Unlock()
	needMeters, needGroups := false, false
	for _, st := range owners {
		needMeters = needMeters || len(st.meters) > 0
		needGroups = needGroups || len(st.groups) > 0
	}
	meterIDs, err := listMeters(ctx, c, needMeters)
	if err != nil {
		return fmt.Errorf("synchronise the switch: list its meters: %w", err)
	}
	haveMeters := map[uint32]bool{}
	for _, id := range meterIDs {
		haveMeters[id] = true
	}
	var haveGroups []uint32
	gs, err := listGroups(ctx, c, needGroups)
	if err != nil {
		return fmt.Errorf("synchronise the switch: list its groups: %w", err)
	}
	for _, g := range gs {
		haveGroups = append(haveGroups, g.ID)
	}

	var meters, bundle, meterDeletes []openflow.FlowModOp
	bundle = append(bundle, pre...)
	wantGroups, wantMeters := map[uint32]bool{}, map[uint32]bool{}
	nFlows := 0
	sorted := sortedOwners(owners)
	for _, o := range sorted {
		st := owners[o]
		for _, id := range sortedKeys(st.meters) {
			cmd := openflow.MeterAdd
			if haveMeters[id] {
				cmd = openflow.MeterModify
			}
			meters = append(meters, meterOp(o, st.meters[id], cmd))
			wantMeters[id] = true
		}
		for _, id := range chainOrder(st.groups, false) {
			bundle = append(bundle, groupSetOp(o, st.groups[id]))
			wantGroups[id] = true
		}
	}
	for _, o := range sorted {
		st := owners[o]
		for _, k := range sortedKeys(st.flows) {
			bundle = append(bundle, flowOp(o, st.flows[k], openflow13.FC_ADD))
			nFlows++
		}
	}
	bundle = append(bundle, post...)
	for _, id := range haveGroups {
		if flows.OwnedGroupID(id) && !wantGroups[id] {
			bundle = append(bundle, groupDeleteOp("stale", id))
		}
	}
	for _, id := range sortedKeys(haveMeters) {
		if flows.OwnedMeterID(id) && !wantMeters[id] {
			meterDeletes = append(meterDeletes, meterDeleteOp("stale", id))
		}
	}
	if err := s.applyMeters(ctx, c, meters); err != nil {
		return fmt.Errorf("synchronise %d desired meters before their flows: %w", len(meters), err)
	}
	start := time.Now()
	err = c.ApplyBundle(ctx, bundle)
	s.report("bundle", len(bundle), start, err)
	if err != nil {
		return fmt.Errorf("synchronise %d desired flows and %d groups of %d owners: %w", nFlows, len(wantGroups), len(owners), err)
	}
	s.mu.Lock()
	s.synced = c
	s.mu.Unlock()
	if len(meterDeletes) > 0 {
		start := time.Now()
		s.report("meter_mod", len(meterDeletes), start, c.Apply(ctx, meterDeletes))
	}
	return nil
}

// listMeters returns the ids of the switch's meters (OFPMP_METER for OFPM_ALL). When the
// store wants no meter (need false) a failed request counts as none, so a switch without
// meter support still gets its flows; stale meters of ofsdn's range are then left for the
// audit.
func listMeters(ctx context.Context, c Conn, need bool) ([]uint32, error) {
	ms, err := c.MeterStats(ctx, MeterAll)
	if err != nil {
		if !need && !errors.Is(err, openflow.ErrDisconnected) && ctx.Err() == nil {
			return nil, nil
		}
		return nil, err
	}
	ids := make([]uint32, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// listGroups returns the switch's groups (OFPMP_GROUP_DESC); as listMeters, a failed
// request counts as none when the store wants no group.
func listGroups(ctx context.Context, c Conn, need bool) ([]openflow.GroupDesc, error) {
	gs, err := c.DumpGroups(ctx)
	if err != nil && !need && !errors.Is(err, openflow.ErrDisconnected) && ctx.Err() == nil {
		return nil, nil
	}
	return gs, err
}

// Rebuild replaces the desired flows of the given owners (owner → flows; their groups and
// meters are kept) and makes the switch hold the new desired state with one atomic
// bundle: delete every flow, then add every desired flow of every owner (as on a
// reconnect, Sync), so packets never meet a table with some owners rebuilt and others
// not. Owners the store no longer has (deleted meanwhile) are skipped, never brought back.
// The node uses it when the ofports its flows name change (a gateway or tunnel port
// created again after an OVSDB reconnection). While there is no live synced connection it
// only records the flows: the next connection's Sync installs them. Changes fail fast
// while it runs. Errors: those of Sync; the new flows stay recorded, so the next Sync
// (every reconnect) installs them.
func (s *Store) Rebuild(ctx context.Context, owners map[flows.Owner][]flows.Flow) error {
	s.sync.Lock()
	defer s.sync.Unlock()
	s.mu.Lock()
	for o, fs := range owners {
		st, ok := s.owners[o]
		if !ok {
			continue
		}
		s.owners[o] = st.withFlows(flowMap(fs))
	}
	s.mu.Unlock()
	c, err := s.conn()
	if err != nil {
		return nil // the next connection starts with a full Sync
	}
	return s.syncLocked(ctx, c, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow before the rebuild"}}, nil)
}

// SetOwner makes the switch hold exactly fs as owner's flows (its groups and meters stay
// as they are): flows new or changed since the last call are added (OFPFC_ADD replaces a
// flow with the same match and priority, OpenFlow 1.3.5 §6.4), flows no longer wanted are
// removed with OFPFC_DELETE_STRICT. The batch is sent with those of concurrent callers
// (apply) and confirmed with a barrier before SetOwner returns. On error the store keeps
// the owner's previous state, so a retry sends the difference again; the error names the
// failed flow. While the switch is disconnected or being resynchronised it fails at once
// with an error matching openflow.ErrDisconnected.
func (s *Store) SetOwner(ctx context.Context, owner flows.Owner, fs []flows.Flow) error {
	want := flowMap(fs)
	if err := s.readLock(owner); err != nil {
		return err
	}
	defer s.sync.RUnlock()
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("flows of %s: %w", owner, err)
	}
	if err := s.changesRLock(ctx, owner.String()); err != nil {
		return err
	}
	defer s.changes.RUnlock()
	s.mu.Lock()
	have := s.owners[owner]
	s.mu.Unlock()

	var ops changeOps
	next := have.withFlows(want)
	diffOps(&ops, owner, have, next, nil)
	if len(ops.bundle) > 0 {
		if err := s.apply(ctx, c, ops.bundle); err != nil {
			return fmt.Errorf("flows of %s: %w", owner, err)
		}
	}
	s.mu.Lock()
	s.owners[owner] = next
	s.mu.Unlock()
	return nil
}

// Set makes the switch hold exactly d for owner, flows, groups and meters, as ONE change
// (Update with Replace). Errors: as Update.
func (s *Store) Set(ctx context.Context, owner flows.Owner, d Desired) error {
	return s.Update(ctx, []OwnerUpdate{{Owner: owner, Replace: true, Flows: d.Flows, Groups: d.Groups, Meters: d.Meters}})
}

// DeleteOwner removes every flow of owner from the switch with one OFPFC_DELETE selected
// by owner.Cookie() (OpenFlow 1.3.5 §6.4: cookie mask in delete requests), which also
// removes flows of that owner the store no longer remembers (e.g. from before a restart),
// then its groups and its meters (OFPGC_DELETE, OFPMC_DELETE), in one batch in that order,
// and forgets the owner. Deleting an unknown owner is not an error. While the switch is
// disconnected it only forgets the owner and returns nil: the Sync that starts every new
// connection deletes all flows and re-adds only the desired ones, and deletes the groups
// and meters no owner wants. It fails (matching openflow.ErrDisconnected) only while a
// Sync is running, or on a rejected delete.
func (s *Store) DeleteOwner(ctx context.Context, owner flows.Owner) error {
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
	if err := s.changesRLock(ctx, owner.String()); err != nil {
		return err
	}
	defer s.changes.RUnlock()
	s.mu.Lock()
	have := s.owners[owner]
	s.mu.Unlock()
	cookie, cookieMask := owner.Cookie()
	ops := []openflow.FlowModOp{{Mod: flows.DeleteByCookie(cookie, cookieMask), Name: fmt.Sprintf("%s: delete cookie=%#x/%#x", owner, cookie, cookieMask)}}
	if have != nil {
		for _, id := range chainOrder(have.groups, true) {
			ops = append(ops, groupDeleteOp(owner.String(), id))
		}
		for _, id := range sortedKeys(have.meters) {
			ops = append(ops, meterDeleteOp(owner.String(), id))
		}
	}
	if err := s.apply(ctx, c, ops); err != nil {
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
// then go together, up to maxFlowGroup of them, as ONE batch of mods followed by ONE
// barrier, so N concurrent pod ADDs and DELs cost the switch one barrier instead of N
// (the switch processes a connection's messages in order, so waiting behind the batch in
// flight costs a caller nothing it would not have waited anyway). Every op sent this way
// is idempotent (OFPFC_ADD replaces the same flow, ADD_OR_MOD the same group, deletes of
// nothing are no error), so when the switch rejects any mod of a group each member's
// batch is sent again alone, and only the member whose own mods are rejected gets an
// error, with the same meaning as without grouping. A plain batch rather than a bundle:
// one round trip instead of two, and per owner the same (non-atomic) meaning SetOwner
// always had.
func (s *Store) apply(ctx context.Context, c Conn, ops []openflow.FlowModOp) error {
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
func (s *Store) applyNow(ctx context.Context, c Conn, ops []openflow.FlowModOp) error {
	start := time.Now()
	err := c.Apply(ctx, ops)
	s.report("flow_mod", len(ops), start, err)
	return err
}

// sendGroups is the sender goroutine: while batches are pending it sends those for the
// same connection as the oldest one (up to maxFlowGroup) as one batch and completes them.
func (s *Store) sendGroups() {
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
		s.batches++
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
func (s *Store) Owner(owner flows.Owner) ([]flows.Flow, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.owners[owner]
	var out []flows.Flow
	if ok {
		out = make([]flows.Flow, 0, len(st.flows))
		for _, f := range st.flows {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, ok
}

// OwnerState returns the whole desired state of owner (flows sorted by their text, groups
// and meters by id) and whether it is known.
func (s *Store) OwnerState(owner flows.Owner) (Desired, bool) {
	fs, ok := s.Owner(owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Desired{Flows: fs}
	if st := s.owners[owner]; st != nil {
		for _, id := range sortedKeys(st.groups) {
			d.Groups = append(d.Groups, st.groups[id])
		}
		for _, id := range sortedKeys(st.meters) {
			d.Meters = append(d.Meters, st.meters[id])
		}
	}
	return d, ok
}

// All returns every desired flow of every owner, sorted by their text.
func (s *Store) All() []flows.Flow {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []flows.Flow
	for _, st := range s.owners {
		for _, f := range st.flows {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Groups returns every desired group of every owner, sorted by id.
func (s *Store) Groups() []flows.Group {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []flows.Group
	for _, st := range s.owners {
		for _, g := range st.groups {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Meters returns every desired meter of every owner, sorted by id.
func (s *Store) Meters() []flows.Meter {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []flows.Meter
	for _, st := range s.owners {
		for _, m := range st.meters {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Len returns how many desired flows the store holds, over every owner (without
// formatting or sorting them, unlike All).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.owners {
		n += len(st.flows)
	}
	return n
}

// CountByTable returns how many desired flows each flow table holds (table id → flows).
func (s *Store) CountByTable() map[uint8]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[uint8]int{}
	for _, st := range s.owners {
		for _, f := range st.flows {
			n[uint8(f.Table)]++
		}
	}
	return n
}

// changesRLock takes s.changes for reading, waiting at most until ctx ends: a running
// audit holds it for writing from its dump to its repair, and with a switch that does not
// answer that lasts as long as the audit's own deadline, far past a CNI ADD's addTimeout
// (seen: ADDs answered after 7-10 s with -add-timeout 3s, each at an audit's tick). A
// change that cannot wait fails with ctx's error, named after what (an owner).
func (s *Store) changesRLock(ctx context.Context, what string) error {
	if s.changes.TryRLock() {
		return nil
	}
	// A blocking RLock keeps the RWMutex's fairness (readers waiting when an audit ends
	// go before the next audit); given up on, it releases the lock once it gets it.
	got := make(chan struct{})
	go func() {
		s.changes.RLock()
		close(got)
	}()
	select {
	case <-got:
		return nil
	case <-ctx.Done():
		go func() {
			<-got
			s.changes.RUnlock()
		}()
		return fmt.Errorf("switch state of %s: waiting for the switch audit in progress: %w", what, ctx.Err())
	}
}
