package controller

// The decisions the node takes when the OVS database lost its ports (issue 20, item 1),
// on the fakes of node_unit_test.go: which ports are re-created, with which identity and
// ofport, from the pod table while running and from the IP leases at start; what is left
// alone; the generation choice; the audit's keep rule. test/e2e/dbloss_test.go checks the
// same against a real ovsdb-server and ovs-vswitchd with an empty database.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
	"github.com/ofsdn/ofsdn/switchstate"
)

// HoldOFPort holds ofport for name unless another port of the world has it, or
// "ovsdb.HoldOFPort" is set to fail (a choice, not a change: not journalled).
func (w *world) HoldOFPort(name string, ofport int) (func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.fail["ovsdb.HoldOFPort"]; err != nil {
		return func() {}, err
	}
	for n, p := range w.ports {
		if n != name && p.OFPort == ofport {
			return func() {}, fmt.Errorf("ofport %d is port %s's", ofport, n)
		}
	}
	return func() {}, nil
}

// Record journals "ipam.Record" per lease and replaces their records.
func (w *world) Record(ups []ipam.Lease) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, u := range ups {
		k := attachmentKey(u.ContainerID, u.IfName)
		if err := w.do("ipam.Record", k); err != nil {
			return err
		}
		l, ok := w.leases[k]
		if !ok || len(l.IPs) != len(u.IPs) || !l.IPs[0].Equal(u.IPs[0]) {
			return fmt.Errorf("no lease %s at %v", k, u.IPs)
		}
		l.Netns, l.HostVeth, l.OFPort = u.Netns, u.HostVeth, u.OFPort
		w.leases[k] = l
	}
	return nil
}

// TestLeaseRecordsAttachment: an ADD's lease records the netns, the host veth and the
// ofport its port asks for, the record a start on an empty database needs.
func TestLeaseRecordsAttachment(t *testing.T) {
	w := newWorld()
	n := testNode(w)
	a, err := n.AddPod(context.Background(), podReq("c1"))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := w.Get("c1", "eth0")
	if l.Netns != a.Netns || l.HostVeth != a.HostVeth || l.OFPort != int(a.OFPort) || l.OFPort == 0 {
		t.Errorf("lease records netns %q, host veth %q, ofport %d; the attachment has %q, %q, %d",
			l.Netns, l.HostVeth, l.OFPort, a.Netns, a.HostVeth, a.OFPort)
	}
}

// TestReattachPodsAfterDatabaseLoss: the database lost every port while the node runs.
// reattachPods re-creates each pod's port with its identity and the ofport its flows
// name, without touching the flows; a pod whose host veth is gone is left alone; ports
// still there are not touched; a second run does nothing.
func TestReattachPodsAfterDatabaseLoss(t *testing.T) {
	w := newWorld()
	n := testNode(w)
	ctx := context.Background()
	var pods []*Attachment
	for _, id := range []string{"c1", "c2", "c3"} {
		a, err := n.AddPod(ctx, podReq(id))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, a)
	}
	before := map[string]int{}
	for name, p := range w.ports {
		before[name] = p.OFPort
	}
	w.mu.Lock()
	w.ports = map[string]ovsdb.PortInfo{} // the empty database
	delete(w.veths, pods[2].HostVeth)     // this pod's veth went too
	w.mu.Unlock()
	w.log()

	got, err := n.reattachPods(ctx)
	if err != nil || got != 2 {
		t.Fatalf("reattachPods = %d, %v; want 2 ports re-created", got, err)
	}
	for _, a := range pods[:2] {
		p, ok := w.GetPort(a.HostVeth)
		if !ok {
			t.Fatalf("port %s not re-created", a.HostVeth)
		}
		if p.OFPort != before[a.HostVeth] || w.requests[a.HostVeth] != before[a.HostVeth] {
			t.Errorf("port %s re-created with ofport %d (request %d), had %d", a.HostVeth, p.OFPort, w.requests[a.HostVeth], before[a.HostVeth])
		}
		back, ours := attachmentFromPort(p)
		if !ours || back.ContainerID != a.ContainerID || back.PodNamespace+"/"+back.PodName != a.PodNamespace+"/"+a.PodName ||
			back.Network != a.Network || back.IPv4().String() != a.IPv4().String() || back.MAC.String() != a.MAC.String() || back.Netns != a.Netns {
			t.Errorf("port %s re-created with identity %+v, want that of %+v", a.HostVeth, p.ExternalIDs, a)
		}
	}
	if _, ok := w.GetPort(pods[2].HostVeth); ok {
		t.Errorf("port %s re-created although its host veth is gone", pods[2].HostVeth)
	}
	for _, e := range w.log() {
		if e != "ovsdb.AddPort "+pods[0].HostVeth && e != "ovsdb.AddPort "+pods[1].HostVeth {
			t.Errorf("reattachPods did %q; want only the two ports' inserts (flows are kept, nothing removed)", e)
		}
	}
	if got, err := n.reattachPods(ctx); err != nil || got != 0 {
		t.Errorf("second reattachPods = %d, %v; want nothing to do", got, err)
	}
}

