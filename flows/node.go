package flows

// The node's own flows (owner PipelineOwner): the gateway port's and the tunnel port's
// flows, service traffic, the subnet and cluster misses and off-subnet egress. One small
// function per flow; each stage's entry in the stage list (pipeline.go) names the function
// that lists its flows, and the stage's miss flows are generated from the entry.

import (
	"fmt"
	"net"
)

// NodeConfig is the node state the pipeline is built from.
type NodeConfig struct {
	// GatewayOFPort is the ofport of the gateway (an OVS internal port carrying GatewayIP
	// on the host), 1..0xfffffeff.
	GatewayOFPort uint32
	// GatewayMAC is the gateway port's MAC address: frames sent to the host get it as
	// eth_dst.
	GatewayMAC net.HardwareAddr
	// GatewayIP is the gateway's IPv4 address, by convention the first address of
	// PodSubnet; pods' default route is via it. Nil exactly when PodSubnet is.
	GatewayIP net.IP
	// PodSubnet is this node's IPv4 pod subnet (e.g. a /24 of the cluster CIDR); nil on
	// an IPv6-only node (PodSubnetIPv6 alone), which then has no IPv4 or ARP flow of its
	// own and whose pods have one IPv6 address each.
	PodSubnet *net.IPNet
	// PodSubnetIPv6 is this node's IPv6 pod subnet on a dual-stack node (e.g.
	// fd00:10:244:1::/64), nil on an IPv4-only node, whose flows it leaves exactly as
	// they were. With it the node uses the ipv6 feature (dualstack.go): the IPv6 spoof
	// guard, neighbor discovery delivery (RFC 4861) and local IPv6 forwarding.
	PodSubnetIPv6 *net.IPNet
	// GatewayIPv6 is the gateway's IPv6 address, by convention the subnet's first
	// address (PodSubnetIPv6 + 1, "::1" of it); pods' IPv6 default route is via it. Set
	// exactly when PodSubnetIPv6 is.
	GatewayIPv6 net.IP
	// Generation is this daemon run's generation (cookie bits 55..40), bumped at each
	// start so that flows of earlier runs can be deleted by GenerationCookie.
	Generation uint16
	// ClusterCIDR is the IPv4 prefix every node's pod subnet lies in (e.g. 10.244.0.0/16);
	// nil on a single node. Addresses in it that no local pod, gateway or known peer owns
	// are dropped in the remote stage instead of being sent to the host; everything outside
	// it leaves by the gateway, where the host masquerades.
	ClusterCIDR *net.IPNet
	// ClusterCIDRIPv6 is the IPv6 prefix every dual-stack node's IPv6 pod subnet lies in
	// (e.g. fd00:10:244::/56); nil = not known. Only on a dual-stack node. With it, IPv6
	// leaves the cluster as IPv4 does: a pod's IPv6 for an address outside the pod
	// subnets goes to the gateway, where the host masquerades it (nftables table ip6
	// ofsdn), and an address of it that no local pod, gateway or known peer owns drops in
	// the remote stage. Without it a pod's IPv6 reaches local pods, the gateway address
	// and peers' pods only (the rest drops in egress).
	ClusterCIDRIPv6 *net.IPNet
	// ServiceCIDR is the Kubernetes service IPv4 range (e.g. 10.96.0.0/12); nil = none.
	// Pod traffic to it goes to the gateway, where kube-proxy on the host handles it.
	ServiceCIDR *net.IPNet
	// TunnelOFPort is the ofport of the flow-based tunnel port (VXLAN or Geneve with
	// options:remote_ip=flow, key=flow), 1..0xfffffeff; 0 = no tunnel (single node, no
	// peers may be added).
	TunnelOFPort uint32
	// NodeIP is this node's underlay address, the tunnels' outer source; needed when
	// TunnelOFPort is set (a peer may not claim it). IPv4, or IPv6 for an IPv6 underlay
	// (UnderlayIPv6): every peer's node IP is then IPv6 too, matched as tun_ipv6_src and
	// set as tun_ipv6_dst.
	NodeIP net.IP
	// Policy turns NetworkPolicy enforcement on (policy.go): conntrack and the rule stages.
	// Off, the conntrack stage passes everything on to remote and no packet is tracked.
	Policy bool
	// Services turns the Service datapath in OVS on (service.go): conntrack with NAT for
	// all IP and, per Service port, a select group that DNATs new connections to an
	// endpoint. Off, its stages hold no flow. The daemon sets it with config serviceProxy:
	// ofsdn (controller.NodeOptions.Services).
	Services bool
	// AffinityLearnMax is the learn limit: the largest idle timeout, seconds, of the
	// flows the switch learns for session affinity (1..65535); 0 = MaxLearnTimeout
	// (65535, the learn action's 16 bits). A Service's affinity timeout above it is
	// learned with it and carried on by the daemon's remainder flow (AffinityRemainder).
	// Only tests lower it, to show the remainder in seconds.
	AffinityLearnMax uint16
	// DenyLog sends the first packet of each denied connection to the controller
	// (through meter DenyLogMeter, which the controller creates) instead of dropping it
	// silently; the switch drops it either way.
	DenyLog bool
}

