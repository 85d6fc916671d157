package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestObserveConfig(t *testing.T) {
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsAddress != "127.0.0.1:9469" || cfg.CtlSocket != "/var/run/ofsdn/ctl.sock" {
		t.Errorf("defaults: metricsAddress %q ctlSocket %q", cfg.MetricsAddress, cfg.CtlSocket)
	}
	// The inspection socket follows the CNI socket unless set.
	cfg, err = loadConfig([]string{"-socket", "/run/x/cni.sock"})
	if err != nil || cfg.CtlSocket != "/run/x/ctl.sock" {
		t.Errorf("ctlSocket next to -socket: %q %v", cfg.CtlSocket, err)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("metricsAddress: \":9500\"\nctlSocket: \"off\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = loadConfig([]string{"-config", file})
	if err != nil || cfg.MetricsAddress != ":9500" || cfg.CtlSocket != "" {
		t.Errorf("from file: metricsAddress %q ctlSocket %q %v", cfg.MetricsAddress, cfg.CtlSocket, err)
	}
	cfg, err = loadConfig([]string{"-metrics-address", ""})
	if err != nil || cfg.MetricsAddress != "" {
		t.Errorf("metrics listener off: %q %v", cfg.MetricsAddress, err)
	}
	for _, bad := range [][]string{{"-metrics-address", "9469"}, {"-ctl-socket", "ctl.sock"}, {"-ctl-socket", "/var/run/ofsdn/cni.sock"}} {
		if _, err := loadConfig(bad); err == nil || !strings.Contains(err.Error(), "config "+map[string]string{"-metrics-address": "metricsAddress", "-ctl-socket": "ctlSocket"}[bad[0]]) {
			t.Errorf("%v: %v, want an error naming the key", bad, err)
		}
	}
}
