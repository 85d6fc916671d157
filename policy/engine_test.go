package policy

import (
	"fmt"
	"math/rand"
	"net/netip"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The test cluster mirrors the upstream netpol e2e model: namespaces x, y, z with pods
// a, b, c each, every pod serving TCP and UDP on ports 80 and 81 (named serve-80-tcp,
// ...), spread over two nodes; plus one address outside the cluster.

var (
	nsNames  = []string{"x", "y", "z"}
	podNames = []string{"a", "b", "c"}
	external = netip.MustParseAddr("192.0.2.10")
)

func podNode(ns, name string) string {
	if (ns == "y") != (name == "b") {
		return "n1"
	}
	return "n2"
}

func podIP(ns, name string) netip.Addr {
	node := 1
	if podNode(ns, name) == "n2" {
		node = 2
	}
	return netip.AddrFrom4([4]byte{10, 244, byte(node), byte(10 + 10*strings.Index("xyz", ns) + strings.Index("abc", name))})
}

func servePorts() []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		for _, p := range []int32{80, 81} {
			out = append(out, corev1.ContainerPort{
				Name: fmt.Sprintf("serve-%d-%s", p, strings.ToLower(string(proto))), ContainerPort: p, Protocol: proto,
			})
		}
	}
	return out
}

func newWorld() *world {
	w := &world{}
	for _, ns := range nsNames {
		w.namespaces = append(w.namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"ns": ns, "kubernetes.io/metadata.name": ns},
		}})
		for _, name := range podNames {
			w.pods = append(w.pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pod": name}},
				Spec: corev1.PodSpec{NodeName: podNode(ns, name), Containers: []corev1.Container{
					{Name: "cont-80-81", Ports: servePorts()},
				}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: podIP(ns, name).String()}}},
			})
		}
	}
	return w
}

// engines builds one engine per node from w, each with its node's pods attached.
func (w *world) engines() map[string]*Engine {
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
				e.SetLocalPod(LocalPod{Namespace: p.Namespace, Name: p.Name, IPs: []netip.Addr{netip.MustParseAddr(p.Status.PodIPs[0].IP)}, OFPort: uint32(10*i + j + 3)})
			}
		}
		out[node] = e
	}
	return out
}

func (w *world) endpoints() []endpoint {
	var out []endpoint
	for _, p := range w.pods {
		out = append(out, endpoint{pod: p, ip: netip.MustParseAddr(p.Status.PodIPs[0].IP)})
	}
	return append(out, endpoint{ip: external})
}

func epName(e endpoint) string {
	if e.pod == nil {
		return e.ip.String()
	}
	return e.pod.Namespace + "/" + e.pod.Name
}

// checkTruthTable compares engine and oracle on every pair, protocol and port; it
// returns the number of allowed combinations.
func checkTruthTable(t *testing.T, w *world, engs map[string]*Engine) int {
	t.Helper()
	allowed := 0
	eps := w.endpoints()
	engOf := func(e endpoint) *Engine {
		if e.pod == nil {
			return nil
		}
		return engs[e.pod.Spec.NodeName]
	}
	for _, src := range eps {
		for _, dst := range eps {
			if src.pod == nil && dst.pod == nil {
				continue
			}
			for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
				pr, _ := convertProtocol(proto)
				for _, port := range []int32{80, 81, 82} {
					want := w.oracleAllowed(t, src, dst, proto, port)
					got := engineAllows(src, dst, engOf(src), engOf(dst), pr, uint16(port))
					if got != want {
						var polDump strings.Builder
						for _, np := range w.policies {
							fmt.Fprintf(&polDump, "\n  %s: %+v", np.Name, np.Spec)
						}
						var conjDump strings.Builder
						for node, e := range engs {
							for _, c := range e.Conjunctions() {
								fmt.Fprintf(&conjDump, "\n  %s: %s", node, c)
							}
						}
						t.Fatalf("%s -> %s %s/%d: engine says %v, the API says %v\npolicies:%s\nconjunctions:%s",
							epName(src), epName(dst), proto, port, got, want, polDump.String(), conjDump.String())
					}
					if want {
						allowed++
					}
				}
			}
		}
	}
	return allowed
}

func protoPtr(p corev1.Protocol) *corev1.Protocol { return &p }
func port(n int) *intstr.IntOrString {
	v := intstr.FromInt32(int32(n))
	return &v
}
func namedPort(s string) *intstr.IntOrString {
	v := intstr.FromString(s)
	return &v
}
func i32(n int32) *int32 { return &n }

