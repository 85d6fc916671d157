package switchstate

// The audit: the switch heals itself while connected.
//
// Design history (issue 10, issue 21): flows deleted from the switch by anyone else (an
// operator's `ovs-ofctl del-flows`, a buggy tool) stayed missing until the next reconnect
// or daemon restart. Now the node audits the switch every flow audit interval: one
// flow-stats request for every table (OFPMP_FLOW, OpenFlow 1.3.5 §7.3.5.2; one reply of
// about 150 bytes per flow, so a few hundred flows cost well under a millisecond of
// switch time), one group description request (OFPMP_GROUP_DESC, §7.3.5.9) and one meter
// statistics request for every meter (OFPMP_METER, §7.3.5.12), compared with the store:
// flows by table, priority, cookie and match (flowKey, as `ofsdnctl flows` pairs them),
// groups by id, type, weights and bucket actions, meters by id. Then, as one batch
// confirmed by a barrier, in dependency order:
//
//   - a desired meter the switch lacks is added again;
//   - a flow carrying this daemon run's cookie prefix (pipeline version and generation,
//     cookie bits 63..40) that the store does not want is deleted: it can only be ours,
//     left behind, or a copy of ours made by hand;
//   - a desired group the switch lacks, or holds with other buckets, is set again
//     (ADD_OR_MOD); a group deleted by hand took the flows that used it with it, and
//     those come back as missing flows after it;
//   - a desired flow the switch lacks is added again;
//   - a group or meter of ofsdn's id ranges that no owner wants is deleted (see the
//     package comment: the range is the proof that it is ours).
//
// Flows with our prefix whose owner kind is the switch's own state
// (flows.OwnerKind.SwitchState: learned session-affinity flows and their remainder
// flows) are neither missing nor unexpected: the audit leaves them alone, as it must (it
// deleted them as unexpected before, every audit interval). Flows without our prefix and
// groups and meters outside our id ranges (an operator's
// debugging flow, another tool's group) are reported, and never removed: they are not
// provably ours. Each repair is reported with its object and counted by the caller.
// Flows whose match is ours but whose actions were changed by hand are not detected (the
// comparison does not decode instructions); meters whose band was changed by hand are not
// detected either (no meter configuration request yet).
//
// The audit must never mistake a change in flight for drift: a pod ADD installs its flows
// before the store records them, a DEL removes them before the store forgets them. So the
// store's changes hold Store.changes for reading while they touch the switch and the
// store, and the audit holds it for writing from its dump to its repair: a change waits
// for at most one audit (three dumps and one batch), and an audit never sees half a
// change. While a full sync runs (reconnect, rebuild) the audit skips its round.

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// Repair kinds: what an audit repaired, one count each (the controller's Hooks.FlowRepair
// kind, the label of ofsdn_openflow_repairs_total).
const (
	// RepairMissing: a desired flow the switch lacked was installed again.
	RepairMissing = "missing"
	// RepairUnexpected: a flow with this daemon run's cookie prefix that no owner wants
	// was deleted.
	RepairUnexpected = "unexpected"
	// RepairMissingGroup: a desired group the switch lacked (or held with other buckets)
	// was set again.
	RepairMissingGroup = "missing_group"
	// RepairUnexpectedGroup: a group of ofsdn's id range that no owner wants was deleted.
	RepairUnexpectedGroup = "unexpected_group"
	// RepairMissingMeter: a desired meter the switch lacked was added again.
	RepairMissingMeter = "missing_meter"
	// RepairUnexpectedMeter: a meter of ofsdn's id range that no owner wants was deleted.
	RepairUnexpectedMeter = "unexpected_meter"
)

// ownedFlow is a desired flow with its owner.
type ownedFlow struct {
	owner flows.Owner
	flow  flows.Flow
}

// ownedGroup is a desired group with its owner.
type ownedGroup struct {
	owner flows.Owner
	group flows.Group
}

// ownedMeter is a desired meter with its owner.
type ownedMeter struct {
	owner flows.Owner
	meter flows.Meter
}

