package controller

// The periodic audit of the switch (switchstate.Store.Audit: flows, groups and meters):
// the node runs it every FlowAuditInterval, logs each repair once with its object and
// each foreign object the first time it is seen, and counts the repairs.

import (
	"context"
	"time"

	"github.com/ofsdn/ofsdn/flows"
)

// DefaultFlowAuditInterval is the period of the audit when NodeOptions leaves it to the
// daemon's config: 30 seconds.
const DefaultFlowAuditInterval = 30 * time.Second

// auditFlows runs the audit every interval until the node closes: it logs each repair
// once and each foreign flow, group or meter the first time it is seen, and reports
// repairs to Hooks.FlowRepair (one call per kind with at least one).
func (n *Node) auditFlows(interval time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	reported := map[string]bool{} // foreign objects already logged
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		cfg := n.config()
		prefixMask := flows.CookieVersionMask | flows.CookieGenerationMask
		prefix := uint64(flows.NewCookie(cfg.Generation, 0, 0)) & prefixMask
		ctx, cancel := context.WithTimeout(n.runCtx, max(interval, 10*time.Second))
		res, err := n.store.AuditKeeping(ctx, prefix, prefixMask, n.leasedPodCookie)
		cancel()
		if err != nil {
			n.log.Warn("switch audit failed; the next one retries", "bridge", n.opts.Bridge, "interval", interval,
				"missing", len(res.Missing), "unexpected", len(res.Unexpected), "err", err)
			continue
		}
		for _, f := range res.Missing {
			n.log.Warn("flow audit: desired flow was missing from the switch; installed it again", "bridge", n.opts.Bridge, "flow", f)
		}
		for _, f := range res.Unexpected {
			n.log.Warn("flow audit: flow with this daemon's cookie that no owner wants; deleted it", "bridge", n.opts.Bridge, "flow", f)
		}
		for _, g := range res.MissingGroups {
			n.log.Warn("switch audit: desired group was missing from the switch (or had other buckets); set it again", "bridge", n.opts.Bridge, "group", g)
		}
		for _, g := range res.UnexpectedGroups {
			n.log.Warn("switch audit: group in ofsdn's id range that no owner wants; deleted it", "bridge", n.opts.Bridge, "group", g)
		}
		for _, m := range res.MissingMeters {
			n.log.Warn("switch audit: desired meter was missing from the switch; added it again", "bridge", n.opts.Bridge, "meter", m)
		}
		for _, m := range res.UnexpectedMeters {
			n.log.Warn("switch audit: meter in ofsdn's id range that no owner wants; deleted it", "bridge", n.opts.Bridge, "meter", m)
		}
		if h := n.opts.Hooks.FlowRepair; h != nil {
			for _, kind := range []string{RepairMissing, RepairUnexpected, RepairMissingGroup, RepairUnexpectedGroup, RepairMissingMeter, RepairUnexpectedMeter} {
				if k := res.Repairs()[kind]; k > 0 {
					h(kind, k)
				}
			}
		}
		if res.Skipped {
			continue
		}
		seen := map[string]bool{}
		for _, f := range res.Kept {
			seen["kept"+f] = true
			if !reported["kept"+f] {
				n.log.Error("flow audit: flow with this daemon's cookie that no owner wants, of a pod address that still has an IP lease; left alone: DEL the pod, or restart ofsdn-node to restore it",
					"bridge", n.opts.Bridge, "flow", f)
			}
		}
		foreign := func(msg, key string, objs []string) {
			for _, o := range objs {
				seen[key+o] = true
				if !reported[key+o] {
					n.log.Warn(msg, "bridge", n.opts.Bridge, key, o)
				}
			}
		}
		foreign("flow audit: flow not installed by ofsdn on the bridge; left alone (delete it by hand if it is not wanted)", "flow", res.Foreign)
		foreign("switch audit: group outside ofsdn's id range on the bridge; left alone (delete it by hand if it is not wanted)", "group", res.ForeignGroups)
		foreign("switch audit: meter outside ofsdn's id range on the bridge; left alone (delete it by hand if it is not wanted)", "meter", res.ForeignMeters)
		reported = seen
	}
}

// leasedPodCookie reports whether cookie is a pod owner's whose owner id an IP lease
// holds (ipam.Lease.OwnerID): such a pod may be live, and its flows are not deleted as
// owned by nobody.
func (n *Node) leasedPodCookie(cookie uint64) bool {
	c := flows.Cookie(cookie)
	if c.Owner() != flows.OwnerPod {
		return false
	}
	id := c.OwnerID()
	for _, l := range n.leases.List() {
		if l.OwnerID == id {
			return true
		}
	}
	return false
}
