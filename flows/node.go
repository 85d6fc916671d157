package flows

// The node's own flows: every table's default, the reserved stages' pass-through, the
// gateway port's flows and off-subnet egress. One small function per flow; PipelineFlows
// lists them in pipeline order.

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
	// PodSubnet; pods' default route is via it.
	GatewayIP net.IP
	// PodSubnet is this node's IPv4 pod subnet (e.g. a /24 of the cluster CIDR).
	PodSubnet *net.IPNet
	// Generation is this daemon run's generation (cookie bits 55..40), bumped at each
	// start so that flows of earlier runs can be deleted by GenerationCookie.
	Generation uint16
}

// Validate checks that the config can build a pipeline: a valid gateway ofport, a
// unicast 48-bit gateway MAC, IPv4 gateway and subnet, the gateway inside the subnet.
func (c NodeConfig) Validate() error {
	if c.GatewayOFPort == 0 || c.GatewayOFPort >= 0xffffff00 {
		return fmt.Errorf("node config: gateway ofport %d is not a valid OpenFlow port (1..0xfffffeff): read it from the gateway Interface's ofport column", c.GatewayOFPort)
	}
	if len(c.GatewayMAC) != 6 || c.GatewayMAC[0]&1 != 0 {
		return fmt.Errorf("node config: gateway MAC %q is not a unicast Ethernet address: read it from the gateway Interface's mac_in_use column", c.GatewayMAC)
	}
	if c.PodSubnet == nil || c.PodSubnet.IP.To4() == nil || len(c.PodSubnet.Mask) != net.IPv4len {
		return fmt.Errorf("node config: pod subnet %v is not an IPv4 prefix: set the node's IPv4 pod CIDR", c.PodSubnet)
	}
	if c.GatewayIP.To4() == nil || !c.PodSubnet.Contains(c.GatewayIP) {
		return fmt.Errorf("node config: gateway IP %v is not an IPv4 address in pod subnet %v: use the subnet's first address", c.GatewayIP, c.PodSubnet)
	}
	return nil
}

// PipelineFlows returns the node's own flows (owner OwnerPipeline), in pipeline order:
// each table's priority-0 drop, the reserved stages' pass-through, the gateway's flows
// and egress. cfg must be valid (NodeConfig.Validate).
func PipelineFlows(cfg NodeConfig) []Flow {
	return []Flow{
		classifierGateway(cfg),
		tableDrop(cfg, TableClassifier),

		tableDrop(cfg, TableTunnelIngress),

		spoofGuardGatewayIP(cfg),
		spoofGuardGatewayARP(cfg),
		tableDrop(cfg, TableSpoofGuard),

		arpToGateway(cfg),
		tableDrop(cfg, TableARP),

		passThrough(cfg, TableService),
		tableDrop(cfg, TableService),

		l3ToGateway(cfg),
		l3PodSubnetMiss(cfg),
		l3OffSubnet(cfg),
		tableDrop(cfg, TableL3Forwarding),

		passThrough(cfg, TableNetworkPolicy),
		tableDrop(cfg, TableNetworkPolicy),

		passThrough(cfg, TableRemote),
		tableDrop(cfg, TableRemote),

		egressToGateway(cfg),
		egressUndecidedDrop(cfg),
		egressDecided(cfg),
		tableDrop(cfg, TableEgress),

		outputToReg(cfg),
		tableDrop(cfg, TableOutput),
	}
}

// nodeFlow returns a flow of the node's own in table t, with its cookie.
func nodeFlow(cfg NodeConfig, t TableID, priority uint16, m Match, actions ...Action) Flow {
	stage, _ := t.Stage()
	return Flow{
		Table:    t,
		Priority: priority,
		Cookie:   NewCookie(cfg.Generation, OwnerPipeline, stage, 0),
		Match:    m,
		Actions:  actions,
	}
}

// tableDrop is table t's default: drop what no other flow takes, counted.
//
//	table=T, priority=0 actions=drop
func tableDrop(cfg NodeConfig, t TableID) Flow {
	return nodeFlow(cfg, t, PriorityDrop, Match{}, Drop{})
}

// passThrough is a reserved stage's only rule: everything goes to the next stage.
//
//	table=service, priority=1 actions=goto_table:l3_forwarding
func passThrough(cfg NodeConfig, t TableID) Flow {
	return nodeFlow(cfg, t, PriorityPass, Match{}, GotoTable{t.next()})
}

// classifierGateway marks packets from the gateway port (the host) as SourceGateway.
//
//	table=classifier, priority=100,in_port=GW actions=load:0x1->NXM_NX_REG0[0..3],goto_table:"spoof_guard"
func classifierGateway(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableClassifier, PriorityNormal,
		Match{InPort: cfg.GatewayOFPort},
		LoadMark(FromGateway), GotoTable{TableSpoofGuard})
}