// AffinityLearnLimit is c's learn limit, seconds: AffinityLearnMax, or MaxLearnTimeout
// when that is 0.
func (c NodeConfig) AffinityLearnLimit() uint16 {
	if c.AffinityLearnMax == 0 {
		return MaxLearnTimeout
	}
	return c.AffinityLearnMax
}

// Validate checks that the config can build a pipeline: a valid gateway ofport, a
// unicast 48-bit gateway MAC; an IPv4 gateway and subnet with the gateway inside it, or,
// on an IPv6-only node, neither (then PodSubnetIPv6 is required, and the IPv4-only
// options ClusterCIDR and ServiceCIDR are refused); on a node with an IPv6 pod subnet an
// IPv6 subnet of /64../126 with its gateway inside it (validateIPv6); with a tunnel port,
// a node IP of either family (the underlay's: an IPv6 one makes tunnels run over IPv6).
// NetworkPolicy and Services in OVS are built on every kind of node (an IPv6-only one's
// policy and Services stages hold IPv6 flows only).
func (c NodeConfig) Validate() error {
	if c.GatewayOFPort == 0 || c.GatewayOFPort >= 0xffffff00 {
		return fmt.Errorf("node config: gateway ofport %d is not a valid OpenFlow port (1..0xfffffeff): read it from the gateway Interface's ofport column", c.GatewayOFPort)
	}
	if len(c.GatewayMAC) != 6 || c.GatewayMAC[0]&1 != 0 {
		return fmt.Errorf("node config: gateway MAC %q is not a unicast Ethernet address: read it from the gateway Interface's mac_in_use column", c.GatewayMAC)
	}
	if c.PodSubnet == nil && c.GatewayIP == nil && c.PodSubnetIPv6 != nil {
		// An IPv6-only node.
		if c.ClusterCIDR != nil || c.ServiceCIDR != nil {
			return fmt.Errorf("node config: IPv4 cluster CIDR %v or service CIDR %v on an IPv6-only node (IPv6 pod subnet %v, no IPv4 one): leave them out, or give the node an IPv4 pod subnet", c.ClusterCIDR, c.ServiceCIDR, c.PodSubnetIPv6)
		}
	} else {
		if c.PodSubnet == nil || c.PodSubnet.IP.To4() == nil || len(c.PodSubnet.Mask) != net.IPv4len {
			return fmt.Errorf("node config: pod subnet %v is not an IPv4 prefix: set the node's IPv4 pod CIDR (or, on an IPv6-only node, only the IPv6 one)", c.PodSubnet)
		}
		if c.GatewayIP.To4() == nil || !c.PodSubnet.Contains(c.GatewayIP) {
			return fmt.Errorf("node config: gateway IP %v is not an IPv4 address in pod subnet %v: use the subnet's first address", c.GatewayIP, c.PodSubnet)
		}
	}
	if c.ClusterCIDR != nil {
		if c.ClusterCIDR.IP.To4() == nil || len(c.ClusterCIDR.Mask) != net.IPv4len || !containsNet(c.ClusterCIDR, c.PodSubnet) {
			return fmt.Errorf("node config: cluster CIDR %v is not an IPv4 prefix containing pod subnet %v: set clusterCIDR to the range every node's subnet is cut from", c.ClusterCIDR, c.PodSubnet)
		}
	}
	if c.ServiceCIDR != nil {
		if c.ServiceCIDR.IP.To4() == nil || len(c.ServiceCIDR.Mask) != net.IPv4len || overlaps(c.ServiceCIDR, c.PodSubnet) {
			return fmt.Errorf("node config: service CIDR %v is not an IPv4 prefix apart from pod subnet %v: set serviceCIDR to the cluster's --service-cluster-ip-range", c.ServiceCIDR, c.PodSubnet)
		}
	}
	if err := c.validateIPv6(); err != nil {
		return err
	}
	if c.TunnelOFPort != 0 {
		if c.TunnelOFPort >= 0xffffff00 || c.TunnelOFPort == c.GatewayOFPort {
			return fmt.Errorf("node config: tunnel ofport %d is not a valid OpenFlow port other than the gateway's %d: read it from the tunnel Interface's ofport column", c.TunnelOFPort, c.GatewayOFPort)
		}
		if c.NodeIP.To4() == nil && (len(c.NodeIP) != net.IPv6len || c.NodeIP.IsUnspecified() || c.NodeIP.IsMulticast() || c.NodeIP.IsLinkLocalUnicast()) {
			return fmt.Errorf("node config: node IP %v is not a unicast IPv4 or IPv6 address: set nodeIP to this node's underlay address", c.NodeIP)
		}
	}
	return nil
}

