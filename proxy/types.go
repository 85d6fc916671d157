package proxy

// The model: what the switch must hold for one Service port, in the API's terms and
// nothing else (no flows, groups or tables).

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Protocol is a Service port's transport protocol (core/v1 Protocol): TCP, UDP or SCTP.
type Protocol uint8

// The protocols a Service port may have. The zero value is no protocol (a port the API
// would refuse; the model never holds one).
const (
	ProtocolTCP Protocol = iota + 1
	ProtocolUDP
	ProtocolSCTP
)

// String returns the API's spelling: "TCP", "UDP" or "SCTP".
func (p Protocol) String() string {
	switch p {
	case ProtocolTCP:
		return "TCP"
	case ProtocolUDP:
		return "UDP"
	case ProtocolSCTP:
		return "SCTP"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// Connectionless reports whether conntrack entries of p outlive the endpoint they point
// to until they time out, since no end of connection removes them: UDP (kube-proxy's
// stale-UDP cleanup) and SCTP (an association to a vanished endpoint is never closed by
// it either). TCP connections to a gone endpoint end with resets or time-outs.
func (p Protocol) Connectionless() bool { return p == ProtocolUDP || p == ProtocolSCTP }

// Family is an IP family: IPv4 or IPv6. kube-proxy runs one proxier per family, and so
// does ofsdn: one Tracker per family of the node (a dual-stack node has both), fed by
// one Watcher (Watcher.Trackers).
type Family uint8

// The IP families.
const (
	IPv4 Family = iota + 1
	IPv6
)

// String returns "IPv4" or "IPv6", the spelling of core/v1 IPFamily and of discovery/v1
// AddressType.
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

// Has reports whether a is a valid address of family f (an IPv4-mapped IPv6 address is
// IPv6 here, as the API never uses that form for IPv4).
func (f Family) Has(a netip.Addr) bool {
	switch f {
	case IPv4:
		return a.Is4()
	case IPv6:
		return a.Is6()
	}
	return false
}

// FamilyOf returns a's family (0 for the zero Addr).
func FamilyOf(a netip.Addr) Family {
	switch {
	case a.Is4():
		return IPv4
	case a.Is6():
		return IPv6
	}
	return 0
}

// ServiceName names a Service: its namespace and name.
type ServiceName struct {
	Namespace, Name string
}

// String returns "namespace/name".
func (n ServiceName) String() string { return n.Namespace + "/" + n.Name }

// ServicePortName names one port of a Service, as kube-proxy's ServicePortName does: the
// Service, the port's name (spec.ports[].name; "" for a Service's only, unnamed port) and
// its protocol. An EndpointSlice port belongs to the Service port of the same name and
// protocol.
type ServicePortName struct {
	ServiceName
	Port     string
	Protocol Protocol
}

// String returns "namespace/name:port/PROTOCOL" ("namespace/name:/PROTOCOL" for an
// unnamed port).
func (n ServicePortName) String() string {
	return fmt.Sprintf("%s:%s/%s", n.ServiceName, n.Port, n.Protocol)
}

// Default and maximum of sessionAffinityConfig.clientIP.timeoutSeconds (core/v1
// DefaultClientIPServiceAffinitySeconds and the API server's validation bound), seconds.
const (
	DefaultAffinitySeconds = 10800
	MaxAffinitySeconds     = 86400
)

// ServicePort is one port of a Service that the node proxies (not headless, not
// ExternalName, not owned by another proxy), with everything kube-proxy uses of it.
// Addresses of every family are kept; a Tracker uses those of its own family.
type ServicePort struct {
	// Name is the port's Service, name and protocol.
	Name ServicePortName
	// ClusterIPs are spec.clusterIPs (else spec.clusterIP), primary family first, at
	// most one per family.
	ClusterIPs []netip.Addr
	// Port is spec.ports[].port, 1..65535.
	Port uint16
	// NodePort is spec.ports[].nodePort (30000..32767 by default); 0 = none.
	NodePort uint16
	// ExternalIPs are spec.externalIPs (invalid ones dropped), in the API's order.
	ExternalIPs []netip.Addr
	// LoadBalancerIPs are the status.loadBalancer.ingress[].ip addresses whose ipMode is
	// VIP or unset (kube-proxy's LoadBalancerVIPs); Proxy-mode ingress is the load
	// balancer's to deliver, not the node's to catch.
	LoadBalancerIPs []netip.Addr
	// LoadBalancerSourceRanges are spec.loadBalancerSourceRanges (whitespace trimmed,
	// invalid ones dropped): who may reach LoadBalancerIPs; empty = anyone.
	LoadBalancerSourceRanges []netip.Prefix
	// AffinitySeconds is sessionAffinity ClientIP's timeoutSeconds (default
	// DefaultAffinitySeconds, at most MaxAffinitySeconds); 0 = sessionAffinity None.
	AffinitySeconds uint32
	// InternalLocal is internalTrafficPolicy Local: traffic to the ClusterIP goes only to
	// endpoints on this node.
	InternalLocal bool
	// ExternalLocal is externalTrafficPolicy Local on a Service that is reachable from
	// outside (type NodePort or LoadBalancer, or ClusterIP with externalIPs), as
	// kube-proxy's ExternalPolicyLocal.
	ExternalLocal bool
	// TrafficDistribution is spec.trafficDistribution ("PreferSameZone", "PreferClose",
	// "PreferSameNode" or ""). It is data only: kube-proxy, and selection here, act on
	// the hints the EndpointSlice controller derives from it.
	TrafficDistribution string
	// HealthCheckNodePort is spec.healthCheckNodePort of a LoadBalancer Service with
	// externalTrafficPolicy Local; 0 = none.
	HealthCheckNodePort uint16
}

// ClusterIP returns the port's ClusterIP of family f, or the zero Addr if it has none.
func (s *ServicePort) ClusterIP(f Family) netip.Addr {
	for _, a := range s.ClusterIPs {
		if f.Has(a) {
			return a
		}
	}
	return netip.Addr{}
}

// ExternallyAccessible reports whether the port is reachable by something other than its
// ClusterIP: a NodePort, an external IP or a load-balancer IP (kube-proxy's definition).
func (s *ServicePort) ExternallyAccessible() bool {
	return s.NodePort != 0 || len(s.ExternalIPs) > 0 || len(s.LoadBalancerIPs) > 0
}

// UsesClusterEndpoints reports whether any traffic to the port uses the Cluster policy's
// endpoints: internal traffic when internalTrafficPolicy is Cluster, and external traffic
// always (with externalTrafficPolicy Local, traffic from pods to an external address is
// short-circuited to the Cluster endpoints, as kube-proxy does).
func (s *ServicePort) UsesClusterEndpoints() bool {
	return !s.InternalLocal || s.ExternallyAccessible()
}

// UsesLocalEndpoints reports whether any traffic to the port uses only this node's
// endpoints: internalTrafficPolicy Local, or externalTrafficPolicy Local on an
// externally accessible port.
func (s *ServicePort) UsesLocalEndpoints() bool {
	return s.InternalLocal || (s.ExternalLocal && s.ExternallyAccessible())
}

// Frontends returns the addresses of family f at which the port is reached, each with
// the Service port: the ClusterIP, the external IPs and the load-balancer IPs (NodePort
// is separate: it is reached on every node address).
func (s *ServicePort) Frontends(f Family) []netip.AddrPort {
	var out []netip.AddrPort
	if c := s.ClusterIP(f); c.IsValid() {
		out = append(out, netip.AddrPortFrom(c, s.Port))
	}
	for _, l := range [][]netip.Addr{s.ExternalIPs, s.LoadBalancerIPs} {
		for _, a := range l {
			if f.Has(a) {
				out = append(out, netip.AddrPortFrom(a, s.Port))
			}
		}
	}
	return out
}

func (s *ServicePort) equal(o *ServicePort) bool {
	return s.Name == o.Name && slices.Equal(s.ClusterIPs, o.ClusterIPs) && s.Port == o.Port &&
		s.NodePort == o.NodePort && slices.Equal(s.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(s.LoadBalancerIPs, o.LoadBalancerIPs) &&
		slices.Equal(s.LoadBalancerSourceRanges, o.LoadBalancerSourceRanges) &&
		s.AffinitySeconds == o.AffinitySeconds && s.InternalLocal == o.InternalLocal &&
		s.ExternalLocal == o.ExternalLocal && s.TrafficDistribution == o.TrafficDistribution &&
		s.HealthCheckNodePort == o.HealthCheckNodePort
}

// Endpoint is one endpoint of a Service port, from its EndpointSlices: the first address
// of a slice endpoint (kube-proxy uses only that one) with the port its slice gives the
// Service port's name.
type Endpoint struct {
	// Addr is the endpoint's address (addresses[0]), of the slice's family.
	Addr netip.Addr
	// Port is the slice's port number for the Service port's name (a targetPort by name
	// resolves per pod, so each slice may have its own), 1..65535.
	Port uint16
	// Ready, Serving and Terminating are the endpoint's conditions; an unset ready or
	// serving condition counts as true, an unset terminating one as false (the API's
	// rules for consumers, as kube-proxy reads them).
	Ready, Serving, Terminating bool
	// NodeName and Zone are where the endpoint runs ("" = unknown).
	NodeName, Zone string
	// Local is NodeName == the Tracker's node.
	Local bool
	// ZoneHints and NodeHints are hints.forZones and hints.forNodes names, sorted.
	ZoneHints, NodeHints []string
}

// AddrPort returns the endpoint's address and port: its identity within a Service port.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.Addr, e.Port) }

// String returns "address:port".
func (e Endpoint) String() string { return e.AddrPort().String() }

func (e Endpoint) equal(o Endpoint) bool {
	return e.Addr == o.Addr && e.Port == o.Port && e.Ready == o.Ready && e.Serving == o.Serving &&
		e.Terminating == o.Terminating && e.NodeName == o.NodeName && e.Zone == o.Zone &&
		e.Local == o.Local && slices.Equal(e.ZoneHints, o.ZoneHints) && slices.Equal(e.NodeHints, o.NodeHints)
}

// Slice is the model of one discovery.k8s.io/v1 EndpointSlice: the Service it belongs to
// (its kubernetes.io/service-name label), its ports and its endpoints.
type Slice struct {
	Service ServiceName
	// Name is the EndpointSlice's own name (unique in its namespace).
	Name string
	// Family is the slice's addressType (IPv4 or IPv6; FQDN slices are not modelled).
	Family Family
	// Ports are the slice's ports with a name, a number and TCP, UDP or SCTP.
	Ports []SlicePort
	// Endpoints are the slice's endpoints with at least one address of Family;
	// Endpoint.Port and Endpoint.Local are not set here.
	Endpoints []Endpoint
	// TriggerTime is the endpoints.kubernetes.io/last-change-trigger-time annotation
	// (zero when absent or unparsable).
	TriggerTime time.Time
}

// SlicePort is one of a slice's ports: name, protocol and number.
type SlicePort struct {
	// Name is the Service port's name it serves ("" for an unnamed port).
	Name     string
	Protocol Protocol
	// Port is the endpoints' port number for it, 1..65535.
	Port uint16
}

func (s *Slice) equalContent(o *Slice) bool {
	if s.Service != o.Service || s.Name != o.Name || s.Family != o.Family || !slices.Equal(s.Ports, o.Ports) ||
		len(s.Endpoints) != len(o.Endpoints) {
		return false
	}
	for i := range s.Endpoints {
		if !s.Endpoints[i].equal(o.Endpoints[i]) {
			return false
		}
	}
	return true
}
