package flows

// IPv6 on a dual-stack node (issue 23): the IPv6 spoof guard, neighbor discovery (RFC
// 4861) delivered to the port that owns its target, and IPv6 between the node's own pods
// and its gateway (first slice); IPv6 to and from dual-stack peers through the tunnel and
// IPv6 egress (second slice, below). Everything here is built only on a node with
// NodeConfig.PodSubnetIPv6 (the ipv6 feature); an IPv4-only node's flows are exactly
// what they were, so PipelineVersion did not change.
//
// Design history. Antrea's IPv6 spoof guard checks in_port, dl_src and ipv6_src and then
// sends all neighbor discovery to NORMAL without looking at its target; a pod can then
// answer for any address (NA spoofing) and send Router Advertisements that every other
// pod on the node takes (the rogue-RA attack, kubernetes #91507). ofsdn is stricter:
//
//   - A pod sends IPv6 only from its own MAC and its own two addresses: its global one
//     (from the node's IPv6 pool) and its link-local one, which ofsdn pins to the
//     modified EUI-64 of its MAC (RFC 4291 §2.5.6, appendix A; podnet turns the
//     kernel's own address generation off and adds exactly this one), so the pipeline
//     knows it without asking the pod.
//   - Neighbor Solicitations (135) pass only with one of those as source and the pod's
//     MAC in the source link-layer address option (nd_sll; Linux always sends it unless
//     the source is ::, RFC 4861 §4.3, and a DAD probe from :: is refused: DAD is off in
//     ofsdn pods). Neighbor Advertisements (136) pass only for the pod's own address as
//     target, sent from that address (what Linux does, ndisc_send_na), with the pod's
//     MAC as target link-layer address or with no such option (nd_tll 00:00:00:00:00:00:
//     Linux omits it when answering a unicast solicitation, a NUD probe, and RFC 4861
//     §7.2.4 lets it; an NA without it never changes a neighbor's link-layer address,
//     §7.2.5). Anything else of those two types from a pod is dropped, counted.
//   - Router Solicitations (133), Router Advertisements (134) and Redirects (137) from a
//     pod are dropped before any other check, counted per type: nothing on the node
//     routes for pods by RA, and a pod may not tell another where to route.
//   - ICMPv6 errors (Packet Too Big above all, RFC 4443 §3.2; path MTU discovery needs
//     it, RFC 8201) and every other IPv6 packet from a pod's own source go on like IPv4.
//
// Neighbor discovery is delivered, not answered, as ARP is: every address a pod can
// solicit belongs to a real interface (a pod's veth end or the gateway internal port,
// which has the gateway's IPv6 address on the host and answers for it itself, as it
// answers ARP). The nd stage sends a solicitation to the port owning its nd_target (the
// gateway's address, a pod's global or link-local one) and any ND packet addressed to a
// local MAC (advertisements, unicast NUD probes) to that MAC's port. A solicitation for
// the gateway's link-local address sent to the multicast group is not delivered (the
// pipeline does not know the host's link-local address); pods never route via it (their
// IPv6 default route is via GatewayIPv6) and reach it by unicast probes to the gateway
// MAC. No ND is sent to or taken from a tunnel.
//
// IPv6 is forwarded by ipv6_dst to the node's own pods and to the gateway address; an
// unheld address of the node's IPv6 pod subnet drops in l3_forwarding, any other IPv6
// goes on undecided: to a dual-stack peer through the tunnel, with the IPv6 cluster CIDR
// to the gateway (egress, masqueraded by the host), else dropped, counted, in egress (the
// second slice, below; a pod's address must not leave the node unmasqueraded). With
// Services in OVS, IPv6 goes through the Services stages as IPv4 does (service.go: its
// own conntrack flows, IPv6 Service ports, hairpin to HairpinSNATIPv6). NetworkPolicy
// judges IPv6 as it judges IPv4 (policy.go: conntrack per family in the same zone, the
// rules' clauses per family, an isolated pod's default deny for both); neighbor
// discovery never enters the policy stages (spoof_guard sends it to nd, as it sends ARP
// to arp), so a deny-all policy leaves it working, as NetworkPolicy governs IP traffic
// and leaves ARP alone.

import (
	"fmt"
	"net"
)

// ICMPv6Redirect is ICMPv6 type 137 (RFC 4861 §4.5), which only a router may send.
const ICMPv6Redirect uint8 = 137

