package policy

// NetworkPolicy on a dual-stack cluster (issue 23): every pod has an IPv4 and an IPv6
// address (status.podIPs), local pods both on their attachment. Pod and namespace
// selectors match a pod by every address, an ipBlock only addresses of its own family,
// with except in IPv6 as in IPv4. The engine is checked against the oracle over both
// families' truth tables (a connection is one family end to end).

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

var external6 = netip.MustParseAddr("2001:db8::10")

// podIP6 is a pod's IPv6 address: fd00:10:244:NODE::X, X as in podIP.
func podIP6(ns, name string) netip.Addr {
	v4 := podIP(ns, name).As4()
	a := netip.MustParseAddr(fmt.Sprintf("fd00:10:244:%d::%d", v4[2], v4[3])).As16()
	return netip.AddrFrom16(a)
}

// newDualWorld is newWorld with every pod dual-stack (podIPs IPv4 then IPv6).
func newDualWorld() *world {
	w := newWorld()
	for _, p := range w.pods {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: podIP6(p.Namespace, p.Name).String()})
	}
	return w
}

// dualEngines builds one engine per node, each local pod attached with both addresses.
func (w *world) dualEngines() map[string]*Engine {
	out := map[string]*Engine{}
	for i, node := range []string{"n1", "n2"} {
		e := NewEngine(nil)
		for _, n := range w.namespaces {
			e.UpsertNamespace(ConvertNamespace(n))
		}
		for _, p := range w.pods {
			e.UpsertPod(ConvertPod(p))
		}
		for _, np := range w.policies {
			e.UpsertPolicy(ConvertPolicy(np))
		}
		for j, p := range w.pods {
			if p.Spec.NodeName == node {
				var ips []netip.Addr
				for _, ip := range p.Status.PodIPs {
					ips = append(ips, netip.MustParseAddr(ip.IP))
				}
				e.SetLocalPod(LocalPod{Namespace: p.Namespace, Name: p.Name, IPs: ips, OFPort: uint32(10*i + j + 3)})
			}
		}
		out[node] = e
	}
	return out
}

// checkDualTruthTable compares engine and oracle on every pair of endpoints of the same
// family (each pod by each of its addresses, one outside address per family), protocol
// and port; it returns the number of allowed combinations per family.
func checkDualTruthTable(t *testing.T, w *world, engs map[string]*Engine) (allowed4, allowed6 int) {
	t.Helper()
	var eps []endpoint
	for _, p := range w.pods {
		for _, ip := range p.Status.PodIPs {
			eps = append(eps, endpoint{pod: p, ip: netip.MustParseAddr(ip.IP)})
		}
	}
	eps = append(eps, endpoint{ip: external}, endpoint{ip: external6})
	engOf := func(e endpoint) *Engine {
		if e.pod == nil {
			return nil
		}
		return engs[e.pod.Spec.NodeName]
	}
	for _, src := range eps {
		for _, dst := range eps {
			if src.pod == nil && dst.pod == nil || src.ip.Is4() != dst.ip.Is4() {
				continue
			}
			for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
				pr, _ := convertProtocol(proto)
				for _, port := range []int32{80, 81} {
					want := w.oracleAllowed(t, src, dst, proto, port)
					got := engineAllows(src, dst, engOf(src), engOf(dst), pr, uint16(port))
					if got != want {
						var polDump strings.Builder
						for _, np := range w.policies {
							fmt.Fprintf(&polDump, "\n  %s/%s: %+v", np.Namespace, np.Name, np.Spec)
						}
						t.Fatalf("%s (%s) -> %s (%s) %s/%d: engine says %v, the API says %v\npolicies:%s",
							epName(src), src.ip, epName(dst), dst.ip, proto, port, got, want, polDump.String())
					}
					if want && src.ip.Is4() {
						allowed4++
					} else if want {
						allowed6++
					}
				}
			}
		}
	}
	return allowed4, allowed6
}

func TestConvertPodBothFamilies(t *testing.T) {
	w := newDualWorld()
	p := ConvertPod(w.pods[0])
	want := []netip.Addr{podIP(w.pods[0].Namespace, w.pods[0].Name), podIP6(w.pods[0].Namespace, w.pods[0].Name)}
	if !slices.Equal(p.IPs, want) {
		t.Fatalf("ConvertPod IPs = %v, want %v", p.IPs, want)
	}
}