func np(name, ns string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func podSel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// TestSemanticsTable checks named situations of the API against the oracle, and a few
// expected counts so a broken oracle cannot hide a broken engine.
func TestSemanticsTable(t *testing.T) {
	ing := networkingv1.PolicyTypeIngress
	eg := networkingv1.PolicyTypeEgress
	cases := []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		// spot checks: src, dst, proto, port, want
		spots []string
	}{
		{name: "no policy: everything allowed",
			spots: []string{"x/a y/b TCP 80 true", "192.0.2.10 z/c UDP 81 true"}},
		{name: "deny all ingress in x (policyTypes defaulted to Ingress)",
			policies: []*networkingv1.NetworkPolicy{np("deny", "x", networkingv1.NetworkPolicySpec{})},
			spots:    []string{"y/a x/a TCP 80 false", "x/a x/b TCP 80 false", "x/a y/a TCP 80 true"}},
		{name: "deny all egress in x",
			policies: []*networkingv1.NetworkPolicy{np("deny", "x", networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{eg}})},
			spots:    []string{"x/a y/a TCP 80 false", "y/a x/a TCP 80 true", "x/a 192.0.2.10 TCP 80 false"}},
		{name: "egress rules without policyTypes: both directions isolated",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: podSel("pod", "b")}}}},
			})},
			spots: []string{"x/a x/b TCP 80 false", "y/a x/a TCP 80 false"}},
		{name: "egress rules with policyTypes Ingress: egress rules ignored",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{ing},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: podSel("pod", "b")}}}},
			})},
			spots: []string{"x/a y/c TCP 80 true", "y/a x/a TCP 80 false"}},
		{name: "allow from same namespace pod b only, port 80 TCP",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PodSelector: *podSel("pod", "a"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: podSel("pod", "b")}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: port(80)}},
				}},
			})},
			spots: []string{"x/b x/a TCP 80 true", "x/b x/a TCP 81 false", "x/b x/a UDP 80 false", "y/b x/a TCP 80 false", "x/c x/a TCP 80 false"}},
		{name: "namespaceSelector and podSelector in one peer",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PodSelector: *podSel("pod", "a"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: metav1.LabelSelectorOpIn, Values: []string{"y", "z"}}}},
					PodSelector:       podSel("pod", "b"),
				}}}},
			})},
			spots: []string{"y/b x/a TCP 80 true", "z/b x/a UDP 81 true", "y/a x/a TCP 80 false", "x/b x/a TCP 80 false"}},
		{name: "namespaceSelector or podSelector as two peers",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PodSelector: *podSel("pod", "a"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					{NamespaceSelector: podSel("ns", "y")},
					{PodSelector: podSel("pod", "b")},
				}}},
			})},
			spots: []string{"y/c x/a TCP 80 true", "x/b x/a TCP 80 true", "z/b x/a TCP 80 false"}},
		{name: "matchExpressions NotIn, Exists, DoesNotExist",
			policies: []*networkingv1.NetworkPolicy{np("p", "y", networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pod", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: metav1.LabelSelectorOpExists}}},
					PodSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}},
				}}}},
			})},
			spots: []string{"x/a y/b TCP 80 true", "x/a y/a TCP 80 true", "192.0.2.10 y/b TCP 80 false", "192.0.2.10 y/a TCP 80 true"}},
		{name: "ipBlock with except",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PodSelector: *podSel("pod", "a"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{podIP("y", "b").String() + "/32"}},
				}}}},
			})},
			spots: []string{"y/a x/a TCP 80 true", "y/b x/a TCP 80 false", "192.0.2.10 x/a TCP 80 false"}},
		{name: "egress to ipBlock outside the cluster, UDP 81",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{eg},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr(corev1.ProtocolUDP), Port: port(81)}},
				}},
			})},
			spots: []string{"x/a 192.0.2.10 UDP 81 true", "x/a 192.0.2.10 UDP 80 false", "x/a y/a UDP 81 false"}},
		{name: "named port resolved per destination pod (ingress)",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("serve-81-udp"), Protocol: protoPtr(corev1.ProtocolUDP)}}}},
			})},
			spots: []string{"y/a x/a UDP 81 true", "y/a x/a UDP 80 false", "y/a x/a TCP 81 false"}},
		{name: "named port with the wrong protocol matches nothing",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("serve-81-udp")}}}},
			})},
			spots: []string{"y/a x/a UDP 81 false", "y/a x/a TCP 81 false"}},
		{name: "named port on egress resolves against the peer",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{eg},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("serve-80-tcp")}},
				}},
			})},
			spots: []string{"x/a y/c TCP 80 true", "x/a y/c TCP 81 false", "x/a 192.0.2.10 TCP 80 false"}},
		{name: "endPort range",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: port(81), EndPort: i32(82)}}}},
			})},
			spots: []string{"y/a x/a TCP 81 true", "y/a x/a TCP 82 true", "y/a x/a TCP 80 false"}},
		{name: "protocol only (every port of UDP)",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr(corev1.ProtocolUDP)}}}},
			})},
			spots: []string{"y/a x/a UDP 82 true", "y/a x/a TCP 80 false"}},
		{name: "SCTP",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr(corev1.ProtocolSCTP), Port: port(80)}}}},
			})},
			spots: []string{"y/a x/a SCTP 80 true", "y/a x/a TCP 80 false"}},
		{name: "empty rule allows all; union with deny-all",
			policies: []*networkingv1.NetworkPolicy{
				np("deny", "x", networkingv1.NetworkPolicySpec{}),
				np("allow", "x", networkingv1.NetworkPolicySpec{PodSelector: *podSel("pod", "c"), Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}),
			},
			spots: []string{"y/a x/c SCTP 82 true", "192.0.2.10 x/c TCP 80 true", "y/a x/a TCP 80 false"}},
		{name: "host-network and terminated pods are never peers",
			policies: []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}},
			})},
			spots: []string{"y/a x/a TCP 80 true", "192.0.2.10 x/a TCP 80 false"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.policies = tc.policies
			engs := w.engines()
			checkTruthTable(t, w, engs)
			for _, s := range tc.spots {
				f := strings.Fields(s)
				find := func(name string) endpoint {
					for _, e := range w.endpoints() {
						if epName(e) == name {
							return e
						}
					}
					t.Fatalf("no endpoint %s", name)
					return endpoint{}
				}
				var p int
				fmt.Sscan(f[3], &p)
				want := f[4] == "true"
				if got := w.oracleAllowed(t, find(f[0]), find(f[1]), corev1.Protocol(f[2]), int32(p)); got != want {
					t.Fatalf("spot %q: oracle says %v", s, got)
				}
			}
		})
	}
}