// Priorities of the IPv6 spoof guard in spoof_guard (above PriorityNormal, the pods'
// plain IPv6 flows): the router-message drops win over everything a pod may send, the
// pods' own ND flows over the drop of any other ND.
const (
	priorityRouterDrop uint16 = 200 // RS, RA, Redirect from a pod: dropped
	priorityNDPod      uint16 = 150 // a pod's own NS/NA → nd
	priorityNDDrop     uint16 = 120 // any other NS/NA from a pod: dropped
	priorityNDByMAC    uint16 = 110 // nd: ND addressed to a local MAC
)

// LinkLocalFromMAC returns the IPv6 link-local address fe80::/64 with the modified
// EUI-64 interface identifier of mac (RFC 4291 §2.5.6 and appendix A: the 48-bit MAC
// split by ff:fe, its universal/local bit inverted), 16 bytes; nil for a MAC that is not
// 48 bits. It is the only link-local address an ofsdn pod has (podnet adds it, with the
// kernel's own generation off) and the only one its spoof guard lets it send from.
func LinkLocalFromMAC(mac net.HardwareAddr) net.IP {
	if len(mac) != 6 {
		return nil
	}
	return net.IP{0xfe, 0x80, 0, 0, 0, 0, 0, 0,
		mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// IPv6 returns the pod's IPv6 address (16 bytes), the first of IPs that is one; nil if it
// has none.
func (p Pod) IPv6() net.IP {
	for _, ip := range p.IPs {
		if ip.To4() == nil && len(ip) == net.IPv6len {
			return ip
		}
	}
	return nil
}

// ipv6On: a node with an IPv6 pod subnet uses the ipv6 feature.
func ipv6On(c NodeConfig) bool { return c.PodSubnetIPv6 != nil }

// validateIPv6 checks the dual-stack part of c: both PodSubnetIPv6 and GatewayIPv6 or
// neither; an IPv6 prefix (not IPv4-mapped, not link-local or multicast) of at most /126
// with the gateway inside it and not its subnet-router anycast address (RFC 4291
// §2.6.1).
func (c NodeConfig) validateIPv6() error {
	if c.PodSubnetIPv6 == nil && c.GatewayIPv6 == nil {
		if c.ClusterCIDRIPv6 != nil {
			return fmt.Errorf("node config: IPv6 cluster CIDR %v on a node without an IPv6 pod subnet: leave it out, or configure the node dual-stack (podSubnets)", c.ClusterCIDRIPv6)
		}
		return nil
	}
	sn := c.PodSubnetIPv6
	ones, bits := 0, 0
	if sn != nil {
		ones, bits = sn.Mask.Size()
	}
	if sn == nil || len(sn.IP) != net.IPv6len || sn.IP.To4() != nil || bits != 128 || ones > 126 ||
		sn.IP.IsLinkLocalUnicast() || sn.IP.IsMulticast() {
		return fmt.Errorf("node config: IPv6 pod subnet %v is not an IPv6 prefix of /126 or shorter outside fe80::/10 and ff00::/8: set the node's IPv6 pod CIDR (podSubnets)", sn)
	}
	gw := c.GatewayIPv6
	if len(gw) != net.IPv6len || gw.To4() != nil || !sn.Contains(gw) || gw.Equal(sn.IP.Mask(sn.Mask)) {
		return fmt.Errorf("node config: gateway IPv6 address %v is not an address of IPv6 pod subnet %v other than its subnet-router anycast address: use the subnet's first address (::1 of it)", gw, sn)
	}
	if cc := c.ClusterCIDRIPv6; cc != nil {
		if ones, bits := cc.Mask.Size(); len(cc.IP) != net.IPv6len || cc.IP.To4() != nil || bits != 128 || ones == 0 || !containsNet(cc, sn) {
			return fmt.Errorf("node config: IPv6 cluster CIDR %v is not an IPv6 prefix (not ::/0) containing IPv6 pod subnet %v: set clusterCIDRIPv6 to the range every node's IPv6 subnet is cut from", cc, sn)
		}
	}
	return nil
}

// validateIPv6Addr checks a pod's IPv6 address on node cfg: a dual-stack node, inside
// its IPv6 pod subnet, not the gateway's address nor the subnet-router anycast address.
func (p Pod) validateIPv6Addr(cfg NodeConfig, ip net.IP) error {
	if cfg.PodSubnetIPv6 == nil {
		return fmt.Errorf("pod %v: address %s is IPv6 but this node has no IPv6 pod subnet: give the pod IPv4 addresses only, or configure the node dual-stack (podSubnets)", p, ip)
	}
	sn := cfg.PodSubnetIPv6
	if !sn.Contains(ip) || ip.Equal(cfg.GatewayIPv6) || ip.Equal(sn.IP.Mask(sn.Mask)) {
		return fmt.Errorf("pod %v: address %s is not an IPv6 address of pod subnet %v other than the gateway %v and the subnet-router anycast address: allocate it from the node's IPAM", p, ip, sn, cfg.GatewayIPv6)
	}
	return nil
}

// hostPrefix6 returns ip as a /128 prefix.
func hostPrefix6(ip net.IP) *net.IPNet {
	return &net.IPNet{IP: ip.To16(), Mask: net.CIDRMask(128, 128)}
}

func icmp6Type(t uint8) *uint8 { return &t }

// spoofGuardNodeIPv6: the host's IPv6 is trusted (its ND to the nd stage); router
// messages and foreign ND from pods are dropped. Only on a dual-stack node.
func spoofGuardNodeIPv6(b builder) []Flow {
	if !ipv6On(b.cfg) {
		return nil
	}
	fs := []Flow{
		spoofGuardGatewayND(b, ICMPv6NeighborSolicit),
		spoofGuardGatewayND(b, ICMPv6NeighborAdvert),
		spoofGuardGatewayIPv6(b),
	}
	for _, t := range []uint8{ICMPv6RouterSolicit, ICMPv6RouterAdvert, ICMPv6Redirect} {
		fs = append(fs, spoofGuardPodICMPv6Drop(b, t, priorityRouterDrop))
	}
	for _, t := range []uint8{ICMPv6NeighborSolicit, ICMPv6NeighborAdvert} {
		fs = append(fs, spoofGuardPodICMPv6Drop(b, t, priorityNDDrop))
	}
	return fs
}

// spoofGuardGatewayND sends the host's neighbor solicitations and advertisements to the
// nd stage.
//
//	table="spoof_guard", priority=100,icmp6,reg0=0x1/0xf,icmp_type=135 actions=goto_table:nd
func spoofGuardGatewayND(b builder, typ uint8) Flow {
	return b.in("spoof_guard").flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, Regs: []RegMark{FromGateway}, ICMPv6Type: icmp6Type(typ)},
		b.goTo("nd"))
}

