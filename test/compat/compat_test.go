// Package compat checks that the conflist ofsdn-node writes works with every generation of
// the CNI library a container runtime may ship (issue 10): runtimes on
// containernetworking/cni v1.1.x (containerd 1.7, Podman 4) refuse a "cniVersion": "1.1.0"
// result, later ones want 1.1.0 for STATUS and GC.
//
// Each generation is a tiny program (libcni-driver) in a Go module of its own,
// test/compat/libcni-v1.1, -v1.2 and -v1.3, pinning containernetworking/cni v1.1.2, v1.2.3
// and v1.3.1 (one module cannot require three versions of one module). The test builds
// them, starts a sandbox Open vSwitch and a real ofsdn-node that installs the plugin
// binary and writes its conflist (-cni-bin-dir, -cni-conf-dir), and drives ADD, CHECK and
// DEL of a pod through each generation with exactly that file and that plugin.
package compat

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/harness"
)

// generation is one libcni version under test.
type generation struct {
	dir         string // module directory under test/compat
	libcni      string // the containernetworking/cni version its go.mod pins
	confVersion string // the version libcni must pick from the daemon's conflist
}

var generations = []generation{
	{"libcni-v1.1", "v1.1.2", "1.0.0"}, // no cniVersions: reads cniVersion
	{"libcni-v1.2", "v1.2.3", "1.1.0"}, // cniVersions: the highest it implements
	{"libcni-v1.3", "v1.3.1", "1.1.0"},
}

// driverOutput is what libcni-driver prints.
type driverOutput struct {
	Libcni        string `json:"libcni"`
	ConfVersion   string `json:"confVersion"`
	ResultVersion string `json:"resultVersion"`
	Result        struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct {
			Name    string `json:"name"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
		IPs []struct {
			Address string `json:"address"`
			Gateway string `json:"gateway"`
		} `json:"ips"`
	} `json:"result"`
}

// buildDriver builds the generation's libcni-driver into dir.
func buildDriver(t *testing.T, g generation, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "libcni-driver-"+g.libcni)
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = g.dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s (containernetworking/cni %s): %v\n%s", g.dir, g.libcni, err, b)
	}
	return out
}

func TestConfListWithEachLibcniGeneration(t *testing.T) {
	bin := harness.BuildBinaries(t)
	n := harness.NewNode(t, "10.154.0.0/24", "unused")
	confDir, pluginDir := t.TempDir(), t.TempDir()
	n.StartDaemon(filepath.Join(bin, "ofsdn-node"), 30*time.Second, "--pod-subnet", n.Subnet,
		"--cni-conf-dir", confDir, "--cni-bin-dir", pluginDir)
	conf := filepath.Join(confDir, "10-ofsdn.conflist")
	// The daemon writes the files right after it starts serving ADD.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(conf); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ofsdn-node did not write %s", conf)
		}
	}
	written, _ := os.ReadFile(conf)
	t.Logf("the daemon's conflist:\n%s", written)
	_, subnet, _ := net.ParseCIDR(n.Subnet)
	gw := net.ParseIP("10.154.0.1")
	drivers := t.TempDir()

	for _, g := range generations {
		t.Run(g.libcni, func(t *testing.T) {
			driver := buildDriver(t, g, drivers)
			netns := harness.NewNetns(t, "ofsdn-compat-"+strings.ReplaceAll(g.libcni, ".", ""))
			id := "compat-" + strings.ReplaceAll(g.libcni, ".", "-")
			cache := t.TempDir()
			run := func(op string) driverOutput {
				t.Helper()
				cmd := exec.Command(driver, "-conf", conf, "-path", pluginDir, "-cache", cache,
					"-netns", netns, "-id", id, "-ifname", "eth0", op)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s through containernetworking/cni %s: %v\n%s", op, g.libcni, err, stderr.String())
				}
				var out driverOutput
				if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
					t.Fatalf("%s: driver output %q: %v", op, stdout.String(), err)
				}
				if out.Libcni != g.libcni {
					t.Fatalf("the driver was built with containernetworking/cni %s, want %s", out.Libcni, g.libcni)
				}
				if out.ConfVersion != g.confVersion {
					t.Errorf("%s: libcni %s took version %s from the conflist, want %s", op, g.libcni, out.ConfVersion, g.confVersion)
				}
				return out
			}

			add := run("ADD")
			if add.ResultVersion != g.confVersion || add.Result.CNIVersion != g.confVersion {
				t.Errorf("ADD result version %s (cniVersion %q), want %s", add.ResultVersion, add.Result.CNIVersion, g.confVersion)
			}
			if len(add.Result.IPs) != 1 || len(add.Result.Interfaces) != 2 || add.Result.Interfaces[1].Sandbox != netns {
				t.Fatalf("ADD result: %+v", add.Result)
			}
			ip, _, err := net.ParseCIDR(add.Result.IPs[0].Address)
			if err != nil || !subnet.Contains(ip) || add.Result.IPs[0].Gateway != gw.String() {
				t.Errorf("ADD result IP %+v, want an address of %s with gateway %s", add.Result.IPs[0], subnet, gw)
			}
			if err := harness.Ping(netns, gw); err != nil {
				t.Errorf("pod added through containernetworking/cni %s: %v", g.libcni, err)
			}
			run("CHECK")
			run("DEL")
			host := add.Result.Interfaces[0].Name
			if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); strings.Contains(ports, host) {
				t.Errorf("DEL left port %s on br-int", host)
			}
			for leased, cid := range n.Leases(t) {
				if cid == id {
					t.Errorf("DEL left lease %s of %s", leased, id)
				}
			}
		})
	}
}