// auditPlan is the difference between the desired state and a switch's tables.
type auditPlan struct {
	// Missing are desired flows the switch does not hold, sorted by owner and text.
	Missing []ownedFlow
	// Unexpected are flows with our cookie prefix that no owner wants.
	Unexpected []*openflow13.FlowStats
	// Foreign are flows without our cookie prefix.
	Foreign []*openflow13.FlowStats

	// MissingGroups are desired groups the switch lacks or holds otherwise, by id.
	MissingGroups []ownedGroup
	// UnexpectedGroups are ids of groups in ofsdn's range that no owner wants, sorted.
	UnexpectedGroups []uint32
	// ForeignGroups are ids of groups outside ofsdn's range, sorted.
	ForeignGroups []uint32

	// MissingMeters are desired meters the switch lacks, by id.
	MissingMeters []ownedMeter
	// UnexpectedMeters are ids of meters in ofsdn's range that no owner wants, sorted.
	UnexpectedMeters []uint32
	// ForeignMeters are ids of meters outside ofsdn's range, sorted.
	ForeignMeters []uint32
}

// flowKey identifies a flow entry by table, priority, cookie and match (openflow.MatchKey:
// every field's value and mask, in any order).
func flowKey(table uint8, priority uint16, cookie uint64, m openflow13.Match) string {
	return fmt.Sprintf("%d/%d/%#x/%s", table, priority, cookie, openflow.MatchKey(m))
}

// FlowKey identifies desired flow f as StatsKey identifies the switch's entry for it: by
// table, priority, cookie and every match field's value and mask.
func FlowKey(f flows.Flow) string {
	return flowKey(uint8(f.Table), f.Priority, uint64(f.Cookie), f.FlowMod(openflow13.FC_ADD).Match)
}

// StatsKey identifies a flow entry the switch reported (openflow.Conn.DumpFlows), equal
// to FlowKey of the desired flow it was installed from.
func StatsKey(s *openflow13.FlowStats) string {
	return flowKey(s.TableId, s.Priority, s.Cookie, s.Match)
}

// sameGroup reports whether the switch's group d is desired group g: type, weights and
// each bucket's action bytes.
func sameGroup(g flows.Group, d openflow.GroupDesc) bool {
	if uint8(g.Type) != d.Type || len(g.Buckets) != len(d.Weights) || len(d.Raw) != len(d.Weights) {
		return false
	}
	for i, b := range g.Buckets {
		if b.Weight != d.Weights[i] {
			return false
		}
		var raw []byte
		for _, a := range b.OFActions() {
			ab, err := a.MarshalBinary()
			if err != nil {
				return false
			}
			raw = append(raw, ab...)
		}
		if !bytes.Equal(raw, d.Raw[i]) {
			return false
		}
	}
	return true
}

