package controller

// Unit tests of the node's pod logic with fakes for its collaborators (seams.go): the order
// in which a failed ADD is undone, DEL's idempotence, and what GC and reconciliation keep.
// The same code runs against real OVS, netlink and IPAM in test/e2e and bench; these tests
// pin the decisions, case by case, where the real world cannot be put into every state.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

// world is a fake of every collaborator of pod wiring (portDB, flowOwners, leaseStore,
// podPlumbing) sharing one state and one journal of the changes asked of it, in order.
// Reads are not journalled. Each collaborator keeps its real contract: deleting what is
// gone is not an error.
type world struct {
	mu      sync.Mutex
	journal []string
	// fail makes the named operation ("ipam.Reserve", "ipam.Durable", "podnet.Setup", "ovsdb.AddPort",
	// "flows.SetOwner", "ovsdb.DeletePort", ...) fail with that error.
	fail map[string]error
	// addPortCommits makes a failing AddPort leave its row (committed, ofport not seen).
	addPortCommits bool
	// ofportTaken makes AddPortWithOFPort give another ofport than the one asked for
	// (a request for the ofport a port already has is always honoured).
	ofportTaken bool
	// requests is the last ofport_request asked for each port.
	requests map[string]int

	ports  map[string]ovsdb.PortInfo
	veths  map[string]bool
	leases map[string]ipam.Lease // attachmentKey → lease
	flows  map[flows.Owner][]flows.Flow

	subnet     *net.IPNet
	subnet6    *net.IPNet      // a dual-stack world's IPv6 pod subnet: leases hold an address of each
	lastSpec   podnet.Spec     // what the last Setup was asked
	lastCheck  []podnet.Expect // what the last Check was asked
	nextIP     uint32          // next host number to lease
	nextOFPort int
	nextChosen int // ReserveOFPort's count
}

func newWorld() *world {
	_, subnet, _ := net.ParseCIDR("10.128.0.0/24")
	return &world{fail: map[string]error{}, ports: map[string]ovsdb.PortInfo{}, veths: map[string]bool{}, requests: map[string]int{},
		leases: map[string]ipam.Lease{}, flows: map[flows.Owner][]flows.Flow{}, subnet: subnet, nextIP: 2, nextOFPort: 10}
}

// do journals op and returns the error it is set to fail with. w.mu must be held.
func (w *world) do(op, arg string) error {
	w.journal = append(w.journal, op+" "+arg)
	return w.fail[op]
}

var errInjected = errors.New("injected failure")

// portDB

// ReserveOFPort hands out 32768, 32769, ... (a choice, not a change: not journalled).
func (w *world) ReserveOFPort(name string) (int, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.fail["ovsdb.ReserveOFPort"]; err != nil {
		return 0, func() {}, err
	}
	w.nextChosen++
	return ovsdb.MinChosenOFPort - 1 + w.nextChosen, func() {}, nil
}

// AddPortWithOFPort gives the port the ofport asked for, or, with ofportTaken, the
// next one of its own (another interface holds the number asked for).
func (w *world) AddPortWithOFPort(ctx context.Context, bridge, name string, ofportRequest int, ext map[string]string) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.do("ovsdb.AddPort", name); err != nil {
		if w.addPortCommits {
			w.ports[name] = ovsdb.PortInfo{Name: name, Bridge: bridge, ExternalIDs: ext}
		}
		return 0, err
	}
	w.requests[name] = ofportRequest
	if p, ok := w.ports[name]; ok && p.OFPort == ofportRequest {
		return p.OFPort, nil // a request for the ofport it has: it keeps it
	}
	ofport := ofportRequest
	if w.ofportTaken || ofport == 0 {
		w.nextOFPort++
		ofport = w.nextOFPort
	}
	w.ports[name] = ovsdb.PortInfo{Name: name, Bridge: bridge, OFPort: ofport, ExternalIDs: ext}
	return ofport, nil
}

func (w *world) DeletePort(ctx context.Context, bridge, name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.do("ovsdb.DeletePort", name); err != nil {
		return err
	}
	delete(w.ports, name)
	return nil
}

func (w *world) GetPort(name string) (ovsdb.PortInfo, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.ports[name]
	return p, ok
}

func (w *world) ListPorts(bridge string) []ovsdb.PortInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ovsdb.PortInfo
	for _, p := range w.ports {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// flowOwners

func (w *world) SetOwner(ctx context.Context, o flows.Owner, fs []flows.Flow) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.do("flows.SetOwner", o.String()); err != nil {
		return err
	}
	w.flows[o] = fs
	return nil
}

func (w *world) DeleteOwner(ctx context.Context, o flows.Owner) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.do("flows.DeleteOwner", o.String()); err != nil {
		return err
	}
	delete(w.flows, o)
	return nil
}

func (w *world) Owner(o flows.Owner) ([]flows.Flow, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fs, ok := w.flows[o]
	return fs, ok
}

// leaseStore

