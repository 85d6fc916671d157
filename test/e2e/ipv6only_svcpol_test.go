package e2e

// NetworkPolicy and Services in OVS on an IPv6-only node (issue 23): one sandbox node
// whose Node has an IPv6 pod CIDR alone and an IPv6 InternalIP (its underlay address on
// br-phy; an IPv4 address there only reaches the API server), its daemon with the
// Service proxy (serviceProxy ofsdn) and NetworkPolicy on against a real kube-apiserver.
// An IPv6 ClusterIP is reached from a pod, the endpoint seeing the client pod's own IPv6
// address; the API server's own IPv4 Service is not proxied (the node runs the IPv6
// tracker alone); a NetworkPolicy on the endpoint admits one client, over the ClusterIP
// and directly, and refuses the other. No kube-proxy runs: nothing but ofsdn answers the
// ClusterIP.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ofsdn/ofsdn/test/kapi"
)

const (
	v6spAPIAddr = "172.30.0.90"         // the API server, on the underlay bridge (IPv4: the daemon's API connection only)
	v6spNodeIP4 = "172.30.0.91"         // the node's address towards the API server
	v6spNodeIP  = "fd00:172:30::91"     // the node's IPv6 InternalIP, its underlay address
	v6spSubnet  = "fd00:10:244:91::/64" // its only pod CIDR
	v6spCluster = "fd00:10:244::/56"    // the IPv6 cluster CIDR
	v6spVIP     = "fd00:96::191"        // the IPv6 Service's ClusterIP
	v6spSvcCIDR = "10.96.0.0/16,fd00:96::/108"
)

