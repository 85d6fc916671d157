package k8s_test

// ofsdn on a real IPv6-only Kubernetes (issue 23, "Real components": an IPv6-only cluster
// starts and passes the pod-to-pod checks): kube-apiserver advertised on an IPv6 address
// with an IPv6 service range, kube-controller-manager cutting an IPv6 /64 per node, kubelets
// and kube-proxy with IPv6 node IPs only, the underlay IPv6 (the tunnels run between the
// nodes' IPv6 addresses), deploy/ofsdn.yaml through test/k8s/overlay-ipv6only, whose
// nodes load-balance Services in OVS (serviceProxy: ofsdn) and police NetworkPolicy: the
// DaemonSet's Open vSwitch (ovs: bundled), ofsdn-node moving each node's IPv6 address and
// default route from its NIC onto br-phy (underlayBridge), as on the dual-stack cluster.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ofsdn/ofsdn/test/k8s"
	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestIPv6OnlyCluster(t *testing.T) {
	testenv.Privileged(t)
	t.Parallel()
	images, imgTime := clusterImages(t)
	c := k8s.StartCluster(t, k8s.ClusterConfig{Nodes: 2, ImagesDir: images, OVS: k8s.OVSBundled, IPv6Only: true})
	e := &env{c: c, ctx: context.Background()}
	c.Timings = append([]k8s.Timing{{Step: imagesStep(imgTime), Duration: imgTime}}, c.Timings...)
	start := time.Now()
	defer func() {
		e.timing("TestIPv6OnlyCluster's steps after the cluster was up", time.Since(start))
		e.reportTimings(t)
	}()
	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"before ofsdn nodes are NotReady and the CNI directories empty", e.testNotReadyBeforeOfsdn},
		{"every node has one IPv6 pod CIDR and its IPv6 InternalIP", e.testIPv6OnlyNodes},
		{"DaemonSet makes every node Ready, its IPv6 address on br-phy; the gateway holds ::1 of the pod CIDR and no IPv4", e.testIPv6OnlyDaemonSet},
		{"pods across nodes over IPv6", e.testIPv6OnlyPods},
		{"an IPv6 ClusterIP in OVS and a NetworkPolicy over IPv6", e.testIPv6OnlyServicePolicy},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.f) {
			t.Fatalf("stopping after %q failed", s.name)
		}
	}
}

func (e *env) testIPv6OnlyNodes(t *testing.T) {
	_, cluster6, _ := net.ParseCIDR(k8s.ClusterCIDRIPv6)
	for _, n := range e.c.Nodes {
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, v6, err := net.ParseCIDR(node.Spec.PodCIDR)
		if len(node.Spec.PodCIDRs) != 1 || err != nil || v6.IP.To4() != nil || !cluster6.Contains(v6.IP) {
			t.Errorf("%s: podCIDR %q podCIDRs %v, want one /64 of %v", n.Name, node.Spec.PodCIDR, node.Spec.PodCIDRs, cluster6)
		} else if ones, _ := v6.Mask.Size(); ones != 64 {
			t.Errorf("%s: podCIDR %v, want a /64", n.Name, v6)
		}
		var internal []string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if len(internal) != 1 || !sameIP(internal[0], n.IP) {
			t.Errorf("%s: InternalIPs %v, want its IPv6 node IP %s alone", n.Name, internal, n.IP)
		}
	}
}

