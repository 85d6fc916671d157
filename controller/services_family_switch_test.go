package controller

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/proxy"
	"github.com/ofsdn/ofsdn/switchstate"
)

// TestServiceSinkFamiliesOnSwitch: one sink fed by an IPv4 and an IPv6 tracker (a
// dual-stack node). A Service port's two sides are two owners with their own groups and
// recorded ids ("NAME" and "NAME IPv6"); a Full update of one family replaces only that
// family's ports; after a restart the first family's Full keeps the other family's
// recorded ids, which its own Full then takes again; a Deleted of one family leaves the
// other side alone. Real OVS.
func TestServiceSinkFamiliesOnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	sp := startServiceSink(t, ctx, sw, n)
	br := ovs.MgmtSocket("br-int")
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: "a"}, Protocol: proxy.ProtocolTCP}
	port := &proxy.ServicePort{Name: name, Port: 80,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00:96::1")}}
	state := func(f proxy.Family, ep string) *proxy.ServicePortState {
		eps := []proxy.Endpoint{{Addr: netip.MustParseAddr(ep), Port: 8080, Ready: true, Serving: true}}
		return &proxy.ServicePortState{Port: port, Family: f, Endpoints: eps, Selection: proxy.Selection{HasEndpoints: true, Cluster: eps}}
	}
	a4, a6 := state(proxy.IPv4, "10.244.1.5"), state(proxy.IPv6, "fd00:10:244:1::5")
	lb, _ := flows.StageTable(flows.StageServiceLB)
	// groups returns, per frontend on the switch (nw_dst or ipv6_dst), the DNAT targets
	// of the group its service_lb flow sends to.
	groups := func() map[string]string {
		out := map[string]string{}
		dumpG := ovs.Ofctl(t, "dump-groups", br)
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", br, fmt.Sprintf("table=%d", lb)), "\n") {
			m := regexp.MustCompile(`(?:nw_dst|ipv6_dst)=([0-9a-f.:]+),.*group:(\d+)`).FindStringSubmatch(l)
			if m == nil {
				continue
			}
			for _, g := range strings.Split(dumpG, "\n") {
				if strings.Contains(g, "group_id="+m[2]+",") {
					out[m[1]] = strings.Join(regexp.MustCompile(`nat\(dst=([^)]+)\)`).FindAllString(g, -1), " ")
				}
			}
		}
		return out
	}
	sync := func(u *proxy.Update) {
		t.Helper()
		if err := sp.Sync(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	sync(&proxy.Update{Family: proxy.IPv4, Full: true, Changed: []*proxy.ServicePortState{a4}})
	sync(&proxy.Update{Family: proxy.IPv6, Full: true, Changed: []*proxy.ServicePortState{a6}})
	both := map[string]string{"10.96.0.1": "nat(dst=10.244.1.5:8080)", "fd00:96::1": "nat(dst=[fd00:10:244:1::5]:8080)"}
	if got := groups(); fmt.Sprint(got) != fmt.Sprint(both) {
		t.Fatalf("after both families' Full syncs the switch has %v, want %v (each side its own group, its own family's endpoint)", got, both)
	}
	id4, id6 := sp.ids[familyKey(name, proxy.IPv4)], sp.ids[familyKey(name, proxy.IPv6)]
	rec, err := RecordedServicePortIDs(n.opts.DataDir)
	if want := map[string]uint32{"x/a:/TCP": id4, "x/a:/TCP IPv6": id6}; err != nil || id4 == 0 || id6 == 0 || id4 == id6 || fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("ids IPv4 %d, IPv6 %d; recorded %v (err %v), want %v", id4, id6, rec, err, want)
	}

	// An IPv4 Full without the port takes the IPv4 side only.
	sync(&proxy.Update{Family: proxy.IPv4, Full: true})
	if got := groups(); fmt.Sprint(got) != fmt.Sprint(map[string]string{"fd00:96::1": both["fd00:96::1"]}) {
		t.Fatalf("after an empty IPv4 Full the switch has %v, want the IPv6 side alone", got)
	}
	sync(&proxy.Update{Family: proxy.IPv4, Changed: []*proxy.ServicePortState{a4}})
	id4 = sp.ids[familyKey(name, proxy.IPv4)] // a new id: the empty Full freed the old one

	// Restart: the IPv4 tracker's Full comes first and must not free the IPv6 side's
	// recorded id; the IPv6 Full then takes it again.
	n.store = flowStore{switchstate.New()}
	n.cfg.Generation++
	sp = startServiceSink(t, ctx, sw, n)
	sync(&proxy.Update{Family: proxy.IPv4, Full: true, Changed: []*proxy.ServicePortState{a4}})
	if rec, err := RecordedServicePortIDs(n.opts.DataDir); err != nil || rec["x/a:/TCP IPv6"] != id6 {
		t.Fatalf("after the restart's IPv4 Full the record is %v (err %v): the IPv6 side's id %d was freed", rec, err, id6)
	}
	sync(&proxy.Update{Family: proxy.IPv6, Full: true, Changed: []*proxy.ServicePortState{a6}})
	if got4, got6 := sp.ids[familyKey(name, proxy.IPv4)], sp.ids[familyKey(name, proxy.IPv6)]; got4 != id4 || got6 != id6 {
		t.Errorf("after the restart ids IPv4 %d, IPv6 %d; want the recorded %d, %d", got4, got6, id4, id6)
	}
	if got := groups(); fmt.Sprint(got) != fmt.Sprint(both) {
		t.Fatalf("after the restart the switch has %v, want %v", got, both)
	}

	// The Service loses its IPv6 ClusterIP (RequireDualStack → SingleStack): the IPv6
	// tracker deletes the port; the IPv4 side stays.
	sync(&proxy.Update{Family: proxy.IPv6, Deleted: []proxy.ServicePortName{name}})
	if got := groups(); fmt.Sprint(got) != fmt.Sprint(map[string]string{"10.96.0.1": both["10.96.0.1"]}) {
		t.Errorf("after the IPv6 delete the switch has %v, want the IPv4 side alone", got)
	}
	if _, ok := sp.ports[familyKey(name, proxy.IPv4)]; len(sp.ports) != 1 || !ok {
		t.Errorf("the sink holds %v after the IPv6 delete, want the IPv4 side alone", sp.ports)
	}
}
