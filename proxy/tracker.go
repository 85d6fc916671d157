package proxy

// The change tracker (kube-proxy's ServiceChangeTracker and EndpointsChangeTracker in
// one): the API's Services and EndpointSlices as the model, the Services touched since
// the last delivery, and the state last delivered, against which the next delivery is a
// difference.

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// ServicePortState is everything the switch must hold for one Service port on this
// node: the port (frontends and settings), all its endpoints and the selection.
type ServicePortState struct {
	// Port is the Service port: frontends and settings.
	Port *ServicePort
	// Family is the Tracker's family: the frontends and endpoints here are of it.
	Family Family
	// Endpoints are all the port's endpoints of Family from all its EndpointSlices,
	// deduplicated by address and port (a duplicate on this node wins, else the one of
	// the slice first by name), sorted by address and port.
	Endpoints []Endpoint
	Selection Selection
}

// Frontends returns the port's frontends of the state's family (ServicePort.Frontends).
func (s *ServicePortState) Frontends() []netip.AddrPort { return s.Port.Frontends(s.Family) }

func (s *ServicePortState) equal(o *ServicePortState) bool {
	if !s.Port.equal(o.Port) || s.Family != o.Family || len(s.Endpoints) != len(o.Endpoints) ||
		!equalEndpoints(s.Selection.Cluster, o.Selection.Cluster) || !equalEndpoints(s.Selection.Local, o.Selection.Local) ||
		(s.Selection.Cluster == nil) != (o.Selection.Cluster == nil) || (s.Selection.Local == nil) != (o.Selection.Local == nil) ||
		s.Selection.HasEndpoints != o.Selection.HasEndpoints || s.Selection.Topology != o.Selection.Topology {
		return false
	}
	return equalEndpoints(s.Endpoints, o.Endpoints)
}

func equalEndpoints(a, b []Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y Endpoint) bool { return x.equal(y) })
}

// StaleConntrack names conntrack entries that must be flushed after an update: entries
// of Protocol (UDP or SCTP) whose original destination is one of Frontends (or any
// address at NodePort, when it is not 0) and whose reply source is Endpoint. They point
// at an endpoint that no longer serves the port (it went away or stopped serving), or
// at a frontend the port no longer has; without the flush a client's datagrams keep
// going there until the entry times out.
type StaleConntrack struct {
	// Service is the port the entries belong to.
	Service ServicePortName
	// Protocol is Service's protocol: UDP or SCTP.
	Protocol Protocol
	// Frontends are IP:port pairs (ClusterIP, external IPs, load-balancer IPs).
	Frontends []netip.AddrPort
	// NodePort is the port on every node address; 0 = none to flush.
	NodePort uint16
	// Endpoint is the entries' translated destination (their reply source).
	Endpoint netip.AddrPort
}

// Update is one delivery to the Sink: the difference between what the Sink last
// confirmed and what the API now says. Changed and Deleted are idempotent (a retry after
// an error carries them again, merged with later changes). The states are shared with
// the Tracker: read only.
type Update struct {
	// Family is the Tracker's IP family: every state of Changed is of it, and Full,
	// Deleted, Stale and Activated concern only this family's view of the Service ports
	// (kube-proxy runs one proxier per family; a consumer fed by one Tracker per family
	// keeps each family's Service ports apart, and a Full update of one family replaces
	// only that family's).
	Family Family
	// Full: Changed holds every Service port (the first delivery, or one asked for by
	// Runner.Resync); the consumer removes whatever else it holds.
	Full bool
	// Changed are the Service ports that are new or changed, each with its whole state.
	Changed []*ServicePortState
	// Deleted are the Service ports that are gone (Service deleted, port removed, or the
	// Service no longer proxied: now headless, ExternalName or another proxy's).
	Deleted []ServicePortName
	// Stale are conntrack entries of UDP and SCTP ports to flush, once the switch no
	// longer sends new traffic to their endpoints (after Changed and Deleted are
	// realized).
	Stale []StaleConntrack
	// Activated are UDP and SCTP ports that went from no serving endpoint to some:
	// entries of their frontends that were not translated to an endpoint (created while
	// there was none) are to be flushed.
	Activated []ServicePortName
	// TriggerTimes are, per Service, the endpoints.kubernetes.io/last-change-trigger-time
	// values of the EndpointSlice changes this update realizes, later than the Tracker's
	// start (kube-proxy's meaning). The consumer observes time.Since(t) for each into its
	// network programming latency histogram once the switch has confirmed the update.
	TriggerTimes map[ServiceName][]time.Time
}