// spoofGuardGatewayIPv6 trusts the host's other IPv6: any source goes on, past the
// Services stages (IPv4 only in this slice).
//
//	table="spoof_guard", priority=50,ipv6,reg0=0x1/0xf actions=goto_table:service
func spoofGuardGatewayIPv6(b builder) Flow {
	return b.in("spoof_guard").flow(PipelineOwner, PriorityMid,
		Match{EthType: EthTypeIPv6, Regs: []RegMark{FromGateway}},
		b.goTo(StageServiceConntrack))
}

// spoofGuardPodICMPv6Drop drops ICMPv6 of type typ from any pod at priority prio: the
// router messages (133, 134, 137) above every pod flow, NS and NA (135, 136) below the
// pods' own ND flows, so only those get through. Each type has its own flow, so its
// n_packets counts what pods tried.
//
//	table="spoof_guard", priority=200,icmp6,reg0=0x2/0xf,icmp_type=134 actions=drop
func spoofGuardPodICMPv6Drop(b builder, typ uint8, prio uint16) Flow {
	return b.in("spoof_guard").flow(PipelineOwner, prio,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, Regs: []RegMark{FromPod}, ICMPv6Type: icmp6Type(typ)},
		Drop{})
}

// ndNode: solicitations for the gateway's IPv6 address and ND addressed to the gateway
// MAC go to the gateway port. Only on a dual-stack node (the stage's feature).
func ndNode(b builder) []Flow {
	return []Flow{ndToGatewayMAC(b), ndToGatewayTarget(b)}
}

// ndToGatewayMAC delivers ND addressed to the gateway MAC (pods' advertisements for the
// host, unicast probes) to the gateway port.
//
//	table=nd, priority=110,icmp6,dl_dst=GWMAC actions=load:GW->NXM_NX_REG1[],goto_table:output
func ndToGatewayMAC(b builder) Flow {
	return b.in("nd").flow(PipelineOwner, priorityNDByMAC,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, EthDst: b.cfg.GatewayMAC},
		Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)}, b.goTo("output"))
}