// randomSelector returns a random pod label selector over the test labels.
func randomSelector(r *rand.Rand, key string, values []string) *metav1.LabelSelector {
	v := values[r.Intn(len(values))]
	switch r.Intn(6) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return podSel(key, v)
	case 2:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{v, values[r.Intn(len(values))]}}}}
	case 3:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpNotIn, Values: []string{v}}}}
	case 4:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "extra", Operator: metav1.LabelSelectorOpExists}}}
	default:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "extra", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	}
}

func randomPeers(r *rand.Rand) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for n := r.Intn(3); n > 0; n-- {
		switch r.Intn(4) {
		case 0:
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: randomSelector(r, "pod", podNames)})
		case 1:
			out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: randomSelector(r, "ns", nsNames)})
		case 2:
			out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: randomSelector(r, "ns", nsNames), PodSelector: randomSelector(r, "pod", podNames)})
		default:
			blocks := []networkingv1.IPBlock{
				{CIDR: "10.244.1.0/24", Except: []string{"10.244.1.10/32", "10.244.1.32/28"}},
				{CIDR: "10.244.0.0/16"},
				{CIDR: "192.0.2.0/24"},
				{CIDR: "0.0.0.0/0", Except: []string{"10.244.2.0/24"}},
			}
			b := blocks[r.Intn(len(blocks))]
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &b})
		}
	}
	return out
}

func randomPorts(r *rand.Rand) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for n := r.Intn(3); n > 0; n-- {
		switch r.Intn(6) {
		case 0:
			out = append(out, networkingv1.NetworkPolicyPort{Port: port(80 + r.Intn(2))})
		case 1:
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: protoPtr(corev1.ProtocolUDP), Port: port(80 + r.Intn(2))})
		case 2:
			names := []string{"serve-80-tcp", "serve-81-tcp", "serve-80-udp", "serve-81-udp", "nope"}
			nm := names[r.Intn(len(names))]
			p := networkingv1.NetworkPolicyPort{Port: namedPort(nm)}
			if strings.HasSuffix(nm, "udp") && r.Intn(4) != 0 {
				p.Protocol = protoPtr(corev1.ProtocolUDP)
			}
			out = append(out, p)
		case 3:
			out = append(out, networkingv1.NetworkPolicyPort{Port: port(79 + r.Intn(3)), EndPort: i32(81 + int32(r.Intn(2)))})
		case 4:
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: protoPtr([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}[r.Intn(3)])})
		default:
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: protoPtr(corev1.ProtocolSCTP), Port: port(80)})
		}
	}
	return out
}

