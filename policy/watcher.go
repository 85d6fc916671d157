package policy

// The API side: client-go informers on Pods, Namespaces and NetworkPolicies, with the
// transforms of api.go, feeding an Agent.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watcher runs the informers and feeds their events to Agent. It needs get, list and
// watch on pods, namespaces (core) and networkpolicies (networking.k8s.io).
type Watcher struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// Agent receives the events.
	Agent *Agent
	// Resync is the informers' resync period; 0 = none (watch events only).
	Resync time.Duration
	// Logger gets sync progress; nil = slog.Default().
	Logger *slog.Logger
}

// strip is the factory's transform: StripPod, StripNamespace or StripNetworkPolicy by type.
func strip(obj any) (any, error) {
	switch obj.(type) {
	case *corev1.Pod:
		return StripPod(obj)
	case *corev1.Namespace:
		return StripNamespace(obj)
	case *networkingv1.NetworkPolicy:
		return StripNetworkPolicy(obj)
	}
	return obj, nil
}

// Run starts the informers, marks the agent synced once their caches are (Agent.Synced),
// and keeps feeding events until ctx ends. It returns an error if the caches do not sync
// before ctx ends (API server unreachable, or RBAC missing), else ctx.Err().
func (w *Watcher) Run(ctx context.Context) error {
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(w.Client, w.Resync, informers.WithTransform(strip))
	pods := factory.Core().V1().Pods().Informer()
	nss := factory.Core().V1().Namespaces().Informer()
	nps := factory.Networking().V1().NetworkPolicies().Informer()
	a := w.Agent

	podsReg, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				mp := ConvertPod(p)
				a.UpdatePod(mp.Namespace, mp.Name, func(e *Engine) Changes { return e.UpsertPod(mp) })
				a.Observed("pods", p.ResourceVersion)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			mp := ConvertPod(p)
			if o, ok := oldObj.(*corev1.Pod); !ok || !samePod(ConvertPod(o), mp) {
				// (not for a status change policy does not see: conditions, container states)
				a.UpdatePod(mp.Namespace, mp.Name, func(e *Engine) Changes { return e.UpsertPod(mp) })
			}
			a.Observed("pods", p.ResourceVersion)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.UpdatePod(p.Namespace, p.Name, func(e *Engine) Changes { return e.DeletePod(p.Namespace, p.Name) })
				a.Observed("pods", p.ResourceVersion)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("policy: Pod informer: %w", err)
	}
	nssReg, err := nss.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Namespace); ok {
				mn := ConvertNamespace(n)
				a.Update(func(e *Engine) Changes { return e.UpsertNamespace(mn) })
				a.Observed("namespaces", n.ResourceVersion)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			n, ok := obj.(*corev1.Namespace)
			if !ok {
				return
			}
			if o, ok := oldObj.(*corev1.Namespace); !ok || !sameLabels(o.Labels, n.Labels) {
				mn := ConvertNamespace(n)
				a.Update(func(e *Engine) Changes { return e.UpsertNamespace(mn) })
			}
			a.Observed("namespaces", n.ResourceVersion)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Namespace); ok {
				a.Update(func(e *Engine) Changes { return e.DeleteNamespace(n.Name) })
				a.Observed("namespaces", n.ResourceVersion)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("policy: Namespace informer: %w", err)
	}
	npsReg, err := nps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
				mp := ConvertPolicy(np)
				a.Update(func(e *Engine) Changes { return e.UpsertPolicy(mp) })
				a.Observed("networkpolicies", np.ResourceVersion)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			np, ok := obj.(*networkingv1.NetworkPolicy)
			if !ok {
				return
			}
			if o, ok := oldObj.(*networkingv1.NetworkPolicy); ok && o.ResourceVersion == np.ResourceVersion {
				return // a resync of the same object
			}
			mp := ConvertPolicy(np)
			a.Update(func(e *Engine) Changes { return e.UpsertPolicy(mp) })
			a.Observed("networkpolicies", np.ResourceVersion)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
				a.Update(func(e *Engine) Changes { return e.DeletePolicy(np.Namespace, np.Name) })
				a.Observed("networkpolicies", np.ResourceVersion)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("policy: NetworkPolicy informer: %w", err)
	}

	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	factory.Start(ictx.Done())
	defer factory.Shutdown()
	defer cancel()
	// The registrations' HasSynced, not the informers': an informer has synced once its
	// store holds the initial list, while its handlers may still be far behind (with
	// 10,000 pods, a few hundred delivered); marking the agent synced then would compile
	// and install the rules against a partial model, and realize the rest event by event.
	if !cache.WaitForCacheSync(ictx.Done(), podsReg.HasSynced, nssReg.HasSynced, npsReg.HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("policy: informers did not sync: check the API server and RBAC (get/list/watch on pods, namespaces, networking.k8s.io networkpolicies)")
	}
	a.MarkSynced()
	var np, nn, npol int
	a.View(func(e *Engine) { np, nn, npol = e.Counts() })
	log.Info("network policy informers synced", "pods", np, "namespaces", nn, "policies", npol,
		"duration", time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	return ctx.Err()
}

// samePod reports whether two model pods are equal for policy.
func samePod(a, b *Pod) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.NodeName == b.NodeName &&
		a.HostNetwork == b.HostNetwork && a.Terminal == b.Terminal &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Ports, b.Ports) && sameLabels(a.Labels, b.Labels)
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