// ReserveLease journals "ipam.Reserve" at once and "ipam.Durable" when durable is called;
// a failing durable rolls the new lease back, as ipam.Store does.
func (w *world) ReserveLease(want ipam.Lease) ([]net.IP, func() error, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	containerID, ifName := want.ContainerID, want.IfName
	k := attachmentKey(containerID, ifName)
	if err := w.do("ipam.Reserve", k); err != nil {
		return nil, nil, err
	}
	durable := func(added bool) func() error {
		return func() error {
			w.mu.Lock()
			defer w.mu.Unlock()
			err := w.do("ipam.Durable", k)
			if err != nil && added {
				delete(w.leases, k)
			}
			return err
		}
	}
	if l, ok := w.leases[k]; ok {
		return l.IPs, durable(false), nil
	}
	want.OwnerID = 500 + w.nextIP - 2
	if w.subnet != nil {
		want.IPs = []net.IP{nthIP(w.subnet, w.nextIP)}
	}
	if w.subnet6 != nil { // after the IPv4 one; alone on an IPv6-only node (subnet nil)
		want.IPs = append(want.IPs, nthIP6(w.subnet6, w.nextIP))
	} // an owner id apart from the address, as ipam.Store allocates; as put gives
	w.nextIP++
	w.leases[k] = want
	return want.IPs, durable(true), nil
}

func (w *world) Release(containerID, ifName string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := attachmentKey(containerID, ifName)
	if err := w.do("ipam.Release", k); err != nil {
		return err
	}
	delete(w.leases, k)
	return nil
}

func (w *world) Get(containerID, ifName string) (ipam.Lease, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l, ok := w.leases[attachmentKey(containerID, ifName)]
	return l, ok
}

func (w *world) List() []ipam.Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ipam.Lease
	for _, l := range w.leases {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IPs[0].String() < out[j].IPs[0].String() })
	return out
}

func (w *world) InUse() int    { w.mu.Lock(); defer w.mu.Unlock(); return len(w.leases) }
func (w *world) Capacity() int { return 253 }

// podPlumbing

func (w *world) Setup(spec podnet.Spec) (podnet.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastSpec = spec
	if err := w.do("podnet.Setup", spec.HostVeth); err != nil {
		return podnet.Result{}, err
	}
	w.veths[spec.HostVeth] = true
	var mac net.HardwareAddr
	if spec.Addr != nil {
		mac = podnet.MACFromIP(spec.Addr.IP)
	} else if spec.Addr6 != nil {
		mac = podnet.MACFromIPv6(spec.Addr6.IP) // an IPv6-only pod's
	}
	return podnet.Result{HostVeth: spec.HostVeth, HostMAC: net.HardwareAddr{0xe, 0, 0, 0, 0, 1},
		ContainerMAC: mac, ContainerIfIndex: 2, MTU: spec.MTU}, nil
}

func (w *world) Teardown(hostVeth, netnsPath, ifName string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if hostVeth == "" {
		return nil
	}
	if err := w.do("podnet.Teardown", hostVeth); err != nil {
		return err
	}
	delete(w.veths, hostVeth)
	return nil
}

func (w *world) HostVethExists(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.veths[name]
}

func (w *world) IsolateHostEnd(name string) error { return w.do("podnet.IsolateHostEnd", name) }

func (w *world) Check(netnsPath, ifName string, want []podnet.Expect, mac net.HardwareAddr) error {
	return nil
}

// concurrentPairs are the operations that DEL runs at once, each pair in the order log
// reports them: the port delete with the veth's.
var concurrentPairs = [][2]string{{"ovsdb.DeletePort", "podnet.Teardown"}}

// addSteps are what ADD does while the pod's flows go to the switch (from the lease on).
var addSteps = []string{"podnet.Setup ", "ipam.Durable ", "ovsdb.AddPort "}

// log returns the journal and clears it. An ADD's first install of the pod's flows runs
// beside its veth, lease write and port (addSteps): it is reported right after the lease
// reservation that starts it, wherever it ran. Two adjacent entries of a concurrent pair
// are reported in the pair's order, whichever ran first; everything else keeps its order.
func (w *world) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.journal
	w.journal = nil
	for i := 0; i < len(j); i++ {
		if !strings.HasPrefix(j[i], "ipam.Reserve ") {
			continue
		}
		for k := i + 1; k < len(j); k++ {
			if strings.HasPrefix(j[k], "flows.SetOwner ") {
				f := j[k]
				copy(j[i+2:k+1], j[i+1:k])
				j[i+1] = f
				break
			}
			if !slices.ContainsFunc(addSteps, func(p string) bool { return strings.HasPrefix(j[k], p) }) {
				break
			}
		}
	}
	for i := 0; i+1 < len(j); i++ {
		for _, p := range concurrentPairs {
			if strings.HasPrefix(j[i], p[1]+" ") && strings.HasPrefix(j[i+1], p[0]+" ") {
				j[i], j[i+1] = j[i+1], j[i]
			}
			if strings.HasPrefix(j[i], p[0]+" ") && strings.HasPrefix(j[i+1], p[1]+" ") {
				i++ // a pair: its second entry starts no other
				break
			}
		}
	}
	return j
}