// ndToGatewayTarget delivers solicitations for the gateway's IPv6 address (multicast to
// its solicited-node group) to the gateway port; the host's interface answers.
//
//	table=nd, priority=100,icmp6,icmp_type=135,nd_target=GW6 actions=load:GW->NXM_NX_REG1[],goto_table:output
func ndToGatewayTarget(b builder) Flow {
	return b.in("nd").flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: icmp6Type(ICMPv6NeighborSolicit), NDTarget: b.cfg.GatewayIPv6.To16()},
		Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)}, b.goTo("output"))
}

// l3ForwardingNodeIPv6: IPv6 for the gateway address, the IPv6 pod subnet's miss and
// other IPv6 on, undecided (dual-stack nodes only).
func l3ForwardingNodeIPv6(b builder) []Flow {
	if !ipv6On(b.cfg) {
		return nil
	}
	return []Flow{l3ToGatewayIPv6(b), l3PodSubnetMissIPv6(b), l3OffSubnetIPv6(b)}
}

// l3ToGatewayIPv6 sends IPv6 for the gateway's IPv6 address to the gateway port.
//
//	table="l3_forwarding", priority=100,ipv6,ipv6_dst=GW6 actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:output
func l3ToGatewayIPv6(b builder) Flow {
	s := b.in("l3_forwarding")
	return s.flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv6, IPv6Dst: hostPrefix6(b.cfg.GatewayIPv6)},
		SetEthDst{b.cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)},
		s.next())
}

// podFlowsIPv6 are a dual-stack pod's IPv6 flows by stage: in spoof_guard its two source
// addresses and its ND, in nd the delivery of ND to it, in l3_forwarding IPv6 for its
// address.
func (b builder) podFlowsIPv6(pod Pod) (guard, nd, l3 []Flow) {
	g, ll := pod.IPv6().To16(), LinkLocalFromMAC(pod.MAC)
	fs := []Flow{
		spoofGuardPodIPv6(b, pod, g), spoofGuardPodIPv6(b, pod, ll),
		spoofGuardPodNS(b, pod, g), spoofGuardPodNS(b, pod, ll),
	}
	for _, own := range []net.IP{g, ll} {
		for _, tll := range []net.HardwareAddr{pod.MAC, make(net.HardwareAddr, 6)} {
			fs = append(fs, spoofGuardPodNA(b, pod, own, tll))
		}
	}
	l3 = []Flow{l3ToPodIPv6(b, pod, g)}
	if b.cfg.Services {
		l3 = append(l3, hairpinToPodIPv6(b, pod, g))
	}
	return fs, []Flow{ndToPodMAC(b, pod), ndToPodTarget(b, pod, g), ndToPodTarget(b, pod, ll)}, l3
}

// spoofGuardPodIPv6 lets IPv6 from the pod's port on with its MAC and one of its own
// addresses as source, past the Services stages.
//
//	table="spoof_guard", priority=100,ipv6,in_port=P,dl_src=MAC,ipv6_src=IP6 actions=goto_table:service
func spoofGuardPodIPv6(b builder, pod Pod, src net.IP) Flow {
	return b.in("spoof_guard").flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeIPv6, InPort: pod.OFPort, EthSrc: pod.MAC, IPv6Src: hostPrefix6(src)},
		b.goTo(StageServiceHairpin))
}

// spoofGuardPodNS lets the pod's neighbor solicitations on to nd: from its MAC and one
// of its own addresses, with its MAC as source link-layer address (RFC 4861 §4.3).
//
//	table="spoof_guard", priority=150,icmp6,in_port=P,dl_src=MAC,ipv6_src=IP6,icmp_type=135,nd_sll=MAC actions=goto_table:nd
func spoofGuardPodNS(b builder, pod Pod, src net.IP) Flow {
	return b.in("spoof_guard").flow(PodOwner(pod), priorityNDPod,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, InPort: pod.OFPort, EthSrc: pod.MAC, IPv6Src: hostPrefix6(src),
			ICMPv6Type: icmp6Type(ICMPv6NeighborSolicit), NDSLL: pod.MAC},
		b.goTo("nd"))
}

