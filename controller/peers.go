package controller

// The overlay: the tunnel port, the pipeline's multi-node flows and one flow owner per
// peer node.
//
// Design history: the node starts single-node (StartNode) and StartOverlay then turns it
// into a cluster member without a second pipeline install: it ensures the flow-based
// tunnel port (ovsdb.EnsureTunnelPort), adds the cluster and service CIDRs and the tunnel
// ofport to the node's flows.NodeConfig and re-sets the pipeline owner (the flow store
// sends only the new flows), and keeps the host's route for the cluster CIDR on the
// gateway port. Each peer is its own flow-store owner ("peer/<subnet>") whose flows carry
// flows.PeerCookie, so removing a peer deletes exactly its flows by cookie mask, and a
// peer's new node IP (same subnet) is a diff of that owner only. Topology events arrive
// one peer at a time (topology.Source); nothing is resynced in full.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/cni/podnet"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/topology"
)

// OverlayOptions configures StartOverlay.
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
}

// Overlay is a node's membership in the cluster: its tunnel port and its peers. Create it
// with StartOverlay; it is safe for concurrent use.
type Overlay struct {
	n   *Node
	log *slog.Logger

	mu    sync.Mutex
	peers map[string]flows.Peer // owner → peer
}

// StartOverlay ensures the tunnel port on the node's bridge, installs the pipeline's
// multi-node flows (tunnel classifier, service CIDR to the gateway, cluster-CIDR miss) and
// the host's route for the cluster CIDR out of the gateway (kept across gateway
// re-creation until ctx ends). Call it after StartNode and before the node serves CNI
// requests. Errors name the step (tunnel port, config, pipeline flows, route).
func StartOverlay(ctx context.Context, n *Node, opts OverlayOptions) (*Overlay, error) {
	port, err := n.db.EnsureTunnelPort(ctx, ovsdb.TunnelSpec{
		Bridge: n.opts.Bridge, Name: opts.TunnelName, Type: opts.TunnelType, DstPort: opts.TunnelDstPort,
	})
	if err != nil {
		return nil, fmt.Errorf("overlay: tunnel port %s (%s) on %s: %w", opts.TunnelName, opts.TunnelType, n.opts.Bridge, err)
	}
	cfg := n.cfg
	cfg.TunnelOFPort = uint32(port)
	cfg.NodeIP = opts.NodeIP.To4()
	cfg.ClusterCIDR = opts.ClusterCIDR
	cfg.ServiceCIDR = opts.ServiceCIDR
	if opts.ClusterCIDR == nil {
		return nil, errors.New("overlay: no cluster CIDR: set clusterCIDR in the config or the topology")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	if err := retryUnavailable(ctx, func() error {
		return n.store.SetOwner(ctx, ownerPipeline, flows.PipelineFlows(cfg))
	}); err != nil {
		return nil, fmt.Errorf("overlay: install the pipeline's tunnel and cluster flows: %w", err)
	}
	n.cfg = cfg // before any CNI request: StartOverlay runs before the server is ready
	if err := podnet.KeepRoute(ctx, n.log, n.opts.Gateway, opts.ClusterCIDR, n.cfg.GatewayIP); err != nil {
		return nil, fmt.Errorf("overlay: route for cluster CIDR %v via %s: %w", opts.ClusterCIDR, n.opts.Gateway, err)
	}
	n.log.Info("overlay ready", "tunnel", opts.TunnelName, "type", opts.TunnelType, "tunnel_ofport", port,
		"node_ip", cfg.NodeIP, "cluster_cidr", opts.ClusterCIDR, "service_cidr", opts.ServiceCIDR)
	return &Overlay{n: n, log: n.log, peers: map[string]flows.Peer{}}, nil
}

// peerOwner is the flow-store owner of a peer: its pod subnet, which is unique.
func peerOwner(p flows.Peer) string { return "peer/" + p.PodSubnet.String() }

// AddPeer installs the flows that reach peer p (tunnel ingress, ARP responder, remote
// route) as one batch. Adding a peer that is already known with the same subnet rewrites
// its flows (an IP change). Errors: an invalid peer (flows.Peer.Validate), a subnet
// another peer already holds, or the flow store's error (matching ErrOVSUnavailable while
// the switch is unreachable).
func (o *Overlay) AddPeer(ctx context.Context, p flows.Peer) error {
	cfg := o.n.cfg
	if err := p.Validate(cfg); err != nil {
		return err
	}
	owner := peerOwner(p)
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
	return nil
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
	cookie, mask := flows.PeerCookie(p)
	if err := o.n.store.DeleteOwner(ctx, peerOwner(p), cookie, mask); err != nil {
		return fmt.Errorf("peer %s: %w", p.Name, err)
	}
	o.mu.Lock()
	delete(o.peers, peerOwner(p))
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
		if e.Local.PodSubnet != nil && e.Local.PodSubnet.String() != o.n.cfg.PodSubnet.String() {
			o.log.Error("this node's pod subnet changed in the topology; restart the daemon to use it",
				"running", o.n.cfg.PodSubnet, "topology", e.Local.PodSubnet)
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
