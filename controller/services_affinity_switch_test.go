package controller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/proxy"
)

// TestServiceAffinityRemainderOnSwitch: the daemon carries a session-affinity timeout above
// the learn limit (lowered to 2 s; a timeout of 6 s) on a real switch. The switch's
// learned flows (added here as the endpoint flows' learn action makes them: priority 200,
// idle_timeout=2, send_flow_rem, the endpoint's affinity cookie, the client's address and
// the port's id in reg5) expire after 2 s idle,
// and the daemon adds each one's remainder from the flow-removed message: the same match,
// cookie and loads at priority 199 with idle_timeout=4; the remainder expires after 4 s
// idle and nothing comes back. A learned flow naming an endpoint that left or another
// port's id gets no remainder. An endpoint that leaves
// takes its remainder flows with its learned flows (the other endpoint's stay); a changed
// timeout and a deleted port take every remainder of the port. Fails without the
// daemon's flow-removed handler (no remainder appears).
func TestServiceAffinityRemainderOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	n.cfg.AffinityLearnMax = 2
	sp := startServiceSink(t, ctx, sw, n)
	n.services = sp
	n.sw = openflow.NewSwitch(ovs.MgmtSocket("br-int"), openflow.SwitchOptions{OF: openflow.Options{FlowRemoved: sp.frq, FlowRemovedFilter: wantsFlowRemoved}},
		func(context.Context, *openflow.Conn, bool) error { return nil })
	if err := n.sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.sw.Close() })
	go sp.run()
	t.Cleanup(sp.close)
	br := ovs.MgmtSocket("br-int")
	aff, _ := flows.StageTable(flows.StageServiceAffinity)

	ep := func(ip string) proxy.Endpoint {
		return proxy.Endpoint{Addr: netip.MustParseAddr(ip), Port: 8080, Ready: true, Serving: true}
	}
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: "web"}, Protocol: proxy.ProtocolTCP}
	state := func(seconds uint32, eps ...proxy.Endpoint) *proxy.ServicePortState {
		p := &proxy.ServicePort{Name: name, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.5")}, Port: 80,
			ExternalIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}, AffinitySeconds: seconds}
		return &proxy.ServicePortState{Port: p, Family: proxy.IPv4, Endpoints: eps, Selection: proxy.Select(p, eps, "n1", "")}
	}
	epA, epB := ep("10.244.1.5"), ep("10.244.2.5")
	if err := sp.Sync(ctx, &proxy.Update{Full: true, Changed: []*proxy.ServicePortState{state(6, epA, epB)}}); err != nil {
		t.Fatal(err)
	}
	port := func() flows.ServicePort { return sp.ports[portKey{name: name}] }
	cookie := func(ip string) uint64 {
		for _, e := range port().Endpoints {
			if e.IP.String() == ip {
				return uint64(flows.AffinityCookie(n.cfg.Generation, e))
			}
		}
		t.Fatalf("endpoint %s not in the port %v", ip, port())
		return 0
	}
	// learn adds the flow the learn action makes for client → endpoint (ip) at the Service
	// port of id portID.
	learn := func(client string, portID uint32, c uint64, ip string) {
		t.Helper()
		a := net.ParseIP(ip).To4()
		ovs.Ofctl(t, "add-flow", br, fmt.Sprintf("table=%d,cookie=%#x,priority=200,idle_timeout=2,send_flow_rem,ip,nw_src=%s,reg5=%#x,"+
			"actions=load:%#x->NXM_NX_REG3[],load:0x11f90->NXM_NX_REG4[0..16]", aff, c, client, portID, uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3])))
	}
	// flowsOf returns service_affinity's flows of client as "priority idle_timeout cookie reg5 reg3".
	flowsOf := func(client string) []string {
		var out []string
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", br, fmt.Sprintf("table=%d", aff)), "\n") {
			if !strings.Contains(l, "nw_src="+client+",") && !strings.Contains(l, "nw_src="+client+" ") {
				continue
			}
			f := func(key string) string {
				i := strings.Index(l, key)
				if i < 0 {
					return "-"
				}
				return strings.FieldsFunc(l[i+len(key):], func(r rune) bool { return r == ',' || r == ' ' || r == '-' })[0]
			}
			out = append(out, strings.Join([]string{f("priority="), f("idle_timeout="), f("cookie="), f("reg5="), f("load:")}, " "))
		}
		return out
	}
	waitFlows := func(what, client string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(8 * time.Second)
		for {
			got := flowsOf(client)
			if strings.Join(got, "\n") == strings.Join(want, "\n") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: client %s's affinity flows %q, want %q", what, client, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ca, cb := cookie("10.244.1.5"), cookie("10.244.2.5")
	pid := port().ID
	const regA, regB = "0xaf40105", "0xaf40205"

	// Learned flows of two clients (one per Service port, whatever frontend they came
	// through) expire after 2 s; their remainders follow, 4 s each, with the learned
	// flow's cookie.
	learn("10.244.1.9", pid, ca, "10.244.1.5")
	learn("10.244.1.8", pid, cb, "10.244.2.5")
	waitFlows("the learned flow", "10.244.1.9", fmt.Sprintf("200 2 %#x %#x %s", ca, pid, regA))
	// The window without either flow (the switch removed the learned flow, the remainder
	// is not there yet), measured by polling: a new connection in it goes to the group.
	var lastLearned, firstRemainder time.Time
	for deadline := time.Now().Add(8 * time.Second); firstRemainder.IsZero() && time.Now().Before(deadline); {
		got := strings.Join(flowsOf("10.244.1.9"), " ")
		now := time.Now()
		switch {
		case strings.HasPrefix(got, "200 "):
			lastLearned = now
		case strings.HasPrefix(got, "199 "):
			firstRemainder = now
		}
	}
	t.Logf("learned flow last seen %v before the remainder was first seen (polling ovs-ofctl)", firstRemainder.Sub(lastLearned).Round(time.Millisecond))
	waitFlows("the remainder after the learned flow expired", "10.244.1.9", fmt.Sprintf("199 4 %#x %#x %s", ca, pid, regA))
	waitFlows("the other client's remainder", "10.244.1.8", fmt.Sprintf("199 4 %#x %#x %s", cb, pid, regB))
	// The remainder flow is exactly flows.AffinityRemainder's.
	rf, ok := flows.AffinityRemainder(n.cfg, port(), flows.AffinityRemoved{Table: aff, Priority: 200, Cookie: flows.Cookie(ca), IdleTimeout: 2,
		IdleExpired: true, Client: net.ParseIP("10.244.1.9"), PortID: pid})
	dump := ovs.Ofctl(t, "dump-flows", "--no-stats", br, fmt.Sprintf("table=%d", aff))
	if !ok || !strings.Contains(dump, strings.TrimPrefix(rf.String(), fmt.Sprintf("cookie=%#x, ", ca))[len(`table="service_affinity", `):]) {
		t.Errorf("remainder on the switch:\n%s\nwant %s", dump, rf)
	}
	// After 4 s more idle the remainder is gone too, and nothing comes back.
	waitFlows("the remainder expired", "10.244.1.9")
	time.Sleep(2500 * time.Millisecond)
	waitFlows("nothing after the remainder expired", "10.244.1.9")
	if st := n.ServiceStats(); st.AffinityRemainders != 2 || st.AffinityRemainderErrors != 0 {
		t.Errorf("ServiceStats %+v: want 2 remainders, no error", st)
	}

	// No remainder: an endpoint's cookie that is no endpoint of the port, another port's id.
	learn("10.244.1.7", pid, ca+100, "10.244.1.5")
	learn("10.244.1.6", pid+7, ca, "10.244.1.5")
	time.Sleep(4 * time.Second)
	waitFlows("a gone endpoint's learned flow expired", "10.244.1.7")
	waitFlows("another port's learned flow expired", "10.244.1.6")

	// Endpoint A leaves: its learned and remainder flows go, B's remainder stays.
	learn("10.244.1.9", pid, ca, "10.244.1.5")
	learn("10.244.1.8", pid, cb, "10.244.2.5")
	waitFlows("A's remainder", "10.244.1.9", fmt.Sprintf("199 4 %#x %#x %s", ca, pid, regA))
	learn("10.244.1.9", pid, ca, "10.244.1.5") // a learned flow above the remainder, as after a new connection
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{state(6, epB)}}); err != nil {
		t.Fatal(err)
	}
	waitFlows("after A left", "10.244.1.9")
	if got := flowsOf("10.244.1.8"); len(got) == 0 || !strings.Contains(strings.Join(got, " "), regB) {
		t.Errorf("after A left, B's client lost its flows: %q", got)
	}
	// A learned flow of A that expires now (its flow-removed after the sync) gets no
	// remainder: A is no endpoint of the port any more.
	learn("10.244.1.9", pid, ca, "10.244.1.5")
	time.Sleep(4 * time.Second)
	waitFlows("A's learned flow after A left expired", "10.244.1.9")

	// A changed timeout starts over: B's remainder goes with every learned flow of the port.
	learn("10.244.1.8", pid, cb, "10.244.2.5")
	waitFlows("B's remainder", "10.244.1.8", fmt.Sprintf("199 4 %#x %#x %s", cb, pid, regB))
	if err := sp.Sync(ctx, &proxy.Update{Changed: []*proxy.ServicePortState{state(7, epB)}}); err != nil {
		t.Fatal(err)
	}
	waitFlows("after the timeout changed", "10.244.1.8")
	// Deleted port: nothing of its remainders left.
	cb = cookie("10.244.2.5")
	learn("10.244.1.8", pid, cb, "10.244.2.5")
	waitFlows("B's remainder of 5 s", "10.244.1.8", fmt.Sprintf("199 5 %#x %#x %s", cb, pid, regB))
	if err := sp.Sync(ctx, &proxy.Update{Deleted: []proxy.ServicePortName{name}}); err != nil {
		t.Fatal(err)
	}
	waitFlows("after the port was deleted", "10.244.1.8")
}
