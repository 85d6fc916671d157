// Package harness is the test support shared by the end-to-end tests (test/e2e) and the CNI
// conformance tests (test/conformance): the ofsdn and ofsdn-node binaries built once per
// test binary, a node made of a private Open vSwitch (test/sandbox) with an ofsdn-node
// process in the sandbox's network namespace, driven through libcni (the code containerd
// and CRI-O use) executing the real ofsdn plugin binary, and network namespace helpers.
//
// It needs root and Open vSwitch, like test/sandbox; it is for tests only.
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/ofsdn/ofsdn/test/sandbox"

	"github.com/ofsdn/ofsdn/test/testenv"
)

var (
	buildMu  sync.Mutex
	built    bool
	binDir   string
	buildErr error
)

// BuildBinaries builds cmd/ofsdn and cmd/ofsdn-node into a temporary directory once per
// test binary and returns that directory (the plugin directory libcni searches). A build
// failure fails t, and every later caller. Call RemoveBinaries from TestMain when done.
func BuildBinaries(t testing.TB) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if !built {
		built = true
		binDir, buildErr = build()
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func build() (string, error) {
	dir, err := os.MkdirTemp("", "ofsdn-test-bin-")
	if err != nil {
		return "", err
	}
	for _, c := range []string{"ofsdn", "ofsdn-node"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, c), "github.com/ofsdn/ofsdn/cmd/"+c)
		if c == "ofsdn" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build and the image build it
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return dir, fmt.Errorf("go build %s: %v\n%s", c, err, out)
		}
	}
	return dir, nil
}

// RemoveBinaries deletes the directory BuildBinaries built into, if any. Call it from
// TestMain after m.Run.
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// Node is one ofsdn node under test: a private OVS and, once StartDaemon has run, an
// ofsdn-node process in its network namespace. Fields are set by NewNode; Daemon is the
// running process or nil.
type Node struct {
	T       *testing.T
	OVS     *sandbox.OVS
	Name    string // heads the daemon log on failure; "ofsdn-node" unless changed
	Dir     string // the sandbox directory (OVS run directory)
	Socket  string // the CNI socket
	DataDir string // the daemon's --data-dir (IPAM leases under ipam/)
	Subnet  string // the pod subnet (CIDR) NewNode was given
	LogPath string // the daemon's stdout and stderr, appended across restarts
	Daemon  *exec.Cmd
	CNI     *libcni.CNIConfig
	// Netconf is the network configuration list netName with cniVersion 1.1.0.
	Netconf *libcni.NetworkConfigList

	netName string
}

// NewNode starts a sandbox OVS and prepares a node on it, without a daemon (see
// StartDaemon): CNI socket <sandbox>/cni/cni.sock, data directory <sandbox>/data, libcni
// with the built plugin and its result cache under <sandbox>/cni-cache, and the network
// configuration list named netName. When the test ends the daemon is killed and, if the
// test failed, its log and br-int's flows are logged.
func NewNode(t *testing.T, subnet, netName string) *Node {
	t.Helper()
	testenv.Privileged(t)
	bin := BuildBinaries(t)
	o := sandbox.Start(t)
	n := &Node{T: t, OVS: o, Name: "ofsdn-node", Dir: o.Dir, Socket: filepath.Join(o.Dir, "cni", "cni.sock"),
		DataDir: filepath.Join(o.Dir, "data"), Subnet: subnet, LogPath: filepath.Join(o.Dir, "ofsdn-node.log"),
		netName: netName}
	n.Netconf = n.ConfList(t, "1.1.0")
	n.CNI = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(o.Dir, "cni-cache"), nil)
	t.Cleanup(func() {
		n.StopDaemon()
		if t.Failed() {
			b, _ := os.ReadFile(n.LogPath)
			t.Logf("%s log:\n%s", n.Name, b)
			t.Logf("%s flows:\n%s", n.Name, o.Ofctl(t, "dump-flows", "--names", n.Mgmt()))
			// Where the datapath dropped what (OVS's drop reasons, upcalls, tunnel neighbours).
			var drops []string
			for _, l := range strings.Split(o.AppctlOutput("coverage/show"), "\n") {
				if strings.Contains(l, "drop") || strings.Contains(l, "upcall") || strings.Contains(l, "tnl") {
					drops = append(drops, l)
				}
			}
			t.Logf("%s ovs-vswitchd coverage (drop, upcall, tnl):\n%s", n.Name, strings.Join(drops, "\n"))
		}
	})
	return n
}

// ConfList is the node's network configuration list with cniVersion v (SPEC.md "Section
// 1: Network configuration format"): one ofsdn plugin on the node's socket.
func (n *Node) ConfList(t testing.TB, v string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(
		`{"cniVersion":%q,"name":%q,"plugins":[{"type":"ofsdn","socket":%q}]}`, v, n.netName, n.Socket)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Mgmt is br-int's OpenFlow management socket, for ovs-ofctl.
func (n *Node) Mgmt() string { return n.OVS.MgmtSocket("br-int") }

// StartDaemon runs bin (an ofsdn-node binary) in the sandbox's network namespace with the
// node's --ovsdb, --ovs-rundir, --datapath-type netdev, --socket and --data-dir followed by
// extra, its output appended to LogPath, and waits until CNI STATUS passes, failing the
// test after limit.
func (n *Node) StartDaemon(bin string, limit time.Duration, extra ...string) {
	t := n.T
	t.Helper()
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"netns", "exec", n.OVS.Netns, bin,
		"--ovsdb", n.OVS.OVSDBEndpoint(), "--ovs-rundir", n.Dir, "--datapath-type", "netdev",
		"--socket", n.Socket, "--data-dir", n.DataDir}, extra...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.Daemon = cmd
	deadline := time.Now().Add(limit)
	for {
		err := n.CNI.GetStatusNetworkList(context.Background(), n.Netconf)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(n.LogPath)
			t.Fatalf("%s (%s) not ready after %v: %v\n%s", n.Name, bin, limit, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopDaemon kills the daemon with SIGKILL (a crash: it cleans nothing up) and reaps it.
// Without a daemon it does nothing.
func (n *Node) StopDaemon() {
	if n.Daemon == nil {
		return
	}
	_ = n.Daemon.Process.Kill()
	_ = n.Daemon.Wait()
	n.Daemon = nil
}

// TermDaemon stops the daemon with SIGTERM (an orderly stop, as kubelet or systemd stops
// it) and waits for it to exit, failing the test if it is still running after limit (it is
// then killed). Without a daemon it does nothing.
func (n *Node) TermDaemon(limit time.Duration) {
	t := n.T
	t.Helper()
	if n.Daemon == nil {
		return
	}
	cmd := n.Daemon
	n.Daemon = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s still running %v after SIGTERM (killed)", n.Name, limit)
	}
}

// LeasesPath is the IPAM store's lease file.
func (n *Node) LeasesPath() string { return filepath.Join(n.DataDir, "ipam", "leases.json") }

// Leases returns the IPAM store's leases: IP → container ID. A missing or undecodable
// lease file fails the test (the daemon writes it on the first ADD).
func (n *Node) Leases(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile(n.LeasesPath())
	if err != nil {
		t.Fatalf("read IP leases: %v", err)
	}
	var st struct {
		Leases map[string]struct {
			ContainerID string `json:"containerID"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("decode IP leases: %v", err)
	}
	out := map[string]string{}
	for ip, l := range st.Leases {
		out[ip] = l.ContainerID
	}
	return out
}
