package controller

// NetworkPolicy on the node: the policy agent's changes become flows.
//
// The agent (package policy) computes, per event, the conjunctions whose clauses changed
// and the local pods whose isolation changed, and hands them here under its lock, in
// order. Conjunctions go into a flows.PolicyFlowSet (the rule flows, merged by match),
// kept in the flow store under the owner "policy"; an isolation change rewrites that
// pod's own flows (its forwarding flows plus its default-deny flows, owner the pod). Both
// go to the switch in one bundle (per runner round, see below), so a new rule and the
// isolation it brings appear together.
//
// A pod ADD attaches the pod to the agent under the same lock and installs its forwarding
// flows, its default-deny flows and the rule flows it brings in one bundle: a pod is never
// reachable before its policy applies. The ADD first waits (bounded by its context, the
// daemon's addTimeout) until the informers have synced and the Pod is known. Concurrent
// ADDs and DELs are combined by the agent (policy.Agent.Attach, Detach): the rules a
// batch changes are compiled once, and the batch's first item carries all their changes,
// so a pod's rule flows are never in a later bundle than its own flows.
//
// Realization is off the agent's lock (issue 21): the agent computes each event's changes
// under its lock and queues them (policyRealizer.enqueue); one runner goroutine (run)
// takes whatever is queued, applies it in order and sends the difference as one bundle.
// A burst of API events costs one bundle; concurrent ADDs share one instead of queueing
// behind each other's switch round trips; rounds are pipelined (run): an ADD waits for
// the commit in flight and one more round trip; inspection (ofsdnctl policies) takes the
// realizer's lock only between bundles, never across one.
//
// A failed bundle (switch gone, resynchronising) leaves the store at its previous state
// while the flow set moved on; the realizer marks itself dirty and the runner
// resynchronises the policy owner and the attached pods in full, at its next round and
// every second, until it succeeds. Conjunction ids the engine released are freed only
// when the switch is known to hold no flow with them: after a confirmed bundle, the ids
// released when its last item was queued.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/policy"
	"github.com/ofsdn/ofsdn/switchstate"
)

// ownerPolicy is the flow store owner of every rule flow (kind OwnerPolicy, id 0; the
// flows' cookies carry their conjunction ids, see flows.PolicyOwner).
var ownerPolicy = flows.PolicyOwner(0)

// PolicyOptions turns NetworkPolicy enforcement on for a node.
type PolicyOptions struct {
	// Agent is the policy agent, fed by a policy.Watcher. StartNode requires it to have
	// synced (Agent.Synced closed), so the first flow sync holds every pod's policy.
	Agent *policy.Agent
	// DenyLog sends the first packet of each denied connection to the daemon (through
	// meter flows.DenyLogMeter) to be logged.
	DenyLog bool
	// DenyLogRate is the meter's rate in packets per second (1..); 0 = 100.
	DenyLogRate uint32
	// RealizeTimeout bounds one event's bundle; 0 = 30 s.
	RealizeTimeout time.Duration
	// PurgeDatapath, when set, runs after every policy event the switch confirmed
	// (an event's bundle or a resynchronisation; not a pod's ADD, which only brings
	// flows for a new port), before the event counts as realized: it drops the
	// datapath's cached flows so that no packet keeps an old verdict. The userspace
	// datapath needs it (OVS 3.1: datapath flows after a conntrack recirculation kept
	// their old actions through revalidation, docs/design.md); cmd/ofsdn-node sets it to
	// ovs-vswitchd's revalidator/purge on netdev bridges. An error is logged; the
	// change stays realized in the tables.
	PurgeDatapath func(context.Context) error
}

// policyTables returns the egress_rules and ingress_rules table ids.
func policyTables() (egress, ingress flows.TableID) {
	egress, _ = flows.StageTable(flows.StageEgressRules)
	ingress, _ = flows.StageTable(flows.StageIngressRules)
	return egress, ingress
}

// policyRealizer turns the agent's changes into flows for one node.
type policyRealizer struct {
	n    *Node
	opts PolicyOptions
	ids  *policy.ConjIDs
	// rec records the conjunction ids by conjunction key (PolicyRuleIDsFile), written by
	// load and then by the runner alone (recordIDs).
	rec *ownerIDs

	// mu guards the realization state below. The runner holds it only while it applies
	// queued changes (CPU work), never across a switch round trip; inspection reads under it.
	mu       sync.Mutex
	set      *flows.PolicyFlowSet
	conv     ruleConverter               // ruleOf with its conversions kept (the runner's rounds)
	iso      map[string]policy.Isolation // pod ns/name → isolation
	attached map[string]*Attachment      // pod ns/name → its attachment
	dirty    bool                        // the store may lag set/iso: resynchronise
	lastErr  error

	// The runner's queue (see run): items in the order the agent computed them.
	qmu   sync.Mutex
	queue []*policyItem
	wake  chan struct{} // 1-buffered: the queue is not empty
	// deferred are the after functions of items whose bundle failed: they run after the
	// next confirmed round (the runner only).
	deferred []func()

	deniedMu   sync.Mutex
	deniedSeen map[string]uint64 // deny flow (cookie+match) → its last counter
	denied     map[string]uint64 // direction → packets, monotonic

	stop chan struct{}
	done chan struct{}
}