// left describes what the world still holds, for "nothing left behind" checks.
func (w *world) left() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for n := range w.ports {
		parts = append(parts, "port "+n)
	}
	for n := range w.veths {
		parts = append(parts, "veth "+n)
	}
	for k, l := range w.leases {
		parts = append(parts, "lease "+k+" "+l.IPs[0].String())
	}
	for o := range w.flows {
		parts = append(parts, "flows of "+o.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// testNode is a node on w's fakes: bridge br-int, pod subnet 10.128.0.0/24 (gateway
// 10.128.0.1 on ofport 1), no OpenFlow connection.
func testNode(w *world) *Node {
	gw := nthIP(w.subnet, 1)
	return &Node{
		opts: NodeOptions{Bridge: "br-int", Gateway: "gw0", DatapathType: "netdev", PodSubnet: w.subnet, MTU: 1450},
		log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		cfg: flows.NodeConfig{GatewayOFPort: 1, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0, 1},
			GatewayIP: gw, PodSubnet: w.subnet, Generation: 1},
		gwAddr: &net.IPNet{IP: gw, Mask: w.subnet.Mask},
		ports:  w, owners: w, leases: w, netns: w,
		pods: map[string]*Attachment{}, stop: make(chan struct{}),
	}
}

func podReq(id string) PodRequest {
	return PodRequest{ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id, PodNamespace: "default", PodName: "pod-" + id, Network: "net-a"}
}

// TestAddPodUndoesInReverse makes each step of ADD fail in turn and checks that exactly the
// steps done before it are undone, last first, and nothing is left behind: lease, veth,
// port (also when the failing transaction committed its row) and flows.
func TestAddPodUndoesInReverse(t *testing.T) {
	veth := podnet.HostVethName("c1", "eth0")
	pod := "pod owner 500" // the owner id the lease was given (world.ReserveLease), not the address
	for _, c := range []struct {
		name    string
		fail    string
		commits bool
		step    string
		want    []string
	}{
		{"ipam fails", "ipam.Reserve", false, "ipam", []string{
			"ipam.Reserve c1/eth0"}},
		// The lease's write is waited for after the veth is made (it runs meanwhile), and
		// before the undos: a failed write has already rolled the lease back.
		// The pod's flows go in beside the veth, the lease's write and the port (reported
		// right after the lease): every failure after the lease deletes them.
		{"veth fails, lease written", "podnet.Setup", false, "veth", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0",
			"flows.DeleteOwner " + pod, "ipam.Release c1/eth0"}},
		{"lease write fails, veth made", "ipam.Durable", false, "ipam", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0",
			"flows.DeleteOwner " + pod, "podnet.Teardown " + veth, "ipam.Release c1/eth0"}},
		{"veth and lease write fail", "podnet.Setup,ipam.Durable", false, "veth", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0",
			"flows.DeleteOwner " + pod, "ipam.Release c1/eth0"}},
		// The ofport is chosen first (the lease records it): nothing to undo.
		{"no ofport to choose", "ovsdb.ReserveOFPort", false, "ovsdb", nil},
		// The port's undo runs even when the transaction failed: it may have committed.
		// The flows went in meanwhile (on the chosen ofport) and go with it.
		{"ovsdb fails", "ovsdb.AddPort", false, "ovsdb", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0", "ovsdb.AddPort " + veth,
			"flows.DeleteOwner " + pod, "ovsdb.DeletePort " + veth, "podnet.Teardown " + veth, "ipam.Release c1/eth0"}},
		{"ovsdb fails after commit", "ovsdb.AddPort", true, "ovsdb", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0", "ovsdb.AddPort " + veth,
			"flows.DeleteOwner " + pod, "ovsdb.DeletePort " + veth, "podnet.Teardown " + veth, "ipam.Release c1/eth0"}},
		{"ovsdb and openflow fail", "ovsdb.AddPort,flows.SetOwner", false, "ovsdb", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0", "ovsdb.AddPort " + veth,
			"flows.DeleteOwner " + pod, "ovsdb.DeletePort " + veth, "podnet.Teardown " + veth, "ipam.Release c1/eth0"}},
		{"openflow fails", "flows.SetOwner", false, "openflow", []string{
			"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0", "ovsdb.AddPort " + veth,
			"flows.DeleteOwner " + pod, "ovsdb.DeletePort " + veth, "podnet.Teardown " + veth, "ipam.Release c1/eth0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			for _, op := range strings.Split(c.fail, ",") {
				w.fail[op] = errInjected
			}
			w.addPortCommits = c.commits
			n := testNode(w)
			a, err := n.AddPod(context.Background(), podReq("c1"))
			var se *StepError
			if a != nil || !errors.As(err, &se) || se.Step != c.step || !errors.Is(err, errInjected) {
				t.Fatalf("AddPod = %v, %v; want a *StepError of step %s wrapping the injected failure", a, err, c.step)
			}
			// The flows', the port's and the veth's undos run at once (none waits for a stuck
			// other one): their order is free, the lease's release comes after all of them.
			if got := w.log(); !reflect.DeepEqual(concurrentUndosSorted(got), concurrentUndosSorted(c.want)) {
				t.Errorf("journal:\n  %s\nwant (flows, port and veth undos in any order):\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
			if left := w.left(); left != "" {
				t.Errorf("failed ADD left behind: %s", left)
			}
			if len(n.Pods()) != 0 {
				t.Errorf("failed ADD recorded an attachment: %+v", n.Pods()[0])
			}
		})
	}

	// Without a failure: the four steps in order, nothing undone, the attachment recorded.
	w := newWorld()
	n := testNode(w)
	a, err := n.AddPod(context.Background(), podReq("c1"))
	if err != nil {
		t.Fatal(err)
	}
	// The lease's write is waited for after the veth (they overlap) and before the port;
	// the pod's flows go in beside all three.
	want := []string{"ipam.Reserve c1/eth0", "flows.SetOwner " + pod, "podnet.Setup " + veth, "ipam.Durable c1/eth0", "ovsdb.AddPort " + veth}
	if got := w.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("journal of a good ADD: %v, want %v", got, want)
	}
	if a.IPv4().String() != "10.128.0.2/24" || a.OFPort != ovsdb.MinChosenOFPort || len(n.Pods()) != 1 {
		t.Errorf("attachment %+v, %d recorded; want 10.128.0.2/24 on the chosen ofport %d, recorded", a, len(n.Pods()), ovsdb.MinChosenOFPort)
	}
	if fs, _ := w.Owner(a.owner()); !reflect.DeepEqual(fs, flows.PodFlows(n.cfg, a.flowPod())) {
		t.Errorf("pod owner holds %v, want the pod's flows on ofport %d", fs, a.OFPort)
	}

	// ovs-vswitchd gives another ofport than the one asked for (another controller holds
	// it): the port's ofport_request is pinned to the one it got (else it would move there
	// once the number came free, under flows naming the old one), and the flows are redone
	// for it before ADD succeeds.
	w = newWorld()
	w.ofportTaken = true
	n = testNode(w)
	a, err = n.AddPod(context.Background(), podReq("c1"))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, "ovsdb.AddPort "+veth, "flows.SetOwner "+pod, "ipam.Record c1/eth0") // the lease follows the ofport
	if got := w.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("journal of an ADD whose ofport request was not honoured: %v, want %v", got, want)
	}
	if p, _ := w.GetPort(veth); a.OFPort != uint32(p.OFPort) || p.OFPort == ovsdb.MinChosenOFPort || w.requests[veth] != p.OFPort {
		t.Errorf("attachment on ofport %d, port on %d with ofport_request %d; want all three on the port's own (not %d)", a.OFPort, p.OFPort, w.requests[veth], ovsdb.MinChosenOFPort)
	}
	if fs, _ := w.Owner(a.owner()); !reflect.DeepEqual(fs, flows.PodFlows(n.cfg, a.flowPod())) {
		t.Errorf("pod owner holds %v, want the pod's flows on ofport %d", fs, a.OFPort)
	}
}

