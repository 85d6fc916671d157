package topology

// Joining the cluster, the topology's part: the source's first report of this node's
// settings and of the peers, and the node's network settings derived from it (pod subnet,
// cluster CIDR, node IP, underlay, MTU, masquerade). The node daemon (cmd/ofsdn-node)
// chooses the source from its config; the controller joins the cluster with the result
// (controller.Node.JoinCluster).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
)

// Cluster is what the daemon learned from its topology before starting the node: the
// running source, the peers known at start and this node's settings, the config's values
// taking precedence over the source's (Prepare).
type Cluster struct {
	// Source is the running topology source; its Events go on after Prepare (the peers'
	// changes, this node's changed settings), for the overlay to follow.
	Source Source
	// Peers are the peer nodes known at start, by name: part of the node's first flow
	// sync.
	Peers map[string]Peer
	// PodSubnet is this node's IPv4 pod subnet (the source's); nil on an IPv6-only node.
	PodSubnet *net.IPNet
	// PodSubnetIPv6 is this node's IPv6 pod subnet (the source's) on a dual-stack or
	// IPv6-only node, nil = IPv4-only.
	PodSubnetIPv6 *net.IPNet
	// IPv6First is true on a dual-stack node whose source lists the IPv6 pod subnet first
	// (Node.spec.podCIDRs, the file's podSubnets): pods' addresses in that order.
	IPv6First bool
	// ClusterCIDR is the IPv4 prefix every pod subnet is cut from (config, else the
	// source's); nil only on an IPv6-only node.
	ClusterCIDR *net.IPNet
	// ClusterCIDRIPv6 is the IPv6 prefix every IPv6 pod subnet is cut from (config, else
	// the source's) on a dual-stack node; nil = not known (no IPv6 egress) or IPv4-only.
	ClusterCIDRIPv6 *net.IPNet
	// ServiceCIDR is the service IPv4 range (config only); nil = none.
	ServiceCIDR *net.IPNet
	// NodeIP is this node's underlay address (IPv4, or IPv6 for tunnels over an IPv6
	// underlay): the config's, else the source's, else the IPv4 address of the interface
	// holding the default route (DefaultUnderlay).
	NodeIP net.IP
	// NodeIPv6 is this node's IPv6 address beside an IPv4 NodeIP, the source's
	// (Local.NodeIPv6; nil when it does not say or NodeIP is IPv6): where pods reach IPv6
	// NodePorts. Later changes come as EventLocal.
	NodeIPv6 net.IP
	// NodeIPFixed is true when NodeIP is the config's: the topology's changes of it are
	// ignored.
	NodeIPFixed bool
	// Underlay is the name of the interface holding NodeIP.
	Underlay string
	// MTU is the pod MTU in bytes: the config's, else the source's, else the underlay's
	// MTU minus the tunnel overhead (Underlay.PodMTU).
	MTU int
	// Masquerade is whether pods' egress to outside the cluster CIDR is masqueraded:
	// the config's, else the source's (FLANNEL_IPMASQ), else true.
	Masquerade bool
}

// ClusterOptions are the daemon config's values that take precedence over the
// topology's; a zero field leaves the choice to the source (then detection).
type ClusterOptions struct {
	// NodeName is this node's name, for the log line of the settings only.
	NodeName string
	// ClusterCIDR overrides the source's cluster CIDR; nil = the source's.
	ClusterCIDR *net.IPNet
	// ClusterCIDRIPv6 overrides the source's IPv6 cluster CIDR; nil = the source's.
	ClusterCIDRIPv6 *net.IPNet
	// ServiceCIDR is the service IPv4 range; nil = none.
	ServiceCIDR *net.IPNet
	// NodeIP fixes the node IP (IPv4 or IPv6): the source's and its changes are ignored;
	// nil = the source's, else detection.
	NodeIP net.IP
	// MTU is the pod MTU in bytes; 0 = the source's, else from the underlay.
	MTU int
	// Masquerade overrides the source's masquerade choice; nil = the source's, else on.
	Masquerade *bool
	// Logger gets the settings and a stopped source; nil = slog.Default().
	Logger *slog.Logger
}

// sourceName names a source's kind in errors, as the daemon's config does (topology:
// file, kubernetes).
func sourceName(src Source) string {
	switch src.(type) {
	case *File:
		return "file"
	case *Kubernetes:
		return "kubernetes"
	}
	return fmt.Sprintf("%T", src)
}

