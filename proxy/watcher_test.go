package proxy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// stateSink keeps the desired state an Update stream builds (what a consumer holds)
// and signals each Update.
type stateSink struct {
	mu      sync.Mutex
	state   map[ServicePortName]*ServicePortState
	updates []*Update
	kick    chan struct{}
}

func newStateSink() *stateSink {
	return &stateSink{state: map[ServicePortName]*ServicePortState{}, kick: make(chan struct{}, 1000)}
}

func (s *stateSink) Sync(_ context.Context, u *Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.Full {
		s.state = map[ServicePortName]*ServicePortState{}
	}
	for _, c := range u.Changed {
		s.state[c.Port.Name] = c
	}
	for _, d := range u.Deleted {
		delete(s.state, d)
	}
	s.updates = append(s.updates, u)
	s.kick <- struct{}{}
	return nil
}

// waitState waits until cond holds on the consumer's state (checked after each
// Update), failing after 30 s with what it last saw.
func (s *stateSink) waitState(t *testing.T, what string, cond func(map[ServicePortName]*ServicePortState) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		ok := cond(s.state)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.kick:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			for n, st := range s.state {
				t.Logf("held: %s internal %v %v", n, st.Internal().Verdict, st.Internal().Endpoints)
			}
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// forward returns the addresses ClusterIP traffic of n goes to, or nil if it does not
// forward (or n is not held).
func forward(st map[ServicePortName]*ServicePortState, n ServicePortName) []string {
	s := st[n]
	if s == nil || s.Internal().Verdict != Forward {
		return nil
	}
	var out []string
	for _, e := range s.Internal().Endpoints {
		out = append(out, e.String())
	}
	return out
}

// runProxy runs a Watcher on client and a Runner into a stateSink.
func runProxy(t *testing.T, client kubernetes.Interface) (*Tracker, *stateSink) {
	t.Helper()
	tr := NewTracker("node-a", IPv4)
	sink := newStateSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- (&Watcher{Client: client, Tracker: tr}).Run(ctx) }()
	go func() { done <- (&Runner{Tracker: tr, Sink: sink, MinInterval: 10 * time.Millisecond}).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("watcher or runner ended with %v", err)
			}
		}
	})
	return tr, sink
}

func apiService(ns, name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, Ports: ports}}
	if clusterIP != "" { // "" = the API server allocates one
		s.Spec.ClusterIPs = []string{clusterIP}
	}
	return s
}

func apiSlice(ns, name, svc string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: ports, Endpoints: eps,
	}
}

func apiEndpoint(ip, node string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: &node,
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptrTo(false)}}
}

func slicePorts(name string, proto corev1.Protocol, port int32) []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}}
}