// TestDelPodWithResourcesGone deletes an attachment after one (or more) of its resources
// went away by other means: each DEL succeeds and removes all the rest, including the
// flows, found by the pod's address wherever it is still written (memory, port, lease).
func TestDelPodWithResourcesGone(t *testing.T) {
	veth := podnet.HostVethName("c1", "eth0")
	for _, c := range []struct {
		name string
		gone func(w *world, n *Node)
	}{
		{"nothing gone", func(w *world, n *Node) {}},
		{"flows gone", func(w *world, n *Node) { w.flows = map[flows.Owner][]flows.Flow{} }},
		{"port gone", func(w *world, n *Node) { delete(w.ports, veth) }},
		{"veth gone", func(w *world, n *Node) { delete(w.veths, veth) }},
		{"lease gone", func(w *world, n *Node) { delete(w.leases, "c1/eth0") }},
		{"daemon restarted (not in memory)", func(w *world, n *Node) { n.pods = map[string]*Attachment{} }},
		{"not in memory, port gone: the lease names the address", func(w *world, n *Node) {
			n.pods = map[string]*Attachment{}
			delete(w.ports, veth)
		}},
		{"not in memory, lease gone: the port names the address", func(w *world, n *Node) {
			n.pods = map[string]*Attachment{}
			delete(w.leases, "c1/eth0")
		}},
		{"everything gone", func(w *world, n *Node) {
			n.pods = map[string]*Attachment{}
			*w = *newWorld()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			n := testNode(w)
			if _, err := n.AddPod(context.Background(), podReq("c1")); err != nil {
				t.Fatal(err)
			}
			c.gone(w, n)
			w.log()
			req := podReq("c1")
			req.Netns = "" // the runtime may have removed the netns already
			for i := 1; i <= 2; i++ {
				if err := n.DelPod(context.Background(), req); err != nil {
					t.Fatalf("DEL #%d: %v", i, err)
				}
				if left := w.left(); left != "" {
					t.Fatalf("after DEL #%d left behind: %s (journal %v)", i, left, w.log())
				}
				if len(n.Pods()) != 0 {
					t.Fatalf("after DEL #%d the attachment is still recorded", i)
				}
			}
		})
	}

	// A DEL for another network leaves the attachment alone (issue 10's scoping).
	w := newWorld()
	n := testNode(w)
	if _, err := n.AddPod(context.Background(), podReq("c1")); err != nil {
		t.Fatal(err)
	}
	other := podReq("c1")
	other.Network = "net-b"
	if err := n.DelPod(context.Background(), other); err != nil {
		t.Fatalf("DEL for another network: %v", err)
	}
	if got := podAttachment("c1").remains(w, 0); got != "port+veth+lease+flows" || len(n.Pods()) != 1 {
		t.Errorf("DEL for another network removed part of the attachment: %q remains, want port+veth+lease+flows", got)
	}

	// DEL runs the other way round from ADD: flows, port, veth, lease.
	w = newWorld()
	n = testNode(w)
	if _, err := n.AddPod(context.Background(), podReq("c1")); err != nil {
		t.Fatal(err)
	}
	w.log()
	if err := n.DelPod(context.Background(), podReq("c1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"flows.DeleteOwner pod owner 500", "ovsdb.DeletePort " + veth, "podnet.Teardown " + veth, "ipam.Release c1/eth0"}
	if got := w.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("DEL journal %v, want %v", got, want)
	}

	// A failed step is reported by name and a retry finishes the DEL.
	n = testNode(newWorld())
	w = n.ports.(*world)
	if _, err := n.AddPod(context.Background(), podReq("c1")); err != nil {
		t.Fatal(err)
	}
	w.fail["ovsdb.DeletePort"] = errInjected
	var se *StepError
	if err := n.DelPod(context.Background(), podReq("c1")); !errors.As(err, &se) || se.Step != "ovsdb" {
		t.Fatalf("DEL with OVSDB failing: %v, want a *StepError of step ovsdb", err)
	}
	delete(w.fail, "ovsdb.DeletePort")
	if err := n.DelPod(context.Background(), podReq("c1")); err != nil {
		t.Fatalf("DEL retry: %v", err)
	}
	if left := w.left(); left != "" {
		t.Errorf("after the retried DEL left behind: %s", left)
	}
}

// attachment describes one attachment's pieces for the reconciliation and GC tables.
type attachment struct {
	id      string // container ID; ifname is eth0
	network string // the CNI network its records name ("" = recorded without one)
	port    bool   // an OVS port with our external_ids
	ofport  int    // the port's ofport (0 = not assigned yet, -1 = could not open)
	veth    bool   // the host veth exists
	lease   bool   // an IP lease
	flows   bool   // the pod's flows are in the store
	known   bool   // the node has it in memory (it was attached by this daemon run)
	notOurs bool   // the port carries no ofsdn external_ids (another program's port)
}

// put builds a's pieces in w and n; lease i is 10.128.0.(i+2), flow owner id 500+i.
func (a attachment) put(w *world, n *Node, i int) {
	veth := podnet.HostVethName(a.id, "eth0")
	ip := nthIP(w.subnet, uint32(i+2))
	at := &Attachment{ContainerID: a.id, IfName: "eth0", Netns: "/var/run/netns/" + a.id, HostVeth: veth, Network: a.network,
		IPs: []*net.IPNet{{IP: ip, Mask: w.subnet.Mask}}, MAC: podnet.MACFromIP(ip), OFPort: uint32(max(a.ofport, 0)), Gateway: n.cfg.GatewayIP,
		OwnerID: uint32(500 + i)}
	if a.port {
		ext := at.externalIDs()
		if a.notOurs {
			ext = map[string]string{"owner": "someone else"}
		}
		w.ports[veth] = ovsdb.PortInfo{Name: veth, Bridge: "br-int", OFPort: a.ofport, ExternalIDs: ext}
	}
	if a.veth {
		w.veths[veth] = true
	}
	if a.lease {
		w.leases[attachmentKey(a.id, "eth0")] = ipam.Lease{IPs: []net.IP{ip}, ContainerID: a.id, IfName: "eth0", Network: a.network, OwnerID: at.OwnerID}
	}
	if a.flows {
		w.flows[at.owner()] = flows.PodFlows(n.cfg, at.flowPod())
	}
	if a.known {
		n.pods[at.key()] = at
	}
}

// remains reports which of a's pieces w still holds, in put's terms.
func (a attachment) remains(w *world, i int) string {
	veth := podnet.HostVethName(a.id, "eth0")
	var out []string
	if _, ok := w.ports[veth]; ok {
		out = append(out, "port")
	}
	if w.veths[veth] {
		out = append(out, "veth")
	}
	if _, ok := w.leases[attachmentKey(a.id, "eth0")]; ok {
		out = append(out, "lease")
	}
	if _, ok := w.flows[flows.Owner{Kind: flows.OwnerPod, ID: uint32(500 + i)}]; ok {
		out = append(out, "flows")
	}
	return strings.Join(out, "+")
}

func ipv4(ip net.IP) uint32 {
	ip = ip.To4()
	return uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
}

// whole returns what remains of an attachment that is left alone.
func (a attachment) whole() string {
	var out []string
	for _, p := range []struct {
		has  bool
		name string
	}{{a.port, "port"}, {a.veth, "veth"}, {a.lease, "lease"}, {a.flows, "flows"}} {
		if p.has {
			out = append(out, p.name)
		}
	}
	return strings.Join(out, "+")
}

// healthy is a complete, working attachment of network net-a.
func healthy(id string) attachment {
	return attachment{id: id, network: "net-a", port: true, ofport: 5, veth: true, lease: true, flows: true, known: true}
}

// podAttachment describes what AddPod of podReq(id) made, as the first attachment.
func podAttachment(id string) attachment { return healthy(id) }

// TestReconcileDecides runs start-up reconciliation (all networks) on a table of
// attachments and checks what it keeps (everything of a keeper) and what it removes
// (everything of a provably stale one): only a port whose host veth is gone, or a lease
// with neither port nor host veth, is stale (brokenKind).
func TestReconcileDecides(t *testing.T) {
	unknown := healthy("c2")
	unknown.known, unknown.flows = false, false
	for _, c := range []struct {
		name string
		a    attachment
		keep bool
	}{
		{"healthy", healthy("c1"), true},
		{"lease whose port exists but whose pod is unknown", unknown, true},
		{"port whose ofport is not assigned yet", attachment{id: "c3", network: "net-a", port: true, ofport: 0, veth: true, lease: true}, true},
		{"port of another program, no veth", attachment{id: "c4", port: true, ofport: 7, notOurs: true}, true},
		{"port without lease, all else fine", attachment{id: "c5", network: "net-a", port: true, ofport: 5, veth: true, flows: true, known: true}, true},
		{"ofport -1, host veth still there (the pod may run)", attachment{id: "c6", network: "net-a", port: true, ofport: -1, veth: true, lease: true, flows: true, known: true}, true},
		{"lease and host veth without port", attachment{id: "c7", network: "net-a", veth: true, lease: true}, true},
		{"recorded without a network, healthy", attachment{id: "c8", port: true, ofport: 5, veth: true, lease: true}, true},
		{"host veth gone", attachment{id: "c9", network: "net-a", port: true, ofport: 5, lease: true, flows: true, known: true}, false},
		{"ofport -1, host veth gone", attachment{id: "c10", network: "net-a", port: true, ofport: -1, lease: true, flows: true, known: true}, false},
		{"lease alone (ADD died after its lease)", attachment{id: "c11", network: "net-a", lease: true}, false},
		{"lease alone, flows of an earlier ADD", attachment{id: "c12", network: "net-a", lease: true, flows: true}, false},
		{"recorded without a network, host veth gone", attachment{id: "c13", port: true, ofport: 5, lease: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			n := testNode(w)
			c.a.put(w, n, 0)
			removed, err := n.reconcile(context.Background(), "")
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			want, wantRemoved := c.a.whole(), 0
			if !c.keep {
				want, wantRemoved = "", 1
			}
			if got := c.a.remains(w, 0); got != want || removed != wantRemoved {
				t.Errorf("after reconciliation %q remains (removed %d), want %q (removed %d); journal %v", got, removed, want, wantRemoved, w.log())
			}
			if _, known := n.pods[attachmentKey(c.a.id, "eth0")]; known && !c.keep {
				t.Error("a removed attachment is still recorded")
			}
		})
	}
}

// TestGCDecides runs CNI GC for network net-a with a valid-attachments list over a table
// of attachments: an attachment of net-a the runtime does not list goes whole, whatever
// of it is left; a listed one is kept unless it is provably stale (then reconciliation
// removes it, as at start); attachments of another network, or recorded without one, are
// never this GC's to remove.
func TestGCDecides(t *testing.T) {
	for _, c := range []struct {
		name  string
		a     attachment
		valid bool
		keep  bool
	}{
		{"listed, healthy", healthy("c1"), true, true},
		{"listed, not known to this daemon run", attachment{id: "c2", network: "net-a", port: true, ofport: 5, veth: true, lease: true}, true, true},
		{"not listed, healthy", healthy("c3"), false, false},
		{"not listed, not known to this daemon run", attachment{id: "c4", network: "net-a", port: true, ofport: 5, veth: true, lease: true, flows: true}, false, false},
		{"not listed, lease only", attachment{id: "c5", network: "net-a", lease: true}, false, false},
		{"not listed, port only", attachment{id: "c6", network: "net-a", port: true, ofport: 5}, false, false},
		{"listed, host veth gone", attachment{id: "c7", network: "net-a", port: true, ofport: 5, lease: true, flows: true, known: true}, true, false},
		{"listed, lease alone", attachment{id: "c8", network: "net-a", lease: true}, true, false},
		{"listed, lease and host veth without port", attachment{id: "c9", network: "net-a", lease: true, veth: true}, true, true},
		{"not listed, another program's port", attachment{id: "c10", port: true, ofport: 7, notOurs: true}, false, true},
		{"not listed, another network's", attachment{id: "c11", network: "net-b", port: true, ofport: 5, veth: true, lease: true, flows: true, known: true}, false, true},
		{"not listed, another network's, host veth gone", attachment{id: "c12", network: "net-b", port: true, ofport: 5, lease: true, flows: true, known: true}, false, true},
		{"not listed, recorded without a network", attachment{id: "c13", port: true, ofport: 5, veth: true, lease: true, flows: true, known: true}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			n := testNode(w)
			c.a.put(w, n, 0)
			// A healthy, listed neighbour must never be touched.
			healthy("keeper").put(w, n, 1)
			valid := []AttachmentID{{ContainerID: "keeper", IfName: "eth0"}}
			if c.valid {
				valid = append(valid, AttachmentID{ContainerID: c.a.id, IfName: "eth0"})
			}
			if err := n.GC(context.Background(), "net-a", valid); err != nil {
				t.Fatalf("GC: %v", err)
			}
			want := c.a.whole()
			if !c.keep {
				want = ""
			}
			if got := c.a.remains(w, 0); got != want {
				t.Errorf("after GC %q remains, want %q; journal %v", got, want, w.log())
			}
			if got := healthy("keeper").remains(w, 1); got != healthy("keeper").whole() {
				t.Errorf("GC touched the listed healthy attachment: %q remains", got)
			}
		})
	}
}

