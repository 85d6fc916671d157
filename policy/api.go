package policy

// From API objects to the model, and the informer transforms that keep the informers'
// caches small: a Pod in the cache keeps its name, namespace, labels, node name, host
// network flag, container ports, phase and pod IPs, nothing else (no annotations, managed
// fields, volumes, env, status conditions), so tens of thousands of pods cost a few MB.

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// StripPod is the Pod informer's transform (cache.TransformFunc): a *corev1.Pod becomes a
// new Pod holding only name, namespace, UID, resourceVersion, labels, spec.nodeName,
// spec.hostNetwork, the containers' (and init containers') ports, status.phase,
// status.podIP and status.podIPs. Anything else is returned unchanged.
func StripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Labels: p.Labels,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
		},
	}
	keep := func(cs []corev1.Container) []corev1.Container {
		var kept []corev1.Container
		for _, c := range cs {
			if len(c.Ports) > 0 {
				kept = append(kept, corev1.Container{Name: c.Name, Ports: c.Ports})
			}
		}
		return kept
	}
	out.Spec.Containers = keep(p.Spec.Containers)
	out.Spec.InitContainers = keep(p.Spec.InitContainers)
	return out, nil
}

// StripNamespace is the Namespace informer's transform: name, UID, resourceVersion and
// labels only.
func StripNamespace(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
	}}, nil
}

// StripNetworkPolicy is the NetworkPolicy informer's transform: metadata reduced to name,
// namespace, UID, resourceVersion and generation (annotations such as
// kubectl.kubernetes.io/last-applied-configuration and managed fields go), spec kept.
func StripNetworkPolicy(obj any) (any, error) {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return obj, nil
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: np.Name, Namespace: np.Namespace, UID: np.UID,
			ResourceVersion: np.ResourceVersion, Generation: np.Generation,
		},
		Spec: np.Spec,
	}, nil
}

// ConvertPod returns the model's view of p: its pod IPs of both families (status.podIPs,
// else status.podIP; IPv4-mapped IPv6 unmapped), container ports (TCP when the protocol is unset; ports outside 1..65535
// dropped), host network, and Terminal for phase Succeeded or Failed.
func ConvertPod(p *corev1.Pod) *Pod {
	out := &Pod{
		Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, NodeName: p.Spec.NodeName,
		HostNetwork: p.Spec.HostNetwork,
		Terminal:    p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
	}
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Zone() == "" {
			if a = a.Unmap(); !slices.Contains(out.IPs, a) {
				out.IPs = append(out.IPs, a)
			}
		}
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, cp := range c.Ports {
				proto, ok := convertProtocol(cp.Protocol)
				if !ok || cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
					continue
				}
				out.Ports = append(out.Ports, ContainerPort{Name: cp.Name, Protocol: proto, Port: uint16(cp.ContainerPort)})
			}
		}
	}
	return out
}

// ConvertNamespace returns the model's view of n.
func ConvertNamespace(n *corev1.Namespace) *Namespace {
	return &Namespace{Name: n.Name, Labels: n.Labels}
}

// convertProtocol maps a core/v1 protocol to ours; "" is TCP (the API's default).
func convertProtocol(p corev1.Protocol) (Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return ProtocolTCP, true
	case corev1.ProtocolUDP:
		return ProtocolUDP, true
	case corev1.ProtocolSCTP:
		return ProtocolSCTP, true
	}
	return 0, false
}

// selector parses a label selector (metav1.LabelSelectorAsSelector: matchLabels and
// matchExpressions with In, NotIn, Exists, DoesNotExist). A nil selector is "not set"
// (nil); an empty one selects everything; an invalid one (which the API server refuses)
// selects nothing.
func selector(s *metav1.LabelSelector) labels.Selector {
	if s == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

// ConvertPolicy returns the model's view of np (networking.k8s.io/v1 NetworkPolicySpec):
//   - policyTypes defaulted as the API server does (SetDefaults_NetworkPolicy): Ingress
//     always, Egress when spec.egress has rules; listed types are taken as they are;
//   - rules of a direction not in policyTypes ignored (they cannot allow anything);
//   - podSelector as a selector (empty = every pod of the namespace);
//   - peers: ipBlock as cidr minus except (either family; an except of the other family,
//     which the API server refuses, is ignored), podSelector and/or namespaceSelector;
//   - ports: protocol TCP by default, numeric or named port, endPort ranges; a port the
//     API should have refused matches nothing rather than everything.
func ConvertPolicy(np *networkingv1.NetworkPolicy) *Policy {
	p := &Policy{Namespace: np.Namespace, Name: np.Name, PodSelector: selector(&np.Spec.PodSelector)}
	if len(np.Spec.PolicyTypes) == 0 {
		p.IngressType = true
		p.EgressType = len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			p.IngressType = true
		case networkingv1.PolicyTypeEgress:
			p.EgressType = true
		}
	}
	if p.IngressType {
		for _, r := range np.Spec.Ingress {
			p.Ingress = append(p.Ingress, convertRule(r.From, r.Ports))
		}
	}
	if p.EgressType {
		for _, r := range np.Spec.Egress {
			p.Egress = append(p.Egress, convertRule(r.To, r.Ports))
		}
	}
	return p
}

func convertRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) Rule {
	r := Rule{AllPeers: len(peers) == 0, AllPorts: len(ports) == 0}
	for _, pp := range peers {
		r.Peers = append(r.Peers, convertPeer(pp))
	}
	for _, pp := range ports {
		r.Ports = append(r.Ports, convertPort(pp))
	}
	return r
}

func convertPeer(pp networkingv1.NetworkPolicyPeer) Peer {
	if b := pp.IPBlock; b != nil {
		peer := Peer{IsIPBlock: true}
		cidr, err := netip.ParsePrefix(strings.TrimSpace(b.CIDR))
		if err != nil || cidr.Addr().Zone() != "" {
			return peer // selects nothing
		}
		var except []netip.Prefix
		for _, e := range b.Except {
			if ep, err := netip.ParsePrefix(strings.TrimSpace(e)); err == nil {
				except = append(except, ep)
			}
		}
		peer.IPBlock = ExceptCIDRs(cidr, except)
		return peer
	}
	peer := Peer{PodSelector: selector(pp.PodSelector), NamespaceSelector: selector(pp.NamespaceSelector)}
	if peer.PodSelector == nil && peer.NamespaceSelector == nil {
		// A peer with no field set is refused by the API server; never let it
		// widen the rule.
		peer.PodSelector = labels.Nothing()
	}
	return peer
}

func convertPort(pp networkingv1.NetworkPolicyPort) Port {
	proto := ProtocolTCP
	if pp.Protocol != nil {
		var ok bool
		if proto, ok = convertProtocol(*pp.Protocol); !ok {
			return Port{Invalid: true}
		}
	}
	out := Port{Protocol: proto}
	if pp.Port == nil {
		if pp.EndPort != nil {
			out.Invalid = true
		}
		return out // every port of the protocol
	}
	switch pp.Port.Type {
	case intstr.String:
		out.Name = pp.Port.StrVal
		if out.Name == "" || pp.EndPort != nil {
			out.Invalid = true
		}
	default:
		v := pp.Port.IntVal
		if v < 1 || v > 65535 {
			out.Invalid = true
			return out
		}
		out.Port = uint16(v)
		if pp.EndPort != nil {
			e := *pp.EndPort
			if e < v || e > 65535 {
				out.Invalid = true
				return out
			}
			out.EndPort = uint16(e)
		}
	}
	return out
}

// numericMatches returns the port matches of a numeric or protocol-only port; nil for a
// named or invalid one.
func (p Port) numericMatches() []PortMatch {
	if p.Invalid || p.Name != "" {
		return nil
	}
	if p.Port == 0 {
		return []PortMatch{{Protocol: p.Protocol}}
	}
	end := p.EndPort
	if end == 0 {
		end = p.Port
	}
	var out []PortMatch
	for _, m := range RangeMasks(p.Port, end) {
		out = append(out, PortMatch{Protocol: p.Protocol, PortMask: m})
	}
	return out
}

// resolve returns the matches of a named port against a pod's container ports: the port
// of the same name and protocol, if the pod has one.
func (p Port) resolve(ports []ContainerPort) (PortMatch, bool) {
	if p.Invalid || p.Name == "" {
		return PortMatch{}, false
	}
	for _, cp := range ports {
		if cp.Name == p.Name && cp.Protocol == p.Protocol {
			return PortMatch{Protocol: p.Protocol, PortMask: PortMask{Value: cp.Port, Mask: 0xffff}}, true
		}
	}
	return PortMatch{}, false
}
