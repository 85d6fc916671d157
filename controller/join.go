package controller

// Joining the cluster, the controller's part: the overlay options a topology gives the
// node's start (StartNode), and the membership completed after it (JoinCluster): IPv4
// forwarding, the NAT rules, the node IP's announcement and the topology's events
// followed.

import (
	"context"
	"errors"
	"sort"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/masq"
	"github.com/ofsdn/ofsdn/topology"
)

// OverlayOptionsFor returns the overlay settings (NodeOptions.Overlay) of a node in the
// cluster c: tunnel type tunnelType (ovsdb.TypeVXLAN or ovsdb.TypeGeneve) on UDP port
// tunnelDstPort (0 = the type's default), its port named TunnelPortName(tunnelType), and
// the peers known at start sorted by name.
func OverlayOptionsFor(c *topology.Cluster, tunnelType string, tunnelDstPort int) *OverlayOptions {
	o := &OverlayOptions{
		TunnelType: tunnelType, TunnelName: TunnelPortName(tunnelType), TunnelDstPort: tunnelDstPort,
		NodeIP: c.NodeIP, NodeIPv6: c.NodeIPv6, ClusterCIDR: c.ClusterCIDR, ClusterCIDRIPv6: c.ClusterCIDRIPv6, ServiceCIDR: c.ServiceCIDR,
	}
	for _, p := range c.Peers {
		o.Peers = append(o.Peers, flows.Peer{Name: p.Name, NodeIP: p.NodeIP, NodeIPv6: p.NodeIPv6, PodSubnet: p.PodSubnet, PodSubnetIPv6: p.PodSubnetIPv6})
	}
	sort.Slice(o.Peers, func(i, j int) bool { return o.Peers[i].Name < o.Peers[j].Name })
	return o
}

// TunnelPortName is the tunnel port's name for a tunnel type: vxlan0 or geneve0.
func TunnelPortName(typ string) string { return typ + "0" }

// JoinCluster completes the cluster membership of a node started with
// OverlayOptionsFor(c, ...) (tunnel port, pipeline and initial peers' flows, cluster route
// are in place): IP forwarding and the NAT rules (service return path; egress masquerade
// if c.Masquerade; on a dual-stack node with c.ClusterCIDRIPv6 also IPv6 forwarding and
// the IPv6 egress rules, table ip6 ofsdn), a gratuitous ARP for the node IP (again whenever its interface's MAC
// changes, topology.KeepAnnounced, and for the new address whenever the topology changes
// this node's IP, unless c.NodeIPFixed), then it follows c.Source's events in the
// background until ctx ends. Errors: the node has no overlay, forwarding cannot be turned
// on, the NAT rules cannot be written (package masq names the sysctl or table); a failed
// announcement is only logged.
func (n *Node) JoinCluster(ctx context.Context, c *topology.Cluster) error {
	log := n.log
	ov := n.Overlay()
	if ov == nil {
		return errors.New("join the cluster: the node was started without its overlay settings")
	}
	// The host routes pods' egress and service traffic (gateway in, kube-proxy's DNAT,
	// gateway or uplink out) either way; masquerade decides only the egress rules.
	if c.PodSubnet != nil { // not on an IPv6-only node
		if err := masq.EnableIPForward(); err != nil {
			return err
		}
	}
	// A dual-stack node's pods leave the cluster over IPv6 only with the IPv6 cluster CIDR
	// (the egress flows and the ip6 masquerade rules both need it).
	rules := masq.Rules{PodSubnet: c.PodSubnet, ClusterCIDR: c.ClusterCIDR, Masquerade: c.Masquerade}
	if c.PodSubnetIPv6 != nil && c.ClusterCIDRIPv6 != nil {
		if err := masq.EnableIPv6Forward(); err != nil {
			return err
		}
		rules.PodSubnetIPv6, rules.ClusterCIDRIPv6 = c.PodSubnetIPv6, c.ClusterCIDRIPv6
	}
	if err := masq.Ensure(rules); err != nil {
		return err
	}
	// Peers' tunnel neighbour caches learn this node's underlay MAC now, not when their
	// entry for a previous MAC (a replaced node) ages out.
	var announcer *topology.Announcer
	var err error
	if c.NodeIP.To4() != nil {
		announcer, err = topology.KeepAnnounced(ctx, log, c.Underlay, c.NodeIP)
		if err != nil {
			log.Warn("node IP not announced", "interface", c.Underlay, "node_ip", c.NodeIP, "err", err)
		}
	} else {
		// An IPv6 underlay: no gratuitous ARP; peers learn this node's MAC by neighbor
		// discovery (an unsolicited advertisement is not sent).
		log.Info("IPv6 underlay: node IP not announced by gratuitous ARP; peers resolve it by neighbor discovery", "interface", c.Underlay, "node_ip", c.NodeIP)
	}
	events := c.Source.Events()
	if announcer != nil && !c.NodeIPFixed {
		events = followNodeIP(ctx, events, announcer)
	}
	go ov.Follow(ctx, events)
	return nil
}

// followNodeIP passes every event of events on to the returned channel, in order, and
// hands the node IP of each EventLocal that names one to the announcer, so that a node IP
// changed in the topology at run time is the one announced from then on (issue 20). The
// returned channel is closed when events is; it stops when ctx ends.
func followNodeIP(ctx context.Context, events <-chan topology.Event, a *topology.Announcer) <-chan topology.Event {
	out := make(chan topology.Event)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-events:
				if !ok {
					return
				}
				if e.Kind == topology.EventLocal && e.Local.NodeIP != nil {
					a.SetNodeIP(e.Local.NodeIP)
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