func TestExceptCIDRsIPv6(t *testing.T) {
	for _, tc := range []struct {
		cidr   string
		except []string
		want   []string
	}{
		{"fd00:10:244:1::/64", nil, []string{"fd00:10:244:1::/64"}},
		{"fd00:10:244:1::7/64", nil, []string{"fd00:10:244:1::/64"}},
		{"fd00:10:244:1::/64", []string{"fd00:10:244:1::/65"}, []string{"fd00:10:244:1:8000::/65"}},
		{"fd00:10:244:1::/126", []string{"fd00:10:244:1::1/128"}, []string{"fd00:10:244:1::/128", "fd00:10:244:1::2/127"}},
		{"fd00::/8", []string{"fd00::/8"}, nil},
		{"fd00::/8", []string{"fc00::/7"}, nil},
		// An except of the other family (the API server refuses it) changes nothing.
		{"fd00::/8", []string{"10.0.0.0/8"}, []string{"fd00::/8"}},
		{"10.0.0.0/24", []string{"fd00::/8"}, []string{"10.0.0.0/24"}},
		{"::/0", []string{"8000::/1", "::/2"}, []string{"4000::/2"}},
	} {
		var ex []netip.Prefix
		for _, e := range tc.except {
			ex = append(ex, mustPrefix(t, e))
		}
		got := ExceptCIDRs(mustPrefix(t, tc.cidr), ex)
		var gs []string
		for _, g := range got {
			gs = append(gs, g.String())
		}
		if !slices.Equal(gs, tc.want) {
			t.Errorf("%s except %v = %v, want %v", tc.cidr, tc.except, gs, tc.want)
		}
	}
	// Brute force over the last byte of random IPv6 blocks with random excepts.
	r := rand.New(rand.NewSource(9))
	base := netip.MustParseAddr("fd00:10:244:1::").As16()
	addr := func(i int) netip.Addr { a := base; a[15] = byte(i); return netip.AddrFrom16(a) }
	for iter := 0; iter < 1000; iter++ {
		cidr := netip.PrefixFrom(addr(r.Intn(256)), 120+r.Intn(9)).Masked()
		var ex []netip.Prefix
		for n := r.Intn(5); n > 0; n-- {
			ex = append(ex, netip.PrefixFrom(addr(r.Intn(256)), 118+r.Intn(11)).Masked())
		}
		got := ExceptCIDRs(cidr, ex)
		for i := 0; i < 256; i++ {
			a := addr(i)
			want := cidr.Contains(a)
			for _, e := range ex {
				want = want && !e.Contains(a)
			}
			n := 0
			for _, p := range got {
				if p.Contains(a) {
					n++
				}
			}
			if (n > 0) != want || n > 1 {
				t.Fatalf("%s except %v = %v: %s covered %d times, want %v", cidr, ex, got, a, n, want)
			}
		}
	}
}

// TestDualStackSemantics: spot checks of the API's semantics over IPv6 (and IPv4 beside
// it), then the whole truth table of both families against the oracle.
func TestDualStackSemantics(t *testing.T) {
	ipb := func(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
	}
	in := func(peers ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyIngressRule {
		return []networkingv1.NetworkPolicyIngressRule{{From: peers}}
	}
	xb6 := podIP6("x", "b").String() // fd00:10:244:1::11
	for _, c := range []struct {
		name   string
		policy *networkingv1.NetworkPolicy
		spots  []string // src-ip dst-ip proto port want
	}{
		{"pod selector matches both addresses", np("p", "x", networkingv1.NetworkPolicySpec{
			PodSelector: *podSel("pod", "a"), Ingress: in(networkingv1.NetworkPolicyPeer{PodSelector: podSel("pod", "b")})}),
			[]string{xb6 + " x/a TCP 80 true", "x/b x/a TCP 80 true", podIP6("x", "c").String() + " x/a TCP 80 false"}},
		{"IPv6 ipBlock with except", np("p", "x", networkingv1.NetworkPolicySpec{
			PodSelector: *podSel("pod", "a"), Ingress: in(ipb("fd00:10:244:1::/64", xb6+"/128"))}),
			[]string{xb6 + " x/a TCP 80 false", podIP6("y", "a").String() + " x/a TCP 80 true", "y/a x/a TCP 80 false" /* IPv4: not in an IPv6 block */, podIP6("x", "c").String() + " x/a TCP 80 false" /* another node's subnet */}},
		{"IPv4 ipBlock matches no IPv6", np("p", "x", networkingv1.NetworkPolicySpec{
			PodSelector: *podSel("pod", "a"), Ingress: in(ipb("0.0.0.0/0"))}),
			[]string{"x/c x/a TCP 80 true", podIP6("x", "c").String() + " x/a TCP 80 false", "2001:db8::10 x/a TCP 80 false"}},
		{"::/0 except the cluster for egress", np("p", "x", networkingv1.NetworkPolicySpec{
			PodSelector: *podSel("pod", "a"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{ipb("::/0", "fd00:10:244::/48")}}}}),
			[]string{"x/a 2001:db8::10 UDP 81 true", "x/a " + xb6 + " TCP 80 false", "x/a x/b TCP 80 false", "x/a 192.0.2.10 TCP 80 false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newDualWorld()
			w.policies = []*networkingv1.NetworkPolicy{c.policy}
			engs := w.dualEngines()
			ep := func(s string) endpoint {
				for _, p := range w.pods {
					if p.Namespace+"/"+p.Name == s {
						return endpoint{pod: p, ip: netip.MustParseAddr(p.Status.PodIPs[0].IP)}
					}
					for _, ip := range p.Status.PodIPs {
						if ip.IP == s {
							return endpoint{pod: p, ip: netip.MustParseAddr(s)}
						}
					}
				}
				return endpoint{ip: netip.MustParseAddr(s)}
			}
			for _, s := range c.spots {
				f := strings.Fields(s)
				src, dst := ep(f[0]), ep(f[1])
				if src.ip.Is4() != dst.ip.Is4() { // a pod named by name, the other by IPv6
					if src.pod != nil && src.ip.Is4() {
						src.ip = netip.MustParseAddr(src.pod.Status.PodIPs[1].IP)
					} else if dst.pod != nil {
						dst.ip = netip.MustParseAddr(dst.pod.Status.PodIPs[1].IP)
					}
				}
				var port int
				fmt.Sscan(f[3], &port)
				want := f[4] == "true"
				proto := corev1.Protocol(f[2])
				pr, _ := convertProtocol(proto)
				var se, de *Engine
				if src.pod != nil {
					se = engs[src.pod.Spec.NodeName]
				}
				if dst.pod != nil {
					de = engs[dst.pod.Spec.NodeName]
				}
				if o := w.oracleAllowed(t, src, dst, proto, int32(port)); o != want {
					t.Fatalf("%s: the oracle says %v (%s -> %s)", s, o, src.ip, dst.ip)
				}
				if got := engineAllows(src, dst, se, de, pr, uint16(port)); got != want {
					t.Errorf("%s: engine says %v (%s -> %s)", s, got, src.ip, dst.ip)
				}
			}
			checkDualTruthTable(t, w, engs)
		})
	}
}

