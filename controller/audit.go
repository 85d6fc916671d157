package controller

// The flow audit: the flow tables heal themselves while connected.
//
// Design history (issue 10): flows deleted from the switch by anyone else (an operator's
// `ovs-ofctl del-flows`, a buggy tool) stayed missing until the next reconnect or daemon
// restart, although CHECK and `ofsdnctl flows` already reported them MISSING. Now the
// node audits the switch every FlowAuditInterval (default 30 s): one flow-stats request
// for every table (OFPMP_FLOW, OpenFlow 1.3.5 §7.3.5.2; one reply of about 150 bytes per
// flow, so a few hundred flows cost well under a millisecond of switch time), compared
// with the desired-state store by table, priority, cookie and match (flowKey, as
// `ofsdnctl flows` pairs them). Then, as one batch confirmed by a barrier:
//
//   - a flow carrying this daemon run's cookie prefix (pipeline version and generation,
//     cookie bits 63..40) that the store does not want is deleted: it can only be ours,
//     left behind, or a copy of ours made by hand;
//   - a desired flow the switch lacks is added again.
//
// Flows without our prefix (an operator's debugging flow, another tool's) are reported in
// the log, once each, and never removed: they are not provably ours. Each repair is logged
// once, with the flow, and counted (Hooks.FlowRepair, ofsdn_openflow_repairs_total). Flows
// whose match is ours but whose actions were changed by hand are not detected (the
// comparison does not decode instructions).
//
// The audit must never mistake a change in flight for drift: a pod ADD installs its flows
// before the store records them, a DEL removes them before the store forgets them. So the
// store's changes (SetOwner, DeleteOwner) hold FlowStore.changes for reading while they
// touch the switch and the store, and the audit holds it for writing from its dump to its
// repair: a change waits for at most one audit (one dump and one batch), and an audit
// never sees half a change. While a full sync runs (reconnect, rebuild) the audit skips
// its round.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// DefaultFlowAuditInterval is the period of the flow audit when NodeOptions leaves it to
// the daemon's config: 30 seconds.
const DefaultFlowAuditInterval = 30 * time.Second

// Repair kinds, the values of Hooks.FlowRepair's kind.
const (
	// RepairMissing: a desired flow the switch lacked was installed again.
	RepairMissing = "missing"
	// RepairUnexpected: a flow with this daemon run's cookie prefix that no owner wants
	// was deleted.
	RepairUnexpected = "unexpected"
)

// ownedFlow is a desired flow with its owner.
type ownedFlow struct {
	owner flows.Owner
	flow  flows.Flow
}

// auditPlan is the difference between the desired state and a switch's flow tables.
type auditPlan struct {
	// Missing are desired flows the switch does not hold, sorted by owner and text.
	Missing []ownedFlow
	// Unexpected are flows with our cookie prefix that no owner wants.
	Unexpected []*openflow13.FlowStats
	// Foreign are flows without our cookie prefix.
	Foreign []*openflow13.FlowStats
}

