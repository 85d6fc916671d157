package controller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/proxy"
	"github.com/ofsdn/ofsdn/switchstate"
)

// startServiceSink loads n's pipeline and a Service proxy's reject meter and syncs them to
// sw, and returns the proxy (not yet n.services).
func startServiceSink(t *testing.T, ctx context.Context, sw *openflow.Conn, n *Node) *serviceProxy {
	t.Helper()
	n.store.Load(flows.PipelineOwner, flows.PipelineFlows(n.cfg))
	sp := newServiceProxy(n, ServiceOptions{})
	if err := sp.loadMeter(n.store.Store); err != nil {
		t.Fatal(err)
	}
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestServiceSinkOnSwitch: the Service proxy's sink against a real switch. A Full update
// with a forwarding port (group, two buckets), a port without endpoints (metered flow to
// the controller, meter 2 on the switch) and a Local port without a local endpoint (a
// flow without actions); then a delta deleting the first and adding another; then a Full
// update holding one new port, which leaves the switch with exactly that port's flow and
// group, nothing of the others. An id freed by a sync is never given in the same one.
func TestServiceSinkOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	sp := startServiceSink(t, ctx, sw, n)
	br := ovs.MgmtSocket("br-int")
	if m := ovs.Ofctl(t, "dump-meters", br); !strings.Contains(m, "meter=2") {
		t.Fatalf("reject meter 2 not on the switch:\n%s", m)
	}

	ep := func(ip string) proxy.Endpoint {
		return proxy.Endpoint{Addr: netip.MustParseAddr(ip), Port: 8080, Ready: true, Serving: true}
	}
	port := func(name, vip string, eps []proxy.Endpoint, has, local bool) *proxy.ServicePortState {
		st := &proxy.ServicePortState{Port: &proxy.ServicePort{Name: proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: name}, Protocol: proxy.ProtocolTCP},
			ClusterIPs: []netip.Addr{netip.MustParseAddr(vip)}, Port: 80, InternalLocal: local}, Family: proxy.IPv4, Endpoints: eps,
			Selection: proxy.Selection{HasEndpoints: has}}
		if local {
			st.Selection.Local = []proxy.Endpoint{}
		} else {
			st.Selection.Cluster = eps
		}
		return st
	}
	lb, _ := flows.StageTable(flows.StageServiceLB)
	// state returns the service_lb flow actions by ClusterIP and the groups' bucket counts.
	state := func() (map[string]string, []string) {
		fl := map[string]string{}
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", br, fmt.Sprintf("table=%d", lb)), "\n") {
			if i := strings.Index(l, "nw_dst="); i >= 0 {
				vip := strings.Fields(strings.ReplaceAll(l[i+len("nw_dst="):], ",", " "))[0]
				fl[vip] = l[strings.Index(l, "actions=")+len("actions="):]
			}
		}
		var gs []string
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-groups", br), "\n") {
			if strings.Contains(l, "group_id=") {
				gs = append(gs, fmt.Sprintf("%s buckets=%d", strings.Split(strings.TrimSpace(l), ",")[0], strings.Count(l, "bucket=")))
			}
		}
		return fl, gs
	}

	a := port("a", "10.96.0.1", []proxy.Endpoint{ep("10.244.1.5"), ep("10.244.2.5")}, true, false)
	b := port("b", "10.96.0.2", nil, false, false)
	c := port("c", "10.96.0.3", nil, true, true)
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{a, b, c}}); err != nil {
		t.Fatal(err)
	}
	fl, gs := state()
	ida := sp.ids[portKey{name: a.Port.Name}]
	wantGroup := fmt.Sprintf("group_id=%d", flows.GroupIDMin+ida)
	if !strings.Contains(fl["10.96.0.1"], "group:") || len(gs) != 1 || gs[0] != wantGroup+" buckets=2" {
		t.Errorf("forwarding port: flow %q, groups %v: want its flow to use %s with 2 buckets", fl["10.96.0.1"], gs, wantGroup)
	}
	if f := fl["10.96.0.2"]; !strings.Contains(f, "meter:2") || !strings.Contains(f, "CONTROLLER") {
		t.Errorf("port without endpoints: actions %q, want meter:2 and the controller", f)
	}
	if f, ok := fl["10.96.0.3"]; !ok || f != "drop" {
		t.Errorf("Local port without a local endpoint: actions %q (present %v), want drop", f, ok)
	}

	d := port("d", "10.96.0.4", []proxy.Endpoint{ep("10.244.1.6")}, true, false)
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{d}, Deleted: []proxy.ServicePortName{a.Port.Name}}); err != nil {
		t.Fatal(err)
	}
	if sp.ids[portKey{name: d.Port.Name}] == ida {
		t.Errorf("the new port got id %d in the same sync that freed it", ida)
	}
	fl, gs = state()
	if _, ok := fl["10.96.0.1"]; ok || len(gs) != 1 || gs[0] != fmt.Sprintf("group_id=%d buckets=1", flows.GroupIDMin+sp.ids[portKey{name: d.Port.Name}]) {
		t.Errorf("after deleting a and adding d: flows %v, groups %v", fl, gs)
	}

	idb, idd := sp.ids[portKey{name: b.Port.Name}], sp.ids[portKey{name: d.Port.Name}]
	e := port("e", "10.96.0.5", []proxy.Endpoint{ep("10.244.1.7"), ep("10.244.1.8"), ep("10.244.1.9")}, true, false)
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{e}}); err != nil {
		t.Fatal(err)
	}
	if got := sp.ids[portKey{name: e.Port.Name}]; got == ida || got == idd || got == idb {
		t.Errorf("port e got id %d, one of the ids of a (%d, freed by an earlier sync), b (%d) or d (%d, both removed by this sync): want a new one (round robin)", got, ida, idb, idd)
	}
	fl, gs = state()
	if len(fl) != 1 || !strings.Contains(fl["10.96.0.5"], "group:") || len(gs) != 1 || !strings.HasSuffix(gs[0], "buckets=3") {
		t.Errorf("after a Full update with port e only: flows %v, groups %v: want e's flow and its 3-bucket group only", fl, gs)
	}
	if st := n.ServiceStats(); st != nil {
		t.Errorf("ServiceStats with n.services unset: %+v, want nil", st)
	}
	n.services = sp
	if st := n.ServiceStats(); st.Ports != 1 || st.Endpoints != 3 {
		t.Errorf("ServiceStats %+v: want 1 port, 3 endpoints", st)
	}
	// /metrics reads ServiceStats: it must not wait for a sync, which holds the proxy's
	// lock until the switch confirms (seconds at 10,000 Services).
	sp.mu.Lock()
	got := make(chan *ServiceStats, 1)
	go func() { got <- n.ServiceStats() }()
	select {
	case st := <-got:
		if st.Ports != 1 || st.Endpoints != 3 {
			t.Errorf("ServiceStats during a sync %+v: want the last sync's 1 port, 3 endpoints", st)
		}
	case <-time.After(5 * time.Second):
		t.Error("ServiceStats waited for the sync in progress (the Service proxy's lock)")
	}
	sp.mu.Unlock()
}