func (e *env) testIPv6OnlyDaemonSet(t *testing.T) {
	start := time.Now()
	e.c.MustKubectl(t, "apply", "-k", e.c.Config.Overlay())
	ds := e.waitPods(t, sysNS, "app=ofsdn-node", len(e.c.Nodes), 180*time.Second)
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+" Ready", 120*time.Second, func() error {
			node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if r := k8s.NodeReady(node); r == nil || r.Status != corev1.ConditionTrue {
				return fmt.Errorf("Ready condition %+v", r)
			}
			return nil
		})
	}
	e.timing("kubectl apply -k "+e.c.Config.Overlay()+" → every ofsdn-node pod Ready and every node Ready", time.Since(start))
	for _, n := range e.c.Nodes {
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, v6, _ := net.ParseCIDR(node.Spec.PodCIDR)
		if n.Bundled {
			checkBundledOVS(t, n, ds)
		}
		if out := n.OVS.Exec(t, "ip", "-6", "-o", "addr", "show", "dev", gatewayIf); !strings.Contains(out, gatewayIPv6(v6)+"/64") {
			t.Errorf("%s: gateway %s has %q, want %s/64 from podCIDR %v", n.Name, gatewayIf, out, gatewayIPv6(v6), v6)
		}
		// No IPv4 in the node but loopback's: the underlay is IPv6, and the tunnel runs to
		// the peer's IPv6 node IP.
		if out := n.OVS.Exec(t, "ip", "-4", "-o", "addr", "show"); strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "127.0.0.1/8") {
			t.Errorf("%s: IPv4 addresses on an IPv6-only node:\n%s", n.Name, out)
		}
		for _, peer := range e.c.Nodes {
			if peer == n {
				continue
			}
			k8s.WaitFor(t, n.Name+": a flow into the tunnel to "+peer.Name+"'s IPv6 node IP "+peer.IP, 20*time.Second, func() error {
				if flows := n.Ofctl(t, "dump-flows"); !strings.Contains(flows, "set_field:"+peer.IP+"->tun_ipv6_dst") {
					return fmt.Errorf("none in:\n%s", flows)
				}
				return nil
			})
		}
	}
}

func (e *env) testIPv6OnlyPods(t *testing.T) {
	start := time.Now()
	e.apply(t, echoManifest)
	pods := e.waitPods(t, ns, "app=echo", 4, 180*time.Second)
	e.timing("kubectl apply of a 4-pod Deployment → every pod Running and Ready (IPv6-only)", time.Since(start))
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, v6, _ := net.ParseCIDR(node.Spec.PodCIDR)
		ip := net.ParseIP(p.Status.PodIP)
		if len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != p.Status.PodIP || ip == nil || ip.To4() != nil || !v6.Contains(ip) {
			t.Errorf("%s on %s: podIP %q podIPs %v, want one IPv6 address of the node's %v", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.PodIPs, v6)
		}
	}
	if len(perNode) != 2 {
		t.Fatalf("pods not spread over both nodes: %v", perNode)
	}
	if t.Failed() {
		return
	}
	t.Run("every pod reaches every other over TCP and UDP, with its own address", func(t *testing.T) {
		for _, from := range pods {
			var targets []string
			for _, to := range pods {
				v6 := "[" + to.Status.PodIP + "]"
				targets = append(targets, "tcp:"+v6+":8080", "udp:"+v6+":8081")
			}
			for i, r := range e.probe(t, from.Name, targets...) {
				to := pods[i/2]
				switch {
				case !r.ok:
					t.Errorf("%s (%s) → %s (%s, %s): %s", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, r.target, r.reply)
				case replyName(r.reply) != to.Name:
					t.Errorf("%s → %s: answered by %q", from.Name, r.target, r.reply)
				case !sameIP(replyPeerIP(r.reply), from.Status.PodIP):
					t.Errorf("%s → %s: the server saw %s, want the client's own address %s", from.Name, r.target, replyPeerIP(r.reply), from.Status.PodIP)
				}
			}
		}
	})
	t.Run("ICMPv6 echo to a pod on the other node", func(t *testing.T) {
		for _, from := range pods {
			for _, to := range pods {
				if to.Spec.NodeName == from.Spec.NodeName {
					continue
				}
				out, err := e.exec(from.Name, "/testbin", "ping", "-c", "3", "-i", "50ms", to.Status.PodIP)
				if err != nil || !strings.Contains(out, "sent 3 received 3 missing []") {
					t.Errorf("%s (%s) ping %s (%s on %s): %v\n%s", from.Name, from.Spec.NodeName, to.Status.PodIP, to.Name, to.Spec.NodeName, err, out)
				}
				break
			}
		}
	})
	t.Run("each node's host reaches every pod", func(t *testing.T) {
		for _, n := range e.c.Nodes {
			for _, p := range pods {
				reply, err := dialFromNode(n, net.JoinHostPort(p.Status.PodIP, "8080"))
				if err != nil || replyName(reply) != p.Name {
					t.Errorf("%s host → %s (%s on %s): %q %v", n.Name, p.Name, p.Status.PodIP, p.Spec.NodeName, reply, err)
				}
			}
		}
	})
}

