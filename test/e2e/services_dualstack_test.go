package e2e

// Services in both IP families end to end (issue 23): one dual-stack sandbox node
// (spec.podCIDRs IPv4 and IPv6) whose daemon runs the Service proxy against a real
// kube-apiserver with both service ranges. A RequireDualStack Service with an IPv4 and an
// IPv6 EndpointSlice is reached from a pod over each family's ClusterIP, TCP and UDP; the
// endpoints see the client pod's own address of that family; the IPv6 slice changes
// (hairpin over IPv6, a stale UDP entry flushed, no endpoints → refused over IPv6) never
// change what the IPv4 ClusterIP does. A dual-stack NodePort Service is reached over
// IPv6 at this node's and a peer Node's IPv6 InternalIP (and over IPv4 at their IPv4
// ones), following the peer's IPv6 address when it changes. NetworkPolicy judges IPv6
// Service traffic after the DNAT by the client's own address: an ingress policy admitting
// the client lets it through the IPv6 ClusterIP and NodePort, seen with its own IPv6
// address, and refuses a pod it does not select there. No kube-proxy runs: nothing but
// ofsdn answers either ClusterIP.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ofsdn/ofsdn/flows"
)

const (
	svcClusterIP6 = "fd00:96::100"
	// svcNodePort6 is TestServiceProxyDualStack's dual-stack NodePort.
	svcNodePort6 = 30086
)

// dualEcho serves TCP and UDP on port in the pod's netns on both families (one
// dual-stack socket each): each connection or datagram gets "NAME PEER-IP".
func dualEcho(t *testing.T, netnsPath, name string, port int) {
	t.Helper()
	var l net.Listener
	var pc net.PacketConn
	if err := inNS(netnsPath, func() (err error) {
		if l, err = net.Listen("tcp", fmt.Sprintf(":%d", port)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(); _ = pc.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr().(*net.TCPAddr).IP)
			_ = c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s %s", name, from.(*net.UDPAddr).IP)), from)
		}
	}()
}

// askDual connects over TCP from the pod's netns to addr ("tcp4" or "tcp6") and returns
// the endpoint's name and the peer address it saw.
func askDual(netnsPath, network, addr string) (ep, peer string, err error) {
	line, err := askServiceNet(netnsPath, network, addr, 5*time.Second)
	ep, peer, _ = strings.Cut(line, " ")
	return ep, peer, err
}

// askServiceNet is askService over network ("tcp4" or "tcp6").
func askServiceNet(netnsPath, network, addr string, timeout time.Duration) (string, error) {
	var line string
	err := inNS(netnsPath, func() error {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		line = strings.TrimSpace(string(buf[:n]))
		return err
	})
	return line, err
}

// udpClient is a connected UDP socket in a pod's netns (one client port: one conntrack
// entry through the ClusterIP).
type udpClient struct{ c net.Conn }

