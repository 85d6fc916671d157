// Package topology tells the node daemon where it stands in the cluster: this node's pod
// subnet, address and the cluster CIDR, and the peer nodes (name, node IP, pod subnet) its
// tunnel reaches. One interface, Source, has two implementations: File (a static YAML/JSON
// topology, or flannel's subnet.env, reloaded when the file changes) and Kubernetes
// (client-go informers on Node objects).
//
// A Source reports changes as events, one peer at a time, so that the daemon rewrites only
// that peer's flows: EventLocal when this node's settings are first known (and again if
// they change), then EventPeerAdded, EventPeerUpdated and EventPeerDeleted.
//
// Design history: flannel's subnet manager has the same two back ends (a local lease
// file vs. the Kubernetes API), and Antrea's NodeRouteController keys its per-node flows
// on the Node object's name and podCIDRs; both diff the peer set instead of resyncing.
package topology

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// Local is this node's settings.
type Local struct {
	// Name is this node's name (the Kubernetes Node name, NODE_NAME).
	Name string
	// NodeIP is this node's underlay address, IPv4 or (an IPv6 underlay) IPv6; nil when
	// the source does not say (flannel's subnet.env): the daemon's config or interface
	// detection fills it.
	NodeIP net.IP
	// NodeIPv6 is this node's IPv6 address beside an IPv4 NodeIP (a dual-stack node on an
	// IPv4 underlay; Kubernetes: its first IPv6 InternalIP, the topology file's nodeIPv6),
	// where pods reach IPv6 NodePorts (kube-proxy's IPv6 proxier's primary node address);
	// no tunnel uses it. nil when the source does not say or NodeIP is IPv6.
	NodeIPv6 net.IP
	// PodSubnet is this node's IPv4 pod subnet (Node.spec.podCIDRs, FLANNEL_SUBNET); nil
	// on an IPv6-only node.
	PodSubnet *net.IPNet
	// PodSubnetIPv6 is this node's IPv6 pod subnet on a dual-stack or IPv6-only node (the
	// IPv6 entry of Node.spec.podCIDRs, the topology file's podSubnets,
	// FLANNEL_IPV6_SUBNET); nil = IPv4-only.
	PodSubnetIPv6 *net.IPNet
	// IPv6First is true when the source lists the IPv6 pod subnet before the IPv4 one
	// (Node.spec.podCIDRs of an IPv6-first cluster, the file's podSubnets): the order of
	// the pods' addresses.
	IPv6First bool
	// ClusterCIDR is the IPv4 prefix every pod subnet is cut from (FLANNEL_NETWORK);
	// nil when the source does not say (Kubernetes: it comes from the daemon's config).
	ClusterCIDR *net.IPNet
	// ClusterCIDRIPv6 is the IPv6 prefix every dual-stack node's IPv6 pod subnet is cut
	// from (the file's clusterCIDRIPv6, FLANNEL_IPV6_NETWORK); nil when the source does
	// not say.
	ClusterCIDRIPv6 *net.IPNet
	// MTU is the pod MTU the source asks for in bytes (FLANNEL_MTU); 0 = not set.
	MTU int
	// IPMasq is the source's masquerade choice (FLANNEL_IPMASQ); nil = not set.
	IPMasq *bool
}

// Peer is another node reached through the tunnel.
type Peer struct {
	// Name is the node's name; peers are keyed by it.
	Name string
	// NodeIP is the node's underlay address (Kubernetes: its InternalIP), IPv4, or IPv6
	// in a cluster whose underlay is IPv6.
	NodeIP net.IP
	// NodeIPv6 is the node's IPv6 address beside an IPv4 NodeIP (Kubernetes: its first
	// IPv6 InternalIP; the topology file's peers[].nodeIPv6): this node's pods reach IPv6
	// NodePorts at it; no tunnel uses it. nil when unknown or NodeIP is IPv6.
	NodeIPv6 net.IP
	// PodSubnet is the node's IPv4 pod subnet; nil for an IPv6-only node.
	PodSubnet *net.IPNet
	// PodSubnetIPv6 is the node's IPv6 pod subnet on a dual-stack node, nil if none; a
	// dual-stack node routes it to the peer as PodSubnet.
	PodSubnetIPv6 *net.IPNet
}