// TestServiceSinkFrontendsOnSwitch: a NodePort Service port with an external IP on a
// real switch: a flow per frontend (ClusterIP, external IP, this node's and each peer's
// address at the NodePort) to the one group; a peer removed and another added → the
// node-address flows follow, nothing left of the old; internalTrafficPolicy Local →
// a second owner and group for the external frontends, gone again with Cluster; the
// port deleted → no flow or group of it left.
func TestServiceSinkFrontendsOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	n.cfg.NodeIP = net.ParseIP("172.30.0.71").To4()
	n.overlay = newOverlay(n, OverlayOptions{})
	n.overlay.peers["n2"] = flows.Peer{Name: "n2", NodeIP: net.ParseIP("172.30.0.72").To4()}
	sp := startServiceSink(t, ctx, sw, n)
	n.services = sp
	br := ovs.MgmtSocket("br-int")
	lb, _ := flows.StageTable(flows.StageServiceLB)
	// frontends returns "nw_dst:tp_dst actions" of the Service flows in service_lb, sorted,
	// and the groups' ids.
	frontends := func() ([]string, []string) {
		var fl []string
		re := regexp.MustCompile(`nw_dst=([0-9.]+),tp_dst=([0-9]+) actions=(\S+)`)
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", br, fmt.Sprintf("table=%d", lb)), "\n") {
			if m := re.FindStringSubmatch(l); m != nil {
				fl = append(fl, m[1]+":"+m[2]+" "+m[3])
			}
		}
		sort.Strings(fl)
		var gs []string
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-groups", br), "\n") {
			if m := regexp.MustCompile(`group_id=([0-9]+)`).FindStringSubmatch(l); m != nil {
				gs = append(gs, m[1])
			}
		}
		sort.Strings(gs)
		return fl, gs
	}
	eps := []proxy.Endpoint{{Addr: netip.MustParseAddr("10.244.1.5"), Port: 8080, Ready: true, Serving: true, NodeName: "n1", Local: true},
		{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Ready: true, Serving: true, NodeName: "n2"}}
	state := func(local bool) *proxy.ServicePortState {
		p := &proxy.ServicePort{Name: proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: "web"}, Protocol: proxy.ProtocolTCP},
			ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.5")}, Port: 80, NodePort: 30080,
			ExternalIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}, InternalLocal: local}
		return &proxy.ServicePortState{Port: p, Family: proxy.IPv4, Endpoints: eps, Selection: proxy.Select(p, eps, "n1", "")}
	}
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{state(false)}}); err != nil {
		t.Fatal(err)
	}
	g := fmt.Sprint(flows.GroupIDMin + sp.ids[portKey{name: state(false).Port.Name}])
	fl, gs := frontends()
	compareText(t, "one view", append(fl, gs...), []string{"10.96.0.5:80 group:" + g, "172.30.0.71:30080 group:" + g,
		"172.30.0.72:30080 group:" + g, "192.0.2.10:80 group:" + g, g})

	// Node n2 goes, n3 comes: the NodePort follows the node addresses.
	n.overlay.mu.Lock()
	delete(n.overlay.peers, "n2")
	n.overlay.peers["n3"] = flows.Peer{Name: "n3", NodeIP: net.ParseIP("172.30.0.73").To4()}
	n.overlay.mu.Unlock()
	sp.nodeAddrsChanged(ctx)
	fl, gs = frontends()
	compareText(t, "n2 gone, n3 added", append(fl, gs...), []string{"10.96.0.5:80 group:" + g, "172.30.0.71:30080 group:" + g,
		"172.30.0.73:30080 group:" + g, "192.0.2.10:80 group:" + g, g})

	// internalTrafficPolicy Local: the ClusterIP goes to the local endpoint, the external
	// frontends to both, through a group of their own.
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{state(true)}}); err != nil {
		t.Fatal(err)
	}
	ge := fmt.Sprint(flows.GroupIDMin + sp.ids[portKey{name: state(true).Port.Name, external: true}])
	fl, gs = frontends()
	wantGroups := []string{g, ge}
	sort.Strings(wantGroups)
	compareText(t, "internalTrafficPolicy Local", append(fl, gs...), append([]string{"10.96.0.5:80 group:" + g,
		"172.30.0.71:30080 group:" + ge, "172.30.0.73:30080 group:" + ge, "192.0.2.10:80 group:" + ge}, wantGroups...))
	if st := n.ServiceStats(); st.Ports != 1 || st.Endpoints != 3 {
		t.Errorf("ServiceStats with the external view: %+v, want 1 port, 3 buckets (1 + 2)", st)
	}
	if infos := n.ServicePorts(); len(infos) != 2 || infos[0].External || !infos[1].External || len(infos[0].Port.Endpoints) != 1 ||
		len(infos[1].Port.Endpoints) != 2 || len(infos[1].Port.Frontends) != 3 {
		t.Errorf("ServicePorts with the external view: %+v, want the port (1 endpoint) then its external view (3 frontends, 2 endpoints)", infos)
	}

	// Back to Cluster: one view again, the external view's owner and group gone.
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{state(false)}}); err != nil {
		t.Fatal(err)
	}
	fl, gs = frontends()
	compareText(t, "back to Cluster", append(fl, gs...), []string{"10.96.0.5:80 group:" + g, "172.30.0.71:30080 group:" + g,
		"172.30.0.73:30080 group:" + g, "192.0.2.10:80 group:" + g, g})

	// Deleted: nothing of it is left.
	if err := sp.Sync(ctx, &proxy.Update{Deleted: []proxy.ServicePortName{state(false).Port.Name}}); err != nil {
		t.Fatal(err)
	}
	if fl, gs = frontends(); len(fl)+len(gs) != 0 || len(sp.ids) != 0 || len(sp.states) != 0 {
		t.Errorf("after the port was deleted: flows %v, groups %v, ids %v, states %d: want none", fl, gs, sp.ids, len(sp.states))
	}
	// A node change with no NodePort left changes nothing (and does not fail).
	n.overlay.mu.Lock()
	delete(n.overlay.peers, "n3")
	n.overlay.mu.Unlock()
	sp.nodeAddrsChanged(ctx)
	if fl, gs = frontends(); len(fl)+len(gs) != 0 {
		t.Errorf("after a node change without Services: flows %v, groups %v", fl, gs)
	}
}