// spoofGuardPodNA lets the pod's neighbor advertisements on to nd: for one of its own
// addresses as target, sent from that address, with tll its MAC or all zeros (no target
// link-layer address option, RFC 4861 §7.2.4).
//
//	table="spoof_guard", priority=150,icmp6,in_port=P,dl_src=MAC,ipv6_src=IP6,icmp_type=136,nd_target=IP6,nd_tll=MAC actions=goto_table:nd
func spoofGuardPodNA(b builder, pod Pod, own net.IP, tll net.HardwareAddr) Flow {
	return b.in("spoof_guard").flow(PodOwner(pod), priorityNDPod,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, InPort: pod.OFPort, EthSrc: pod.MAC, IPv6Src: hostPrefix6(own),
			ICMPv6Type: icmp6Type(ICMPv6NeighborAdvert), NDTarget: own, NDTLL: tll},
		b.goTo("nd"))
}

// ndToPodMAC delivers ND addressed to the pod's MAC (advertisements, unicast probes) to
// its port.
//
//	table=nd, priority=110,icmp6,dl_dst=MAC actions=load:P->NXM_NX_REG1[],goto_table:output
func ndToPodMAC(b builder, pod Pod) Flow {
	return b.in("nd").flow(PodOwner(pod), priorityNDByMAC,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, EthDst: pod.MAC},
		Load{Dst: OutPortField, Value: uint64(pod.OFPort)}, b.goTo("output"))
}

// ndToPodTarget delivers solicitations for one of the pod's addresses to its port; the
// pod answers.
//
//	table=nd, priority=100,icmp6,icmp_type=135,nd_target=IP6 actions=load:P->NXM_NX_REG1[],goto_table:output
func ndToPodTarget(b builder, pod Pod, target net.IP) Flow {
	return b.in("nd").flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: icmp6Type(ICMPv6NeighborSolicit), NDTarget: target},
		Load{Dst: OutPortField, Value: uint64(pod.OFPort)}, b.goTo("output"))
}

// l3ToPodIPv6 sends IPv6 for the pod's global address to its port, addressed to its MAC.
//
//	table="l3_forwarding", priority=100,ipv6,ipv6_dst=IP6 actions=set_field:MAC->eth_dst,load:P->NXM_NX_REG1[],goto_table:output
func l3ToPodIPv6(b builder, pod Pod, ip net.IP) Flow {
	s := b.in("l3_forwarding")
	return s.flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeIPv6, IPv6Dst: hostPrefix6(ip)},
		SetEthDst{pod.MAC}, Load{Dst: OutPortField, Value: uint64(pod.OFPort)},
		s.next())
}

// Cross-node IPv6 (issue 23, second slice). A dual-stack peer's IPv6 pod subnet is routed
// as its IPv4 one: the remote stage sends IPv6 for it into the same flow-based tunnel
// port with tun_dst = the peer's IPv4 node IP (IPv6 inside the IPv4 underlay: VXLAN and
// Geneve carry the Ethernet frame whatever its EtherType, and the outer header is the
// IPv4 one's 50 bytes, so the pod MTU is the same), and tunnel_ingress accepts IPv6 only
// from the peer's node IP with a source in that subnet, the tunnel's spoof guard, as for
// IPv4. Both flows carry the peer's owner (PeerOwner), so a Node update rewrites them and
// a Node delete removes them with its IPv4 flows. The receiving node delivers by
// l3_forwarding's per-pod ipv6_dst flow (eth_dst = the pod's MAC) exactly as for IPv4:
// hop limit untouched, as the IPv4 path leaves the TTL (the pipeline routes, but like
// every Kubernetes overlay it does not count itself as a hop). Neighbor discovery never
// crosses nodes (each node's nd stage delivers it to local ports only); tunnel_ingress
// drops Router Solicitations and Advertisements, Redirects and NS/NA that arrive anyway
// (a peer of another build, a forged outer header), counted, before any peer flow: they
// would arrive with hop limit 255 and pass a pod's RFC 4861 checks. l3_forwarding drops
// IPv6 for an address of the node's own IPv6 pod subnet that no pod holds and lets every
// other IPv6 on, undecided: remote routes a peer's, and egress drops the rest, counted
// (no IPv6 leaves by the gateway without IPv6 masquerade). The host reaches peers' pods
// over IPv6 by a route for the IPv6 cluster CIDR via the link-local address of
// VirtualRouterMAC, a permanent neighbor entry on the gateway (controller; no ND responder
// in the pipeline): its IPv6 from the gateway port, source the gateway's IPv6 address,
// takes the remote stage's peer flow like a pod's.

