package controller

import (
	"net"
	"testing"

	"github.com/ofsdn/ofsdn/topology"
)

// TestOverlayOptionsFor: the overlay options of a cluster carry its node IP and CIDRs, the
// tunnel port named for its type, and the peers known at start sorted by name (moved with
// the code from cmd/ofsdn-node's TestCollectPeersFromFile).
func TestOverlayOptionsFor(t *testing.T) {
	_, cidr, _ := net.ParseCIDR("10.244.0.0/16")
	_, s2, _ := net.ParseCIDR("10.244.2.0/24")
	_, s3, _ := net.ParseCIDR("10.244.3.0/24")
	c := &topology.Cluster{ClusterCIDR: cidr, NodeIP: net.ParseIP("172.30.0.1"), Peers: map[string]topology.Peer{
		"c": {Name: "c", NodeIP: net.ParseIP("172.30.0.3"), PodSubnet: s3},
		"b": {Name: "b", NodeIP: net.ParseIP("172.30.0.2"), PodSubnet: s2},
	}}
	o := OverlayOptionsFor(c, "vxlan", 0)
	if len(o.Peers) != 2 || o.Peers[0].Name != "b" || o.Peers[1].Name != "c" ||
		o.Peers[0].PodSubnet.String() != "10.244.2.0/24" || !o.Peers[1].NodeIP.Equal(net.ParseIP("172.30.0.3")) {
		t.Fatalf("overlay peers %+v, want b (10.244.2.0/24) and c (172.30.0.3)", o.Peers)
	}
	if o.TunnelName != "vxlan0" || o.ClusterCIDR.String() != "10.244.0.0/16" || !o.NodeIP.Equal(net.ParseIP("172.30.0.1")) {
		t.Errorf("overlay options %+v", o)
	}
	if g := OverlayOptionsFor(c, "geneve", 6081); g.TunnelName != "geneve0" || g.TunnelDstPort != 6081 {
		t.Errorf("geneve overlay options %+v", g)
	}
}
