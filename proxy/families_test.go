package proxy

// Services in both IP families (issue 23): ipFamilies / ipFamilyPolicy as kube-proxy's
// per-family proxiers see them. The API server allocates spec.clusterIPs by policy
// (SingleStack: one, of ipFamilies[0]; PreferDualStack: both where the cluster has both
// service ranges; RequireDualStack: both); a proxier of family F serves a Service only
// through its ClusterIP of F (none: not proxied in F), and only with the endpoints of
// F's EndpointSlices (addressType F).

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

// familyService is Service ns/web of policy and clusterIPs (primary family first), TCP
// 80 → 8080, with externalIPs of both families.
func familyService(policy corev1.IPFamilyPolicy, ips ...string) *corev1.Service {
	var fams []corev1.IPFamily
	for _, ip := range ips {
		if netip.MustParseAddr(ip).Is4() {
			fams = append(fams, corev1.IPv4Protocol)
		} else {
			fams = append(fams, corev1.IPv6Protocol)
		}
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips,
			IPFamilies: fams, IPFamilyPolicy: &policy, ExternalIPs: []string{"192.0.2.7", "2001:db8::7"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
}

// familySlices are web's two EndpointSlices: IPv4 10.244.0.5, 10.244.0.6 and IPv6
// fd00:10:244::5, fd00:10:244::6, port http 8080.
func familySlices() []*discoveryv1.EndpointSlice {
	v4 := apiSlice("ns", "web-v4", "web", slicePorts("http", corev1.ProtocolTCP, 8080),
		apiEndpoint("10.244.0.5", "node-a", true), apiEndpoint("10.244.0.6", "node-b", true))
	v6 := apiSlice("ns", "web-v6", "web", slicePorts("http", corev1.ProtocolTCP, 8080),
		apiEndpoint("fd00:10:244::5", "node-a", true), apiEndpoint("fd00:10:244::6", "node-b", true))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	return []*discoveryv1.EndpointSlice{v4, v6}
}

// familyTrackers feeds svc and familySlices to one tracker per family, as the daemon's
// Watcher does, and returns each family's first Update.
func familyTrackers(t *testing.T, svc *corev1.Service) (v4, v6 *Update) {
	t.Helper()
	ts := fanOut([]*Tracker{NewTracker("node-a", IPv4), NewTracker("node-a", IPv6)})
	ts.SetService(ServiceName{Namespace: svc.Namespace, Name: svc.Name}, ConvertService(svc))
	for _, es := range familySlices() {
		ts.SetSlice(ConvertEndpointSlice(es))
	}
	ts.MarkSynced()
	return syncOnce(ts[0]), syncOnce(ts[1])
}

// stateAddrs returns u's one state's ClusterIP frontend, all its frontends and its
// endpoints as strings; ok false when u has no state.
func stateAddrs(u *Update) (frontends, endpoints []string, ok bool) {
	if len(u.Changed) == 0 {
		return nil, nil, false
	}
	st := u.Changed[0]
	for _, f := range st.Frontends() {
		frontends = append(frontends, f.String())
	}
	for _, e := range st.Internal().Endpoints {
		endpoints = append(endpoints, e.String())
	}
	return frontends, endpoints, true
}

func TestFamiliesDualStack(t *testing.T) {
	for _, policy := range []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack} {
		for _, primary := range []string{"IPv4", "IPv6"} {
			ips := []string{"10.96.0.10", "fd00:96::10"}
			if primary == "IPv6" {
				slices.Reverse(ips)
			}
			v4, v6 := familyTrackers(t, familyService(policy, ips...))
			if v4.Family != IPv4 || v6.Family != IPv6 {
				t.Fatalf("%s %s: update families %v, %v, want IPv4, IPv6", policy, primary, v4.Family, v6.Family)
			}
			for _, c := range []struct {
				u              *Update
				family         Family
				wantFE, wantEP []string
			}{
				{v4, IPv4, []string{"10.96.0.10:80", "192.0.2.7:80"}, []string{"10.244.0.5:8080", "10.244.0.6:8080"}},
				{v6, IPv6, []string{"[fd00:96::10]:80", "[2001:db8::7]:80"}, []string{"[fd00:10:244::5]:8080", "[fd00:10:244::6]:8080"}},
			} {
				fe, ep, ok := stateAddrs(c.u)
				if !ok {
					t.Fatalf("%s %s primary: the %v proxier serves nothing, want the Service through its %v ClusterIP", policy, primary, c.family, c.family)
				}
				if c.u.Changed[0].Family != c.family || !slices.Equal(fe, c.wantFE) || !slices.Equal(ep, c.wantEP) {
					t.Errorf("%s %s primary, %v proxier: state of family %v, frontends %v, endpoints %v; want frontends %v, endpoints %v (a family's ClusterIP never gets the other family's endpoints)",
						policy, primary, c.family, c.u.Changed[0].Family, fe, ep, c.wantFE, c.wantEP)
				}
			}
		}
	}
}

func TestFamiliesSingleStack(t *testing.T) {
	for _, c := range []struct {
		ip             string
		serving, other Family
		wantEP         []string
	}{
		{"fd00:96::10", IPv6, IPv4, []string{"[fd00:10:244::5]:8080", "[fd00:10:244::6]:8080"}},
		{"10.96.0.10", IPv4, IPv6, []string{"10.244.0.5:8080", "10.244.0.6:8080"}},
	} {
		// SingleStack, and PreferDualStack on a cluster with one service range: one ClusterIP.
		for _, policy := range []corev1.IPFamilyPolicy{corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack} {
			v4, v6 := familyTrackers(t, familyService(policy, c.ip))
			byFamily := map[Family]*Update{IPv4: v4, IPv6: v6}
			if _, _, ok := stateAddrs(byFamily[c.other]); ok {
				t.Errorf("%s %s: the %v proxier serves the Service, which has no %v ClusterIP (kube-proxy skips it)", policy, c.ip, c.other, c.other)
			}
			_, ep, ok := stateAddrs(byFamily[c.serving])
			if !ok || !slices.Equal(ep, c.wantEP) {
				t.Errorf("%s %s: the %v proxier's endpoints %v (served %v), want %v", policy, c.ip, c.serving, ep, ok, c.wantEP)
			}
		}
	}
}

// A Service changing from SingleStack IPv4 to RequireDualStack (the API allows adding
// the secondary family) appears in the IPv6 proxier only then, and leaves it when the
// secondary ClusterIP is removed again; the IPv4 proxier's state only ever has IPv4.
func TestFamiliesUpgradeDowngrade(t *testing.T) {
	v4, v6 := NewTracker("node-a", IPv4), NewTracker("node-a", IPv6)
	ts := fanOut([]*Tracker{v4, v6})
	name := ServiceName{Namespace: "ns", Name: "web"}
	for _, es := range familySlices() {
		ts.SetSlice(ConvertEndpointSlice(es))
	}
	ts.SetService(name, ConvertService(familyService(corev1.IPFamilyPolicySingleStack, "10.96.0.10")))
	ts.MarkSynced()
	if u := syncOnce(v6); len(u.Changed) != 0 {
		t.Fatalf("IPv6 proxier serves a SingleStack IPv4 Service: %v", u.Changed)
	}
	syncOnce(v4)
	ts.SetService(name, ConvertService(familyService(corev1.IPFamilyPolicyRequireDualStack, "10.96.0.10", "fd00:96::10")))
	u := syncOnce(v6)
	if fe, _, ok := stateAddrs(u); !ok || fe[0] != "[fd00:96::10]:80" {
		t.Fatalf("after RequireDualStack the IPv6 proxier's update is %+v, want the port at [fd00:96::10]:80", u)
	}
	if u := syncOnce(v4); len(u.Changed) != 1 || len(u.Changed[0].Endpoints) != 2 || !u.Changed[0].Endpoints[0].Addr.Is4() {
		t.Fatalf("IPv4 proxier after the upgrade: %+v", u)
	}
	ts.SetService(name, ConvertService(familyService(corev1.IPFamilyPolicySingleStack, "10.96.0.10")))
	if u := syncOnce(v6); len(u.Deleted) != 1 || u.Family != IPv6 {
		t.Fatalf("after the downgrade the IPv6 proxier's update is %+v, want web's port deleted", u)
	}
}

// One Watcher (one pair of informers) feeds both families' trackers (Watcher.Trackers).
func TestWatcherFeedsEveryFamily(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	if _, err := client.CoreV1().Services("ns").Create(ctx, familyService(corev1.IPFamilyPolicyRequireDualStack, "10.96.0.10", "fd00:96::10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, es := range familySlices() {
		if _, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	v4, v6 := NewTracker("node-a", IPv4), NewTracker("node-a", IPv6)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- (&Watcher{Client: client, Tracker: v4, Trackers: []*Tracker{v6}}).Run(wctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("watcher ended with %v", err)
		}
	}()
	for _, tr := range []*Tracker{v4, v6} {
		select {
		case <-tr.Synced():
		case <-time.After(30 * time.Second):
			t.Fatalf("%v tracker never synced", tr.Family())
		}
		u := syncOnce(tr)
		if len(u.Changed) != 1 || len(u.Changed[0].Endpoints) != 2 || FamilyOf(u.Changed[0].Endpoints[0].Addr) != tr.Family() {
			t.Fatalf("%v tracker's first update: %+v, want web's port with its 2 %v endpoints", tr.Family(), u, tr.Family())
		}
	}
}
