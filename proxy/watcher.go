package proxy

// The API side: client-go informers on Services and discovery.k8s.io/v1 EndpointSlices,
// with the transforms and the list selector of api.go, feeding a Tracker.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watcher runs the informers and feeds their events to Tracker. It needs get, list and
// watch on services (core) and endpointslices (discovery.k8s.io).
type Watcher struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// Tracker receives the events.
	Tracker *Tracker
	// Trackers receive them too: on a dual-stack node one Tracker per IP family (each
	// keeps the Services with a ClusterIP of its family and the EndpointSlices of its
	// addressType, kube-proxy's per-family proxiers behind one pair of informers). Nil
	// Trackers are skipped.
	Trackers []*Tracker
	// Resync is the informers' resync period; 0 = none (watch events only).
	Resync time.Duration
	// Logger gets sync progress; nil = slog.Default().
	Logger *slog.Logger
}

// strip is the factory's transform: StripService or StripEndpointSlice by type.
func strip(obj any) (any, error) {
	switch obj.(type) {
	case *corev1.Service:
		return StripService(obj)
	case *discoveryv1.EndpointSlice:
		return StripEndpointSlice(obj)
	}
	return obj, nil
}

func deleted(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// Run starts the informers, marks the tracker synced once their handlers have received
// the initial lists (Tracker.MarkSynced), and keeps feeding events until ctx ends. It
// returns an error if the caches do not sync before ctx ends (API server unreachable,
// or RBAC missing), else ctx.Err().
func (w *Watcher) Run(ctx context.Context) error {
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(w.Client, w.Resync,
		informers.WithTransform(strip),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ListSelector }))
	svcs := factory.Core().V1().Services().Informer()
	eps := factory.Discovery().V1().EndpointSlices().Informer()
	t := fanOut(append([]*Tracker{w.Tracker}, w.Trackers...))

	setService := func(obj any) {
		if s, ok := obj.(*corev1.Service); ok {
			t.SetService(ServiceName{Namespace: s.Namespace, Name: s.Name}, ConvertService(s))
		}
	}
	svcReg, err := svcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    setService,
		UpdateFunc: func(_, obj any) { setService(obj) },
		DeleteFunc: func(obj any) {
			if s, ok := deleted(obj).(*corev1.Service); ok {
				t.DeleteService(ServiceName{Namespace: s.Namespace, Name: s.Name})
			}
		},
	})
	if err != nil {
		return fmt.Errorf("service proxy: Service informer: %w", err)
	}
	// A slice is keyed by its namespace and name; its Service by the service-name label,
	// which the API lets change, so the old object's Service is forgotten first.
	setSlice := func(old, obj any) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		if o, ok := old.(*discoveryv1.EndpointSlice); ok && o.Labels[LabelServiceName] != es.Labels[LabelServiceName] {
			t.DeleteSlice(ServiceName{Namespace: o.Namespace, Name: o.Labels[LabelServiceName]}, o.Name)
		}
		if s := ConvertEndpointSlice(es); s != nil {
			t.SetSlice(s)
		} else {
			t.DeleteSlice(ServiceName{Namespace: es.Namespace, Name: es.Labels[LabelServiceName]}, es.Name)
		}
	}
	epsReg, err := eps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setSlice(nil, obj) },
		UpdateFunc: setSlice,
		DeleteFunc: func(obj any) {
			if es, ok := deleted(obj).(*discoveryv1.EndpointSlice); ok {
				t.DeleteSlice(ServiceName{Namespace: es.Namespace, Name: es.Labels[LabelServiceName]}, es.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("service proxy: EndpointSlice informer: %w", err)
	}

	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	factory.Start(ictx.Done())
	defer factory.Shutdown()
	defer cancel()
	// The registrations' HasSynced: the handlers have received the whole initial lists,
	// not only the stores (see policy.Watcher).
	if !cache.WaitForCacheSync(ictx.Done(), svcReg.HasSynced, epsReg.HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("service proxy: informers did not sync: check the API server and RBAC (get/list/watch on services and discovery.k8s.io endpointslices)")
	}
	t.MarkSynced()
	ns, nes := t.Counts()
	log.Info("service proxy informers synced", "services", ns, "endpointSlices", nes,
		"duration", time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	return ctx.Err()
}

// trackers is every Tracker a Watcher feeds: each event goes to each of them.
type trackers []*Tracker

// fanOut returns ts without the nil ones.
func fanOut(ts []*Tracker) trackers {
	var out trackers
	for _, t := range ts {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

func (ts trackers) SetService(n ServiceName, ports []*ServicePort) {
	for _, t := range ts {
		t.SetService(n, ports)
	}
}

func (ts trackers) DeleteService(n ServiceName) {
	for _, t := range ts {
		t.DeleteService(n)
	}
}

// SetSlice goes to every tracker; each keeps only a slice of its own family.
func (ts trackers) SetSlice(s *Slice) {
	for _, t := range ts {
		t.SetSlice(s)
	}
}

func (ts trackers) DeleteSlice(svc ServiceName, name string) {
	for _, t := range ts {
		t.DeleteSlice(svc, name)
	}
}

func (ts trackers) MarkSynced() {
	for _, t := range ts {
		t.MarkSynced()
	}
}

// Counts are those of the first tracker (Services of its family, its slices).
func (ts trackers) Counts() (services, endpointSlices int) {
	if len(ts) == 0 {
		return 0, 0
	}
	return ts[0].Counts()
}
