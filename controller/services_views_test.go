package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/proxy"
)

// viewsText renders servicePortViews' result: per view its key, verdict, ClusterIP,
// frontends and endpoints.
func viewsText(t *testing.T, st *proxy.ServicePortState, addrs []net.IP) []string {
	t.Helper()
	next := uint32(0)
	views, err := servicePortViews(st, addrs, func(portKey) (uint32, error) { next++; return next, nil })
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range views {
		var fes, eps []string
		for _, fe := range v.sp.Frontends {
			s := fe.String()
			if fe.NodePort {
				s += "(node)"
			}
			for _, r := range fe.SourceRanges {
				s += "<" + r.String()
			}
			fes = append(fes, s)
		}
		for _, ep := range v.sp.Endpoints {
			eps = append(eps, fmt.Sprintf("%s:%d", ep.IP, ep.Port))
		}
		if err := v.sp.Validate(); err != nil {
			t.Errorf("view %+v: %v", v.key, err)
		}
		out = append(out, fmt.Sprintf("id=%d external=%v %s clusterIP=%v frontends=[%s] endpoints=[%s]", v.sp.ID, v.key.external, v.verdict,
			v.sp.ClusterIP, strings.Join(fes, " "), strings.Join(eps, " ")))
	}
	return out
}

// TestServicePortViews: the switch's views of a Service port for this node's pods, with
// kube-proxy's verdicts (nftables proxier): the ClusterIP follows Internal; external IPs,
// load-balancer IPs (with their source ranges) and every node address at the NodePort
// follow ExternalFromPods (the Cluster endpoints whatever externalTrafficPolicy: pod
// traffic is short-circuited); one view when both choose alike, else an external view
// of its own; no endpoints anywhere: every frontend rejects.
func TestServicePortViews(t *testing.T) {
	node := "n1"
	ep := func(ip, on string) proxy.Endpoint {
		return proxy.Endpoint{Addr: netip.MustParseAddr(ip), Port: 8080, Ready: true, Serving: true, NodeName: on, Local: on == node}
	}
	addrs := []net.IP{net.ParseIP("172.30.0.71").To4(), net.ParseIP("172.30.0.72").To4()}
	state := func(mod func(*proxy.ServicePort), eps ...proxy.Endpoint) *proxy.ServicePortState {
		sp := &proxy.ServicePort{Name: proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "x", Name: "web"}, Protocol: proxy.ProtocolTCP},
			ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.5")}, Port: 80, NodePort: 30080,
			ExternalIPs:              []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
			LoadBalancerIPs:          []netip.Addr{netip.MustParseAddr("198.51.100.7")},
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("2001:db8::/32")}}
		if mod != nil {
			mod(sp)
		}
		return &proxy.ServicePortState{Port: sp, Family: proxy.IPv4, Endpoints: eps, Selection: proxy.Select(sp, eps, node, "")}
	}
	const fes = "192.0.2.10:80 198.51.100.7:80<10.244.0.0/16 172.30.0.71:30080(node) 172.30.0.72:30080(node)"
	for _, c := range []struct {
		what string
		st   *proxy.ServicePortState
		want []string
	}{
		{"Cluster policies: one view", state(nil, ep("10.244.1.5", "n1"), ep("10.244.2.5", "n2")), []string{
			"id=1 external=false forward clusterIP=10.96.0.5 frontends=[" + fes + "] endpoints=[10.244.1.5:8080 10.244.2.5:8080]"}},
		{"externalTrafficPolicy Local, no local endpoint: pods still get the Cluster endpoints",
			state(func(p *proxy.ServicePort) { p.ExternalLocal = true }, ep("10.244.2.5", "n2")), []string{
				"id=1 external=false forward clusterIP=10.96.0.5 frontends=[" + fes + "] endpoints=[10.244.2.5:8080]"}},
		{"internalTrafficPolicy Local: the external frontends are a view of their own",
			state(func(p *proxy.ServicePort) { p.InternalLocal = true }, ep("10.244.1.5", "n1"), ep("10.244.2.5", "n2")), []string{
				"id=1 external=false forward clusterIP=10.96.0.5 frontends=[] endpoints=[10.244.1.5:8080]",
				"id=2 external=true forward clusterIP=<nil> frontends=[" + fes + "] endpoints=[10.244.1.5:8080 10.244.2.5:8080]"}},
		{"internalTrafficPolicy Local without a local endpoint: the ClusterIP drops, the rest forwards",
			state(func(p *proxy.ServicePort) { p.InternalLocal = true }, ep("10.244.2.5", "n2")), []string{
				"id=1 external=false drop clusterIP=10.96.0.5 frontends=[] endpoints=[]",
				"id=2 external=true forward clusterIP=<nil> frontends=[" + fes + "] endpoints=[10.244.2.5:8080]"}},
		{"internalTrafficPolicy Local, no NodePort or external address: one view",
			state(func(p *proxy.ServicePort) {
				p.InternalLocal, p.NodePort, p.ExternalIPs, p.LoadBalancerIPs = true, 0, nil, nil
			}, ep("10.244.2.5", "n2")), []string{
				"id=1 external=false drop clusterIP=10.96.0.5 frontends=[] endpoints=[]"}},
		{"no endpoints: every frontend rejects", state(nil), []string{
			"id=1 external=false reject clusterIP=10.96.0.5 frontends=[" + fes + "] endpoints=[]"}},
		{"only IPv6 source ranges: the load-balancer IP admits no IPv4 client",
			state(func(p *proxy.ServicePort) {
				p.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
			}, ep("10.244.2.5", "n2")), []string{
				"id=1 external=false forward clusterIP=10.96.0.5 frontends=[" + strings.Replace(fes, "<10.244.0.0/16", "<0.0.0.0/32", 1) + "] endpoints=[10.244.2.5:8080]"}},
	} {
		compareText(t, c.what, viewsText(t, c.st, addrs), c.want)
	}
	// Without node addresses (a node without an overlay) the NodePort has no frontend.
	got := viewsText(t, state(nil, ep("10.244.1.5", "n1")), nil)
	if len(got) != 1 || strings.Contains(got[0], "(node)") {
		t.Errorf("no node addresses: %v, want one view without node frontends", got)
	}
	// The external view's flows have no ClusterIP match.
	views, _ := servicePortViews(state(func(p *proxy.ServicePort) { p.InternalLocal = true }, ep("10.244.2.5", "n2")), addrs,
		func(portKey) (uint32, error) { return 3, nil })
	fs, _ := flows.ServicePortFlows(flows.NodeConfig{Services: true}, views[1].sp)
	for _, f := range fs {
		if strings.Contains(f.String(), "10.96.0.5") {
			t.Errorf("external view flow %s matches the ClusterIP", f)
		}
	}
}

