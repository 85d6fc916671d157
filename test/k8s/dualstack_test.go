package k8s_test

// TestCluster's dual-stack steps (issue 23, "Real components"): its cluster is dual-stack,
// IPv4 primary: kube-apiserver with an IPv4 and an IPv6 service range,
// kube-controller-manager cutting a pod CIDR per family for every node, kubelets with both
// node IPs, kube-proxy dual-stack, and deploy/ofsdn.yaml with the IPv6 cluster CIDR
// (test/k8s/overlay-dualstack). What a user checks: every pod has two podIPs, IPv4 first,
// each in its node's pod CIDR of that family; pods on different nodes reach each other over
// both families (TCP, UDP, ICMP and ICMPv6), each server seeing the client's own address;
// nodes reach pods over both, and both ClusterIPs of a dual-stack Service through their
// kube-proxy; NetworkPolicy holds over IPv6 as over IPv4, on pod IPs and through the
// Services' IPv6 ClusterIPs (testPolicyThroughServices).

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ofsdn/ofsdn/test/k8s"
)

// nodeCIDRs returns a node's pod CIDRs (spec.podCIDRs) by family.
func nodeCIDRs(t *testing.T, node *corev1.Node) (v4, v6 *net.IPNet) {
	t.Helper()
	for _, s := range node.Spec.PodCIDRs {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatalf("%s: podCIDR %q: %v", node.Name, s, err)
		}
		if n.IP.To4() != nil {
			v4 = n
		} else {
			v6 = n
		}
	}
	return v4, v6
}

func (e *env) testDualStackNodes(t *testing.T) {
	_, cluster4, _ := net.ParseCIDR(k8s.ClusterCIDR)
	_, cluster6, _ := net.ParseCIDR(k8s.ClusterCIDRIPv6)
	for _, n := range e.c.Nodes {
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// kube-controller-manager's node IPAM: a /24 of the IPv4 cluster CIDR first (the
		// primary family, also spec.podCIDR), then a /64 of the IPv6 one.
		if len(node.Spec.PodCIDRs) != 2 || node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
			t.Errorf("%s: podCIDR %q podCIDRs %v, want two (IPv4 then IPv6) with podCIDR the first", n.Name, node.Spec.PodCIDR, node.Spec.PodCIDRs)
			continue
		}
		_, v4, _ := net.ParseCIDR(node.Spec.PodCIDRs[0])
		_, v6, _ := net.ParseCIDR(node.Spec.PodCIDRs[1])
		if ones, _ := v4.Mask.Size(); v4.IP.To4() == nil || ones != 24 || !cluster4.Contains(v4.IP) {
			t.Errorf("%s: podCIDRs[0] %v, want a /24 of %v", n.Name, v4, cluster4)
		}
		if ones, _ := v6.Mask.Size(); v6.IP.To4() != nil || ones != 64 || !cluster6.Contains(v6.IP) {
			t.Errorf("%s: podCIDRs[1] %v, want a /64 of %v", n.Name, v6, cluster6)
		}
		// The kubelet's --node-ip: both InternalIPs, IPv4 first.
		var internal []string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if want := []string{n.IP, n.IPv6}; strings.Join(internal, ",") != strings.Join(want, ",") {
			t.Errorf("%s: InternalIPs %v, want %v", n.Name, internal, want)
		}
	}
}

func (e *env) testDualStackGateway(t *testing.T) {
	for _, n := range e.c.Nodes {
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, v6 := nodeCIDRs(t, node)
		gw6 := gatewayIPv6(v6)
		if out := n.OVS.Exec(t, "ip", "-6", "-o", "addr", "show", "dev", gatewayIf); !strings.Contains(out, gw6+"/64") {
			t.Errorf("%s: gateway %s has %q, want %s/64 from podCIDRs[1] %v", n.Name, gatewayIf, out, gw6, v6)
		}
		// With clusterCIDRIPv6 and masquerade on: IPv6 leaving the IPv6 cluster CIDR is
		// masqueraded (README "Dual-stack").
		if out := n.OVS.Exec(t, "nft", "list", "table", "ip6", "ofsdn"); !strings.Contains(out, "ip6 saddr "+v6.String()) {
			t.Errorf("%s: nftables table ip6 ofsdn does not name the IPv6 pod CIDR %v:\n%s", n.Name, v6, out)
		}
	}
}