// spoofGuardGatewayIP trusts IP from the host: any source address goes on.
//
//	table="spoof_guard", priority=100,ip,reg0=0x1/0xf actions=goto_table:service
func spoofGuardGatewayIP(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableSpoofGuard, PriorityNormal,
		Match{EthType: EthTypeIPv4, Regs: []RegMark{FromGateway}},
		GotoTable{TableService})
}

// spoofGuardGatewayARP trusts ARP from the host.
//
//	table="spoof_guard", priority=100,arp,reg0=0x1/0xf actions=goto_table:arp
func spoofGuardGatewayARP(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableSpoofGuard, PriorityNormal,
		Match{EthType: EthTypeARP, Regs: []RegMark{FromGateway}},
		GotoTable{TableARP})
}

// arpToGateway delivers ARP whose target is the gateway IP to the gateway port: pods'
// requests for their default gateway (the host's interface answers) and pods' replies
// to the host's requests.
//
//	table=arp, priority=100,arp,arp_tpa=GWIP actions=load:GW->NXM_NX_REG1[],goto_table:output
func arpToGateway(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableARP, PriorityNormal,
		Match{EthType: EthTypeARP, ARPTpa: cfg.GatewayIP},
		Load{Dst: OutPortField, Value: uint64(cfg.GatewayOFPort)}, GotoTable{TableOutput})
}

// l3ToGateway sends IP for the gateway IP (pods talking to the host) to the gateway
// port, addressed to the gateway MAC.
//
//	table="l3_forwarding", priority=100,ip,nw_dst=GWIP actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:"network_policy"
func l3ToGateway(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableL3Forwarding, PriorityNormal,
		Match{EthType: EthTypeIPv4, IPDst: hostPrefix(cfg.GatewayIP)},
		SetEthDst{cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(cfg.GatewayOFPort)},
		GotoTable{TableNetworkPolicy})
}

// l3PodSubnetMiss drops IP for an address of this node's pod subnet that no live pod
// holds (the pods' own flows are more specific). Sending it to the host would only
// loop it back.
//
//	table="l3_forwarding", priority=10,ip,nw_dst=SUBNET actions=drop
func l3PodSubnetMiss(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableL3Forwarding, PriorityLow,
		Match{EthType: EthTypeIPv4, IPDst: cfg.PodSubnet}, Drop{})
}

// l3OffSubnet lets IP for any other address go on undecided (reg1=0): the remote and
// egress stages choose its port.
//
//	table="l3_forwarding", priority=1,ip actions=goto_table:"network_policy"
func l3OffSubnet(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableL3Forwarding, PriorityPass,
		Match{EthType: EthTypeIPv4}, GotoTable{TableNetworkPolicy})
}

// egressToGateway sends a pod's undecided IP (off-subnet, no remote route) to the host
// through the gateway port: the host routes and masquerades it.
//
//	table=egress, priority=100,ip,reg0=0x2/0xf,reg1=0 actions=set_field:GWMAC->eth_dst,load:GW->NXM_NX_REG1[],goto_table:output
func egressToGateway(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableEgress, PriorityNormal,
		Match{EthType: EthTypeIPv4, Regs: []RegMark{FromPod, OutPortUnset}},
		SetEthDst{cfg.GatewayMAC}, Load{Dst: OutPortField, Value: uint64(cfg.GatewayOFPort)},
		GotoTable{TableOutput})
}

// egressUndecidedDrop drops any other undecided packet, e.g. host traffic for an
// off-subnet address, which could only go back out the port it came in by.
//
//	table=egress, priority=50,reg1=0 actions=drop
func egressUndecidedDrop(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableEgress, PriorityMid,
		Match{Regs: []RegMark{OutPortUnset}}, Drop{})
}

// egressDecided lets packets whose port is decided (reg1 != 0) go to output.
//
//	table=egress, priority=1 actions=goto_table:output
func egressDecided(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableEgress, PriorityPass, Match{}, GotoTable{TableOutput})
}

// outputToReg sends the packet out the ofport in reg1.
//
//	table=output, priority=1 actions=output:NXM_NX_REG1[]
func outputToReg(cfg NodeConfig) Flow {
	return nodeFlow(cfg, TableOutput, PriorityPass, Match{}, OutputReg{Src: OutPortField})
}

// hostPrefix returns ip as a /32 prefix.
func hostPrefix(ip net.IP) *net.IPNet {
	return &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)}
}