// planAudit compares desired with the switch's flows (stats), groups and meter ids. A
// flow is ours when cookie&prefixMask == prefix; a group or meter when its id is in
// ofsdn's range (flows.OwnedGroupID, flows.OwnedMeterID). It is pure.
func planAudit(desired map[flows.Owner]*state, stats []*openflow13.FlowStats, groups []openflow.GroupDesc, meters []uint32, prefix, prefixMask uint64) auditPlan {
	type entry struct {
		of   ownedFlow
		used bool
	}
	byKey := map[string][]*entry{}
	wantGroups := map[uint32]ownedGroup{}
	wantMeters := map[uint32]ownedMeter{}
	for owner, st := range desired {
		for _, f := range st.flows {
			k := FlowKey(f)
			byKey[k] = append(byKey[k], &entry{of: ownedFlow{owner, f}})
		}
		for id, g := range st.groups {
			wantGroups[id] = ownedGroup{owner, g}
		}
		for id, m := range st.meters {
			wantMeters[id] = ownedMeter{owner, m}
		}
	}
	var p auditPlan
	for _, s := range stats {
		paired := false
		for _, e := range byKey[StatsKey(s)] {
			if !e.used {
				e.used, paired = true, true
				break
			}
		}
		switch {
		case paired:
		case s.Cookie&prefixMask == prefix && flows.Cookie(s.Cookie).Owner().SwitchState():
			// The switch's own state (learned session-affinity flows and their
			// remainders): never desired, never unexpected.
		case s.Cookie&prefixMask == prefix:
			p.Unexpected = append(p.Unexpected, s)
		default:
			p.Foreign = append(p.Foreign, s)
		}
	}
	for _, es := range byKey {
		for _, e := range es {
			if !e.used {
				p.Missing = append(p.Missing, e.of)
			}
		}
	}
	sort.Slice(p.Missing, func(i, j int) bool {
		a, b := p.Missing[i], p.Missing[j]
		if a.owner != b.owner {
			return a.owner.Kind < b.owner.Kind || a.owner.Kind == b.owner.Kind && a.owner.ID < b.owner.ID
		}
		return a.flow.String() < b.flow.String()
	})

	have := map[uint32]bool{}
	for _, d := range groups {
		have[d.ID] = true
		w, ok := wantGroups[d.ID]
		switch {
		case ok && !sameGroup(w.group, d):
			p.MissingGroups = append(p.MissingGroups, w)
		case ok:
		case flows.OwnedGroupID(d.ID):
			p.UnexpectedGroups = append(p.UnexpectedGroups, d.ID)
		default:
			p.ForeignGroups = append(p.ForeignGroups, d.ID)
		}
	}
	for _, id := range sortedKeys(wantGroups) {
		if !have[id] {
			p.MissingGroups = append(p.MissingGroups, wantGroups[id])
		}
	}
	// Set again a group after the groups it chains to (chainOrder).
	missing := map[uint32]flows.Group{}
	byID := map[uint32]ownedGroup{}
	for _, g := range p.MissingGroups {
		missing[g.group.ID], byID[g.group.ID] = g.group, g
	}
	p.MissingGroups = p.MissingGroups[:0]
	for _, id := range chainOrder(missing, false) {
		p.MissingGroups = append(p.MissingGroups, byID[id])
	}
	haveM := map[uint32]bool{}
	for _, id := range meters {
		haveM[id] = true
		if _, ok := wantMeters[id]; ok {
			continue
		}
		if flows.OwnedMeterID(id) {
			p.UnexpectedMeters = append(p.UnexpectedMeters, id)
		} else {
			p.ForeignMeters = append(p.ForeignMeters, id)
		}
	}
	for _, id := range sortedKeys(wantMeters) {
		if !haveM[id] {
			p.MissingMeters = append(p.MissingMeters, wantMeters[id])
		}
	}
	for _, ids := range [][]uint32{p.UnexpectedGroups, p.ForeignGroups, p.UnexpectedMeters, p.ForeignMeters} {
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	}
	return p
}

// repairOps returns the mods that make the switch match the desired state, in dependency
// order: missing meters, deletes of unexpected flows, missing groups, missing flows,
// deletes of unexpected groups, deletes of unexpected meters. An unexpected flow is
// deleted by its exact cookie in its table; where a desired flow of that table shares the
// cookie, by OFPFC_DELETE_STRICT with its priority and match as well (OpenFlow 1.3.5
// §6.4), so no desired flow is touched.
func repairOps(desired map[flows.Owner]*state, p auditPlan) []openflow.FlowModOp {
	shared := map[[2]uint64]bool{} // table, cookie of desired flows
	for _, st := range desired {
		for _, f := range st.flows {
			shared[[2]uint64{uint64(f.Table), uint64(f.Cookie)}] = true
		}
	}
	var ops []openflow.FlowModOp
	for _, m := range p.MissingMeters {
		op := meterOp(m.owner, m.meter, openflow.MeterAdd)
		op.Name = "audit: " + op.Name
		ops = append(ops, op)
	}
	for _, s := range p.Unexpected {
		fm := openflow13.NewFlowMod()
		fm.Command = openflow13.FC_DELETE
		fm.TableId = s.TableId
		fm.Cookie, fm.CookieMask = s.Cookie, ^uint64(0)
		fm.BufferId = 0xffffffff // OFP_NO_BUFFER
		fm.OutPort, fm.OutGroup = openflow13.P_ANY, openflow13.OFPG_ANY
		if shared[[2]uint64{uint64(s.TableId), s.Cookie}] {
			fm.Command = openflow13.FC_DELETE_STRICT
			fm.Priority = s.Priority
			fm.Match = s.Match
		}
		ops = append(ops, openflow.FlowModOp{Mod: fm, Name: "audit: delete " + describeStats(s)})
	}
	for _, g := range p.MissingGroups {
		op := groupSetOp(g.owner, g.group)
		op.Name = "audit: " + op.Name
		ops = append(ops, op)
	}
	for _, m := range p.Missing {
		ops = append(ops, openflow.FlowModOp{Mod: m.flow.FlowMod(openflow13.FC_ADD), Name: "audit: " + m.owner.String() + ": " + m.flow.String()})
	}
	for _, id := range p.UnexpectedGroups {
		ops = append(ops, groupDeleteOp("audit", id))
	}
	for _, id := range p.UnexpectedMeters {
		ops = append(ops, meterDeleteOp("audit", id))
	}
	return ops
}