// validateIPv6 checks p's IPv6 pod subnet on a dual-stack node cfg: an IPv6 prefix
// outside fe80::/10 and ff00::/8 that does not overlap this node's. An IPv4-only node
// ignores it.
func (p Peer) validateIPv6(cfg NodeConfig) error {
	sn := p.PodSubnetIPv6
	if sn == nil || !ipv6On(cfg) {
		return nil
	}
	if ones, bits := sn.Mask.Size(); len(sn.IP) != net.IPv6len || sn.IP.To4() != nil || bits != 128 || ones > 126 ||
		sn.IP.IsLinkLocalUnicast() || sn.IP.IsMulticast() {
		return fmt.Errorf("peer %s: IPv6 pod subnet %v is not an IPv6 prefix of /126 or shorter outside fe80::/10 and ff00::/8: fix the peer node's IPv6 podCIDR", p.Name, sn)
	}
	if overlaps(sn, cfg.PodSubnetIPv6) {
		return fmt.Errorf("peer %s: IPv6 pod subnet %v overlaps this node's %v: every node needs its own IPv6 subnet", p.Name, sn, cfg.PodSubnetIPv6)
	}
	if cfg.ClusterCIDRIPv6 != nil && !containsNet(cfg.ClusterCIDRIPv6, sn) {
		return fmt.Errorf("peer %s: IPv6 pod subnet %v is outside IPv6 cluster CIDR %v: fix the peer's IPv6 podCIDR or clusterCIDRIPv6", p.Name, sn, cfg.ClusterCIDRIPv6)
	}
	return nil
}

// peerFlowsIPv6 are a dual-stack peer's IPv6 flows on a dual-stack node: tunnel ingress
// and the remote route for its IPv6 pod subnet; none otherwise.
func (b builder) peerFlowsIPv6(p Peer) []Flow {
	if !ipv6On(b.cfg) || p.PodSubnetIPv6 == nil {
		return nil
	}
	return []Flow{tunnelIngressPeerIPv6(b, p), remotePeerIPv6(b, p)}
}

// tunnelIngressPeerIPv6 accepts IPv6 that arrived through the tunnel from the peer's
// node IP with a source address in the peer's IPv6 pod subnet; it goes on past the
// Services stages (IPv4 only), as the host's IPv6 does.
//
//	table="tunnel_ingress", priority=100,ipv6,tun_src=PEERIP,ipv6_src=PEERSUBNET6 actions=goto_table:service
func tunnelIngressPeerIPv6(b builder, p Peer) Flow {
	return b.in("tunnel_ingress").flow(PeerOwner(p), PriorityNormal,
		Match{EthType: EthTypeIPv6, TunSrc: p.NodeIP, IPv6Src: p.PodSubnetIPv6},
		b.goTo(StageServiceConntrack))
}

// remotePeerIPv6 sends IPv6 for the peer's IPv6 pod subnet into the tunnel, addressed to
// the peer's (IPv4) node IP, and goes on to the next stage.
//
//	table=remote, priority=100,ipv6,ipv6_dst=PEERSUBNET6 actions=set_field:PEERIP->tun_dst,load:TUN->NXM_NX_REG1[],goto_table:egress
func remotePeerIPv6(b builder, p Peer) Flow {
	s := b.in("remote")
	return s.flow(PeerOwner(p), PriorityNormal,
		Match{EthType: EthTypeIPv6, IPv6Dst: p.PodSubnetIPv6},
		SetTunDst{p.NodeIP}, Load{Dst: OutPortField, Value: uint64(b.cfg.TunnelOFPort)},
		s.next())
}

// tunnelIngressNode: on a dual-stack node, router messages and neighbor discovery from
// the tunnel drop (each type counted by its own flow). Nothing on an IPv4-only node.
func tunnelIngressNode(b builder) []Flow {
	if !ipv6On(b.cfg) {
		return nil
	}
	var fs []Flow
	for _, t := range []uint8{ICMPv6RouterSolicit, ICMPv6RouterAdvert, ICMPv6NeighborSolicit, ICMPv6NeighborAdvert, ICMPv6Redirect} {
		fs = append(fs, tunnelIngressICMPv6Drop(b, t))
	}
	return fs
}

