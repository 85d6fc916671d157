package controller

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/proxy"
	"github.com/ofsdn/ofsdn/topology"
)

// TestServiceSinkNodePortIPv6OnSwitch: a dual-stack NodePort Service port on a real
// switch, on a node whose topology gives each node an IPv6 address beside its IPv4 node
// IP (topology NodeIPv6). The IPv6 side has a flow at the NodePort on this node's and
// the peer's IPv6 address to the IPv6 group, the IPv4 side at their IPv4 addresses to
// the IPv4 group (kube-proxy --nodeport-addresses primary: each family's primary node
// IP). This node's IPv6 address changed (an EventLocal) and then the peer's → the IPv6
// NodePort flows follow, nothing left at the old addresses, the IPv4 side unchanged.
func TestServiceSinkNodePortIPv6OnSwitch(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, true)
	n.cfg.NodeIP = net.ParseIP("172.30.0.71").To4()
	n.overlay = newOverlay(n, OverlayOptions{NodeIPv6: net.ParseIP("fd00:172:30::71")})
	n.overlay.peers["n2"] = flows.Peer{Name: "n2", NodeIP: net.ParseIP("172.30.0.72").To4(), NodeIPv6: net.ParseIP("fd00:172:30::72")}
	sp := startServiceSink(t, ctx, sw, n)
	n.services = sp
	br := ovs.MgmtSocket("br-int")
	lb, _ := flows.StageTable(flows.StageServiceLB)
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: "np"}, Protocol: proxy.ProtocolTCP}
	port := &proxy.ServicePort{Name: name, Port: 80, NodePort: 30080,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.5"), netip.MustParseAddr("fd00:96::5")}}
	state := func(f proxy.Family, ep string) *proxy.ServicePortState {
		eps := []proxy.Endpoint{{Addr: netip.MustParseAddr(ep), Port: 8080, Ready: true, Serving: true, NodeName: "n1", Local: true}}
		return &proxy.ServicePortState{Port: port, Family: f, Endpoints: eps, Selection: proxy.Select(port, eps, "n1", "")}
	}
	for _, u := range []*proxy.Update{
		{Family: proxy.IPv4, Full: true, Changed: []*proxy.ServicePortState{state(proxy.IPv4, "10.244.1.5")}},
		{Family: proxy.IPv6, Full: true, Changed: []*proxy.ServicePortState{state(proxy.IPv6, "fd00:10:244:1::5")}},
	} {
		if err := sp.Sync(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	g4 := fmt.Sprint(flows.GroupIDMin + sp.ids[familyKey(name, proxy.IPv4)])
	g6 := fmt.Sprint(flows.GroupIDMin + sp.ids[familyKey(name, proxy.IPv6)])
	re := regexp.MustCompile(`(?:nw_dst|ipv6_dst)=([0-9a-f.:]+),tp_dst=([0-9]+) actions=group:([0-9]+)`)
	// frontends returns "address:port group" of every Service flow in service_lb, sorted.
	frontends := func() []string {
		var out []string
		for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", br, fmt.Sprintf("table=%d", lb)), "\n") {
			if m := re.FindStringSubmatch(l); m != nil {
				out = append(out, m[1]+":"+m[2]+" "+m[3])
			}
		}
		sort.Strings(out)
		return out
	}
	want := func(self6, peer6 string) []string {
		w := []string{"10.96.0.5:80 " + g4, "172.30.0.71:30080 " + g4, "172.30.0.72:30080 " + g4,
			"fd00:96::5:80 " + g6, self6 + ":30080 " + g6, peer6 + ":30080 " + g6}
		sort.Strings(w)
		return w
	}
	compareText(t, "each family's NodePort at each node's address of that family", frontends(), want("fd00:172:30::71", "fd00:172:30::72"))

	// This node's IPv6 address changes (the topology's EventLocal).
	if err := n.overlay.Apply(ctx, topology.Event{Kind: topology.EventLocal,
		Local: topology.Local{Name: "n1", NodeIP: n.cfg.NodeIP, NodeIPv6: net.ParseIP("fd00:172:30::81")}}); err != nil {
		t.Fatal(err)
	}
	compareText(t, "this node's IPv6 address changed", frontends(), want("fd00:172:30::81", "fd00:172:30::72"))

	// The peer's IPv6 address changes.
	n.overlay.mu.Lock()
	p := n.overlay.peers["n2"]
	p.NodeIPv6 = net.ParseIP("fd00:172:30::82")
	n.overlay.peers["n2"] = p
	n.overlay.mu.Unlock()
	sp.nodeAddrsChanged(ctx)
	compareText(t, "the peer's IPv6 address changed", frontends(), want("fd00:172:30::81", "fd00:172:30::82"))
}

// TestNodeAddressesFamilies: the NodePort addresses are each node's node IP and, beside
// an IPv4 one, its IPv6 address (IPv4 first, each once; a peer without one adds its IPv4
// alone); over an IPv6 underlay (an IPv6-only node) they are the nodes' IPv6 node IPs.
func TestNodeAddressesFamilies(t *testing.T) {
	ip := func(s string) net.IP {
		if v := net.ParseIP(s); v.To4() != nil {
			return v.To4()
		}
		return net.ParseIP(s)
	}
	for _, c := range []struct {
		name     string
		self, v6 string
		peers    []flows.Peer
		want     string
	}{
		{"dual-stack over IPv4", "172.30.0.71", "fd00:172:30::71", []flows.Peer{
			{Name: "n2", NodeIP: ip("172.30.0.72"), NodeIPv6: ip("fd00:172:30::72")},
			{Name: "n3", NodeIP: ip("172.30.0.73")}},
			"[172.30.0.71 172.30.0.72 172.30.0.73 fd00:172:30::71 fd00:172:30::72]"},
		{"IPv6 underlay", "fd00:172:30::71", "", []flows.Peer{{Name: "n2", NodeIP: ip("fd00:172:30::72")}},
			"[fd00:172:30::71 fd00:172:30::72]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &Node{log: slog.Default(), cfg: flows.NodeConfig{NodeIP: ip(c.self)}}
			var v6 net.IP
			if c.v6 != "" {
				v6 = ip(c.v6)
			}
			n.overlay = newOverlay(n, OverlayOptions{NodeIPv6: v6})
			for _, p := range c.peers {
				n.overlay.peers[p.Name] = p
			}
			if got := fmt.Sprint(n.nodeAddresses()); got != c.want {
				t.Errorf("nodeAddresses() = %s, want %s", got, c.want)
			}
		})
	}
}
