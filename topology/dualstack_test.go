package topology

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestFileSpecPodSubnets: a dual-stack topology file lists the pod subnets, IPv4 first,
// for the node and its peers; the old single podSubnet form parses as before.
func TestFileSpecPodSubnets(t *testing.T) {
	l, peers, err := ParseFileSpec([]byte(`
nodeName: node-a
podSubnets: [10.244.1.0/24, "fd00:10:244:1::/64"]
clusterCIDRIPv6: "fd00:10:244::/56"
peers:
- {name: node-b, podSubnets: [10.244.2.0/24, "fd00:10:244:2::/64"], nodeIP: 172.16.0.2}
- {name: node-c, podSubnet: 10.244.3.0/24, nodeIP: 172.16.0.3}
`))
	if err != nil {
		t.Fatal(err)
	}
	if l.PodSubnet.String() != "10.244.1.0/24" || l.PodSubnetIPv6.String() != "fd00:10:244:1::/64" {
		t.Fatalf("local subnets %v %v", l.PodSubnet, l.PodSubnetIPv6)
	}
	if l.ClusterCIDRIPv6.String() != "fd00:10:244::/56" {
		t.Fatalf("IPv6 cluster CIDR %v", l.ClusterCIDRIPv6)
	}
	if b := peers["node-b"]; b.PodSubnetIPv6.String() != "fd00:10:244:2::/64" || b.PodSubnet.String() != "10.244.2.0/24" {
		t.Fatalf("peer b %v", b)
	}
	if c := peers["node-c"]; c.PodSubnetIPv6 != nil {
		t.Fatalf("peer c has an IPv6 subnet %v", c.PodSubnetIPv6)
	}
	for _, c := range []struct{ spec, want string }{
		{"nodeName: a\npodSubnets: [\"fd00::/64\", \"fd01::/64\"]", "two IPv6 entries"},
		{"nodeName: a\npodSubnets: [10.0.0.0/24, 10.1.0.0/24]", "two IPv4 entries"},
		{"nodeName: a\npodSubnets: [10.0.0.0/24, not-a-cidr]", "entry 2"},
		{"nodeName: a\npodSubnet: 10.9.0.0/24\npodSubnets: [10.0.0.0/24]", "is not the list's IPv4 entry"},
		{"nodeName: a\npodSubnets: [10.0.0.0/24, \"fd00::/127\"]", "/126 or shorter"},
		{"nodeName: a\npodSubnet: 10.0.0.0/24\nclusterCIDRIPv6: 10.0.0.0/8", "clusterCIDRIPv6"},
	} {
		if _, _, err := ParseFileSpec([]byte(c.spec)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}

// TestNodePodSubnets: Node.spec.podCIDRs gives one subnet per family, in either order
// (the IPv6-first order reported); an IPv6 one alone is an IPv6-only node's.
func TestNodePodSubnets(t *testing.T) {
	for _, c := range []struct {
		cidrs   []string
		v4, v6  string
		v6First bool
	}{
		{[]string{"10.244.1.0/24", "fd00:10:244:1::/64"}, "10.244.1.0/24", "fd00:10:244:1::/64", false},
		{[]string{"fd00:10:244:1::/64", "10.244.1.0/24"}, "10.244.1.0/24", "fd00:10:244:1::/64", true},
		{[]string{"10.244.1.0/24"}, "10.244.1.0/24", "<nil>", false},
		{[]string{"fd00:10:244:1::/64"}, "<nil>", "fd00:10:244:1::/64", false},
	} {
		v4, v6, first := nodePodSubnets(&corev1.Node{Spec: corev1.NodeSpec{PodCIDRs: c.cidrs}})
		if v4.String() != c.v4 || v6.String() != c.v6 || first != c.v6First {
			t.Errorf("podCIDRs %v: %v, %v, IPv6 first %v; want %s, %s, %v", c.cidrs, v4, v6, first, c.v4, c.v6, c.v6First)
		}
	}
}

// TestNodeInternalIPFamily: an IPv6-only node is reached over its IPv6 InternalIP (the
// IPv6 underlay), every other node over its IPv4 one, as before.
func TestNodeInternalIPFamily(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeInternalIP, Address: "fd00:172:16::2"},
		{Type: corev1.NodeInternalIP, Address: "172.16.0.2"},
	}}}
	if got := nodeInternalIP(n, false); got.String() != "172.16.0.2" {
		t.Errorf("IPv4 node: %v, want 172.16.0.2", got)
	}
	if got := nodeInternalIP(n, true); got.String() != "fd00:172:16::2" {
		t.Errorf("IPv6-only node: %v, want fd00:172:16::2", got)
	}
}