// gatewayIPv6 is ofsdn's IPv6 gateway address of a pod CIDR: its ::1.
func gatewayIPv6(n *net.IPNet) string {
	ip := append(net.IP{}, n.IP.To16()...)
	ip[15]++
	return ip.String()
}

// podIPv6 returns a dual-stack pod's IPv6 address (podIPs[1]).
func podIPv6(p *corev1.Pod) string {
	if len(p.Status.PodIPs) < 2 {
		return ""
	}
	return p.Status.PodIPs[1].IP
}

func sameIP(a, b string) bool {
	x, y := net.ParseIP(a), net.ParseIP(b)
	return x != nil && x.Equal(y)
}

func (e *env) testDualStackPods(t *testing.T) {
	e.apply(t, echoManifest) // testPods's, unchanged
	pods := e.waitPods(t, ns, "app=echo", 4, 180*time.Second)

	nodes := map[string]*corev1.Node{}
	for _, n := range e.c.Nodes {
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n.Name] = node
	}
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		v4, v6 := nodeCIDRs(t, nodes[p.Spec.NodeName])
		ips := p.Status.PodIPs
		if len(ips) != 2 || p.Status.PodIP != ips[0].IP {
			t.Errorf("%s: podIP %q podIPs %v, want two with podIP == podIPs[0]", p.Name, p.Status.PodIP, ips)
			continue
		}
		ip4, ip6 := net.ParseIP(ips[0].IP), net.ParseIP(ips[1].IP)
		if ip4 == nil || ip4.To4() == nil || !v4.Contains(ip4) {
			t.Errorf("%s on %s: podIPs[0] %s, want an IPv4 address of the node's %v", p.Name, p.Spec.NodeName, ips[0].IP, v4)
		}
		if ip6 == nil || ip6.To4() != nil || !v6.Contains(ip6) {
			t.Errorf("%s on %s: podIPs[1] %s, want an IPv6 address of the node's %v", p.Name, p.Spec.NodeName, ips[1].IP, v6)
		}
		// One IPAM lease holds both addresses.
		more, ok := e.c.Node(p.Spec.NodeName).LeaseIPv6(t)[ips[0].IP]
		if !ok || len(more) != 1 || !sameIP(more[0], ips[1].IP) {
			t.Errorf("%s on %s: lease of %s holds %v (leased: %v), want its IPv6 %s", p.Name, p.Spec.NodeName, ips[0].IP, more, ok, ips[1].IP)
		}
	}
	if len(perNode) != 2 {
		t.Fatalf("pods not spread over both nodes: %v", perNode)
	}
	if t.Failed() {
		return
	}

	t.Run("every pod reaches every other over TCP and UDP in both families, with its own address", func(t *testing.T) {
		start := time.Now()
		for _, from := range pods {
			var targets []string
			var want []*corev1.Pod
			for i, to := range pods {
				v6 := "[" + podIPv6(&pods[i]) + "]"
				targets = append(targets, "tcp:"+to.Status.PodIP+":8080", "udp:"+to.Status.PodIP+":8081",
					"tcp:"+v6+":8080", "udp:"+v6+":8081")
				want = append(want, &pods[i], &pods[i], &pods[i], &pods[i])
			}
			for i, r := range e.probe(t, from.Name, targets...) {
				to := want[i]
				self := from.Status.PodIP
				if strings.Contains(r.target, "[") {
					self = podIPv6(&from)
				}
				switch {
				case !r.ok:
					t.Errorf("%s (%s) → %s (%s, %s): %s", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, r.target, r.reply)
				case replyName(r.reply) != to.Name:
					t.Errorf("%s → %s: answered by %q", from.Name, r.target, r.reply)
				case !sameIP(replyPeerIP(r.reply), self):
					t.Errorf("%s → %s: the server saw %s, want the client's own address %s", from.Name, r.target, replyPeerIP(r.reply), self)
				}
			}
		}
		e.timing("TCP and UDP probes, every pod to every pod, both families (4 × 16)", time.Since(start))
	})
	t.Run("ICMP and ICMPv6 echo to a pod on the other node", func(t *testing.T) {
		start := time.Now()
		for _, from := range pods {
			var to *corev1.Pod
			for i := range pods {
				if pods[i].Spec.NodeName != from.Spec.NodeName {
					to = &pods[i]
					break
				}
			}
			for _, dst := range []string{to.Status.PodIP, podIPv6(to)} {
				out, err := e.exec(from.Name, "/testbin", "ping", "-c", "3", "-i", "50ms", dst)
				if err != nil || !strings.Contains(out, "sent 3 received 3 missing []") {
					t.Errorf("%s (%s) ping %s (%s on %s): %v\n%s", from.Name, from.Spec.NodeName, dst, to.Name, to.Spec.NodeName, err, out)
				}
			}
		}
		e.timing("ICMP and ICMPv6 echo, each pod to one on the other node", time.Since(start))
	})
	t.Run("each node's host reaches every pod over both families", func(t *testing.T) {
		// IPv6 from the host to any pod leaves through the gateway (the IPv6 cluster CIDR
		// routed there, README "Dual-stack"): the pod sees the gateway's IPv6 address.
		for _, n := range e.c.Nodes {
			_, v6 := nodeCIDRs(t, nodes[n.Name])
			for i, p := range pods {
				reply, err := dialFromNode(n, net.JoinHostPort(p.Status.PodIP, "8080"))
				if err != nil || replyName(reply) != p.Name {
					t.Errorf("%s host → %s (%s on %s): %q %v", n.Name, p.Name, p.Status.PodIP, p.Spec.NodeName, reply, err)
				}
				ip6 := podIPv6(&pods[i])
				reply, err = dialFromNode(n, net.JoinHostPort(ip6, "8080"))
				switch {
				case err != nil || replyName(reply) != p.Name:
					t.Errorf("%s host → %s (%s on %s): %q %v", n.Name, p.Name, ip6, p.Spec.NodeName, reply, err)
				case !sameIP(replyPeerIP(reply), gatewayIPv6(v6)):
					t.Errorf("%s host → %s (%s on %s): source %s, want the gateway's %s", n.Name, p.Name, ip6, p.Spec.NodeName, replyPeerIP(reply), gatewayIPv6(v6))
				}
			}
		}
	})
}

