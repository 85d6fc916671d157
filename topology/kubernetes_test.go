package topology

// These tests drive the Kubernetes source with client-go's fake clientset, which serves list
// and watch from its object tracker, so the real informer code path (list, watch,
// handlers) runs against it; kubernetes_real_test.go runs the same scenario against a real
// kube-apiserver.

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func node(name, podCIDR, internalIP string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if podCIDR != "" {
		n.Spec.PodCIDR = podCIDR
		n.Spec.PodCIDRs = []string{podCIDR}
	}
	if internalIP != "" {
		n.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeInternalIP, Address: internalIP},
		}
	}
	return n
}

// next returns the next event, failing after a generous wait.
func next(t *testing.T, evs <-chan Event) Event {
	t.Helper()
	select {
	case e, ok := <-evs:
		if !ok {
			t.Fatal("events closed")
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s")
	}
	return Event{}
}

// none checks that no event arrives within a short while (only as a guard that nothing
// extra was sent; a later next() would catch it too).
func none(t *testing.T, evs <-chan Event) {
	t.Helper()
	select {
	case e := <-evs:
		t.Fatalf("unexpected event %s %+v", e.Kind, e)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestKubernetesSource(t *testing.T) {
	// Node a (this node) registered before its podCIDR was allocated; b is complete.
	client := fake.NewClientset(node("a", "", "172.16.0.1"), node("b", "10.244.2.0/24", "172.16.0.2"))
	runSourceScenario(t, client, client)
}

// runSourceScenario drives a Kubernetes source for node a reading through client, while
// admin (which may be the same) changes the nodes. The cluster holds nodes a (no podCIDR
// yet, InternalIP 172.16.0.1) and b (10.244.2.0/24, 172.16.0.2): peer add,
// podCIDR set late, status-only update, node add, InternalIP change, delete, a node without
// podCIDR. Spec changes go through Update and address changes through UpdateStatus, as
// the API server requires (Update keeps the stored status).
func runSourceScenario(t *testing.T, client, admin kubernetes.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster, _ := parseIPv4Net("10.244.0.0/16")
	src := NewKubernetes(client, "a", cluster)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	evs := src.Events()
	nodes := admin.CoreV1().Nodes()
	// update replaces the node's spec and its status (addresses, conditions), each through
	// its own endpoint, keeping the stored resourceVersion.
	update := func(n *corev1.Node) {
		t.Helper()
		cur, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec = n.Spec
		if cur, err = nodes.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cur.Status = n.Status
		if _, err := nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("peer add", func(t *testing.T) {
		e := next(t, evs)
		if e.Kind != EventPeerAdded || e.Peer.Name != "b" || e.Peer.NodeIP.String() != "172.16.0.2" || e.Peer.PodSubnet.String() != "10.244.2.0/24" {
			t.Fatalf("want peer-added b, got %s %+v", e.Kind, e)
		}
	})
	t.Run("podCIDR set late", func(t *testing.T) {
		update(node("a", "10.244.1.0/24", "172.16.0.1"))
		e := next(t, evs)
		if e.Kind != EventLocal || e.Local.Name != "a" || e.Local.PodSubnet.String() != "10.244.1.0/24" ||
			e.Local.NodeIP.String() != "172.16.0.1" || e.Local.ClusterCIDR.String() != "10.244.0.0/16" {
			t.Fatalf("want local a 10.244.1.0/24, got %s %+v", e.Kind, e)
		}
	})
	t.Run("status-only update is no event", func(t *testing.T) {
		n := node("b", "10.244.2.0/24", "172.16.0.2")
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		update(n)
		none(t, evs)
	})
	t.Run("node add", func(t *testing.T) {
		if _, err := nodes.Create(ctx, node("c", "10.244.3.0/24", "172.16.0.3"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e := next(t, evs)
		if e.Kind != EventPeerAdded || e.Peer.Name != "c" || e.Peer.NodeIP.String() != "172.16.0.3" {
			t.Fatalf("want peer-added c, got %s %+v", e.Kind, e)
		}
	})
	t.Run("InternalIP change", func(t *testing.T) {
		update(node("b", "10.244.2.0/24", "172.16.0.22"))
		e := next(t, evs)
		if e.Kind != EventPeerUpdated || e.Peer.Name != "b" || e.Peer.NodeIP.String() != "172.16.0.22" || e.Old.NodeIP.String() != "172.16.0.2" {
			t.Fatalf("want peer-updated b 172.16.0.2 → 172.16.0.22, got %s %+v", e.Kind, e)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if err := nodes.Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e := next(t, evs)
		if e.Kind != EventPeerDeleted || e.Peer.Name != "c" {
			t.Fatalf("want peer-deleted c, got %s %+v", e.Kind, e)
		}
	})
	t.Run("node without podCIDR is no peer", func(t *testing.T) {
		if _, err := nodes.Create(ctx, node("d", "", "172.16.0.4"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		none(t, evs)
	})
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for range evs { // closed after Run returns
	}
}

func TestKubernetesSourceNeedsNodeName(t *testing.T) {
	src := NewKubernetes(fake.NewClientset(), "", nil)
	if err := src.Run(context.Background()); err == nil {
		t.Fatal("Run without a node name succeeded")
	}
}

// TestKubernetesSourceIPv6Only: in an IPv6-only cluster (every Node's spec.podCIDRs one
// IPv6 CIDR, its InternalIP IPv6) this node is reported with its IPv6 pod subnet and IPv6
// node IP, no IPv4 subnet, and a peer likewise (reached over the IPv6 underlay); in an
// IPv6-first dual-stack cluster this node is reported IPv6 first, with its IPv4 InternalIP.
func TestKubernetesSourceIPv6Only(t *testing.T) {
	v6 := func(name, cidr, ip string) *corev1.Node {
		n := node(name, "", ip)
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
		return n
	}
	for _, c := range []struct {
		name                    string
		self                    *corev1.Node
		subnet, subnet6, nodeIP string
		v6First                 bool
	}{
		{"IPv6-only", v6("a", "fd00:10:244:1::/64", "fd00:172:16::1"), "<nil>", "fd00:10:244:1::/64", "fd00:172:16::1", false},
		{"IPv6-first", func() *corev1.Node {
			n := v6("a", "fd00:10:244:1::/64", "172.16.0.1")
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "10.244.1.0/24")
			return n
		}(), "10.244.1.0/24", "fd00:10:244:1::/64", "172.16.0.1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset(c.self, v6("b", "fd00:10:244:2::/64", "fd00:172:16::2"))
			src := NewKubernetes(client, "a", nil)
			go func() { _ = src.Run(ctx) }()
			var local *Local
			var peer *Peer
			for local == nil || (c.name == "IPv6-only" && peer == nil) {
				e := next(t, src.Events())
				switch e.Kind {
				case EventLocal:
					local = &e.Local
				case EventPeerAdded:
					peer = &e.Peer
				}
			}
			if fmt.Sprint(local.PodSubnet) != c.subnet || local.PodSubnetIPv6.String() != c.subnet6 || local.NodeIP.String() != c.nodeIP || local.IPv6First != c.v6First {
				t.Fatalf("local %+v, want subnets %s %s, node IP %s, IPv6 first %v", local, c.subnet, c.subnet6, c.nodeIP, c.v6First)
			}
			if peer != nil && (peer.PodSubnet != nil || peer.PodSubnetIPv6.String() != "fd00:10:244:2::/64" || peer.NodeIP.String() != "fd00:172:16::2") {
				t.Fatalf("IPv6-only peer %+v", peer)
			}
		})
	}
}