// describeStats names a flow the switch holds that the daemon does not want.
func describeStats(s *openflow13.FlowStats) string {
	return fmt.Sprintf("cookie=%#x, table=%d, priority=%d, a match of %d fields", s.Cookie, s.TableId, s.Priority, len(s.Match.Fields))
}

// AuditResult is what one audit found and repaired; each entry names one object.
type AuditResult struct {
	// Missing are the desired flows that were installed again, as "owner: flow" text.
	Missing []string
	// Unexpected are the flows with this daemon run's cookie prefix that were deleted.
	Unexpected []string
	// Foreign are the flows without that prefix, left alone.
	Foreign []string
	// Kept are flows with that prefix that no owner wants, left alone because the
	// caller's keep function claimed them (AuditKeeping: a pod whose address still has an
	// IP lease).
	Kept []string
	// MissingGroups are the desired groups set again, as "owner: group" text.
	MissingGroups []string
	// UnexpectedGroups are the groups of ofsdn's id range no owner wants, deleted.
	UnexpectedGroups []string
	// ForeignGroups are the groups outside ofsdn's id range, left alone.
	ForeignGroups []string
	// MissingMeters are the desired meters added again, as "owner: meter" text.
	MissingMeters []string
	// UnexpectedMeters are the meters of ofsdn's id range no owner wants, deleted.
	UnexpectedMeters []string
	// ForeignMeters are the meters outside ofsdn's id range, left alone.
	ForeignMeters []string
	// Skipped is true when no audit ran: no synchronised connection, or a full sync was
	// running.
	Skipped bool
}

// Repairs returns the result's repair counts by kind (Repair*), only kinds with at least
// one.
func (r AuditResult) Repairs() map[string]int {
	out := map[string]int{}
	for k, v := range map[string][]string{
		RepairMissing: r.Missing, RepairUnexpected: r.Unexpected,
		RepairMissingGroup: r.MissingGroups, RepairUnexpectedGroup: r.UnexpectedGroups,
		RepairMissingMeter: r.MissingMeters, RepairUnexpectedMeter: r.UnexpectedMeters,
	} {
		if len(v) > 0 {
			out[k] = len(v)
		}
	}
	return out
}

// Audit compares the switch's flows, groups and meters with the desired state and
// repairs the difference (see the file comment) in one batch confirmed by a barrier:
// flows with cookie&prefixMask == prefix that no owner wants, and groups and meters of
// ofsdn's id ranges that no owner wants, are deleted; desired ones the switch lacks are
// installed again; others are only reported. Changes wait for it. Without a synchronised
// connection, or while a Sync or Rebuild runs, it does nothing and reports Skipped.
// Errors: those of DumpFlows, DumpGroups, MeterStats and Apply (a repair batch that failed
// is tried again by the next audit).
func (s *Store) Audit(ctx context.Context, prefix, prefixMask uint64) (AuditResult, error) {
	return s.AuditKeeping(ctx, prefix, prefixMask, nil)
}