// Prepare starts src (it runs until runCtx ends) and waits, bounded by waitCtx, for this
// node's settings and then for the peers the source is about to report (a File's listed
// peers, the Kubernetes source's initial list, else until the source is quiet;
// initialPeersSettle, initialPeersWait); then it
// derives the pod subnet, cluster and service CIDRs, node IP, MTU and masquerade choice
// (o first, then the source, then detection). Errors name the source and the fix: this
// node's pod subnet not known before waitCtx ends, the source stopped, no cluster CIDR,
// no interface holding the node IP.
func Prepare(waitCtx, runCtx context.Context, src Source, o ClusterOptions) (*Cluster, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	name := sourceName(src)
	runErr := make(chan error, 1)
	go func() { runErr <- src.Run(runCtx) }()

	c := &Cluster{Source: src, Peers: map[string]Peer{}}
	var local Local
	for found := false; !found; {
		select {
		case <-waitCtx.Done():
			return nil, fmt.Errorf("topology %s: this node's pod subnet not known before the start timeout (%w): for kubernetes, check that the controller manager allocates node CIDRs", name, waitCtx.Err())
		case err := <-runErr:
			return nil, fmt.Errorf("topology %s: %w", name, err)
		case e := <-src.Events():
			if e.Kind == EventLocal {
				local, found = e.Local, true
			} else {
				c.track(e)
			}
		}
	}
	// The peers known now go into the node's first flow sync; so that a restart does not
	// drop a peer's flows for a moment, wait (briefly) for the ones the source is about to
	// report.
	var expect map[string]bool
	if f, ok := src.(*File); ok {
		expect = filePeers(f.Path)
	}
	var synced <-chan struct{}
	if s, ok := src.(interface{ Synced() <-chan struct{} }); ok {
		synced = s.Synced()
	}
	if err := c.collectPeers(waitCtx, src.Events(), expect, synced, initialPeersSettle, initialPeersWait); err != nil {
		return nil, fmt.Errorf("topology %s: %w", name, err)
	}
	go func() {
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			log.Error("topology source stopped; peers no longer follow it", "topology", name, "err", err)
		}
	}()

	c.PodSubnet = local.PodSubnet
	c.PodSubnetIPv6 = local.PodSubnetIPv6
	c.IPv6First = local.IPv6First && c.PodSubnet != nil && c.PodSubnetIPv6 != nil
	c.ClusterCIDR = local.ClusterCIDR
	if o.ClusterCIDR != nil {
		c.ClusterCIDR = o.ClusterCIDR
	}
	if c.PodSubnet == nil {
		// An IPv6-only node: no IPv4 cluster CIDR (nor service CIDR).
		for _, k := range []struct {
			key, where string
			value      *net.IPNet
		}{
			{"clusterCIDR", "the config and the topology (file clusterCIDR, FLANNEL_NETWORK)", c.ClusterCIDR},
			{"serviceCIDR", "the config", o.ServiceCIDR},
		} {
			if k.value != nil {
				return nil, fmt.Errorf("this node is IPv6-only (IPv6 pod subnet %v, no IPv4 one) but %s %v is an IPv4 range: leave %s out of %s, or give the node an IPv4 pod subnet", c.PodSubnetIPv6, k.key, k.value, k.key, k.where)
			}
		}
	} else if c.ClusterCIDR == nil {
		return nil, errors.New("no cluster CIDR: set clusterCIDR in the config (or in the topology file / FLANNEL_NETWORK)")
	}
	if c.PodSubnetIPv6 != nil {
		c.ClusterCIDRIPv6 = local.ClusterCIDRIPv6
		if o.ClusterCIDRIPv6 != nil {
			c.ClusterCIDRIPv6 = o.ClusterCIDRIPv6
		}
		if cc := c.ClusterCIDRIPv6; cc != nil && !cc.Contains(c.PodSubnetIPv6.IP) {
			return nil, fmt.Errorf("IPv6 cluster CIDR %v does not contain this node's IPv6 pod subnet %v: fix clusterCIDRIPv6 in the config (or the topology file / FLANNEL_IPV6_NETWORK)", cc, c.PodSubnetIPv6)
		}
	}
	c.ServiceCIDR = o.ServiceCIDR
	c.NodeIP = local.NodeIP
	if o.NodeIP != nil {
		c.NodeIP = o.NodeIP
		c.NodeIPFixed = true
	}
	var underlay Underlay
	var err error
	if c.NodeIP == nil {
		underlay, err = DefaultUnderlay()
		c.NodeIP = underlay.IP
	} else {
		underlay, err = FindUnderlay(c.NodeIP)
	}
	if err != nil {
		return nil, fmt.Errorf("node IP: %w", err)
	}
	if c.NodeIP.To4() != nil {
		c.NodeIPv6 = local.NodeIPv6
	}
	c.Underlay = underlay.Name
	switch {
	case o.MTU != 0:
		c.MTU = o.MTU
	case local.MTU != 0:
		c.MTU = local.MTU
	default:
		c.MTU = underlay.PodMTU()
	}
	c.Masquerade = true
	if local.IPMasq != nil {
		c.Masquerade = *local.IPMasq
	}
	if o.Masquerade != nil {
		c.Masquerade = *o.Masquerade
	}
	log.Info("cluster settings", "topology", name, "node", o.NodeName, "pod_subnet", c.PodSubnet, "pod_subnet_ipv6", fmt.Sprint(c.PodSubnetIPv6),
		"cluster_cidr", c.ClusterCIDR, "cluster_cidr_ipv6", fmt.Sprint(c.ClusterCIDRIPv6), "service_cidr", c.ServiceCIDR, "node_ip", c.NodeIP,
		"underlay", underlay.Name, "underlay_mtu", underlay.MTU, "mtu", c.MTU, "masquerade", c.Masquerade)
	return c, nil
}

