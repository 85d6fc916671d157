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
// closes. Each peer is its own flow-store owner (flows.PeerOwner: its pod subnet) whose
// cookie selects its flows, so removing a peer deletes exactly its flows by cookie mask,
// and a peer's new node IP (same subnet) is a diff of that owner only. After start, topology
// events arrive one peer at a time (topology.Source, Follow); nothing is resynced in full.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	// NodeIP is this node's underlay IPv4 address (the tunnels' outer source).
	NodeIP net.IP
	// ClusterCIDR is the IPv4 prefix every node's pod subnet is cut from; required.
	ClusterCIDR *net.IPNet
	// ServiceCIDR is the service IPv4 range sent to the gateway (kube-proxy); nil = none.
	ServiceCIDR *net.IPNet
	// Peers are the peer nodes the topology lists at start; their flows are part of the
	// node's first flow sync. Later changes go through Overlay.Apply / Follow.
	Peers []flows.Peer
}

// Overlay is a node's membership in the cluster: its tunnel port and its peers. StartNode
// creates it when NodeOptions.Overlay is set (Node.Overlay); it is safe for concurrent
// use.
type Overlay struct {
	n    *Node
	log  *slog.Logger
	opts OverlayOptions

	mu    sync.Mutex
	peers map[flows.Owner]flows.Peer // flows.PeerOwner → peer
}

func newOverlay(n *Node, opts OverlayOptions) *Overlay {
	opts.Peers = nil
	return &Overlay{n: n, log: n.log, opts: opts, peers: map[flows.Owner]flows.Peer{}}
}

// load records the initial peers and loads their flows into the store without touching
// the switch (the first sync installs them). Invalid peers and a second peer claiming a
// subnet are logged and left out.
func (o *Overlay) load(peers []flows.Peer) {
	cfg := o.n.config()
	for _, p := range peers {
		if err := p.Validate(cfg); err != nil {
			o.log.Error("topology peer left out", "peer", p.Name, "err", err)
			continue
		}
		owner := flows.PeerOwner(p)
		if cur, ok := o.peers[owner]; ok {
			o.log.Error("topology peer left out", "peer", p.Name,
				"err", fmt.Sprintf("pod subnet %v is already peer %s's: fix the node's podCIDR", p.PodSubnet, cur.Name))
			continue
		}
		o.n.store.Load(owner, flows.PeerFlows(cfg, p))
		o.peers[owner] = p
	}
}

// TunnelOFPort returns the tunnel port's current ofport (1..65279).
func (o *Overlay) TunnelOFPort() uint32 { return o.n.config().TunnelOFPort }

// AddPeer installs the flows that reach peer p (tunnel ingress, ARP responder, remote
// route) as one batch. Adding a peer that is already known with the same subnet rewrites
// its flows (an IP change). Errors: an invalid peer (flows.Peer.Validate), a subnet
// another peer already holds, or the flow store's error (matching ErrOVSUnavailable while
// the switch is unreachable).
func (o *Overlay) AddPeer(ctx context.Context, p flows.Peer) error {
	owner := flows.PeerOwner(p)
	for {
		cfg, ver := o.n.configVersion()
		if err := p.Validate(cfg); err != nil {
			return err
		}
		o.mu.Lock()
		if cur, ok := o.peers[owner]; ok && cur.Name != p.Name {
			o.mu.Unlock()
			return fmt.Errorf("peer %s: pod subnet %v is already peer %s's: fix the node's podCIDR", p.Name, p.PodSubnet, cur.Name)
		}
		o.mu.Unlock()
		if err := o.n.store.SetOwner(ctx, owner, flows.PeerFlows(cfg, p)); err != nil {
			return fmt.Errorf("peer %s: %w", p.Name, err)
		}
		o.mu.Lock()
		o.peers[owner] = p
		o.mu.Unlock()
		// A rebuild (new tunnel ofport) that ran meanwhile may have missed this peer:
		// build its flows again from the new config.
		if _, now := o.n.configVersion(); now == ver {
			return nil
		}
	}
}

// UpdatePeer moves a peer from old to p: a new node IP with the same subnet is a diff of
// that peer's flows; a new subnet deletes the old subnet's flows first. Errors as for
// AddPeer and DeletePeer.
func (o *Overlay) UpdatePeer(ctx context.Context, old, p flows.Peer) error {
	if old.PodSubnet != nil && p.PodSubnet != nil && old.PodSubnet.String() != p.PodSubnet.String() {
		if err := o.DeletePeer(ctx, old); err != nil {
			return err
		}
	}
	return o.AddPeer(ctx, p)
}

// DeletePeer removes every flow of peer p (selected by flows.PeerCookie, so flows left by
// an earlier daemon run go too). Deleting an unknown peer is not an error. Errors: the
// flow store's (matching ErrOVSUnavailable while a resync runs).
func (o *Overlay) DeletePeer(ctx context.Context, p flows.Peer) error {
	if p.PodSubnet == nil {
		return nil
	}
	if err := o.n.store.DeleteOwner(ctx, flows.PeerOwner(p)); err != nil {
		return fmt.Errorf("peer %s: %w", p.Name, err)
	}
	o.mu.Lock()
	delete(o.peers, flows.PeerOwner(p))
	o.mu.Unlock()
	return nil
}

// Peers returns the peers with flows installed, sorted by name.
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
		return flows.Peer{Name: p.Name, NodeIP: p.NodeIP, PodSubnet: p.PodSubnet}
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
		return nil
	}
	if err != nil {
		return err
	}
	o.log.Info("peer "+e.Kind.String(), "peer", e.Peer.Name, "node_ip", e.Peer.NodeIP, "pod_subnet", e.Peer.PodSubnet)
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
