package policy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// recorder is a Realizer that keeps every change and signals each delivery.
type recorder struct {
	mu   sync.Mutex
	all  []Changes
	kick chan struct{}
}

func newRecorder() *recorder { return &recorder{kick: make(chan struct{}, 1000)} }

func (r *recorder) realize(ch Changes, _ time.Time) {
	r.mu.Lock()
	r.all = append(r.all, ch)
	r.mu.Unlock()
	r.kick <- struct{}{}
}

// waitFor waits until cond holds on the agent's engine, checking after each delivery
// (and at most every 50 ms for changes that deliver nothing); it fails the test after 30 s.
func waitFor(t *testing.T, a *Agent, what string, cond func(e *Engine) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := false
		a.View(func(e *Engine) { ok = cond(e) })
		if ok {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func startWatcher(t *testing.T, objs ...runtime.Object) (*fake.Clientset, *Agent, *recorder) {
	t.Helper()
	client := fake.NewClientset(objs...)
	a := NewAgent()
	rec := newRecorder()
	a.SetRealizer(rec.realize, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Watcher{Client: client, Agent: a}).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("watcher ended with %v", err)
		}
	})
	select {
	case <-a.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("informers did not sync")
	}
	return client, a, rec
}

func TestWatcherFeedsTheEngine(t *testing.T) {
	w := newWorld()
	var objs []runtime.Object
	for _, n := range w.namespaces {
		objs = append(objs, n)
	}
	for _, p := range w.pods {
		p.Annotations = map[string]string{"big": "annotation that the transform drops"}
		objs = append(objs, p)
	}
	deny := np("deny", "x", networkingv1.NetworkPolicySpec{PodSelector: *podSel("pod", "a")})
	objs = append(objs, deny)
	client, a, rec := startWatcher(t, objs...)
	ctx := context.Background()

	// Attach x/a (on this node) once known: the initial load already isolates it.
	xa := LocalPod{Namespace: "x", Name: "a", IPs: []netip.Addr{podIP("x", "a")}, OFPort: 5}
	var attached Changes
	if err := a.Attach(ctx, xa, func(ch Changes) func() error { attached = ch; return func() error { return nil } }); err != nil {
		t.Fatal(err)
	}
	if len(attached.Isolation) != 1 || !attached.Isolation[0].New.Ingress || attached.Isolation[0].New.Egress {
		t.Fatalf("attach x/a: isolation %+v, want ingress only", attached.Isolation)
	}

	// An allow rule from y/b: one conjunction appears.
	allow := np("allow", "x", networkingv1.NetworkPolicySpec{
		PodSelector: *podSel("pod", "a"),
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: podSel("ns", "y"), PodSelector: podSel("pod", "b")}}}},
	})
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, allow, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "the allow rule's conjunction", func(e *Engine) bool { return len(e.Conjunctions()) == 1 })
	var c *Conjunction
	a.View(func(e *Engine) { c = e.Conjunctions()[0] })
	if len(c.Peers) != 1 || c.Peers[0] != netip.PrefixFrom(podIP("y", "b"), 32) {
		t.Fatalf("conjunction %s: want the one peer y/b", c)
	}

	// y/c gets label pod=b: it joins the peers, and only that conjunction changes.
	rec.mu.Lock()
	n0 := len(rec.all)
	rec.mu.Unlock()
	yc, err := client.CoreV1().Pods("y").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yc.Labels = map[string]string{"pod": "b"}
	if _, err := client.CoreV1().Pods("y").Update(ctx, yc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "y/c among the peers", func(e *Engine) bool { return len(e.Conjunctions()[0].Peers) == 2 })
	rec.mu.Lock()
	got := rec.all[n0:]
	rec.mu.Unlock()
	if len(got) != 1 || len(got[0].Conjunctions) != 1 || got[0].Conjunctions[0].Old == nil || got[0].Conjunctions[0].New.ID != c.ID {
		t.Fatalf("relabel of y/c delivered %+v, want one change of conjunction %d", got, c.ID)
	}

	// Namespace y relabelled: the peers go.
	yns, _ := client.CoreV1().Namespaces().Get(ctx, "y", metav1.GetOptions{})
	yns.Labels = map[string]string{"ns": "other"}
	if _, err := client.CoreV1().Namespaces().Update(ctx, yns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "no peers left", func(e *Engine) bool { return len(e.Conjunctions()) == 0 })

	// Deleting both policies opens x/a.
	for _, name := range []string{"deny", "allow"} {
		if err := client.NetworkingV1().NetworkPolicies("x").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, a, "x/a open", func(e *Engine) bool { return e.Isolation("x", "a") == Isolation{} })

	// The cache held stripped pods: the engine's pod has its labels and IP.
	a.View(func(e *Engine) {
		p := e.Pod("x", "b")
		if p == nil || p.Labels["pod"] != "b" || len(p.IPs) != 1 || len(p.Ports) != 4 {
			t.Fatalf("model pod x/b = %+v", p)
		}
	})
}

