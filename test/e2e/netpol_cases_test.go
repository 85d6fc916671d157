package e2e

// The 48 cases of the upstream NetworkPolicy e2e suite (kubernetes
// test/e2e/network/netpol/network_policy.go: 42 in "NetworkPolicy between server and
// client", 3 "... using UDP", 3 "... using SCTP"), as data: each case names the upstream
// test it mirrors, the objects it creates or changes step by step, and after each step the
// whole truth table it expects, for every ordered pair of the nine pods (namespaces x, y, z
// × pods a, b, c), every protocol (TCP, UDP, SCTP) and both ports (80, 81).
//
// Upstream checks one protocol and port per step; the expectations for the others follow
// from the same policies and are written out here, in the same terms upstream uses
// (everything allowed, then: a peer set to a peer set denied, all ingress of a pod denied,
// all egress of a pod denied, one pair allowed). Like upstream (ignoreLoopback), a pod's
// connection to itself is not judged: it never leaves the pod's network namespace.

import (
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	npNamespaces = []string{"x", "y", "z"}
	npPodNames   = []string{"a", "b", "c"}
	npProtocols  = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	npPorts      = []int32{80, 81}
)

// npPods returns "x/a" ... "z/c".
func npPods() []string {
	var out []string
	for _, ns := range npNamespaces {
		for _, p := range npPodNames {
			out = append(out, ns+"/"+p)
		}
	}
	return out
}

// reach is a truth table: from → to → allowed.
type reach map[string]map[string]bool

// newReach returns the table with every pair set to def.
func newReach(def bool) reach {
	r := reach{}
	for _, f := range npPods() {
		r[f] = map[string]bool{}
		for _, t := range npPods() {
			r[f][t] = def
		}
	}
	return r
}

// peerMatches: "" matches any namespace or pod.
func peerMatches(pod, ns, name string) bool {
	pns, pname, _ := strings.Cut(pod, "/")
	return (ns == "" || ns == pns) && (name == "" || name == pname)
}

// peers sets every pair whose source matches fromNS/fromPod and destination toNS/toPod
// ("" = any) to v (upstream ExpectPeer).
func (r reach) peers(fromNS, fromPod, toNS, toPod string, v bool) reach {
	for f := range r {
		for t := range r[f] {
			if peerMatches(f, fromNS, fromPod) && peerMatches(t, toNS, toPod) {
				r[f][t] = v
			}
		}
	}
	return r
}

// pair sets one pair (upstream Expect).
func (r reach) pair(from, to string, v bool) reach { r[from][to] = v; return r }

// allIngress sets every pair into pod (upstream ExpectAllIngress).
func (r reach) allIngress(pod string, v bool) reach {
	for f := range r {
		r[f][pod] = v
	}
	return r
}

// allEgress sets every pair out of pod (upstream ExpectAllEgress).
func (r reach) allEgress(pod string, v bool) reach {
	for t := range r[pod] {
		r[pod][t] = v
	}
	return r
}

// npStep is one step of a case: changes to the cluster, then the expected tables.
type npStep struct {
	// what describes the step.
	what string
	// create and update are NetworkPolicies (namespace in the object).
	create, update []*networkingv1.NetworkPolicy
	// deletePolicies deletes every policy of the case.
	deletePolicies bool
	// nsLabels adds labels to namespaces; podLabels adds labels to pods ("x/b").
	nsLabels, podLabels map[string]map[string]string
	// want gives the expected table for a protocol and port.
	want func(proto corev1.Protocol, port int32) reach
}

// npCase is one upstream test.
type npCase struct {
	// upstream is the It() text of the test mirrored.
	upstream string
	steps    []npStep
}

// ---- building policies, in upstream's terms ----

func npPolicy(ns, name string, podSel map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: podSel}},
	}
}

// ingress sets the ingress rules and adds Ingress to policyTypes (upstream SetSpecIngressRules).
func ingress(p *networkingv1.NetworkPolicy, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	p.Spec.Ingress = rules
	p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	return p
}

