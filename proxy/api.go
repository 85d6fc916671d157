package proxy

// From API objects to the model, and the informer transforms that keep the caches small:
// a Service keeps its type, addresses, ports, policies and affinity; an EndpointSlice its
// service-name label, trigger-time annotation, address type, ports and endpoints'
// addresses, conditions, node, zone and hints. Selectors, annotations, managed fields
// and target references go.

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations the proxy reads.
const (
	// LabelServiceProxyName on a Service (and its EndpointSlices) means another proxy
	// implements it; kube-proxy and ofsdn leave it alone.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless is set by the EndpointSlice controller on slices of headless
	// Services (corev1.IsHeadlessService).
	LabelHeadless = corev1.IsHeadlessService
	// LabelServiceName names a slice's Service (discoveryv1.LabelServiceName).
	LabelServiceName = discoveryv1.LabelServiceName
	// AnnotationTriggerTime is when the change a slice reflects happened
	// (corev1.EndpointsLastChangeTriggerTime, RFC 3339 with nanoseconds).
	AnnotationTriggerTime = corev1.EndpointsLastChangeTriggerTime
)

// ListSelector is the label selector of both informers, kube-proxy's: neither objects
// owned by another proxy nor headless Services' slices are listed at all. An object that
// gains such a label leaves the watch (a delete event).
const ListSelector = "!" + LabelServiceProxyName + ",!" + LabelHeadless

func keepLabels(l map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := l[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// StripService is the Service informer's transform (cache.TransformFunc): a
// *corev1.Service becomes a new Service holding name, namespace, UID, resourceVersion,
// the service-proxy-name label, and of spec: type, clusterIP(s), ports, externalIPs,
// sessionAffinity and its config, the traffic policies, healthCheckNodePort,
// trafficDistribution and loadBalancerSourceRanges; of status, the load-balancer
// ingress IPs and modes. Anything else is returned unchanged.
func StripService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID,
			ResourceVersion: s.ResourceVersion, Labels: keepLabels(s.Labels, LabelServiceProxyName)},
		Spec: corev1.ServiceSpec{
			Type: s.Spec.Type, ClusterIP: s.Spec.ClusterIP, ClusterIPs: s.Spec.ClusterIPs,
			Ports: s.Spec.Ports, ExternalIPs: s.Spec.ExternalIPs, SessionAffinity: s.Spec.SessionAffinity,
			SessionAffinityConfig: s.Spec.SessionAffinityConfig, ExternalTrafficPolicy: s.Spec.ExternalTrafficPolicy,
			InternalTrafficPolicy: s.Spec.InternalTrafficPolicy, HealthCheckNodePort: s.Spec.HealthCheckNodePort,
			TrafficDistribution: s.Spec.TrafficDistribution, LoadBalancerSourceRanges: s.Spec.LoadBalancerSourceRanges,
		},
	}
	for _, ing := range s.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress,
				corev1.LoadBalancerIngress{IP: ing.IP, IPMode: ing.IPMode})
		}
	}
	return out, nil
}

// StripEndpointSlice is the EndpointSlice informer's transform: name, namespace, UID,
// resourceVersion, the service-name and service-proxy-name labels, the trigger-time
// annotation, addressType, ports, and per endpoint its addresses, conditions, nodeName,
// zone and hints (targetRef, hostname and deprecatedTopology go).
func StripEndpointSlice(obj any) (any, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: es.Name, Namespace: es.Namespace, UID: es.UID,
			ResourceVersion: es.ResourceVersion,
			Labels:          keepLabels(es.Labels, LabelServiceName, LabelServiceProxyName),
			Annotations:     keepLabels(es.Annotations, AnnotationTriggerTime)},
		AddressType: es.AddressType,
		Ports:       es.Ports,
	}
	out.Endpoints = make([]discoveryv1.Endpoint, len(es.Endpoints))
	for i, e := range es.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions,
			NodeName: e.NodeName, Zone: e.Zone, Hints: e.Hints}
	}
	return out, nil
}

// convertProtocol maps a core/v1 protocol to ours; "" is TCP (the API's default).
func convertProtocol(p corev1.Protocol) (Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return ProtocolTCP, true
	case corev1.ProtocolUDP:
		return ProtocolUDP, true
	case corev1.ProtocolSCTP:
		return ProtocolSCTP, true
	}
	return 0, false
}

func parseAddrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// Proxied reports whether the proxy implements svc, kube-proxy's ShouldSkipService and
// informer selector: not when its ClusterIP is unset or "None" (headless), not for type
// ExternalName, not when the service-proxy-name label names another proxy.
func Proxied(svc *corev1.Service) bool {
	if _, other := svc.Labels[LabelServiceProxyName]; other {
		return false
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return false
	}
	return svc.Spec.Type != corev1.ServiceTypeExternalName
}

