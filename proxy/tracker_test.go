package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

var web = ServiceName{Namespace: "ns", Name: "web"}

func port(name string, proto Protocol, num uint16, mod ...func(*ServicePort)) *ServicePort {
	sp := &ServicePort{Name: ServicePortName{ServiceName: web, Port: name, Protocol: proto},
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, Port: num}
	for _, m := range mod {
		m(sp)
	}
	return sp
}

// slice builds a slice of web with one port and endpoints 10.244.0.<n> (ep's flags;
// its Port and Local are recomputed by the tracker).
func slice(name string, ports []SlicePort, eps ...Endpoint) *Slice {
	return &Slice{Service: web, Name: name, Family: IPv4, Ports: ports, Endpoints: eps}
}

func pod(n int, node string, flags ...string) Endpoint {
	e := ep(n, flags...)
	e.Addr = netip.AddrFrom4([4]byte{10, 244, 0, byte(n)})
	e.Port, e.Local, e.NodeName = 0, false, node
	return e
}

func httpPort(p uint16) []SlicePort {
	return []SlicePort{{Name: "http", Protocol: ProtocolTCP, Port: p}}
}
func dnsPort(p uint16) []SlicePort { return []SlicePort{{Name: "dns", Protocol: ProtocolUDP, Port: p}} }

func newSynced(t *testing.T) *Tracker {
	t.Helper()
	tr := NewTracker("me", IPv4)
	tr.MarkSynced()
	return tr
}

// syncOnce checks out and commits one update.
func syncOnce(tr *Tracker) *Update {
	p := tr.checkout()
	tr.commit(p)
	return &p.Update
}

func endpointsOf(u *Update, n ServicePortName) []string {
	for _, s := range u.Changed {
		if s.Port.Name == n {
			var out []string
			for _, e := range s.Endpoints {
				out = append(out, fmt.Sprintf("%s@%s", e, e.NodeName))
			}
			return out
		}
	}
	return nil
}

func TestEndpointsMergedAcrossSlices(t *testing.T) {
	tr := newSynced(t)
	http := port("http", ProtocolTCP, 80)
	tr.SetService(web, []*ServicePort{http, port("http", ProtocolUDP, 80)})
	// targetPort by name: each slice its own number; the same pod in two slices once,
	// the copy on this node preferred; a UDP slice port of the same name is the UDP port's.
	tr.SetSlice(slice("a", httpPort(8080), pod(1, "n1", "r"), pod(2, "n1", "r")))
	tr.SetSlice(slice("b", httpPort(9090), pod(3, "n2", "r")))
	tr.SetSlice(slice("c", httpPort(8080), pod(2, "me", "r"), pod(1, "n1", "r")))
	tr.SetSlice(slice("d", []SlicePort{{Name: "http", Protocol: ProtocolUDP, Port: 5353}}, pod(4, "n1", "r")))
	tr.SetSlice(&Slice{Service: web, Name: "v6", Family: IPv6, Ports: httpPort(80),
		Endpoints: []Endpoint{{Addr: netip.MustParseAddr("fd00::1"), Ready: true, Serving: true}}})
	u := syncOnce(tr)
	got := endpointsOf(u, http.Name)
	want := []string{"10.244.0.1:8080@n1", "10.244.0.2:8080@me", "10.244.0.3:9090@n2"}
	if !slices.Equal(got, want) {
		t.Errorf("TCP endpoints %v, want %v", got, want)
	}
	if got := endpointsOf(u, port("http", ProtocolUDP, 80).Name); !slices.Equal(got, []string{"10.244.0.4:5353@n1"}) {
		t.Errorf("UDP endpoints %v", got)
	}
	for _, s := range u.Changed {
		for _, e := range s.Endpoints {
			if e.Local != (e.NodeName == "me") {
				t.Errorf("endpoint %s on %s: Local %v", e, e.NodeName, e.Local)
			}
		}
	}
	// A port with no slice port of its name has no endpoints: reject.
	tr.SetService(web, []*ServicePort{http, port("metrics", ProtocolTCP, 9100)})
	u = syncOnce(tr)
	for _, s := range u.Changed {
		if s.Port.Name.Port == "metrics" && s.Internal().Verdict != Reject {
			t.Errorf("port without endpoints: %v", s.Internal().Verdict)
		}
	}
}