func newPolicyRealizer(n *Node, opts PolicyOptions) *policyRealizer {
	if opts.DenyLogRate == 0 {
		opts.DenyLogRate = 100
	}
	if opts.RealizeTimeout == 0 {
		opts.RealizeTimeout = 30 * time.Second
	}
	p := &policyRealizer{
		n: n, opts: opts, set: flows.NewPolicyFlowSet(n.config()), conv: newRuleConverter(),
		iso: map[string]policy.Isolation{}, attached: map[string]*Attachment{},
		deniedSeen: map[string]uint64{}, denied: map[string]uint64{"ingress": 0, "egress": 0},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	opts.Agent.View(func(e *policy.Engine) { p.ids = e.ConjIDs() })
	path := filepath.Join(n.opts.DataDir, PolicyRuleIDsFile)
	rec, err := readOwnerIDs(policyRuleIDsWhat, path, PolicyRuleIDsJournal, false, policyRuleIDMax)
	if err != nil {
		// RecordedPolicyRuleIDs logged it when the daemon started.
		rec = newOwnerIDs(policyRuleIDsWhat, path, PolicyRuleIDsJournal, false, policyRuleIDMax)
		rec.broken = true // the next change writes a snapshot over it
	}
	p.rec = rec
	return p
}

// PolicyRuleIDsFile is the file in NodeOptions.DataDir that records each NetworkPolicy
// conjunction's id (the owner id of its rule flows' cookies, and its conj_id; 1..
// 0xfffffffe) under its key, policy.ConjKey ("namespace/policy ingress[0] TCP/80"), with
// PolicyRuleIDsJournal beside it (the layout of ServicePortIDsFile, ownerids.go):
//
//	{"version":1,"lastAllocated":2,"owners":{"x/deny ingress[0] *":1,"x/web egress[1] TCP/80":2}}
//
// A restarted daemon hands the recorded ids to the policy engine before the informers'
// initial lists are compiled (RecordedPolicyRuleIDs, policy.ConjIDs.Prefer), so every
// rule keeps its ids.
const PolicyRuleIDsFile = "policy-rule-ids.json"

// PolicyRuleIDsJournal is the journal of PolicyRuleIDsFile (one line per id given or freed
// since the snapshot).
const PolicyRuleIDsJournal = "policy-rule-ids.journal"

// policyRuleIDsWhat names the policy rules' record in errors.
const policyRuleIDsWhat = "NetworkPolicy conjunction ids"

// policyRuleIDMax is the largest conjunction id (policy.ConjIDs).
const policyRuleIDMax = 0xfffffffe

// RecordedPolicyRuleIDs returns the conjunction ids recorded in data directory dataDir
// (PolicyRuleIDsFile with its journal applied) by conjunction key, and the last id handed
// out: what a starting daemon gives policy.ConjIDs.Prefer before its informers sync, so
// each rule gets its id back and new rules go on after the last id (never at once an id
// of a rule deleted before the restart). No record is an empty map and 0. An unreadable or
// corrupt record is an error naming the file; the daemon then starts without preferences
// (its rules get new ids) and replaces the record.
func RecordedPolicyRuleIDs(dataDir string) (ids map[string]uint32, lastAllocated uint32, err error) {
	r, err := readOwnerIDs(policyRuleIDsWhat, filepath.Join(dataDir, PolicyRuleIDsFile), PolicyRuleIDsJournal, false, policyRuleIDMax)
	if err != nil {
		return nil, 0, err
	}
	return r.byKey, r.cursor, nil
}

// recordIDs applies the conjunction ids given and freed since the last call
// (ConjIDs.TakeChanges) to the record and writes them (one fsync), before the bundle that
// carries new ids. The ids are a convenience for operators (cookies kept across
// restarts), never needed to clean up, so a record that cannot be written is logged, not
// returned: its next change writes a whole snapshot.
func (p *policyRealizer) recordIDs() {
	changes := p.ids.TakeChanges()
	if len(changes) == 0 {
		return
	}
	keys := make([]string, 0, len(changes))
	for _, c := range changes {
		if c.Free {
			p.rec.release(c.Key)
		} else {
			p.rec.release(c.Key)
			if other, held := p.rec.byID[c.ID]; held {
				p.rec.release(other) // its free is listed later in changes
			}
			p.rec.reserve(c.Key, c.ID)
			p.rec.cursor = c.ID
		}
		keys = append(keys, c.Key)
	}
	if err := p.rec.record(keys...); err != nil {
		p.n.log.Warn("NetworkPolicy conjunction ids not recorded; a restarted daemon may give the rules other ids (their flows are replaced at every restart anyway)", "err", err)
	}
}

func podKeyOf(a *Attachment) string { return a.PodNamespace + "/" + a.PodName }

// localPodOf is the attachment as the policy engine sees it: all its addresses (IPv4,
// and IPv6 on a dual-stack node), in the attachment's order.
func localPodOf(a *Attachment) policy.LocalPod {
	lp := policy.LocalPod{Namespace: a.PodNamespace, Name: a.PodName, OFPort: a.OFPort}
	for _, n := range a.IPs {
		if n == nil {
			continue
		}
		ip := n.IP
		if ip4 := ip.To4(); ip4 != nil {
			ip = ip4
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			lp.IPs = append(lp.IPs, addr)
		}
	}
	return lp
}

// load records the restored attachments in the engine and loads the whole policy state
// into the store (installed by the node's first sync); then it starts receiving the
// agent's changes. It runs before the first sync, after the informers synced.
func (p *policyRealizer) load(restored []*Attachment) {
	a := p.opts.Agent
	for _, att := range restored {
		if att.PodName == "" {
			continue
		}
		lp := localPodOf(att)
		a.Update(func(e *policy.Engine) policy.Changes { return e.SetLocalPod(lp) })
	}
	dual := p.n.config().PodSubnetIPv6 != nil
	a.SetRealizer(p.realize, func(e *policy.Engine) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range e.Conjunctions() {
			p.set.Set(p.conv.rule(c, dual))
		}
		for _, att := range restored {
			if att.PodName == "" {
				continue
			}
			k := podKeyOf(att)
			p.attached[k] = att
			p.iso[k] = e.Isolation(att.PodNamespace, att.PodName)
		}
		p.n.store.Load(ownerPolicy, p.set.Flows())
		for _, att := range restored {
			p.n.store.Load(att.owner(), p.podFlows(att))
		}
		// Nothing is installed with this run's ids yet.
		p.ids.Free(p.ids.Pending()...)
		// Every conjunction of the restored state is compiled: recorded ids no rule
		// claimed are freed, and the record is rewritten whole before the first sync.
		for _, k := range p.ids.DropPreferences() {
			p.rec.release(k)
		}
		p.recordIDs()
		if err := p.rec.save(); err != nil {
			p.n.log.Warn("NetworkPolicy conjunction ids not recorded; a restarted daemon may give the rules other ids", "err", err)
		}
	})
	a.SetVersionGate(func(record func()) { p.enqueue(&policyItem{after: record}) })
	go p.run()
}