// AuditKeeping is Audit that leaves alone, and reports in AuditResult.Kept, each flow
// with our prefix that no owner wants but for whose cookie keep (when not nil) returns
// true: the node passes a test for "a pod owner whose address still has an IP lease", so
// that a live pod the daemon lost track of is never cut off as owned by nobody.
func (s *Store) AuditKeeping(ctx context.Context, prefix, prefixMask uint64, keep func(cookie uint64) bool) (AuditResult, error) {
	if !s.sync.TryRLock() {
		return AuditResult{Skipped: true}, nil
	}
	defer s.sync.RUnlock()
	c, err := s.conn()
	if err != nil {
		return AuditResult{Skipped: true}, nil
	}
	s.changes.Lock()
	defer s.changes.Unlock()
	stats, err := c.DumpFlows(ctx, openflow.TableAll, 0, 0)
	if err != nil {
		return AuditResult{}, fmt.Errorf("audit: dump flows: %w", err)
	}
	s.mu.Lock()
	desired := make(map[flows.Owner]*state, len(s.owners))
	needMeters, needGroups := false, false
	for o, st := range s.owners {
		desired[o] = st // owners' states are replaced, never changed in place
		needMeters = needMeters || len(st.meters) > 0
		needGroups = needGroups || len(st.groups) > 0
	}
	s.mu.Unlock()
	groups, err := listGroups(ctx, c, needGroups)
	if err != nil {
		return AuditResult{}, fmt.Errorf("audit: dump groups: %w", err)
	}
	meters, err := listMeters(ctx, c, needMeters)
	if err != nil {
		return AuditResult{}, fmt.Errorf("audit: list meters: %w", err)
	}
	p := planAudit(desired, stats, groups, meters, prefix, prefixMask)
	var res AuditResult
	if keep != nil {
		var del []*openflow13.FlowStats
		for _, f := range p.Unexpected {
			if keep(f.Cookie) {
				res.Kept = append(res.Kept, describeStats(f))
			} else {
				del = append(del, f)
			}
		}
		p.Unexpected = del
	}
	for _, m := range p.Missing {
		res.Missing = append(res.Missing, m.owner.String()+": "+m.flow.String())
	}
	for _, f := range p.Unexpected {
		res.Unexpected = append(res.Unexpected, describeStats(f))
	}
	for _, f := range p.Foreign {
		res.Foreign = append(res.Foreign, describeStats(f))
	}
	for _, g := range p.MissingGroups {
		res.MissingGroups = append(res.MissingGroups, g.owner.String()+": "+g.group.String())
	}
	for _, id := range p.UnexpectedGroups {
		res.UnexpectedGroups = append(res.UnexpectedGroups, fmt.Sprintf("group_id=%d", id))
	}
	for _, id := range p.ForeignGroups {
		res.ForeignGroups = append(res.ForeignGroups, fmt.Sprintf("group_id=%d", id))
	}
	for _, m := range p.MissingMeters {
		res.MissingMeters = append(res.MissingMeters, m.owner.String()+": "+m.meter.String())
	}
	for _, id := range p.UnexpectedMeters {
		res.UnexpectedMeters = append(res.UnexpectedMeters, fmt.Sprintf("meter=%d", id))
	}
	for _, id := range p.ForeignMeters {
		res.ForeignMeters = append(res.ForeignMeters, fmt.Sprintf("meter=%d", id))
	}
	if ops := repairOps(desired, p); len(ops) > 0 {
		// Alone, not grouped: a meter add is not idempotent, and no change runs meanwhile.
		if err := s.applyNow(ctx, c, ops); err != nil {
			return res, fmt.Errorf("audit: repair %d missing and %d unexpected flows, %d missing and %d unexpected groups, %d missing and %d unexpected meters: %w",
				len(p.Missing), len(p.Unexpected), len(p.MissingGroups), len(p.UnexpectedGroups), len(p.MissingMeters), len(p.UnexpectedMeters), err)
		}
	}
	return res, nil
}