func randomPolicy(r *rand.Rand, name string) *networkingv1.NetworkPolicy {
	spec := networkingv1.NetworkPolicySpec{PodSelector: *randomSelector(r, "pod", podNames)}
	switch r.Intn(4) {
	case 1:
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for n := r.Intn(3); n > 0; n-- {
		spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: randomPeers(r), Ports: randomPorts(r)})
	}
	for n := r.Intn(3); n > 0; n-- {
		spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{To: randomPeers(r), Ports: randomPorts(r)})
	}
	return np(name, nsNames[r.Intn(len(nsNames))], spec)
}

// randomizeLabels gives some pods and namespaces an extra label.
func randomizeLabels(r *rand.Rand, w *world) {
	for _, p := range w.pods {
		p.Labels = map[string]string{"pod": p.Name}
		if r.Intn(3) == 0 {
			p.Labels["extra"] = "1"
		}
	}
}

// TestRandomPoliciesMatchTheAPI compares the engine with the oracle on random policy sets
// over the whole truth table (10 endpoints squared × 3 protocols × 3 ports).
func TestRandomPoliciesMatchTheAPI(t *testing.T) {
	r := rand.New(rand.NewSource(42))
	iters := 300
	if raceEnabled || testing.Short() {
		iters = 60
	}
	allowedTotal, cells := 0, 0
	for i := 0; i < iters; i++ {
		w := newWorld()
		randomizeLabels(r, w)
		for n := 1 + r.Intn(4); n > 0; n-- {
			w.policies = append(w.policies, randomPolicy(r, fmt.Sprintf("p%d", n)))
		}
		allowedTotal += checkTruthTable(t, w, w.engines())
		cells += 10*10 - 1
	}
	// Guard against degenerate generators: some cells allowed, some denied.
	if allowedTotal == 0 || allowedTotal == cells*9 {
		t.Fatalf("random policies allowed %d of %d combinations: the generator is degenerate", allowedTotal, cells*9)
	}
	t.Logf("%d random policy sets, %d of %d combinations allowed", iters, allowedTotal, cells*9)
}

// checkReported fails the test (at names the step) unless the changes cs an event
// reported are exactly the difference between the conjunctions before and after it: each
// changed conjunction reported once, with Old and New describing the two states, and its id
// kept.
func checkReported(t *testing.T, at string, before, after map[ConjKey]string, cs []ConjChange) {
	t.Helper()
	reported := map[ConjKey]ConjChange{}
	for _, c := range cs {
		k := changeKey(c)
		if _, dup := reported[k]; dup {
			t.Fatalf("%s: conjunction %v reported twice", at, k)
		}
		reported[k] = c
	}
	keys := map[ConjKey]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	for k := range keys {
		b, inB := before[k]
		a, inA := after[k]
		c, rep := reported[k]
		changed := inB != inA || a != b
		if changed != rep {
			t.Fatalf("%s: conjunction %v changed=%v reported=%v\nbefore: %s\nafter:  %s", at, k, changed, rep, b, a)
		}
		if !rep {
			continue
		}
		if (c.Old == nil) == inB || (c.New == nil) == inA {
			t.Fatalf("%s: change %v has Old=%v New=%v, state before=%v after=%v", at, k, c.Old != nil, c.New != nil, inB, inA)
		}
		if c.Old != nil && c.Old.String() != b || c.New != nil && c.New.String() != a {
			t.Fatalf("%s: change %v does not describe the states:\nold %v\nbefore %s\nnew %v\nafter %s", at, k, c.Old, b, c.New, a)
		}
		if c.Old != nil && c.New != nil && c.Old.ID != c.New.ID {
			t.Fatalf("%s: conjunction %v changed id %d -> %d", at, k, c.Old.ID, c.New.ID)
		}
	}
}

// snapshot returns the engine's conjunctions by key, with their ids.
func snapshot(e *Engine) map[ConjKey]string {
	out := map[ConjKey]string{}
	for _, c := range e.Conjunctions() {
		out[c.Key] = c.String()
	}
	return out
}

