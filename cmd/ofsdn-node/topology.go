package main

// Topology wiring: the source the config names (file or kubernetes) and the config's
// values that take precedence over it, handed to topology.Prepare; the cluster it returns
// feeds the node's overlay (controller.OverlayOptionsFor) and its membership
// (controller.Node.JoinCluster).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ofsdn/ofsdn/topology"
)

// defaultMTU is the pod MTU without a topology and without mtu in the config (bytes): a
// 1500-byte underlay minus VXLAN's 50.
const defaultMTU = 1450

// prepareCluster starts the topology source the config names (it runs until runCtx ends)
// and waits, bounded by waitCtx, for this node's settings and peers (topology.Prepare,
// the config's values first). Without a topology it returns nil.
func prepareCluster(waitCtx, runCtx context.Context, cfg Config, log *slog.Logger) (*topology.Cluster, error) {
	var clusterCIDR *net.IPNet
	if cfg.ClusterCIDR != "" {
		_, clusterCIDR, _ = net.ParseCIDR(cfg.ClusterCIDR) // checked by loadConfig
	}
	if cfg.Topology == "" {
		if set := clusterKeysSet(cfg); len(set) > 0 {
			log.Warn("config keys ignored without a topology (a single node: no overlay, no masquerade, no IPv6 egress): set topology to file or kubernetes to use them",
				"keys", strings.Join(set, ", "))
		}
		return nil, nil
	}
	if set := podSubnetKeysSet(cfg); len(set) > 0 {
		from := map[string]string{"file": "the topology file's entry for this node", "kubernetes": "the Node's spec.podCIDRs"}[cfg.Topology]
		log.Warn("config keys ignored with a topology: the node's pod subnets come from "+from+"; leave them out of the config",
			"keys", strings.Join(set, ", "), "topology", cfg.Topology)
	}
	var src topology.Source
	switch cfg.Topology {
	case "file":
		f := topology.NewFile(cfg.TopologyFile)
		f.Logger = log
		src = f
	case "kubernetes":
		client, err := kubeClient(cfg.Kubeconfig)
		if err != nil {
			return nil, err
		}
		k := topology.NewKubernetes(client, cfg.NodeName, clusterCIDR)
		k.Logger = log
		src = k
	}
	o := topology.ClusterOptions{NodeName: cfg.NodeName, ClusterCIDR: clusterCIDR, MTU: cfg.MTU,
		Masquerade: cfg.Masquerade, Logger: log}
	if cfg.ServiceCIDR != "" {
		_, o.ServiceCIDR, _ = net.ParseCIDR(cfg.ServiceCIDR)
	}
	if cfg.ClusterCIDRIPv6 != "" {
		_, o.ClusterCIDRIPv6, _ = net.ParseCIDR(cfg.ClusterCIDRIPv6) // checked by loadConfig
	}
	if cfg.NodeIP != "" {
		o.NodeIP = net.ParseIP(cfg.NodeIP) // IPv4 or IPv6 (an IPv6 underlay), checked by loadConfig
		if ip4 := o.NodeIP.To4(); ip4 != nil {
			o.NodeIP = ip4
		}
	}
	return topology.Prepare(waitCtx, runCtx, src, o)
}

// kubeClient returns a clientset from kubeconfig, or the in-cluster config if it is "".
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w (in a pod, mount the service account; elsewhere set kubeconfig)", err)
	}
	rc.UserAgent = "ofsdn-node"
	// Protobuf, as kube-proxy asks for: every object of the informers (Pods, Namespaces,
	// NetworkPolicies, Services, EndpointSlices, Nodes: all built-in kinds, which the API
	// server serves in protobuf) decodes at a fraction of JSON's CPU, on the node and in
	// the API server's watch encoding. JSON stays acceptable for anything served without.
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return kubernetes.NewForConfig(rc)
}

// podSubnetKeysSet returns the pod subnet keys cfg sets (podSubnet given in the file or
// by flag, even at its default value; podSubnets): a topology replaces them with the
// node's own, and the node says so at start.
func podSubnetKeysSet(cfg Config) []string {
	var set []string
	if cfg.podSubnetSet {
		set = append(set, "podSubnet")
	}
	if len(cfg.PodSubnets) > 0 {
		set = append(set, "podSubnets")
	}
	return set
}

// clusterKeysSet returns the config keys that only a topology gives effect to (the
// overlay's and the node's cluster settings) and that cfg sets: a node without a topology
// ignores them, and says so at start.
func clusterKeysSet(cfg Config) []string {
	var set []string
	for _, k := range []struct {
		name string
		on   bool
	}{
		{"clusterCIDR", cfg.ClusterCIDR != ""},
		{"clusterCIDRIPv6", cfg.ClusterCIDRIPv6 != ""},
		{"serviceCIDR", cfg.ServiceCIDR != ""},
		{"nodeIP", cfg.NodeIP != ""},
		{"masquerade", cfg.Masquerade != nil},
	} {
		if k.on {
			set = append(set, k.name)
		}
	}
	return set
}