// serviceScenario is the scenario of both watcher tests (fake clientset and a real API
// server): the informers' view reaches the consumer as the right sets. writer makes the
// changes (the watcher has its own client); clusterIP "" lets the API server allocate.
func serviceScenario(t *testing.T, writer kubernetes.Interface, clusterIP string, sink *stateSink, tr *Tracker) {
	ctx := context.Background()
	const ns = "svc"
	web := apiService(ns, "web", clusterIP,
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	created, err := writer.CoreV1().Services(ns).Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cip := created.Spec.ClusterIP
	httpName := ServicePortName{ServiceName{ns, "web"}, "http", ProtocolTCP}
	dnsName := ServicePortName{ServiceName{ns, "web"}, "dns", ProtocolUDP}
	sink.waitState(t, "web's two ports, rejecting (no endpoints)", func(st map[ServicePortName]*ServicePortState) bool {
		return st[httpName] != nil && st[dnsName] != nil && st[httpName].Internal().Verdict == Reject &&
			st[httpName].Port.ClusterIP(IPv4) == netip.MustParseAddr(cip)
	})

	// Two slices: targetPort by name gives each its own port number.
	trig := time.Now().Add(time.Second).UTC()
	a := apiSlice(ns, "web-a", "web", append(slicePorts("http", corev1.ProtocolTCP, 8080), slicePorts("dns", corev1.ProtocolUDP, 5353)...),
		apiEndpoint("10.244.1.2", "node-a", true), apiEndpoint("10.244.2.2", "node-b", true))
	a.Annotations = map[string]string{AnnotationTriggerTime: trig.Format(time.RFC3339Nano)}
	b := apiSlice(ns, "web-b", "web", slicePorts("http", corev1.ProtocolTCP, 9090), apiEndpoint("10.244.2.3", "node-b", true))
	for _, s := range []*discoveryv1.EndpointSlice{a, b} {
		if _, err := writer.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sink.waitState(t, "three http endpoints, two dns", func(st map[ServicePortName]*ServicePortState) bool {
		return slices.Equal(forward(st, httpName), []string{"10.244.1.2:8080", "10.244.2.2:8080", "10.244.2.3:9090"}) &&
			slices.Equal(forward(st, dnsName), []string{"10.244.1.2:5353", "10.244.2.2:5353"})
	})
	sink.mu.Lock()
	var sawTrigger bool
	for _, u := range sink.updates {
		for _, ts := range u.TriggerTimes[ServiceName{ns, "web"}] {
			sawTrigger = sawTrigger || ts.Equal(trig)
		}
	}
	sink.mu.Unlock()
	if !sawTrigger {
		t.Error("the slice's last-change-trigger-time did not reach the consumer")
	}

	// Readiness: 10.244.2.2 becomes not ready (and not serving): it leaves both ports,
	// and its UDP conntrack entries are to be flushed.
	a.Endpoints[1] = apiEndpoint("10.244.2.2", "node-b", false)
	if _, err := writer.DiscoveryV1().EndpointSlices(ns).Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.waitState(t, "10.244.2.2 gone from the selection", func(st map[ServicePortName]*ServicePortState) bool {
		return slices.Equal(forward(st, httpName), []string{"10.244.1.2:8080", "10.244.2.3:9090"}) &&
			slices.Equal(forward(st, dnsName), []string{"10.244.1.2:5353"})
	})
	sink.mu.Lock()
	var stale []string
	for _, u := range sink.updates {
		for _, s := range u.Stale {
			stale = append(stale, s.Endpoint.String())
			if s.Protocol != ProtocolUDP || len(s.Frontends) != 1 || s.Frontends[0] != netip.AddrPortFrom(netip.MustParseAddr(cip), 53) {
				t.Errorf("stale entry %+v", s)
			}
		}
	}
	sink.mu.Unlock()
	if !slices.Equal(stale, []string{"10.244.2.2:5353"}) {
		t.Errorf("stale UDP endpoints %v, want 10.244.2.2:5353", stale)
	}

	// internalTrafficPolicy Local: only node-a's endpoint.
	cur, err := writer.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyLocal)
	if _, err := writer.CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.waitState(t, "internalTrafficPolicy Local", func(st map[ServicePortName]*ServicePortState) bool {
		return slices.Equal(forward(st, httpName), []string{"10.244.1.2:8080"})
	})

	// A headless Service and one of another proxy are never held.
	hl := apiService(ns, "headless", corev1.ClusterIPNone, corev1.ServicePort{Name: "x", Port: 1})
	other := apiService(ns, "other", "10.96.0.99", corev1.ServicePort{Name: "x", Port: 1})
	other.Labels = map[string]string{LabelServiceProxyName: "someone-else"}
	for _, s := range []*corev1.Service{hl, other} {
		if _, err := writer.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Deleting the slices: reject again; deleting the Service: gone.
	for _, n := range []string{"web-a", "web-b"} {
		if err := writer.DiscoveryV1().EndpointSlices(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sink.waitState(t, "no endpoints: reject", func(st map[ServicePortName]*ServicePortState) bool {
		return st[httpName] != nil && st[httpName].Internal().Verdict == Reject
	})
	if err := writer.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.waitState(t, "nothing of namespace "+ns+" held", func(st map[ServicePortName]*ServicePortState) bool {
		for n := range st {
			if n.Namespace == ns {
				return false
			}
		}
		return true
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for n := range tr.services {
		if n.Namespace == ns {
			t.Errorf("tracker holds Service %s (headless and another proxy's are never held)", n)
		}
	}
}

func TestWatcherFakeClientset(t *testing.T) {
	client := fake.NewClientset()
	tr, sink := runProxy(t, client)
	serviceScenario(t, client, "10.96.0.10", sink, tr)
}

// A slice whose kubernetes.io/service-name label changes moves to the other Service.
func TestWatcherSliceRelabelled(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		apiService("svc", "a", "10.96.0.1", corev1.ServicePort{Name: "p", Port: 80}),
		apiService("svc", "b", "10.96.0.2", corev1.ServicePort{Name: "p", Port: 80}))
	_, sink := runProxy(t, client)
	es := apiSlice("svc", "s1", "a", slicePorts("p", corev1.ProtocolTCP, 8080), apiEndpoint("10.244.1.2", "node-a", true))
	if _, err := client.DiscoveryV1().EndpointSlices("svc").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pa := ServicePortName{ServiceName{"svc", "a"}, "p", ProtocolTCP}
	pb := ServicePortName{ServiceName{"svc", "b"}, "p", ProtocolTCP}
	sink.waitState(t, "a has the endpoint", func(st map[ServicePortName]*ServicePortState) bool {
		return len(forward(st, pa)) == 1 && st[pb] != nil && st[pb].Internal().Verdict == Reject
	})
	es.Labels[LabelServiceName] = "b"
	if _, err := client.DiscoveryV1().EndpointSlices("svc").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.waitState(t, "the endpoint moved to b", func(st map[ServicePortName]*ServicePortState) bool {
		return len(forward(st, pb)) == 1 && st[pa] != nil && st[pa].Internal().Verdict == Reject
	})
}