// TestOVSUnavailableFromEitherSide: an OVSDB outage and an OpenFlow outage both reach the
// CNI handler as ErrOVSUnavailable (try again later), through the step error.
func TestOVSUnavailableFromEitherSide(t *testing.T) {
	for name, cause := range map[string]error{
		"ovsdb":    fmt.Errorf("add port: %w", ovsdb.ErrUnavailable),
		"openflow": fmt.Errorf("apply: %w", errors.Join(errors.New("bridge br-int"), openflow.ErrDisconnected)),
	} {
		err := stepErr("ovsdb", cause)
		if !errors.Is(err, ErrOVSUnavailable) || !errors.Is(err, cause) {
			t.Errorf("%s outage: %v does not match ErrOVSUnavailable and its cause", name, err)
		}
		if err.Error() != "ovsdb: "+cause.Error() {
			t.Errorf("%s outage: text %q changed", name, err)
		}
	}
	if err := stepErr("ipam", errInjected); errors.Is(err, ErrOVSUnavailable) {
		t.Errorf("an unrelated error matches ErrOVSUnavailable: %v", err)
	}
}

// concurrentUndosSorted returns journal with each run of consecutive undos that run at
// once (flows.DeleteOwner, ovsdb.DeletePort, podnet.Teardown) sorted.
func concurrentUndosSorted(journal []string) []string {
	concurrent := func(e string) bool {
		return strings.HasPrefix(e, "flows.DeleteOwner ") || strings.HasPrefix(e, "ovsdb.DeletePort ") || strings.HasPrefix(e, "podnet.Teardown ")
	}
	out := append([]string(nil), journal...)
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && concurrent(out[j]) {
			j++
		}
		if j > i {
			sort.Strings(out[i:j])
			i = j
		} else {
			i++
		}
	}
	return out
}

