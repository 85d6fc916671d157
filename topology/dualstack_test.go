package topology

import (
	"strings"
	"testing"

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
		{"nodeName: a\npodSubnets: [\"fd00::/64\", 10.0.0.0/24]", "first entry"},
		{"nodeName: a\npodSubnets: [10.0.0.0/24, 10.1.0.0/24]", "second entry"},
		{"nodeName: a\npodSubnet: 10.9.0.0/24\npodSubnets: [10.0.0.0/24]", "is not the list's IPv4 entry"},
		{"nodeName: a\npodSubnets: [10.0.0.0/24, \"fd00::/127\"]", "/126 or shorter"},
		{"nodeName: a\npodSubnet: 10.0.0.0/24\nclusterCIDRIPv6: 10.0.0.0/8", "clusterCIDRIPv6"},
	} {
		if _, _, err := ParseFileSpec([]byte(c.spec)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}

// TestNodePodSubnets: Node.spec.podCIDRs gives one subnet per family, in either order;
// an IPv6 one without an IPv4 one is not taken (IPv6-only nodes are a later slice).
func TestNodePodSubnets(t *testing.T) {
	for _, c := range []struct {
		cidrs    []string
		v4, v6   string
		v4Absent bool
	}{
		{[]string{"10.244.1.0/24", "fd00:10:244:1::/64"}, "10.244.1.0/24", "fd00:10:244:1::/64", false},
		{[]string{"fd00:10:244:1::/64", "10.244.1.0/24"}, "10.244.1.0/24", "fd00:10:244:1::/64", false},
		{[]string{"10.244.1.0/24"}, "10.244.1.0/24", "<nil>", false},
		{[]string{"fd00:10:244:1::/64"}, "<nil>", "<nil>", true},
	} {
		v4, v6 := nodePodSubnets(&corev1.Node{Spec: corev1.NodeSpec{PodCIDRs: c.cidrs}})
		if v4.String() != c.v4 || v6.String() != c.v6 {
			t.Errorf("podCIDRs %v: %v, %v; want %s, %s", c.cidrs, v4, v6, c.v4, c.v6)
		}
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