func TestIPv6OnlyServicesPolicy(t *testing.T) {
	serialIPv6(t)
	start := time.Now()
	ulPath := newNetns(t, "ofsdn-v6sp-ul")
	ul := filepath.Base(ulPath)
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "addr", "add", v6spAPIAddr+"/24", "dev", "br0")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")
	api := kapi.StartServiceCIDR(t, ulPath, v6spAPIAddr, "../../deploy/ofsdn.yaml", v6spSvcCIDR)
	ctx := context.Background()
	name := "v6sp-node"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: v6spSubnet, PodCIDRs: []string{v6spSubnet}}}
	created, err := api.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: v6spNodeIP}}
	if _, err := api.Admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cn := startClusterNode(t, ul, name, v6spNodeIP, v6spSubnet, 1)
	cn.OVS.Exec(t, "ip", "addr", "add", v6spNodeIP4+"/24", "dev", "br-phy")
	cn.OVS.Exec(t, "ethtool", "-K", "br-phy", "tx", "off")
	cn.OVS.Exec(t, "ethtool", "-K", "uplink0", "tx", "off")
	mustRun(t, "ip", "netns", "exec", ul, "ethtool", "-K", "ul-1", "tx", "off")
	// NetworkPolicy is on by default with the Kubernetes topology; the deny log too here.
	cn.StartDaemon(daemonBinary(t), 90*time.Second, "--log-level", "debug", "--topology", "kubernetes",
		"--kubeconfig", api.Kubeconfig(t), "--node-name", name, "--cluster-cidr-ipv6", v6spCluster,
		"--mtu", "0", "--add-timeout", "15s", "--service-proxy", "ofsdn", "--log-format", "json", "--policy-deny-log")
	if err := api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svcNamespace}}); err != nil {
		t.Fatal(err)
	}
	c := &npCluster{t: t, api: api, nodes: map[string]*clusterNode{name: cn}}

	// Pods: the endpoint ep, the admitted client ok and the refused client bad, each with
	// one IPv6 address.
	ip6, netns := map[string]string{}, map[string]string{}
	for _, p := range []struct{ name, label string }{{"ep", "ep"}, {"ok", "ok"}, {"bad", "bad"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: p.name, Labels: map[string]string{"app": p.label}},
			Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:none"}}}}
		created, err := api.Admin.CoreV1().Pods(svcNamespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tp := cn.addK8sPod(t, svcNamespace, p.name)
		if tp == nil {
			t.FailNow()
		}
		if len(tp.result.IPs) != 1 || tp.result.IPs[0].Address.IP.To4() != nil {
			t.Fatalf("pod %s got %v, want one IPv6 address on an IPv6-only node", p.name, tp.result.IPs)
		}
		ip6[p.name], netns[p.name] = tp.ip().String(), tp.netns
		created.Status.Phase, created.Status.PodIP = corev1.PodRunning, ip6[p.name]
		created.Status.PodIPs = []corev1.PodIP{{IP: ip6[p.name]}}
		if _, err := api.Admin.CoreV1().Pods(svcNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dualEcho(t, netns["ep"], "ep", svcEPPort)

	// An IPv6 SingleStack Service with ep as its endpoint.
	single := corev1.IPFamilyPolicySingleStack
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "echo6"},
		Spec: corev1.ServiceSpec{ClusterIP: v6spVIP, ClusterIPs: []string{v6spVIP},
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}, IPFamilyPolicy: &single,
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: svcPort, TargetPort: intstr.FromInt32(svcEPPort)}}}}
	if _, err := api.Admin.CoreV1().Services(svcNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proto, port, portName, ready := corev1.ProtocolTCP, int32(svcEPPort), "tcp", true
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "echo6-ipv6",
		Labels: map[string]string{discoveryv1.LabelServiceName: "echo6"}},
		AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip6["ep"]}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &name}}}
	if _, err := api.Admin.DiscoveryV1().EndpointSlices(svcNamespace).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := net.JoinHostPort(v6spVIP, fmt.Sprint(svcPort))
	want := fmt.Sprintf("map[%s:%s]", vip, net.JoinHostPort(ip6["ep"], fmt.Sprint(svcEPPort)))
	// The switch holds the IPv6 Service port alone: the API server's kubernetes Service
	// (IPv4 ClusterIP 10.96.0.1) has no IPv6 ClusterIP, so no port on this node.
	waitUntil(t, "switch holds the IPv6 Service port alone", 60*time.Second, func() error {
		rep, err := cn.ctlClient().Services(ctx)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, p := range rep.Ports {
			got[p.Frontend] = strings.Join(p.Endpoints, ",")
		}
		if fmt.Sprint(got) != want {
			return fmt.Errorf("ofsdnctl services: frontends → endpoints %v, want %s", got, want)
		}
		return nil
	})
	c.revalidated()

	ask := func(client, addr string) (string, error) {
		ep, peer, err := askDual(netns[client], "tcp6", addr)
		if err == nil && (ep != "ep" || peer != ip6[client]) {
			return "", fmt.Errorf("answered by %q seeing the client as %q, want ep seeing %s (the client pod's own address)", ep, peer, ip6[client])
		}
		return peer, err
	}
	direct := net.JoinHostPort(ip6["ep"], fmt.Sprint(svcEPPort))
	t.Run("IPv6 ClusterIP reached, the endpoint sees the client's own address", func(t *testing.T) {
		for _, client := range []string{"ok", "bad"} {
			if _, err := ask(client, vip); err != nil {
				t.Fatalf("%s to the ClusterIP %s: %v", client, vip, err)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("NetworkPolicy admits one IPv6 client and refuses the other", func(t *testing.T) {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: svcNamespace, Name: "ep-from-ok"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "ep"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ok"}}}}}}}}
		o, err := api.Admin.NetworkingV1().NetworkPolicies(svcNamespace).Create(ctx, np, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.waitRealized("networkpolicies", o.ResourceVersion)
		for _, addr := range []string{vip, direct} {
			if _, err := ask("ok", addr); err != nil {
				t.Errorf("admitted client ok to %s: %v", addr, err)
			}
			if line, err := askServiceNet(netns["bad"], "tcp6", addr, 2*time.Second); err == nil {
				t.Errorf("refused client bad to %s: answered %q, want no connection", addr, line)
			}
		}
	})
	t.Logf("TestIPv6OnlyServicesPolicy: %.1f s", time.Since(start).Seconds())
}