func TestWaitPod(t *testing.T) {
	client, a, _ := startWatcher(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	ctx := context.Background()

	// Unknown pod: bounded wait, ErrPodUnknown naming the pod.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := a.WaitPod(short, "x", "late")
	if !errors.Is(err, ErrPodUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPod for a missing pod = %v, want ErrPodUnknown and the deadline", err)
	}

	// A pod created while waiting ends the wait.
	res := make(chan error, 1)
	go func() { res <- a.WaitPod(ctx, "x", "late") }()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "late"}}
	if _, err := client.CoreV1().Pods("x").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitPod did not return after the pod was created")
	}

	// Attach whose install fails is undone: the pod is not local afterwards.
	boom := errors.New("bundle refused")
	err = a.Attach(ctx, LocalPod{Namespace: "x", Name: "late", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.9")}, OFPort: 9}, func(Changes) func() error { return func() error { return boom } })
	if !errors.Is(err, boom) {
		t.Fatalf("Attach = %v, want the install error", err)
	}
	a.View(func(e *Engine) {
		if n := len(e.LocalPods()); n != 0 {
			t.Fatalf("%d local pods after a failed attach", n)
		}
	})
}

func TestWaitPodBeforeSync(t *testing.T) {
	a := NewAgent() // never synced
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := a.WaitPod(ctx, "x", "a")
	if !errors.Is(err, ErrPodUnknown) {
		t.Fatalf("WaitPod before sync = %v", err)
	}
}

func TestStripKeepsOnlyPolicyFields(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "x", Labels: map[string]string{"k": "v"},
			Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{
			{Name: "c", Image: "img", Env: []corev1.EnvVar{{Name: "E"}}, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}},
			{Name: "noports", Image: "img"},
		}, Volumes: []corev1.Volume{{Name: "v"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
	o, _ := StripPod(p)
	s := o.(*corev1.Pod)
	if s.Annotations != nil || s.ManagedFields != nil || s.Spec.Volumes != nil || s.Status.Conditions != nil ||
		len(s.Spec.Containers) != 1 || s.Spec.Containers[0].Image != "" || s.Spec.Containers[0].Env != nil {
		t.Fatalf("stripped pod kept too much: %+v", s)
	}
	if s.Labels["k"] != "v" || s.Spec.NodeName != "n1" || s.Status.PodIPs[0].IP != "10.0.0.1" || s.Spec.Containers[0].Ports[0].Name != "http" {
		t.Fatalf("stripped pod lost policy fields: %+v", s)
	}
	n, _ := StripNetworkPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": "{...}"}}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Ingress"}}})
	if np := n.(*networkingv1.NetworkPolicy); np.Annotations != nil || len(np.Spec.PolicyTypes) != 1 {
		t.Fatalf("stripped policy: %+v", np)
	}
}

// TestSyncedMeansEveryObjectDelivered: Synced is closed only once the event handlers have
// received the whole initial lists, not when the informers' stores hold them (the
// handlers lag: at 10,000 pods a restarted daemon once compiled its rules with 414).
func TestSyncedMeansEveryObjectDelivered(t *testing.T) {
	const n = 5000
	objs := []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}}
	for i := 0; i < n; i++ {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p-%d", i),
			Labels: map[string]string{"app": "a"}}, Spec: corev1.PodSpec{NodeName: "elsewhere"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250)}}}})
	}
	a := NewAgent()
	// Hold the agent's lock while the informers list: the handlers back up behind it.
	a.mu.Lock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Watcher{Client: fake.NewClientset(objs...), Agent: a}).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("watcher ended with %v", err)
		}
	})
	time.Sleep(300 * time.Millisecond)
	a.mu.Unlock()
	select {
	case <-a.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("informers did not sync")
	}
	var pods, nss int
	a.View(func(e *Engine) { pods, nss, _ = e.Counts() })
	if pods != n || nss != 1 {
		t.Fatalf("at Synced the engine had %d pods and %d namespaces, want %d and 1", pods, nss, n)
	}
}
