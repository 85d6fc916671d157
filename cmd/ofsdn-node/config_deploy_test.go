package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestDeployConfigMapLoads: the config file shipped in deploy/ofsdn.yaml's ConfigMap is
// accepted by the daemon as it is.
func TestDeployConfigMapLoads(t *testing.T) {
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
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_NAME", "node-a")
	cfg, err := loadConfig([]string{"-config", path})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Topology != "kubernetes" || cfg.NodeName != "node-a" || cfg.MTU != 0 || cfg.CNIConfDir == "" || cfg.ClusterCIDR == "" {
		t.Fatalf("config %+v", cfg)
	}
}