// withoutIDs drops the id from snapshot text so two engines can be compared.
func withoutIDs(m map[ConjKey]string) map[ConjKey]string {
	out := map[ConjKey]string{}
	for k, v := range m {
		i := strings.Index(v, " id=")
		j := strings.Index(v, " pods=")
		out[k] = v[:i] + v[j:]
	}
	return out
}

func diffSnapshots(a, b map[ConjKey]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("- %s\n+ %s", v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("+ %s", v))
		}
	}
	sort.Strings(out)
	return out
}

// TestIncrementalEqualsFromScratch applies random events to one engine and checks after
// each that (1) the changes it returned are exactly the difference between its state
// before and after, conjunction by conjunction, (2) its state equals that of an engine
// built from scratch on the same objects, (3) the isolation it reported is the
// isolation it now computes, and (4) ids of unchanged conjunctions did not move.
func TestIncrementalEqualsFromScratch(t *testing.T) { incrementalEqualsFromScratch(t, 99, false) }

// incrementalEqualsFromScratch runs random events against one engine and checks each
// step against an engine built from scratch; dual makes the pods dual-stack (both
// addresses in podIPs and on their attachments) and adds IPv6 ipBlocks
// (dualstack_test.go).
func incrementalEqualsFromScratch(t *testing.T, seed int64, dual bool) {
	r := rand.New(rand.NewSource(seed))
	steps := 1500
	if raceEnabled || testing.Short() {
		steps = 300
	}
	w := newWorld()
	if dual {
		w = newDualWorld()
	}
	ips := func(p *corev1.Pod) []netip.Addr {
		if dual {
			return []netip.Addr{podIP(p.Namespace, p.Name), podIP6(p.Namespace, p.Name)}
		}
		return []netip.Addr{podIP(p.Namespace, p.Name)}
	}
	e := NewEngine(nil)
	local := map[string]LocalPod{}
	for _, n := range w.namespaces {
		e.UpsertNamespace(ConvertNamespace(n))
	}
	for _, p := range w.pods {
		e.UpsertPod(ConvertPod(p))
	}
	iso := map[string]Isolation{}
	for step := 0; step < steps; step++ {
		before := snapshot(e)
		var ch Changes
		var what string
		switch op := r.Intn(10); op {
		case 0, 1: // policy add/update
			np := randomPolicy(r, fmt.Sprintf("p%d", r.Intn(4)))
			if dual {
				for j := range np.Spec.Ingress {
					np.Spec.Ingress[j].From = randomDualPeers(r)
				}
				for j := range np.Spec.Egress {
					np.Spec.Egress[j].To = randomDualPeers(r)
				}
			}
			for i, o := range w.policies {
				if o.Name == np.Name && o.Namespace == np.Namespace {
					w.policies = append(w.policies[:i], w.policies[i+1:]...)
					break
				}
			}
			w.policies = append(w.policies, np)
			what = "upsert policy " + np.Namespace + "/" + np.Name
			ch = e.UpsertPolicy(ConvertPolicy(np))
		case 2: // policy delete
			if len(w.policies) == 0 {
				continue
			}
			i := r.Intn(len(w.policies))
			np := w.policies[i]
			w.policies = append(w.policies[:i], w.policies[i+1:]...)
			what = "delete policy " + np.Namespace + "/" + np.Name
			ch = e.DeletePolicy(np.Namespace, np.Name)
		case 3: // pod labels
			p := w.pods[r.Intn(len(w.pods))]
			p.Labels = map[string]string{"pod": podNames[r.Intn(3)]}
			if r.Intn(2) == 0 {
				p.Labels["extra"] = "1"
			}
			what = "relabel pod " + p.Namespace + "/" + p.Name
			ch = e.UpsertPod(ConvertPod(p))
		case 4: // pod IP goes, comes or moves; phase; container ports
			p := w.pods[r.Intn(len(w.pods))]
			switch r.Intn(5) {
			case 0:
				p.Status.PodIPs = nil
			case 1:
				p.Status.PodIPs = nil
				for _, ip := range ips(p) {
					p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip.String()})
				}
				p.Status.Phase = corev1.PodRunning
			case 2:
				a := podIP(p.Namespace, p.Name).As4()
				a[2] += 8 // another address (a second IP, or instead)
				if r.Intn(2) == 0 {
					p.Status.PodIPs = []corev1.PodIP{{IP: netip.AddrFrom4(a).String()}}
				} else {
					p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: netip.AddrFrom4(a).String()})
				}
				p.Status.Phase = corev1.PodRunning
			case 3:
				ports := servePorts()
				r.Shuffle(len(ports), func(i, j int) { ports[i], ports[j] = ports[j], ports[i] })
				ports = ports[:r.Intn(len(ports)+1)]
				if r.Intn(2) == 0 && len(ports) > 0 {
					ports[0].ContainerPort = 82 // same name, other number
				}
				p.Spec.Containers[0].Ports = ports
			default:
				p.Status.Phase = corev1.PodSucceeded
			}
			what = "pod status " + p.Namespace + "/" + p.Name
			ch = e.UpsertPod(ConvertPod(p))
		case 5: // namespace labels
			n := w.namespaces[r.Intn(len(w.namespaces))]
			n.Labels = map[string]string{"ns": nsNames[r.Intn(3)], "kubernetes.io/metadata.name": n.Name}
			what = "relabel namespace " + n.Name
			ch = e.UpsertNamespace(ConvertNamespace(n))
		case 6, 7: // attach
			p := w.pods[r.Intn(len(w.pods))]
			lp := LocalPod{Namespace: p.Namespace, Name: p.Name, IPs: ips(p), OFPort: uint32(3 + r.Intn(20))}
			local[lp.Key()] = lp
			what = "attach " + lp.Key()
			ch = e.SetLocalPod(lp)
		case 8: // detach
			p := w.pods[r.Intn(len(w.pods))]
			delete(local, p.Namespace+"/"+p.Name)
			delete(iso, p.Namespace+"/"+p.Name)
			what = "detach " + p.Namespace + "/" + p.Name
			ch = e.DeleteLocalPod(p.Namespace, p.Name)
		default: // a batch of attaches and detaches compiled once, as the agent does
			e.Defer()
			what = "batch"
			for n := 1 + r.Intn(4); n > 0; n-- {
				p := w.pods[r.Intn(len(w.pods))]
				k := p.Namespace + "/" + p.Name
				if r.Intn(3) == 0 {
					delete(local, k)
					delete(iso, k)
					what += " detach " + k
					ch.Isolation = append(ch.Isolation, e.DeleteLocalPod(p.Namespace, p.Name).Isolation...)
					continue
				}
				lp := LocalPod{Namespace: p.Namespace, Name: p.Name, IPs: ips(p), OFPort: uint32(3 + r.Intn(20))}
				local[k] = lp
				what += " attach " + k
				ch.Isolation = append(ch.Isolation, e.SetLocalPod(lp).Isolation...)
			}
			ch.Conjunctions = e.Flush().Conjunctions
		}
		after := snapshot(e)

		// (1) reported changes == actual difference.
		checkReported(t, fmt.Sprintf("step %d (%s)", step, what), before, after, ch.Conjunctions)

		// (2) same as from scratch.
		fresh := NewEngine(nil)
		for _, n := range w.namespaces {
			fresh.UpsertNamespace(ConvertNamespace(n))
		}
		for _, p := range w.pods {
			fresh.UpsertPod(ConvertPod(p))
		}
		for _, np := range w.policies {
			fresh.UpsertPolicy(ConvertPolicy(np))
		}
		for _, lp := range local {
			fresh.SetLocalPod(lp)
		}
		if d := diffSnapshots(withoutIDs(fresh.Conjunctions2Map()), withoutIDs(after)); len(d) > 0 {
			t.Fatalf("step %d (%s): incremental state differs from scratch:\n%s", step, what, strings.Join(d, "\n"))
		}

		// (3) isolation reported matches isolation computed.
		for _, ic := range ch.Isolation {
			iso[ic.Pod.Key()] = ic.New
		}
		for k, lp := range local {
			now := e.Isolation(lp.Namespace, lp.Name)
			if got, ok := iso[k]; !ok || got != now {
				t.Fatalf("step %d (%s): local pod %s isolation last reported %v (reported=%v), now %v", step, what, k, got, ok, now)
			}
			if f := fresh.Isolation(lp.Namespace, lp.Name); f != now {
				t.Fatalf("step %d (%s): local pod %s isolation %v, from scratch %v", step, what, k, now, f)
			}
		}
	}
}