func TestUpdatesAreDifferences(t *testing.T) {
	tr := NewTracker("me", IPv4)
	tr.SetService(web, []*ServicePort{port("http", ProtocolTCP, 80)})
	tr.SetSlice(slice("a", httpPort(8080), pod(1, "n1", "r")))
	select {
	case <-tr.Changed():
		t.Fatal("kick before the tracker was synced")
	default:
	}
	tr.MarkSynced()
	<-tr.Changed()
	u := syncOnce(tr)
	if !u.Full || len(u.Changed) != 1 {
		t.Fatalf("first update: full %v, %d changed", u.Full, len(u.Changed))
	}
	// The same objects again: nothing to do.
	tr.SetService(web, []*ServicePort{port("http", ProtocolTCP, 80)})
	tr.SetSlice(slice("a", httpPort(8080), pod(1, "n1", "r")))
	if u := syncOnce(tr); !u.Empty() {
		t.Fatalf("unchanged objects gave %+v", u)
	}
	// Another Service's change does not touch web.
	other := ServiceName{Namespace: "ns", Name: "other"}
	osp := port("", ProtocolTCP, 81)
	osp.Name.ServiceName = other
	tr.SetService(other, []*ServicePort{osp})
	u = syncOnce(tr)
	if u.Full || len(u.Changed) != 1 || u.Changed[0].Port.Name.ServiceName != other {
		t.Fatalf("adding another Service: %+v", u.Changed)
	}
	// A port removed: Deleted; the Service headless (no ports): all Deleted.
	tr.SetService(web, []*ServicePort{port("http", ProtocolTCP, 80), port("admin", ProtocolTCP, 8081)})
	syncOnce(tr)
	tr.SetService(web, []*ServicePort{port("http", ProtocolTCP, 80)})
	if u := syncOnce(tr); len(u.Changed) != 0 || len(u.Deleted) != 1 || u.Deleted[0].Port != "admin" {
		t.Fatalf("port removed: changed %d, deleted %v", len(u.Changed), u.Deleted)
	}
	tr.DeleteService(web)
	if u := syncOnce(tr); len(u.Deleted) != 1 || u.Deleted[0].Port != "http" {
		t.Fatalf("Service gone: deleted %v", u.Deleted)
	}
	if got := tr.Applied(); len(got) != 1 || got[0].Port.Name.ServiceName != other {
		t.Fatalf("applied %v", got)
	}
	// Resync: a Full update with every port.
	tr.Resync()
	if u := syncOnce(tr); !u.Full || len(u.Changed) != 1 {
		t.Fatalf("resync: %+v", u)
	}
}

func TestZoneChangeReselects(t *testing.T) {
	tr := newSynced(t)
	tr.SetService(web, []*ServicePort{port("http", ProtocolTCP, 80)})
	tr.SetSlice(slice("a", httpPort(80), pod(1, "n1", "r", "z:a"), pod(2, "n2", "r", "z:b")))
	syncOnce(tr)
	tr.SetZone("b")
	u := syncOnce(tr)
	if len(u.Changed) != 1 || !slices.Equal(ids(u.Changed[0].Internal().Endpoints), []int{2}) {
		t.Fatalf("after the node's zone became b: %+v", u.Changed)
	}
}

func stales(u *Update) []string {
	var out []string
	for _, s := range u.Stale {
		out = append(out, fmt.Sprintf("%v np%d -> %s", s.Frontends, s.NodePort, s.Endpoint))
	}
	return out
}

func TestStaleConntrack(t *testing.T) {
	dns := port("dns", ProtocolUDP, 53, func(sp *ServicePort) { sp.NodePort = 30053 })
	for _, c := range []struct {
		name        string
		before      []Endpoint
		after       []Endpoint
		afterPort   *ServicePort
		deleteSvc   bool
		want        []string
		activated   bool
		proto       Protocol
		wantNoStale bool
	}{
		{name: "endpoint gone", before: []Endpoint{pod(1, "n1", "r"), pod(2, "n1", "r")}, after: []Endpoint{pod(2, "n1", "r")},
			want: []string{"[10.96.0.10:53] np30053 -> 10.244.0.1:5353"}},
		{name: "endpoint no longer serving", before: []Endpoint{pod(1, "n1", "r"), pod(2, "n1", "r")}, after: []Endpoint{pod(1, "n1"), pod(2, "n1", "r")},
			want: []string{"[10.96.0.10:53] np30053 -> 10.244.0.1:5353"}},
		{name: "terminating but still serving: kept", before: []Endpoint{pod(1, "n1", "r"), pod(2, "n1", "r")},
			after: []Endpoint{pod(1, "n1", "s", "t"), pod(2, "n1", "r")}},
		{name: "never served: nothing to flush", before: []Endpoint{pod(1, "n1"), pod(2, "n1", "r")}, after: []Endpoint{pod(2, "n1", "r")}},
		{name: "last endpoint gone: flushed too", before: []Endpoint{pod(1, "n1", "r")}, after: nil,
			want: []string{"[10.96.0.10:53] np30053 -> 10.244.0.1:5353"}},
		{name: "Service deleted", before: []Endpoint{pod(1, "n1", "r")}, after: []Endpoint{pod(1, "n1", "r")}, deleteSvc: true,
			want: []string{"[10.96.0.10:53] np30053 -> 10.244.0.1:5353"}},
		{name: "frontend lost, endpoint kept", before: []Endpoint{pod(1, "n1", "r")}, after: []Endpoint{pod(1, "n1", "r")},
			afterPort: port("dns", ProtocolUDP, 53),
			want:      []string{"[] np30053 -> 10.244.0.1:5353"}},
		{name: "0 to 1 serving: activated", before: []Endpoint{pod(1, "n1")}, after: []Endpoint{pod(1, "n1", "r")}, activated: true},
		{name: "TCP: never", proto: ProtocolTCP, before: []Endpoint{pod(1, "n1", "r")}, after: nil},
		{name: "SCTP too", proto: ProtocolSCTP, before: []Endpoint{pod(1, "n1", "r")}, after: nil,
			want: []string{"[10.96.0.10:53] np30053 -> 10.244.0.1:5353"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newSynced(t)
			sp, proto := *dns, ProtocolUDP
			if c.proto != 0 {
				proto = c.proto
			}
			sp.Name.Protocol = proto
			sports := []SlicePort{{Name: "dns", Protocol: proto, Port: 5353}}
			tr.SetService(web, []*ServicePort{&sp})
			tr.SetSlice(slice("a", sports, c.before...))
			syncOnce(tr)
			if c.afterPort != nil {
				ap := *c.afterPort
				ap.Name.Protocol = proto
				tr.SetService(web, []*ServicePort{&ap})
			}
			tr.SetSlice(slice("a", sports, c.after...))
			if c.deleteSvc {
				tr.DeleteService(web)
			}
			u := syncOnce(tr)
			if got := stales(u); !slices.Equal(got, c.want) {
				t.Errorf("stale %v, want %v", got, c.want)
			}
			if got := len(u.Activated) == 1; got != c.activated {
				t.Errorf("activated %v, want %v", u.Activated, c.activated)
			}
		})
	}
}