// Empty reports whether u carries nothing (whatever its Family).
func (u *Update) Empty() bool {
	return !u.Full && len(u.Changed) == 0 && len(u.Deleted) == 0 && len(u.Stale) == 0 &&
		len(u.Activated) == 0 && len(u.TriggerTimes) == 0
}

// Tracker holds the model and computes Updates. It is safe for concurrent use: the
// Watcher's informers write to it, the Runner reads from it. Create it with NewTracker.
type Tracker struct {
	node   string
	family Family
	start  time.Time

	mu       sync.Mutex
	zone     string
	services map[ServiceName][]*ServicePort
	slices   map[ServiceName]map[string]*Slice
	applied  map[ServicePortName]*ServicePortState
	dirty    map[ServiceName]bool
	triggers map[ServiceName][]time.Time
	full     bool
	synced   chan struct{}
	isSynced bool
	kick     chan struct{}
}

// NewTracker returns an empty tracker for node nodeName (its endpoints are Local) and
// family f (only frontends and endpoints of f are modelled; ofsdn uses IPv4). Trigger
// times before now are ignored (they are from before this process watched).
func NewTracker(nodeName string, f Family) *Tracker {
	return &Tracker{
		node: nodeName, family: f, start: time.Now(),
		services: map[ServiceName][]*ServicePort{}, slices: map[ServiceName]map[string]*Slice{},
		applied: map[ServicePortName]*ServicePortState{}, dirty: map[ServiceName]bool{},
		triggers: map[ServiceName][]time.Time{}, full: true,
		synced: make(chan struct{}), kick: make(chan struct{}, 1),
	}
}

// Family returns the tracker's IP family.
func (t *Tracker) Family() Family { return t.family }

// NodeName returns the node whose endpoints are Local.
func (t *Tracker) NodeName() string { return t.node }

// Changed receives a value (without blocking the sender, coalesced) whenever the tracker
// has something new to deliver. The Runner waits on it.
func (t *Tracker) Changed() <-chan struct{} { return t.kick }

func (t *Tracker) notifyLocked() {
	if !t.isSynced {
		return
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// MarkSynced records that the informers have delivered their initial lists; the first
// Update (Full) may then be computed. Later calls do nothing.
func (t *Tracker) MarkSynced() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isSynced {
		return
	}
	t.isSynced = true
	close(t.synced)
	t.notifyLocked()
}

// Synced is closed once MarkSynced was called.
func (t *Tracker) Synced() <-chan struct{} { return t.synced }

// SetZone sets this node's zone (its topology.kubernetes.io/zone label; "" = none), which
// zone hints are matched against. A change recomputes every Service.
func (t *Tracker) SetZone(zone string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if zone == t.zone {
		return
	}
	t.zone = zone
	for n := range t.services {
		t.dirty[n] = true
	}
	t.notifyLocked()
}

// SetService records Service name's proxied ports (ConvertService); none (nil) means the
// Service is not proxied (deleted, headless, ExternalName, another proxy's). It reports
// whether anything changed.
func (t *Tracker) SetService(name ServiceName, ports []*ServicePort) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.services[name]
	if slices.EqualFunc(old, ports, func(a, b *ServicePort) bool { return a.equal(b) }) {
		return false
	}
	if len(ports) == 0 {
		delete(t.services, name)
	} else {
		t.services[name] = ports
	}
	t.dirty[name] = true
	t.notifyLocked()
	return true
}

// DeleteService is SetService(name, nil).
func (t *Tracker) DeleteService(name ServiceName) bool { return t.SetService(name, nil) }