// Conjunctions2Map is snapshot for the fresh engine (test helper on Engine).
func (e *Engine) Conjunctions2Map() map[ConjKey]string { return snapshot(e) }

// TestDeferredLoadEqualsEventByEvent: a bulk load with Defer/Flush ends in the same state
// as applying the events one by one.
func TestDeferredLoadEqualsEventByEvent(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for i := 0; i < 50; i++ {
		w := newWorld()
		randomizeLabels(r, w)
		for n := 1 + r.Intn(5); n > 0; n-- {
			w.policies = append(w.policies, randomPolicy(r, fmt.Sprintf("p%d", n)))
		}
		a, b := NewEngine(nil), NewEngine(nil)
		b.Defer()
		for _, e := range []*Engine{a, b} {
			for _, np := range w.policies {
				e.UpsertPolicy(ConvertPolicy(np))
			}
			for _, p := range w.pods {
				e.UpsertPod(ConvertPod(p))
				if p.Spec.NodeName == "n1" {
					e.SetLocalPod(LocalPod{Namespace: p.Namespace, Name: p.Name, IPs: []netip.Addr{podIP(p.Namespace, p.Name)}, OFPort: 7})
				}
			}
			for _, n := range w.namespaces {
				e.UpsertNamespace(ConvertNamespace(n))
			}
		}
		if len(b.Conjunctions()) != 0 {
			t.Fatal("deferred engine compiled before Flush")
		}
		ch := b.Flush()
		if d := diffSnapshots(withoutIDs(snapshot(a)), withoutIDs(snapshot(b))); len(d) > 0 {
			t.Fatalf("deferred load differs:\n%s", strings.Join(d, "\n"))
		}
		if len(ch.Conjunctions) != len(b.Conjunctions()) {
			t.Fatalf("Flush reported %d changes for %d conjunctions", len(ch.Conjunctions), len(b.Conjunctions()))
		}
	}
}

