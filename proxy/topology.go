package proxy

// Endpoint selection, with kube-proxy's semantics (pkg/proxy/topology.go,
// CategorizeEndpoints): which of a Service port's endpoints this node sends new
// connections to, per traffic policy, and what happens when there are none.

import "slices"

// Topology modes: which hints selection follows. The names are the trafficDistribution
// values the hints come from.
const (
	TopologyNone           = ""
	TopologyPreferSameZone = "PreferSameZone"
	TopologyPreferSameNode = "PreferSameNode"
)

// Verdict is what the switch does with a new connection to a frontend.
type Verdict uint8

// The verdicts (kube-proxy's nftables proxier: endpoints → DNAT to one of them; none
// anywhere → reject; some in the cluster but none this policy may use → drop).
const (
	// Forward: DNAT to one of Choice.Endpoints.
	Forward Verdict = iota
	// Reject: the Service has no usable endpoint anywhere: TCP reset, ICMP port
	// unreachable for UDP (kube-proxy's reject).
	Reject
	// Drop: the Service has usable endpoints, but none on this node and the policy is
	// Local: the packet is dropped silently (kube-proxy's drop, no fallback to remote
	// endpoints).
	Drop
)

// String returns "forward", "reject" or "drop".
func (v Verdict) String() string {
	switch v {
	case Forward:
		return "forward"
	case Reject:
		return "reject"
	case Drop:
		return "drop"
	}
	return "verdict?"
}

// Choice is the endpoints one kind of traffic goes to, and its verdict.
type Choice struct {
	Verdict Verdict
	// Endpoints are the endpoints new connections are spread over (Verdict Forward
	// only), sorted by address and port.
	Endpoints []Endpoint
}

// Selection is a Service port's endpoints as seen from one node (CategorizeEndpoints).
type Selection struct {
	// Cluster are the endpoints of the Cluster traffic policy: the ready ones, narrowed
	// by topology hints (Topology); when none is ready, the serving and terminating ones
	// (hints ignored). Nil when the port never uses Cluster endpoints.
	Cluster []Endpoint
	// Local are the endpoints of the Local traffic policy: the ready endpoints on this
	// node; when none of this node's is ready, its serving and terminating ones. Hints
	// do not apply. Nil when the port never uses Local endpoints.
	Local []Endpoint
	// HasEndpoints: some endpoint anywhere in the cluster is usable (ready, or serving
	// and terminating). Without one the port rejects; with one, a Local policy with no
	// local endpoint drops.
	HasEndpoints bool
	// Topology is the topology mode the hints gave Cluster: TopologyNone,
	// TopologyPreferSameZone or TopologyPreferSameNode.
	Topology string
}

// Select computes the selection of a port's endpoints (deduplicated, sorted) on node
// nodeName in zone (the node's topology.kubernetes.io/zone label; "" = none):
//
//   - Cluster: ready endpoints; if none is ready anywhere, the serving-terminating ones.
//     Hints narrow the ready ones: to those hinted for nodeName when every ready endpoint
//     has node hints and at least one names nodeName (PreferSameNode); else to those
//     hinted for zone when every ready endpoint has zone hints and at least one names
//     zone (PreferSameZone, PreferClose, topology-mode Auto); else no narrowing.
//   - Local: this node's ready endpoints; if none of them is ready, this node's
//     serving-terminating ones. No fallback to other nodes.
//   - HasEndpoints: any endpoint ready, or serving and terminating.
func Select(sp *ServicePort, eps []Endpoint, nodeName, zone string) Selection {
	var sel Selection
	if len(eps) == 0 {
		return sel
	}
	if sp.UsesClusterEndpoints() {
		sel.Topology = topologyMode(eps, nodeName, zone)
		sel.Cluster = filter(eps, func(e Endpoint) bool { return e.Ready && hinted(e, sel.Topology, nodeName, zone) })
		if len(sel.Cluster) == 0 {
			// None ready anywhere (a topology with no ready endpoint for this node or
			// zone was not chosen): fall back to the serving-terminating ones.
			sel.Cluster = filter(eps, func(e Endpoint) bool { return e.Serving && e.Terminating })
		}
		sel.HasEndpoints = len(sel.Cluster) > 0
	}
	if !sp.UsesLocalEndpoints() {
		return sel
	}
	var localReady, localServingTerminating bool
	for _, e := range eps {
		switch {
		case e.Ready:
			sel.HasEndpoints = true
			localReady = localReady || e.Local
		case e.Serving && e.Terminating:
			sel.HasEndpoints = true
			localServingTerminating = localServingTerminating || e.Local
		}
	}
	switch {
	case localReady:
		sel.Local = filter(eps, func(e Endpoint) bool { return e.Local && e.Ready })
	case localServingTerminating:
		sel.Local = filter(eps, func(e Endpoint) bool { return e.Local && e.Serving && e.Terminating })
	default:
		sel.Local = []Endpoint{}
	}
	return sel
}