// TestRestorePodsFromLeases: a start on an empty database. A lease with its record and a
// live host veth gets its port back with the recorded ofport and the pod's identity, and
// its flows are loaded; a lease from an older ofsdn (no record) with a live veth gets a
// port on a new ofport and the record written into the lease; a lease without a veth is
// not restored (reconcile removes it).
func TestRestorePodsFromLeases(t *testing.T) {
	w := newWorld()
	n := testNode(w)
	n.store = flowStore{switchstate.New()}
	ip1, ip2, ip3 := nthIP(w.subnet, 7), nthIP(w.subnet, 8), nthIP(w.subnet, 9)
	v1, v2 := podnet.HostVethName("c1", "eth0"), podnet.HostVethName("c2", "eth0")
	w.leases[attachmentKey("c1", "eth0")] = ipam.Lease{IPs: []net.IP{ip1}, ContainerID: "c1", IfName: "eth0", Owner: "ns/p1", Network: "net-a",
		Netns: "/var/run/netns/c1", HostVeth: v1, OFPort: 32800}
	w.leases[attachmentKey("c2", "eth0")] = ipam.Lease{IPs: []net.IP{ip2}, ContainerID: "c2", IfName: "eth0", Owner: "ns/p2"}
	w.leases[attachmentKey("c3", "eth0")] = ipam.Lease{IPs: []net.IP{ip3}, ContainerID: "c3", IfName: "eth0", Owner: "ns/p3"}
	w.veths[v1], w.veths[v2] = true, true

	n.restorePods(context.Background())

	p1, ok := w.GetPort(v1)
	if !ok || p1.OFPort != 32800 {
		t.Fatalf("port %s: %+v, %v; want it re-created on ofport 32800", v1, p1, ok)
	}
	a1, _ := attachmentFromPort(p1)
	if a1.PodNamespace != "ns" || a1.PodName != "p1" || a1.Network != "net-a" || a1.Netns != "/var/run/netns/c1" ||
		!a1.IPv4().IP.Equal(ip1) || a1.MAC.String() != podnet.MACFromIP(ip1).String() {
		t.Errorf("port %s has identity %+v", v1, p1.ExternalIDs)
	}
	p2, ok := w.GetPort(v2)
	if !ok || p2.OFPort == 0 {
		t.Fatalf("port %s of the lease without a record not re-created: %+v", v2, p2)
	}
	if l, _ := w.Get("c2", "eth0"); l.HostVeth != v2 || l.OFPort != p2.OFPort {
		t.Errorf("lease of c2 records host veth %q, ofport %d; want %s, %d", l.HostVeth, l.OFPort, v2, p2.OFPort)
	}
	if _, ok := w.GetPort(podnet.HostVethName("c3", "eth0")); ok {
		t.Error("port re-created for a lease whose host veth does not exist")
	}
	if len(n.Pods()) != 2 {
		t.Errorf("%d pods restored, want 2", len(n.Pods()))
	}
	for _, a := range n.Pods() {
		if fs, ok := n.store.Owner(a.owner()); !ok || len(fs) == 0 {
			t.Errorf("no desired flows loaded for restored pod %s", a.ContainerID)
		}
		if p, _ := w.GetPort(a.HostVeth); p.OFPort != int(a.OFPort) {
			t.Errorf("pod %s restored with ofport %d, its port has %d", a.ContainerID, a.OFPort, p.OFPort)
		}
	}
}