// SetSlice records an EndpointSlice (ConvertEndpointSlice). A slice of another family
// than the tracker's is ignored. It reports whether anything changed; a change records
// the slice's trigger time (when later than the tracker's start) for the next Update.
func (t *Tracker) SetSlice(s *Slice) bool {
	if s == nil || s.Family != t.family {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	bySlice := t.slices[s.Service]
	if old, ok := bySlice[s.Name]; ok && old.equalContent(s) {
		return false
	}
	if bySlice == nil {
		bySlice = map[string]*Slice{}
		t.slices[s.Service] = bySlice
	}
	bySlice[s.Name] = s
	if !s.TriggerTime.IsZero() && s.TriggerTime.After(t.start) {
		t.triggers[s.Service] = append(t.triggers[s.Service], s.TriggerTime)
	}
	t.dirty[s.Service] = true
	t.notifyLocked()
	return true
}

// DeleteSlice forgets EndpointSlice name of Service svc. As in kube-proxy, a deletion's
// trigger time is not measured (the annotation is from the slice's last update) and the
// Service's pending trigger times are dropped.
func (t *Tracker) DeleteSlice(svc ServiceName, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	bySlice := t.slices[svc]
	if _, ok := bySlice[name]; !ok {
		return false
	}
	delete(bySlice, name)
	if len(bySlice) == 0 {
		delete(t.slices, svc)
	}
	delete(t.triggers, svc)
	t.dirty[svc] = true
	t.notifyLocked()
	return true
}

// Counts returns the number of proxied Services and EndpointSlices held.
func (t *Tracker) Counts() (services, endpointSlices int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.slices {
		endpointSlices += len(m)
	}
	return len(t.services), endpointSlices
}

// Applied returns the state last confirmed by the Sink, every Service port, sorted by
// name (for inspection: ofsdnctl services, metrics). The states are shared: read only.
func (t *Tracker) Applied() []*ServicePortState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*ServicePortState, 0, len(t.applied))
	for _, s := range t.applied {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *ServicePortState) int { return comparePortNames(a.Port.Name, b.Port.Name) })
	return out
}

// Resync makes the next Update Full.
func (t *Tracker) Resync() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.full = true
	t.notifyLocked()
}

// pending is an Update with what Commit and Abort need.
type pending struct {
	Update
	dirty    map[ServiceName]bool
	triggers map[ServiceName][]time.Time
	states   map[ServicePortName]*ServicePortState // new state of each changed port
	deleted  []ServicePortName
}

// checkout computes the Update from the applied state to the current model, for the
// dirty Services (every Service when a Full update is due), and takes the dirty set and
// the trigger times. Exactly one of commit or abort must follow.
func (t *Tracker) checkout() *pending {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &pending{dirty: t.dirty, triggers: t.triggers, states: map[ServicePortName]*ServicePortState{}}
	p.Full, p.Family = t.full, t.family
	t.dirty, t.triggers = map[ServiceName]bool{}, map[ServiceName][]time.Time{}
	names := p.dirty
	if p.Full {
		names = map[ServiceName]bool{}
		for n := range t.services {
			names[n] = true
		}
		for n := range t.applied {
			names[n.ServiceName] = true
		}
	}
	appliedBySvc := map[ServiceName][]*ServicePortState{}
	for n, s := range t.applied {
		if names[n.ServiceName] {
			appliedBySvc[n.ServiceName] = append(appliedBySvc[n.ServiceName], s)
		}
	}
	for svc := range names {
		now := map[ServicePortName]*ServicePortState{}
		for _, sp := range t.services[svc] {
			if !t.family.Has(sp.ClusterIP(t.family)) {
				continue // no ClusterIP of this family: not proxied in it (kube-proxy)
			}
			now[sp.Name] = t.stateLocked(sp)
		}
		for _, old := range appliedBySvc[svc] {
			if _, ok := now[old.Port.Name]; !ok {
				p.deleted = append(p.deleted, old.Port.Name)
				p.Stale = append(p.Stale, stale(old, nil)...)
			}
		}
		for n, s := range now {
			old := t.applied[n]
			if old != nil && old.equal(s) && !p.Full {
				continue
			}
			if old != nil && old.equal(s) {
				s = old
			}
			p.states[n] = s
			p.Changed = append(p.Changed, s)
			p.Stale = append(p.Stale, stale(old, s)...)
			if s.Port.Name.Protocol.Connectionless() && servingCount(s) > 0 && (old == nil || servingCount(old) == 0) {
				p.Activated = append(p.Activated, n)
			}
		}
	}
	p.Deleted = p.deleted
	if len(p.triggers) > 0 {
		p.TriggerTimes = p.triggers
	}
	slices.SortFunc(p.Changed, func(a, b *ServicePortState) int { return comparePortNames(a.Port.Name, b.Port.Name) })
	slices.SortFunc(p.Deleted, comparePortNames)
	slices.SortFunc(p.Activated, comparePortNames)
	slices.SortFunc(p.Stale, func(a, b StaleConntrack) int {
		return cmp.Or(comparePortNames(a.Service, b.Service), a.Endpoint.Compare(b.Endpoint))
	})
	return p
}

