package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/topology"
)

// TestCollectPeersFromFile: the peers a topology file lists are all in the start-time
// peer set (so they are part of the node's first flow sync), and the wait ends as soon as
// they are, not after the settle time; the overlay options carry them sorted by name.
func TestCollectPeersFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.yaml")
	spec := "clusterCIDR: 10.244.0.0/16\nnodeName: a\npodSubnet: 10.244.1.0/24\nnodeIP: 172.30.0.1\npeers:\n" +
		"- {name: c, podSubnet: 10.244.3.0/24, nodeIP: 172.30.0.3}\n" +
		"- {name: b, podSubnet: 10.244.2.0/24, nodeIP: 172.30.0.2}\n"
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	src := topology.NewFile(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = src.Run(ctx) }()

	c := &cluster{src: src, peers: map[string]topology.Peer{}}
	for e := range src.Events() {
		if e.Kind == topology.EventLocal {
			break
		}
		c.track(e)
	}
	start := time.Now()
	if err := c.collectPeers(ctx, src.Events(), filePeers(path), time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("collectPeers waited %s although every expected peer was reported", d)
	}
	_, cidr, _ := net.ParseCIDR("10.244.0.0/16")
	c.clusterCIDR, c.nodeIP = cidr, net.ParseIP("172.30.0.1")
	o := c.overlayOptions(Config{TunnelType: "vxlan"})
	if len(o.Peers) != 2 || o.Peers[0].Name != "b" || o.Peers[1].Name != "c" ||
		o.Peers[0].PodSubnet.String() != "10.244.2.0/24" || !o.Peers[1].NodeIP.Equal(net.ParseIP("172.30.0.3")) {
		t.Fatalf("overlay peers %+v, want b (10.244.2.0/24) and c (172.30.0.3)", o.Peers)
	}
	if o.TunnelName != "vxlan0" || o.ClusterCIDR.String() != "10.244.0.0/16" {
		t.Errorf("overlay options %+v", o)
	}
}

// TestCollectPeersSettles: without a list of expected peers the set is complete once the
// source is quiet; a peer deleted in the burst is not in it.
func TestCollectPeersSettles(t *testing.T) {
	_, s2, _ := net.ParseCIDR("10.244.2.0/24")
	_, s3, _ := net.ParseCIDR("10.244.3.0/24")
	b := topology.Peer{Name: "b", NodeIP: net.ParseIP("172.30.0.2"), PodSubnet: s2}
	cp := topology.Peer{Name: "c", NodeIP: net.ParseIP("172.30.0.3"), PodSubnet: s3}
	ev := make(chan topology.Event, 4)
	ev <- topology.Event{Kind: topology.EventPeerAdded, Peer: b}
	ev <- topology.Event{Kind: topology.EventPeerAdded, Peer: cp}
	ev <- topology.Event{Kind: topology.EventPeerDeleted, Peer: cp}
	c := &cluster{peers: map[string]topology.Peer{}}
	if err := c.collectPeers(context.Background(), ev, nil, 50*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(c.peers) != 1 || !c.peers["b"].Equal(b) {
		t.Fatalf("peers %v, want only b", c.peers)
	}
}
