package policy

// The incremental engine.
//
// State: every pod, namespace and policy the informers report (the model), the pods
// attached to this node (local pods: address and ofport), and per rule the set of pods its
// selector peers select (its members) and its compiled conjunctions.
//
// Each event re-evaluates only what it can change, then recompiles only the rules marked
// dirty and diffs their conjunctions against the previous ones:
//   - a pod (labels, IPs, ports, phase): one selector evaluation per rule to update
//     membership; if the pod is local, the policies of its namespace re-evaluate whether
//     they select it;
//   - a namespace's labels: the rules with a namespace selector re-evaluate the pods of
//     that namespace;
//   - a policy: that policy's rules are rebuilt (a scan of the pods of the namespaces its
//     peers can select) and diffed against its old rules;
//   - a local pod attached or detached: as a pod change, plus the selection by the
//     policies of its namespace.
//
// Pods the API schedules to this node (SetNode) count for the rules of the policies
// selecting them before their ADD: a rule is compiled as soon as it has such a pod, with
// its peer and port clauses and only the attached pods in its pod clause, so the ADD
// changes the pod clause alone.
//
// A conjunction keeps its id while it exists (same rule, same port group), so a change of
// its clauses touches only the clause flows that differ.

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Engine holds the model and the compiled rules of one node. It is not safe for
// concurrent use: the Agent serialises events.
type Engine struct {
	ids        *ConjIDs
	pods       map[string]*podState
	byNS       map[string]map[string]*podState // namespace → pod key → pod
	namespaces map[string]*Namespace
	policies   map[string]*policyState            // policy key → state
	polByNS    map[string]map[string]*policyState // namespace → policy key → state
	local      map[string]LocalPod
	iso        map[string]Isolation // local pod key → isolation last reported

	// node is this node's name (SetNode; "" = none): pods the API schedules here
	// (spec.nodeName) count for their policies' rules before their CNI ADD attaches them.
	// here holds their keys (scheduledHere).
	node string
	here map[string]bool

	// Rules with per-pod membership, indexed so that a pod event looks only at the rules
	// that can select it: scoped[ns] holds rules whose peers are podSelectors of
	// namespace ns; global holds rules with a namespace selector (or any address).
	scoped map[string]map[*ruleState]*policyState
	global map[*ruleState]*policyState
	// nsGlobal[ns] caches the rules of global that can select a pod of namespace ns
	// (mayMatchNamespace), so that a pod event looks at those alone: a pod is a member
	// only of rules among them. An entry is dropped when its Namespace changes; the
	// whole cache when global does.
	nsGlobal map[string]map[*ruleState]*policyState

	// deferred: compile nothing, only mark rules (the initial informer sync); Flush
	// compiles them.
	deferred bool
	pending  map[*ruleState]*policyState
	// pendingPods holds the rules marked meanwhile by their pods alone (compilePods),
	// with the pods; a rule also in pending is compiled whole.
	pendingPods podMarks
}

type podState struct {
	pod      *Pod         // nil while only the attachment is known
	localIPs []netip.Addr // the attachment's addresses (known before status.podIPs is)
}

