package proxy

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }

func svc(name string, mod func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if mod != nil {
		mod(s)
	}
	return s
}

func TestConvertServiceSkips(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*corev1.Service)
	}{
		{"headless", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }},
		{"no ClusterIP", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }},
		{"ExternalName", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }},
		{"another proxy's", func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} }},
	} {
		if got := ConvertService(svc("s", c.mod)); got != nil {
			t.Errorf("%s: %d ports, want the Service skipped", c.name, len(got))
		}
	}
	if got := ConvertService(svc("s", nil)); len(got) != 1 {
		t.Fatalf("plain ClusterIP Service: %d ports, want 1", len(got))
	}
}

func TestConvertServiceFields(t *testing.T) {
	vip, proxyMode := corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy
	s := svc("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, NodePort: 30054},
			{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP},
		}
		s.Spec.ExternalIPs = []string{"192.0.2.1", "bogus"}
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyLocal)
		s.Spec.HealthCheckNodePort = 31000
		s.Spec.TrafficDistribution = ptrTo("PreferClose")
		s.Spec.LoadBalancerSourceRanges = []string{" 198.51.100.0/24 "}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "203.0.113.1"}, {IP: "203.0.113.2", IPMode: &vip}, {IP: "203.0.113.3", IPMode: &proxyMode}, {Hostname: "lb.example"},
		}
	})
	ports := ConvertService(s)
	if len(ports) != 3 {
		t.Fatalf("%d ports, want 3", len(ports))
	}
	p := ports[0]
	if p.Name != (ServicePortName{ServiceName{"ns", "lb"}, "dns", ProtocolUDP}) || p.Port != 53 || p.NodePort != 30053 {
		t.Errorf("port 0: %+v", p)
	}
	if ports[1].Name.Protocol != ProtocolTCP || ports[2].Name.Protocol != ProtocolSCTP {
		t.Errorf("protocols %v %v", ports[1].Name.Protocol, ports[2].Name.Protocol)
	}
	if p.ClusterIP(IPv4) != netip.MustParseAddr("10.96.0.10") || p.ClusterIP(IPv6) != netip.MustParseAddr("fd00::10") {
		t.Errorf("ClusterIPs per family: %v", p.ClusterIPs)
	}
	if !slices.Equal(p.ExternalIPs, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Errorf("external IPs %v", p.ExternalIPs)
	}
	if !slices.Equal(p.LoadBalancerIPs, []netip.Addr{netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2")}) {
		t.Errorf("load-balancer IPs %v, want the VIP-mode ones only", p.LoadBalancerIPs)
	}
	if p.AffinitySeconds != DefaultAffinitySeconds || !p.InternalLocal || !p.ExternalLocal || p.HealthCheckNodePort != 31000 ||
		p.TrafficDistribution != "PreferClose" || len(p.LoadBalancerSourceRanges) != 1 {
		t.Errorf("settings %+v", p)
	}
	wantFront := []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53"), netip.MustParseAddrPort("192.0.2.1:53"),
		netip.MustParseAddrPort("203.0.113.1:53"), netip.MustParseAddrPort("203.0.113.2:53")}
	if got := p.Frontends(IPv4); !slices.Equal(got, wantFront) {
		t.Errorf("IPv4 frontends %v, want %v", got, wantFront)
	}
	if got := p.Frontends(IPv6); !slices.Equal(got, []netip.AddrPort{netip.MustParseAddrPort("[fd00::10]:53")}) {
		t.Errorf("IPv6 frontends %v", got)
	}
}

func TestConvertServiceAffinityAndPolicies(t *testing.T) {
	aff := func(secs *int32) *corev1.Service {
		return svc("a", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			if secs != nil {
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: secs}}
			}
		})
	}
	for _, c := range []struct {
		in   *int32
		want uint32
	}{{nil, 10800}, {ptrTo[int32](60), 60}, {ptrTo[int32](86400), 86400}, {ptrTo[int32](100000), 86400}} {
		if got := ConvertService(aff(c.in))[0].AffinitySeconds; got != c.want {
			t.Errorf("timeoutSeconds %v: affinity %d s, want %d", c.in, got, c.want)
		}
	}
	if got := ConvertService(svc("n", nil))[0].AffinitySeconds; got != 0 {
		t.Errorf("sessionAffinity None: %d s", got)
	}
	// externalTrafficPolicy Local counts only where there is external traffic.
	local := func(typ corev1.ServiceType, extIPs ...string) bool {
		return ConvertService(svc("e", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalIPs = typ, extIPs
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}))[0].ExternalLocal
	}
	if local(corev1.ServiceTypeClusterIP) || !local(corev1.ServiceTypeClusterIP, "192.0.2.1") || !local(corev1.ServiceTypeNodePort) {
		t.Error("externalTrafficPolicy Local: want it only on NodePort/LoadBalancer or ClusterIP with externalIPs")
	}
}

