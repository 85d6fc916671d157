package controller

// The overlay: the tunnel port, the pipeline's multi-node flows and one flow owner per
// peer node.
//
// Design history: the node first started single-node and a StartOverlay call then turned
// it into a cluster member (tunnel port, pipeline re-set, peers added one by one). That
// left a hole at every daemon restart: the first flow sync's bundle deleted the earlier
// generation, tunnel and peer flows included, before the overlay had added them again, so
// cross-node traffic stopped for tens of milliseconds (three 10 ms pings lost in the
// multi-node restart e2e), and the tunnel port was not re-created after an ovsdb-server
// restart. Now the overlay is part of the node's options (NodeOptions.Overlay): the
// tunnel port is ensured with the bridge and the gateway (ensureSwitchConfig, also after
// every OVSDB reconnection), the pipeline is built with the tunnel and cluster flows from
// the start, and the peers the topology lists at start are loaded into the flow store
// before the first sync, so that one bundle replaces every flow of the earlier run.
// The host's route for the cluster CIDR is kept on the gateway port until the node
// closes. Each peer is its own flow-store owner (flows.PeerOwner: its owner id, allocated
// and recorded under its node name, peerids.go) whose cookie selects its flows, so
// removing a peer deletes exactly its flows by cookie mask, and a peer's new node IP or
// pod subnet is a diff of that owner only. After start, topology events arrive one peer
// at a time (topology.Source, Follow); nothing is resynced in full.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/topology"
)

// OverlayOptions configures a node's cluster membership (NodeOptions.Overlay).
type OverlayOptions struct {
	// TunnelType is ovsdb.TypeVXLAN or ovsdb.TypeGeneve.
	TunnelType string
	// TunnelName is the tunnel port's name, e.g. "vxlan0".
	TunnelName string
	// TunnelDstPort is the tunnel's UDP port, 0 = the type's default (4789, 6081).
	TunnelDstPort int
	// NodeIP is this node's underlay address (the tunnels' outer source): IPv4, or IPv6
	// for tunnels over an IPv6 underlay (then every peer's is IPv6).
	NodeIP net.IP
	// NodeIPv6 is this node's IPv6 address beside an IPv4 NodeIP (topology.Cluster's
	// NodeIPv6), nil if unknown: pods reach IPv6 NodePorts at it; no tunnel uses it.
	NodeIPv6 net.IP
	// ClusterCIDR is the IPv4 prefix every node's pod subnet is cut from; required but on
	// an IPv6-only node, which has none.
	ClusterCIDR *net.IPNet
	// ClusterCIDRIPv6 is the IPv6 prefix every dual-stack node's IPv6 pod subnet is cut
	// from, on a dual-stack node; nil = not known: its pods' IPv6 does not leave the
	// cluster (flows.NodeConfig.ClusterCIDRIPv6).
	ClusterCIDRIPv6 *net.IPNet
	// ServiceCIDR is the service IPv4 range sent to the gateway (kube-proxy); nil = none.
	ServiceCIDR *net.IPNet
	// Peers are the peer nodes the topology lists at start; their flows are part of the
	// node's first flow sync. Later changes go through Overlay.Apply / Follow. Their
	// OwnerID is ignored: the overlay gives each peer the id recorded for it
	// (PeerIDsFile).
	Peers []flows.Peer
}

// Overlay is a node's membership in the cluster: its tunnel port and its peers. StartNode
// creates it when NodeOptions.Overlay is set (Node.Overlay); it is safe for concurrent
// use.
type Overlay struct {
	n    *Node
	log  *slog.Logger
	opts OverlayOptions

	// change serialises peer changes (AddPeer, UpdatePeer, DeletePeer): a peer's record
	// in ids and its flows change together. It guards ids.
	change sync.Mutex
	ids    *peerIDs // the peers' owner ids, recorded in DataDir/PeerIDsFile

	mu       sync.Mutex
	peers    map[string]flows.Peer // peerKey → peer with flows (OwnerID set)
	subnets  subnetIndex           // the peers' IPv4 pod subnets, for the overlap check
	subnets6 subnetIndex           // the peers' IPv6 pod subnets, likewise
	nodeIPv6 net.IP                // this node's IPv6 address (opts.NodeIPv6, then EventLocal's)
}