func TestNthIP6(t *testing.T) {
	for _, c := range []struct {
		subnet string
		n      uint32
		want   string
	}{{"fd00:10:244:1::/64", 1, "fd00:10:244:1::1"}, {"fd00:10:244:1::/64", 0, "fd00:10:244:1::"},
		{"fd00::ff/120", 0x101, "fd00::101"}, {"fd00::/64", 0xffffffff, "fd00::ffff:ffff"}} {
		_, sn, _ := net.ParseCIDR(c.subnet)
		if got := nthIP6(sn, c.n); !got.Equal(net.ParseIP(c.want)) || len(got) != net.IPv6len {
			t.Errorf("nthIP6(%s, %d) = %v, want %s", c.subnet, c.n, got, c.want)
		}
	}
}

// TestAddPodDualStack: on a dual-stack node ADD asks podnet for both addresses and both
// gateways, the attachment holds them in the pod subnets' order, its flows hold the IPv6
// guard; a failure at any later step undoes everything, as on an IPv4-only node.
func TestAddPodDualStack(t *testing.T) {
	dual := func() (*world, *Node) {
		w := newWorld()
		_, w.subnet6, _ = net.ParseCIDR("fd00:10:128::/64")
		n := testNode(w)
		n.opts.PodSubnetIPv6 = w.subnet6
		n.cfg.PodSubnetIPv6, n.cfg.GatewayIPv6 = w.subnet6, nthIP6(w.subnet6, 1)
		if err := n.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return w, n
	}
	w, n := dual()
	a, err := n.AddPod(context.Background(), podReq("c1"))
	if err != nil {
		t.Fatal(err)
	}
	sp := w.lastSpec
	if sp.Addr.String() != "10.128.0.2/24" || sp.Addr6.String() != "fd00:10:128::2/64" || !sp.Gateway6.Equal(net.ParseIP("fd00:10:128::1")) || !sp.Gateway.Equal(net.ParseIP("10.128.0.1")) {
		t.Fatalf("podnet.Setup asked for %v via %v and %v via %v, want 10.128.0.2/24 via 10.128.0.1 and fd00:10:128::2/64 via fd00:10:128::1", sp.Addr, sp.Gateway, sp.Addr6, sp.Gateway6)
	}
	if len(a.IPs) != 2 || a.IPv4().String() != "10.128.0.2/24" || a.IPv6().String() != "fd00:10:128::2/64" || !a.Gateway6.Equal(sp.Gateway6) {
		t.Fatalf("attachment IPs %v gateway6 %v", a.IPs, a.Gateway6)
	}
	fs, _ := w.Owner(a.owner())
	var v6 int
	for _, f := range fs {
		if f.Match.EthType == flows.EthTypeIPv6 {
			v6++
		}
	}
	if v6 != 12 {
		t.Errorf("pod has %d IPv6 flows, want 12 (2 sources, 2 NS, 4 NA, 3 ND deliveries, 1 forwarding)", v6)
	}
	for _, fail := range []string{"podnet.Setup", "ovsdb.AddPort", "flows.SetOwner"} {
		w, n := dual()
		w.fail[fail] = errInjected
		if _, err := n.AddPod(context.Background(), podReq("c2")); err == nil {
			t.Fatalf("%s failing: ADD succeeded", fail)
		}
		if left := w.left(); left != "" {
			t.Errorf("%s failing: left behind %s", fail, left)
		}
	}
}