// TestConjunctionShape: a rule of N peers, M local pods and K ports is one conjunction
// with exactly those clause values (N+M+K flows later), and named ports that resolve
// differently split it.
func TestConjunctionShape(t *testing.T) {
	w := newWorld()
	w.policies = []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: podSel("ns", "y")}, {IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: port(80)}, {Port: port(1000), EndPort: i32(1023)}},
		}},
	})}
	e := w.engines()["n2"] // x/a and x/c
	cs := e.Conjunctions()
	if len(cs) != 1 {
		t.Fatalf("want 1 conjunction, got %v", cs)
	}
	c := cs[0]
	if len(c.Peers) != 4 || len(c.Pods) != 2 || len(c.Ports) != 3 || c.AnyPeer || c.AnyPort {
		t.Fatalf("conjunction %s: want 4 peers (3 pods of y + 1 block), 2 local pods of x on n1, 3 port matches (80, 1000/0xfff8, 1008/0xfff0)", c)
	}
	if got := c.String(); !strings.Contains(got, "TCP/80,TCP/0x3e8/0xfff8,TCP/0x3f0/0xfff0") {
		t.Fatalf("ports: %s", got)
	}

	// Named port that only some pods have: the rule splits by port set.
	w.pods[0].Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	w.pods[2].Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}
	w.pods[1].Spec.Containers[0].Ports = nil // x/b (on n1) has no port named http
	w.policies = []*networkingv1.NetworkPolicy{np("p", "x", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("http")}}}},
	})}
	e = w.engines()["n2"]
	var groups []string
	for _, c := range e.Conjunctions() {
		groups = append(groups, c.Key.Group)
	}
	sort.Strings(groups)
	if strings.Join(groups, " ") != "TCP/8080 TCP/9090" {
		t.Fatalf("groups = %v, want TCP/8080 (x/a) and TCP/9090 (x/c)", groups)
	}
}

// TestUnknownLocalPodIsIsolated: an attachment whose Pod the API does not know is
// isolated both ways (fail closed), and becomes open when the Pod appears.
func TestUnknownLocalPodIsIsolated(t *testing.T) {
	e := NewEngine(nil)
	ch := e.SetLocalPod(LocalPod{Namespace: "x", Name: "a", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}, OFPort: 3})
	if len(ch.Isolation) != 1 || !ch.Isolation[0].New.Ingress || !ch.Isolation[0].New.Egress {
		t.Fatalf("unknown local pod: %+v, want isolated both ways", ch.Isolation)
	}
	w := newWorld()
	ch = e.UpsertPod(ConvertPod(w.pods[0]))
	if len(ch.Isolation) != 1 || ch.Isolation[0].New.Ingress || ch.Isolation[0].New.Egress {
		t.Fatalf("known local pod with no policy: %+v, want open", ch.Isolation)
	}
}