// planAudit compares desired (owner → MatchKey → flow) with stats, the switch's flows, by
// table, priority, cookie and match. A flow is ours when cookie&prefixMask == prefix. It
// is pure.
func planAudit(desired map[flows.Owner]map[string]flows.Flow, stats []*openflow13.FlowStats, prefix, prefixMask uint64) auditPlan {
	type entry struct {
		of   ownedFlow
		used bool
	}
	byKey := map[string][]*entry{}
	for owner, m := range desired {
		for _, f := range m {
			k := flowKey(uint8(f.Table), f.Priority, uint64(f.Cookie), f.FlowMod(openflow13.FC_ADD).Match)
			byKey[k] = append(byKey[k], &entry{of: ownedFlow{owner, f}})
		}
	}
	var p auditPlan
	for _, s := range stats {
		paired := false
		for _, e := range byKey[flowKey(s.TableId, s.Priority, s.Cookie, s.Match)] {
			if !e.used {
				e.used, paired = true, true
				break
			}
		}
		switch {
		case paired:
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
	return p
}

// repairOps returns the flow mods that make the switch match the desired state: first a
// delete of every unexpected flow, then an add of every missing flow. An unexpected flow
// is deleted by its exact cookie in its table; where a desired flow of that table shares
// the cookie, by OFPFC_DELETE_STRICT with its priority and match as well (OpenFlow 1.3.5
// §6.4), so no desired flow is touched.
func repairOps(desired map[flows.Owner]map[string]flows.Flow, p auditPlan) []openflow.FlowModOp {
	shared := map[[2]uint64]bool{} // table, cookie of desired flows
	for _, m := range desired {
		for _, f := range m {
			shared[[2]uint64{uint64(f.Table), uint64(f.Cookie)}] = true
		}
	}
	ops := make([]openflow.FlowModOp, 0, len(p.Unexpected)+len(p.Missing))
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
	for _, m := range p.Missing {
		ops = append(ops, openflow.FlowModOp{Mod: m.flow.FlowMod(openflow13.FC_ADD), Name: "audit: " + m.owner.String() + ": " + m.flow.String()})
	}
	return ops
}

// describeStats names a flow the switch holds that the daemon does not want.
func describeStats(s *openflow13.FlowStats) string {
	return fmt.Sprintf("cookie=%#x, table=%d, priority=%d, a match of %d fields", s.Cookie, s.TableId, s.Priority, len(s.Match.Fields))
}

// AuditResult is what one flow audit found and repaired.
type AuditResult struct {
	// Missing are the desired flows that were installed again, as "owner: flow" text.
	Missing []string
	// Unexpected are the flows with this daemon run's cookie prefix that were deleted.
	Unexpected []string
	// Foreign are the flows without that prefix, left alone.
	Foreign []string
	// Kept are flows with that prefix that no owner wants, left alone because their
	// owner is a pod whose address still has an IP lease (AuditKeeping).
	Kept []string
	// Skipped is true when no audit ran: no synchronised connection, or a full sync was
	// running.
	Skipped bool
}

// Audit compares the switch's flow tables with the desired state and repairs the
// difference (see the file comment): flows with cookie&prefixMask == prefix that no owner
// wants are deleted, desired flows the switch lacks are added again, in one batch
// confirmed by a barrier; other flows are only reported. Changes by SetOwner and
// DeleteOwner wait for it. Without a synchronised connection, or while a Sync or Rebuild
// runs, it does nothing and reports Skipped. Errors: those of openflow.Conn.DumpFlows and
// openflow.Conn.Apply (a repair batch that failed is tried again by the next audit).
func (s *FlowStore) Audit(ctx context.Context, prefix, prefixMask uint64) (AuditResult, error) {
	return s.AuditKeeping(ctx, prefix, prefixMask, nil)
}

// AuditKeeping is Audit that leaves alone, and reports in AuditResult.Kept, each flow
// with our prefix that no owner wants but for whose cookie keep (when not nil) returns
// true: the node passes a test for "a pod owner whose address still has an IP lease", so
// that a live pod the daemon lost track of is never cut off as owned by nobody.
func (s *FlowStore) AuditKeeping(ctx context.Context, prefix, prefixMask uint64, keep func(cookie uint64) bool) (AuditResult, error) {
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
		return AuditResult{}, fmt.Errorf("flow audit: dump flows: %w", err)
	}
	s.mu.Lock()
	desired := make(map[flows.Owner]map[string]flows.Flow, len(s.owners))
	for o, m := range s.owners {
		desired[o] = m // owners' maps are replaced, never changed in place
	}
	s.mu.Unlock()
	p := planAudit(desired, stats, prefix, prefixMask)
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
	if ops := repairOps(desired, p); len(ops) > 0 {
		if err := s.apply(ctx, c, ops); err != nil {
			return res, fmt.Errorf("flow audit: repair %d missing and %d unexpected flows: %w", len(p.Missing), len(p.Unexpected), err)
		}
	}
	return res, nil
}

// auditFlows runs the flow audit every interval until the node closes: it logs each
// repair once and each foreign flow the first time it is seen, and reports repairs to
// Hooks.FlowRepair.
func (n *Node) auditFlows(interval time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	reported := map[string]bool{} // foreign flows already logged
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		cfg := n.config()
		prefixMask := flows.CookieVersionMask | flows.CookieGenerationMask
		prefix := uint64(flows.NewCookie(cfg.Generation, 0, 0, 0)) & prefixMask
		ctx, cancel := context.WithTimeout(n.runCtx, max(interval, 10*time.Second))
		res, err := n.store.AuditKeeping(ctx, prefix, prefixMask, n.leasedPodCookie)
		cancel()
		if err != nil {
			n.log.Warn("flow audit failed; the next one retries", "bridge", n.opts.Bridge, "interval", interval,
				"missing", len(res.Missing), "unexpected", len(res.Unexpected), "err", err)
			continue
		}
		for _, f := range res.Missing {
			n.log.Warn("flow audit: desired flow was missing from the switch; installed it again", "bridge", n.opts.Bridge, "flow", f)
		}
		for _, f := range res.Unexpected {
			n.log.Warn("flow audit: flow with this daemon's cookie that no owner wants; deleted it", "bridge", n.opts.Bridge, "flow", f)
		}
		if h := n.opts.Hooks.FlowRepair; h != nil {
			if k := len(res.Missing); k > 0 {
				h(RepairMissing, k)
			}
			if k := len(res.Unexpected); k > 0 {
				h(RepairUnexpected, k)
			}
		}
		if res.Skipped {
			continue
		}
		seen := map[string]bool{}
		for _, f := range res.Kept {
			seen[f] = true
			if !reported[f] {
				n.log.Error("flow audit: flow with this daemon's cookie that no owner wants, of a pod address that still has an IP lease; left alone: DEL the pod, or restart ofsdn-node to restore it",
					"bridge", n.opts.Bridge, "flow", f)
			}
		}
		for _, f := range res.Foreign {
			seen[f] = true
			if !reported[f] {
				n.log.Warn("flow audit: flow not installed by ofsdn on the bridge; left alone (delete it by hand if it is not wanted)",
					"bridge", n.opts.Bridge, "flow", f)
			}
		}
		reported = seen
	}
}

// leasedPodCookie reports whether cookie is a pod owner's whose address holds an IP
// lease: such a pod may be live, and its flows are not deleted as owned by nobody.
func (n *Node) leasedPodCookie(cookie uint64) bool {
	c := flows.Cookie(cookie)
	if c.Owner() != flows.OwnerPod {
		return false
	}
	id := uint32(cookie & flows.CookieOwnerIDMask)
	for _, l := range n.leases.List() {
		if ip := l.IP.To4(); ip != nil && uint32(ip[0])<<24|uint32(ip[1])<<16|uint32(ip[2])<<8|uint32(ip[3]) == id {
			return true
		}
	}
	return false
}