// TestAddPodIPv6Only (fakes): on an IPv6-only node ADD asks podnet for the IPv6 address
// alone (no IPv4 address or gateway), the pod's flows are IPv6 only, its port records
// ofsdn-ipv6 and no ofsdn-ip, the attachment rebuilt from the port holds the address;
// CHECK looks for that address with the IPv6 gateway and refuses a prevResult naming
// another; DEL leaves nothing. On an
// IPv6-first node the attachment, and CHECK, hold the IPv6 address first.
func TestAddPodIPv6Only(t *testing.T) {
	w := newWorld()
	_, w.subnet6, _ = net.ParseCIDR("fd00:10:128::/64")
	w.subnet = nil
	gw6 := nthIP6(w.subnet6, 1)
	n := &Node{
		opts: NodeOptions{Bridge: "br-int", Gateway: "gw0", DatapathType: "netdev", PodSubnetIPv6: w.subnet6, MTU: 1430},
		log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		cfg: flows.NodeConfig{GatewayOFPort: 1, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0, 1},
			PodSubnetIPv6: w.subnet6, GatewayIPv6: gw6, Generation: 1},
		gwAddr6: &net.IPNet{IP: gw6, Mask: w.subnet6.Mask},
		ports:   w, owners: w, leases: w, netns: w,
		pods: map[string]*Attachment{}, stop: make(chan struct{}),
	}
	if err := n.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := n.AddPod(context.Background(), podReq("c1"))
	if err != nil {
		t.Fatal(err)
	}
	sp := w.lastSpec
	if sp.Addr != nil || sp.Gateway != nil || sp.Addr6.String() != "fd00:10:128::2/64" || !sp.Gateway6.Equal(gw6) {
		t.Fatalf("podnet.Setup asked for %v via %v and %v via %v, want fd00:10:128::2/64 via %v alone", sp.Addr, sp.Gateway, sp.Addr6, sp.Gateway6, gw6)
	}
	if len(a.IPs) != 1 || a.IPv6().String() != "fd00:10:128::2/64" || a.Gateway != nil || !a.Gateway6.Equal(gw6) {
		t.Fatalf("attachment IPs %v gateway %v gateway6 %v", a.IPs, a.Gateway, a.Gateway6)
	}
	fs, _ := w.Owner(a.owner())
	if len(fs) != 13 {
		t.Errorf("pod has %d flows, want 13 (classifier and its 12 IPv6 flows)", len(fs))
	}
	for _, f := range fs {
		if f.Match.EthType == flows.EthTypeIPv4 || f.Match.EthType == flows.EthTypeARP {
			t.Errorf("IPv6-only pod has an IPv4 or ARP flow: %s", f)
		}
	}
	p := w.ports[a.HostVeth]
	if _, ok := p.ExternalIDs[ExtIDIP]; ok || p.ExternalIDs[ExtIDIPv6] != "fd00:10:128::2/64" {
		t.Fatalf("port external_ids %v: want %s alone", p.ExternalIDs, ExtIDIPv6)
	}
	if pa, ok := attachmentFromPort(p); !ok || len(pa.IPs) != 1 || pa.IPv6().String() != "fd00:10:128::2/64" {
		t.Fatalf("attachment from the port: %+v, %v", pa, ok)
	}
	if e := a.expects(); len(e) != 1 || e[0].Addr.String() != "fd00:10:128::2/64" || !e[0].Gateway.Equal(gw6) {
		t.Fatalf("CHECK would ask podnet for %v, want fd00:10:128::2/64 via %v", e, gw6)
	}
	if err := n.CheckPod(context.Background(), podReq("c1"), []*net.IPNet{{IP: net.ParseIP("fd00:10:128::9"), Mask: net.CIDRMask(64, 128)}}); err == nil || !strings.Contains(err.Error(), "prevResult has IP fd00:10:128::9/64") {
		t.Fatalf("CHECK with another prevResult address: %v", err)
	}
	if err := n.DelPod(context.Background(), podReq("c1")); err != nil {
		t.Fatal(err)
	}
	if left := w.left(); left != "" {
		t.Errorf("DEL left behind %s", left)
	}

	// IPv6-first: the attachment's (the CNI result's) and CHECK's order is the node's.
	w2 := newWorld()
	_, w2.subnet6, _ = net.ParseCIDR("fd00:10:128::/64")
	n2 := testNode(w2)
	n2.opts.PodSubnetIPv6, n2.opts.IPv6First = w2.subnet6, true
	n2.cfg.PodSubnetIPv6, n2.cfg.GatewayIPv6 = w2.subnet6, gw6
	if got := fmt.Sprint(n2.podSubnets()); got != "[fd00:10:128::/64 10.128.0.0/24]" {
		t.Fatalf("IPv6-first podSubnets() = %s", got)
	}
	a2 := &Attachment{IPs: []*net.IPNet{{IP: net.ParseIP("fd00:10:128::2"), Mask: net.CIDRMask(64, 128)}, {IP: net.ParseIP("10.128.0.2").To4(), Mask: net.CIDRMask(24, 32)}},
		Gateway: nthIP(w2.subnet, 1), Gateway6: gw6}
	if e := a2.expects(); len(e) != 2 || !e[0].Gateway.Equal(gw6) || !e[1].Gateway.Equal(a2.Gateway) {
		t.Fatalf("IPv6-first CHECK expects %v, want both addresses, IPv6 first, each with its gateway", e)
	}
}