// TestServiceSinkManyEndpointsOnSwitch: one Service port with 5,000 endpoints, more than
// one OpenFlow 1.3 group mod carries (65,535 bytes, ~900 buckets), through the sink and
// its one bundle to a real switch: the port's group chains to part groups that hold all
// 5,000 buckets between them; the same port shrunk to 3 endpoints is one group again, the
// part groups gone; deleted, nothing of it is left. Without part groups the sync fails
// (the switch refuses the message or the encoder its length).
func TestServiceSinkManyEndpointsOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	sp := startServiceSink(t, ctx, sw, n)
	br := ovs.MgmtSocket("br-int")
	port := func(count int) *proxy.ServicePortState {
		var eps []proxy.Endpoint
		for i := 0; i < count; i++ {
			eps = append(eps, proxy.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i%2)}), Port: uint16(10000 + i/2), Ready: true, Serving: true})
		}
		return &proxy.ServicePortState{Port: &proxy.ServicePort{Name: proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: "big"}, Protocol: proxy.ProtocolTCP},
			ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.9")}, Port: 80}, Family: proxy.IPv4, Endpoints: eps,
			Selection: proxy.Selection{HasEndpoints: count > 0, Cluster: eps}}
	}
	// groups returns group id → its buckets' actions.
	groups := func() map[string][]string {
		out := map[string][]string{}
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-groups", br), "\n") {
			m := regexp.MustCompile(`group_id=([0-9]+)`).FindStringSubmatch(l)
			if m == nil {
				continue
			}
			for _, b := range strings.Split(l, "bucket=")[1:] {
				out[m[1]] = append(out[m[1]], strings.TrimSuffix(b, ","))
			}
		}
		return out
	}
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{port(5000)}}); err != nil {
		t.Fatalf("5,000 endpoints: %v", err)
	}
	key := portKey{name: port(1).Port.Name}
	top := fmt.Sprint(flows.GroupIDMin + sp.ids[key])
	gs := groups()
	parts := sp.parts[key]
	if len(parts) < 2 || len(gs) != 1+len(parts) || len(gs[top]) != len(parts) {
		t.Fatalf("5,000 endpoints: part ids %v, groups on the switch %d, port group %s has %d buckets: want it to chain to every part", parts, len(gs), top, len(gs[top]))
	}
	seen, total := map[string]bool{}, 0
	for i, id := range parts {
		g := fmt.Sprint(flows.GroupIDMin + id)
		if !strings.Contains(strings.Join(gs[top], " "), "group:"+g) {
			t.Errorf("port group %s does not chain to part %d (group %s): %v", top, i, g, gs[top])
		}
		for _, b := range gs[g] {
			if m := regexp.MustCompile(`nat\(dst=([0-9.:]+)\)`).FindStringSubmatch(b); m != nil {
				seen[m[1]] = true
			}
		}
		total += len(gs[g])
	}
	if total != 5000 || len(seen) != 5000 {
		t.Errorf("part groups hold %d buckets, %d distinct endpoints: want 5000 of each", total, len(seen))
	}
	if !strings.Contains(ovs.Ofctl(t, "dump-flows", br), "group:"+top) {
		t.Errorf("no service_lb flow sends to the port's group %s", top)
	}

	// Shrunk to 3: one group, the parts gone and their ids free.
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{port(3)}}); err != nil {
		t.Fatal(err)
	}
	if gs = groups(); len(gs) != 1 || len(gs[top]) != 3 || len(sp.parts) != 0 || len(sp.rec.byKey) != 1 {
		t.Errorf("shrunk to 3 endpoints: groups %v, parts %v, recorded ids %v: want group %s with 3 buckets only, the port's id alone recorded", gs, sp.parts, sp.rec.byKey, top)
	}
	// Grown again, then deleted: nothing left.
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{port(2000)}}); err != nil {
		t.Fatal(err)
	}
	if gs = groups(); len(gs) < 3 {
		t.Errorf("2,000 endpoints: %d groups, want the port's and at least 2 parts", len(gs))
	}
	if err := sp.Sync(ctx, &proxy.Update{Deleted: []proxy.ServicePortName{key.name}}); err != nil {
		t.Fatal(err)
	}
	if gs = groups(); len(gs) != 0 || len(sp.parts) != 0 || len(sp.ids) != 0 {
		t.Errorf("after delete: groups %v, parts %v, ids %v: want none", gs, sp.parts, sp.ids)
	}
}

