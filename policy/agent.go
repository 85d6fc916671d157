package policy

// The agent: one lock around the engine, so events from the informers, attachments from
// CNI ADD and detachments from CNI DEL are applied one at a time and their changes reach
// the realizer (the controller, which turns them into flows) in the order they were
// computed. The lock is held only while the engine computes (CPU work): the realizer
// queues the changes and realizes them elsewhere, so no event, attach or inspection waits
// for a switch round trip under it.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Realizer receives each event's changes, under the agent's lock, in order. seen is when
// the event was received (for the realization-latency metric). It must not call back into
// the agent, and must not wait on the switch (queue the changes instead): every event,
// attach and inspection waits for the lock it runs under.
type Realizer func(ch Changes, seen time.Time)

// Agent serialises the engine's events. Create it with NewAgent; a Watcher feeds it from
// the API, the controller attaches local pods and sets the realizer.
type Agent struct {
	mu       sync.Mutex
	eng      *Engine
	realize  Realizer
	synced   chan struct{}
	isSynced bool
	waiters  map[string][]chan struct{} // pod key → waiters for the pod to be known
	gate     func(record func())        // SetVersionGate; nil: versions count at once
	vmu      sync.Mutex                 // guards versions (recorded by the gate's caller, off mu)
	versions map[string]uint64          // kind → highest resourceVersion realized

	kmu   sync.RWMutex        // guards known (taken under mu to write, alone to read)
	known map[string]struct{} // pod keys in the model, as UpdatePod left them: WaitPod's path that takes no mu

	amu       sync.Mutex   // guards apending and attaching (never held with mu waited for)
	apending  []*attachReq // attaches waiting for the next batch (Attach)
	attaching bool         // runAttaches is running
}

// NewAgent returns an agent with an empty engine that defers compilation until
// MarkSynced (the informers' initial lists are loaded in bulk).
func NewAgent() *Agent {
	eng := NewEngine(nil)
	eng.Defer()
	return &Agent{eng: eng, synced: make(chan struct{}), waiters: map[string][]chan struct{}{}, known: map[string]struct{}{}, versions: map[string]uint64{}}
}

// SetRealizer sets the function that receives every later event's changes, and calls
// load with the engine (under the lock) so the caller can take the whole current state
// first; nothing happens between load and the first change delivered. A nil realizer
// stops delivery.
func (a *Agent) SetRealizer(r Realizer, load func(*Engine)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if load != nil {
		load(a.eng)
	}
	a.realize = r
}

// Update applies one event to the engine (fn) and hands its changes to the realizer.
func (a *Agent) Update(fn func(*Engine) Changes) { a.update(fn, "", "") }

// UpdatePod is Update for an event of pod namespace/name (its add, change or delete):
// it also records whether the pod is in the model afterwards, so that WaitPod answers
// for a known pod without waiting for the agent's lock, which every event holds while
// the engine computes.
func (a *Agent) UpdatePod(namespace, name string, fn func(*Engine) Changes) {
	a.update(fn, namespace, name)
}

// update is Update; with name set, UpdatePod's.
func (a *Agent) update(fn func(*Engine) Changes, namespace, name string) {
	seen := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := fn(a.eng)
	if name != "" {
		has := a.eng.HasPod(namespace, name)
		a.kmu.Lock()
		if has {
			a.known[nsKey(namespace, name)] = struct{}{}
		} else {
			delete(a.known, nsKey(namespace, name))
		}
		a.kmu.Unlock()
	}
	a.wakeLocked()
	if a.realize != nil && !ch.Empty() {
		a.realize(ch, seen)
	}
}