func TestTriggerTimes(t *testing.T) {
	tr := newSynced(t)
	tr.SetService(web, []*ServicePort{port("http", ProtocolTCP, 80)})
	syncOnce(tr)
	old := tr.start.Add(-time.Hour)
	t1, t2 := time.Now().Add(time.Millisecond), time.Now().Add(2*time.Millisecond)
	s := slice("a", httpPort(80), pod(1, "n1", "r"))
	s.TriggerTime = old
	tr.SetSlice(s) // from before the tracker started: not measured
	if u := syncOnce(tr); u.TriggerTimes != nil {
		t.Errorf("trigger time before the start: %v", u.TriggerTimes)
	}
	s = slice("a", httpPort(80), pod(1, "n1", "r"), pod(2, "n1", "r"))
	s.TriggerTime = t1
	tr.SetSlice(s)
	s = slice("a", httpPort(80), pod(1, "n1", "r"))
	s.TriggerTime = t2
	tr.SetSlice(s)
	u := syncOnce(tr)
	if got := u.TriggerTimes[web]; len(got) != 2 || !got[0].Equal(t1) || !got[1].Equal(t2) {
		t.Errorf("trigger times %v, want both changes' (%v, %v)", u.TriggerTimes, t1, t2)
	}
	// An event that changes nothing records nothing; a deletion drops pending ones.
	tr.SetSlice(s)
	if u := syncOnce(tr); u.TriggerTimes != nil {
		t.Errorf("unchanged slice: %v", u.TriggerTimes)
	}
	s = slice("b", httpPort(80), pod(3, "n1", "r"))
	s.TriggerTime = t2
	tr.SetSlice(s)
	tr.DeleteSlice(web, "b")
	if u := syncOnce(tr); u.TriggerTimes != nil {
		t.Errorf("after the slice's deletion: %v", u.TriggerTimes)
	}
}

func TestAbortRedelivers(t *testing.T) {
	tr := newSynced(t)
	tr.SetService(web, []*ServicePort{port("dns", ProtocolUDP, 53)})
	tr.SetSlice(slice("a", dnsPort(5353), pod(1, "n1", "r"), pod(2, "n1", "r")))
	syncOnce(tr)
	s := slice("a", dnsPort(5353), pod(2, "n1", "r"))
	s.TriggerTime = time.Now().Add(time.Millisecond)
	tr.SetSlice(s)
	p := tr.checkout()
	if len(p.Changed) != 1 || len(p.Stale) != 1 || len(p.TriggerTimes[web]) != 1 {
		t.Fatalf("first attempt %+v", p.Update)
	}
	tr.abort(p) // the Sink failed
	if p = tr.checkout(); len(p.Changed) != 1 || len(p.Stale) != 1 || len(p.TriggerTimes[web]) != 1 {
		t.Fatalf("retry with no new event: %+v, want the failed update again", p.Update)
	}
	tr.abort(p)
	tr.SetSlice(slice("a", dnsPort(5353), pod(2, "n1", "r"), pod(3, "n1", "r")))
	p = tr.checkout()
	if p.Full || len(p.Changed) != 1 || len(p.Changed[0].Endpoints) != 2 || len(p.Stale) != 1 ||
		p.Stale[0].Endpoint != netip.MustParseAddrPort("10.244.0.1:5353") || len(p.TriggerTimes[web]) != 1 {
		t.Fatalf("retry: %+v (want the failed changes merged with the new one)", p.Update)
	}
	tr.commit(p)
	if u := syncOnce(tr); !u.Empty() {
		t.Fatalf("after commit: %+v", u)
	}
	// A failed first (Full) update stays Full.
	tr2 := newSynced(t)
	p = tr2.checkout()
	tr2.abort(p)
	if p = tr2.checkout(); !p.Full {
		t.Fatal("retry of the first update is not Full")
	}
}