// Bounds of the wait for the peers a topology source reports at start.
const (
	// initialPeersSettle: without a list of expected peers, the peers are complete once
	// no event came for this long (the sources report their initial state in a burst).
	initialPeersSettle = 300 * time.Millisecond
	// initialPeersWait bounds the whole wait; a peer reported later is added by the
	// topology follower (a moment without its flows after a daemon restart).
	initialPeersWait = 5 * time.Second
)

// track applies one peer event to the start-time peer set.
func (c *Cluster) track(e Event) {
	switch e.Kind {
	case EventPeerAdded, EventPeerUpdated:
		c.Peers[e.Peer.Name] = e.Peer
	case EventPeerDeleted:
		delete(c.Peers, e.Peer.Name)
	}
}

// collectPeers reads the events that follow this node's settings into the peer set:
// with synced (a source that says when its initial state is reported, such as the
// Kubernetes source) until it is closed and the events already sent are read; else with
// expect (peer names the source will report) until all of them are in; else until no
// event came for settle; at most for limit. A quiet moment ends the wait only without
// synced and expect: a busy machine can pause a source longer than settle. An EventLocal
// here is a change of this node's settings between two reads: the first one stays
// (logged by the overlay later). Errors: ctx ended, or the source stopped.
func (c *Cluster) collectPeers(ctx context.Context, events <-chan Event, expect map[string]bool, synced <-chan struct{}, settle, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	quiet := time.NewTimer(settle)
	defer quiet.Stop()
	complete := func() bool {
		if expect == nil || synced != nil {
			return false
		}
		for name := range expect {
			if _, ok := c.Peers[name]; !ok {
				return false
			}
		}
		return true
	}
	for !complete() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("peers not known before the start timeout: %w", ctx.Err())
		case <-deadline.C:
			return nil
		case <-quiet.C:
			if expect == nil && synced == nil {
				return nil
			}
		case <-synced:
			// Every initial event was sent before synced closed: read what is buffered.
			for {
				select {
				case e, ok := <-events:
					if !ok {
						return errors.New("the source stopped while reporting the peers")
					}
					c.track(e)
				default:
					return nil
				}
			}
		case e, ok := <-events:
			if !ok {
				return errors.New("the source stopped while reporting the peers")
			}
			c.track(e)
			if !quiet.Stop() {
				select {
				case <-quiet.C:
				default:
				}
			}
			quiet.Reset(settle)
		}
	}
	return nil
}

// filePeers returns the names of the peers the topology file at path lists now (nil if it
// cannot be read or parsed: the settle wait applies then).
func filePeers(path string) map[string]bool {
	if strings.HasSuffix(path, ".env") {
		return map[string]bool{} // flannel's subnet.env lists no peers
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	_, peers, err := ParseFileSpec(b)
	if err != nil {
		return nil
	}
	out := make(map[string]bool, len(peers))
	for name := range peers {
		out[name] = true
	}
	return out
}
