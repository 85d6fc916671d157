package e2e

// The end-to-end harness: a node is a private OVS (sandbox) plus an ofsdn-node process in the
// sandbox's network namespace; pods are network namespaces of the test's own, wired through
// libcni (the code containerd and CRI-O use) executing the real ofsdn plugin binary.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/test/harness"
)

// buildBinaries builds ofsdn and ofsdn-node once per test binary (harness.BuildBinaries).
func buildBinaries(t *testing.T) string { return harness.BuildBinaries(t) }

// testNode is a harness node with the e2e helpers as methods.
type testNode struct {
	*harness.Node
}

// startNode starts a sandbox and an ofsdn-node in it, and waits until CNI STATUS passes.
func startNode(t *testing.T, subnet string) *testNode {
	t.Helper()
	n := &testNode{harness.NewNode(t, subnet, "ofsdn-e2e")}
	n.startDaemon()
	return n
}

func (n *testNode) mgmt() string { return n.Mgmt() }

func (n *testNode) startDaemon() {
	n.T.Helper()
	n.StartDaemon(filepath.Join(buildBinaries(n.T), "ofsdn-node"), 30*time.Second,
		"--pod-subnet", n.Subnet, "--log-level", "debug")
}

func (n *testNode) stopDaemon() { n.StopDaemon() }

type testPod struct {
	name        string
	netns       string // path
	containerID string
	result      *current.Result
	rt          *libcni.RuntimeConf
	ownerID     uint32 // its flows' owner id, once podCookie read it
}

func (p *testPod) ip() net.IP { return p.result.IPs[0].Address.IP }

// podCookie returns the cookie and mask that select pod p's flows (flows.PodCookie of its
// owner id). The owner id is what the node allocated with the pod's lease; the test reads
// it, as an operator would, from the pod's OVS interface (external_ids:ofsdn-owner-id)
// the first time it is asked for while the port exists (addPod asks). A port an older
// ofsdn made has no such key: its flows carry the pod's IPv4 address as the id, and so
// does what podCookie returns (TestOwnerIDsKeptAcrossRestart checks that a pod of this
// build has an id apart from its address).
func (n *testNode) podCookie(t testing.TB, p *testPod) (cookie, mask uint64) {
	t.Helper()
	if p.ownerID == 0 {
		host := p.result.Interfaces[0].Name
		v := strings.Trim(n.OVS.Vsctl(t, "--if-exists", "get", "Interface", host, "external_ids:ofsdn-owner-id"), "\"\n")
		if id, err := strconv.ParseUint(v, 10, 32); err == nil && id != 0 {
			p.ownerID = uint32(id)
		} else if ip := p.ip().To4(); v == "" && ip != nil {
			return flows.PodCookie(flows.Pod{OwnerID: uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])})
		} else {
			t.Fatalf("%s: interface %s: external_ids:ofsdn-owner-id %q is not a flow owner id", p.name, host, v)
		}
	}
	return flows.PodCookie(flows.Pod{OwnerID: p.ownerID})
}

// The harness's network namespace helpers, under the names the tests use.
var (
	newNetns = harness.NewNetns
	ping     = harness.Ping
	inNetns  = harness.InNetns
)

// addPod creates a netns and runs CNI ADD for it through libcni and the plugin binary.
func (n *testNode) addPod(name string) *testPod {
	n.T.Helper()
	p := &testPod{name: name, netns: newNetns(n.T, "ofsdn-e2e-"+name), containerID: "ctr-" + name + fmt.Sprint(time.Now().UnixNano())}
	p.rt = &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.netns, IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "e2e"}, {"K8S_POD_NAME", name}}}
	res, err := n.CNI.AddNetworkList(context.Background(), n.Netconf, p.rt)
	if err != nil {
		n.T.Fatalf("ADD %s: %v", name, err)
	}
	p.result, err = current.NewResultFromResult(res)
	if err != nil {
		n.T.Fatal(err)
	}
	n.podCookie(n.T, p)
	return p
}

func (n *testNode) delPod(p *testPod) error {
	return n.CNI.DelNetworkList(context.Background(), n.Netconf, p.rt)
}

func jsonString(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
