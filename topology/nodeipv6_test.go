package topology

// Each node's IPv6 address beside its IPv4 underlay address (NodeIPv6): where pods reach
// IPv6 NodePorts (kube-proxy's IPv6 proxier serves them at the node's IPv6 InternalIP).

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// dualNode is a dual-stack Node: IPv4 and IPv6 podCIDRs, InternalIPs ips (in order).
func dualNode(name string, i int, ips ...string) *corev1.Node {
	n := node(name, fmt.Sprintf("10.244.%d.0/24", i), "")
	n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, fmt.Sprintf("fd00:10:244:%d::/64", i))
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return n
}

// TestKubernetesSourceNodeIPv6: a dual-stack Node with an IPv4 and an IPv6 InternalIP
// (either order) is this node or a peer on the IPv4 underlay with the IPv6 one as
// NodeIPv6; a peer whose only change is its IPv6 InternalIP is updated (and again when
// it loses it), this node's is a new EventLocal; an IPv6-only node has none (its
// NodeIP is the IPv6 one).
func TestKubernetesSourceNodeIPv6(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v6only := node("c", "fd00:10:244:3::/64", "fd00:172:16::3")
	client := fake.NewClientset(dualNode("a", 1, "172.16.0.1", "fd00:172:16::1"), dualNode("b", 2, "fd00:172:16::2", "172.16.0.2"))
	src := NewKubernetes(client, "a", nil)
	go func() { _ = src.Run(ctx) }()
	evs := src.Events()
	var local *Local
	var peer *Peer
	for local == nil || peer == nil {
		switch e := next(t, evs); e.Kind {
		case EventLocal:
			local = &e.Local
		case EventPeerAdded:
			peer = &e.Peer
		default:
			t.Fatalf("unexpected %s %+v", e.Kind, e)
		}
	}
	if local.NodeIP.String() != "172.16.0.1" || local.NodeIPv6.String() != "fd00:172:16::1" {
		t.Fatalf("this node: node IP %v, IPv6 %v; want 172.16.0.1 and fd00:172:16::1", local.NodeIP, local.NodeIPv6)
	}
	if peer.Name != "b" || peer.NodeIP.String() != "172.16.0.2" || peer.NodeIPv6.String() != "fd00:172:16::2" {
		t.Fatalf("peer %+v (IPv6 %v): want b at 172.16.0.2 and fd00:172:16::2", peer, peer.NodeIPv6)
	}
	nodes := client.CoreV1().Nodes()
	setAddrs := func(n *corev1.Node) {
		t.Helper()
		if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("peer's IPv6 InternalIP changed", func(t *testing.T) {
		setAddrs(dualNode("b", 2, "172.16.0.2", "fd00:172:16::22"))
		e := next(t, evs)
		if e.Kind != EventPeerUpdated || e.Peer.NodeIPv6.String() != "fd00:172:16::22" || e.Old.NodeIPv6.String() != "fd00:172:16::2" ||
			e.Peer.NodeIP.String() != "172.16.0.2" {
			t.Fatalf("got %s %+v (IPv6 %v → %v), want peer-updated b fd00:172:16::2 → fd00:172:16::22", e.Kind, e, e.Old.NodeIPv6, e.Peer.NodeIPv6)
		}
	})
	t.Run("peer's IPv6 InternalIP removed", func(t *testing.T) {
		setAddrs(dualNode("b", 2, "172.16.0.2"))
		if e := next(t, evs); e.Kind != EventPeerUpdated || e.Peer.NodeIPv6 != nil {
			t.Fatalf("got %s %+v, want peer-updated b without an IPv6 address", e.Kind, e)
		}
	})
	t.Run("this node's IPv6 InternalIP changed", func(t *testing.T) {
		setAddrs(dualNode("a", 1, "172.16.0.1", "fd00:172:16::11"))
		if e := next(t, evs); e.Kind != EventLocal || e.Local.NodeIPv6.String() != "fd00:172:16::11" || e.Local.NodeIP.String() != "172.16.0.1" {
			t.Fatalf("got %s %+v, want local with IPv6 fd00:172:16::11", e.Kind, e)
		}
	})
	t.Run("an IPv6-only peer has no NodeIPv6", func(t *testing.T) {
		if _, err := nodes.Create(ctx, v6only, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if e := next(t, evs); e.Kind != EventPeerAdded || e.Peer.NodeIP.String() != "fd00:172:16::3" || e.Peer.NodeIPv6 != nil {
			t.Fatalf("got %s %+v, want peer-added c at fd00:172:16::3 without NodeIPv6", e.Kind, e)
		}
	})
}

// TestFileNodeIPv6: the topology file's nodeIPv6 (this node's and a peer's) beside an
// IPv4 nodeIP; a peer whose only change is its nodeIPv6 is updated; nodeIPv6 must be
// IPv6, and not beside an IPv6 nodeIP.
func TestFileNodeIPv6(t *testing.T) {
	const spec = `clusterCIDR: 10.244.0.0/16
nodeName: a
podSubnets: [10.244.1.0/24, "fd00:10:244:1::/64"]
nodeIP: 172.16.0.1
nodeIPv6: "fd00:172:16::1"
peers:
- {name: b, podSubnets: [10.244.2.0/24, "fd00:10:244:2::/64"], nodeIP: 172.16.0.2, nodeIPv6: "fd00:172:16::2"}
- {name: c, podSubnet: 10.244.3.0/24, nodeIP: 172.16.0.3}
`
	path := filepath.Join(t.TempDir(), "topology.yaml")
	writeAtomic(t, path, spec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := NewFile(path)
	src.PollInterval = time.Hour // change notifications only
	go func() { _ = src.Run(ctx) }()
	evs := src.Events()
	if e := next(t, evs); e.Kind != EventLocal || e.Local.NodeIPv6.String() != "fd00:172:16::1" {
		t.Fatalf("first event %s %+v, want local with IPv6 fd00:172:16::1", e.Kind, e)
	}
	got := map[string]Peer{}
	for range 2 {
		e := next(t, evs)
		got[e.Peer.Name] = e.Peer
	}
	if got["b"].NodeIPv6.String() != "fd00:172:16::2" || got["c"].NodeIPv6 != nil {
		t.Fatalf("peers b IPv6 %v, c IPv6 %v: want fd00:172:16::2 and none", got["b"].NodeIPv6, got["c"].NodeIPv6)
	}
	writeAtomic(t, path, strings.Replace(spec, `nodeIPv6: "fd00:172:16::2"`, `nodeIPv6: "fd00:172:16::22"`, 1))
	if e := next(t, evs); e.Kind != EventPeerUpdated || e.Peer.Name != "b" || e.Peer.NodeIPv6.String() != "fd00:172:16::22" ||
		e.Old.NodeIPv6.String() != "fd00:172:16::2" {
		t.Fatalf("got %s %+v, want peer-updated b fd00:172:16::2 → fd00:172:16::22", e.Kind, e)
	}
	none(t, evs)

	for _, c := range []struct{ spec, want string }{
		{"nodeName: a\npodSubnet: 10.0.0.0/24\nnodeIPv6: 172.16.0.1", "nodeIPv6: \"172.16.0.1\" is not a unicast IPv6 address"},
		{"nodeName: a\npodSubnet: 10.0.0.0/24\nnodeIP: \"fd00::1\"\nnodeIPv6: \"fd00::2\"", "beside the IPv6 nodeIP"},
		{"nodeName: a\npodSubnet: 10.0.0.0/24\npeers:\n- {name: b, podSubnet: 10.0.1.0/24, nodeIP: 172.16.0.2, nodeIPv6: \"fe80::1\"}", "peers[0] (b) nodeIPv6"},
	} {
		if _, _, err := ParseFileSpec([]byte(c.spec)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}