// ips returns the pod's addresses (both families): status IPs plus the local attachment's. The
// result may share the pod's or the attachment's slice: callers only read it (a rule's
// compilation reads every member's, so the common cases allocate nothing).
func (s *podState) ips() []netip.Addr {
	switch {
	case len(s.localIPs) == 0 && s.pod != nil:
		return s.pod.IPs
	case len(s.localIPs) == 0:
		return nil
	case s.pod == nil || len(s.pod.IPs) == 0:
		return s.localIPs
	}
	var out []netip.Addr
	if s.pod != nil {
		out = append(out, s.pod.IPs...)
	}
	for _, ip := range s.localIPs {
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// peerEligible: a pod can be a peer when it is known to the API, not on the host network,
// not terminated, and has an address.
func (s *podState) peerEligible() bool {
	return s != nil && s.pod != nil && !s.pod.HostNetwork && !s.pod.Terminal && len(s.ips()) > 0
}

type policyState struct {
	p       *Policy
	applied map[string]bool // keys of the placed pods (attached or scheduled here) the policy selects
	rules   []*ruleState
}

type ruleState struct {
	ps   *policyState
	key  RuleKey
	rule *Rule
	// selects is true when the rule needs per-pod membership: it has selector peers, or
	// it is an egress rule with named ports and ipBlock peers or no peers (a named port
	// resolves against the destination pod, so the pods inside those addresses are
	// members).
	selects bool
	// namedEgress: an egress rule with named ports.
	namedEgress bool
	members     map[string]bool // pod key → member
	conjs       map[string]*Conjunction
	// peers caches build's sorted peer prefixes of an ingress or any-port rule (the
	// members' addresses and the ipBlocks), valid while peersOK: a change of the rule's
	// pods alone (an ADD attaching one) reuses it. Every change of membership or of a
	// member's addresses clears peersOK (updateMembership, namespaceChanged,
	// scanMembers). Shared, read only, by the conjunctions built from it.
	peers   []netip.Prefix
	peersOK bool
	// ports caches the rule's ports as build groups pods by them (rulePortsOf); the rule
	// never changes for the life of its state.
	ports *rulePorts
}

// rulePorts is a rule's ports as build needs them: the numeric ones, the named ones and,
// for an ingress rule, the numeric ones sorted with their signature (the port group of
// every pod that resolves none of the named ports).
type rulePorts struct {
	numeric   []PortMatch
	named     []Port
	numSorted []PortMatch
	numSig    string
}

// rulePortsOf returns r's rulePorts, computing them the first time.
func rulePortsOf(r *ruleState) *rulePorts {
	if r.ports != nil {
		return r.ports
	}
	rp := &rulePorts{}
	for _, p := range r.rule.Ports {
		rp.numeric = append(rp.numeric, p.numericMatches()...)
		if p.Name != "" && !p.Invalid {
			rp.named = append(rp.named, p)
		}
	}
	if !r.rule.AllPorts && len(rp.numeric) > 0 {
		rp.numSorted = sortPorts(append([]PortMatch(nil), rp.numeric...))
		rp.numSig = portSig(rp.numSorted)
	}
	r.ports = rp
	return rp
}

// podGroup returns the port group and ports of pod k in ingress or any-port rule r, and
// false when the pod has none of the rule's ports. Named ports resolve against the pod's
// container ports; a pod that resolves none of them has the numeric ports alone (sorted
// and signed once per rule: a rule's M pods would otherwise each sort and format the same
// set).
// The pod, namespace/name, is looked up only when the rule has named ports.
func (e *Engine) podGroup(r *ruleState, namespace, name string) (string, []PortMatch, bool) {
	if r.rule.AllPorts {
		return "*", nil, true
	}
	rp := rulePortsOf(r)
	var resolved []PortMatch
	if len(rp.named) > 0 {
		if st := e.pods[nsKey(namespace, name)]; st != nil && st.pod != nil {
			for _, n := range rp.named {
				if m, ok := n.resolve(st.pod.Ports); ok {
					resolved = append(resolved, m)
				}
			}
		}
	}
	switch {
	case len(resolved) == 0 && len(rp.numSorted) == 0:
		return "", nil, false // this pod has none of the rule's ports
	case len(resolved) == 0:
		return rp.numSig, rp.numSorted, true
	default:
		ports := sortPorts(append(append([]PortMatch(nil), rp.numeric...), resolved...))
		return portSig(ports), ports, true
	}
}

// localPodLess orders a conjunction's pods: by addresses, then by key.
func localPodLess(a, b LocalPod) int {
	if c := slices.CompareFunc(a.IPs, b.IPs, netip.Addr.Compare); c != 0 {
		return c
	}
	return strings.Compare(a.Key(), b.Key())
}

// NewEngine returns an empty engine allocating conjunction ids from ids (nil = a new
// allocator).
func NewEngine(ids *ConjIDs) *Engine {
	if ids == nil {
		ids = NewConjIDs()
	}
	return &Engine{
		ids: ids, pods: map[string]*podState{}, byNS: map[string]map[string]*podState{},
		namespaces: map[string]*Namespace{}, policies: map[string]*policyState{},
		polByNS: map[string]map[string]*policyState{}, local: map[string]LocalPod{},
		iso: map[string]Isolation{}, scoped: map[string]map[*ruleState]*policyState{},
		global: map[*ruleState]*policyState{}, pending: map[*ruleState]*policyState{}, pendingPods: podMarks{},
		nsGlobal: map[string]map[*ruleState]*policyState{}, here: map[string]bool{},
	}
}

// SetNode names this node (its Node object's name, as in the pods' spec.nodeName). Call it
// before the first event. A pod the API schedules to this node (not on the host network,
// not terminated) then counts for the rules of the policies selecting it before its CNI
// ADD attaches it: each such rule's conjunction exists with its peer and port clauses and
// no pod clause for it (a conjunction with an empty pod clause matches nothing, ovs-fields(7)
// "Conjunctive Match Fields"), so the ADD brings only the pod's own clause flows and not
// the rule's N+K peer and port flows (bench/RESULTS.md "Policy-on ADD: the rules' clauses
// before the pods"). Without a name (""), only attached pods count, as before.
func (e *Engine) SetNode(name string) {
	e.node = name
	e.here = map[string]bool{}
	for k, st := range e.pods {
		if e.scheduledHere(st) {
			e.here[k] = true
		}
	}
}

// scheduledHere reports whether st's pod is one the API has scheduled to this node and a
// CNI ADD may attach: spec.nodeName is this node's, not on the host network, not
// terminated.
func (e *Engine) scheduledHere(st *podState) bool {
	return e.node != "" && st != nil && st.pod != nil && st.pod.NodeName == e.node && !st.pod.HostNetwork && !st.pod.Terminal
}

// placed reports whether pod k (state st) counts for its policies' rules: attached, or
// scheduled here.
func (e *Engine) placed(k string, st *podState) bool {
	_, local := e.local[k]
	return local || e.scheduledHere(st)
}

// Defer makes the engine record events without compiling rules until Flush: a bulk load
// (the informers' initial lists) then costs one compilation per rule instead of one per
// event. Changes returned meanwhile hold isolation only.
func (e *Engine) Defer() { e.deferred = true }

// Flush compiles every rule marked while deferred and ends deferral. It returns the
// conjunctions that changed.
func (e *Engine) Flush() Changes {
	e.deferred = false
	var ch Changes
	for r, ps := range e.pending {
		ch.Conjunctions = append(ch.Conjunctions, e.compile(ps, r)...)
	}
	for r, keys := range e.pendingPods {
		if _, whole := e.pending[r]; !whole {
			ch.Conjunctions = append(ch.Conjunctions, e.compilePods(r.ps, r, keys)...)
		}
	}
	e.pending, e.pendingPods = map[*ruleState]*policyState{}, podMarks{}
	sortChanges(ch.Conjunctions)
	return ch
}

// ConjIDs returns the engine's conjunction id allocator.
func (e *Engine) ConjIDs() *ConjIDs { return e.ids }

func nsKey(ns, name string) string { return ns + "/" + name }

// HasPod reports whether the API has reported pod namespace/name.
func (e *Engine) HasPod(namespace, name string) bool {
	s := e.pods[nsKey(namespace, name)]
	return s != nil && s.pod != nil
}

// Pod returns the model's pod namespace/name, or nil.
func (e *Engine) Pod(namespace, name string) *Pod {
	if s := e.pods[nsKey(namespace, name)]; s != nil {
		return s.pod
	}
	return nil
}

// PodByIP returns the model's pod that has ip among its addresses (status.podIPs or its
// local attachment's), preferring one that can be a peer (not host network, not
// terminated), or nil. It scans every pod: O(pods), for occasional lookups (the
// deny log, rate-limited by the switch), not per packet.
func (e *Engine) PodByIP(ip netip.Addr) *Pod {
	var fallback *Pod
	for _, s := range e.pods {
		if s.pod == nil {
			continue
		}
		for _, a := range s.ips() {
			if a != ip {
				continue
			}
			if s.peerEligible() {
				return s.pod
			}
			fallback = s.pod
		}
	}
	return fallback
}

// Counts returns how many pods, namespaces and policies the model holds.
func (e *Engine) Counts() (pods, namespaces, policies int) {
	n := 0
	for _, s := range e.pods {
		if s.pod != nil {
			n++
		}
	}
	return n, len(e.namespaces), len(e.policies)
}

// UpsertPod records an added or updated Pod.
func (e *Engine) UpsertPod(p *Pod) Changes {
	k := p.Key()
	old := e.pods[k]
	// The engine keeps its own copy: the next event is compared with it (updateMembership's
	// fast path, samePeerData, the ports), and a caller may change its maps and slices in
	// place (the upstream cases' harness relabels a pod that way).
	cp := *p
	cp.Labels, cp.IPs, cp.Ports = maps.Clone(p.Labels), slices.Clone(p.IPs), slices.Clone(p.Ports)
	st := &podState{pod: &cp}
	if old != nil {
		st.localIPs = old.localIPs
	}
	e.setPod(k, p.Namespace, st)
	return e.podChanged(k, old, st)
}

// DeletePod records a deleted Pod. A local pod stays attached (it is isolated both ways
// until it is detached: its labels are no longer known).
func (e *Engine) DeletePod(namespace, name string) Changes {
	k := nsKey(namespace, name)
	old := e.pods[k]
	if old == nil || old.pod == nil {
		return Changes{}
	}
	var st *podState
	if len(old.localIPs) > 0 {
		st = &podState{localIPs: old.localIPs}
	}
	e.setPod(k, namespace, st)
	return e.podChanged(k, old, st)
}

func (e *Engine) setPod(k, ns string, st *podState) {
	if e.scheduledHere(st) {
		e.here[k] = true
	} else {
		delete(e.here, k)
	}
	if st == nil {
		delete(e.pods, k)
		if m := e.byNS[ns]; m != nil {
			delete(m, k)
			if len(m) == 0 {
				delete(e.byNS, ns)
			}
		}
		return
	}
	e.pods[k] = st
	m := e.byNS[ns]
	if m == nil {
		m = map[string]*podState{}
		e.byNS[ns] = m
	}
	m[k] = st
}

// SetLocalPod records that pod namespace/name is attached to this node with address ip
// and bridge port ofport (an ADD, or a daemon restart finding the attachment). Its
// address counts as the pod's even before the API reports it.
func (e *Engine) SetLocalPod(lp LocalPod) Changes {
	k := lp.Key()
	prevLocal, wasLocal := e.local[k]
	e.local[k] = lp
	old := e.pods[k]
	st := &podState{localIPs: slices.Clone(lp.IPs)}
	if old != nil {
		st.pod = old.pod
	}
	e.setPod(k, lp.Namespace, st)
	dirty, marks := map[*ruleState]bool{}, podMarks{}
	e.updateMembership(k, old, st, dirty)
	for _, ps := range e.polByNS[lp.Namespace] {
		sel := st.pod != nil && ps.p.PodSelector.Matches(labels.Set(st.pod.Labels))
		// A pod scheduled here may be applied already (SetNode): attaching it still
		// changes its rules' pod clauses.
		if sel != ps.applied[k] || (sel && (!wasLocal || !prevLocal.Equal(lp))) {
			e.setApplied(ps, k, sel)
			marks.add(ps, k)
		}
	}
	ch := e.recompileWith(dirty, marks)
	ch.Isolation = e.isolationChanges([]string{k})
	return ch
}

// DeleteLocalPod records that pod namespace/name is no longer attached to this node.
func (e *Engine) DeleteLocalPod(namespace, name string) Changes {
	k := nsKey(namespace, name)
	if _, ok := e.local[k]; !ok {
		return Changes{}
	}
	delete(e.local, k)
	delete(e.iso, k)
	old := e.pods[k]
	var st *podState
	if old != nil && old.pod != nil {
		st = &podState{pod: old.pod}
	}
	e.setPod(k, namespace, st)
	dirty, marks := map[*ruleState]bool{}, podMarks{}
	e.updateMembership(k, old, st, dirty)
	// A pod still scheduled here stays applied (its rules keep their peer and port
	// clauses for its next ADD); its pod clauses go either way.
	stay := e.scheduledHere(st)
	for _, ps := range e.polByNS[namespace] {
		if ps.applied[k] {
			if !stay {
				e.setApplied(ps, k, false)
			}
			marks.add(ps, k)
		}
	}
	return e.recompileWith(dirty, marks)
}

// LocalPods returns the attached pods, sorted by key.
func (e *Engine) LocalPods() []LocalPod {
	out := make([]LocalPod, 0, len(e.local))
	for _, lp := range e.local {
		out = append(out, lp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// podChanged handles a pod's new state (nil = gone) against its old one.
func (e *Engine) podChanged(k string, old, st *podState) Changes {
	dirty := map[*ruleState]bool{}
	e.updateMembership(k, old, st, dirty)
	_, local := e.local[k]
	if local || e.scheduledHere(old) || e.scheduledHere(st) {
		ns := ""
		if st != nil && st.pod != nil {
			ns = st.pod.Namespace
		} else if old != nil && old.pod != nil {
			ns = old.pod.Namespace
		}
		portsChanged := old == nil || st == nil || old.pod == nil || st.pod == nil || !samePorts(old.pod.Ports, st.pod.Ports)
		placed := local || e.scheduledHere(st)
		for _, ps := range e.polByNS[ns] {
			sel := placed && st != nil && st.pod != nil && ps.p.PodSelector.Matches(labels.Set(st.pod.Labels))
			if sel != ps.applied[k] {
				e.setApplied(ps, k, sel)
				markRules(ps, dirty)
			} else if sel && portsChanged {
				markRules(ps, dirty) // named ports resolve against the pod's ports
			}
		}
	}
	ch := e.recompile(dirty)
	if local {
		ch.Isolation = e.isolationChanges([]string{k})
	}
	return ch
}

// updateMembership re-evaluates pod k as a peer of every selecting rule and marks the
// rules whose members or members' addresses or ports changed.
func (e *Engine) updateMembership(k string, old, st *podState, dirty map[*ruleState]bool) {
	dataChanged := !samePeerData(old, st)
	ns, _, _ := cutKey(k)
	// A pod whose namespace, labels and eligibility are the same (a status write: its
	// address, its phase while running) matches the same rules as before, except rules
	// whose ipBlock peers count for it (named-port egress): membership needs no selector
	// evaluated, only the rules it is a member of are marked if its data changed. At
	// 1,000 policies this is what every Pod status event of a burst of ADDs cost.
	sameInputs := old != nil && st != nil && old.pod != nil && st.pod != nil &&
		old.peerEligible() == st.peerEligible() && old.pod.Namespace == st.pod.Namespace &&
		sameLabels(old.pod.Labels, st.pod.Labels)
	visit := func(r *ruleState, ps *policyState) {
		was := r.members[k]
		if sameInputs && !(r.namedEgress && hasIPBlock(r.rule)) {
			if was && dataChanged {
				dirty[r] = true
				r.peersOK = false
			}
			return
		}
		in := e.matchesPeer(ps, r, st)
		switch {
		case in && !was:
			r.members[k] = true
			dirty[r] = true
			r.peersOK = false
		case !in && was:
			delete(r.members, k)
			dirty[r] = true
			r.peersOK = false
		case in && (dataChanged || blockFamiliesMatter(r, st)):
			dirty[r] = true
			r.peersOK = false
		}
	}
	for r, ps := range e.scoped[ns] {
		visit(r, ps)
	}
	for r, ps := range e.globalFor(ns) {
		visit(r, ps)
	}
}

// globalFor returns the rules of e.global that can select a pod of namespace ns
// (cached in nsGlobal).
func (e *Engine) globalFor(ns string) map[*ruleState]*policyState {
	if m, ok := e.nsGlobal[ns]; ok {
		return m
	}
	m := map[*ruleState]*policyState{}
	for r, ps := range e.global {
		if e.mayMatchNamespace(ps, r, ns) {
			m[r] = ps
		}
	}
	e.nsGlobal[ns] = m
	return m
}

// mayMatchNamespace reports whether rule r of ps can have a peer in namespace ns: false
// means matchesPeer is false for every pod of ns whatever its labels and addresses, as
// matchesPeer decides it from the namespace's labels now.
func (e *Engine) mayMatchNamespace(ps *policyState, r *ruleState, ns string) bool {
	if r.rule.AllPeers {
		return true
	}
	for _, peer := range r.rule.Peers {
		switch {
		case peer.IsIPBlock:
			if r.namedEgress {
				return true
			}
		case peer.NamespaceSelector == nil:
			if ns == ps.p.Namespace {
				return true
			}
		default:
			if n := e.namespaces[ns]; n != nil && peer.NamespaceSelector.Matches(labels.Set(n.Labels)) {
				return true
			}
		}
	}
	return false
}

// cutKey splits "namespace/name".
func cutKey(k string) (ns, name string, ok bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:], true
		}
	}
	return "", k, false
}

// indexRule adds (add=true) or removes rule r of ps in the membership indexes.
func (e *Engine) indexRule(ps *policyState, r *ruleState, add bool) {
	if !r.selects {
		return
	}
	if selectsAnyNamespace(r) {
		if add {
			e.global[r] = ps
		} else {
			delete(e.global, r)
		}
		clear(e.nsGlobal)
		return
	}
	ns := ps.p.Namespace
	m := e.scoped[ns]
	if add {
		if m == nil {
			m = map[*ruleState]*policyState{}
			e.scoped[ns] = m
		}
		m[r] = ps
		return
	}
	delete(m, r)
	if len(m) == 0 {
		delete(e.scoped, ns)
	}
}

// samePeerData reports whether two states of a pod give the same addresses and ports.
func samePeerData(a, b *podState) bool {
	if a == nil || b == nil {
		return a == b
	}
	ai, bi := a.ips(), b.ips()
	if len(ai) != len(bi) {
		return false
	}
	for i := range ai {
		if ai[i] != bi[i] {
			return false
		}
	}
	var ap, bp []ContainerPort
	if a.pod != nil {
		ap = a.pod.Ports
	}
	if b.pod != nil {
		bp = b.pod.Ports
	}
	return samePorts(ap, bp)
}

func samePorts(a, b []ContainerPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// matchesPeer reports whether pod st is selected by one of rule r's selector peers
// (NetworkPolicyPeer: podSelector alone = pods of the policy's namespace; with
// namespaceSelector = pods of the selected namespaces; namespaceSelector alone = every
// pod of them).
func (e *Engine) matchesPeer(ps *policyState, r *ruleState, st *podState) bool {
	if !st.peerEligible() {
		return false
	}
	if r.rule.AllPeers {
		return true // egress to any address with named ports: every pod resolves its own
	}
	for _, peer := range r.rule.Peers {
		if peer.IsIPBlock {
			if r.namedEgress && blockHolds(peer.IPBlock, st.ips()) {
				return true
			}
			continue
		}
		if peer.NamespaceSelector == nil {
			if st.pod.Namespace != ps.p.Namespace {
				continue
			}
		} else {
			ns := e.namespaces[st.pod.Namespace]
			if ns == nil || !peer.NamespaceSelector.Matches(labels.Set(ns.Labels)) {
				continue
			}
		}
		if peer.PodSelector != nil && !peer.PodSelector.Matches(labels.Set(st.pod.Labels)) {
			continue
		}
		return true
	}
	return false
}

// blockHolds reports whether one of ips is in one of the block's prefixes.
func blockHolds(block []netip.Prefix, ips []netip.Addr) bool {
	for _, pr := range block {
		for _, ip := range ips {
			if pr.Contains(ip) {
				return true
			}
		}
	}
	return false
}

func markRules(ps *policyState, dirty map[*ruleState]bool) {
	for _, r := range ps.rules {
		dirty[r] = true
	}
}

func (e *Engine) setApplied(ps *policyState, k string, sel bool) {
	if sel {
		ps.applied[k] = true
	} else {
		delete(ps.applied, k)
	}
}

// UpsertNamespace records an added or updated Namespace.
func (e *Engine) UpsertNamespace(n *Namespace) Changes {
	e.namespaces[n.Name] = n
	delete(e.nsGlobal, n.Name)
	return e.namespaceChanged(n.Name)
}

// DeleteNamespace records a deleted Namespace: namespace selectors no longer select its
// pods.
func (e *Engine) DeleteNamespace(name string) Changes {
	if _, ok := e.namespaces[name]; !ok {
		return Changes{}
	}
	delete(e.namespaces, name)
	delete(e.nsGlobal, name)
	return e.namespaceChanged(name)
}

func (e *Engine) namespaceChanged(name string) Changes {
	dirty := map[*ruleState]bool{}
	for r, ps := range e.global {
		if !hasNamespaceSelector(r.rule) {
			continue
		}
		for k, st := range e.byNS[name] {
			in := e.matchesPeer(ps, r, st)
			if in && blockFamiliesMatter(r, st) {
				dirty[r] = true // its selectors may now match it, or no longer: its families
				r.peersOK = false
			}
			if in != r.members[k] {
				if in {
					r.members[k] = true
				} else {
					delete(r.members, k)
				}
				dirty[r] = true
				r.peersOK = false
			}
		}
	}
	return e.recompile(dirty)
}

func hasNamespaceSelector(r *Rule) bool {
	for _, p := range r.Peers {
		if p.NamespaceSelector != nil {
			return true
		}
	}
	return false
}

// UpsertPolicy records an added or updated NetworkPolicy: its rules are rebuilt, each
// conjunction keeping its id when its rule and port group stay.
func (e *Engine) UpsertPolicy(p *Policy) Changes {
	k := p.Key()
	old := e.policies[k]
	ps := &policyState{p: p, applied: map[string]bool{}}
	consider := func(lk string) {
		st := e.pods[lk]
		if st != nil && st.pod != nil && st.pod.Namespace == p.Namespace && p.PodSelector.Matches(labels.Set(st.pod.Labels)) {
			ps.applied[lk] = true
		}
	}
	for lk := range e.local {
		consider(lk)
	}
	for lk := range e.here {
		consider(lk)
	}
	oldRules := map[RuleKey]*ruleState{}
	if old != nil {
		for _, r := range old.rules {
			oldRules[r.key] = r
			e.indexRule(old, r, false)
			delete(e.pending, r)
			delete(e.pendingPods, r)
		}
	}
	var ch Changes
	build := func(dir Direction, rules []Rule) {
		for i := range rules {
			r := &ruleState{
				ps:      ps,
				key:     RuleKey{Namespace: p.Namespace, Policy: p.Name, Direction: dir, Index: i},
				rule:    &rules[i],
				members: map[string]bool{},
				conjs:   map[string]*Conjunction{},
			}
			r.namedEgress = dir == Egress && hasNamedPort(r.rule)
			r.selects = ruleSelects(r)
			if r.selects {
				e.scanMembers(ps, r)
			}
			if o := oldRules[r.key]; o != nil {
				r.conjs = o.conjs // diffed (and ids reused) by compile
				delete(oldRules, r.key)
			}
			ps.rules = append(ps.rules, r)
			e.indexRule(ps, r, true)
			ch.Conjunctions = append(ch.Conjunctions, e.compile(ps, r)...)
		}
	}
	build(Ingress, p.Ingress)
	build(Egress, p.Egress)
	for _, r := range oldRules { // rules the new version no longer has
		ch.Conjunctions = append(ch.Conjunctions, e.dropRule(r)...)
	}
	e.policies[k] = ps
	m := e.polByNS[p.Namespace]
	if m == nil {
		m = map[string]*policyState{}
		e.polByNS[p.Namespace] = m
	}
	m[k] = ps
	ch.Isolation = e.isolationChanges(e.localKeysIn(p.Namespace))
	sortChanges(ch.Conjunctions)
	return ch
}

// DeletePolicy records a deleted NetworkPolicy: its conjunctions go, its pods' isolation
// is recomputed.
func (e *Engine) DeletePolicy(namespace, name string) Changes {
	k := nsKey(namespace, name)
	ps := e.policies[k]
	if ps == nil {
		return Changes{}
	}
	delete(e.policies, k)
	delete(e.polByNS[namespace], k)
	if len(e.polByNS[namespace]) == 0 {
		delete(e.polByNS, namespace)
	}
	var ch Changes
	for _, r := range ps.rules {
		e.indexRule(ps, r, false)
		delete(e.pending, r)
		delete(e.pendingPods, r)
		ch.Conjunctions = append(ch.Conjunctions, e.dropRule(r)...)
	}
	ch.Isolation = e.isolationChanges(e.localKeysIn(namespace))
	sortChanges(ch.Conjunctions)
	return ch
}

// hasNamedPort reports whether a rule lists a valid named port.
func hasNamedPort(r *Rule) bool {
	if r.AllPorts {
		return false
	}
	for _, p := range r.Ports {
		if p.Name != "" && !p.Invalid {
			return true
		}
	}
	return false
}

// matchesSelectorPeer reports whether pod st is selected by one of rule r's selector
// peers (not its ipBlocks): matchesPeer without the named-egress ipBlock membership.
func (e *Engine) matchesSelectorPeer(ps *policyState, r *ruleState, st *podState) bool {
	for _, peer := range r.rule.Peers {
		if peer.IsIPBlock {
			continue
		}
		one := &ruleState{rule: &Rule{Peers: []Peer{peer}}}
		if e.matchesPeer(ps, one, st) {
			return true
		}
	}
	return false
}

// blockFamiliesMatter reports whether member st of rule r counts in build by the IP
// families its ipBlocks hold it in unless a selector peer matches it (a dual-stack pod,
// an egress rule with named ports and ipBlocks): a change of its labels or its
// namespace's can change its peer addresses without changing its membership, so such
// rules are compiled again on every event of the pod.
func blockFamiliesMatter(r *ruleState, st *podState) bool {
	return r.namedEgress && !r.rule.AllPeers && hasIPBlock(r.rule) && mixedFamilies(st.ips())
}

// mixedFamilies reports whether ips hold addresses of both IP families.
func mixedFamilies(ips []netip.Addr) bool {
	var v4, v6 bool
	for _, ip := range ips {
		v4, v6 = v4 || ip.Is4(), v6 || !ip.Is4()
	}
	return v4 && v6
}

// familyIndex is 0 for an IPv4 address, 1 for IPv6.
func familyIndex(ip netip.Addr) int {
	if ip.Is4() {
		return 0
	}
	return 1
}

// ruleBlocksHold reports whether one of rule r's ipBlock peers holds ip.
func ruleBlocksHold(r *Rule, ip netip.Addr) bool {
	for _, p := range r.Peers {
		if p.IsIPBlock && blockHolds(p.IPBlock, []netip.Addr{ip}) {
			return true
		}
	}
	return false
}

func hasIPBlock(r *Rule) bool {
	for _, p := range r.Peers {
		if p.IsIPBlock {
			return true
		}
	}
	return false
}

// ruleSelects reports whether a rule needs per-pod membership.
func ruleSelects(r *ruleState) bool {
	if r.namedEgress && (r.rule.AllPeers || hasIPBlock(r.rule)) {
		return true
	}
	for _, p := range r.rule.Peers {
		if !p.IsIPBlock {
			return true
		}
	}
	return false
}

// selectsAnyNamespace reports whether a rule's members can be in any namespace.
func selectsAnyNamespace(r *ruleState) bool {
	return r.rule.AllPeers || hasNamespaceSelector(r.rule) || r.namedEgress && hasIPBlock(r.rule)
}

// scanMembers fills r.members from the pods of the namespaces r's peers can select
// (namespace selectors are evaluated against the namespaces first).
func (e *Engine) scanMembers(ps *policyState, r *ruleState) {
	r.peersOK = false
	nss := map[string]bool{}
	if r.rule.AllPeers || r.namedEgress && hasIPBlock(r.rule) {
		for ns := range e.byNS {
			nss[ns] = true
		}
	}
	for _, peer := range r.rule.Peers {
		switch {
		case peer.IsIPBlock:
		case peer.NamespaceSelector == nil:
			nss[ps.p.Namespace] = true
		default:
			for name, n := range e.namespaces {
				if peer.NamespaceSelector.Matches(labels.Set(n.Labels)) {
					nss[name] = true
				}
			}
		}
	}
	for ns := range nss {
		for k, st := range e.byNS[ns] {
			if e.matchesPeer(ps, r, st) {
				r.members[k] = true
			}
		}
	}
}

func (e *Engine) dropRule(r *ruleState) []ConjChange {
	var out []ConjChange
	for _, c := range r.conjs {
		e.ids.Release(c.ID)
		out = append(out, ConjChange{Old: c})
	}
	r.conjs = map[string]*Conjunction{}
	return out
}

func (e *Engine) localKeysIn(ns string) []string {
	var out []string
	for k, lp := range e.local {
		if lp.Namespace == ns {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// recompile compiles the dirty rules and returns their changed conjunctions.
func (e *Engine) recompile(dirty map[*ruleState]bool) Changes {
	return e.recompileWith(dirty, nil)
}

// podMarks maps each rule whose pod clause alone changed to the local pods whose
// attachment changed (attached, detached, or attached anew with another address or
// ofport): their conjunctions change by those pods only (compilePods).
type podMarks map[*ruleState][]string

// add marks local pod k in every rule of ps.
func (m podMarks) add(ps *policyState, k string) {
	for _, r := range ps.rules {
		m[r] = append(m[r], k)
	}
}

// recompileWith compiles the dirty rules, and the rules marked in marks alone by their
// pods, and returns their changed conjunctions.
func (e *Engine) recompileWith(dirty map[*ruleState]bool, marks podMarks) Changes {
	var ch Changes
	for r := range dirty {
		ch.Conjunctions = append(ch.Conjunctions, e.compile(r.ps, r)...)
	}
	for r, keys := range marks {
		if !dirty[r] {
			ch.Conjunctions = append(ch.Conjunctions, e.compilePods(r.ps, r, keys)...)
		}
	}
	sortChanges(ch.Conjunctions)
	return ch
}

// compilePods is compile for rule r when only the attachments of local pods keys
// changed: each is taken out of the conjunction holding it and, when attached and
// applied, put into its port group's, in order; the rest of each conjunction (its peers,
// its ports, its id) is kept. So an ADD costs each rule selecting the pod O(log M) and no
// copy of its M pods when the pod sorts last (addresses are leased in order), instead of
// a rebuild of every group.
//
// Only an ingress or any-port rule whose peers are cached (r.peersOK) and whose groups
// stay the same takes this path; when a group would be made or emptied (the pod is the
// first or the last of its group), or the rule is egress with ports (every group holds
// every pod), it is compiled whole. The result is exactly compile's
// (TestIncrementalEqualsFromScratch).
func (e *Engine) compilePods(ps *policyState, r *ruleState, keys []string) []ConjChange {
	if e.deferred {
		e.pendingPods[r] = append(e.pendingPods[r], keys...)
		return nil
	}
	rule := r.rule
	if !(r.key.Direction == Ingress || rule.AllPorts) || rule.AllPeers && rule.AllPorts || !r.peersOK || len(r.conjs) == 0 {
		return e.compile(ps, r)
	}
	next := map[string]*Conjunction{} // the groups changed, as they are now
	cur := func(g string) *Conjunction {
		if c, ok := next[g]; ok {
			return c
		}
		return r.conjs[g]
	}
	for _, k := range keys {
		ns, name, _ := cutKey(k)
		// Out of the group holding it (detached, or attached anew).
		for g := range r.conjs {
			c := cur(g)
			i := slices.IndexFunc(c.Pods, func(p LocalPod) bool { return p.Name == name && p.Namespace == ns })
			if i < 0 {
				continue
			}
			if len(c.Pods) == 1 {
				return e.compile(ps, r) // the group may go (or stay for a pod scheduled here)
			}
			n := *c
			n.Pods = slices.Concat(c.Pods[:i], c.Pods[i+1:]) // a new array: c's readers keep theirs
			next[g] = &n
			break
		}
		lp, local := e.local[k]
		if !local || !ps.applied[k] {
			continue
		}
		g, _, ok := e.podGroup(r, ns, name)
		if !ok {
			continue // none of the rule's ports: in no group
		}
		c := cur(g)
		if c == nil {
			return e.compile(ps, r) // a group made
		}
		n := *c
		if i, _ := slices.BinarySearchFunc(c.Pods, lp, localPodLess); i == len(c.Pods) {
			// Last: appended in place when the array has room. Every older conjunction
			// sharing the array is shorter, so what its readers see does not change.
			n.Pods = append(c.Pods, lp)
		} else {
			pods := make([]LocalPod, 0, len(c.Pods)+1)
			n.Pods = append(append(append(pods, c.Pods[:i]...), lp), c.Pods[i:]...)
		}
		next[g] = &n
	}
	var out []ConjChange
	for g, n := range next {
		old := r.conjs[g]
		if !n.Equal(old) {
			out = append(out, ConjChange{Old: old, New: n})
		}
		r.conjs[g] = n
	}
	return out
}

func sortChanges(cs []ConjChange) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := changeKey(cs[i]), changeKey(cs[j])
		if a.RuleKey != b.RuleKey {
			return a.RuleKey.String() < b.RuleKey.String()
		}
		return a.Group < b.Group
	})
}

// Isolation returns the isolation of local pod namespace/name: both directions when the
// API does not know the pod (fail closed), else the directions of the policies that
// select it.
func (e *Engine) Isolation(namespace, name string) Isolation {
	k := nsKey(namespace, name)
	st := e.pods[k]
	if st == nil || st.pod == nil {
		return Isolation{Ingress: true, Egress: true}
	}
	var iso Isolation
	for _, ps := range e.polByNS[namespace] {
		if ps.p.PodSelector.Matches(labels.Set(st.pod.Labels)) {
			iso.Ingress = iso.Ingress || ps.p.IngressType
			iso.Egress = iso.Egress || ps.p.EgressType
		}
	}
	return iso
}

// isolationChanges recomputes the isolation of the given local pods and returns those
// that changed since last reported (a pod seen for the first time is reported).
func (e *Engine) isolationChanges(keys []string) []IsolationChange {
	var out []IsolationChange
	for _, k := range keys {
		lp, ok := e.local[k]
		if !ok {
			continue
		}
		now := e.Isolation(lp.Namespace, lp.Name)
		was, seen := e.iso[k]
		if seen && was == now {
			continue
		}
		e.iso[k] = now
		out = append(out, IsolationChange{Pod: lp, Old: was, New: now})
	}
	return out
}

// compile builds rule r's conjunctions from its policy's applied pods, its members and its
// ports, and returns how they differ from r.conjs (which it replaces). Ids are kept for
// unchanged groups, allocated for new ones and released for groups that are gone.
func (e *Engine) compile(ps *policyState, r *ruleState) []ConjChange {
	if e.deferred {
		e.pending[r] = ps
		return nil
	}
	want := e.build(ps, r)
	var out []ConjChange
	for g, c := range want {
		if old := r.conjs[g]; old != nil {
			c.ID = old.ID
			if !c.Equal(old) {
				out = append(out, ConjChange{Old: old, New: c})
			}
			continue
		}
		id, err := e.ids.AllocateFor(c.Key.String())
		if err != nil {
			// Four billion live conjunctions: leave the rule out (its pods stay isolated).
			delete(want, g)
			continue
		}
		c.ID = id
		out = append(out, ConjChange{New: c})
	}
	for g, old := range r.conjs {
		if _, ok := want[g]; !ok {
			e.ids.Release(old.ID)
			out = append(out, ConjChange{Old: old})
		}
	}
	r.conjs = want
	return out
}

// build computes rule r's conjunctions by port group (ids unset).
func (e *Engine) build(ps *policyState, r *ruleState) map[string]*Conjunction {
	out := map[string]*Conjunction{}
	var applied []LocalPod
	var waiting []string // scheduled here, not attached yet: their groups exist, without them
	for k := range ps.applied {
		if lp, ok := e.local[k]; ok {
			applied = append(applied, lp)
		} else {
			waiting = append(waiting, k)
		}
	}
	if len(applied) == 0 && (len(waiting) == 0 || r.rule.AllPeers && r.rule.AllPorts) {
		return out // no pod, or only pod clauses (allow flows per attached pod)
	}
	sort.Strings(waiting)
	slices.SortFunc(applied, localPodLess)
	rule := r.rule
	rp := rulePortsOf(r)
	numeric, named := rp.numeric, rp.named
	key := func(group string) ConjKey { return ConjKey{RuleKey: r.key, Group: group} }

	// Peer addresses, each with the pod it belongs to (nil for ipBlocks).
	type addr struct {
		prefix netip.Prefix
		pod    *podState
	}
	var addrs []addr
	// An ingress or any-port rule needs the peers' prefixes alone: cached (r.peers).
	cached := (r.key.Direction == Ingress || rule.AllPorts) && r.peersOK
	if !rule.AllPeers && !cached {
		for _, p := range rule.Peers {
			for _, pr := range p.IPBlock {
				addrs = append(addrs, addr{prefix: pr})
			}
		}
	}
	members := make([]string, 0, len(r.members))
	if cached {
		members = nil
	}
	for k := range r.members {
		if cached {
			break
		}
		members = append(members, k)
	}
	sort.Strings(members)
	for _, k := range members {
		st := e.pods[k]
		if st == nil {
			continue
		}
		// A pod that is a member only because an ipBlock holds one of its addresses (egress
		// with named ports) is a peer in the families the blocks hold it in, not by all of
		// its addresses: on a dual-stack cluster an IPv6 block must not admit its IPv4
		// address (and an IPv4 block not its IPv6 one).
		var held [2]bool // IPv4, IPv6: a block holds one of its addresses of the family
		byBlockOnly := r.namedEgress && !rule.AllPeers && hasIPBlock(rule) && mixedFamilies(st.ips()) && !e.matchesSelectorPeer(ps, r, st)
		if byBlockOnly {
			for _, ip := range st.ips() {
				if ruleBlocksHold(rule, ip) {
					held[familyIndex(ip)] = true
				}
			}
		}
		for _, ip := range st.ips() {
			if byBlockOnly && !held[familyIndex(ip)] {
				continue
			}
			addrs = append(addrs, addr{prefix: netip.PrefixFrom(ip, ip.BitLen()), pod: st})
		}
	}

	if r.key.Direction == Ingress || rule.AllPorts {
		// Ports resolve against the local pods (ingress) or are not needed.
		peers := r.peers
		if !cached {
			peers = nil
			for _, a := range addrs {
				peers = append(peers, a.prefix)
			}
			peers = sortPrefixes(peers)
			r.peers, r.peersOK = peers, true
		}
		if !rule.AllPeers && len(peers) == 0 {
			return out
		}
		groups := map[string][]LocalPod{}
		groupPorts := map[string][]PortMatch{}
		for _, lp := range applied {
			g, ports, ok := e.podGroup(r, lp.Namespace, lp.Name)
			if !ok {
				continue
			}
			groups[g] = append(groups[g], lp)
			groupPorts[g] = ports
		}
		for _, k := range waiting {
			ns, name, _ := cutKey(k)
			g, ports, ok := e.podGroup(r, ns, name)
			if !ok {
				continue
			}
			if _, seen := groups[g]; !seen {
				groups[g] = nil // the group's clauses, no pod clause until an ADD
			}
			groupPorts[g] = ports
		}
		for g, pods := range groups {
			out[g] = &Conjunction{
				Key: key(g), Pods: pods, AnyPeer: rule.AllPeers, Peers: peers,
				AnyPort: rule.AllPorts, Ports: groupPorts[g],
			}
		}
		return out
	}

	// Egress with ports: named ports resolve against each destination pod, so peers are
	// grouped by their port set.
	const anyAddr = "any"
	byAddr := map[netip.Prefix][]PortMatch{}
	var anyPorts []PortMatch
	if rule.AllPeers {
		anyPorts = numeric
	}
	for _, a := range addrs {
		var ports []PortMatch
		if !rule.AllPeers || a.pod == nil {
			ports = append(ports, numeric...)
		}
		if a.pod != nil && a.pod.pod != nil {
			for _, n := range named {
				if m, ok := n.resolve(a.pod.pod.Ports); ok {
					ports = append(ports, m)
				}
			}
		}
		byAddr[a.prefix] = append(byAddr[a.prefix], ports...)
	}
	groups := map[string][]netip.Prefix{}
	groupPorts := map[string][]PortMatch{}
	for pr, ports := range byAddr {
		if len(ports) == 0 {
			continue
		}
		ports = sortPorts(ports)
		g := portSig(ports)
		groups[g] = append(groups[g], pr)
		groupPorts[g] = ports
	}
	for g, peers := range groups {
		out[g] = &Conjunction{
			Key: key(g), Pods: applied, Peers: sortPrefixes(peers), Ports: groupPorts[g],
		}
	}
	if len(anyPorts) > 0 {
		ports := sortPorts(append([]PortMatch(nil), anyPorts...))
		g := anyAddr + ":" + portSig(ports)
		out[g] = &Conjunction{Key: key(g), Pods: applied, AnyPeer: true, Ports: ports}
	}
	return out
}

// Conjunctions returns every compiled conjunction, sorted by rule and group.
func (e *Engine) Conjunctions() []*Conjunction {
	var out []*Conjunction
	for _, ps := range e.policies {
		for _, r := range ps.rules {
			for _, c := range r.conjs {
				out = append(out, c)
			}
		}
	}
	// Each rule key formatted once, not once per comparison.
	text := make(map[RuleKey]string, len(out))
	for _, c := range out {
		if _, ok := text[c.Key.RuleKey]; !ok {
			text[c.Key.RuleKey] = c.Key.RuleKey.String()
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key.RuleKey != out[j].Key.RuleKey {
			return text[out[i].Key.RuleKey] < text[out[j].Key.RuleKey]
		}
		return out[i].Key.Group < out[j].Key.Group
	})
	return out
}

// PolicyRef is a policy selecting a local pod, for inspection.
type PolicyRef struct {
	// Namespace and Name identify the policy.
	Namespace, Name string
	// Ingress and Egress are the policy's (defaulted) types.
	Ingress, Egress bool
}

// SelectingPolicies returns the policies that select local pod namespace/name, sorted.
func (e *Engine) SelectingPolicies(namespace, name string) []PolicyRef {
	k := nsKey(namespace, name)
	var out []PolicyRef
	for _, ps := range e.polByNS[namespace] {
		if ps.applied[k] {
			out = append(out, PolicyRef{Namespace: ps.p.Namespace, Name: ps.p.Name, Ingress: ps.p.IngressType, Egress: ps.p.EgressType})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// String summarises the engine for logs.
func (e *Engine) String() string {
	p, n, pol := e.Counts()
	return fmt.Sprintf("policy engine: %d pods, %d namespaces, %d policies, %d local pods, %d conjunction ids held",
		p, n, pol, len(e.local), e.ids.InUse())
}