func newOverlay(n *Node, opts OverlayOptions) *Overlay {
	opts.Peers = nil
	return &Overlay{n: n, log: n.log, opts: opts, peers: map[string]flows.Peer{}, nodeIPv6: opts.NodeIPv6}
}

// NodeIPv6 returns this node's IPv6 address beside its IPv4 node IP, as the topology
// last gave it (an IPv6 NodePort frontend), nil if unknown.
func (o *Overlay) NodeIPv6() net.IP {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodeIPv6
}

// load reads the record of peer owner ids, gives each initial peer its recorded id (on a
// node without the record, the id earlier builds derived, flows.LegacyPeerID; a peer new
// to the record a round-robin one), frees the ids of recorded peers that are no longer
// listed, writes the record and then loads the peers' flows into the store without
// touching the switch (the first sync installs them). Invalid peers and a second peer
// claiming a subnet are logged and left out. An unreadable or corrupt record is logged
// and replaced (the peers get ids as on a node without one; every flow of the earlier
// run goes with its generation in the first sync). The error says the record cannot be
// written: no flow may then carry the ids.
func (o *Overlay) load(peers []flows.Peer) error {
	path := filepath.Join(o.n.opts.DataDir, PeerIDsFile)
	ids, err := readPeerIDs(path)
	if err != nil {
		o.log.Warn("peer owner id record unreadable; it is replaced and peers get ids as on a node without one", "file", path, "err", err)
		ids = newPeerIDs(path)
	}
	o.ids = ids
	legacy := !ids.found
	cfg := o.n.config()
	for _, p := range peers {
		key := peerKey(p)
		if cur, ok := o.peers[key]; ok {
			o.log.Error("topology peer left out", "peer", p.Name,
				"err", fmt.Sprintf("listed twice (also with pod subnet %v)", cur.PodSubnet))
			continue
		}
		p = o.forNode(p, cfg)
		if clash := o.subnetClash(key, p); clash != "" {
			o.log.Error("topology peer left out", "peer", p.Name, "err", clash)
			continue
		}
		var want uint32
		if legacy {
			want = flows.LegacyPeerID(p)
		}
		q := p
		q.OwnerID = ids.peek(key)
		if _, held := ids.byID[want]; want != 0 && !held {
			q.OwnerID = want
		}
		if err := q.Validate(cfg); err != nil {
			o.log.Error("topology peer left out", "peer", p.Name, "err", err)
			continue
		}
		p.OwnerID, _ = ids.reserve(key, want)
		o.peers[key] = p
		o.setSubnets(key, &p)
	}
	for key := range ids.byKey {
		if _, listed := o.peers[key]; !listed {
			ids.release(key)
		}
	}
	if err := ids.save(); err != nil {
		return fmt.Errorf("overlay: record the peers' owner ids: %w", err)
	}
	for _, p := range o.peers {
		o.n.store.Load(flows.PeerOwner(p), flows.PeerFlows(cfg, p))
	}
	return nil
}

// subnetClash returns what is wrong when a peer other than the one with key holds a pod
// subnet overlapping one of p's (IPv4, and on a dual-stack node IPv6): "pod subnet X
// overlaps peer N's Y: fix the node's podCIDRs", or "". o.change is held (or the overlay
// is loading). It looks the subnets up in o.subnets and o.subnets6 (O(log N)): a scan of
// every peer made N joins cost O(N²), 5.6% of the daemon's CPU while 5,000 Nodes joined
// (make bench-nodes).
func (o *Overlay) subnetClash(key string, p flows.Peer) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range []struct {
		x    *subnetIndex
		mine *net.IPNet
		of   func(flows.Peer) *net.IPNet
	}{
		{&o.subnets, p.PodSubnet, func(q flows.Peer) *net.IPNet { return q.PodSubnet }},
		{&o.subnets6, p.PodSubnetIPv6, func(q flows.Peer) *net.IPNet { return q.PodSubnetIPv6 }},
	} {
		if c.mine == nil {
			continue
		}
		if k, ok := c.x.overlapping(c.mine, key); ok {
			cur := o.peers[k]
			return fmt.Sprintf("pod subnet %v overlaps peer %s's %v: fix the node's podCIDRs", c.mine, cur.Name, c.of(cur))
		}
	}
	return ""
}