// TestServicePortIDsKeptAcrossRestart: a restarted daemon (a new store and generation, a
// new Service proxy on the same data directory) gives each Service port the owner id and
// select group id it had, a port new to it an id no recorded port holds (not that of a
// port deleted while the daemon was down, still recorded then), and the first Full sync
// frees the deleted port's id in the record.
func TestServicePortIDsKeptAcrossRestart(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	sp := startServiceSink(t, ctx, sw, n)
	br := ovs.MgmtSocket("br-int")
	port := func(name, vip, epIP string) *proxy.ServicePortState {
		eps := []proxy.Endpoint{{Addr: netip.MustParseAddr(epIP), Port: 8080, Ready: true, Serving: true}}
		return &proxy.ServicePortState{Port: &proxy.ServicePort{Name: proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: name}, Protocol: proxy.ProtocolTCP},
			ClusterIPs: []netip.Addr{netip.MustParseAddr(vip)}, Port: 80}, Family: proxy.IPv4, Endpoints: eps,
			Selection: proxy.Selection{HasEndpoints: true, Cluster: eps}}
	}
	// groupOf returns the select group id the switch's service_lb flow for vip sends to.
	lb, _ := flows.StageTable(flows.StageServiceLB)
	groupOf := func(vip string) string {
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", br, fmt.Sprintf("table=%d", lb)), "\n") {
			if strings.Contains(l, "nw_dst="+vip+",") || strings.Contains(l, "nw_dst="+vip+" ") {
				if m := regexp.MustCompile(`group:(\d+)`).FindStringSubmatch(l); m != nil {
					return m[1]
				}
			}
		}
		return ""
	}
	a, b, c := port("a", "10.96.0.1", "10.244.1.5"), port("b", "10.96.0.2", "10.244.1.6"), port("c", "10.96.0.3", "10.244.1.7")
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{a, b, c}}); err != nil {
		t.Fatal(err)
	}
	key := func(st *proxy.ServicePortState) portKey { return portKey{name: st.Port.Name} }
	before := map[string]uint32{}
	for _, st := range []*proxy.ServicePortState{a, b, c} {
		before[st.Port.Name.String()] = sp.ids[key(st)]
	}
	groupA, groupC := groupOf("10.96.0.1"), groupOf("10.96.0.3")
	if groupA == "" || groupC == "" {
		t.Fatalf("service_lb flows of a and c send to groups %q and %q: want both", groupA, groupC)
	}
	rec, err := RecordedServicePortIDs(n.opts.DataDir)
	if err != nil || len(rec) != 3 {
		t.Fatalf("recorded Service port ids %v (err %v): want a, b and c's %v", rec, err, before)
	}

	// The daemon restarts: a new generation's store (its first sync removes the earlier
	// run's flows and groups) and a new proxy; b was deleted while it was down and d is new.
	n.store = flowStore{switchstate.New()}
	n.cfg.Generation++
	sp = startServiceSink(t, ctx, sw, n)
	d := port("d", "10.96.0.4", "10.244.1.8")
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{a, c, d}}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*proxy.ServicePortState{a, c} {
		if got, want := sp.ids[key(st)], before[st.Port.Name.String()]; got != want {
			t.Errorf("after the restart %s has owner id %d, want its recorded %d", st.Port.Name, got, want)
		}
	}
	if got := groupOf("10.96.0.1"); got != groupA {
		t.Errorf("after the restart a's service_lb flow sends to group %q, want %q as before", got, groupA)
	}
	if got := groupOf("10.96.0.3"); got != groupC {
		t.Errorf("after the restart c's service_lb flow sends to group %q, want %q as before", got, groupC)
	}
	if idd := sp.ids[key(d)]; idd == 0 || idd == before[b.Port.Name.String()] || idd == before[a.Port.Name.String()] || idd == before[c.Port.Name.String()] {
		t.Errorf("new port d got id %d: want one no recorded port held (%v)", idd, before)
	}
	rec, err = RecordedServicePortIDs(n.opts.DataDir)
	want := map[string]uint32{a.Port.Name.String(): before[a.Port.Name.String()], c.Port.Name.String(): before[c.Port.Name.String()], d.Port.Name.String(): sp.ids[key(d)]}
	if err != nil || fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Errorf("recorded Service port ids after the first Full sync: %v (err %v), want %v (b's freed)", rec, err, want)
	}
	if gs := ovs.Ofctl(t, "dump-groups", br); strings.Count(gs, "group_id=") != 3 {
		t.Errorf("groups on the switch after the restart: want a's, c's and d's only:\n%s", gs)
	}
}