// IPv4 reports whether the node has an IPv4 pod subnet (every node but an IPv6-only one):
// only then does it have IPv4 and ARP flows of its own.
func (c NodeConfig) IPv4() bool { return c.PodSubnet != nil }

// UnderlayIPv6 reports whether the node's underlay is IPv6 (NodeIP is an IPv6 address):
// its tunnels then run over IPv6 (tun_ipv6_src, tun_ipv6_dst), to peers' IPv6 node IPs.
func (c NodeConfig) UnderlayIPv6() bool { return c.NodeIP != nil && c.NodeIP.To4() == nil }

// containsNet reports whether prefix outer contains all of inner.
func containsNet(outer, inner *net.IPNet) bool {
	oo, _ := outer.Mask.Size()
	io, _ := inner.Mask.Size()
	return oo <= io && outer.Contains(inner.IP)
}

// overlaps reports whether two prefixes share an address.
func overlaps(a, b *net.IPNet) bool { return a.Contains(b.IP) || b.Contains(a.IP) }

// PipelineFlows returns the node's own flows (owner PipelineOwner), in pipeline order: per
// stage, its own flows (the gateway's, the tunnel port's classifier flow with
// TunnelOFPort, service traffic to the gateway with ServiceCIDR, the cluster-CIDR miss
// with ClusterCIDR, egress), then its miss flows (MissNext's pass to the next stage, the
// priority-0 drop). cfg must be valid (NodeConfig.Validate).
func PipelineFlows(cfg NodeConfig) []Flow {
	return builder{p: std, cfg: cfg}.pipelineFlows()
}

// classifierNode: the tunnel port (with TunnelOFPort) and the gateway port.
func classifierNode(b builder) []Flow {
	var fs []Flow
	if b.cfg.TunnelOFPort != 0 {
		fs = append(fs, classifierTunnel(b))
	}
	return append(fs, classifierGateway(b))
}

// spoofGuardNode: the host's IP and ARP are trusted (IPv6-only node: not IPv4's); on a
// node with an IPv6 pod subnet its IPv6 too,
// and pods' router messages and foreign ND drop (dualstack.go).
func spoofGuardNode(b builder) []Flow {
	var fs []Flow
	if b.cfg.IPv4() {
		fs = []Flow{spoofGuardGatewayIP(b), spoofGuardGatewayARP(b)}
	}
	return append(fs, spoofGuardNodeIPv6(b)...)
}

// arpNode: ARP for the gateway IP (the stage is not in use on an IPv6-only node).
func arpNode(b builder) []Flow { return []Flow{arpToGateway(b)} }

// serviceNode: pod traffic to the service CIDR (with ServiceCIDR).
func serviceNode(b builder) []Flow {
	if b.cfg.ServiceCIDR == nil {
		return nil
	}
	return []Flow{serviceToGateway(b)}
}