// forNode returns p as this node uses it: on an IPv4-only node without its IPv6 pod
// subnet (no IPv6 flows, no IPv6 overlap check: only a dual-stack node routes IPv6).
//
// On an IPv6-only node without its IPv4 pod subnet (no IPv4 flows, no IPv4 overlap check).
func (o *Overlay) forNode(p flows.Peer, cfg flows.NodeConfig) flows.Peer {
	if cfg.PodSubnetIPv6 == nil {
		p.PodSubnetIPv6 = nil
	}
	if cfg.PodSubnet == nil {
		p.PodSubnet = nil
	}
	return p
}

// setSubnets records (p non-nil) or removes (nil) the pod subnets of the peer with key;
// o.mu is held.
func (o *Overlay) setSubnets(key string, p *flows.Peer) {
	if p == nil {
		o.subnets.set(key, nil)
		o.subnets6.set(key, nil)
		return
	}
	o.subnets.set(key, p.PodSubnet)
	o.subnets6.set(key, p.PodSubnetIPv6)
}

// subnetIndex holds pod subnets of one IP family as address ranges sorted by their
// first address, each under its peer's key (the overlay keeps one index per family). The
// ranges never overlap (a peer whose subnet overlaps another's is refused before it is
// set), so the ranges that can meet a subnet are found by binary search. The zero value
// is empty; it is not safe for concurrent use.
type subnetIndex struct {
	r     []subnetRange
	byKey map[string]subnetRange
}

type subnetRange struct {
	first, last netip.Addr
	key         string
}

// prefixRange returns n's first and last addresses (IPv4 for an IPv4 or IPv4-mapped
// subnet, IPv6 otherwise); ok is false for a nil subnet or a mask that does not fit its
// address.
func prefixRange(n *net.IPNet) (first, last netip.Addr, ok bool) {
	if n == nil {
		return first, last, false
	}
	ip, mask := n.IP, n.Mask
	if v4 := ip.To4(); v4 != nil {
		ip = v4
		if len(mask) == net.IPv6len {
			mask = mask[12:]
		}
	}
	if len(mask) != len(ip) || (len(ip) != net.IPv4len && len(ip) != net.IPv6len) {
		return first, last, false
	}
	var lo, hi [net.IPv6len]byte // no allocation: the join path calls this per peer
	for i := range ip {
		lo[i] = ip[i] & mask[i]
		hi[i] = lo[i] | ^mask[i]
	}
	if len(ip) == net.IPv4len {
		return netip.AddrFrom4([4]byte(lo[:4])), netip.AddrFrom4([4]byte(hi[:4])), true
	}
	return netip.AddrFrom16(lo), netip.AddrFrom16(hi), true
}

// overlapping returns the key of a range that shares an address with n, other than
// except's.
func (x *subnetIndex) overlapping(n *net.IPNet, except string) (string, bool) {
	first, last, ok := prefixRange(n)
	if !ok {
		return "", false
	}
	// Ranges starting after last cannot meet n; of those starting at or before it, the
	// later ones end later (no two overlap), so walk back while they reach first.
	i := sort.Search(len(x.r), func(i int) bool { return x.r[i].first.Compare(last) > 0 })
	for j := i - 1; j >= 0 && x.r[j].last.Compare(first) >= 0; j-- {
		if x.r[j].key != except {
			return x.r[j].key, true
		}
	}
	return "", false
}

// set records n as key's subnet, replacing any it had; a nil n removes it.
func (x *subnetIndex) set(key string, n *net.IPNet) {
	if old, ok := x.byKey[key]; ok {
		i := sort.Search(len(x.r), func(i int) bool { return x.r[i].first.Compare(old.first) >= 0 })
		for ; i < len(x.r) && x.r[i].first == old.first; i++ {
			if x.r[i].key == key {
				x.r = slices.Delete(x.r, i, i+1)
				break
			}
		}
		delete(x.byKey, key)
	}
	first, last, ok := prefixRange(n)
	if !ok {
		return
	}
	if x.byKey == nil {
		x.byKey = map[string]subnetRange{}
	}
	e := subnetRange{first: first, last: last, key: key}
	i := sort.Search(len(x.r), func(i int) bool { return x.r[i].first.Compare(first) > 0 })
	x.r = slices.Insert(x.r, i, e)
	x.byKey[key] = e
}