// String returns "name (ip, subnet)".
func (p Peer) String() string { return fmt.Sprintf("%s (%v, %v)", p.Name, p.NodeIP, p.PodSubnet) }

// Equal reports whether p and q name the same node with the same addresses and subnets.
func (p Peer) Equal(q Peer) bool {
	return p.Name == q.Name && p.NodeIP.Equal(q.NodeIP) && p.NodeIPv6.Equal(q.NodeIPv6) && netEqual(p.PodSubnet, q.PodSubnet) &&
		netEqual(p.PodSubnetIPv6, q.PodSubnetIPv6)
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventLocal: this node's settings are known (first event) or changed (Local).
	EventLocal EventKind = iota + 1
	// EventPeerAdded: a peer appeared (Peer).
	EventPeerAdded
	// EventPeerUpdated: a peer's node IP, IPv6 node address or pod subnet changed (Old →
	// Peer).
	EventPeerUpdated
	// EventPeerDeleted: a peer is gone (Peer is its last known state).
	EventPeerDeleted
)

// String returns the kind's name: local, peer-added, peer-updated, peer-deleted.
func (k EventKind) String() string {
	switch k {
	case EventLocal:
		return "local"
	case EventPeerAdded:
		return "peer-added"
	case EventPeerUpdated:
		return "peer-updated"
	case EventPeerDeleted:
		return "peer-deleted"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one change of the topology.
type Event struct {
	// Kind says what changed.
	Kind EventKind
	// Local is this node's settings (EventLocal).
	Local Local
	// Peer is the peer added, updated (new state) or deleted (last state).
	Peer Peer
	// Old is the peer's previous state (EventPeerUpdated).
	Old Peer
}

// Source is where the daemon learns the topology. Run watches until ctx ends and sends
// the changes on Events, in order, starting with EventLocal once this node's settings are
// known; it returns ctx.Err() when ctx ends, or an error naming the source if it cannot
// watch at all. Events is closed when Run returns. Events must be drained: Run waits for
// the reader.
type Source interface {
	Run(ctx context.Context) error
	Events() <-chan Event
}

// tracker holds the last reported state and turns new states into events.
type tracker struct {
	mu    sync.Mutex
	local *Local
	peers map[string]Peer
	out   chan Event
}

func newTracker() *tracker {
	return &tracker{peers: map[string]Peer{}, out: make(chan Event, 64)}
}

// send delivers e unless ctx ends first.
func (t *tracker) send(ctx context.Context, e Event) bool {
	select {
	case t.out <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// diff computes the events that take the reported state to local + peers (peers nil
// means "no change to peers"; deleteMissing removes peers not in the map).
func (t *tracker) diff(local *Local, peers map[string]Peer, deleteMissing bool) []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	var evs []Event
	if local != nil && (t.local == nil || !localEqual(*t.local, *local)) {
		l := *local
		t.local = &l
		evs = append(evs, Event{Kind: EventLocal, Local: l})
	}
	if deleteMissing {
		for name, old := range t.peers {
			if _, ok := peers[name]; !ok {
				delete(t.peers, name)
				evs = append(evs, Event{Kind: EventPeerDeleted, Peer: old})
			}
		}
	}
	for name, p := range peers {
		old, ok := t.peers[name]
		switch {
		case !ok:
			evs = append(evs, Event{Kind: EventPeerAdded, Peer: p})
		case !old.Equal(p):
			evs = append(evs, Event{Kind: EventPeerUpdated, Peer: p, Old: old})
		default:
			continue
		}
		t.peers[name] = p
	}
	return evs
}

// deletePeer forgets one peer and returns its delete event, if it was known.
func (t *tracker) deletePeer(name string) []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.peers[name]
	if !ok {
		return nil
	}
	delete(t.peers, name)
	return []Event{{Kind: EventPeerDeleted, Peer: old}}
}

func localEqual(a, b Local) bool {
	return a.Name == b.Name && a.NodeIP.Equal(b.NodeIP) && a.NodeIPv6.Equal(b.NodeIPv6) && netEqual(a.PodSubnet, b.PodSubnet) &&
		netEqual(a.PodSubnetIPv6, b.PodSubnetIPv6) && a.IPv6First == b.IPv6First && netEqual(a.ClusterCIDR, b.ClusterCIDR) &&
		netEqual(a.ClusterCIDRIPv6, b.ClusterCIDRIPv6) && a.MTU == b.MTU &&
		(a.IPMasq == nil) == (b.IPMasq == nil) && (a.IPMasq == nil || *a.IPMasq == *b.IPMasq)
}

func netEqual(a, b *net.IPNet) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.String() == b.String()
}

// parseIPv4Net parses an IPv4 CIDR and returns its network (host bits cleared).
func parseIPv4Net(s string) (*net.IPNet, error) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil || ip.To4() == nil {
		return nil, fmt.Errorf("%q is not an IPv4 CIDR", s)
	}
	n.IP = n.IP.To4()
	return n, nil
}

