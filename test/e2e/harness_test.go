package e2e

// The end-to-end harness: a node is a private OVS (sandbox) plus an ofsdn-node process in the
// sandbox's network namespace; pods are network namespaces of the test's own, wired through
// libcni (the code containerd and CRI-O use) executing the real ofsdn plugin binary.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/test/sandbox"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// buildBinaries builds ofsdn and ofsdn-node once per test binary.
func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "ofsdn-e2e-bin-")
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

type testNode struct {
	t       *testing.T
	ovs     *sandbox.OVS
	dir     string
	socket  string
	dataDir string
	subnet  string
	daemon  *exec.Cmd
	logPath string
	cni     *libcni.CNIConfig
	netconf *libcni.NetworkConfigList
}

// startNode starts a sandbox and an ofsdn-node in it, and waits until CNI STATUS passes.
func startNode(t *testing.T, subnet string) *testNode {
	t.Helper()
	bin := buildBinaries(t)
	o := sandbox.Start(t)
	n := &testNode{t: t, ovs: o, dir: o.Dir, socket: filepath.Join(o.Dir, "cni", "cni.sock"),
		dataDir: filepath.Join(o.Dir, "data"), subnet: subnet, logPath: filepath.Join(o.Dir, "ofsdn-node.log")}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ofsdn-e2e","plugins":[{"type":"ofsdn","socket":%q}]}`, n.socket)
	var err error
	n.netconf, err = libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(o.Dir, "cni-cache"), nil)
	n.startDaemon()
	t.Cleanup(func() {
		n.stopDaemon()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("ofsdn-node log:\n%s", b)
			t.Logf("flows:\n%s", n.ovs.Ofctl(t, "dump-flows", "--names", n.mgmt()))
		}
	})
	return n
}

func (n *testNode) mgmt() string { return n.ovs.MgmtSocket("br-int") }

func (n *testNode) startDaemon() {
	t := n.t
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ovs.Netns, filepath.Join(binDir, "ofsdn-node"),
		"--ovsdb", n.ovs.OVSDBEndpoint(), "--ovs-rundir", n.dir, "--datapath-type", "netdev",
		"--socket", n.socket, "--data-dir", n.dataDir, "--pod-subnet", n.subnet, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.daemon = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := n.cni.GetStatusNetworkList(context.Background(), n.netconf)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(n.logPath)
			t.Fatalf("ofsdn-node not ready after 30s: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *testNode) stopDaemon() {
	if n.daemon == nil {
		return
	}
	_ = n.daemon.Process.Kill()
	_ = n.daemon.Wait()
	n.daemon = nil
}

type testPod struct {
	name        string
	netns       string // path
	containerID string
	result      *current.Result
	rt          *libcni.RuntimeConf
}

func (p *testPod) ip() net.IP { return p.result.IPs[0].Address.IP }

// newNetns creates a network namespace for a pod and deletes it when the test ends.
func newNetns(t *testing.T, name string) string {
	t.Helper()
	full := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", full, err, out)
	}
	_ = exec.Command("ip", "netns", "exec", full, "ip", "link", "set", "lo", "up").Run()
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", full).Run() })
	return "/var/run/netns/" + full
}

// addPod creates a netns and runs CNI ADD for it through libcni and the plugin binary.
func (n *testNode) addPod(name string) *testPod {
	n.t.Helper()
	p := &testPod{name: name, netns: newNetns(n.t, "ofsdn-e2e-"+name), containerID: "ctr-" + name + fmt.Sprint(time.Now().UnixNano())}
	p.rt = &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.netns, IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "e2e"}, {"K8S_POD_NAME", name}}}
	res, err := n.cni.AddNetworkList(context.Background(), n.netconf, p.rt)
	if err != nil {
		n.t.Fatalf("ADD %s: %v", name, err)
	}
	p.result, err = current.NewResultFromResult(res)
	if err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *testNode) delPod(p *testPod) error {
	return n.cni.DelNetworkList(context.Background(), n.netconf, p.rt)
}

// ping runs ping in netns (a path or a name under /var/run/netns) and reports success.
func ping(netnsName string, dst net.IP, extra ...string) error {
	name := filepath.Base(netnsName)
	args := append([]string{"netns", "exec", name, "ping", "-c", "2", "-i", "0.2", "-W", "2"}, extra...)
	args = append(args, dst.String())
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v\n%s", dst, name, err, out)
	}
	return nil
}

// inNetns runs f inside the network namespace at path (sockets made there stay there).
func inNetns(t *testing.T, path string, f func() error) {
	t.Helper()
	netns, err := ns.GetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	if err := netns.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

func jsonString(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