// TunnelOFPort returns the tunnel port's current ofport (1..65279).
func (o *Overlay) TunnelOFPort() uint32 { return o.n.config().TunnelOFPort }

// AddPeer installs the flows that reach peer p (tunnel ingress, ARP responder, remote
// route) as one batch, under the owner id recorded for p (its node name): a peer new to
// the record gets one round robin, recorded before its flows are installed. Adding a
// peer that is already known rewrites its flows (a new node IP or pod subnet: a diff of
// the same owner). p.OwnerID is ignored. Errors: an invalid peer
// (flows.Peer.Validate), a pod subnet that overlaps another peer's, the record cannot be
// written (PeerIDsFile), or the flow store's error (matching ErrOVSUnavailable while the
// switch is unreachable).
func (o *Overlay) AddPeer(ctx context.Context, p flows.Peer) error {
	o.change.Lock()
	defer o.change.Unlock()
	return o.addPeer(ctx, p)
}

// addPeer is AddPeer; o.change is held.
func (o *Overlay) addPeer(ctx context.Context, p flows.Peer) error {
	key := peerKey(p)
	for {
		cfg, ver := o.n.configVersion()
		p = o.forNode(p, cfg)
		if clash := o.subnetClash(key, p); clash != "" {
			return fmt.Errorf("peer %s: %s", p.Name, clash)
		}
		// Validated with the id it is about to get, so an invalid peer takes none.
		p.OwnerID = o.ids.peek(key)
		if err := p.Validate(cfg); err != nil {
			return err
		}
		id, err := o.ids.assign(key)
		if err != nil {
			return fmt.Errorf("peer %s: %w", p.Name, err)
		}
		p.OwnerID = id
		if err := o.n.store.SetOwner(ctx, flows.PeerOwner(p), flows.PeerFlows(cfg, p)); err != nil {
			// The id stays recorded: a retry takes it again, a delete frees it.
			return fmt.Errorf("peer %s: %w", p.Name, err)
		}
		o.mu.Lock()
		o.peers[key] = p
		o.setSubnets(key, &p)
		o.mu.Unlock()
		// A rebuild (new tunnel ofport) that ran meanwhile may have missed this peer:
		// build its flows again from the new config.
		if _, now := o.n.configVersion(); now == ver {
			return nil
		}
	}
}

// UpdatePeer moves a peer from old to p. The same peer (node name) keeps its owner id:
// a new node IP or pod subnet is a diff of its flows. If the key changed (a peer without
// a name, keyed by its subnet), the old peer is deleted first. Errors as for AddPeer and
// DeletePeer.
func (o *Overlay) UpdatePeer(ctx context.Context, old, p flows.Peer) error {
	o.change.Lock()
	defer o.change.Unlock()
	if peerKey(old) != peerKey(p) {
		if err := o.deletePeer(ctx, old); err != nil {
			return err
		}
	}
	return o.addPeer(ctx, p)
}

// DeletePeer removes every flow of peer p (selected by flows.PeerCookie of its recorded
// owner id, so flows of it that the switch still holds from an earlier attempt go too),
// then frees its id from the record. Deleting an unknown peer is not an error. Errors:
// the flow store's (matching ErrOVSUnavailable while a resync runs); a record that cannot
// be written is logged (the id stays recorded until the next start).
func (o *Overlay) DeletePeer(ctx context.Context, p flows.Peer) error {
	o.change.Lock()
	defer o.change.Unlock()
	return o.deletePeer(ctx, p)
}

