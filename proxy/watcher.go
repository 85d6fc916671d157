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
	t := w.Tracker

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