// podFlows returns an attachment's flows: forwarding and, by its isolation, default deny.
// A pod without CNI_ARGS names gets no policy flows (it cannot be attached: ADD refuses
// it while policy is on).
func (p *policyRealizer) podFlows(a *Attachment) []flows.Flow {
	cfg := p.n.config()
	fs := flows.PodFlows(cfg, a.flowPod())
	iso, ok := p.iso[podKeyOf(a)]
	if !ok {
		iso = policy.Isolation{Ingress: true, Egress: true} // not known: fail closed
	}
	return append(fs, flows.PodPolicyFlows(cfg, a.flowPod(), iso.Ingress, iso.Egress)...)
}

// ruleOf converts a compiled conjunction to the flows' terms. An IPv4-only node (dual
// false) takes its IPv4 peers only: other nodes' pods may have IPv6 addresses and
// ipBlocks may be IPv6, but no IPv6 reaches its policy stages.
func ruleOf(c *policy.Conjunction, dual bool) flows.PolicyRule {
	r := ruleFrame(c)
	for _, lp := range c.Pods {
		r.Pods = append(r.Pods, podOf(lp))
	}
	r.Peers = peersOf(c.Peers, dual)
	return r
}

// ruleFrame is conjunction c in the flows' terms without its pods and peers: its id,
// direction, "any" flags and ports.
func ruleFrame(c *policy.Conjunction) flows.PolicyRule {
	r := flows.PolicyRule{ID: c.ID, Egress: c.Key.Direction == policy.Egress, AnyPeer: c.AnyPeer, AnyPort: c.AnyPort}
	for _, pm := range c.Ports {
		r.Ports = append(r.Ports, flows.PolicyPort{Proto: uint8(pm.Protocol), Port: pm.Value, Mask: pm.Mask})
	}
	return r
}

// ruleConverter is ruleOf for the runner, keeping what it converted: the pods by ofport
// and, per conjunction id, its peers as last converted. A rule that only gained or lost a
// pod (an ADD or a DEL) then costs no conversion of its other pods and none of its peers:
// the engine hands every version of such a rule the same peers slice (policy's cached
// peers), told apart here by its first element's address and its length. It is used
// under the realizer's mu.
type ruleConverter struct {
	pods  map[uint32]convertedPod   // ofport → the pod as last converted
	peers map[uint32]convertedPeers // conjunction id → its peers as last converted
}

type convertedPod struct {
	ips []netip.Addr
	pod flows.Pod
}

type convertedPeers struct {
	src  *netip.Prefix // the engine's slice (first element), read only
	n    int
	dual bool
	out  []*net.IPNet
}

func newRuleConverter() ruleConverter {
	return ruleConverter{pods: map[uint32]convertedPod{}, peers: map[uint32]convertedPeers{}}
}

// rule returns ruleOf(c, dual), reusing the conversions of c's pods and peers that are
// unchanged. The flows it returns share those conversions: they are read only.
func (rc ruleConverter) rule(c *policy.Conjunction, dual bool) flows.PolicyRule {
	r := ruleFrame(c)
	r.Pods = make([]flows.Pod, 0, len(c.Pods))
	for _, lp := range c.Pods {
		cp, ok := rc.pods[lp.OFPort]
		if !ok || !slices.Equal(cp.ips, lp.IPs) {
			cp = convertedPod{ips: slices.Clone(lp.IPs), pod: podOf(lp)}
			rc.pods[lp.OFPort] = cp
		}
		r.Pods = append(r.Pods, cp.pod)
	}
	if len(c.Peers) > 0 {
		src := &c.Peers[0]
		if cp, ok := rc.peers[c.ID]; ok && cp.src == src && cp.n == len(c.Peers) && cp.dual == dual {
			r.Peers = cp.out
		} else {
			r.Peers = peersOf(c.Peers, dual)
			rc.peers[c.ID] = convertedPeers{src: src, n: len(c.Peers), dual: dual, out: r.Peers}
		}
	} else {
		delete(rc.peers, c.ID)
	}
	return r
}

