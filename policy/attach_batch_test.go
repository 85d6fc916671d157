package policy

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// TestAttachBatchQueuesRuleFlowsFirst: 32 concurrent attaches of pods that one policy's
// rule selects (they are combined into batches, each compiled once): every install is
// called, and when a pod's own install is called the conjunction changes handed over
// until then (in the realizer's order) already name it, so the rule flows it brings are
// queued no later than its own flows; at the end the rule's one conjunction holds all 32.
// Then the same for 32 concurrent detaches: the rule flows naming a pod are queued for
// removal no later than its own detach, and no conjunction is left.
func TestAttachBatchQueuesRuleFlowsFirst(t *testing.T) {
	const pods = 32
	a := NewAgent()
	a.Update(func(e *Engine) Changes { return e.UpsertNamespace(&Namespace{Name: "x"}) })
	a.Update(func(e *Engine) Changes {
		return e.UpsertPod(&Pod{Namespace: "x", Name: "peer", Labels: map[string]string{"role": "client"},
			IPs: []netip.Addr{netip.MustParseAddr("10.244.2.9")}, NodeName: "n2"})
	})
	for i := range pods {
		a.Update(func(e *Engine) Changes {
			return e.UpsertPod(&Pod{Namespace: "x", Name: fmt.Sprintf("p%02d", i), Labels: map[string]string{"app": "a"}, NodeName: "n1"})
		})
	}
	a.Update(func(e *Engine) Changes {
		return e.UpsertPolicy(&Policy{Namespace: "x", Name: "from-clients", PodSelector: labels.SelectorFromSet(labels.Set{"app": "a"}), IngressType: true,
			Ingress: []Rule{{AllPorts: true, Peers: []Peer{{PodSelector: labels.SelectorFromSet(labels.Set{"role": "client"})}}}}})
	})
	a.MarkSynced()

	// The realizer's view, in the order install is called (under the agent's lock).
	var mu sync.Mutex
	named := map[string]bool{} // local pods named by the conjunctions handed over so far
	var missing []string
	installs := 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range pods {
		lp := LocalPod{Namespace: "x", Name: fmt.Sprintf("p%02d", i), IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)})}, OFPort: uint32(100 + i)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := a.Attach(ctx, lp, func(ch Changes) func() error {
				mu.Lock()
				defer mu.Unlock()
				installs++
				for _, c := range ch.Conjunctions {
					if c.New == nil {
						continue
					}
					for _, p := range c.New.Pods {
						named[p.Key()] = true
					}
				}
				if !named[lp.Key()] {
					missing = append(missing, lp.Key())
				}
				return func() error { return nil }
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if installs != pods {
		t.Fatalf("%d installs for %d attaches", installs, pods)
	}
	if len(missing) > 0 {
		t.Fatalf("pods whose own install came before any conjunction change naming them: %v", missing)
	}
	var conjs []*Conjunction
	a.View(func(e *Engine) { conjs = e.Conjunctions() })
	if len(conjs) != 1 || len(conjs[0].Pods) != pods {
		t.Fatalf("conjunctions %v, want one holding the %d pods", conjs, pods)
	}

	// Detaching them all at once: when a pod's own install is called, the conjunctions as
	// the changes handed over until then leave them no longer name it.
	cur := map[uint32]*Conjunction{conjs[0].ID: conjs[0]}
	missing = nil
	start = make(chan struct{})
	for i := range pods {
		key := fmt.Sprintf("x/p%02d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a.Detach("x", key[2:], func(ch Changes) {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range ch.Conjunctions {
					if c.New != nil {
						cur[c.New.ID] = c.New
					} else {
						delete(cur, c.Old.ID)
					}
				}
				for _, c := range cur {
					for _, p := range c.Pods {
						if p.Key() == key {
							missing = append(missing, key)
						}
					}
				}
			})
		}()
	}
	close(start)
	wg.Wait()
	if len(missing) > 0 {
		t.Fatalf("pods still named by a conjunction when their own detach was queued: %v", missing)
	}
	if len(cur) != 0 {
		t.Fatalf("conjunctions left after every pod was detached: %v", cur)
	}
	a.View(func(e *Engine) { conjs = e.Conjunctions() })
	if len(conjs) != 0 {
		t.Fatalf("the engine still has %d conjunctions", len(conjs))
	}
}
