package flows

// One local pod's flows: classify its port, guard its source addresses, deliver ARP and
// IP for its address to its port. All carry the pod's owner (PodOwner: kind OwnerPod, id
// = Pod.OwnerID, allocated with its IP lease) in their cookie, so PodCookie selects
// exactly them for deletion.

import (
	"fmt"
	"net"
)

// Pod is one local pod's attachment to the bridge.
type Pod struct {
	// OFPort is the ofport of the pod's host-side veth on the bridge, 1..0xfffffeff.
	OFPort uint32
	// MAC is the MAC address of the pod's interface (inside the pod), the only one it may
	// send from.
	MAC net.HardwareAddr
	// IPs are the pod's addresses, the only ones it may send from; each unique among the
	// node's live pods: exactly one IPv4 address in the node's pod subnet and, on a
	// dual-stack node, at most one IPv6 address in its IPv6 pod subnet; on an IPv6-only
	// node exactly one IPv6 address (Validate). Its link-local address is not listed: it
	// is LinkLocalFromMAC(MAC).
	IPs []net.IP
	// OwnerID is the id of the pod's flow owner (cookie bits 31..0 of its flows, kind
	// OwnerPod), 1..2^32-1, unique among the node's live pods and kept across daemon
	// restarts: the node's IPAM allocates it with the pod's lease and records it there
	// (ipam.Lease.OwnerID). It does not depend on the pod's addresses, so a pod of any
	// address family has one.
	OwnerID uint32
}

// IPv4 returns the pod's IPv4 address (4 bytes), the first of IPs that is one; nil if it
// has none.
func (p Pod) IPv4() net.IP {
	for _, ip := range p.IPs {
		if ip4 := ip.To4(); ip4 != nil {
			return ip4
		}
	}
	return nil
}

// String names the pod for error messages: its addresses, or its ofport if it has none.
func (p Pod) String() string {
	if len(p.IPs) == 0 {
		return fmt.Sprintf("on ofport %d", p.OFPort)
	}
	return fmt.Sprint(p.IPs)
}

// Validate checks that pod can have flows on the node described by cfg: an owner id, a
// valid ofport other than the gateway's, a unicast 48-bit MAC, exactly one IPv4 address
// in the pod subnet other than the gateway IP and, on a dual-stack node (cfg's
// PodSubnetIPv6), at most one IPv6 address in the IPv6 pod subnet other than the IPv6
// gateway; on an IPv6-only node (no PodSubnet) exactly one IPv6 address and no IPv4 one.
// An IPv6 address on an IPv4-only node is refused.
func (p Pod) Validate(cfg NodeConfig) error {
	if p.OwnerID == 0 {
		return fmt.Errorf("pod %v: owner id 0 is not a pod owner id (1..2^32-1): take the id its IP lease holds (ipam.Lease.OwnerID)", p)
	}
	if p.OFPort == 0 || p.OFPort >= 0xffffff00 || p.OFPort == cfg.GatewayOFPort {
		return fmt.Errorf("pod %v: ofport %d is not a valid pod port (1..0xfffffeff, not the gateway's %d): read it from the pod Interface's ofport column", p, p.OFPort, cfg.GatewayOFPort)
	}
	if len(p.MAC) != 6 || p.MAC[0]&1 != 0 {
		return fmt.Errorf("pod %v: MAC %q is not a unicast Ethernet address: use the pod interface's address", p, p.MAC)
	}
	var v4, v6 int
	for _, ip := range p.IPs {
		if ip.To4() == nil && len(ip) == net.IPv6len {
			if err := p.validateIPv6Addr(cfg, ip); err != nil {
				return err
			}
			v6++
			continue
		}
		v4++
	}
	if !cfg.IPv4() {
		if v4 != 0 || v6 != 1 {
			return fmt.Errorf("pod %v: has %d IPv4 and %d IPv6 addresses, want exactly one IPv6 address on this IPv6-only node (IPv6 pod subnet %v): allocate it from the node's IPAM", p, v4, v6, cfg.PodSubnetIPv6)
		}
		return nil
	}
	if v4 != 1 || v6 > 1 {
		if cfg.PodSubnetIPv6 != nil {
			return fmt.Errorf("pod %v: has %d IPv4 and %d IPv6 addresses, want exactly one IPv4 address and at most one IPv6 address: allocate them from the node's IPAM", p, v4, v6)
		}
		return fmt.Errorf("pod %v: has %d addresses, want exactly one IPv4 address: allocate one from the node's IPAM", p, len(p.IPs))
	}
	ip := p.IPv4()
	if ip == nil || cfg.PodSubnet == nil || !cfg.PodSubnet.Contains(ip) || ip.Equal(cfg.GatewayIP) {
		return fmt.Errorf("pod %v: address is not an IPv4 address of pod subnet %v other than the gateway %v: allocate it from the node's IPAM", p, cfg.PodSubnet, cfg.GatewayIP)
	}
	return nil
}