// l3ForwardingNode: the gateway IP, the pod subnet's miss, off-subnet IP (not on an
// IPv6-only node); on a node with an IPv6 pod subnet the gateway's IPv6 address.
func l3ForwardingNode(b builder) []Flow {
	var fs []Flow
	if b.cfg.IPv4() {
		fs = []Flow{l3ToGateway(b), l3PodSubnetMiss(b), l3OffSubnet(b)}
	}
	return append(fs, l3ForwardingNodeIPv6(b)...)
}

// remoteNode: the cluster CIDR's miss (with ClusterCIDR), and on a dual-stack node with
// ClusterCIDRIPv6 the IPv6 one's.
func remoteNode(b builder) []Flow {
	var fs []Flow
	if b.cfg.ClusterCIDR != nil {
		fs = append(fs, remoteClusterMiss(b))
	}
	return append(fs, remoteNodeIPv6(b)...)
}

// egressNode: undecided pod traffic to the gateway (IPv4 unless IPv6-only; IPv6 on a node
// with ClusterCIDRIPv6), other undecided traffic dropped; decided traffic is the stage's miss
// and goes on to output.
func egressNode(b builder) []Flow {
	var fs []Flow
	if b.cfg.IPv4() {
		fs = []Flow{egressToGateway(b)}
	}
	return append(append(fs, egressUndecidedDrop(b)), egressNodeIPv6(b)...)
}

// outputNode: output to reg1.
func outputNode(b builder) []Flow {
	if b.cfg.Services {
		return []Flow{outputHairpin(b), outputToReg(b)}
	}
	return []Flow{outputToReg(b)}
}

// classifierGateway marks packets from the gateway port (the host) as SourceGateway.
//
//	table=classifier, priority=100,in_port=GW actions=load:0x1->NXM_NX_REG0[0..3],goto_table:"spoof_guard"
func classifierGateway(b builder) Flow {
	return b.in("classifier").flow(PipelineOwner, PriorityNormal,
		Match{InPort: b.cfg.GatewayOFPort},
		LoadMark(FromGateway), b.goTo("spoof_guard"))
}

// classifierTunnel marks packets from the tunnel port as SourceTunnel and sends them to
// tunnel_ingress, which accepts only known peers.
//
//	table=classifier, priority=100,in_port=TUN actions=load:0x3->NXM_NX_REG0[0..3],goto_table:"tunnel_ingress"
func classifierTunnel(b builder) Flow {
	return b.in("classifier").flow(PipelineOwner, PriorityNormal,
		Match{InPort: b.cfg.TunnelOFPort},
		LoadMark(FromTunnel), b.goTo("tunnel_ingress"))
}

// serviceToGateway sends a pod's IP for the service CIDR to the gateway port: kube-proxy
// on the host translates the service address (OpenShift SDN's table 60 did the same).
// Traffic from the host or a tunnel is never for a service address here (kube-proxy has
// translated it already), so only pods match.
//
// With policy (cfg.Policy) the packet goes through conntrack first (the egress_rules
// stage lets the service CIDR through: policy applies after the host's DNAT, when the
// packet comes back from the gateway with the backend's address), so that the host's
// un-DNATed replies find the connection established.
//
//	table=service, priority=100,ip,reg0=0x2/0xf,nw_dst=SVC actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:output
func serviceToGateway(b builder) Flow {
	next := b.goTo("output")
	if b.cfg.Policy {
		next = b.goTo("conntrack")
	}
	return b.in("service").flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv4, Regs: []RegMark{FromPod}, IPDst: b.cfg.ServiceCIDR},
		SetEthDst{b.cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)},
		next)
}

// remoteClusterMiss drops undecided IP (reg1=0) for an address of the cluster CIDR that
// no known peer's subnet holds (the peers' flows are more specific; local addresses were
// decided in l3_forwarding and carry reg1): sending it to the host would only bring it
// back here, and a removed peer's pods become unreachable at once.
//
//	table=remote, priority=10,ip,reg1=0,nw_dst=CLUSTER actions=drop
func remoteClusterMiss(b builder) Flow {
	return b.in("remote").flow(PipelineOwner, PriorityLow,
		Match{EthType: EthTypeIPv4, Regs: []RegMark{OutPortUnset}, IPDst: b.cfg.ClusterCIDR}, Drop{})
}

