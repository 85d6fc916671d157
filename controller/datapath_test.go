package controller

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestResolveDatapathType(t *testing.T) {
	old := genlFamilyExists
	defer func() { genlFamilyExists = old }()
	for _, tc := range []struct {
		configured string
		has        bool
		lookupErr  error
		want       string
		wantErr    string
	}{
		{configured: "system", want: "system"},
		{configured: "netdev", has: true, want: "netdev"},
		{configured: "auto", has: true, want: "system"},
		{configured: "auto", has: false, want: "netdev"},
		{configured: "auto", lookupErr: errors.New("permission denied"), wantErr: "set datapathType to system or netdev"},
		{configured: "dpdk", wantErr: "want system, netdev or auto"},
	} {
		asked := false
		genlFamilyExists = func(name string) (bool, error) {
			asked = true
			if name != "ovs_datapath" {
				t.Errorf("asked for family %q, want ovs_datapath", name)
			}
			return tc.has, tc.lookupErr
		}
		got, reason, err := ResolveDatapathType(tc.configured)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want one containing %q", tc.configured, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || reason == "" {
			t.Errorf("%s (module %v): got %q (%q), %v; want %q", tc.configured, tc.has, got, reason, err, tc.want)
		}
		if asked != (tc.configured == "auto") {
			t.Errorf("%s: asked the kernel %v, want only for auto", tc.configured, asked)
		}
	}
}

// TestResolveDatapathTypeKernel asks this machine's kernel, then checks the answer against
// /sys/module/openvswitch (there once the module is loaded, which asking does if it can):
// here, without the module (docs/design.md "Facts about the machines here"), netdev.
func TestResolveDatapathTypeKernel(t *testing.T) {
	got, reason, err := ResolveDatapathType("auto")
	if err != nil {
		t.Fatal(err)
	}
	want := "netdev"
	if _, err := os.Stat("/sys/module/openvswitch"); err == nil {
		want = "system"
	}
	if got != want {
		t.Errorf("auto: %q (%s), want %q (/sys/module/openvswitch says so)", got, reason, want)
	}
}