// Observed records that the event of an object of kind ("pods", "namespaces",
// "networkpolicies") at resourceVersion rv has been applied. It counts as realized (see
// Versions) at once, or, with a version gate (SetVersionGate), once the gate says every
// change handed to the realizer before it is on the switch. Resource versions that are
// not decimal numbers (the API calls them opaque; etcd's are numbers) are ignored.
func (a *Agent) Observed(kind, rv string) {
	var v uint64
	if _, err := fmt.Sscan(rv, &v); err != nil {
		return
	}
	record := func() {
		a.vmu.Lock()
		defer a.vmu.Unlock()
		if v > a.versions[kind] {
			a.versions[kind] = v
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gate != nil {
		a.gate(record)
		return
	}
	record()
}

// SetVersionGate makes Observed hand its record function to gate, under the agent's lock
// and so in order with every change handed to the realizer; gate must not wait on the
// switch (queue it) and must call record once every change handed over before it has
// been realized. A realizer that queues changes (the controller's) sets it, so that
// Versions never runs ahead of the switch. nil: versions count at once.
func (a *Agent) SetVersionGate(gate func(record func())) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gate = gate
}

// Versions returns, per kind, the highest resourceVersion whose event has been realized
// (Observed): an API write that returned version v has reached this node's switch once
// its kind's version here is v or more.
func (a *Agent) Versions() map[string]uint64 {
	a.vmu.Lock()
	defer a.vmu.Unlock()
	out := make(map[string]uint64, len(a.versions))
	for k, v := range a.versions {
		out[k] = v
	}
	return out
}

// View runs fn with the engine under the lock (read-only use: inspection, metrics).
func (a *Agent) View(fn func(*Engine)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a.eng)
}

// MarkSynced ends the initial load: every rule is compiled (Engine.Flush) and waiters for
// pods are woken. Later calls do nothing.
func (a *Agent) MarkSynced() {
	seen := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.isSynced {
		return
	}
	a.isSynced = true
	ch := a.eng.Flush()
	close(a.synced)
	a.wakeLocked()
	if a.realize != nil && !ch.Empty() {
		a.realize(ch, seen)
	}
}

// Synced is closed once the informers have synced (MarkSynced).
func (a *Agent) Synced() <-chan struct{} { return a.synced }

// wakeLocked wakes the waiters whose pod is now known.
func (a *Agent) wakeLocked() {
	if !a.isSynced {
		return
	}
	for k, ws := range a.waiters {
		ns, name, _ := cutKey(k)
		if a.eng.HasPod(ns, name) {
			for _, w := range ws {
				close(w)
			}
			delete(a.waiters, k)
		}
	}
}

// ErrPodUnknown is matched by WaitPod's error when ctx ends before the pod is known.
var ErrPodUnknown = errors.New("pod not known to the policy informers")

