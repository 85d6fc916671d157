package flows

// One peer node's flows: accept its tunnels, answer the host's ARP for its pod subnet,
// send traffic for its pod subnet into the tunnel with tun_dst = its node IP. All carry
// the peer's owner (PeerOwner: kind OwnerPeer, id = Peer.OwnerID, allocated and recorded by
// the controller) in their cookie, so PeerCookie selects exactly them for deletion.
//
// Design history: pods on a node get a /24 (or similar) of the cluster CIDR and a default
// route via the gateway, so a pod never ARPs for a remote pod: it sends every off-subnet
// packet to the gateway MAC, and the pipeline routes it (the l3_forwarding stage of the
// receiving node rewrites eth_dst to the destination pod's MAC, as it does for local
// traffic). The only host on the bridge that does ARP for remote pod addresses is the
// node itself: its route for the cluster CIDR points out of the gateway port (on-link,
// one static route, no per-peer host routes), so the arp stage answers the host's
// requests for a peer's subnet with VirtualRouterMAC (an ARP responder in OVS, after
// Antrea's arpResponder; OpenShift SDN instead tunnelled ARP to the peer, which needs
// pods on-link across nodes). Tunnelled packets are accepted only from a known peer's
// node IP and only with a source address in that peer's pod subnet, the tunnel's own
// spoof guard; they skip the local spoof_guard stage (no local port sent them). One
// flow-based tunnel port serves every peer (OpenShift SDN's vxlan0): the destination is
// set per flow (set_field:IP->tun_dst).

import (
	"fmt"
	"net"
)

// VirtualRouterMAC is the MAC with which the arp stage answers the host's ARP requests
// for remote pod addresses (locally administered, unicast). Frames the host then sends
// to remote pods carry it as eth_dst until the receiving node's l3_forwarding stage
// rewrites it.
var VirtualRouterMAC = net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

// Peer is another node of the cluster, reached through the tunnel.
type Peer struct {
	// Name is the peer's node name (the topology's key for it).
	Name string
	// NodeIP is the peer's underlay address: tunnels go to it (tun_dst) and come from it
	// (tun_src); IPv6 (tun_ipv6_dst, tun_ipv6_src) exactly when this node's is.
	NodeIP net.IP
	// NodeIPv6 is the peer's IPv6 address beside an IPv4 NodeIP (a dual-stack peer on an
	// IPv4 underlay; Kubernetes: its IPv6 InternalIP), nil if unknown. No peer flow uses
	// it: the controller makes it an IPv6 NodePort frontend (pods reach IPv6 NodePorts
	// at every node's IPv6 address, translated in this node's switch).
	NodeIPv6 net.IP
	// PodSubnet is the peer's IPv4 pod subnet; nil for an IPv6-only peer (an IPv6-only
	// node ignores it).
	PodSubnet *net.IPNet
	// PodSubnetIPv6 is the peer's IPv6 pod subnet on a dual-stack peer, nil if none. A
	// dual-stack node routes it through the tunnel (on the IPv4 underlay, tun_dst =
	// NodeIP) as it routes PodSubnet; an IPv4-only node ignores it.
	PodSubnetIPv6 *net.IPNet
	// OwnerID is the id of the peer's flow owner (cookie bits 31..0 of its flows, kind
	// OwnerPeer), 1..2^32-1, unique among the node's peers: allocated by the controller
	// and recorded in its data directory (controller.PeerIDsFile), so a restarted daemon
	// gives the peer's flows the id they had. It does not depend on the peer's addresses,
	// so it stays the same when its node IP or pod subnet changes.
	OwnerID uint32
}

// Validate checks that peer can have flows on the node described by cfg: it has an
// owner id, the node has a tunnel port, the peer's node IP is of the family of this
// node's (the underlay's: IPv4, or IPv6 for an IPv6 underlay) and not this node's; on a
// node with an IPv4 pod subnet its pod subnet is IPv4, does not overlap this node's pod
// subnet and lies in the cluster CIDR (if one is set); on a node with an IPv6 pod subnet
// its IPv6 pod subnet, if any, is an IPv6 prefix outside fe80::/10 and ff00::/8 that
// does not overlap this node's, and an IPv6-only node needs it (the peer's IPv4 subnet
// is then ignored).
func (p Peer) Validate(cfg NodeConfig) error {
	if p.OwnerID == 0 {
		return fmt.Errorf("peer %s: owner id 0 is not a peer owner id (1..2^32-1): take the id the controller recorded for the peer", p.Name)
	}
	if cfg.TunnelOFPort == 0 {
		return fmt.Errorf("peer %s: this node has no tunnel port: configure a tunnel (tunnelType) before adding peers", p.Name)
	}
	if cfg.UnderlayIPv6() {
		if p.NodeIP.To4() != nil || len(p.NodeIP) != net.IPv6len || p.NodeIP.Equal(cfg.NodeIP) || p.NodeIP.IsUnspecified() || p.NodeIP.IsMulticast() {
			return fmt.Errorf("peer %s: node IP %v is not an IPv6 address other than this node's %v (the underlay is IPv6): use the peer node's IPv6 InternalIP", p.Name, p.NodeIP, cfg.NodeIP)
		}
	} else if p.NodeIP.To4() == nil || p.NodeIP.Equal(cfg.NodeIP) || p.NodeIP.IsUnspecified() {
		return fmt.Errorf("peer %s: node IP %v is not an IPv4 address other than this node's %v: use the peer node's InternalIP", p.Name, p.NodeIP, cfg.NodeIP)
	}
	if !cfg.IPv4() {
		if p.PodSubnetIPv6 == nil {
			return fmt.Errorf("peer %s: no IPv6 pod subnet, and this node is IPv6-only: set the peer node's IPv6 podCIDR", p.Name)
		}
		return p.validateIPv6(cfg)
	}
	if p.PodSubnet == nil || p.PodSubnet.IP.To4() == nil || len(p.PodSubnet.Mask) != net.IPv4len {
		return fmt.Errorf("peer %s: pod subnet %v is not an IPv4 prefix: set the node's IPv4 podCIDR", p.Name, p.PodSubnet)
	}
	if cfg.PodSubnet != nil && overlaps(p.PodSubnet, cfg.PodSubnet) {
		return fmt.Errorf("peer %s: pod subnet %v overlaps this node's %v: every node needs its own subnet", p.Name, p.PodSubnet, cfg.PodSubnet)
	}
	if cfg.ClusterCIDR != nil && !containsNet(cfg.ClusterCIDR, p.PodSubnet) {
		return fmt.Errorf("peer %s: pod subnet %v is outside cluster CIDR %v: fix the peer's podCIDR or the clusterCIDR", p.Name, p.PodSubnet, cfg.ClusterCIDR)
	}
	return p.validateIPv6(cfg)
}