func TestConvertEndpointSlice(t *testing.T) {
	trig := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-abc", Labels: map[string]string{LabelServiceName: "s"},
			Annotations: map[string]string{AnnotationTriggerTime: trig.Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo[int32](8080)},
			{Port: ptrTo[int32](1)} /* nil name: ignored */, {Name: ptrTo("x")} /* no port */},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.2", "10.244.1.3"}, NodeName: ptrTo("n1"), Zone: ptrTo("a"),
				Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "b"}, {Name: "a"}}, ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}},
			{Addresses: []string{"10.244.1.4"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(true), Terminating: ptrTo(true)}},
			{Addresses: []string{"fd00::1"}},
			{},
		},
	}
	s := ConvertEndpointSlice(es)
	if s == nil || s.Service != (ServiceName{"ns", "s"}) || s.Family != IPv4 || !s.TriggerTime.Equal(trig) {
		t.Fatalf("slice %+v", s)
	}
	if !slices.Equal(s.Ports, []SlicePort{{Name: "http", Protocol: ProtocolTCP, Port: 8080}}) {
		t.Errorf("ports %+v", s.Ports)
	}
	if len(s.Endpoints) != 2 {
		t.Fatalf("endpoints %+v, want 2 (first address only, IPv4 only)", s.Endpoints)
	}
	e0, e1 := s.Endpoints[0], s.Endpoints[1]
	if e0.Addr != netip.MustParseAddr("10.244.1.2") || !e0.Ready || !e0.Serving || e0.Terminating || e0.NodeName != "n1" ||
		e0.Zone != "a" || !slices.Equal(e0.ZoneHints, []string{"a", "b"}) || !slices.Equal(e0.NodeHints, []string{"n1"}) {
		t.Errorf("endpoint 0 %+v (unset conditions: ready and serving, not terminating)", e0)
	}
	if e1.Ready || !e1.Serving || !e1.Terminating {
		t.Errorf("endpoint 1 %+v", e1)
	}
	for _, c := range []func(*discoveryv1.EndpointSlice){
		func(e *discoveryv1.EndpointSlice) { e.Labels = nil },
		func(e *discoveryv1.EndpointSlice) { e.Labels[LabelServiceProxyName] = "other" },
		func(e *discoveryv1.EndpointSlice) { e.AddressType = discoveryv1.AddressTypeFQDN },
	} {
		x := es.DeepCopy()
		c(x)
		if ConvertEndpointSlice(x) != nil {
			t.Errorf("slice %+v: want it ignored", x.ObjectMeta)
		}
	}
}

func TestStripKeepsOnlyProxyFields(t *testing.T) {
	s := svc("s", func(s *corev1.Service) {
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
		s.Labels = map[string]string{"app": "x", LabelServiceProxyName: "p"}
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
		s.Spec.Selector = map[string]string{"app": "x"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1", Ports: []corev1.PortStatus{{Port: 1}}}}
	})
	o, _ := StripService(s)
	st := o.(*corev1.Service)
	if st.Annotations != nil || st.ManagedFields != nil || st.Spec.Selector != nil || len(st.Labels) != 1 ||
		st.Status.LoadBalancer.Ingress[0].Ports != nil {
		t.Errorf("stripped Service kept too much: %+v", st)
	}
	orig := svc("s", nil)
	o, _ = StripService(orig)
	a, b := ConvertService(orig), ConvertService(o.(*corev1.Service))
	if len(a) != 1 || len(b) != 1 || !a[0].equal(b[0]) {
		t.Errorf("model of the stripped Service %+v, of the original %+v", b, a)
	}

	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "e", Labels: map[string]string{LabelServiceName: "s", "endpointslice.kubernetes.io/managed-by": "c"},
			Annotations: map[string]string{AnnotationTriggerTime: "2026-01-01T00:00:00Z", "other": "x"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Hostname: ptrTo("h"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "p"}, Zone: ptrTo("a")}},
	}
	o, _ = StripEndpointSlice(es)
	se := o.(*discoveryv1.EndpointSlice)
	if len(se.Labels) != 1 || len(se.Annotations) != 1 || se.Endpoints[0].TargetRef != nil || se.Endpoints[0].Hostname != nil ||
		*se.Endpoints[0].Zone != "a" {
		t.Errorf("stripped slice: %+v", se)
	}
}
