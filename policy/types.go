package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Protocol is an IP protocol number a NetworkPolicyPort may name (networking.k8s.io/v1
// NetworkPolicyPort.protocol: TCP, UDP or SCTP; TCP when unset).
type Protocol uint8

// Protocols a policy port may name (IANA protocol numbers).
const (
	// ProtocolTCP is TCP (6).
	ProtocolTCP Protocol = 6
	// ProtocolUDP is UDP (17).
	ProtocolUDP Protocol = 17
	// ProtocolSCTP is SCTP (132).
	ProtocolSCTP Protocol = 132
)

// String returns the protocol's Kubernetes name (TCP, UDP, SCTP) or its number.
func (p Protocol) String() string {
	switch p {
	case ProtocolTCP:
		return "TCP"
	case ProtocolUDP:
		return "UDP"
	case ProtocolSCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto%d", uint8(p))
}

// Direction is a policy direction (networking.k8s.io/v1 PolicyType).
type Direction uint8

// Directions.
const (
	// Ingress is traffic to the selected pod: checked on the destination pod's node.
	Ingress Direction = 1
	// Egress is traffic from the selected pod: checked on the source pod's node.
	Egress Direction = 2
)

// String returns "ingress" or "egress".
func (d Direction) String() string {
	switch d {
	case Ingress:
		return "ingress"
	case Egress:
		return "egress"
	}
	return fmt.Sprintf("direction%d", uint8(d))
}

// ContainerPort is a port a pod's container declares (core/v1 ContainerPort); named ones
// are what named NetworkPolicy ports resolve to.
type ContainerPort struct {
	// Name is the port's IANA_SVC_NAME, "" for an unnamed port.
	Name string
	// Protocol is TCP, UDP or SCTP.
	Protocol Protocol
	// Port is the container port, 1..65535.
	Port uint16
}

// Pod is the model's view of a Pod: only what policy needs.
type Pod struct {
	// Namespace and Name identify the pod.
	Namespace, Name string
	// Labels are the pod's labels (never modified by the model).
	Labels map[string]string
	// IPs are the pod's addresses of both families (status.podIPs), IPv4-mapped IPv6
	// ones unmapped; unparsable ones are dropped.
	IPs []netip.Addr
	// NodeName is spec.nodeName ("" while unscheduled).
	NodeName string
	// Ports are the containers' declared ports (init containers' included).
	Ports []ContainerPort
	// HostNetwork is spec.hostNetwork: such a pod's address is its node's, so it is never
	// a peer.
	HostNetwork bool
	// Terminal is true once the pod has Succeeded or Failed: its address may be reused, so
	// it is never a peer.
	Terminal bool
}

// Key returns "namespace/name".
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Namespace is the model's view of a Namespace.
type Namespace struct {
	// Name is the namespace's name.
	Name string
	// Labels are its labels (the API server adds kubernetes.io/metadata.name=NAME).
	Labels map[string]string
}

// Policy is a NetworkPolicy in the model, converted once (ConvertPolicy): selectors
// parsed, policyTypes defaulted, ipBlocks split, ports checked.
type Policy struct {
	// Namespace and Name identify the policy.
	Namespace, Name string
	// PodSelector selects the pods of Namespace the policy applies to (empty = all).
	PodSelector labels.Selector
	// IngressType and EgressType are the defaulted policyTypes: a selected pod is isolated
	// for the directions set.
	IngressType, EgressType bool
	// Ingress and Egress are the rules, in API order (the index is part of RuleKey).
	Ingress, Egress []Rule
}

// Key returns "namespace/name".
func (p *Policy) Key() string { return p.Namespace + "/" + p.Name }

// Rule is one ingress or egress rule.
type Rule struct {
	// AllPeers is true when the rule lists no peers (from/to empty or missing): any
	// address matches.
	AllPeers bool
	// Peers are the listed peers (when AllPeers is false). A rule whose peers all select
	// nothing matches nothing.
	Peers []Peer
	// AllPorts is true when the rule lists no ports: any protocol and port matches.
	AllPorts bool
	// Ports are the listed ports (when AllPorts is false).
	Ports []Port
}

// Peer is one NetworkPolicyPeer: an ipBlock, or pods chosen by selectors.
type Peer struct {
	// IPBlock holds the ipBlock's cidr minus its excepts as prefixes (ExceptCIDRs); set
	// only when IsIPBlock.
	IPBlock []netip.Prefix
	// IsIPBlock says the peer is an ipBlock.
	IsIPBlock bool
	// PodSelector selects pods (nil = not set: with a namespace selector, every pod of
	// the selected namespaces).
	PodSelector labels.Selector
	// NamespaceSelector selects namespaces (nil = not set: the policy's own namespace).
	NamespaceSelector labels.Selector
}

// Port is one NetworkPolicyPort.
type Port struct {
	// Protocol is TCP (the default), UDP or SCTP.
	Protocol Protocol
	// Port is the port number, 0 = every port of Protocol (when Name is "").
	Port uint16
	// EndPort is the last port of the range Port..EndPort, 0 = Port alone.
	EndPort uint16
	// Name is a named port, resolved per destination pod; Port is then 0.
	Name string
	// Invalid marks a port the API should have refused (unknown protocol, endPort below
	// port or with a named port): it matches nothing.
	Invalid bool
}

// PortMatch is one clause value of a port dimension: a protocol and a masked
// destination port (Mask 0 = every port of the protocol).
type PortMatch struct {
	// Protocol is TCP, UDP or SCTP.
	Protocol Protocol
	PortMask
}

// String returns e.g. "TCP/80", "UDP/0x400/0xfc00" or "SCTP/*".
func (m PortMatch) String() string {
	if m.Mask == 0 {
		return m.Protocol.String() + "/*"
	}
	return m.Protocol.String() + "/" + m.PortMask.String()
}

func portMatchLess(a, b PortMatch) bool {
	if a.Protocol != b.Protocol {
		return a.Protocol < b.Protocol
	}
	if a.Value != b.Value {
		return a.Value < b.Value
	}
	return a.Mask < b.Mask
}

// LocalPod is a pod attached to this node: its address and its port on the bridge.
type LocalPod struct {
	// Namespace and Name identify the pod (from CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME).
	Namespace, Name string
	// IPs are the pod's addresses on this node (its attachment's), in the order of the
	// node's pod subnets: its IPv4 address and, on a dual-stack node, its IPv6 one.
	IPs []netip.Addr
	// OFPort is the pod's ofport on the integration bridge (1..0xfffffeff).
	OFPort uint32
}

// Key returns "namespace/name".
func (p LocalPod) Key() string { return p.Namespace + "/" + p.Name }

// Equal reports whether p and q are the same attachment: name, addresses (in order) and
// ofport.
func (p LocalPod) Equal(q LocalPod) bool {
	return p.Namespace == q.Namespace && p.Name == q.Name && p.OFPort == q.OFPort && slices.Equal(p.IPs, q.IPs)
}

// RuleKey names one rule of one policy.
type RuleKey struct {
	// Namespace and Policy name the NetworkPolicy.
	Namespace, Policy string
	// Direction is Ingress (spec.ingress) or Egress (spec.egress).
	Direction Direction
	// Index is the rule's position in spec.ingress or spec.egress (0-based).
	Index int
}

// String returns e.g. "ns/policy ingress[0]".
func (k RuleKey) String() string {
	return fmt.Sprintf("%s/%s %s[%d]", k.Namespace, k.Policy, k.Direction, k.Index)
}

// ConjKey names one conjunction: a rule, and the port group it was split into (named
// ports that resolve differently split a rule; "" for a rule that is not split).
type ConjKey struct {
	RuleKey
	// Group is the port set shared by the conjunction's pods (ingress) or peers (egress),
	// e.g. "TCP/80,UDP/53", or "*" for any port.
	Group string
}

// String returns e.g. "ns/policy ingress[0] TCP/80,UDP/53": the rule and its port group.
func (k ConjKey) String() string { return k.RuleKey.String() + " " + k.Group }

// Conjunction is one compiled conjunctive match: traffic matches when the local pod, the
// peer address and the port each match one value of their clause. A dimension marked
// Any has no clause.
type Conjunction struct {
	// Key names the rule and port group.
	Key ConjKey
	// ID is the conjunction id (1..0xfffffffe), stable while the conjunction exists.
	ID uint32
	// Pods are the local pods the rule applies to (sources for egress, destinations for
	// ingress), sorted by IP. Empty only while the pods the rule applies to are
	// scheduled to this node and not attached yet (Engine.SetNode): the conjunction then
	// has its peer and port clauses only and matches nothing.
	Pods []LocalPod
	// AnyPeer is true when every address matches (no peer clause).
	AnyPeer bool
	// Peers are the allowed peer prefixes (sources for ingress, destinations for egress),
	// sorted; never empty unless AnyPeer.
	Peers []netip.Prefix
	// AnyPort is true when every protocol and port matches (no port clause).
	AnyPort bool
	// Ports are the allowed destination ports, sorted; never empty unless AnyPort.
	Ports []PortMatch
}

// Equal reports whether c and o have the same id and clauses.
func (c *Conjunction) Equal(o *Conjunction) bool {
	if c == nil || o == nil {
		return c == o
	}
	if c.ID != o.ID || c.Key != o.Key || c.AnyPeer != o.AnyPeer || c.AnyPort != o.AnyPort ||
		len(c.Pods) != len(o.Pods) || len(c.Peers) != len(o.Peers) || len(c.Ports) != len(o.Ports) {
		return false
	}
	for i := range c.Pods {
		if !c.Pods[i].Equal(o.Pods[i]) {
			return false
		}
	}
	for i := range c.Peers {
		if c.Peers[i] != o.Peers[i] {
			return false
		}
	}
	for i := range c.Ports {
		if c.Ports[i] != o.Ports[i] {
			return false
		}
	}
	return true
}

// String describes the conjunction for logs and tests.
func (c *Conjunction) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s group=%s id=%d pods=[", c.Key.RuleKey, c.Key.Group, c.ID)
	for i, p := range c.Pods {
		if i > 0 {
			b.WriteByte(' ')
		}
		ips := make([]string, len(p.IPs))
		for i, ip := range p.IPs {
			ips[i] = ip.String()
		}
		fmt.Fprintf(&b, "%s(%s,%d)", p.Key(), strings.Join(ips, ","), p.OFPort)
	}
	b.WriteString("] peers=")
	if c.AnyPeer {
		b.WriteString("*")
	} else {
		ps := make([]string, len(c.Peers))
		for i, p := range c.Peers {
			ps[i] = p.String()
		}
		b.WriteString("[" + strings.Join(ps, " ") + "]")
	}
	b.WriteString(" ports=")
	if c.AnyPort {
		b.WriteString("*")
	} else {
		b.WriteString("[" + portSig(c.Ports) + "]")
	}
	return b.String()
}

// portSig is the canonical text of a sorted port set, used as a group key.
func portSig(ports []PortMatch) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// sortPorts sorts and de-duplicates a port set.
func sortPorts(ports []PortMatch) []PortMatch {
	sort.Slice(ports, func(i, j int) bool { return portMatchLess(ports[i], ports[j]) })
	out := ports[:0]
	for i, p := range ports {
		if i == 0 || p != ports[i-1] {
			out = append(out, p)
		}
	}
	return out
}

// sortPrefixes sorts and de-duplicates prefixes.
func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	sort.Slice(ps, func(i, j int) bool { return prefixLess(ps[i], ps[j]) })
	out := ps[:0]
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

// ConjChange is one conjunction that changed: Old nil = added, New nil = removed, both
// set = its clauses changed (same ID).
type ConjChange struct {
	Old, New *Conjunction
}

// Isolation says for which directions a local pod is isolated (selected by at least one
// policy with that policy type, or unknown to the API: both).
type Isolation struct {
	Ingress, Egress bool
}

// IsolationChange is a local pod whose isolation changed.
type IsolationChange struct {
	// Pod is the local pod.
	Pod LocalPod
	// Old and New are its isolation before and after.
	Old, New Isolation
}

// Changes is what one event changed: the conjunctions added, changed or removed, and the
// local pods whose isolation changed. Empty when the event changed nothing this node
// enforces.
type Changes struct {
	Conjunctions []ConjChange
	Isolation    []IsolationChange
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Conjunctions) == 0 && len(c.Isolation) == 0 }

// Merge appends o's changes to c's, combining entries for the same conjunction (so a
// conjunction added then changed is one addition) and the same pod.
func (c Changes) Merge(o Changes) Changes {
	byKey := map[ConjKey]int{}
	out := Changes{}
	for _, ch := range append(append([]ConjChange(nil), c.Conjunctions...), o.Conjunctions...) {
		k := changeKey(ch)
		if i, ok := byKey[k]; ok {
			out.Conjunctions[i].New = ch.New
			if out.Conjunctions[i].Old == nil && ch.New == nil {
				// added then removed: nothing
				out.Conjunctions[i] = ConjChange{}
			}
			continue
		}
		byKey[k] = len(out.Conjunctions)
		out.Conjunctions = append(out.Conjunctions, ch)
	}
	kept := out.Conjunctions[:0]
	for _, ch := range out.Conjunctions {
		if ch.Old != nil || ch.New != nil {
			kept = append(kept, ch)
		}
	}
	out.Conjunctions = kept
	byPod := map[string]int{}
	for _, ch := range append(append([]IsolationChange(nil), c.Isolation...), o.Isolation...) {
		if i, ok := byPod[ch.Pod.Key()]; ok {
			out.Isolation[i].New = ch.New
			out.Isolation[i].Pod = ch.Pod
			continue
		}
		byPod[ch.Pod.Key()] = len(out.Isolation)
		out.Isolation = append(out.Isolation, ch)
	}
	return out
}

func changeKey(ch ConjChange) ConjKey {
	if ch.New != nil {
		return ch.New.Key
	}
	return ch.Old.Key
}
