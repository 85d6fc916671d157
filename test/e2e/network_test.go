package e2e

// Operations on many attachments are scoped to one CNI network and fail safe (issue 10).
// Two network configuration lists of type ofsdn with different names share one daemon, as
// two conflists on one node (or a multi-network runtime) do. A GC for one network must
// never touch the other's pods, a GC without a valid list must remove nothing, and a
// daemon restart must not remove (or forget the network of) anything that may be in use.
// Everything goes through libcni and the plugin binary, as a runtime drives it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// netA is the harness's network name (harness.NewNode's netName for startNode); netB is a
// second network on the same daemon.
const (
	netA = "ofsdn-e2e"
	netB = "ofsdn-e2e-b"
)

// netconf returns a network configuration list named name with cniVersion 1.1.0 for the
// node's socket.
func (n *testNode) netconf(name string) *libcni.NetworkConfigList {
	n.T.Helper()
	l, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(
		`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"ofsdn","socket":%q}]}`, name, n.Socket)))
	if err != nil {
		n.T.Fatal(err)
	}
	return l
}

// addPodOn runs CNI ADD for a new netns through libcni with the network list conf.
func (n *testNode) addPodOn(conf *libcni.NetworkConfigList, name string) *testPod {
	n.T.Helper()
	p := n.newPodSpec(name)
	res, err := n.CNI.AddNetworkList(context.Background(), conf, p.rt)
	if err != nil {
		n.T.Fatalf("ADD %s on network %s: %v", name, conf.Name, err)
	}
	if p.result, err = current.NewResultFromResult(res); err != nil {
		n.T.Fatal(err)
	}
	n.podCookie(n.T, p)
	return p
}

// runtimeWithoutCache is libcni with the node's plugin directory and an empty result
// cache: its GC issues no DEL of its own for cached attachments (as a runtime whose cache
// lives elsewhere), so the test sees only what the plugin's GC does.
func (n *testNode) runtimeWithoutCache() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{buildBinaries(n.T)}, n.T.TempDir(), nil)
}

// leaseEntry is what the e2e tests read of one lease in the lease file.
type leaseEntry struct {
	Network string `json:"network"`
	OwnerID uint32 `json:"ownerID"`
}

// leaseFile returns the lease file's leases: container ID → entry.
func (n *testNode) leaseFile(t *testing.T) map[string]leaseEntry {
	t.Helper()
	b, err := os.ReadFile(n.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Leases map[string]struct {
			ContainerID string `json:"containerID"`
			leaseEntry
		} `json:"leases"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	out := map[string]leaseEntry{}
	for _, l := range st.Leases {
		out[l.ContainerID] = l.leaseEntry
	}
	return out
}

// editLeaseFile rewrites n's lease file (the daemon stopped) as edit leaves its decoded
// JSON: a lease file restored from an old backup.
func (n *testNode) editLeaseFile(t *testing.T, edit func(st map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(n.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	edit(st)
	raw, _ = json.Marshal(st)
	if err := os.WriteFile(n.LeasesPath(), raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// leaseNetworks returns the lease file's leases: container ID → recorded network.
func (n *testNode) leaseNetworks(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for id, l := range n.leaseFile(t) {
		out[id] = l.Network
	}
	return out
}

// podFlowCount is how many flows one pod has (flows.PodFlows: classifier, spoof_guard IP
// and ARP, arp, l3_forwarding).
const podFlowCount = 5

// assertAlive checks that pod p of network is whole: its OVS port with the network in
// its external_ids, all its flows, its lease with the network, and it pings the gateway.
func (n *testNode) assertAlive(t *testing.T, p *testPod, network string, gw net.IP) {
	t.Helper()
	host := p.result.Interfaces[0].Name
	if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); !contains(ports, host) {
		t.Errorf("%s: OVS port %s is gone", p.name, host)
	} else if got := strings.Trim(n.OVS.Vsctl(t, "--if-exists", "get", "Interface", host, "external_ids:ofsdn-network"), `"`); got != network {
		t.Errorf("%s: port %s external_ids:ofsdn-network = %q, want %q", p.name, host, got, network)
	}
	cookie, mask := n.podCookie(t, p)
	dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
	if got := len(flowLines(dump)); got != podFlowCount {
		t.Errorf("%s: %d flows with its cookie, want %d:\n%s", p.name, got, podFlowCount, dump)
	}
	if got, ok := n.leaseNetworks(t)[p.containerID]; !ok || got != network {
		t.Errorf("%s: lease of container %s: present %v, network %q, want %q", p.name, p.containerID, ok, got, network)
	}
	if err := pingOnce(p.netns, gw); err != nil {
		t.Errorf("%s: %v", p.name, err)
	}
}