// TestIPv6OnlyTopologySources: the topology file's podSubnets and nodeIP, and flannel's
// subnet.env with FLANNEL_IPV6_SUBNET alone, make an IPv6-only node (and peers) with an
// IPv6 underlay; a file listing the IPv6 subnet first makes an IPv6-first node.
func TestIPv6OnlyTopologySources(t *testing.T) {
	l, peers, err := ParseFileSpec([]byte("nodeName: a\npodSubnets: [\"fd00:10:244:1::/64\"]\nnodeIP: fd00:172:16::1\nclusterCIDRIPv6: fd00:10:244::/56\npeers:\n- {name: b, podSubnets: [\"fd00:10:244:2::/64\"], nodeIP: \"fd00:172:16::2\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.PodSubnet != nil || l.PodSubnetIPv6.String() != "fd00:10:244:1::/64" || l.NodeIP.String() != "fd00:172:16::1" || l.IPv6First {
		t.Fatalf("IPv6-only file: %+v", l)
	}
	if p := peers["b"]; p.PodSubnet != nil || p.PodSubnetIPv6.String() != "fd00:10:244:2::/64" || p.NodeIP.String() != "fd00:172:16::2" {
		t.Fatalf("IPv6-only peer: %+v", p)
	}
	l, _, err = ParseFileSpec([]byte("nodeName: a\npodSubnets: [\"fd00:10:244:1::/64\", 10.244.1.0/24]\n"))
	if err != nil || !l.IPv6First || l.PodSubnet.String() != "10.244.1.0/24" {
		t.Fatalf("IPv6-first file: %+v, %v", l, err)
	}
	l, _, err = ParseFileSpec([]byte("nodeName: a\npodSubnets: [10.244.1.0/24, \"fd00:10:244:1::/64\"]\n"))
	if err != nil || l.IPv6First {
		t.Fatalf("IPv4-first file: %+v, %v", l, err)
	}
	l, err = ParseFlannelEnv([]byte("FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1430\n"))
	if err != nil || l.PodSubnet != nil || l.PodSubnetIPv6.String() != "fd00:10:244:1::/64" || l.ClusterCIDRIPv6.String() != "fd00:10:244::/56" {
		t.Fatalf("IPv6-only subnet.env: %+v, %v", l, err)
	}
	if _, err := ParseFlannelEnv([]byte("FLANNEL_MTU=1430\n")); err == nil || !strings.Contains(err.Error(), "FLANNEL_SUBNET") {
		t.Fatalf("subnet.env without either subnet: %v", err)
	}
}

// TestFlannelEnvIPv6: a dual-stack flannel's subnet.env gives the IPv6 pod subnet.
func TestFlannelEnvIPv6(t *testing.T) {
	l, err := ParseFlannelEnv([]byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.PodSubnet.String() != "10.244.1.0/24" || l.PodSubnetIPv6.String() != "fd00:10:244:1::/64" || l.ClusterCIDRIPv6.String() != "fd00:10:244::/56" {
		t.Fatalf("subnets %v %v, IPv6 cluster CIDR %v", l.PodSubnet, l.PodSubnetIPv6, l.ClusterCIDRIPv6)
	}
	if _, err := ParseFlannelEnv([]byte("FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_SUBNET=10.9.0.1/24\n")); err == nil || !strings.Contains(err.Error(), "FLANNEL_IPV6_SUBNET") {
		t.Fatalf("an IPv4 FLANNEL_IPV6_SUBNET: %v", err)
	}
	l, err = ParseFlannelEnv([]byte("FLANNEL_SUBNET=10.244.1.1/24\n"))
	if err != nil || l.PodSubnetIPv6 != nil {
		t.Fatalf("IPv4-only subnet.env: %v, %v", l.PodSubnetIPv6, err)
	}
}

// TestPodMTUIPv6Underlay: over an IPv6 underlay the tunnels' outer header is 70 bytes,
// not 50 (IPv6 40 + UDP 8 + VXLAN/Geneve 8 + inner Ethernet 14).
func TestPodMTUIPv6Underlay(t *testing.T) {
	if got := (Underlay{MTU: 1500, IP: net.ParseIP("fd00:172:16::1")}).PodMTU(); got != 1430 {
		t.Errorf("IPv6 underlay of MTU 1500: pod MTU %d, want 1430", got)
	}
	if got := (Underlay{MTU: 1500, IP: net.ParseIP("172.16.0.1")}).PodMTU(); got != 1450 {
		t.Errorf("IPv4 underlay of MTU 1500: pod MTU %d, want 1450", got)
	}
}

// TestPrepareIPv6OnlyRefusesIPv4Ranges: an IPv6-only node (from its topology) refuses an
// IPv4 cluster or service range, naming the one key that is set and its value.
func TestPrepareIPv6OnlyRefusesIPv4Ranges(t *testing.T) {
	_, svc, _ := net.ParseCIDR("10.96.0.0/12")
	for _, c := range []struct {
		name, spec string
		opts       ClusterOptions
		want, not  string
	}{
		{"clusterCIDR in the file", "clusterCIDR: 10.244.0.0/16\nnodeName: a\npodSubnets: [fd00:10:244:1::/64]\nnodeIP: fd00:172:16::1\n",
			ClusterOptions{}, "clusterCIDR 10.244.0.0/16 is an IPv4 range: leave clusterCIDR out", "serviceCIDR"},
		{"serviceCIDR in the config", "nodeName: a\npodSubnets: [fd00:10:244:1::/64]\nnodeIP: fd00:172:16::1\n",
			ClusterOptions{ServiceCIDR: svc}, "serviceCIDR 10.96.0.0/12 is an IPv4 range: leave serviceCIDR out of the config", "clusterCIDR"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "topology.yaml")
			if err := os.WriteFile(path, []byte(c.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Prepare(ctx, ctx, NewFile(path), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.not) {
				t.Fatalf("Prepare: %v; want an error saying %q and not naming %s", err, c.want, c.not)
			}
		})
	}
}

// TestFileSpecMTURange: the topology file's mtu is 0 (auto) or a link MTU, 68..65535;
// the refusal names both.
func TestFileSpecMTURange(t *testing.T) {
	spec := func(mtu int) []byte {
		return []byte(fmt.Sprintf("nodeName: a\npodSubnet: 10.244.1.0/24\nnodeIP: 172.16.0.1\nmtu: %d\n", mtu))
	}
	for _, mtu := range []int{0, 68, 1450, 65535} {
		l, _, err := ParseFileSpec(spec(mtu))
		if err != nil || l.MTU != mtu {
			t.Errorf("mtu %d: %+v, %v; want accepted", mtu, l.MTU, err)
		}
	}
	for _, mtu := range []int{-1, 1, 67, 65536} {
		if _, _, err := ParseFileSpec(spec(mtu)); err == nil || !strings.Contains(err.Error(), "68..65535") || !strings.Contains(err.Error(), "0 (auto") {
			t.Errorf("mtu %d: %v; want refused naming 0 (auto) and 68..65535", mtu, err)
		}
	}
}