func compareText(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestFlushStaleNodePort: a stale UDP endpoint of a port with a NodePort is flushed from
// every frontend and from every node address at the NodePort (the addresses the switch
// has), each with the endpoint as reply source.
func TestFlushStaleNodePort(t *testing.T) {
	var got []string
	s := &serviceProxy{log: slog.Default(), nodeAddrs: []net.IP{net.ParseIP("172.30.0.71").To4(), net.ParseIP("172.30.0.72").To4()},
		opts: ServiceOptions{FlushConntrack: func(_ context.Context, zone uint16, orig, reply string) error {
			got = append(got, fmt.Sprintf("zone=%d %s | %s", zone, orig, reply))
			return nil
		}}}
	s.flushStale(context.Background(), []proxy.StaleConntrack{{Protocol: proxy.ProtocolUDP, NodePort: 30053,
		Frontends: []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")}, Endpoint: netip.MustParseAddrPort("10.244.1.5:8053")}})
	const reply = " | ct_nw_src=10.244.1.5,ct_nw_proto=17,ct_tp_src=8053"
	compareText(t, "flushes", got, []string{
		"zone=65280 ct_nw_dst=10.96.0.10,ct_nw_proto=17,ct_tp_dst=53" + reply,
		"zone=65280 ct_nw_dst=172.30.0.71,ct_nw_proto=17,ct_tp_dst=30053" + reply,
		"zone=65280 ct_nw_dst=172.30.0.72,ct_nw_proto=17,ct_tp_dst=30053" + reply,
	})
	if s.flushed.Load() != 3 {
		t.Errorf("flushed counter %d, want 3", s.flushed.Load())
	}
}