// LegacyPeerID returns the owner id that builds before peer owner ids were recorded gave
// peer p's flows: the network address of its IPv4 pod subnet as a big-endian uint32
// (10.244.2.0/24 → 0x0af40200), 0 without one. The controller gives it to each peer of a
// node that has no record of peer ids yet (an upgraded node), so no peer flow changes its
// cookie on upgrade.
func LegacyPeerID(p Peer) uint32 {
	if p.PodSubnet == nil {
		return 0
	}
	return ipv4ToUint32(p.PodSubnet.IP.Mask(p.PodSubnet.Mask))
}

// PeerFlows returns all flows of one peer, in pipeline order, with owner PeerOwner(p).
// cfg and peer must be valid (NodeConfig.Validate, Peer.Validate).
func PeerFlows(cfg NodeConfig, p Peer) []Flow {
	return builder{p: std, cfg: cfg}.peerFlows(p)
}

// peerFlows is PeerFlows on b's pipeline: on a dual-stack node with a dual-stack peer
// also its IPv6 flows (dualstack.go), after the IPv4 ones; on an IPv6-only node only
// those.
func (b builder) peerFlows(p Peer) []Flow {
	if !b.cfg.IPv4() {
		return b.peerFlowsIPv6(p) // an IPv6-only node: the peer's IPv6 flows alone
	}
	fs := []Flow{
		tunnelIngressPeer(b, p),
		arpResponderPeer(b, p),
		remotePeer(b, p),
	}
	return append(fs, b.peerFlowsIPv6(p)...)
}

// tunnelIngressPeer accepts IP that arrived through the tunnel from the peer's node IP
// with a source address in the peer's pod subnet (its pods and its gateway, i.e. its
// host); it goes on to the service stage. Anything else from the tunnel meets the
// table's counted drop.
//
//	table="tunnel_ingress", priority=100,ip,tun_src=PEERIP,nw_src=PEERSUBNET actions=goto_table:service
func tunnelIngressPeer(b builder, p Peer) Flow {
	return b.in("tunnel_ingress").flow(PeerOwner(p), PriorityNormal,
		Match{EthType: EthTypeIPv4, TunSrc: p.NodeIP, IPSrc: p.PodSubnet},
		b.goTo(StageServiceConntrack))
}

// arpResponderPeer answers the host's ARP requests (from the gateway port) for any
// address of the peer's pod subnet with VirtualRouterMAC, sent back out the gateway
// port: swap the Ethernet and ARP addresses (arp_spa and arp_tpa through ScratchField),
// opcode reply.
//
//	table=arp, priority=100,arp,reg0=0x1/0xf,arp_tpa=PEERSUBNET,arp_op=1 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:VMAC->eth_src,set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:VMAC->arp_sha,move:NXM_OF_ARP_TPA[]->NXM_NX_REG2[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],move:NXM_NX_REG2[]->NXM_OF_ARP_SPA[],IN_PORT
func arpResponderPeer(b builder, p Peer) Flow {
	return b.in("arp").flow(PeerOwner(p), PriorityNormal,
		Match{EthType: EthTypeARP, Regs: []RegMark{FromGateway}, ARPTpaPrefix: p.PodSubnet, ARPOp: ARPRequest},
		Move{Src: Whole(FieldEthSrc), Dst: Whole(FieldEthDst)},
		SetEthSrc{VirtualRouterMAC},
		SetARPOp{ARPReply},
		Move{Src: Whole(FieldARPSha), Dst: Whole(FieldARPTha)},
		SetARPSha{VirtualRouterMAC},
		Move{Src: Whole(FieldARPTpa), Dst: ScratchField},
		Move{Src: Whole(FieldARPSpa), Dst: Whole(FieldARPTpa)},
		Move{Src: ScratchField, Dst: Whole(FieldARPSpa)},
		OutputInPort{})
}

// remotePeer sends IP for the peer's pod subnet into the tunnel, addressed to the peer's
// node IP, and goes on to the next stage; egress then passes it to output (reg1 is
// decided).
//
//	table=remote, priority=100,ip,nw_dst=PEERSUBNET actions=set_field:PEERIP->tun_dst,load:TUN->NXM_NX_REG1[],goto_table:egress
func remotePeer(b builder, p Peer) Flow {
	s := b.in("remote")
	return s.flow(PeerOwner(p), PriorityNormal,
		Match{EthType: EthTypeIPv4, IPDst: p.PodSubnet},
		SetTunDst{p.NodeIP}, Load{Dst: OutPortField, Value: uint64(b.cfg.TunnelOFPort)},
		s.next())
}
