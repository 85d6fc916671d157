package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// deployConfig returns the config file shipped in deploy/ofsdn.yaml's ConfigMap.
func deployConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/ofsdn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var conf string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err == nil && cm.Kind == "ConfigMap" {
			conf = cm.Data["config.yaml"]
		}
	}
	if conf == "" {
		t.Fatal("no ConfigMap with config.yaml in deploy/ofsdn.yaml")
	}
	return conf
}

// loadDeployConfig loads conf as the daemon does, on node-a.
func loadDeployConfig(t *testing.T, conf string) Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_NAME", "node-a")
	cfg, err := loadConfig([]string{"-config", path})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDeployConfigMapLoads: the config file shipped in deploy/ofsdn.yaml's ConfigMap is
// accepted by the daemon as it is.
func TestDeployConfigMapLoads(t *testing.T) {
	cfg := loadDeployConfig(t, deployConfig(t))
	if cfg.Topology != "kubernetes" || cfg.NodeName != "node-a" || cfg.MTU != 0 || cfg.CNIConfDir == "" || cfg.ClusterCIDR == "" {
		t.Fatalf("config %+v", cfg)
	}
	if cfg.ClusterCIDRIPv6 != "" || len(cfg.PodSubnets) != 0 {
		t.Fatalf("the shipped config is IPv4-only; clusterCIDRIPv6 %q, podSubnets %q", cfg.ClusterCIDRIPv6, cfg.PodSubnets)
	}
}

// TestDeployConfigMapDualStackExample: the ConfigMap's commented dual-stack example, once
// uncommented, is a config the daemon accepts with the IPv6 cluster CIDR set (the
// Kubernetes topology gives the pod subnets: podSubnets stays out).
func TestDeployConfigMapDualStackExample(t *testing.T) {
	conf, n := "", 0
	for _, line := range strings.SplitAfter(deployConfig(t), "\n") {
		if strings.HasPrefix(line, "# clusterCIDRIPv6: ") {
			line, n = strings.TrimPrefix(line, "# "), n+1
		}
		conf += line
	}
	if n != 1 {
		t.Fatalf("deploy/ofsdn.yaml's ConfigMap has %d commented \"# clusterCIDRIPv6: ...\" lines, want 1 (the dual-stack example)", n)
	}
	cfg := loadDeployConfig(t, conf)
	if cfg.ClusterCIDRIPv6 == "" || cfg.Topology != "kubernetes" || len(cfg.PodSubnets) != 0 {
		t.Fatalf("dual-stack example: clusterCIDRIPv6 %q, topology %q, podSubnets %q", cfg.ClusterCIDRIPv6, cfg.Topology, cfg.PodSubnets)
	}
	if _, n, _ := net.ParseCIDR(cfg.ClusterCIDRIPv6); n == nil || n.IP.To4() != nil {
		t.Fatalf("dual-stack example: clusterCIDRIPv6 %q is not an IPv6 CIDR", cfg.ClusterCIDRIPv6)
	}
}