// TestStartNodeRefusesMTUBelowIPv6Minimum: a node with an IPv6 pod subnet and a pod MTU
// below 1280 (RFC 8200 §5; e.g. the automatic MTU of a small underlay) is refused at start
// naming the MTU and the fix, before it touches OVS: its pods and gateway could carry no
// IPv6 (podnet's TestSetupBelowIPv6MinimumMTU: an IPv4 pod is wired at such an MTU).
func TestStartNodeRefusesMTUBelowIPv6Minimum(t *testing.T) {
	_, sn4, _ := net.ParseCIDR("10.128.0.0/24")
	_, sn6, _ := net.ParseCIDR("fd00:10:128::/64")
	for _, opts := range []NodeOptions{
		{PodSubnet: sn4, PodSubnetIPv6: sn6, MTU: 1279},
		{PodSubnetIPv6: sn6, MTU: 1250},
	} {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		_, err := StartNode(context.Background(), nil, opts)
		if err == nil || !strings.Contains(err.Error(), "below IPv6's minimum link MTU 1280") || !strings.Contains(err.Error(), fmt.Sprintf("pod MTU %d", opts.MTU)) {
			t.Errorf("StartNode with IPv6 pod subnet and MTU %d: %v, want the IPv6 minimum MTU refusal", opts.MTU, err)
		}
	}
}