// PodFlows returns all flows of one local pod, in pipeline order, with owner
// PodOwner(pod). cfg and pod must be valid (NodeConfig.Validate, Pod.Validate).
func PodFlows(cfg NodeConfig, pod Pod) []Flow {
	return builder{p: std, cfg: cfg}.podFlows(pod)
}

// podFlows is PodFlows on b's pipeline.
func (b builder) podFlows(pod Pod) []Flow {
	if pod.IPv4() == nil {
		// An IPv6-only node's pod: classifier and its IPv6 flows.
		guard, nd, l3 := b.podFlowsIPv6(pod)
		fs := append([]Flow{classifierPod(b, pod)}, guard...)
		return append(append(fs, nd...), l3...)
	}
	if pod.IPv6() == nil || !ipv6On(b.cfg) {
		fs := []Flow{
			classifierPod(b, pod),
			spoofGuardPodIP(b, pod),
			spoofGuardPodARP(b, pod),
			arpToPod(b, pod),
			l3ToPod(b, pod),
		}
		if b.cfg.Services {
			fs = append(fs, hairpinToPod(b, pod))
		}
		return fs
	}
	guard, nd, l3 := b.podFlowsIPv6(pod)
	fs := []Flow{classifierPod(b, pod), spoofGuardPodIP(b, pod), spoofGuardPodARP(b, pod)}
	fs = append(append(fs, guard...), arpToPod(b, pod))
	fs = append(append(fs, nd...), l3ToPod(b, pod))
	if b.cfg.Services {
		fs = append(fs, hairpinToPod(b, pod))
	}
	return append(fs, l3...)
}

// classifierPod marks packets from the pod's port as SourcePod.
//
//	table=classifier, priority=100,in_port=P actions=load:0x2->NXM_NX_REG0[0..3],goto_table:"spoof_guard"
func classifierPod(b builder, pod Pod) Flow {
	return b.in("classifier").flow(PodOwner(pod), PriorityNormal,
		Match{InPort: pod.OFPort},
		LoadMark(FromPod), b.goTo("spoof_guard"))
}

// spoofGuardPodIP lets IP from the pod's port on only with the pod's MAC and IP.
//
//	table="spoof_guard", priority=100,ip,in_port=P,dl_src=MAC,nw_src=IP actions=goto_table:service
func spoofGuardPodIP(b builder, pod Pod) Flow {
	return b.in("spoof_guard").flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeIPv4, InPort: pod.OFPort, EthSrc: pod.MAC, IPSrc: hostPrefix(pod.IPv4())},
		b.goTo(StageServiceHairpin))
}

// spoofGuardPodARP lets ARP from the pod's port on only when the frame and the ARP
// sender fields both carry the pod's MAC and the sender address is the pod's IP.
//
//	table="spoof_guard", priority=100,arp,in_port=P,dl_src=MAC,arp_spa=IP,arp_sha=MAC actions=goto_table:arp
func spoofGuardPodARP(b builder, pod Pod) Flow {
	return b.in("spoof_guard").flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeARP, InPort: pod.OFPort, EthSrc: pod.MAC, ARPSpa: pod.IPv4(), ARPSha: pod.MAC},
		b.goTo("arp"))
}

// arpToPod delivers ARP requests (broadcast) and replies whose target is the pod's IP to
// the pod's port; the pod answers requests itself.
//
//	table=arp, priority=100,arp,arp_tpa=IP actions=load:P->NXM_NX_REG1[],goto_table:output
func arpToPod(b builder, pod Pod) Flow {
	return b.in("arp").flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeARP, ARPTpa: pod.IPv4()},
		Load{Dst: OutPortField, Value: uint64(pod.OFPort)}, b.goTo("output"))
}

// l3ToPod sends IP for the pod's address to its port, addressed to its MAC, and goes on
// to the next stage.
//
//	table="l3_forwarding", priority=100,ip,nw_dst=IP actions=set_field:MAC->eth_dst,load:P->NXM_NX_REG1[],goto_table:conntrack
func l3ToPod(b builder, pod Pod) Flow {
	s := b.in("l3_forwarding")
	return s.flow(PodOwner(pod), PriorityNormal,
		Match{EthType: EthTypeIPv4, IPDst: hostPrefix(pod.IPv4())},
		SetEthDst{pod.MAC}, Load{Dst: OutPortField, Value: uint64(pod.OFPort)},
		s.next())
}
