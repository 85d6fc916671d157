package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// ep builds an endpoint 10.0.0.<n>:80 from flags: r ready, s serving, t terminating,
// l local (on node "me"), z:<zone> zone hint, n:<node> node hint. "r" alone is ready and
// serving, as the API's controller writes it.
func ep(n int, flags ...string) Endpoint {
	e := Endpoint{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}), Port: 80, NodeName: "other"}
	for _, f := range flags {
		switch {
		case f == "r":
			e.Ready, e.Serving = true, true
		case f == "s":
			e.Serving = true
		case f == "t":
			e.Terminating = true
		case f == "l":
			e.Local, e.NodeName = true, "me"
		case strings.HasPrefix(f, "z:"):
			e.ZoneHints = append(e.ZoneHints, f[2:])
		case strings.HasPrefix(f, "n:"):
			e.NodeHints = append(e.NodeHints, f[2:])
		default:
			panic("flag " + f)
		}
	}
	return e
}

// ids lists the endpoints' last address bytes.
func ids(eps []Endpoint) []int {
	out := []int{}
	for _, e := range eps {
		out = append(out, int(e.Addr.As4()[3]))
	}
	return out
}

func TestSelectionRules(t *testing.T) {
	cluster := &ServicePort{Port: 80}
	itpLocal := &ServicePort{Port: 80, InternalLocal: true}
	etpLocal := &ServicePort{Port: 80, NodePort: 30080, ExternalLocal: true}
	type want struct {
		internal, external, fromPods string // "forward [ids]", "reject", "drop"
	}
	cases := []struct {
		name string
		sp   *ServicePort
		zone string
		eps  []Endpoint
		want want
		mode string
	}{
		{name: "only ready endpoints", sp: cluster,
			eps:  []Endpoint{ep(1, "r"), ep(2), ep(3, "s"), ep(4, "r")},
			want: want{internal: "forward [1 4]"}},
		{name: "none ready: serving and terminating ones", sp: cluster,
			eps:  []Endpoint{ep(1), ep(2, "s", "t"), ep(3, "t"), ep(4, "s")},
			want: want{internal: "forward [2]"}},
		{name: "some ready: no terminating ones", sp: cluster,
			eps:  []Endpoint{ep(1, "r"), ep(2, "s", "t")},
			want: want{internal: "forward [1]"}},
		{name: "no endpoints: reject", sp: cluster, want: want{internal: "reject"}},
		{name: "none usable: reject", sp: cluster,
			eps:  []Endpoint{ep(1), ep(2, "t"), ep(3, "s")},
			want: want{internal: "reject"}},
		{name: "internalTrafficPolicy Local: this node's only", sp: itpLocal,
			eps:  []Endpoint{ep(1, "r"), ep(2, "r", "l"), ep(3, "r")},
			want: want{internal: "forward [2]"}},
		{name: "internalTrafficPolicy Local, none here: drop, no fallback", sp: itpLocal,
			eps:  []Endpoint{ep(1, "r"), ep(3, "r")},
			want: want{internal: "drop"}},
		{name: "internalTrafficPolicy Local, only terminating here: those", sp: itpLocal,
			eps:  []Endpoint{ep(1, "r"), ep(2, "s", "t", "l"), ep(3, "t", "l")},
			want: want{internal: "forward [2]"}},
		{name: "internalTrafficPolicy Local, none anywhere: reject", sp: itpLocal,
			eps:  []Endpoint{ep(1), ep(2, "l")},
			want: want{internal: "reject"}},
		{name: "zone hints: every ready one hinted, some for this zone", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:a"), ep(2, "r", "z:b"), ep(3, "r", "z:a", "z:c")},
			want: want{internal: "forward [1 3]"}, mode: TopologyPreferSameZone},
		{name: "zone hints: one ready endpoint without: all", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:a"), ep(2, "r"), ep(3, "r", "z:b")},
			want: want{internal: "forward [1 2 3]"}},
		{name: "zone hints: none for this zone: all", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:b"), ep(2, "r", "z:c")},
			want: want{internal: "forward [1 2]"}},
		{name: "zone hints: node without a zone: all", sp: cluster, zone: "",
			eps:  []Endpoint{ep(1, "r", "z:a"), ep(2, "r", "z:b")},
			want: want{internal: "forward [1 2]"}},
		{name: "zone hints: not-ready endpoints do not count", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:a"), ep(2), ep(3, "r", "z:b")},
			want: want{internal: "forward [1]"}, mode: TopologyPreferSameZone},
		{name: "node hints before zone hints", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:a", "n:me"), ep(2, "r", "z:a", "n:x"), ep(3, "r", "z:b", "n:y")},
			want: want{internal: "forward [1]"}, mode: TopologyPreferSameNode},
		{name: "node hints, none for this node: zone hints", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:a", "n:x"), ep(2, "r", "z:a", "n:x"), ep(3, "r", "z:b", "n:y")},
			want: want{internal: "forward [1 2]"}, mode: TopologyPreferSameZone},
		{name: "hints ignored for the terminating fallback", sp: cluster, zone: "a",
			eps:  []Endpoint{ep(1, "s", "t", "z:b"), ep(2, "s", "t", "z:a")},
			want: want{internal: "forward [1 2]"}},
		{name: "hints do not narrow Local", sp: itpLocal, zone: "a",
			eps:  []Endpoint{ep(1, "r", "z:a"), ep(2, "r", "z:b", "l"), ep(3, "r", "z:a", "l")},
			want: want{internal: "forward [2 3]"}},
		{name: "externalTrafficPolicy Local: outside gets this node's, pods the cluster's", sp: etpLocal,
			eps:  []Endpoint{ep(1, "r"), ep(2, "r", "l")},
			want: want{internal: "forward [1 2]", external: "forward [2]", fromPods: "forward [1 2]"}},
		{name: "externalTrafficPolicy Local, none here: outside dropped, pods served", sp: etpLocal,
			eps:  []Endpoint{ep(1, "r")},
			want: want{internal: "forward [1]", external: "drop", fromPods: "forward [1]"}},
		{name: "both policies Local on a NodePort: ClusterIP local, pods to the NodePort the cluster's",
			sp:   &ServicePort{Port: 80, NodePort: 30080, InternalLocal: true, ExternalLocal: true},
			eps:  []Endpoint{ep(1, "r"), ep(2, "r", "l")},
			want: want{internal: "forward [2]", external: "forward [2]", fromPods: "forward [1 2]"}},
	}
	show := func(c Choice) string {
		if c.Verdict != Forward {
			return c.Verdict.String()
		}
		return fmt.Sprintf("forward %v", ids(c.Endpoints))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &ServicePortState{Port: c.sp, Family: IPv4, Endpoints: c.eps}
			s.Selection = Select(c.sp, c.eps, "me", c.zone)
			if got := show(s.Internal()); got != c.want.internal {
				t.Errorf("ClusterIP traffic: %s, want %s (selection %+v)", got, c.want.internal, s.Selection)
			}
			if c.want.external != "" {
				if got := show(s.External()); got != c.want.external {
					t.Errorf("external traffic: %s, want %s", got, c.want.external)
				}
			}
			if c.want.fromPods != "" {
				if got := show(s.ExternalFromPods()); got != c.want.fromPods {
					t.Errorf("external addresses from pods: %s, want %s", got, c.want.fromPods)
				}
			}
			if s.Selection.Topology != c.mode {
				t.Errorf("topology mode %q, want %q", s.Selection.Topology, c.mode)
			}
		})
	}
}

// A port that never uses one policy gets nil for it (kube-proxy: the list is not
// computed), so a consumer can tell "not used" from "none".
func TestSelectionUnusedPolicyIsNil(t *testing.T) {
	eps := []Endpoint{ep(1, "r", "l")}
	if s := Select(&ServicePort{Port: 80}, eps, "me", ""); s.Local != nil || !slices.Equal(ids(s.Cluster), []int{1}) {
		t.Errorf("Cluster-only port: %+v", s)
	}
	if s := Select(&ServicePort{Port: 80, InternalLocal: true}, eps, "me", ""); s.Cluster != nil || !slices.Equal(ids(s.Local), []int{1}) {
		t.Errorf("Local-only port: %+v", s)
	}
}