// TestPickGeneration: the next generation after the last run's, wrapping past 65535 to
// 1, never 0 and never one carried by a flow on the switch.
func TestPickGeneration(t *testing.T) {
	for _, c := range []struct {
		prev  uint16
		taken []uint16
		want  uint16
	}{
		{0, nil, 1},
		{1, nil, 2},
		{65535, nil, 1},
		{0, []uint16{1}, 2},           // empty database and data dir, flows of 1 on the switch
		{3, []uint16{4, 5, 7}, 6},     // never a generation the switch has
		{65534, []uint16{65535}, 1},   // skip and wrap
		{65535, []uint16{1, 2, 3}, 4}, //
	} {
		taken := map[uint16]bool{}
		for _, g := range c.taken {
			taken[g] = true
		}
		if got, err := pickGeneration(c.prev, taken); err != nil || got != c.want {
			t.Errorf("pickGeneration(%d, %v) = %d, %v; want %d", c.prev, c.taken, got, err, c.want)
		}
	}
	all := map[uint16]bool{}
	for g := 1; g <= 65535; g++ {
		all[uint16(g)] = true
	}
	if _, err := pickGeneration(9, all); err == nil {
		t.Error("pickGeneration with every generation on the switch: no error")
	}
}

// TestAuditKeepsLeasedPods: the audit's keep rule holds flows of a pod owner whose owner
// id a lease holds, and nothing else (not the owner whose id is the leased address).
func TestAuditKeepsLeasedPods(t *testing.T) {
	w := newWorld()
	n := testNode(w)
	ip := nthIP(w.subnet, 5)
	w.leases["c/eth0"] = ipam.Lease{IPs: []net.IP{ip}, ContainerID: "c", IfName: "eth0", OwnerID: 41}
	leased := flows.PodOwner(flows.Pod{IPs: []net.IP{ip}, OwnerID: 41})
	other := flows.PodOwner(flows.Pod{IPs: []net.IP{nthIP(w.subnet, 6)}, OwnerID: ipv4(ip)})
	cookie := func(o flows.Owner) uint64 { c, _ := o.Cookie(); return c | uint64(flows.NewCookie(1, 0, 0)) }
	if !n.leasedPodCookie(cookie(leased)) {
		t.Error("flow of a leased pod address not kept")
	}
	if n.leasedPodCookie(cookie(other)) {
		t.Error("flow of a pod address without a lease kept")
	}
	peer := flows.Owner{Kind: flows.OwnerPeer, ID: leased.ID}
	if n.leasedPodCookie(cookie(peer)) {
		t.Error("a peer's flow with the same id kept")
	}
}

// TestGenerationFile: the generation is written atomically (no temp file left, a crash's
// temp files removed) and read back; a missing file is 0, a corrupt one an error.
func TestGenerationFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, GenerationFile)
	if g, err := readGeneration(path); g != 0 || err != nil {
		t.Fatalf("missing file: %d, %v", g, err)
	}
	if err := os.WriteFile(path+".tmp-crashed", []byte("7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint16{1, 65535, 42} {
		if err := writeGeneration(path, want); err != nil {
			t.Fatal(err)
		}
		if g, err := readGeneration(path); g != want || err != nil {
			t.Errorf("read back %d, %v; want %d", g, err, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left in the data directory: %v", ents)
	}
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readGeneration(path); err == nil {
		t.Error("corrupt generation file: no error")
	}
}