// TestGCScopedToNetwork: pods on networks A and B of one daemon. A GC for B that lists
// only B's pod keeps A's pod whole (port, flows, lease, ping); a GC without
// cni.dev/valid-attachments removes nothing; a GC for B with an empty list removes B's
// pod and nothing of A's.
func TestGCScopedToNetwork(t *testing.T) {
	serial(t)
	n := startNode(t, "10.150.0.0/24")
	gw := net.ParseIP("10.150.0.1")
	confB := n.netconf(netB)
	pa := n.addPod("scope-a")
	pb := n.addPodOn(confB, "scope-b")
	n.assertAlive(t, pa, netA, gw)
	n.assertAlive(t, pb, netB, gw)

	t.Run("GC for network B keeps network A's pod", func(t *testing.T) {
		valid := []types.GCAttachment{{ContainerID: pb.containerID, IfName: "eth0"}}
		if err := n.CNI.GCNetworkList(context.Background(), confB, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			t.Fatalf("GC: %v", err)
		}
		n.assertAlive(t, pa, netA, gw)
		n.assertAlive(t, pb, netB, gw)
		if err := pingOnce(pa.netns, pb.ip()); err != nil {
			t.Errorf("A's pod to B's pod after the GC: %v", err)
		}
	})

	t.Run("GC without valid-attachments removes nothing", func(t *testing.T) {
		rt := n.runtimeWithoutCache()
		for _, conf := range []*libcni.NetworkConfigList{n.Netconf, confB} {
			if err := rt.GCNetworkList(context.Background(), conf, nil); err != nil {
				t.Fatalf("GC of %s without a valid list: %v", conf.Name, err)
			}
		}
		n.assertAlive(t, pa, netA, gw)
		n.assertAlive(t, pb, netB, gw)
		n.logDaemonLines(t, "GC without")
	})

	t.Run("GC for network B with nothing valid removes only B's pod", func(t *testing.T) {
		if err := n.runtimeWithoutCache().GCNetworkList(context.Background(), confB, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}); err != nil {
			t.Fatalf("GC: %v", err)
		}
		n.assertGone(t, pb)
		n.assertAlive(t, pa, netA, gw)
	})

	t.Run("DEL and CHECK of network B leave network A's interface alone", func(t *testing.T) {
		// Same container ID and interface name as A's pod, but for network B: a runtime
		// cleaning up after an ADD for B that failed on the conflict.
		rt := *pa.rt
		if _, err := n.CNI.AddNetworkList(context.Background(), confB, &rt); err == nil {
			t.Error("ADD for network B of an interface attached to network A succeeded")
		}
		if err := n.CNI.DelNetworkList(context.Background(), confB, &rt); err != nil {
			t.Fatalf("DEL for network B: %v", err)
		}
		n.assertAlive(t, pa, netA, gw)
		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, pa.rt); err != nil {
			t.Errorf("CHECK of A's pod on network A: %v", err)
		}
	})
}

// TestRestartKeepsWhatMayBeInUse: start-up reconciliation and the first flow sync (which
// deletes the earlier generation's flows) must not remove anything that may be in use.
// While the daemon is down: the lease file loses the leases of two running pods (one of
// network A, one of network B; a lease file restored from an old backup), a third pod's
// OVS port is deleted (its lease and veth remain: the pod may still run), and an operator
// adds a flow of their own (cookie 0). After the restart the two pods still forward, their
// leases are back with their networks and their addresses are never handed out again; the
// third pod's lease and veth are kept; the operator's flow is still there. Then a GC for
// network B, as a runtime sends at its own start, keeps network A's pod.
func TestRestartKeepsWhatMayBeInUse(t *testing.T) {
	serial(t)
	n := startNode(t, "10.151.0.0/24")
	gw := net.ParseIP("10.151.0.1")
	confB := n.netconf(netB)
	pa := n.addPod("keep-a")
	pb := n.addPodOn(confB, "keep-b")
	orphan := n.addPod("keep-orphan")
	n.stopDaemon() // SIGKILL

	// The lease file as an old backup has it: without pa's and pb's leases.
	n.editLeaseFile(t, func(st map[string]any) {
		leases := st["leases"].(map[string]any)
		delete(leases, pa.ip().String())
		delete(leases, pb.ip().String())
	})
	// The orphan's port goes; its lease and veth stay.
	orphanHost := orphan.result.Interfaces[0].Name
	n.OVS.Vsctl(t, "del-port", "br-int", orphanHost)
	// An operator's flow without our cookie.
	n.OVS.Ofctl(t, "add-flow", n.mgmt(), "table=0,priority=7,udp,tp_dst=9,actions=drop")

	n.startDaemon()

	for _, p := range []*testPod{pa, pb} {
		if err := pingOnce(p.netns, gw); err != nil {
			t.Errorf("%s after the restart without its lease: %v", p.name, err)
		}
	}
	if err := pingOnce(pa.netns, pb.ip()); err != nil {
		t.Errorf("network A's pod to network B's pod after the restart: %v", err)
	}
	n.assertAlive(t, pa, netA, gw)
	n.assertAlive(t, pb, netB, gw)
	if got := n.Leases(t)[orphan.ip().String()]; got != orphan.containerID {
		t.Errorf("lease of the pod whose port was lost (its veth remains) was freed or reassigned: %q", got)
	}
	if out, err := exec.Command("ip", "netns", "exec", n.OVS.Netns, "ip", "link", "show", orphanHost).CombinedOutput(); err != nil {
		t.Errorf("host veth %s of the pod whose port was lost was removed: %v %s", orphanHost, err, out)
	}
	if dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), "table=0,udp,tp_dst=9"); len(flowLines(dump)) != 1 {
		t.Errorf("the operator's flow (cookie 0) did not survive the restart:\n%s", dump)
	}

	// A runtime restarting sends GC for its network B with its own pod valid.
	valid := []types.GCAttachment{{ContainerID: pb.containerID, IfName: "eth0"}}
	if err := n.CNI.GCNetworkList(context.Background(), confB, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC for network B after the restart: %v", err)
	}
	n.assertAlive(t, pa, netA, gw)
	n.assertAlive(t, pb, netB, gw)

	// No address is handed out twice: new pods get none of the three.
	held := map[string]string{pa.ip().String(): pa.name, pb.ip().String(): pb.name, orphan.ip().String(): orphan.name}
	for i := 0; i < 3; i++ {
		p := n.addPod(fmt.Sprintf("keep-new%d", i))
		if other, dup := held[p.ip().String()]; dup {
			t.Errorf("IP %s handed out again to %s while %s holds it", p.ip(), p.name, other)
		}
	}
	// The orphan goes with its DEL.
	if err := n.delPod(orphan); err != nil {
		t.Fatalf("DEL of the pod whose port was lost: %v", err)
	}
	n.assertGone(t, orphan)
}