// deletePeer is DeletePeer; o.change is held.
func (o *Overlay) deletePeer(ctx context.Context, p flows.Peer) error {
	key := peerKey(p)
	id, ok := o.ids.get(key)
	if !ok {
		return nil // never given flows in this run: the first sync swept any of earlier runs
	}
	p.OwnerID = id
	if err := o.n.store.DeleteOwner(ctx, flows.PeerOwner(p)); err != nil {
		return fmt.Errorf("peer %s: %w", p.Name, err)
	}
	o.mu.Lock()
	delete(o.peers, key)
	o.setSubnets(key, nil)
	o.mu.Unlock()
	if err := o.ids.free(key); err != nil {
		o.log.Warn("peer's owner id not freed from the record; the next start frees it", "peer", p.Name, "owner_id", id, "err", err)
	}
	return nil
}

// Peers returns the peers with flows installed (OwnerID set), sorted by name.
func (o *Overlay) Peers() []flows.Peer {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]flows.Peer, 0, len(o.peers))
	for _, p := range o.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Apply applies one topology event: peer added, updated or deleted. An EventLocal that
// changes this node's pod subnet cannot be applied to a running node and is logged (the
// daemon must restart). It retries while the switch is unreachable (ErrOVSUnavailable)
// until ctx ends; other errors (an invalid peer) are returned.
func (o *Overlay) Apply(ctx context.Context, e topology.Event) error {
	conv := func(p topology.Peer) flows.Peer {
		return flows.Peer{Name: p.Name, NodeIP: p.NodeIP, NodeIPv6: p.NodeIPv6, PodSubnet: p.PodSubnet, PodSubnetIPv6: p.PodSubnetIPv6}
	}
	var err error
	switch e.Kind {
	case topology.EventPeerAdded:
		err = retryUnavailable(ctx, func() error { return o.AddPeer(ctx, conv(e.Peer)) })
	case topology.EventPeerUpdated:
		err = retryUnavailable(ctx, func() error { return o.UpdatePeer(ctx, conv(e.Old), conv(e.Peer)) })
	case topology.EventPeerDeleted:
		err = retryUnavailable(ctx, func() error { return o.DeletePeer(ctx, conv(e.Peer)) })
	case topology.EventLocal:
		if running := o.n.config().PodSubnet; e.Local.PodSubnet != nil && e.Local.PodSubnet.String() != running.String() {
			o.log.Error("this node's pod subnet changed in the topology; restart the daemon to use it",
				"running", running, "topology", e.Local.PodSubnet)
		}
		// This node's IPv6 address is an IPv6 NodePort frontend.
		var ip6 net.IP
		if o.n.config().NodeIP.To4() != nil {
			ip6 = e.Local.NodeIPv6
		}
		o.mu.Lock()
		changed := !o.nodeIPv6.Equal(ip6)
		o.nodeIPv6 = ip6
		o.mu.Unlock()
		if s := o.n.services; changed && s != nil {
			o.log.Info("this node's IPv6 address changed", "node_ipv6", fmt.Sprint(ip6))
			s.nodeAddrsChanged(ctx)
		}
		return nil
	}
	if err != nil {
		return err
	}
	o.log.Info("peer "+e.Kind.String(), "peer", e.Peer.Name, "node_ip", e.Peer.NodeIP, "node_ipv6", fmt.Sprint(e.Peer.NodeIPv6), "pod_subnet", e.Peer.PodSubnet,
		"pod_subnet_ipv6", fmt.Sprint(e.Peer.PodSubnetIPv6))
	if s := o.n.services; s != nil {
		s.nodeAddrsChanged(ctx) // the peer's node IP and IPv6 address are NodePort frontends
	}
	return nil
}

// Follow applies every event of events until it is closed or ctx ends, logging the ones
// that fail (an invalid peer stays out; the next event for it tries again).
func (o *Overlay) Follow(ctx context.Context, events <-chan topology.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				return
			}
			if err := o.Apply(ctx, e); err != nil && ctx.Err() == nil {
				o.log.Error("topology event not applied", "event", e.Kind.String(), "peer", e.Peer.Name, "err", err)
			}
		}
	}
}

// retryUnavailable runs f until it succeeds, fails with an error other than
// ErrOVSUnavailable, or ctx ends (backoff 100 ms doubling to 2 s).
func retryUnavailable(ctx context.Context, f func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := f()
		if err == nil || !errors.Is(err, ErrOVSUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