// spoofGuardGatewayIP trusts IP from the host: any source address goes on.
//
//	table="spoof_guard", priority=100,ip,reg0=0x1/0xf actions=goto_table:service
func spoofGuardGatewayIP(b builder) Flow {
	return b.in("spoof_guard").flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv4, Regs: []RegMark{FromGateway}},
		b.goTo(StageServiceConntrack))
}

// spoofGuardGatewayARP trusts ARP from the host.
//
//	table="spoof_guard", priority=100,arp,reg0=0x1/0xf actions=goto_table:arp
func spoofGuardGatewayARP(b builder) Flow {
	return b.in("spoof_guard").flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeARP, Regs: []RegMark{FromGateway}},
		b.goTo("arp"))
}

// arpToGateway delivers ARP whose target is the gateway IP to the gateway port: pods'
// requests for their default gateway (the host's interface answers) and pods' replies
// to the host's requests.
//
//	table=arp, priority=100,arp,arp_tpa=GWIP actions=load:GW->NXM_NX_REG1[],goto_table:output
func arpToGateway(b builder) Flow {
	return b.in("arp").flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeARP, ARPTpa: b.cfg.GatewayIP},
		Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)}, b.goTo("output"))
}

// l3ToGateway sends IP for the gateway IP (pods talking to the host) to the gateway
// port, addressed to the gateway MAC, and goes on to the next stage.
//
//	table="l3_forwarding", priority=100,ip,nw_dst=GWIP actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:conntrack
func l3ToGateway(b builder) Flow {
	s := b.in("l3_forwarding")
	return s.flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv4, IPDst: hostPrefix(b.cfg.GatewayIP)},
		SetEthDst{b.cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)},
		s.next())
}

// l3PodSubnetMiss drops IP for an address of this node's pod subnet that no live pod
// holds (the pods' own flows are more specific). Sending it to the host would only
// loop it back.
//
//	table="l3_forwarding", priority=10,ip,nw_dst=SUBNET actions=drop
func l3PodSubnetMiss(b builder) Flow {
	return b.in("l3_forwarding").flow(PipelineOwner, PriorityLow,
		Match{EthType: EthTypeIPv4, IPDst: b.cfg.PodSubnet}, Drop{})
}

// l3OffSubnet lets IP for any other address go on undecided (reg1=0): the remote and
// egress stages choose its port.
//
//	table="l3_forwarding", priority=1,ip actions=goto_table:conntrack
func l3OffSubnet(b builder) Flow {
	s := b.in("l3_forwarding")
	return s.flow(PipelineOwner, PriorityPass, Match{EthType: EthTypeIPv4}, s.next())
}

// egressToGateway sends a pod's undecided IP (off-subnet, no remote route) to the host
// through the gateway port: the host routes and masquerades it.
//
//	table=egress, priority=100,ip,reg0=0x2/0xf,reg1=0 actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:output
func egressToGateway(b builder) Flow {
	s := b.in("egress")
	return s.flow(PipelineOwner, PriorityNormal,
		Match{EthType: EthTypeIPv4, Regs: []RegMark{FromPod, OutPortUnset}},
		SetEthDst{b.cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(b.cfg.GatewayOFPort)},
		s.next())
}

// egressUndecidedDrop drops any other undecided packet, e.g. host traffic for an
// off-subnet address, which could only go back out the port it came in by. What is left
// is decided (reg1 != 0) and meets the stage's miss: on to output.
//
//	table=egress, priority=50,reg1=0 actions=drop
func egressUndecidedDrop(b builder) Flow {
	return b.in("egress").flow(PipelineOwner, PriorityMid,
		Match{Regs: []RegMark{OutPortUnset}}, Drop{})
}

// outputToReg sends the packet out the ofport in reg1.
//
//	table=output, priority=1 actions=output:NXM_NX_REG1[]
func outputToReg(b builder) Flow {
	return b.in("output").flow(PipelineOwner, PriorityPass, Match{}, OutputReg{Src: OutPortField})
}

// hostPrefix returns ip as a /32 prefix.
func hostPrefix(ip net.IP) *net.IPNet {
	return &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)}
}