func dialUDP(t *testing.T, netnsPath, network, addr string) *udpClient {
	t.Helper()
	var c net.Conn
	if err := inNS(netnsPath, func() (err error) { c, err = net.Dial(network, addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &udpClient{c}
}

// ask sends one datagram and returns the answer's endpoint name and peer address, or the
// socket's error (ECONNREFUSED after an ICMP(v6) port unreachable).
func (u *udpClient) ask() (ep, peer string, err error) {
	if _, err := u.c.Write([]byte("hi")); err != nil {
		return "", "", err
	}
	_ = u.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 256)
	n, err := u.c.Read(buf)
	if err != nil {
		return "", "", err
	}
	ep, peer, _ = strings.Cut(string(buf[:n]), " ")
	return ep, peer, nil
}

func TestServiceProxyDualStack(t *testing.T) {
	serialIPv6(t)
	start := time.Now()
	api, nodes := startSvcNodesWith(t, 1, true)
	cn := nodes[0]
	ctx := context.Background()
	c := &npCluster{t: t, api: api, nodes: map[string]*clusterNode{cn.name: cn}}

	// Pods: endpoints ep1, ep2, a client and a stranger (a client no policy admits), each
	// with an IPv4 and an IPv6 address.
	ip4, ip6, netns := map[string]string{}, map[string]string{}, map[string]string{}
	for _, name := range []string{"ep1", "ep2", "client", "stranger"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: cn.name, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:none"}}}}
		p, err := api.Admin.CoreV1().Pods(svcNamespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tp := cn.addK8sPod(t, svcNamespace, name)
		if tp == nil {
			t.FailNow()
		}
		for _, ipc := range tp.result.IPs {
			if ipc.Address.IP.To4() != nil {
				ip4[name] = ipc.Address.IP.String()
			} else {
				ip6[name] = ipc.Address.IP.String()
			}
		}
		if ip4[name] == "" || ip6[name] == "" {
			t.Fatalf("pod %s got %v, want one address of each family on a dual-stack node", name, tp.result.IPs)
		}
		netns[name] = tp.netns
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, ip4[name]
		p.Status.PodIPs = []corev1.PodIP{{IP: ip4[name]}, {IP: ip6[name]}}
		if _, err := api.Admin.CoreV1().Pods(svcNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "ep") {
			dualEcho(t, tp.netns, name, svcEPPort)
		}
	}

	policy := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "echo"},
		Spec: corev1.ServiceSpec{ClusterIP: svcClusterIP, ClusterIPs: []string{svcClusterIP, svcClusterIP6},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, IPFamilyPolicy: &policy,
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: svcPort, TargetPort: intstr.FromInt32(svcEPPort)},
				{Name: "udp", Protocol: corev1.ProtocolUDP, Port: svcUDPPort, TargetPort: intstr.FromInt32(svcEPPort)}}}}
	created, err := api.Admin.CoreV1().Services(svcNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(created.Spec.ClusterIPs, []string{svcClusterIP, svcClusterIP6}) {
		t.Fatalf("API server gave the Service ClusterIPs %v", created.Spec.ClusterIPs)
	}
	proto, uproto, port := corev1.ProtocolTCP, corev1.ProtocolUDP, int32(svcEPPort)
	tcpName, udpName := "tcp", "udp"
	eslices := map[discoveryv1.AddressType]*discoveryv1.EndpointSlice{}
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		eslices[at] = &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace,
			Name: "echo-" + strings.ToLower(string(at)), Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
			AddressType: at, Ports: []discoveryv1.EndpointPort{{Name: &tcpName, Protocol: &proto, Port: &port},
				{Name: &udpName, Protocol: &uproto, Port: &port}}}
	}
	// setEndpoints writes family at's slice with names and waits until the switch (the
	// daemon's confirmed state, ofsdnctl services) has both ports of that family with
	// exactly those endpoints, and the other family's ports with theirs (other).
	setEndpoints := func(at discoveryv1.AddressType, names []string, other []string) {
		t.Helper()
		ips, otherIPs, vip, ovip := ip4, ip6, svcClusterIP, svcClusterIP6
		if at == discoveryv1.AddressTypeIPv6 {
			ips, otherIPs, vip, ovip = ip6, ip4, svcClusterIP6, svcClusterIP
		}
		sl := eslices[at]
		sl.Endpoints = nil
		ready, nodeName := true, cn.name
		for _, n := range names {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ips[n]},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &nodeName})
		}
		var err error
		if sl.ResourceVersion == "" {
			sl, err = api.Admin.DiscoveryV1().EndpointSlices(svcNamespace).Create(ctx, sl, metav1.CreateOptions{})
		} else {
			sl, err = api.Admin.DiscoveryV1().EndpointSlices(svcNamespace).Update(ctx, sl, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		eslices[at] = sl
		want := map[string]string{}
		for _, fam := range []struct {
			vip   string
			ips   map[string]string
			names []string
		}{{vip, ips, names}, {ovip, otherIPs, other}} {
			var eps []string
			for _, n := range fam.names {
				eps = append(eps, net.JoinHostPort(fam.ips[n], fmt.Sprint(svcEPPort)))
			}
			sort.Strings(eps)
			for _, p := range []int{svcPort, svcUDPPort} {
				want[net.JoinHostPort(fam.vip, fmt.Sprint(p))] = strings.Join(eps, ",")
			}
		}
		waitUntil(t, fmt.Sprintf("switch holds the Service ports %v", want), 60*time.Second, func() error {
			rep, err := cn.ctlClient().Services(ctx)
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, p := range rep.Ports {
				if p.Namespace != svcNamespace || p.Name != "echo" {
					continue // the API server's own kubernetes Service
				}
				eps := append([]string(nil), p.Endpoints...)
				sort.Strings(eps)
				got[p.Frontend] = strings.Join(eps, ",")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("ofsdnctl services: frontends → endpoints %v, want %v", got, want)
			}
			return nil
		})
		c.revalidated()
	}
	setEndpoints(discoveryv1.AddressTypeIPv4, []string{"ep1", "ep2"}, nil)
	setEndpoints(discoveryv1.AddressTypeIPv6, []string{"ep1", "ep2"}, []string{"ep1", "ep2"})

	vip4, vip6 := net.JoinHostPort(svcClusterIP, fmt.Sprint(svcPort)), net.JoinHostPort(svcClusterIP6, fmt.Sprint(svcPort))
	uvip4, uvip6 := net.JoinHostPort(svcClusterIP, fmt.Sprint(svcUDPPort)), net.JoinHostPort(svcClusterIP6, fmt.Sprint(svcUDPPort))
	// each asks over both families' ClusterIPs, n connections each: every answer must come
	// from one of wantEPs[family] with the client's own address of that family as peer.
	each := func(n int, want4, want6 []string) {
		t.Helper()
		for _, f := range []struct {
			network, addr, self string
			want                []string
		}{{"tcp4", vip4, ip4["client"], want4}, {"tcp6", vip6, ip6["client"], want6}} {
			if f.want == nil {
				continue
			}
			seen := map[string]int{}
			for i := 0; i < n; i++ {
				ep, peer, err := askDual(netns["client"], f.network, f.addr)
				if err != nil {
					t.Fatalf("connection %d to the ClusterIP %s: %v", i, f.addr, err)
				}
				if peer != f.self {
					t.Fatalf("endpoint %s saw the client as %q over %s, want the client pod's own address %s", ep, peer, f.addr, f.self)
				}
				seen[ep]++
			}
			for ep := range seen {
				if !slices.Contains(f.want, ep) {
					t.Fatalf("over %s: answered by %s, want only %v (%v)", f.addr, ep, f.want, seen)
				}
			}
			if n >= 16 && len(seen) != len(f.want) { // 8 over 2 endpoints may all hash alike (1 in 128)
				t.Errorf("over %s: %d connections reached %v, want each of %v", f.addr, n, seen, f.want)
			}
		}
	}

	t.Run("TCP over each family's ClusterIP", func(t *testing.T) {
		each(16, []string{"ep1", "ep2"}, []string{"ep1", "ep2"})
	})
	var stale *udpClient
	var staleEP string
	outer := t // the IPv6 UDP socket outlives the subtest (stale conntrack below)
	t.Run("UDP over each family's ClusterIP", func(t *testing.T) {
		for _, f := range []struct{ network, addr, self string }{{"udp4", uvip4, ip4["client"]}, {"udp6", uvip6, ip6["client"]}} {
			u := dialUDP(outer, netns["client"], f.network, f.addr)
			ep, peer, err := u.ask()
			if err != nil || peer != f.self || (ep != "ep1" && ep != "ep2") {
				t.Fatalf("UDP to %s: endpoint %q peer %q err %v, want ep1 or ep2 seeing %s", f.addr, ep, peer, err, f.self)
			}
			if again, _, err := u.ask(); err != nil || again != ep {
				t.Fatalf("UDP to %s: the flow's second datagram went to %q (%v), its first to %s", f.addr, again, err, ep)
			}
			if f.network == "udp6" {
				stale, staleEP = u, ep
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	other := map[string]string{"ep1": "ep2", "ep2": "ep1"}[staleEP]

	t.Run("stale IPv6 UDP conntrack flushed", func(t *testing.T) {
		// The endpoint the IPv6 UDP flow went to leaves the IPv6 slice (its pod still
		// answers): the flow's next datagram must go to the other endpoint.
		setEndpoints(discoveryv1.AddressTypeIPv6, []string{other}, []string{"ep1", "ep2"})
		ep, peer, err := stale.ask()
		if err != nil || ep != other || peer != ip6["client"] {
			t.Fatalf("after %s left the IPv6 slice the client's UDP flow got %q from %q (%v), want %s: its conntrack entry was not flushed", staleEP, ep, peer, err, other)
		}
		each(8, []string{"ep1", "ep2"}, []string{other})
	})

	t.Run("hairpin over IPv6", func(t *testing.T) {
		// other reaches itself through the IPv6 ClusterIP: SNATed to fc00::a9fe:fc.
		ep, peer, err := askDual(netns[other], "tcp6", vip6)
		if err != nil || ep != other || peer != "fc00::a9fe:fc" {
			t.Fatalf("%s through its own IPv6 ClusterIP: answer %q from %q (%v), want itself seeing fc00::a9fe:fc", other, ep, peer, err)
		}
	})

	t.Run("no IPv6 endpoints: refused over IPv6, IPv4 unchanged", func(t *testing.T) {
		setEndpoints(discoveryv1.AddressTypeIPv6, nil, []string{"ep1", "ep2"})
		began := time.Now()
		_, err := askServiceNet(netns["client"], "tcp6", vip6, 5*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(began) > 2*time.Second {
			t.Errorf("TCP to %s without IPv6 endpoints: %v after %v, want connection refused at once (TCP RST)", vip6, err, time.Since(began))
		}
		u := dialUDP(t, netns["client"], "udp6", uvip6)
		if _, _, err := u.ask(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP to %s without IPv6 endpoints: %v, want connection refused (ICMPv6 port unreachable)", uvip6, err)
		}
		each(8, []string{"ep1", "ep2"}, nil)
	})

	t.Run("session affinity over IPv6, carried past the learn limit", func(t *testing.T) {
		// ClientIP affinity of 20 s, above the daemons' learn limit (3 s): every IPv6
		// connection of the client goes to one endpoint; after the learned flow expires
		// the daemon's remainder flow (priority 199, ipv6_src = the client) keeps it.
		setEndpoints(discoveryv1.AddressTypeIPv6, []string{"ep1", "ep2"}, []string{"ep1", "ep2"})
		cur, err := api.Admin.CoreV1().Services(svcNamespace).Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seconds := int32(20)
		cur.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		cur.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &seconds}}
		if _, err := api.Admin.CoreV1().Services(svcNamespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ept, _ := flows.StageTable(flows.StageServiceEndpoint)
		aff, _ := flows.StageTable(flows.StageServiceAffinity)
		waitUntil(t, "IPv6 endpoint flows that learn ipv6_src", 60*time.Second, func() error {
			n := 0
			for _, l := range strings.Split(cn.OVS.Ofctl(t, "dump-flows", cn.mgmt(), fmt.Sprintf("table=%d", ept)), "\n") {
				if strings.Contains(l, "priority=200,ipv6,") && strings.Contains(l, "NXM_NX_IPV6_SRC[]") {
					n++
				}
			}
			if n != 4 { // the hit flows: TCP and UDP, two endpoints each
				return fmt.Errorf("%d IPv6 endpoint hit flows that learn, want 4", n)
			}
			return nil
		})
		c.revalidated()
		// One connection learns; once its learned flow is in and the datapath flows
		// revalidated (a datapath flow cached before the learned flow existed skips it,
		// for IPv4 as well: TestServiceProxy waits the same way), every new connection of
		// the client keeps that endpoint.
		first, _, err := askDual(netns["client"], "tcp6", vip6)
		if err != nil {
			t.Fatal(err)
		}
		client6 := "ipv6_src=" + ip6["client"]
		mine := func() []string {
			var out []string
			for _, l := range strings.Split(cn.OVS.Ofctl(t, "dump-flows", cn.mgmt(), fmt.Sprintf("table=%d", aff)), "\n") {
				if strings.Contains(l, client6) {
					out = append(out, strings.TrimSpace(l))
				}
			}
			return out
		}
		waitUntil(t, "the client's learned IPv6 affinity flow", 20*time.Second, func() error {
			if l := mine(); len(l) != 1 || !strings.Contains(l[0], "priority=200,") {
				return fmt.Errorf("affinity flows of the client: %v, want one learned (priority 200)", l)
			}
			return nil
		})
		c.revalidated()
		for i := 0; i < 12; i++ {
			ep, peer, err := askDual(netns["client"], "tcp6", vip6)
			if err != nil || peer != ip6["client"] {
				t.Fatalf("connection %d over IPv6: %q from %q (%v)", i, ep, peer, err)
			}
			if ep != first {
				t.Fatalf("connection %d over IPv6 went to %s, the client's first to %s: no session affinity", i, ep, first)
			}
		}
		waitUntil(t, "the client's remainder flow after its learned IPv6 flow expired", 4*svcAffinityLearnMax*time.Second, func() error {
			if l := mine(); len(l) != 1 || !strings.Contains(l[0], "priority=199,") {
				return fmt.Errorf("affinity flows of the client: %v, want its remainder flow alone (priority 199)", l)
			}
			return nil
		})
		c.revalidated()
		for i := 0; i < 4; i++ {
			if ep, _, err := askDual(netns["client"], "tcp6", vip6); err != nil || ep != first {
				t.Fatalf("after the learn limit, connection %d over IPv6 went to %q (%v), want %s (the remainder flow)", i, ep, err, first)
			}
		}
	})
	t.Run("NodePort over IPv6 at every node's IPv6 address", func(t *testing.T) {
		// A dual-stack NodePort Service: the client reaches it at this node's IPv6
		// InternalIP and at a peer Node's (in the API only: the NodePort is translated
		// in the client's own switch, kube-proxy's short-circuit of pod traffic), the
		// endpoint seeing the client's own IPv6 address; the peer's IPv6 InternalIP
		// changed → its NodePort flow moves (a peer update whose only change is that
		// address). The IPv4 side stays at the nodes' IPv4 addresses.
		began := time.Now()
		peerName, peerIP, peerIP6, peerIP6b := "svc-node-peer", "172.30.0.99", svcNodeIP6(99), svcNodeIP6(98)
		peer := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: peerName},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.99.0/24", PodCIDRs: []string{"10.244.99.0/24", "fd00:10:244:99::/64"}}}
		peer, err := api.Admin.CoreV1().Nodes().Create(ctx, peer, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		peer.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: peerIP}, {Type: corev1.NodeInternalIP, Address: peerIP6}}
		if peer, err = api.Admin.CoreV1().Nodes().UpdateStatus(ctx, peer, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		np := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "np"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
				IPFamilyPolicy: &policy, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: svcPort,
					TargetPort: intstr.FromInt32(svcEPPort), NodePort: svcNodePort6}}}}
		if _, err := api.Admin.CoreV1().Services(svcNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		portName, ready, nodeName := "", true, cn.name
		for at, addr := range map[discoveryv1.AddressType]string{discoveryv1.AddressTypeIPv4: ip4["ep1"], discoveryv1.AddressTypeIPv6: ip6["ep1"]} {
			sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "np-" + strings.ToLower(string(at)),
				Labels: map[string]string{discoveryv1.LabelServiceName: "np"}}, AddressType: at,
				Ports:     []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &nodeName}}}
			if _, err := api.Admin.DiscoveryV1().EndpointSlices(svcNamespace).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		at := func(ip string) string { return net.JoinHostPort(ip, fmt.Sprint(svcNodePort6)) }
		own6, peer6, peer6b := at(svcNodeIP6(71)), at(peerIP6), at(peerIP6b)
		own4, peer4 := at(cn.ip), at(peerIP)
		waitFrontends(t, cn, []string{own6, peer6, own4, peer4}, nil, false)
		c.revalidated()
		reach := func(network, addr, self string) {
			t.Helper()
			for i := 0; i < 2; i++ {
				ep, from, err := askDual(netns["client"], network, addr)
				if err != nil || ep != "ep1" || from != self {
					t.Fatalf("connection %d to the NodePort at %s: answer from %q seeing %q (%v), want ep1 seeing the client's own %s", i, addr, ep, from, err, self)
				}
			}
		}
		reach("tcp6", own6, ip6["client"])
		reach("tcp6", peer6, ip6["client"])
		reach("tcp4", own4, ip4["client"])
		reach("tcp4", peer4, ip4["client"])

		peer.Status.Addresses[1].Address = peerIP6b
		if _, err := api.Admin.CoreV1().Nodes().UpdateStatus(ctx, peer, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFrontends(t, cn, []string{own6, peer6b, own4, peer4}, []string{peer6}, false)
		c.revalidated()
		reach("tcp6", peer6b, ip6["client"])
		t.Logf("NodePort over IPv6 wall time %v", time.Since(began).Round(100*time.Millisecond))
	})
	t.Run("NetworkPolicy judges IPv6 Service traffic by the client's own address", func(t *testing.T) {
		// An ingress policy on the endpoints admitting app=client: through the IPv6
		// ClusterIP (TCP, UDP) and the IPv6 NodePort the client is answered, seen with its
		// own IPv6 address, and the stranger, answered there before the policy, is refused;
		// the deny log names the stranger's IPv6 address and an endpoint's (judged after
		// the DNAT). The IPv4 ClusterIP refuses the stranger too.
		began := time.Now()
		np6 := net.JoinHostPort(svcNodeIP6(71), fmt.Sprint(svcNodePort6))
		for _, addr := range []string{vip6, np6} {
			if ep, peer, err := askDual(netns["stranger"], "tcp6", addr); err != nil || peer != ip6["stranger"] {
				t.Fatalf("stranger → %s before any policy: %q seeing %q (%v), want an answer seeing its own %s", addr, ep, peer, err, ip6["stranger"])
			}
		}
		pol := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "only-client"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"ep1", "ep2"}}}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}}}}
		c.createPolicy(pol)
		for _, addr := range []string{vip6, np6} {
			for i := 0; i < 4; i++ {
				if ep, peer, err := askDual(netns["client"], "tcp6", addr); err != nil || peer != ip6["client"] {
					t.Errorf("client → %s under a policy admitting it: %q seeing %q (%v), want an answer seeing its own %s", addr, ep, peer, err, ip6["client"])
				}
			}
		}
		u := dialUDP(t, netns["client"], "udp6", uvip6)
		if ep, peer, err := u.ask(); err != nil || peer != ip6["client"] {
			t.Errorf("client → UDP %s under a policy admitting it: %q seeing %q (%v), want its own %s", uvip6, ep, peer, err, ip6["client"])
		}
		// The refusals wait out their timeouts side by side.
		var wg sync.WaitGroup
		for _, f := range []struct{ network, addr string }{{"tcp6", vip6}, {"tcp6", np6}, {"tcp4", vip4}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if line, err := askServiceNet(netns["stranger"], f.network, f.addr, 2*time.Second); err == nil {
					t.Errorf("stranger (app=stranger) reached %s (%q) under a policy that admits only app=client", f.addr, line)
				}
			}()
		}
		su := dialUDP(t, netns["stranger"], "udp6", uvip6)
		if ep, _, err := su.ask(); err == nil {
			t.Errorf("stranger reached UDP %s (answered by %s) under a policy that admits only app=client", uvip6, ep)
		}
		wg.Wait()
		waitUntil(t, "deny log line for the stranger's IPv6 connection through the ClusterIP", 30*time.Second, func() error {
			for _, m := range denyLogLines(t, cn) {
				if m["direction"] == "ingress" && m["src_ip"] == ip6["stranger"] && m["port"] == float64(svcEPPort) &&
					(m["dst_ip"] == ip6["ep1"] || m["dst_ip"] == ip6["ep2"]) {
					return nil
				}
			}
			return fmt.Errorf("no deny log line from %s to an endpoint's IPv6 address at port %d", ip6["stranger"], svcEPPort)
		})
		if err := api.Admin.NetworkingV1().NetworkPolicies(svcNamespace).Delete(ctx, pol.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitPolicies(0)
		t.Logf("NetworkPolicy over IPv6 Services wall time %v", time.Since(began).Round(100*time.Millisecond))
	})
	t.Logf("TestServiceProxyDualStack wall time %v", time.Since(start).Round(100*time.Millisecond))
}
