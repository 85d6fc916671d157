package conformance

// test/harness's node (a private OVS from test/sandbox, ofsdn-node in its network
// namespace, and libcni executing the real plugin binary), with what the cases check.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ofsdn/ofsdn/podnet"
	"github.com/ofsdn/ofsdn/test/harness"
)

// node is one ofsdn-node on a private OVS, driven through libcni.
type node struct {
	*harness.Node
}

// startNode starts a sandbox and an ofsdn-node in it, and waits until CNI STATUS passes.
func startNode(t *testing.T, subnet string) *node {
	t.Helper()
	n := &node{harness.NewNode(t, subnet, "ofsdn-conformance")}
	n.StartDaemon(filepath.Join(harness.BuildBinaries(t), "ofsdn-node"), 60*time.Second, "--pod-subnet", subnet)
	return n
}

func (n *node) stopDaemon() { n.StopDaemon() }

// confList is the ofsdn network configuration list with cniVersion v (SPEC.md "Section 1:
// Network configuration format").
func (n *node) confList(t *testing.T, v string) *libcni.NetworkConfigList {
	t.Helper()
	return n.ConfList(t, v)
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
	for _, id := range n.Leases(t) {
		if id == containerID {
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
	if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); strings.Contains(ports, podnet.HostVethName(containerID, "eth0")) {
		t.Errorf("container %s: OVS port left: %q", containerID, ports)
	}
}