// ConvertService returns the model's ports of svc, nil when it is not proxied (Proxied).
// Ports with a protocol other than TCP, UDP and SCTP, or a number outside 1..65535, are
// left out (the API server refuses them).
func ConvertService(svc *corev1.Service) []*ServicePort {
	if !Proxied(svc) {
		return nil
	}
	name := ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	var clusterIPs []netip.Addr
	for _, a := range parseAddrs(ips) {
		if !slices.ContainsFunc(clusterIPs, func(b netip.Addr) bool { return FamilyOf(a) == FamilyOf(b) }) {
			clusterIPs = append(clusterIPs, a)
		}
	}
	if len(clusterIPs) == 0 {
		return nil
	}
	externallyAccessible := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer ||
		(svc.Spec.Type == corev1.ServiceTypeClusterIP || svc.Spec.Type == "") && len(svc.Spec.ExternalIPs) > 0
	base := ServicePort{
		ClusterIPs:    clusterIPs,
		ExternalIPs:   parseAddrs(svc.Spec.ExternalIPs),
		InternalLocal: svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
		ExternalLocal: externallyAccessible && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
	}
	if svc.Spec.TrafficDistribution != nil {
		base.TrafficDistribution = *svc.Spec.TrafficDistribution
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		secs := int64(DefaultAffinitySeconds)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			secs = int64(*c.ClientIP.TimeoutSeconds)
		}
		base.AffinitySeconds = uint32(min(max(secs, 1), MaxAffinitySeconds))
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP {
			continue
		}
		base.LoadBalancerIPs = append(base.LoadBalancerIPs, parseAddrs([]string{ing.IP})...)
	}
	for _, r := range svc.Spec.LoadBalancerSourceRanges {
		if p, err := netip.ParsePrefix(strings.TrimSpace(r)); err == nil {
			base.LoadBalancerSourceRanges = append(base.LoadBalancerSourceRanges, p.Masked())
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && base.ExternalLocal && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
		base.HealthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
	}
	var out []*ServicePort
	for _, p := range svc.Spec.Ports {
		proto, ok := convertProtocol(p.Protocol)
		if !ok || p.Port < 1 || p.Port > 65535 {
			continue
		}
		sp := base
		sp.Name = ServicePortName{ServiceName: name, Port: p.Name, Protocol: proto}
		sp.Port = uint16(p.Port)
		if p.NodePort > 0 && p.NodePort <= 65535 {
			sp.NodePort = uint16(p.NodePort)
		}
		out = append(out, &sp)
	}
	return out
}

// ConvertEndpointSlice returns the model of es, or nil when it has no
// kubernetes.io/service-name label, another proxy owns it, or its addressType is FQDN.
// Ports without a name (nil), number or a known protocol are left out (kube-proxy
// ignores them; an unset protocol is TCP, the API's default); endpoints keep their first
// address when it is of the slice's family (kube-proxy uses only the first), and are
// left out otherwise.
func ConvertEndpointSlice(es *discoveryv1.EndpointSlice) *Slice {
	svc := es.Labels[LabelServiceName]
	if svc == "" {
		return nil
	}
	if _, other := es.Labels[LabelServiceProxyName]; other {
		return nil
	}
	s := &Slice{Service: ServiceName{Namespace: es.Namespace, Name: svc}, Name: es.Name}
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4:
		s.Family = IPv4
	case discoveryv1.AddressTypeIPv6:
		s.Family = IPv6
	default:
		return nil
	}
	if v, ok := es.Annotations[AnnotationTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			s.TriggerTime = t
		}
	}
	for _, p := range es.Ports {
		proto := ProtocolTCP
		if p.Protocol != nil {
			var ok bool
			if proto, ok = convertProtocol(*p.Protocol); !ok {
				continue
			}
		}
		if p.Name == nil || p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		s.Ports = append(s.Ports, SlicePort{Name: *p.Name, Protocol: proto, Port: uint16(*p.Port)})
	}
	slices.SortFunc(s.Ports, func(a, b SlicePort) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	for _, e := range es.Endpoints {
		if len(e.Addresses) == 0 {
			continue
		}
		a, err := netip.ParseAddr(e.Addresses[0])
		if err != nil || !s.Family.Has(a.Unmap()) {
			continue
		}
		c := e.Conditions
		ep := Endpoint{
			Addr:        a.Unmap(),
			Ready:       c.Ready == nil || *c.Ready,
			Serving:     c.Serving == nil || *c.Serving,
			Terminating: c.Terminating != nil && *c.Terminating,
		}
		if e.NodeName != nil {
			ep.NodeName = *e.NodeName
		}
		if e.Zone != nil {
			ep.Zone = *e.Zone
		}
		if h := e.Hints; h != nil {
			for _, z := range h.ForZones {
				ep.ZoneHints = append(ep.ZoneHints, z.Name)
			}
			for _, n := range h.ForNodes {
				ep.NodeHints = append(ep.NodeHints, n.Name)
			}
			slices.Sort(ep.ZoneHints)
			slices.Sort(ep.NodeHints)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	slices.SortFunc(s.Endpoints, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	return s
}