// tunnelIngressICMPv6Drop drops ICMPv6 of type typ from the tunnel, above every peer's
// flow: ND and router messages stay on their node.
//
//	table="tunnel_ingress", priority=200,icmp6,icmp_type=134 actions=drop
func tunnelIngressICMPv6Drop(b builder, typ uint8) Flow {
	return b.in("tunnel_ingress").flow(PipelineOwner, priorityRouterDrop,
		Match{EthType: EthTypeIPv6, IPProto: IPProtoICMPv6, ICMPv6Type: icmp6Type(typ)},
		Drop{})
}

// l3PodSubnetMissIPv6 drops IPv6 for an address of this node's IPv6 pod subnet that no
// live pod holds (the pods' own flows are more specific).
//
//	table="l3_forwarding", priority=10,ipv6,ipv6_dst=SUBNET6 actions=drop
func l3PodSubnetMissIPv6(b builder) Flow {
	return b.in("l3_forwarding").flow(PipelineOwner, PriorityLow,
		Match{EthType: EthTypeIPv6, IPv6Dst: b.cfg.PodSubnetIPv6}, Drop{})
}

// l3OffSubnetIPv6 lets IPv6 for any other address go on undecided (reg1=0): remote routes
// a peer's subnet, egress drops the rest.
//
//	table="l3_forwarding", priority=1,ipv6 actions=goto_table:remote
func l3OffSubnetIPv6(b builder) Flow {
	s := b.in("l3_forwarding")
	return s.flow(PipelineOwner, PriorityPass, Match{EthType: EthTypeIPv6}, s.next())
}

// IPv6 egress (issue 23, second slice). On a dual-stack node that knows the IPv6 cluster
// CIDR (NodeConfig.ClusterCIDRIPv6) a pod's undecided IPv6 (not for a local pod, the
// gateway or a peer's pod subnet) goes to the gateway as its IPv4 does, and the host
// routes it and masquerades it to the node's address when it leaves the IPv6 cluster CIDR
// (package masq, table ip6 ofsdn; IPv6 forwarding is turned on for it). An address of
// the IPv6 cluster CIDR that nobody holds drops in the remote stage first (a removed
// peer's pods are unreachable at once, and nothing leaves unmasqueraded for a cluster
// address). Without the IPv6 cluster CIDR no IPv6 goes to the gateway but the gateway
// address's own: the masquerade rules could not tell the cluster from the outside.

// remoteNodeIPv6: the IPv6 cluster CIDR's miss, on a dual-stack node with
// ClusterCIDRIPv6.
func remoteNodeIPv6(b builder) []Flow {
	if !ipv6On(b.cfg) || b.cfg.ClusterCIDRIPv6 == nil {
		return nil
	}
	return []Flow{remoteClusterMissIPv6(b)}
}

// remoteClusterMissIPv6 drops undecided IPv6 (reg1=0) for an address of the IPv6 cluster
// CIDR that no known peer's IPv6 subnet holds.
//
//	table=remote, priority=10,ipv6,reg1=0,ipv6_dst=CLUSTER6 actions=drop
func remoteClusterMissIPv6(b builder) Flow {
	return b.in("remote").flow(PipelineOwner, PriorityLow,
		Match{EthType: EthTypeIPv6, Regs: []RegMark{OutPortUnset}, IPv6Dst: b.cfg.ClusterCIDRIPv6}, Drop{})
}

// egressNodeIPv6: a pod's undecided IPv6 to the gateway, on a dual-stack node with
// ClusterCIDRIPv6.
func egressNodeIPv6(b builder) []Flow {
	if !ipv6On(b.cfg) || b.cfg.ClusterCIDRIPv6 == nil {
		return nil
	}
	return []Flow{egressToGatewayIPv6(b)}
}

// egressToGatewayIPv6 sends a pod's undecided IPv6 (outside the cluster) to the host
// through the gateway port: the host routes and masquerades it.
//
//	table=egress, priority=100,ipv6,reg0=0x2/0xf,reg1=0 actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:output
func egressToGatewayIPv6(b builder) Flow {
	s := b.in("egress")
	return s.flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv6, Regs: []RegMark{FromPod, OutPortUnset}},
		SetEthDst{b.cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)},
		s.next())
}
