package topology

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestCollectPeersFromFile: the peers a topology file lists are all in the start-time
// peer set (so they are part of the node's first flow sync), and the wait ends as soon as
// they are, not after the settle time (the overlay options carry them sorted by name:
// controller's TestOverlayOptionsFor).
func TestCollectPeersFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "yaml")
	spec := "clusterCIDR: 10.244.0.0/16\nnodeName: a\npodSubnet: 10.244.1.0/24\nnodeIP: 172.30.0.1\npeers:\n" +
		"- {name: c, podSubnet: 10.244.3.0/24, nodeIP: 172.30.0.3}\n" +
		"- {name: b, podSubnet: 10.244.2.0/24, nodeIP: 172.30.0.2}\n"
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	src := NewFile(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = src.Run(ctx) }()

	c := &Cluster{Source: src, Peers: map[string]Peer{}}
	for e := range src.Events() {
		if e.Kind == EventLocal {
			break
		}
		c.track(e)
	}
	start := time.Now()
	if err := c.collectPeers(ctx, src.Events(), filePeers(path), nil, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("collectPeers waited %s although every expected peer was reported", d)
	}
	if len(c.Peers) != 2 || c.Peers["b"].PodSubnet.String() != "10.244.2.0/24" || !c.Peers["c"].NodeIP.Equal(net.ParseIP("172.30.0.3")) {
		t.Fatalf("peers %v, want b (10.244.2.0/24) and c (172.30.0.3)", c.Peers)
	}
}

// TestCollectPeersSettles: without a list of expected peers the set is complete once the
// source is quiet; a peer deleted in the burst is not in it.
func TestCollectPeersSettles(t *testing.T) {
	_, s2, _ := net.ParseCIDR("10.244.2.0/24")
	_, s3, _ := net.ParseCIDR("10.244.3.0/24")
	b := Peer{Name: "b", NodeIP: net.ParseIP("172.30.0.2"), PodSubnet: s2}
	cp := Peer{Name: "c", NodeIP: net.ParseIP("172.30.0.3"), PodSubnet: s3}
	ev := make(chan Event, 4)
	ev <- Event{Kind: EventPeerAdded, Peer: b}
	ev <- Event{Kind: EventPeerAdded, Peer: cp}
	ev <- Event{Kind: EventPeerDeleted, Peer: cp}
	c := &Cluster{Peers: map[string]Peer{}}
	if err := c.collectPeers(context.Background(), ev, nil, nil, 50*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(c.Peers) != 1 || !c.Peers["b"].Equal(b) {
		t.Fatalf("peers %v, want only b", c.Peers)
	}
}

// TestCollectPeersWaitsForSync: with a source that says when its initial state is
// reported, a pause longer than the settle time (a busy machine) does not end the wait:
// the peer reported after the pause is in the start-time set. Without the sync signal the
// settle time would have ended the wait with b only.
func TestCollectPeersWaitsForSync(t *testing.T) {
	_, s2, _ := net.ParseCIDR("10.244.2.0/24")
	_, s3, _ := net.ParseCIDR("10.244.3.0/24")
	ev := make(chan Event, 4)
	synced := make(chan struct{})
	ev <- Event{Kind: EventPeerAdded, Peer: Peer{Name: "b", NodeIP: net.ParseIP("172.30.0.2"), PodSubnet: s2}}
	go func() {
		time.Sleep(300 * time.Millisecond) // six settle times
		ev <- Event{Kind: EventPeerAdded, Peer: Peer{Name: "c", NodeIP: net.ParseIP("172.30.0.3"), PodSubnet: s3}}
		close(synced)
	}()
	c := &Cluster{Peers: map[string]Peer{}}
	if err := c.collectPeers(context.Background(), ev, nil, synced, 50*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(c.Peers) != 2 {
		t.Fatalf("peers %v, want b and c", c.Peers)
	}
}

// TestKubernetesSourceSyncedHasEveryPeer: once the Kubernetes source's Synced channel is
// closed, every Node of the initial list is in the events read so far or buffered, also
// with more nodes than the event buffer holds (the handler blocks until they are read).
func TestKubernetesSourceSyncedHasEveryPeer(t *testing.T) {
	const nodes = 150
	var objs []runtime.Object
	for i := 0; i < nodes; i++ {
		objs = append(objs, node(fmt.Sprintf("n%03d", i), fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256), fmt.Sprintf("172.16.%d.%d", i/256, 1+i%250)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := NewKubernetes(fake.NewClientset(objs...), "n000", nil)
	go func() { _ = src.Run(ctx) }()
	c := &Cluster{Peers: map[string]Peer{}}
	for local := false; !local; {
		e := next(t, src.Events())
		local = e.Kind == EventLocal
		c.track(e)
	}
	if err := c.collectPeers(ctx, src.Events(), nil, src.Synced(), time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(c.Peers) != nodes-1 {
		t.Fatalf("%d peers at sync, want %d", len(c.Peers), nodes-1)
	}
}

// TestCollectPeersSyncWaitBounded: a source whose sync never comes (an informer that never
// sees its initial list) holds the start for the wait's limit, no longer, and keeps the
// peers it did report.
func TestCollectPeersSyncWaitBounded(t *testing.T) {
	_, s2, _ := net.ParseCIDR("10.244.2.0/24")
	ev := make(chan Event, 1)
	ev <- Event{Kind: EventPeerAdded, Peer: Peer{Name: "b", NodeIP: net.ParseIP("172.30.0.2"), PodSubnet: s2}}
	c := &Cluster{Peers: map[string]Peer{}}
	start := time.Now()
	if err := c.collectPeers(context.Background(), ev, nil, make(chan struct{}), 10*time.Millisecond, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 10*time.Second {
		t.Errorf("collectPeers returned after %s, want the 300 ms limit", d)
	}
	if len(c.Peers) != 1 {
		t.Errorf("peers %v, want b", c.Peers)
	}
}
