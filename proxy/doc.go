// Package proxy computes what Kubernetes Services mean for one node's switch, with
// kube-proxy's semantics: per Service port its frontends (ClusterIP, NodePort, external
// IPs, load-balancer IPs), settings (session affinity, traffic policies, traffic
// distribution) and endpoints, and which endpoints this node sends new connections to.
// It knows nothing of OVS, OpenFlow or the pipeline; the controller turns its Updates
// into groups and flows.
//
// # Pieces
//
//   - Informers on Services and discovery.k8s.io/v1 EndpointSlices (Watcher) whose
//     transforms keep only what the proxy reads (StripService, StripEndpointSlice) and
//     whose list selector (ListSelector) leaves out objects another proxy owns
//     (service.kubernetes.io/service-proxy-name) and headless Services' slices, as
//     kube-proxy's do. Slices belong to a Service by their kubernetes.io/service-name
//     label.
//   - The model (ConvertService, ConvertEndpointSlice → ServicePort, Slice): headless
//     Services (ClusterIP "None" or unset) and type ExternalName are not proxied
//     (Proxied); ports are named by Service, port name and protocol (ServicePortName);
//     ClusterIPs of every family are kept, and addresses are netip.Addr, so a Tracker of
//     family IPv6 serves dual stack the way kube-proxy's per-family proxiers do: a
//     Service (whatever its ipFamilyPolicy) is proxied in a family only through its
//     ClusterIP of that family, to the endpoints of that family's EndpointSlices.
//   - The change tracker (Tracker): the model, the Services touched since the last
//     delivery, the state the consumer last confirmed; each Update is the difference
//     per Service port (Changed with the whole new state, Deleted), the UDP/SCTP
//     conntrack entries to flush (Stale, Activated) and the EndpointSlices'
//     endpoints.kubernetes.io/last-change-trigger-time values (TriggerTimes).
//   - Endpoint selection (Select, ServicePortState.Internal / External /
//     ExternalFromPods), kube-proxy's CategorizeEndpoints exactly; see below.
//   - One rate-bounded sync runner (Runner): events are coalesced, syncs start at least
//     MinInterval apart (kube-proxy's BoundedFrequencyRunner with minSyncPeriod), the
//     first sync waits for both informers and is Full, a failed sync is retried with its
//     changes merged into the next.
//
// # Semantics in brief
//
// Endpoints of a Service port come from every slice of its Service that has a port of
// the same name and protocol; that slice port's number is the endpoint's port (a
// targetPort by name resolves per pod, so slices may differ). Only a slice endpoint's
// first address counts, and only slices of the tracker's address type. An endpoint that
// appears in several slices is taken once (the copy on this node preferred). Unset ready
// and serving conditions count as true, unset terminating as false.
//
// Selection on node N in zone Z:
//
//   - Cluster endpoints: the ready ones. If none is ready anywhere, the serving and
//     terminating ones (graceful termination).
//   - Topology: when every ready endpoint has zone hints and at least one is hinted for
//     Z, only those hinted for Z (trafficDistribution PreferClose / PreferSameZone,
//     topology-mode Auto); node hints likewise, before zones (PreferSameNode). Otherwise
//     all. Hints never apply to serving-terminating fallbacks or to Local endpoints.
//   - internalTrafficPolicy Local: ClusterIP traffic goes only to N's endpoints (ready,
//     else serving-terminating); when N has none but the cluster has some, it is
//     dropped, never sent elsewhere. externalTrafficPolicy Local likewise for traffic
//     from outside; traffic from pods to external addresses uses the Cluster endpoints
//     (kube-proxy's short circuit).
//   - No usable endpoint anywhere: new connections are rejected (Verdict Reject).
//
// Session affinity ClientIP keeps sessionAffinityConfig.clientIP.timeoutSeconds
// (default 10,800 s, at most 86,400 s) as AffinitySeconds.
//
// Stale conntrack (kube-proxy's conntrack cleanup, pkg/proxy/conntrack): for UDP (and
// SCTP, which kube-proxy leaves alone but whose associations outlive an endpoint the same
// way) an Update lists each endpoint that was serving and no longer is, or is gone, with
// the frontends and NodePort the port had; entries to a frontend the port lost are
// listed for its endpoints too. Unlike kube-proxy's full reconciliation, which keeps
// entries of a port left with no serving endpoint, they are listed then as well, so a
// client's next datagram is rejected rather than sent to the dead endpoint. Activated
// lists ports that went from no serving endpoint to some, whose untranslated entries
// (made while traffic was rejected) are to go.
//
// # How a consumer uses it
//
//	t := proxy.NewTracker(nodeName, proxy.IPv4)
//	t.SetZone(zone) // the node's topology.kubernetes.io/zone label, and on each change
//	go (&proxy.Watcher{Client: client, Tracker: t}).Run(ctx)
//	go (&proxy.Runner{Tracker: t, Sink: sink, MinInterval: time.Second}).Run(ctx)
//
// On a dual-stack node: a second tracker t6 := proxy.NewTracker(nodeName, proxy.IPv6) in
// Watcher.Trackers and a Runner of its own into the same sink; each Update names its
// Family, and a Full one replaces only that family's Service ports.
//
// sink.Sync(ctx, u) receives each Update: for u.Full, replace everything held by
// u.Changed; otherwise set each of u.Changed to its new state and remove each of
// u.Deleted. For each state, ClusterIP traffic from pods follows Internal(), NodePort,
// external and load-balancer traffic from pods ExternalFromPods(): Forward over
// Choice.Endpoints (with AffinitySeconds when set), Reject, or Drop. Once the switch
// has confirmed it (barrier or bundle commit), flush u.Stale and u.Activated from
// conntrack, observe time.Since(t) for every t of u.TriggerTimes into the network
// programming latency histogram, and return nil. An error leaves the Tracker's applied
// state unchanged and the same changes come again. Tracker.Applied lists the confirmed
// state (ofsdnctl services); Tracker.Resync asks for a Full update (after the switch
// lost its state).
//
// # Design history
//
// The split follows kube-proxy's pkg/proxy (a service change tracker and an endpoints
// change tracker feeding one proxier whose sync is rate-bounded) and Antrea's
// pkg/agent/proxy, which reuses those trackers in front of OVS groups. Here the two
// trackers are one, keyed by Service, since both changes end in the same per-port state,
// and the consumer receives that state whole rather than re-reading maps. The model is
// per node (Local endpoints, zone) because selection is; a consumer on every node
// computes only its own.
package proxy