// forget drops what rc keeps for conjunction id (removed).
func (rc ruleConverter) forget(id uint32) { delete(rc.peers, id) }

// podOf is local pod lp in the flows' terms: its ofport and addresses.
func podOf(lp policy.LocalPod) flows.Pod {
	p := flows.Pod{OFPort: lp.OFPort}
	for _, ip := range lp.IPs {
		p.IPs = append(p.IPs, net.IP(ip.AsSlice()))
	}
	return p
}

// peersOf is peer prefixes ps in the flows' terms, the IPv4 ones alone unless dual.
func peersOf(ps []netip.Prefix, dual bool) []*net.IPNet {
	var out []*net.IPNet
	for _, pr := range ps {
		if !pr.Addr().Is4() && !dual {
			continue
		}
		out = append(out, &net.IPNet{IP: net.IP(pr.Addr().AsSlice()), Mask: net.CIDRMask(pr.Bits(), pr.Addr().BitLen())})
	}
	return out
}

// policyItem is one unit of the runner's work, queued in the agent's order: an event's
// changes, a pod's attach (CNI ADD: its changes, and its flows installed with them) or a
// pod's detach (CNI DEL: from then on no change rewrites its flows).
type policyItem struct {
	ch     policy.Changes
	seen   time.Time   // when the event was received (realization latency); zero: not an API event
	attach *Attachment // recorded as attached before ch applies
	detach *Attachment // forgotten after ch applies
	done   chan error  // attach and detach: the outcome of the bundle that carried the item (1-buffered)
	// after runs once a bundle carrying this item and every earlier one is confirmed (the
	// agent's version gate: an API event's resourceVersion counts as realized then).
	after func()
	// released are the conjunction ids the engine had released when the item was queued
	// (ConjIDs.Pending, read under the agent's lock): once a bundle carrying this item and
	// every earlier one is confirmed, no flow on the switch uses them.
	released []uint32
}