// randomDualPeers is randomPeers with IPv6 ipBlocks (with excepts) among the blocks.
func randomDualPeers(r *rand.Rand) []networkingv1.NetworkPolicyPeer {
	out := randomPeers(r)
	for i := range out {
		if out[i].IPBlock != nil && r.Intn(2) == 0 {
			blocks := []networkingv1.IPBlock{
				{CIDR: "fd00:10:244:1::/64", Except: []string{"fd00:10:244:1::a/128", "fd00:10:244:1::20/124"}},
				{CIDR: "fd00:10:244::/48"},
				{CIDR: "2001:db8::/32"},
				{CIDR: "::/0", Except: []string{"fd00:10:244:2::/64"}},
			}
			b := blocks[r.Intn(len(blocks))]
			out[i].IPBlock = &b
		}
	}
	return out
}

// TestDualStackRandomPoliciesMatchTheAPI compares the engine with the oracle on random
// policy sets (pod and namespace selectors, IPv4 and IPv6 ipBlocks) over both families'
// truth tables.
func TestDualStackRandomPoliciesMatchTheAPI(t *testing.T) {
	r := rand.New(rand.NewSource(23))
	iters := 200
	if raceEnabled || testing.Short() {
		iters = 40
	}
	a4, a6 := 0, 0
	for i := 0; i < iters; i++ {
		w := newDualWorld()
		randomizeLabels(r, w)
		for n := 1 + r.Intn(4); n > 0; n-- {
			p := randomPolicy(r, fmt.Sprintf("p%d", n))
			for j := range p.Spec.Ingress {
				p.Spec.Ingress[j].From = randomDualPeers(r)
			}
			for j := range p.Spec.Egress {
				p.Spec.Egress[j].To = randomDualPeers(r)
			}
			w.policies = append(w.policies, p)
		}
		x, y := checkDualTruthTable(t, w, w.dualEngines())
		a4, a6 = a4+x, a6+y
	}
	if a6 == 0 || a4 == 0 {
		t.Fatalf("random policies allowed %d IPv4 and %d IPv6 combinations: the generator is degenerate", a4, a6)
	}
	t.Logf("%d random policy sets: %d IPv4 and %d IPv6 combinations allowed", iters, a4, a6)
}

// TestDualStackIncrementalEqualsFromScratch: the incremental engine on a dual-stack
// cluster (pod labels, addresses and attachments changing under random policies with
// IPv4 and IPv6 ipBlocks) ends every step where an engine built from scratch is.
func TestDualStackIncrementalEqualsFromScratch(t *testing.T) {
	seeds := int64(8)
	if raceEnabled || testing.Short() {
		seeds = 3
	}
	for seed := int64(1); seed <= seeds; seed++ {
		incrementalEqualsFromScratch(t, seed, true)
	}
}