// topologyMode returns the hints Cluster follows (kube-proxy's topologyModeFromHints):
// only ready endpoints count; node hints win over zone hints.
func topologyMode(eps []Endpoint, nodeName, zone string) string {
	anyReady := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		anyReady = true
		if len(e.NodeHints) == 0 {
			allNode = false
		} else if slices.Contains(e.NodeHints, nodeName) {
			forNode = true
		}
		if len(e.ZoneHints) == 0 {
			allZone = false
		} else if slices.Contains(e.ZoneHints, zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return TopologyNone
	case allNode && forNode:
		return TopologyPreferSameNode
	case allZone && forZone:
		return TopologyPreferSameZone
	}
	return TopologyNone
}

func hinted(e Endpoint, mode, nodeName, zone string) bool {
	switch mode {
	case TopologyPreferSameNode:
		return slices.Contains(e.NodeHints, nodeName)
	case TopologyPreferSameZone:
		return slices.Contains(e.ZoneHints, zone)
	}
	return true
}

func filter(eps []Endpoint, keep func(Endpoint) bool) []Endpoint {
	out := []Endpoint{}
	for _, e := range eps {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

func choice(eps []Endpoint, hasEndpoints bool) Choice {
	switch {
	case !hasEndpoints:
		return Choice{Verdict: Reject}
	case len(eps) == 0:
		return Choice{Verdict: Drop}
	}
	return Choice{Verdict: Forward, Endpoints: eps}
}

// Internal is what traffic to the ClusterIP gets: the Local endpoints with
// internalTrafficPolicy Local, else the Cluster ones.
func (s *ServicePortState) Internal() Choice {
	if s.Port.InternalLocal {
		return choice(s.Selection.Local, s.Selection.HasEndpoints)
	}
	return choice(s.Selection.Cluster, s.Selection.HasEndpoints)
}

// External is what traffic from outside the cluster to the NodePort, external IPs and
// load-balancer IPs gets: the Local endpoints with externalTrafficPolicy Local, else the
// Cluster ones. (Traffic from outside stays with kube-proxy in ofsdn; this is for
// inspection and for a consumer that takes it.)
func (s *ServicePortState) External() Choice {
	if s.Port.ExternalLocal {
		return choice(s.Selection.Local, s.Selection.HasEndpoints)
	}
	return choice(s.Selection.Cluster, s.Selection.HasEndpoints)
}

// ExternalFromPods is what traffic from this node's pods to the NodePort (on any node's
// address), external IPs and load-balancer IPs gets: the Cluster endpoints whatever the
// externalTrafficPolicy, as kube-proxy short-circuits traffic from pods to external
// addresses to the Service's Cluster endpoints.
func (s *ServicePortState) ExternalFromPods() Choice {
	return choice(s.Selection.Cluster, s.Selection.HasEndpoints)
}