func TestChangesMerge(t *testing.T) {
	k1 := ConjKey{RuleKey: RuleKey{Namespace: "x", Policy: "p", Direction: Ingress}, Group: "*"}
	c1 := &Conjunction{Key: k1, ID: 1}
	c1b := &Conjunction{Key: k1, ID: 1, AnyPeer: true}
	m := Changes{Conjunctions: []ConjChange{{New: c1}}}.Merge(Changes{Conjunctions: []ConjChange{{Old: c1, New: c1b}}})
	if len(m.Conjunctions) != 1 || m.Conjunctions[0].Old != nil || m.Conjunctions[0].New != c1b {
		t.Fatalf("add+change = %+v, want one add of the new state", m.Conjunctions)
	}
	m = m.Merge(Changes{Conjunctions: []ConjChange{{Old: c1b}}})
	if len(m.Conjunctions) != 0 {
		t.Fatalf("add+remove = %+v, want nothing", m.Conjunctions)
	}
}

func TestPodByIP(t *testing.T) {
	e := NewEngine(nil)
	ip := netip.MustParseAddr("10.244.2.7")
	e.UpsertPod(&Pod{Namespace: "x", Name: "old", IPs: []netip.Addr{ip}, Terminal: true})
	if p := e.PodByIP(ip); p == nil || p.Name != "old" {
		t.Fatalf("PodByIP = %v, want the terminated pod when no other has the address", p)
	}
	e.UpsertPod(&Pod{Namespace: "y", Name: "new", IPs: []netip.Addr{ip}})
	if p := e.PodByIP(ip); p == nil || p.Key() != "y/new" {
		t.Fatalf("PodByIP = %v, want y/new (a running pod wins over a terminated one)", p)
	}
	if p := e.PodByIP(netip.MustParseAddr("10.244.2.8")); p != nil {
		t.Fatalf("PodByIP of an unknown address = %v", p)
	}
}

// TestPeerChangingLabelsAndAddressAtOnce: a peer pod whose labels and address change in
// one event while it stays a peer (its labels still match) is a peer by its new address
// and no longer by its old one, also after another pod's attach recompiled the rule
// (the rule's peer prefixes are reused across attaches until a peer changes).
func TestPeerChangingLabelsAndAddressAtOnce(t *testing.T) {
	e := NewEngine(nil)
	e.UpsertNamespace(&Namespace{Name: "x"})
	e.UpsertPolicy(&Policy{Namespace: "x", Name: "from-b", PodSelector: labels.SelectorFromSet(labels.Set{"app": "a"}),
		IngressType: true, Ingress: []Rule{{AllPorts: true, Peers: []Peer{{PodSelector: labels.SelectorFromSet(labels.Set{"role": "b"})}}}}})
	pod := func(name string, lbl map[string]string, ip string) *Pod {
		return &Pod{Namespace: "x", Name: name, Labels: lbl, IPs: []netip.Addr{netip.MustParseAddr(ip)}, NodeName: "n1"}
	}
	e.UpsertPod(pod("a1", map[string]string{"app": "a"}, "10.244.1.5"))
	e.UpsertPod(pod("a2", map[string]string{"app": "a"}, "10.244.1.6"))
	e.UpsertPod(pod("b", map[string]string{"role": "b"}, "10.244.2.7"))
	e.SetLocalPod(LocalPod{Namespace: "x", Name: "a1", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}, OFPort: 5})
	peers := func() []string {
		var out []string
		for _, c := range e.Conjunctions() {
			for _, p := range c.Peers {
				out = append(out, p.String())
			}
		}
		return out
	}
	if got := peers(); len(got) != 1 || got[0] != "10.244.2.7/32" {
		t.Fatalf("peers %v, want [10.244.2.7/32]", got)
	}
	// Labels and address change at once; b stays a peer (role=b still matches).
	e.UpsertPod(pod("b", map[string]string{"role": "b", "tier": "x"}, "10.244.2.9"))
	e.SetLocalPod(LocalPod{Namespace: "x", Name: "a2", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.6")}, OFPort: 6})
	if got := peers(); len(got) != 1 || got[0] != "10.244.2.9/32" {
		t.Fatalf("after b moved to 10.244.2.9 with new labels, then a2's attach: peers %v, want [10.244.2.9/32]", got)
	}
}
