package conformance

// The minimum of test/e2e's harness: a private OVS (test/sandbox), ofsdn-node in its
// network namespace, and libcni executing the real plugin binary.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ofsdn/ofsdn/cni/podnet"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "ofsdn-conformance-bin-")
		if buildErr != nil {
			return
		}
		for _, c := range []string{"ofsdn", "ofsdn-node"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, c), "github.com/ofsdn/ofsdn/cmd/"+c).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// node is one ofsdn-node on a private OVS, driven through libcni.
type node struct {
	ovs     *sandbox.OVS
	socket  string
	dataDir string
	logPath string
	daemon  *exec.Cmd
	cni     *libcni.CNIConfig
}

func startNode(t *testing.T, subnet string) *node {
	t.Helper()
	bin := buildBinaries(t)
	o := sandbox.Start(t)
	n := &node{ovs: o, socket: filepath.Join(o.Dir, "cni", "cni.sock"), dataDir: filepath.Join(o.Dir, "data"),
		logPath: filepath.Join(o.Dir, "ofsdn-node.log")}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(o.Dir, "cni-cache"), nil)
	logf, err := os.Create(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	n.daemon = exec.Command("ip", "netns", "exec", o.Netns, filepath.Join(bin, "ofsdn-node"),
		"--ovsdb", o.OVSDBEndpoint(), "--ovs-rundir", o.Dir, "--datapath-type", "netdev",
		"--socket", n.socket, "--data-dir", n.dataDir, "--pod-subnet", subnet)
	n.daemon.Stdout, n.daemon.Stderr = logf, logf
	if err := n.daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stopDaemon()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("ofsdn-node log:\n%s", b)
		}
	})
	list := n.confList(t, "1.1.0")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := n.cni.GetStatusNetworkList(context.Background(), list)
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("ofsdn-node not ready after 60s: %v", err)
		}
	}
}

func (n *node) stopDaemon() {
	if n.daemon != nil {
		_ = n.daemon.Process.Kill()
		_ = n.daemon.Wait()
		n.daemon = nil
	}
}

// confList is the ofsdn network configuration list with cniVersion v (SPEC.md "Section 1:
// Network configuration format").
func (n *node) confList(t *testing.T, v string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(
		`{"cniVersion":%q,"name":"ofsdn-conformance","plugins":[{"type":"ofsdn","socket":%q}]}`, v, n.socket)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newNetns creates a network namespace, removed when the test ends (unless gone earlier).
func newNetns(t *testing.T) ns.NetNS {
	t.Helper()
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Close()
		_ = testutils.UnmountNS(netns)
	})
	return netns
}

// leased reports whether the IPAM store holds a lease for containerID.
func (n *node) leased(t *testing.T, containerID string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dataDir, "ipam", "leases.json"))
	if err != nil {
		t.Fatalf("read IP leases: %v", err)
	}
	var st struct {
		Leases map[string]struct {
			ContainerID string `json:"containerID"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	for _, l := range st.Leases {
		if l.ContainerID == containerID {
			return true
		}
	}
	return false
}

// assertGone checks that an attachment left no lease and no OVS port.
func (n *node) assertGone(t *testing.T, containerID string) {
	t.Helper()
	if n.leased(t, containerID) {
		t.Errorf("container %s: IP lease left", containerID)
	}
	if ports := n.ovs.Vsctl(t, "list-ports", "br-int"); strings.Contains(ports, podnet.HostVethName(containerID, "eth0")) {
		t.Errorf("container %s: OVS port left: %q", containerID, ports)
	}
}