// egress sets the egress rules and adds Egress to policyTypes (upstream SetSpecEgressRules).
func egress(p *networkingv1.NetworkPolicy, rules ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	p.Spec.Egress = rules
	p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	return p
}

func labels(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

const nsName = "kubernetes.io/metadata.name" // set by the API server on every namespace

func from(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: peers}
}

func to(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers}
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func nsPodPeer(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func npPort(proto corev1.Protocol, port int) networkingv1.NetworkPolicyPort {
	p := proto
	v := intstr.FromInt32(int32(port))
	return networkingv1.NetworkPolicyPort{Protocol: &p, Port: &v}
}

func npNamedPort(name string) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Port: &v}
}

func npProtoOnly(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	p := proto
	return networkingv1.NetworkPolicyPort{Protocol: &p}
}

func withPorts(r networkingv1.NetworkPolicyIngressRule, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyIngressRule {
	r.Ports = ports
	return r
}

func egressPorts(r networkingv1.NetworkPolicyEgressRule, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyEgressRule {
	r.Ports = ports
	return r
}

// same returns a want that does not depend on protocol or port.
func same(f func() reach) func(corev1.Protocol, int32) reach {
	return func(corev1.Protocol, int32) reach { return f() }
}

// only returns a want that is f for protocol p and port (0 = both ports), and g otherwise.
func only(p corev1.Protocol, port int32, f, g func() reach) func(corev1.Protocol, int32) reach {
	return func(pp corev1.Protocol, pt int32) reach {
		if pp == p && (port == 0 || pt == port) {
			return f()
		}
		return g()
	}
}

// npCases returns the 48 cases. podIP gives a pod's address ("y/b"), which the ipBlock
// cases need.
func npCases(podIP func(string) string) []npCase {
	all := func() reach { return newReach(true) }
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP

	// Shared by the TCP, UDP and SCTP "Ports" cases: x/a takes PROTO/81 from namespace y only.
	portsCase := func(proto corev1.Protocol) npStep {
		return npStep{
			what:   "x/a allows " + string(proto) + "/81 from namespace y only",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-port-81-from-y", map[string]string{"pod": "a"}), withPorts(from(nsPeer(labels(nsName, "y"))), npPort(proto, 81)))},
			want: only(proto, 81,
				func() reach { return all().peers("x", "", "x", "a", false).peers("z", "", "x", "a", false) },
				func() reach { return all().allIngress("x/a", false) }),
		}
	}
	// x/a allows y/a only (namespace and pod selector in one peer).
	yaOnly := func() npStep {
		return npStep{
			what:   "x/a allows only y/a",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-y-a", map[string]string{"pod": "a"}), from(nsPodPeer(labels(nsName, "y"), labels("pod", "a"))))},
			want:   same(func() reach { return all().allIngress("x/a", false).pair("y/a", "x/a", true) }),
		}
	}
	denyIngressX := func() npStep {
		return npStep{
			what:   "namespace x denies all ingress",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "deny-ingress", nil))},
			want:   same(func() reach { return all().peers("", "", "x", "", false) }),
		}
	}

	return []npCase{
		{"should support a 'default-deny-ingress' policy", []npStep{denyIngressX()}},
		{"should support a 'default-deny-all' policy", []npStep{{
			what:   "namespace x denies all ingress and egress",
			create: []*networkingv1.NetworkPolicy{egress(ingress(npPolicy("x", "deny-all", nil)))},
			want:   same(func() reach { return all().peers("", "", "x", "", false).peers("x", "", "", "", false) }),
		}}},
		{"should enforce policy to allow traffic from pods within server namespace based on PodSelector", []npStep{{
			what:   "x/a allows x/b",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "x-a-allows-x-b", map[string]string{"pod": "a"}), from(podPeer(labels("pod", "b"))))},
			want:   same(func() reach { return all().allIngress("x/a", false).pair("x/b", "x/a", true) }),
		}}},
		{"should enforce policy to allow ingress traffic for a target", []npStep{{
			what: "namespace x denies ingress, x/a allows all pods of all namespaces",
			create: []*networkingv1.NetworkPolicy{
				ingress(npPolicy("x", "deny-all", nil)),
				ingress(npPolicy("x", "allow-all-to-a", map[string]string{"pod": "a"}), from(nsPodPeer(&metav1.LabelSelector{}, &metav1.LabelSelector{}))),
			},
			want: same(func() reach { return all().allIngress("x/b", false).allIngress("x/c", false) }),
		}}},
		{"should enforce policy to allow ingress traffic from pods in all namespaces", []npStep{{
			what:   "x/a allows every namespace",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-from-another-ns", map[string]string{"pod": "a"}), from(nsPeer(labels())))},
			want:   same(all),
		}}},
		{"should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector", []npStep{{
			what:   "x/a allows namespace y",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-client-a-via-ns-selector", map[string]string{"pod": "a"}), from(nsPeer(labels(nsName, "y"))))},
			want:   same(func() reach { return all().peers("x", "", "x", "a", false).peers("z", "", "x", "a", false) }),
		}}},
		{"should enforce policy based on PodSelector with MatchExpressions", []npStep{{
			what:   "x/a allows pod In (b)",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "x-a-allows-x-b", map[string]string{"pod": "a"}), from(podPeer(expr("pod", metav1.LabelSelectorOpIn, "b"))))},
			want:   same(func() reach { return all().allIngress("x/a", false).pair("x/b", "x/a", true) }),
		}}},
		{"should enforce policy based on NamespaceSelector with MatchExpressions", []npStep{{
			what:   "x/a allows namespace In (y)",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ns-y-match-selector", map[string]string{"pod": "a"}), from(nsPeer(expr(nsName, metav1.LabelSelectorOpIn, "y"))))},
			want:   same(func() reach { return all().peers("x", "", "x", "a", false).peers("z", "", "x", "a", false) }),
		}}},
		{"should enforce policy based on PodSelector or NamespaceSelector", []npStep{{
			what:   "x/a allows namespaces NotIn (x) or pod b",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ns-y-match-selector", map[string]string{"pod": "a"}), from(nsPeer(expr(nsName, metav1.LabelSelectorOpNotIn, "x")), podPeer(labels("pod", "b"))))},
			want:   same(func() reach { return all().pair("x/c", "x/a", false) }),
		}}},
		{"should enforce policy based on PodSelector and NamespaceSelector", []npStep{{
			what:   "x/a allows pod b of namespaces NotIn (x)",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ns-y-podselector-and-nsselector", map[string]string{"pod": "a"}), from(nsPodPeer(expr(nsName, metav1.LabelSelectorOpNotIn, "x"), labels("pod", "b"))))},
			want:   same(func() reach { return all().allIngress("x/a", false).pair("y/b", "x/a", true).pair("z/b", "x/a", true) }),
		}}},
		{"should enforce policy based on Multiple PodSelectors and NamespaceSelectors", []npStep{{
			what:   "x/a allows pods In (b, c) of namespaces NotIn (x)",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ns-y-z-pod-b-c", map[string]string{"pod": "a"}), from(nsPodPeer(expr(nsName, metav1.LabelSelectorOpNotIn, "x"), expr("pod", metav1.LabelSelectorOpIn, "b", "c"))))},
			want: same(func() reach {
				return all().peers("x", "", "x", "a", false).pair("y/a", "x/a", false).pair("z/a", "x/a", false)
			}),
		}}},
		{"should enforce policy based on any PodSelectors", []npStep{{
			what:   "x/a allows pod b or pod c",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ns-x-pod-b-c", map[string]string{"pod": "a"}), from(podPeer(labels("pod", "b")), podPeer(labels("pod", "c"))))},
			want:   same(func() reach { return all().allIngress("x/a", false).pair("x/b", "x/a", true).pair("x/c", "x/a", true) }),
		}}},
		{"should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector", []npStep{yaOnly()}},
		{"should enforce policy based on Ports", []npStep{portsCase(tcp)}},
		{"should enforce multiple, stacked policies with overlapping podSelectors", []npStep{
			portsCase(tcp),
			{
				what:   "a second policy lets namespace y reach x/a on TCP/80 too",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-client-a-via-ns-selector-80", map[string]string{"pod": "a"}), withPorts(from(nsPeer(labels(nsName, "y"))), npPort(tcp, 80)))},
				want: only(tcp, 0,
					func() reach { return all().peers("x", "", "x", "a", false).peers("z", "", "x", "a", false) },
					func() reach { return all().allIngress("x/a", false) }),
			},
		}},
		{"should support allow-all policy", []npStep{{
			what:   "namespace x allows all ingress",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-all", nil), networkingv1.NetworkPolicyIngressRule{})},
			want:   same(all),
		}}},
		{"should allow ingress access on one named port", []npStep{{
			what:   "namespace x allows ingress on port serve-81-tcp",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-all", nil), withPorts(networkingv1.NetworkPolicyIngressRule{}, npNamedPort("serve-81-tcp")))},
			want:   only(tcp, 81, all, func() reach { return all().peers("", "", "x", "", false) }),
		}}},
		{"should allow ingress access from namespace on one named port", []npStep{{
			what:   "x/a allows namespace y on serve-80-tcp",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-client-a-via-ns-selector-80", map[string]string{"pod": "a"}), withPorts(from(nsPeer(labels(nsName, "y"))), npNamedPortProto("serve-80-tcp", tcp)))},
			want: only(tcp, 80,
				func() reach { return all().peers("x", "", "x", "a", false).peers("z", "", "x", "a", false) },
				func() reach { return all().allIngress("x/a", false) }),
		}}},
		{"should allow egress access on one named port", []npStep{{
			what:   "namespace x allows egress on serve-80-tcp only",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-egress", nil), egressPorts(networkingv1.NetworkPolicyEgressRule{}, npNamedPort("serve-80-tcp")))},
			want:   only(tcp, 80, all, func() reach { return all().peers("x", "", "", "", false) }),
		}}},
		{"should enforce updated policy", []npStep{
			{
				what:   "namespace x allows all ingress",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-all-mutate-to-deny-all", nil), networkingv1.NetworkPolicyIngressRule{})},
				want:   same(all),
			},
			{
				what:   "the policy is updated to deny all ingress",
				update: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-all-mutate-to-deny-all", nil))},
				want:   same(func() reach { return all().peers("", "", "x", "", false) }),
			},
		}},
		{"should allow ingress access from updated namespace", []npStep{
			{
				what:   "x/a allows namespaces labelled ns2=updated (none yet)",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-client-a-via-ns-selector", map[string]string{"pod": "a"}), from(nsPeer(labels("ns2", "updated"))))},
				want:   same(func() reach { return all().allIngress("x/a", false) }),
			},
			{
				what:     "namespace y gets ns2=updated",
				nsLabels: map[string]map[string]string{"y": {"ns2": "updated"}},
				want:     same(func() reach { return all().allIngress("x/a", false).peers("y", "", "", "", true) }),
			},
		}},
		{"should allow ingress access from updated pod", []npStep{
			{
				what:   "x/a allows pods labelled pod=b,pod2=updated (none yet)",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-client-a-via-pod-selector", map[string]string{"pod": "a"}), from(podPeer(labels("pod", "b", "pod2", "updated"))))},
				want:   same(func() reach { return all().allIngress("x/a", false) }),
			},
			{
				what:      "x/b gets pod2=updated",
				podLabels: map[string]map[string]string{"x/b": {"pod2": "updated"}},
				want:      same(func() reach { return all().allIngress("x/a", false).pair("x/b", "x/a", true) }),
			},
		}},
		{"should deny ingress from pods on other namespaces", []npStep{{
			what:   "namespace x allows ingress from its own pods only",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "deny-empty-policy", nil), from(podPeer(labels())))},
			want:   same(func() reach { return all().peers("y", "", "x", "", false).peers("z", "", "x", "", false) }),
		}}},
		{"should deny ingress access to updated pod", []npStep{
			{
				what:   "pods labelled target=isolated deny ingress (none yet)",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "deny-ingress-via-label-selector", map[string]string{"target": "isolated"}))},
				want:   same(all),
			},
			{
				what:      "x/a gets target=isolated",
				podLabels: map[string]map[string]string{"x/a": {"target": "isolated"}},
				want:      same(func() reach { return all().allIngress("x/a", false) }),
			},
		}},
		{"should deny egress from pods based on PodSelector", []npStep{{
			what:   "x/a denies all egress",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "deny-egress-pod-a", map[string]string{"pod": "a"}))},
			want:   same(func() reach { return all().allEgress("x/a", false) }),
		}}},
		{"should deny egress from all pods in a namespace", []npStep{{
			what:   "namespace x denies all egress",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "deny-egress-ns-x", nil))},
			want:   same(func() reach { return all().peers("x", "", "", "", false) }),
		}}},
		{"should work with Ingress, Egress specified together", []npStep{{
			what: "x/a allows ingress from x/b and egress on TCP/80 only",
			create: []*networkingv1.NetworkPolicy{ingress(egress(npPolicy("x", "allow-client-a-via-pod-selector", map[string]string{"pod": "a"}),
				egressPorts(networkingv1.NetworkPolicyEgressRule{}, npPortNoProto(80))), from(podPeer(labels("pod", "b"))))},
			want: only(tcp, 80,
				func() reach { return all().allIngress("x/a", false).pair("x/b", "x/a", true) },
				func() reach { return all().allIngress("x/a", false).allEgress("x/a", false).pair("x/b", "x/a", true) }),
		}}},
		{"should support denying of egress traffic on the client side (even if the server explicitly allows this traffic)", []npStep{{
			what: "x/a may only reach y/a; y/a and y/b allow x/a",
			create: []*networkingv1.NetworkPolicy{
				egress(npPolicy("x", "allow-to-ns-y-pod-a", map[string]string{"pod": "a"}), to(nsPodPeer(labels(nsName, "y"), labels("pod", "a")))),
				ingress(npPolicy("y", "allow-from-xa-on-ya-match-selector", map[string]string{"pod": "a"}), from(nsPodPeer(labels(nsName, "x"), labels("pod", "a")))),
				ingress(npPolicy("y", "allow-from-xa-on-yb-match-selector", map[string]string{"pod": "b"}), from(nsPodPeer(labels(nsName, "x"), labels("pod", "a")))),
			},
			want: same(func() reach {
				return all().peers("x", "a", "", "", false).peers("", "", "y", "a", false).pair("x/a", "y/a", true).peers("", "", "y", "b", false)
			}),
		}}},
		{"should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector", []npStep{{
			what:   "x/a may only reach y/a",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-to-ns-y-pod-a", map[string]string{"pod": "a"}), to(nsPodPeer(labels(nsName, "y"), labels("pod", "a"))))},
			want:   same(func() reach { return all().allEgress("x/a", false).pair("x/a", "y/a", true) }),
		}}},
		{"should enforce ingress policy allowing any port traffic to a server on a specific protocol", []npStep{{
			what:   "x/a allows TCP only (any port)",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ingress-by-proto", map[string]string{"pod": "a"}), withPorts(networkingv1.NetworkPolicyIngressRule{}, npProtoOnly(tcp)))},
			want:   only(tcp, 0, all, func() reach { return all().allIngress("x/a", false) }),
		}}},
		{"should enforce multiple ingress policies with ingress allow-all policy taking precedence", []npStep{
			{
				what:   "namespace x allows ingress on port 80 only",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ingress-port-80", nil), withPorts(networkingv1.NetworkPolicyIngressRule{}, npPortNoProto(80)))},
				want:   only(tcp, 80, all, func() reach { return all().peers("", "", "x", "", false) }),
			},
			{
				what:   "a second policy allows all ingress",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-ingress", nil), networkingv1.NetworkPolicyIngressRule{})},
				want:   same(all),
			},
		}},
		{"should enforce multiple egress policies with egress allow-all policy taking precedence", []npStep{
			{
				what:   "namespace x allows egress on port 80 only",
				create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-egress-port-80", nil), egressPorts(networkingv1.NetworkPolicyEgressRule{}, npPortNoProto(80)))},
				want:   only(tcp, 80, all, func() reach { return all().peers("x", "", "", "", false) }),
			},
			{
				what:   "a second policy allows all egress",
				create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-egress", nil), networkingv1.NetworkPolicyEgressRule{})},
				want:   same(all),
			},
		}},
		{"should stop enforcing policies after they are deleted", []npStep{
			{
				what:   "namespace x denies all ingress and egress",
				create: []*networkingv1.NetworkPolicy{egress(ingress(npPolicy("x", "deny-all", nil)))},
				want:   same(func() reach { return all().peers("x", "", "", "", false).peers("", "", "x", "", false) }),
			},
			{what: "every policy deleted", deletePolicies: true, want: same(all)},
		}},
		{"should allow egress access to server in CIDR block", []npStep{{
			what:   "x/a may only reach y/b's address",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-client-a-via-cidr-egress-rule", map[string]string{"pod": "a"}), to(blockPeer(hostCIDR(podIP("y/b")))))},
			want:   same(func() reach { return all().allEgress("x/a", false).pair("x/a", "y/b", true) }),
		}}},
		{"should enforce except clause while egress access to server in CIDR block", []npStep{{
			what:   "x/a may reach x/b's large CIDR (/16, IPv6 /4) except x/b",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-client-a-via-cidr-egress-rule", map[string]string{"pod": "a"}), to(blockPeer(largeCIDR(podIP("x/b")), hostCIDR(podIP("x/b")))))},
			want:   same(func() reach { return all().pair("x/a", "x/b", false) }),
		}}},
		{"should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed", []npStep{
			{
				what:   "x/a may reach x/b's large CIDR (/16, IPv6 /4) except x/b",
				create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-client-a-via-cidr-egress-rule", map[string]string{"pod": "a"}), to(blockPeer(largeCIDR(podIP("x/b")), hostCIDR(podIP("x/b")))))},
				want:   same(func() reach { return all().pair("x/a", "x/b", false) }),
			},
			{
				what:   "the policy is updated to allow x/b's address only",
				update: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-client-a-via-cidr-egress-rule", map[string]string{"pod": "a"}), to(blockPeer(hostCIDR(podIP("x/b")))))},
				want:   same(func() reach { return all().allEgress("x/a", false).pair("x/a", "x/b", true) }),
			},
		}},
		{"should enforce policies to check ingress and egress policies can be controlled independently based on PodSelector", []npStep{
			{
				what:   "x/a allows all egress",
				create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-egress-for-target", map[string]string{"pod": "a"}), networkingv1.NetworkPolicyEgressRule{})},
				want:   same(all),
			},
			{
				what:   "x/a denies all ingress",
				create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "deny-ingress-via-label-selector", map[string]string{"pod": "a"}))},
				want:   same(func() reach { return all().allIngress("x/a", false) }),
			},
		}},
		{"should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP", []npStep{{
			what: "namespace x denies ingress; x/a allows SCTP/81",
			create: []*networkingv1.NetworkPolicy{
				ingress(npPolicy("x", "deny-ingress", nil)),
				ingress(npPolicy("x", "allow-only-sctp-ingress-on-port-81", map[string]string{"pod": "a"}), withPorts(networkingv1.NetworkPolicyIngressRule{}, npPort(sctp, 81))),
			},
			want: only(sctp, 81,
				func() reach { return all().allIngress("x/b", false).allIngress("x/c", false) },
				func() reach { return all().peers("", "", "x", "", false) }),
		}}},
		{"should properly isolate pods that are selected by a policy allowing SCTP, even if the plugin doesn't support SCTP", []npStep{{
			what:   "x/a allows SCTP/80 only",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-only-sctp-ingress-on-port-80", map[string]string{"pod": "a"}), withPorts(networkingv1.NetworkPolicyIngressRule{}, npPort(sctp, 80)))},
			want:   only(sctp, 80, all, func() reach { return all().allIngress("x/a", false) }),
		}}},
		{"should not allow access by TCP when a policy specifies only UDP", []npStep{{
			what:   "x/a allows UDP/81 only",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-only-udp-ingress-on-port-81", map[string]string{"pod": "a"}), withPorts(networkingv1.NetworkPolicyIngressRule{}, npPort(udp, 81)))},
			want:   only(udp, 81, all, func() reach { return all().allIngress("x/a", false) }),
		}}},
		{"should enforce policy to allow traffic based on NamespaceSelector with MatchLabels using default ns label", []npStep{{
			what:   "x/a allows namespace y (by its kubernetes.io/metadata.name)",
			create: []*networkingv1.NetworkPolicy{ingress(npPolicy("x", "allow-client-a-via-ns-selector-for-immutable-ns-label", map[string]string{"pod": "a"}), from(nsPeer(labels(nsName, "y"))))},
			want:   same(func() reach { return all().peers("x", "", "x", "a", false).peers("z", "", "x", "a", false) }),
		}}},
		{"should enforce policy based on NamespaceSelector with MatchExpressions using default ns label", []npStep{{
			what:   "x/a may reach namespaces NotIn (y)",
			create: []*networkingv1.NetworkPolicy{egress(npPolicy("x", "allow-ns-y-match-selector-for-immutable-ns-label", map[string]string{"pod": "a"}), to(nsPeer(expr(nsName, metav1.LabelSelectorOpNotIn, "y"))))},
			want:   same(func() reach { return all().peers("x", "a", "y", "", false) }),
		}}},

		// "NetworkPolicy between server and client using UDP"
		{"UDP: should support a 'default-deny-ingress' policy", []npStep{denyIngressX()}},
		{"UDP: should enforce policy based on Ports", []npStep{portsCase(udp)}},
		{"UDP: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector", []npStep{yaOnly()}},

		// "NetworkPolicy between server and client using SCTP"
		{"SCTP: should support a 'default-deny-ingress' policy", []npStep{denyIngressX()}},
		{"SCTP: should enforce policy based on Ports", []npStep{portsCase(sctp)}},
		{"SCTP: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector", []npStep{yaOnly()}},
	}
}

// npNamedPortProto is a named port with an explicit protocol.
func npNamedPortProto(name string, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	p := npNamedPort(name)
	pr := proto
	p.Protocol = &pr
	return p
}

// npPortNoProto is a numeric port without a protocol (TCP by default).
func npPortNoProto(port int) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(int32(port))
	return networkingv1.NetworkPolicyPort{Port: &v}
}

// largeCIDR is upstream makeLargeCIDRForIP: the address's /16 for IPv4 (as upstream had
// it when these cases were written; it now takes the /4), the /4 holding it for IPv6 (as
// upstream's current one does for both families: all the pods' ULA addresses).
func largeCIDR(ip string) string {
	if strings.Contains(ip, ":") {
		_, n, _ := net.ParseCIDR(ip + "/4")
		return n.String()
	}
	parts := strings.Split(ip, ".")
	return fmt.Sprintf("%s.%s.0.0/16", parts[0], parts[1])
}

// hostCIDR is the address alone as a CIDR: /32 for IPv4, /128 for IPv6 (upstream's
// hostMask).
func hostCIDR(ip string) string {
	if strings.Contains(ip, ":") {
		return ip + "/128"
	}
	return ip + "/32"
}