// commit makes p's states the applied ones (the Sink confirmed them).
func (t *Tracker) commit(p *pending) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n, s := range p.states {
		t.applied[n] = s
	}
	for _, n := range p.deleted {
		delete(t.applied, n)
	}
	if p.Full {
		t.full = false
	}
}

// abort puts p's dirty Services and trigger times back (the Sink failed): the next
// checkout recomputes them against the unchanged applied state.
func (t *Tracker) abort(p *pending) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n := range p.dirty {
		t.dirty[n] = true
	}
	for n, ts := range p.triggers {
		t.triggers[n] = append(ts, t.triggers[n]...)
	}
	if p.Full {
		t.full = true
	}
}

// hasWork reports whether a checkout would find anything to do.
func (t *Tracker) hasWork() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.full || len(t.dirty) > 0 || len(t.triggers) > 0
}

// stateLocked computes sp's state from the slices of its Service.
func (t *Tracker) stateLocked(sp *ServicePort) *ServicePortState {
	s := &ServicePortState{Port: sp, Family: t.family, Endpoints: t.endpointsLocked(sp.Name)}
	s.Selection = Select(sp, s.Endpoints, t.node, t.zone)
	return s
}

// endpointsLocked merges the endpoints of Service port n from every slice of its
// Service (EndpointSliceCache): the slice port of the same name and protocol gives the
// port number; an endpoint present in several slices is taken once, the copy on this
// node preferred, else the first by slice name.
func (t *Tracker) endpointsLocked(n ServicePortName) []Endpoint {
	bySlice := t.slices[n.ServiceName]
	names := make([]string, 0, len(bySlice))
	for name := range bySlice {
		names = append(names, name)
	}
	slices.Sort(names)
	seen := map[netip.AddrPort]int{}
	out := []Endpoint{}
	for _, name := range names {
		sl := bySlice[name]
		for _, sp := range sl.Ports {
			if sp.Name != n.Port || sp.Protocol != n.Protocol || sp.Port == 0 {
				continue
			}
			for _, e := range sl.Endpoints {
				e.Port = sp.Port
				e.Local = t.node != "" && e.NodeName == t.node
				if i, dup := seen[e.AddrPort()]; dup {
					if e.Local && !out[i].Local {
						out[i] = e
					}
					continue
				}
				seen[e.AddrPort()] = len(out)
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
	return out
}

func servingCount(s *ServicePortState) int {
	n := 0
	for _, e := range s.Endpoints {
		if e.Serving {
			n++
		}
	}
	return n
}

// stale returns the conntrack entries of a UDP or SCTP port to flush when its state goes
// from old to now (nil: deleted), kube-proxy's rule keyed by address and port: an
// endpoint that was serving and no longer is (gone, or not serving), with every frontend
// it had; and an endpoint that still serves, with the frontends the port lost.
func stale(old, now *ServicePortState) []StaleConntrack {
	if old == nil || !old.Port.Name.Protocol.Connectionless() {
		return nil
	}
	oldFront := old.Frontends()
	var nowServing map[netip.AddrPort]bool
	var lostFront []netip.AddrPort
	var lostNodePort uint16
	if now != nil {
		nowServing = map[netip.AddrPort]bool{}
		for _, e := range now.Endpoints {
			if e.Serving {
				nowServing[e.AddrPort()] = true
			}
		}
		nf := now.Frontends()
		for _, f := range oldFront {
			if !slices.Contains(nf, f) {
				lostFront = append(lostFront, f)
			}
		}
		if old.Port.NodePort != now.Port.NodePort {
			lostNodePort = old.Port.NodePort
		}
	}
	var out []StaleConntrack
	for _, e := range old.Endpoints {
		if !e.Serving {
			continue // no traffic was sent to it
		}
		sc := StaleConntrack{Service: old.Port.Name, Protocol: old.Port.Name.Protocol, Endpoint: e.AddrPort()}
		if nowServing[e.AddrPort()] {
			if len(lostFront) == 0 && lostNodePort == 0 {
				continue
			}
			sc.Frontends, sc.NodePort = lostFront, lostNodePort
		} else {
			sc.Frontends, sc.NodePort = oldFront, old.Port.NodePort
		}
		out = append(out, sc)
	}
	return out
}

func comparePortNames(a, b ServicePortName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
}