const dualStackServiceManifest = `apiVersion: v1
kind: Service
metadata: {name: echo-ds, namespace: default}
spec:
  type: NodePort
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  selector: {app: echo}
  ports:
  - {name: tcp, port: 80, targetPort: 8080}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
`

// readyEndpointsByFamily counts the ready endpoints of a Service's EndpointSlices of one
// address type (IPv4, IPv6).
func (e *env) readyEndpointsByFamily(t *testing.T, svc, family string) int {
	t.Helper()
	l, err := e.c.CP.Client.DiscoveryV1().EndpointSlices(ns).List(e.ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range l.Items {
		if string(s.AddressType) != family {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

func (e *env) testDualStackService(t *testing.T) {
	start := time.Now()
	e.apply(t, dualStackServiceManifest)
	svc, err := e.c.CP.Client.CoreV1().Services(ns).Get(e.ctx, "echo-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server's two service ranges: a ClusterIP of each, IPv4 first.
	_, svc4, _ := net.ParseCIDR(k8s.ServiceCIDR)
	_, svc6, _ := net.ParseCIDR(k8s.ServiceCIDRIPv6)
	ips := svc.Spec.ClusterIPs
	if len(ips) != 2 || !svc4.Contains(net.ParseIP(ips[0])) || !svc6.Contains(net.ParseIP(ips[1])) {
		t.Fatalf("Service echo-ds has clusterIPs %v, want one of %v then one of %v", ips, svc4, svc6)
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		k8s.WaitFor(t, "4 ready "+fam+" endpoints of Service echo-ds", 60*time.Second, func() error {
			if n := e.readyEndpointsByFamily(t, "echo-ds", fam); n != 4 {
				return fmt.Errorf("%d", n)
			}
			return nil
		})
	}
	pods := e.pods(t, ns, "app=echo")
	const tries = 10
	seen := map[string]map[string]bool{"IPv4": {}, "IPv6": {}}
	for _, from := range pods {
		self := map[string]string{"IPv4": from.Status.PodIP, "IPv6": podIPv6(&from)}
		for i, fam := range []string{"IPv4", "IPv6"} {
			host := ips[i]
			if fam == "IPv6" {
				host = "[" + host + "]"
			}
			// The switch programs a Service a moment after the API shows it: first one answer.
			e.waitProbe(t, from.Name+" → Service echo-ds over "+fam, from.Name, "tcp:"+host+":80", func(r probeResult) error {
				if !r.ok {
					return fmt.Errorf("%s: %s", r.target, r.reply)
				}
				return nil
			})
			var targets []string
			for j := 0; j < tries; j++ {
				targets = append(targets, "tcp:"+host+":80", "udp:"+host+":81")
			}
			for _, r := range e.probe(t, from.Name, targets...) {
				switch {
				case !r.ok:
					t.Errorf("%s (%s) → %s: %s", from.Name, from.Spec.NodeName, r.target, r.reply)
					continue
				case replyName(r.reply) == from.Name:
					// Hairpin: the switch gives the pod's own connection another source.
				case !sameIP(replyPeerIP(r.reply), self[fam]):
					t.Errorf("%s → %s: the endpoint %s saw %s, want the client's own %s address %s", from.Name, r.target, replyName(r.reply), replyPeerIP(r.reply), fam, self[fam])
				}
				seen[fam][replyName(r.reply)] = true
			}
		}
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, p := range pods {
			if !seen[fam][p.Name] {
				t.Errorf("endpoint %s (%s) never answered through Service echo-ds over %s: %v", p.Name, p.Spec.NodeName, fam, seen[fam])
			}
		}
	}
	// Its NodePort at both nodes' addresses of each family (the IPv6 one: each Node's IPv6
	// InternalIP), from every pod, answered with the client's own address.
	var nodePort int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "tcp" {
			nodePort = p.NodePort
		}
	}
	for _, from := range pods {
		var targets []string
		for _, n := range e.c.Nodes {
			for _, ip := range []string{n.IP, n.IPv6} {
				targets = append(targets, "tcp:"+net.JoinHostPort(ip, fmt.Sprint(nodePort)))
			}
		}
		for _, r := range e.probe(t, from.Name, targets...) {
			self := from.Status.PodIP
			if strings.Contains(r.target, "[") {
				self = podIPv6(&from)
			}
			switch {
			case !r.ok:
				t.Errorf("%s (%s) → NodePort %s: %s", from.Name, from.Spec.NodeName, r.target, r.reply)
			case replyName(r.reply) == from.Name:
			case !sameIP(replyPeerIP(r.reply), self):
				t.Errorf("%s → NodePort %s: the endpoint %s saw %s, want the client's own address %s", from.Name, r.target, replyName(r.reply), replyPeerIP(r.reply), self)
			}
		}
	}
	// Each node's host reaches both ClusterIPs through its kube-proxy (its DNAT to an
	// endpoint, then the node's route of that family's cluster CIDR out of the gateway, for
	// IPv6 too): 16 connections per family, answered by endpoints on both nodes.
	podNode := map[string]string{}
	for _, p := range pods {
		podNode[p.Name] = p.Spec.NodeName
	}
	for _, n := range e.c.Nodes {
		for i, fam := range []string{"IPv4", "IPv6"} {
			addr := net.JoinHostPort(ips[i], "80")
			// kube-proxy programs the Service a moment after the API shows it.
			k8s.WaitFor(t, n.Name+" host → Service echo-ds at "+addr, 60*time.Second, func() error {
				_, err := dialFromNode(n, addr)
				return err
			})
			byNode := map[string]int{}
			for j := 0; j < 16; j++ {
				reply, err := dialFromNode(n, addr)
				if err != nil || podNode[replyName(reply)] == "" {
					t.Errorf("%s host → Service echo-ds at %s (%s): %q %v", n.Name, addr, fam, reply, err)
					break
				}
				byNode[podNode[replyName(reply)]]++
			}
			if len(byNode) != 2 && !t.Failed() {
				t.Errorf("%s host → Service echo-ds at %s: 16 connections answered by endpoints on %v, want both nodes'", n.Name, addr, byNode)
			}
		}
	}
	e.timing("RequireDualStack Service: both ClusterIPs (TCP, UDP) and the NodePort at both nodes' addresses of each family, from every pod; both ClusterIPs from each node's host", time.Since(start))
	// Leave the later steps the Services they expect.
	e.c.MustKubectl(t, "delete", "-n", ns, "--wait=true", "service/echo-ds")
}

// testPolicyIPv6 checks testPolicyThroughServices's policies on the pods' IPv6 addresses
// (NetworkPolicy in both families, issue 23): the selected clients on both nodes reach
// both guarded pods over IPv6, TCP and UDP, each seen with its own IPv6 address; a client
// the ingress policy does not select, and the pod whose egress is denied, are refused over
// IPv6. The refusals (3 s each) run side by side.
func (e *env) testPolicyIPv6(t *testing.T, servers []corev1.Pod, clients map[string]*corev1.Pod) {
	var tcp, udp []string
	for i := range servers {
		v6 := "[" + podIPv6(&servers[i]) + "]"
		tcp = append(tcp, "tcp:"+v6+":8080")
		udp = append(udp, "udp:"+v6+":8081")
	}
	for _, name := range []string{"allowed-1", "allowed-2"} {
		c := clients[name]
		for _, r := range e.probe(t, name, append(tcp, udp...)...) {
			switch {
			case !r.ok:
				t.Errorf("%s (%s, role=allowed) → %s: %s", name, c.Spec.NodeName, r.target, r.reply)
			case !sameIP(replyPeerIP(r.reply), podIPv6(c)):
				t.Errorf("%s → %s: the server saw %s, want the client's own IPv6 address %s", name, r.target, replyPeerIP(r.reply), podIPv6(c))
			}
		}
	}
	// denied-1 over TCP and denied-2 over UDP to both guarded pods; sealed to allowed-1,
	// which no ingress policy guards.
	refusals := map[string][]string{"denied-1": tcp, "denied-2": udp,
		"sealed": {"tcp:[" + podIPv6(clients["allowed-1"]) + "]:8080"}}
	outs := make(map[string]string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, targets := range refusals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.exec(name, append([]string{"/testbin", "probe"}, targets...)...)
			if err != nil {
				out = err.Error()
			}
			mu.Lock()
			outs[name] = out
			mu.Unlock()
		}()
	}
	wg.Wait()
	for name, targets := range refusals {
		res := parseProbe(outs[name])
		if len(res) != len(targets) {
			t.Errorf("probe from %s: %d results for %d targets:\n%s", name, len(res), len(targets), outs[name])
			continue
		}
		for _, r := range res {
			if r.ok {
				t.Errorf("%s (%s) → %s answered %q over IPv6: the policies refuse it", name, clients[name].Spec.NodeName, r.target, r.reply)
			}
		}
	}
}