// WaitPod waits until the informers have synced and pod namespace/name is in the model,
// or ctx ends: then the error matches ErrPodUnknown (and ctx's error) and says which of
// the two was missing.
func (a *Agent) WaitPod(ctx context.Context, namespace, name string) error {
	select {
	case <-a.synced:
	case <-ctx.Done():
		return fmt.Errorf("%w: pod %s/%s: the NetworkPolicy, Pod and Namespace informers have not synced (is the API server reachable, and does the ClusterRole allow get/list/watch on pods, namespaces and networkpolicies?): %w",
			ErrPodUnknown, namespace, name, ctx.Err())
	}
	k := nsKey(namespace, name)
	a.kmu.RLock()
	_, known := a.known[k]
	a.kmu.RUnlock()
	if known {
		return nil
	}
	a.mu.Lock()
	if a.eng.HasPod(namespace, name) {
		a.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	a.waiters[k] = append(a.waiters[k], w)
	a.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		ws := a.waiters[k]
		for i, x := range ws {
			if x == w {
				a.waiters[k] = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(a.waiters[k]) == 0 {
			delete(a.waiters, k)
		}
		a.mu.Unlock()
		return fmt.Errorf("%w: pod %s/%s is not in the API server's Pod list seen by this node (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME must name an existing Pod): %w",
			ErrPodUnknown, namespace, name, ctx.Err())
	}
}

// Attach records local pod lp (CNI ADD) once the pod is known (WaitPod) and hands the
// changes to install under the agent's lock, so they take their place in the order of
// every event's changes. install must not wait on the switch: it queues the changes for
// realization and returns a function that waits (outside the lock, so other events and
// attaches go on meanwhile) until they are realized, with the pod's own flows, in one
// bundle. If the wait fails, the attachment is undone in the engine (unless lp is no
// longer the attached pod of its name) and the undo's changes go to the realizer; the
// wait's error is returned.
//
// Concurrent attaches are combined (group commit, the shape of the switch store's): the
// attaches that arrive while one batch holds the lock are recorded together in the next
// hold, their rules compiled once for the whole batch (Engine.Defer and Flush), not once
// per pod: a burst of 32 ADDs into the pods of 10 rules compiles each rule a few times,
// not 32. The batch's install functions are called in arrival order in one hold of the
// lock, the first with every conjunction change of the batch (and its own pod's
// isolation), the others with their pod's isolation only: every rule flow naming a pod of
// the batch is queued no later than that pod's own flows, so no pod's wait ends before
// the rule flows it brings are realized.
func (a *Agent) Attach(ctx context.Context, lp LocalPod, install func(Changes) (wait func() error)) error {
	for {
		r := &attachReq{lp: lp, install: install, done: make(chan struct{})}
		a.queueAttach(r)
		<-r.done
		if !r.unknown {
			return a.finishAttach(lp, r.wait())
		}
		// Not known (yet, or any more): wait for it outside the batch, then try again.
		if err := a.WaitPod(ctx, lp.Namespace, lp.Name); err != nil {
			return err
		}
	}
}

// attachReq is one Attach or Detach waiting to be recorded (runAttaches).
type attachReq struct {
	lp      LocalPod
	install func(Changes) func() error // Attach's
	detach  func(Changes)              // Detach's (nil for an Attach)
	done    chan struct{}              // closed once recorded (wait set) or found unknown
	unknown bool                       // the pod was not known: not recorded
	wait    func() error
}

// queueAttach queues r for the next batch, starting runAttaches if it is not running.
func (a *Agent) queueAttach(r *attachReq) {
	a.amu.Lock()
	a.apending = append(a.apending, r)
	if !a.attaching {
		a.attaching = true
		go a.runAttaches()
	}
	a.amu.Unlock()
}

// runAttaches records pending attaches and detaches, a batch per hold of the lock, until
// none is pending.
func (a *Agent) runAttaches() {
	for {
		a.amu.Lock()
		batch := a.apending
		a.apending = nil
		if len(batch) == 0 {
			a.attaching = false
			a.amu.Unlock()
			return
		}
		a.amu.Unlock()
		a.mu.Lock()
		a.attachLocked(batch)
		a.mu.Unlock()
	}
}

// attachLocked records batch (attaches and detaches, in arrival order) in the engine,
// compiling the rules it changes once, and calls each install in the same order (see
// Attach and Detach). a.mu is held.
func (a *Agent) attachLocked(batch []*attachReq) {
	var known []*attachReq
	for _, r := range batch {
		if r.detach == nil && (!a.isSynced || !a.eng.HasPod(r.lp.Namespace, r.lp.Name)) {
			r.unknown = true
			close(r.done)
			continue
		}
		known = append(known, r)
	}
	if len(known) == 0 {
		return
	}
	// The rules the batch marks are compiled once, at Flush; SetLocalPod returns each
	// pod's isolation meanwhile.
	a.eng.Defer()
	iso := make([][]IsolationChange, len(known))
	for i, r := range known {
		if r.detach != nil {
			iso[i] = a.eng.DeleteLocalPod(r.lp.Namespace, r.lp.Name).Isolation
			continue
		}
		iso[i] = a.eng.SetLocalPod(r.lp).Isolation
	}
	conjs := a.eng.Flush().Conjunctions
	for i, r := range known {
		ch := Changes{Isolation: iso[i]}
		if i == 0 {
			ch.Conjunctions = conjs
		}
		if r.detach != nil {
			r.detach(ch)
		} else {
			r.wait = r.install(ch)
		}
		close(r.done)
	}
}

// finishAttach returns err (the wait's outcome) after undoing the attachment of lp in
// the engine when err is not nil (see Attach).
func (a *Agent) finishAttach(lp LocalPod, err error) error {
	if err == nil {
		return nil
	}
	seen := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, cur := range a.eng.LocalPods() {
		if cur.Key() == lp.Key() && !cur.Equal(lp) {
			return err // the name belongs to a newer attachment now
		}
	}
	undo := a.eng.DeleteLocalPod(lp.Namespace, lp.Name)
	if a.realize != nil && !undo.Empty() {
		a.realize(undo, seen)
	}
	return err
}

// Detach forgets local pod namespace/name (CNI DEL) and hands the changes to install
// under the agent's lock, in order with every other change (install must not wait on the
// switch: it queues them). Detaching a pod that is not attached hands over no change.
// Concurrent detaches and attaches are combined as in Attach: the rules a batch changes
// are compiled once, and the first install of the batch gets every conjunction change of
// it, so the rule flows naming a detached pod are queued for removal no later than the
// pod's own item. It returns once install has been called.
func (a *Agent) Detach(namespace, name string, install func(Changes)) {
	r := &attachReq{lp: LocalPod{Namespace: namespace, Name: name}, detach: install, done: make(chan struct{})}
	a.queueAttach(r)
	<-r.done
}