// parseIPv6Net parses an IPv6 CIDR of /126 or shorter (a pod subnet), 16-byte address.
func parseIPv6Net(s string) (*net.IPNet, error) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil || ip.To4() != nil {
		return nil, fmt.Errorf("%q is not an IPv6 CIDR", s)
	}
	if ones, _ := n.Mask.Size(); ones > 126 {
		return nil, fmt.Errorf("%q: prefix /%d leaves no room for pods; use /126 or shorter", s, ones)
	}
	return n, nil
}

// podSubnetList parses a list of pod subnets, at most one per family, in the order of
// the pods' addresses: an IPv4 one and/or an IPv6 one (v6First: the IPv6 one listed
// first; an IPv6-only list has v4 nil). single is the form's podSubnet, which must be
// empty or the list's IPv4 entry.
func podSubnetList(list []string, single string) (v4, v6 *net.IPNet, v6First bool, err error) {
	want := "want one IPv4 CIDR and/or one IPv6 CIDR, in the order of the pods' addresses (IPv4 first, IPv6 first, or IPv6 alone on an IPv6-only node)"
	if len(list) == 0 || len(list) > 2 {
		return nil, nil, false, fmt.Errorf("%d entries %q: %s", len(list), list, want)
	}
	for i, e := range list {
		if n, err := parseIPv4Net(e); err == nil {
			if v4 != nil {
				return nil, nil, false, fmt.Errorf("two IPv4 entries %q: %s", list, want)
			}
			v4 = n
			continue
		}
		n, err := parseIPv6Net(e)
		if err != nil {
			return nil, nil, false, fmt.Errorf("entry %d: %w; %s", i+1, err, want)
		}
		if v6 != nil {
			return nil, nil, false, fmt.Errorf("two IPv6 entries %q: %s", list, want)
		}
		v6, v6First = n, i == 0 && len(list) == 2
	}
	if single != "" {
		if s, err := parseIPv4Net(single); err != nil || v4 == nil || s.String() != v4.String() {
			return nil, nil, false, fmt.Errorf("podSubnet %q is not the list's IPv4 entry %v: leave podSubnet out, or make them agree", single, v4)
		}
	}
	return v4, v6, v6First, nil
}

// parseNodeIP parses a node's underlay address: IPv4 (4 bytes) or IPv6 (16 bytes, an
// IPv6 underlay), unicast.
func parseNodeIP(s string) (net.IP, error) {
	ip := net.ParseIP(s)
	if ip == nil || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("%q is not a unicast IPv4 or IPv6 address", s)
	}
	if ip4 := ip.To4(); ip4 != nil {
		return ip4, nil
	}
	return ip, nil
}

// parseNodeIPv6 parses a node's IPv6 address beside its IPv4 node IP (nodeIPv6):
// unicast, not link-local, not IPv4.
func parseNodeIPv6(s string) (net.IP, error) {
	ip, err := parseNodeIP(s)
	if err != nil || ip.To4() != nil {
		return nil, fmt.Errorf("%q is not a unicast IPv6 address", s)
	}
	return ip, nil
}

// parseIPv4 parses an IPv4 address.
func parseIPv4(s string) (net.IP, error) {
	ip := net.ParseIP(s)
	if ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("%q is not an IPv4 address", s)
	}
	return ip.To4(), nil
}