// ipv6OnlyServicePolicyManifest: Service echo6 over the echo pods, two client pods
// (role ok and bad), and a NetworkPolicy admitting to the echo pods only role=ok.
const ipv6OnlyServicePolicyManifest = `apiVersion: v1
kind: Service
metadata: {name: echo6, namespace: default}
spec:
  selector: {app: echo}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client-ok, namespace: default, labels: {role: ok}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: ofsdn.test/testbin:1, imagePullPolicy: Never, env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client-bad, namespace: default, labels: {role: bad}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: ofsdn.test/testbin:1, imagePullPolicy: Never, env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: echo-from-ok, namespace: default}
spec:
  podSelector: {matchLabels: {app: echo}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {role: ok}}}]}]
`

// testIPv6OnlyServicePolicy: with serviceProxy ofsdn and NetworkPolicy on, a pod reaches
// the echo pods through an IPv6 ClusterIP, the echo pod seeing the client pod's own
// address (the switch DNATs it; through kube-proxy on the host it would arrive
// masqueraded to the gateway), and the policy admits that client and refuses the other,
// over the ClusterIP and directly.
func (e *env) testIPv6OnlyServicePolicy(t *testing.T) {
	start := time.Now()
	e.apply(t, ipv6OnlyServicePolicyManifest)
	e.waitPods(t, ns, "role in (ok,bad)", 2, 120*time.Second)
	echo := e.pods(t, ns, "app=echo")
	vip := e.clusterIP(t, "echo6")
	if ip := net.ParseIP(vip); ip == nil || ip.To4() != nil {
		t.Fatalf("Service echo6 has ClusterIP %q, want an IPv6 one", vip)
	}
	k8s.WaitFor(t, "4 ready endpoints of Service echo6", 60*time.Second, func() error {
		if n := e.readyEndpoints(t, "echo6"); n != 4 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	self := map[string]string{}
	for _, c := range e.pods(t, ns, "role in (ok,bad)") {
		self[c.Name] = c.Status.PodIP
	}
	target := "tcp:[" + vip + "]:80"
	e.waitProbe(t, "client-ok → Service echo6 answered, seeing client-ok's own address", "client-ok", target, func(r probeResult) error {
		if !r.ok || !sameIP(replyPeerIP(r.reply), self["client-ok"]) {
			return fmt.Errorf("ok=%v %q, want an echo pod seeing %s", r.ok, r.reply, self["client-ok"])
		}
		return nil
	})
	direct := "tcp:[" + echo[0].Status.PodIP + "]:8080"
	for _, r := range e.probe(t, "client-ok", target, direct) {
		if !r.ok || !sameIP(replyPeerIP(r.reply), self["client-ok"]) {
			t.Errorf("client-ok (role=ok) → %s: ok=%v %q, want an answer seeing %s", r.target, r.ok, r.reply, self["client-ok"])
		}
	}
	for _, r := range e.probe(t, "client-bad", target, direct) {
		if r.ok {
			t.Errorf("client-bad (role=bad) → %s answered %q: NetworkPolicy echo-from-ok refuses it", r.target, r.reply)
		}
	}
	e.timing("IPv6 ClusterIP in OVS and a NetworkPolicy over IPv6 (IPv6-only)", time.Since(start))
}