// enqueue appends it to the runner's queue and wakes the runner. It never waits on the
// switch: the agent calls it under its lock.
func (p *policyRealizer) enqueue(it *policyItem) {
	it.released = p.ids.Pending()
	p.qmu.Lock()
	p.queue = append(p.queue, it)
	p.qmu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// batch is what one run of the runner collected: the rule-flow match keys and the
// attached pods whose flows changed, and the conjunctions the items changed, by id, as
// the last item left them (nil: removed), applied to the flow set once per round.
type batch struct {
	keys  map[string]bool
	pods  map[string]bool
	conjs map[uint32]*policy.Conjunction
	order []uint32 // conjs' ids in the order first changed
}

func newBatch() batch {
	return batch{keys: map[string]bool{}, pods: map[string]bool{}, conjs: map[uint32]*policy.Conjunction{}}
}

// applyLocked applies ch's isolation changes and records its conjunction changes in b
// (flushLocked applies them to the flow set). p.mu is held.
func (p *policyRealizer) applyLocked(ch policy.Changes, b *batch) {
	for _, c := range ch.Conjunctions {
		var id uint32
		if c.New != nil {
			id = c.New.ID
		} else {
			id = c.Old.ID
		}
		if _, seen := b.conjs[id]; !seen {
			b.order = append(b.order, id)
		}
		b.conjs[id] = c.New
	}
	for _, ic := range ch.Isolation {
		k := ic.Pod.Key()
		p.iso[k] = ic.New
		b.pods[k] = true
	}
}

// flushLocked applies b's conjunction changes to the flow set, each conjunction once
// with its last state: the set's flows depend only on each id's final rule, so a round
// of 24 ADDs that each grow the same 10 rules recomputes 10 rules, not 240. It records
// the keys whose flow changed in b. p.mu is held.
func (p *policyRealizer) flushLocked(b *batch) {
	dual := len(b.order) > 0 && p.n.config().PodSubnetIPv6 != nil
	for _, id := range b.order {
		var keys []string
		if c := b.conjs[id]; c != nil {
			keys = p.set.Set(p.conv.rule(c, dual))
		} else {
			keys = p.set.Remove(id)
			p.conv.forget(id)
		}
		for _, k := range keys {
			b.keys[k] = true
		}
	}
	b.conjs, b.order = map[uint32]*policy.Conjunction{}, nil
}

// updatesLocked returns the store updates that realize b: one for the rule flows whose
// keys changed (added, replaced or deleted, as the set holds them now) and, per attached
// pod in b, its whole flows. With full, every rule flow and every attached pod instead
// (a resynchronisation). p.mu is held.
func (p *policyRealizer) updatesLocked(b batch, full bool) []OwnerUpdate {
	var ups []OwnerUpdate
	if full {
		ups = append(ups, OwnerUpdate{Owner: ownerPolicy, Replace: true, Flows: p.set.Flows()})
		keys := make([]string, 0, len(p.attached))
		for k := range p.attached {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			a := p.attached[k]
			ups = append(ups, OwnerUpdate{Owner: a.owner(), Replace: true, Flows: p.podFlows(a)})
		}
		return ups
	}
	keys := make([]string, 0, len(b.keys))
	for k := range b.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pol := OwnerUpdate{Owner: ownerPolicy}
	for _, k := range keys {
		if f, ok := p.set.Flow(k); ok {
			pol.Flows = append(pol.Flows, f)
		} else {
			pol.Delete = append(pol.Delete, k)
		}
	}
	if len(pol.Flows)+len(pol.Delete) > 0 {
		ups = append(ups, pol)
	}
	pods := make([]string, 0, len(b.pods))
	for k := range b.pods {
		pods = append(pods, k)
	}
	sort.Strings(pods)
	for _, k := range pods {
		if a := p.attached[k]; a != nil {
			ups = append(ups, OwnerUpdate{Owner: a.owner(), Replace: true, Flows: p.podFlows(a)})
		}
	}
	return ups
}

// realize is the agent's Realizer: it queues the event's changes for the runner.
func (p *policyRealizer) realize(ch policy.Changes, seen time.Time) {
	p.enqueue(&policyItem{ch: ch, seen: seen})
}

// maxPolicyBatch bounds how many queued items one bundle carries.
const maxPolicyBatch = 256

// policyRound is one round of the runner: its items, the store change realizing them and,
// once its commit ends, the outcome.
type policyRound struct {
	items  []*policyItem
	full   bool // a resynchronisation of the whole policy state
	events bool // carries API events: purge the datapath once confirmed
	nflows int
	prep   *switchstate.Prepared // nil: nothing to send
	cancel context.CancelFunc

	tApply, tApplied, tPrepared, tCommitted, tPurged time.Time
	err                                              error         // set before done is closed
	done                                             chan struct{} // closed when the commit (and purge) ended
}

// run is the runner: the one goroutine that realizes policy. Each round takes what is
// queued (up to maxPolicyBatch items, in order), applies it to the flow set under p.mu,
// and sends the difference as ONE bundle, outside the lock. So API events are coalesced
// (a burst of N events costs one bundle, not N) and concurrent ADDs share a bundle instead
// of queueing behind each other's switch round trips.
//
// Rounds are pipelined, two deep: while round k's commit is in flight, round k+1 is
// applied and its bundle opened with all its mods added (switchstate.Store.Prepare, the
// difference taken from the state round k leaves), and it is committed only once round
// k's commit is confirmed; if round k failed, round k+1's bundle is discarded and sent
// again as a full resynchronisation. The switch answers round k+1's adds in the same pass
// as round k's commit, so a change waits for the commit in flight and one more round trip,
// not two. A failed bundle marks the realizer dirty; while dirty, each round (and a tick
// every second) resynchronises the whole policy state.
func (p *policyRealizer) run() {
	defer close(p.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var inflight *policyRound
	for {
		var committed <-chan struct{}
		if inflight != nil {
			committed = inflight.done
		}
		select {
		case <-p.stop:
			if inflight != nil {
				<-inflight.done
				p.finish(inflight)
			}
			p.failQueued(ovsUnavailable(errors.New("network policy: the node is closing")))
			return
		case <-p.wake:
		case <-t.C:
		case <-committed:
			p.finish(inflight)
			inflight = nil
		}
		for {
			var more bool
			inflight, more = p.round(inflight)
			if !more {
				break
			}
		}
	}
}

// round runs one round of the runner with inflight (nil: none) the round whose commit is
// in flight; it returns the round in flight after it (this one, inflight if there was
// nothing to do, or nil) and whether items are still queued.
func (p *policyRealizer) round(inflight *policyRound) (*policyRound, bool) {
	p.qmu.Lock()
	items := p.queue
	if len(items) > maxPolicyBatch {
		items = items[:maxPolicyBatch]
	}
	p.queue = p.queue[len(items):]
	more := len(p.queue) > 0
	p.qmu.Unlock()

	p.mu.Lock()
	r := &policyRound{items: items, tApply: time.Now(), full: p.dirty, done: make(chan struct{})}
	if len(items) == 0 && !r.full {
		p.mu.Unlock()
		return inflight, false
	}
	b := newBatch()
	for _, it := range items {
		if a := it.attach; a != nil {
			k := podKeyOf(a)
			p.attached[k] = a
			b.pods[k] = true // its flows go with the changes it brings
		}
		p.applyLocked(it.ch, &b)
		if a := it.detach; a != nil {
			k := podKeyOf(a)
			if cur := p.attached[k]; cur == a || (cur != nil && cur.key() == a.key()) {
				delete(p.attached, k)
				delete(p.iso, k)
				delete(b.pods, k) // its own flows are DEL's to delete
				delete(p.conv.pods, a.OFPort)
			}
		}
		r.events = r.events || !it.seen.IsZero()
	}
	p.flushLocked(&b)
	ups := p.updatesLocked(b, r.full)
	p.mu.Unlock()
	r.tApplied = time.Now()

	p.recordIDs() // new ids recorded before any flow carries them
	ctx, cancel := context.WithTimeout(p.n.runCtx, p.opts.RealizeTimeout)
	r.cancel = cancel
	var after *switchstate.Prepared
	if inflight != nil {
		after = inflight.prep
	}
	prep, err := p.n.store.Prepare(ctx, ups, after)
	err = ovsUnavailable(err)
	if inflight != nil && prep == nil && err == nil && !r.full {
		// Nothing to send (an API event that changed no flow: its version gate's record):
		// its items complete with the round in flight, whose commit is all they wait
		// for, and the runner goes on preparing the next round instead of waiting for that
		// commit.
		cancel()
		inflight.items = append(inflight.items, items...)
		return inflight, more
	}
	if inflight != nil {
		<-inflight.done
		p.finish(inflight)
		if inflight.err != nil {
			// This round's difference was taken from the state the failed round would have
			// left: give it up and send the whole policy state instead.
			if prep != nil {
				prep.Discard()
			}
			p.mu.Lock()
			r.full = true
			ups = p.updatesLocked(newBatch(), true)
			p.mu.Unlock()
			prep, err = p.n.store.Prepare(ctx, ups, nil)
			err = ovsUnavailable(err)
		}
	}
	r.tPrepared = time.Now()
	for _, u := range ups {
		r.nflows += len(u.Flows) + len(u.Delete)
	}
	r.prep = prep
	if err != nil || prep == nil {
		r.err = err
		r.tCommitted = time.Now()
		if err == nil && (r.events || r.full) {
			p.purge(ctx)
		}
		r.tPurged = time.Now()
		cancel()
		close(r.done)
		p.finish(r)
		return nil, more
	}
	go func() {
		r.err = ovsUnavailable(prep.Commit(ctx))
		r.tCommitted = time.Now()
		if r.err == nil && (r.events || r.full) {
			p.purge(ctx)
		}
		r.tPurged = time.Now()
		cancel()
		close(r.done)
	}()
	return r, more
}

// finish completes a round whose commit ended (r.done closed), in the order the rounds
// were taken: the realizer's state, the ids the switch no longer uses, the version gate's
// records, the hooks and the waiting attaches and detaches (the runner only).
func (p *policyRealizer) finish(r *policyRound) {
	<-r.done
	err, items := r.err, r.items
	if p.n.log.Enabled(context.Background(), slog.LevelDebug) {
		p.n.log.Debug("network policy round", "items", len(items), "full", r.full, "flows", r.nflows,
			"apply", r.tApplied.Sub(r.tApply), "prepare", r.tPrepared.Sub(r.tApplied),
			"commit", r.tCommitted.Sub(r.tPrepared), "purge", r.tPurged.Sub(r.tCommitted), "err", err)
	}
	p.mu.Lock()
	p.lastErr = err
	if err != nil {
		p.dirty = true
	} else {
		p.dirty = false
		// Ids released by items still queued may still be on the switch: free only what
		// was released when the last item of this bundle was queued.
		if len(items) > 0 {
			p.ids.Free(items[len(items)-1].released...)
		}
	}
	p.mu.Unlock()
	if err != nil {
		p.n.log.Warn("network policy changes not on the switch yet; retrying with a full resynchronisation",
			"items", len(items), "err", err)
	} else if r.full {
		p.n.log.Info("network policy flows resynchronised", "rule_flows", p.set.Len(), "pods", len(p.attached))
	}
	for _, it := range items {
		if it.after != nil {
			p.deferred = append(p.deferred, it.after)
		}
	}
	if err == nil {
		for _, f := range p.deferred {
			f()
		}
		p.deferred = nil
	}
	for _, it := range items {
		if h := p.n.opts.Hooks.PolicyRealize; h != nil && !it.seen.IsZero() {
			h(time.Since(it.seen), err)
		}
		if it.done != nil {
			it.done <- err
		}
	}
}

// failQueued completes every queued attach and detach with err (the node closes).
func (p *policyRealizer) failQueued(err error) {
	p.qmu.Lock()
	items := p.queue
	p.queue = nil
	p.qmu.Unlock()
	for _, it := range items {
		if it.done != nil {
			it.done <- err
		}
	}
}

// purge runs opts.PurgeDatapath after a confirmed change (the runner only).
func (p *policyRealizer) purge(ctx context.Context) {
	if p.opts.PurgeDatapath == nil {
		return
	}
	if err := p.opts.PurgeDatapath(ctx); err != nil {
		p.n.log.Warn("network policy: datapath flows not purged after a change; cached flows may keep their old verdict until they idle out", "err", err)
	}
}

// close stops delivery from the agent and the runner; queued attaches and detaches fail.
func (p *policyRealizer) close() {
	p.opts.Agent.SetRealizer(nil, nil)
	p.opts.Agent.SetVersionGate(nil)
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// errNoPodName is returned by ADD when policy is on and CNI_ARGS do not name the pod.
var errNoPodName = errors.New("network policy is on: CNI_ARGS must name the pod (K8S_POD_NAMESPACE and K8S_POD_NAME), as the kubelet does")

// waitPod waits (bounded by ctx) until the Pod of req is known to the informers.
func (p *policyRealizer) waitPod(ctx context.Context, req PodRequest) error {
	if req.PodNamespace == "" || req.PodName == "" {
		return errNoPodName
	}
	return p.opts.Agent.WaitPod(ctx, req.PodNamespace, req.PodName)
}

// attach records a's pod in the agent and installs its forwarding flows, its default-deny
// flows and the rule flows it brings, in one bundle (the runner's, shared with whatever
// else is queued). It returns once that bundle is confirmed, or with its error, or when
// ctx ends; on error nothing of it is installed for good and the agent has forgotten the
// pod (the caller's undo still detaches it, which removes any flows the runner put in).
func (p *policyRealizer) attach(ctx context.Context, a *Attachment) error {
	if a.PodNamespace == "" || a.PodName == "" {
		return errNoPodName
	}
	return p.opts.Agent.Attach(ctx, localPodOf(a), func(ch policy.Changes) func() error {
		it := &policyItem{ch: ch, attach: a, done: make(chan error, 1)}
		p.enqueue(it)
		return func() error {
			select {
			case err := <-it.done:
				return err
			case <-p.done:
				return ovsUnavailable(errors.New("network policy: the node is closing"))
			case <-ctx.Done():
				return fmt.Errorf("network policy flows of pod %s/%s not confirmed by the switch: %w", a.PodNamespace, a.PodName, ctx.Err())
			}
		}
	})
}

// attachedOf returns the attachment the policy holds for pod key ("namespace/name"),
// nil if none.
func (p *policyRealizer) attachedOf(key string) *Attachment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attached[key]
}

// detach forgets a's pod in the agent (its rule flows go) and waits until the runner has
// forgotten it, so that no later policy change rewrites its flows: DEL deletes them
// next. The wait is bounded by RealizeTimeout; a failed bundle still forgets the pod (the
// realizer resynchronises the rule flows).
func (p *policyRealizer) detach(a *Attachment) {
	if a.PodNamespace == "" || a.PodName == "" {
		return
	}
	k := podKeyOf(a)
	p.mu.Lock()
	cur := p.attached[k]
	p.mu.Unlock()
	if cur != nil && cur != a && cur.key() != a.key() {
		return // the pod's name now belongs to another attachment (a new sandbox)
	}
	it := &policyItem{detach: a, done: make(chan error, 1)}
	p.opts.Agent.Detach(a.PodNamespace, a.PodName, func(ch policy.Changes) {
		it.ch = ch
		p.enqueue(it) // under the agent's lock: in order with every other change
	})
	select {
	case <-it.done:
	case <-p.done: // the runner has stopped: nothing rewrites the pod's flows any more
	case <-time.After(p.opts.RealizeTimeout):
		p.n.log.Warn("network policy: detaching a pod waited past realizeTimeout; its flows are deleted anyway", "pod", k)
	}
}

// PolicyStatus describes the node's policy enforcement, for inspection and metrics.
type PolicyStatus struct {
	// Synced is true once the informers have synced.
	Synced bool
	// Pods, Namespaces, Policies are the model's sizes.
	Pods, Namespaces, Policies int
	// Conjunctions are the compiled rules (parts of rules) with local pods, or with pods
	// scheduled to this node and not attached yet (policy.Engine.SetNode).
	Conjunctions int
	// RuleFlows is the number of rule flows by direction ("ingress", "egress").
	RuleFlows map[string]int
	// Versions is, per kind, the highest API resourceVersion realized (policy.Agent.Versions).
	Versions map[string]uint64
	// Dirty is true while the switch may lag (a failed change being retried).
	Dirty bool
	// LastError is the last realization error, "" if the last one succeeded.
	LastError string
}

// PolicyStatus returns the node's policy state, or nil when policy is off.
func (n *Node) PolicyStatus() *PolicyStatus {
	p := n.policy
	if p == nil {
		return nil
	}
	st := &PolicyStatus{RuleFlows: map[string]int{"ingress": 0, "egress": 0}}
	select {
	case <-p.opts.Agent.Synced():
		st.Synced = true
	default:
	}
	p.opts.Agent.View(func(e *policy.Engine) {
		st.Pods, st.Namespaces, st.Policies = e.Counts()
		st.Conjunctions = len(e.Conjunctions())
	})
	st.Versions = p.opts.Agent.Versions()
	p.mu.Lock()
	defer p.mu.Unlock()
	egress, ingress := policyTables()
	st.RuleFlows["ingress"], st.RuleFlows["egress"] = p.set.LenIn(ingress), p.set.LenIn(egress)
	st.Dirty = p.dirty
	if p.lastErr != nil {
		st.LastError = p.lastErr.Error()
	}
	return st
}

// PodPolicy is one local pod's policy view, for inspection.
type PodPolicy struct {
	// Namespace and Name identify the pod.
	Namespace, Name string
	// Ingress and Egress say whether it is isolated in each direction.
	Ingress, Egress bool
	// Policies are the policies selecting it.
	Policies []policy.PolicyRef
	// Rules are the compiled rules (conjunctions) that apply to it, with their flows.
	Rules []PodRule
	// Deny are the texts (flows.Flow.String) of its default-deny flows by direction
	// ("ingress", "egress"), for the directions it is isolated in: one per IP family
	// (IPv4, and IPv6 on a dual-stack node).
	Deny map[string][]string
}

// PodRule is one conjunction applying to a pod, with the flows realizing it.
type PodRule struct {
	// Rule names the policy rule ("ns/policy ingress[0]") and Group its port group.
	Rule, Group string
	// ConjID is the conjunction id.
	ConjID uint32
	// Flows are the flows the rule contributes to (clauses and the conj_id flow).
	Flows []flows.Flow
	// Allow are the texts of the flows whose packets the rule let through: its conj_id
	// flow, or for a rule on the pod alone its allow flow.
	Allow []string
}

// PodPolicies returns the policy view of every attached pod, sorted; nil when policy is
// off.
func (n *Node) PodPolicies() []PodPolicy {
	p := n.policy
	if p == nil {
		return nil
	}
	var out []PodPolicy
	byPod := map[string][]*policy.Conjunction{} // local pod key → the conjunctions naming it
	refs := map[string][]policy.PolicyRef{}
	p.opts.Agent.View(func(e *policy.Engine) {
		for _, c := range e.Conjunctions() {
			for _, lp := range c.Pods {
				byPod[lp.Key()] = append(byPod[lp.Key()], c)
			}
		}
		for _, lp := range e.LocalPods() {
			refs[lp.Key()] = e.SelectingPolicies(lp.Namespace, lp.Name)
		}
	})
	// Under the realizer's lock only copies (no flow is formatted there): the runner
	// needs the lock between bundles, and formatting thousands of rule flows takes long.
	type podCopy struct {
		a     *Attachment
		iso   policy.Isolation
		rules []PodRule
	}
	var pods []podCopy
	p.mu.Lock()
	for k, a := range p.attached {
		pc := podCopy{a: a, iso: p.iso[k]}
		for _, c := range byPod[k] {
			pc.rules = append(pc.rules, PodRule{Rule: c.Key.RuleKey.String(), Group: c.Key.Group, ConjID: c.ID, Flows: p.set.RuleFlowsAnyOrder(c.ID)})
		}
		pods = append(pods, pc)
	}
	p.mu.Unlock()
	cfg := p.n.config()
	_, ingress := policyTables()
	for _, pc := range pods {
		a, iso := pc.a, pc.iso
		pp := PodPolicy{Namespace: a.PodNamespace, Name: a.PodName, Ingress: iso.Ingress, Egress: iso.Egress, Policies: refs[podKeyOf(a)]}
		for _, r := range pc.rules {
			r.Flows = flows.SortByText(r.Flows)
			for _, f := range r.Flows {
				if _, isGoto := f.Actions[0].(flows.GotoTable); isGoto && len(f.Actions) == 1 {
					r.Allow = append(r.Allow, f.String()) // the conj_id flow, or an allow flow
				}
			}
			pp.Rules = append(pp.Rules, r)
		}
		pp.Deny = map[string][]string{}
		for _, f := range flows.PodPolicyFlows(cfg, a.flowPod(), iso.Ingress, iso.Egress) {
			dir := "egress"
			if f.Table == ingress {
				dir = "ingress"
			}
			pp.Deny[dir] = append(pp.Deny[dir], f.String())
		}
		out = append(out, pp)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

// PodIsolation returns the NetworkPolicy isolation of the pod namespace/name and whether
// the node enforces NetworkPolicy and has the pod attached.
func (n *Node) PodIsolation(namespace, name string) (iso policy.Isolation, ok bool) {
	p := n.policy
	if p == nil {
		return iso, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := namespace + "/" + name
	if p.attached[k] == nil {
		return iso, false
	}
	return p.iso[k], true
}

// PolicyCounters dumps the egress_rules and ingress_rules tables (OFPMP_FLOW, OpenFlow
// 1.3.5 §7.3.5.2) and returns the packet counters of the daemon's desired flows there,
// by the flow's text (flows.Flow.String()). Flows the switch lacks are absent.
func (n *Node) PolicyCounters(ctx context.Context) (map[string]uint64, error) {
	egress, ingress := policyTables()
	desired := map[string]string{}
	for _, f := range n.store.All() {
		if f.Table == egress || f.Table == ingress {
			desired[switchstate.FlowKey(f)] = f.String()
		}
	}
	out := map[string]uint64{}
	for _, t := range []flows.TableID{egress, ingress} {
		stats, err := n.sw.DumpFlows(ctx, uint8(t), 0, 0)
		if err != nil {
			return nil, fmt.Errorf("dump the %s flows: %w", t.Name(), err)
		}
		for _, s := range stats {
			if text, ok := desired[switchstate.StatsKey(s)]; ok {
				out[text] = s.PacketCount
			}
		}
	}
	return out, nil
}

// PolicyDenied returns the packets dropped by default-deny flows since the daemon started,
// by direction ("ingress", "egress"), monotonic: it dumps the two rule stages and adds
// each deny flow's counter growth since the last call (a flow seen again with a lower
// counter was re-created: its whole counter counts). nil when policy is off. On a dump
// error it returns the totals so far with the error.
func (n *Node) PolicyDenied(ctx context.Context) (map[string]uint64, error) {
	p := n.policy
	if p == nil {
		return nil, nil
	}
	p.deniedMu.Lock()
	defer p.deniedMu.Unlock()
	total := func() map[string]uint64 {
		return map[string]uint64{"ingress": p.denied["ingress"], "egress": p.denied["egress"]}
	}
	egress, ingress := policyTables()
	for _, t := range []flows.TableID{egress, ingress} {
		stats, err := n.sw.DumpFlows(ctx, uint8(t), 0, 0)
		if err != nil {
			return total(), fmt.Errorf("dump the %s flows: %w", t.Name(), err)
		}
		dir := "egress"
		if t == ingress {
			dir = "ingress"
		}
		for _, s := range stats {
			if s.Priority != flows.PriorityPolicyDeny || flows.Cookie(s.Cookie).Owner() != flows.OwnerPod {
				continue
			}
			k := switchstate.StatsKey(s)
			last := p.deniedSeen[k]
			if s.PacketCount >= last {
				p.denied[dir] += s.PacketCount - last
			} else {
				p.denied[dir] += s.PacketCount
			}
			p.deniedSeen[k] = s.PacketCount
		}
	}
	return total(), nil
}

// String describes the realizer for logs.
func (p *policyRealizer) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("network policy: %d rule flows, %d attached pods, dirty=%v", p.set.Len(), len(p.attached), p.dirty)
}
