package controller

// Kubernetes Services load-balanced in OVS (issue 22, config serviceProxy: ofsdn): the
// proxy.Sink that turns package proxy's Updates into each Service port's select group
// (a UDP port's: hash slot flows, flows.ServiceHashSelect) and service_lb flow
// (flows.ServicePortFlows), and the rejects of the no-endpoint flow.
//
// Design history.
//
//   - Owner and group ids (a Service port view's, and its part groups') are allocated
//     round robin and recorded in the data directory (ServicePortIDsFile, the record of
//     ownerids.go) under the view's name, so a restarted daemon gives every Service port
//     the id, and so the group id, it had. A new id is recorded (one fsync per Sync)
//     before the switch change that uses it; an id is freed only after the Sync that
//     removed its flows and groups is confirmed, so one switch change never deletes and
//     re-creates the same group id for two Service ports; the first confirmed Full sync
//     frees the ids of Service ports gone while the daemon was down. Cleaning up does not
//     depend on it: a new daemon run takes a new generation, its first flow sync deletes
//     the earlier run's flows by cookie and every group and meter of ofsdn's range no
//     owner wants (switchstate), and the proxy's first Update is Full, so every Service
//     port is set again (in memory only until issue 21 asked for ids kept across
//     restarts). Between the node's first sync and the proxy's first Update, pods'
//     Service traffic takes the service_host path to the host (kube-proxy, which keeps
//     running beside ofsdn).
//   - One Sync is one switchstate.Update over every changed and deleted Service port
//     (groups before the flows that use them, deletes the other way round, as the store
//     orders them), confirmed before Sync returns, so the proxy's applied state is the
//     switch's.
//   - Verdicts (proxy.Choice) for ClusterIP traffic from pods (Internal): Forward = the
//     select group (UDP: the slot flows) over the chosen endpoints; Reject = the metered flow to the
//     controller, answered here; Drop (internalTrafficPolicy Local without a local
//     endpoint) = the same match with no action.
//   - Other frontends for pods (servicePortViews): external IPs and load-balancer IPs at
//     the port, every node address (this node's IP, each peer's: Node InternalIPs, the
//     nftables proxier's default --nodeport-addresses primary) at the NodePort, with
//     ExternalFromPods' verdict: kube-proxy short-circuits pod traffic to external
//     destinations to the Cluster endpoints whatever externalTrafficPolicy ("short-circuit
//     pod traffic" in its EXT chain, before the Local policy's drop, which is in the filter
//     table after the DNAT), and rejects on every frontend when no endpoint exists. When
//     Internal and ExternalFromPods choose alike, the frontends are more flows of the
//     port's owner to its one group; when not (internalTrafficPolicy Local on an
//     externally accessible port), the other frontends are an owner of their own (portKey
//     external) with their own group. Peer events (Overlay.Apply) rebuild the NodePort
//     ports when the node addresses change, and every Sync does when they differ from
//     those on the switch.
//   - Rejects: the no-endpoint flow sends at most flows.ServiceRejectMaxLen bytes to the
//     controller through meter flows.ServiceRejectMeter (ServiceRejectRate packets/s,
//     a desired meter of the pipeline owner like the deny log's). A TCP SYN is answered
//     with a RST+ACK and a UDP datagram with ICMP port unreachable (RFC 792 type 3 code
//     3, quoting the IPv4 header and 8 bytes), both from ClusterIP:port to the client,
//     sent as a packet-out straight out of the client's port (the packet-in's in_port).
//     Other packets (SCTP, TCP without SYN) are counted and dropped.
//     Over IPv6 the same, with ICMPv6 destination unreachable code 4 (port unreachable,
//     RFC 4443 §3.1) for UDP. kube-proxy's nftables proxier rejects with nft's default
//     (ICMP or ICMPv6 port unreachable for every protocol, TCP too); both make the
//     client's connect or read fail at once with ECONNREFUSED, and the RST for TCP is
//     what the IPv4 side has always sent here.
//   - Both IP families (issue 23): one proxy.Tracker and Runner per family of the node
//     (Node.ServiceFamilies) sync into this one sink, each Update naming its Family; a
//     Service port's IPv6 view is keyed apart (portKey.v6), so it has its own owner id,
//     group and record key ("NAME IPv6"), and is built from the IPv6 state only. A Full
//     update replaces its own family's views; the first Full of one family frees only that
//     family's recorded ids (the other's first Full may be yet to come).
//   - Stale UDP/SCTP conntrack (Update.Stale): after the switch confirmed the change, the
//     entries whose original destination is a frontend and whose reply source is the
//     gone endpoint are flushed from ofsdn's zone with ovs-vswitchd's
//     dpctl/flush-conntrack (partial tuples, OVS >= 3.1), ServiceOptions.FlushConntrack.
//     Update.Activated needs nothing: while a port had no endpoint its packets went to
//     the controller uncommitted (service_conntrack's ct(nat) does not commit), so no
//     entry was made.
//   - The host's masquerade of the service return path (package masq: "ct status dnat"
//     in the host's netfilter) does not see connections DNAT'ed here: they never leave
//     the switch (the translated packet goes to l3_forwarding or the tunnel), so an
//     endpoint sees the client pod's own address. The rule stays for what still goes to
//     kube-proxy (traffic from the host and from outside, Service ports ofsdn does not
//     proxy, every port until the proxy's first sync).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/proxy"
	"github.com/ofsdn/ofsdn/switchstate"
)

// ServiceRejectRate is the default rate of meter flows.ServiceRejectMeter, packets per
// second per node: how many connections to Services without endpoints the daemon answers
// (the rest the switch drops, and the client retries).
const ServiceRejectRate = 100

// ServiceRejectQueueSize is how many rejected packets wait for an answer (more are
// dropped and counted).
const ServiceRejectQueueSize = 256

// ServiceFlowRemovedQueueSize is how many flow-removed messages (learned session-affinity
// flows that expired at the learn limit) wait for their remainder flow; more are dropped
// and counted, and their clients' affinity ends at the limit.
const ServiceFlowRemovedQueueSize = 4096

// ServiceOptions turn on Services load-balanced in OVS (NodeConfig.Services). The node's
// Services() is then the proxy.Sink to feed from a proxy.Runner.
type ServiceOptions struct {
	// RejectRate is meter flows.ServiceRejectMeter's rate in packets per second
	// (1..1,000,000); 0 = ServiceRejectRate.
	RejectRate uint32
	// FlushConntrack removes the conntrack entries of zone whose original direction
	// matches origTuple and whose reply direction matches replyTuple, each an
	// ovs-dpctl(8) ct tuple ("ct_nw_dst=10.96.0.10,ct_nw_proto=17,ct_tp_dst=53"; "" =
	// any). nil = stale entries are not flushed (they time out).
	FlushConntrack func(ctx context.Context, zone uint16, origTuple, replyTuple string) error
	// PurgeDatapath, if set, empties ovs-vswitchd's datapath flow cache after each sync
	// that changed the switch (the userspace datapath: a cached megaflow of a ClusterIP
	// carries the bucket it chose until the revalidators get to it, so a new connection
	// could still reach a removed endpoint; PolicyOptions.PurgeDatapath likewise). An
	// error is logged.
	PurgeDatapath func(context.Context) error
	// AffinityLearnMax is the learn limit of session affinity, seconds
	// (flows.NodeConfig.AffinityLearnMax): 0 = 65535, the learn action's maximum. Only
	// tests lower it, to show a timeout above the limit carried on by the remainder flows
	// in seconds.
	AffinityLearnMax uint16
}

// ServiceStats are the Service proxy's counters since the daemon started (monotonic).
type ServiceStats struct {
	// Ports is the number of Service ports on the switch, each family's side of a
	// dual-stack Service port counted once (kube-proxy's per-family proxiers count theirs
	// apart too).
	Ports int
	// Endpoints is the number of endpoints over all of them: buckets of their groups, a
	// UDP port's endpoints (an external view's count too).
	Endpoints int
	// Rejected counts packets of connections to a Service port without endpoints that
	// the daemon answered (TCP RST or ICMP port unreachable).
	Rejected uint64
	// RejectDropped counts such packets not answered: not a TCP SYN or UDP, undecodable,
	// the packet-out failed, or the queue was full.
	RejectDropped uint64
	// Flushed counts successful conntrack flushes of stale UDP/SCTP entries;
	// FlushErrors the failed ones.
	Flushed, FlushErrors uint64
	// AffinityRemainders counts the remainder flows added for learned session-affinity
	// flows that expired at the learn limit (a timeout above 65,535 s);
	// AffinityRemainderErrors those not added (the switch refused, the connection was
	// down, the queue was full): their clients' affinity ended at the limit.
	AffinityRemainders, AffinityRemainderErrors uint64
}

// portKey names one view of a Service port on the switch, each its own owner and group:
// the port itself (ClusterIP, and its other frontends when they share its endpoints) and,
// only when pods' external traffic goes to other endpoints than their ClusterIP traffic
// (internalTrafficPolicy Local on an externally accessible port), its external view.
type portKey struct {
	name     proxy.ServicePortName
	external bool
	// v6: the port's IPv6 view (its IPv6 ClusterIP and frontends, its IPv6 endpoints),
	// an owner and a group of its own beside the IPv4 one, as kube-proxy's per-family
	// proxiers keep a dual-stack Service's families apart.
	v6 bool
}

// familyKey is the key of name's view of family f (the view with its ClusterIP).
func familyKey(name proxy.ServicePortName, f proxy.Family) portKey {
	return portKey{name: name, v6: f == proxy.IPv6}
}

// family is k's IP family.
func (k portKey) family() proxy.Family {
	if k.v6 {
		return proxy.IPv6
	}
	return proxy.IPv4
}

// updateFamily is u's family (IPv4 for an Update without one: the node's own rebuilds).
func updateFamily(u *proxy.Update) proxy.Family {
	if u.Family == proxy.IPv6 {
		return proxy.IPv6
	}
	return proxy.IPv4
}

// lessKey orders views by name, IPv4 before IPv6, a port before its external view.
func lessKey(a, b portKey) bool {
	if x, y := a.name.String(), b.name.String(); x != y {
		return x < y
	}
	if a.v6 != b.v6 {
		return !a.v6
	}
	return !a.external && b.external
}

// affinityKey names one endpoint of one Service port view for its learned affinity flows.
type affinityKey struct {
	port portKey
	ep   string // "IP:port"
}

// serviceProxy is the node's proxy.Sink.
type serviceProxy struct {
	n    *Node
	opts ServiceOptions
	log  *slog.Logger

	mu       sync.Mutex // held by Sync (never concurrent with itself) and readers
	ids      map[portKey]uint32
	ports    map[portKey]flows.ServicePort
	verdicts map[portKey]proxy.Verdict
	// rec allocates and records the Service port ids (ids and parts) by recKey and
	// partRecKey; fresh are the keys it gave an id in the sync in progress.
	rec   *ownerIDs
	fresh []string
	// parts are the ids of the part groups (flows.ServicePort.GroupParts, group id
	// GroupIDMin + id) of views whose endpoints do not fit one group mod, allocated from
	// the Service port ids (rec).
	parts map[portKey][]uint32

	// states are the last states of the Service ports Sync was given (read only, shared
	// with the proxy's Tracker), to rebuild the NodePort frontends when the node
	// addresses change; nodeAddrs are the node addresses the switch's flows have.
	states    map[portKey]*proxy.ServicePortState // by familyKey
	nodeAddrs []net.IP

	// affIDs are the affinity ids (flows.ServiceEndpoint.AffinityID, owner kind
	// OwnerServiceAffinity) of the (Service port, endpoint) pairs of ports with session
	// affinity; affNext is the last one handed out (round robin over 1..2^32-1).
	affIDs  map[affinityKey]uint32
	affNext uint32

	// nPorts and nEndpoints are the counts ServiceStats reports (Service ports, external
	// views not counted; endpoints of every view), set under mu at the end of each sync's
	// update of ports and read without it: /metrics must not wait for a sync, which holds
	// mu until the switch confirms (9–35 s for the first sync of 10,000 Services, seen by
	// make bench-services as scrapes timing out).
	nPorts, nEndpoints atomic.Int64

	q                  *openflow.PacketInQueue
	frq                *openflow.FlowRemovedQueue
	remainders, remErr atomic.Uint64
	rejected, rejDrop  atomic.Uint64
	flushed, flushErrs atomic.Uint64
	stop, done         chan struct{}
	lbTable            flows.TableID
}

// ServicePortIDsFile is the file in NodeOptions.DataDir that records each Service port
// view's owner id (its select group is flows.GroupIDMin + id; 1..GroupIDMax-GroupIDMin)
// under its name, "namespace/name:port/PROTOCOL" (proxy.ServicePortName; " IPv6" appended
// for the port's IPv6 view on a dual-stack node, which has its own id and group, then
// " external" for the external view of a port split by internalTrafficPolicy Local, " part
// N" for its N-th part group, 0-based), with ServicePortIDsJournal beside it (the layout
// of the peers' record, ownerids.go):
//
//	{"version":1,"lastAllocated":2,"owners":{"default/web:http/TCP":1,"default/dns:dns/UDP":2}}
const ServicePortIDsFile = "service-port-ids.json"

// ServicePortIDsJournal is the journal of ServicePortIDsFile: one line per id given or
// freed since the snapshot ({"seq":3,"owner":"default/web:http/TCP","id":1,"lastAllocated":1},
// {"seq":4,"owner":"default/web:http/TCP","free":true}).
const ServicePortIDsJournal = "service-port-ids.journal"

// servicePortIDsWhat names the Service ports' record in errors.
const servicePortIDsWhat = "Service port owner ids"

// RecordedServicePortIDs returns the Service port owner ids recorded in data directory
// dataDir (ServicePortIDsFile with its journal applied) by view name, as a restarted
// daemon reads them: empty when there is none. Errors name the file.
func RecordedServicePortIDs(dataDir string) (map[string]uint32, error) {
	r, err := readOwnerIDs(servicePortIDsWhat, filepath.Join(dataDir, ServicePortIDsFile), ServicePortIDsJournal, false, flows.GroupIDMax-flows.GroupIDMin)
	if err != nil {
		return nil, err
	}
	return r.byKey, nil
}

// recKey is the name under which view k's id is recorded.
func (k portKey) recKey() string {
	r := k.name.String()
	if k.v6 {
		r += " IPv6"
	}
	if k.external {
		r += " external"
	}
	return r
}

// recKeyIPv6 reports whether record key k is an IPv6 view's (recKey: " IPv6" follows the
// Service port's name, which has no space).
func recKeyIPv6(k string) bool {
	_, rest, _ := strings.Cut(k, " ")
	return strings.HasPrefix(rest, "IPv6")
}

// partRecKey is the name under which the i-th (0-based) part group id of view k is
// recorded.
func (k portKey) partRecKey(i int) string { return fmt.Sprintf("%s part %d", k.recKey(), i) }

func newServiceProxy(n *Node, opts ServiceOptions) *serviceProxy {
	lb, _ := flows.StageTable(flows.StageServiceLB)
	log := n.log.With("component", "service-proxy")
	path := filepath.Join(n.opts.DataDir, ServicePortIDsFile)
	limit := uint32(flows.GroupIDMax - flows.GroupIDMin)
	rec, err := readOwnerIDs(servicePortIDsWhat, path, ServicePortIDsJournal, false, limit)
	if err != nil {
		log.Warn("Service port owner id record unreadable; it is replaced and Service ports get new ids (their flows and groups are replaced as at every restart)", "file", path, "err", err)
		rec = newOwnerIDs(servicePortIDsWhat, path, ServicePortIDsJournal, false, limit)
	}
	// Folded into a new snapshot at start, as the peers' and the policy rules' records
	// (a torn last journal line is then gone before anything is appended after it).
	if err := rec.save(); err != nil {
		log.Warn("Service port owner ids not recorded; a restarted daemon may give Service ports other ids (their flows and groups are replaced at every restart anyway)", "err", err)
		rec.broken = true
	}
	return &serviceProxy{n: n, opts: opts, log: log, rec: rec,
		ids: map[portKey]uint32{}, parts: map[portKey][]uint32{}, ports: map[portKey]flows.ServicePort{},
		verdicts: map[portKey]proxy.Verdict{}, affIDs: map[affinityKey]uint32{},
		states: map[portKey]*proxy.ServicePortState{},
		q:      openflow.NewPacketInQueue(ServiceRejectQueueSize), frq: openflow.NewFlowRemovedQueue(ServiceFlowRemovedQueueSize),
		stop: make(chan struct{}), done: make(chan struct{}),
		lbTable: lb}
}

func (s *serviceProxy) meter() flows.Meter {
	r := s.opts.RejectRate
	if r == 0 {
		r = ServiceRejectRate
	}
	return flows.Meter{ID: flows.ServiceRejectMeter, Rate: r, Burst: r}
}

// loadMeter makes the reject meter a desired meter of the pipeline owner (created before
// the flows that use it on every connection, audited).
func (s *serviceProxy) loadMeter(store *switchstate.Store) error {
	st, _ := store.OwnerState(flows.PipelineOwner)
	st.Meters = append(st.Meters, s.meter())
	if err := store.LoadState(flows.PipelineOwner, st); err != nil {
		m := s.meter()
		return fmt.Errorf("service proxy: reject meter %d (drop band %d packets/s): %w (fix: a rate of 1..1000000)", m.ID, m.Rate, err)
	}
	return nil
}

// Services returns the node's Service proxy sink (proxy.Sink), nil when ServiceOptions
// were not given to StartNode.
func (n *Node) Services() proxy.Sink {
	if n.services == nil {
		return nil
	}
	return n.services
}

// ServiceFamilies returns the IP families whose Services the node load-balances, one
// proxy.Tracker (and Runner) each into Services(): IPv4, and IPv6 on a dual-stack node
// (an IPv6 pod subnet); IPv6 alone on an IPv6-only node (no IPv4 pod subnet), as
// kube-proxy runs one proxier per family of the node. Nil when the Service proxy is off.
func (n *Node) ServiceFamilies() []proxy.Family {
	if n.services == nil {
		return nil
	}
	if n.config().PodSubnet == nil {
		return []proxy.Family{proxy.IPv6}
	}
	if n.config().PodSubnetIPv6 != nil {
		return []proxy.Family{proxy.IPv4, proxy.IPv6}
	}
	return []proxy.Family{proxy.IPv4}
}

// publishCounts sets nPorts and nEndpoints from ports; s.mu is held.
func (s *serviceProxy) publishCounts() {
	var ports, eps int64
	for key, sp := range s.ports {
		if !key.external { // an external view is the same Service port
			ports++
		}
		eps += int64(len(sp.Endpoints))
	}
	s.nPorts.Store(ports)
	s.nEndpoints.Store(eps)
}

// ServiceStats returns the Service proxy's counters, or nil when it is off. It never
// waits for a sync in progress: Ports and Endpoints are those of the last sync's update.
func (n *Node) ServiceStats() *ServiceStats {
	s := n.services
	if s == nil {
		return nil
	}
	st := &ServiceStats{Ports: int(s.nPorts.Load()), Endpoints: int(s.nEndpoints.Load())}
	st.Rejected, st.RejectDropped = s.rejected.Load(), s.rejDrop.Load()+s.q.Dropped()
	st.Flushed, st.FlushErrors = s.flushed.Load(), s.flushErrs.Load()
	st.AffinityRemainders, st.AffinityRemainderErrors = s.remainders.Load(), s.remErr.Load()+s.frq.Dropped()
	return st
}

// ServicePortInfo is one Service port as the node's switch holds it after the last
// confirmed sync (ofsdnctl services).
type ServicePortInfo struct {
	// Name is the Service port (namespace/name:port/PROTOCOL).
	Name proxy.ServicePortName
	// Port is what the switch was given: owner id, ClusterIP, protocol, port, the other
	// frontends (external IPs, load-balancer IPs, node addresses at the NodePort) and the
	// endpoints its group's buckets send to.
	Port flows.ServicePort
	// External marks the port's external view: its frontends other than the ClusterIP,
	// with their own group and verdict (proxy.ServicePortState.ExternalFromPods), given
	// only when they differ from the ClusterIP's (internalTrafficPolicy Local); its
	// Port.ClusterIP is nil.
	External bool
	// GroupID is the port's OpenFlow select group id (flows.ServiceGroupID: GroupIDMin +
	// ID), 0 when it has no endpoints (a flow that rejects or drops, no group) or is a
	// UDP port choosing by hash (flows.ServiceHashSelect: slot flows, no group).
	GroupID uint32
	// Verdict is what a new connection gets: Forward (to an endpoint), Reject (no
	// endpoint: TCP RST, ICMP port unreachable) or Drop (none usable under the traffic
	// policy, as kube-proxy drops).
	Verdict proxy.Verdict
}

// ServicePorts returns the Service ports on the switch sorted by name, or nil when the
// Service proxy is off.
func (n *Node) ServicePorts() []ServicePortInfo {
	s := n.services
	if s == nil {
		return nil
	}
	s.mu.Lock()
	out := make([]ServicePortInfo, 0, len(s.ports))
	for key, sp := range s.ports {
		sp.Endpoints = append([]flows.ServiceEndpoint(nil), sp.Endpoints...)
		sp.Frontends = append([]flows.ServiceFrontend(nil), sp.Frontends...)
		info := ServicePortInfo{Name: key.name, Port: sp, External: key.external, Verdict: s.verdicts[key]}
		if len(sp.Endpoints) > 0 && !flows.ServiceHashSelect(sp) {
			info.GroupID = flows.ServiceGroupID(sp)
		}
		out = append(out, info)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return lessKey(portKey{name: out[i].Name, external: out[i].External, v6: out[i].Port.IPv6()},
			portKey{name: out[j].Name, external: out[j].External, v6: out[j].Port.IPv6()})
	})
	return out
}

// ServiceConnections returns, per Service port owner id (ServicePortInfo.Port.ID), the
// packets its service_lb flow has matched since it was installed: the new connections the
// switch sent to the port's group, or refused or dropped without endpoints (OpenFlow
// 1.3.5 §7.3.5.2 flow statistics, one request for the table). Nil when the Service proxy
// is off. Errors: the OpenFlow connection is down (matching ErrOVSUnavailable), ctx's.
func (n *Node) ServiceConnections(ctx context.Context) (map[uint32]uint64, error) {
	s := n.services
	if s == nil {
		return nil, nil
	}
	sw := n.Switch()
	if sw == nil {
		return nil, fmt.Errorf("bridge %s: no OpenFlow connection yet", n.opts.Bridge)
	}
	stats, err := sw.DumpFlows(ctx, uint8(s.lbTable), 0, 0)
	if err != nil {
		return nil, ovsUnavailable(err)
	}
	out := map[uint32]uint64{}
	for _, st := range stats {
		if c := flows.Cookie(st.Cookie); c.Owner() == flows.OwnerService {
			out[c.OwnerID()] += st.PacketCount
		}
	}
	return out, nil
}

// alloc returns name's id, allocating one. s.mu is held.
func (s *serviceProxy) alloc(name portKey) (uint32, error) {
	if id, ok := s.ids[name]; ok {
		return id, nil
	}
	id, err := s.allocID(name, name.recKey())
	if err != nil {
		return 0, err
	}
	s.ids[name] = id
	return id, nil
}

// allocID hands out the Service port id recorded under key (view name's own or one of
// its part groups'): the one recorded, else the next one round robin, noted in s.fresh
// to be recorded before the sync's switch change. s.mu is held.
func (s *serviceProxy) allocID(name portKey, key string) (uint32, error) {
	id, fresh := s.rec.reserve(key, 0)
	if id == 0 {
		return 0, fmt.Errorf("service port %s: all %d Service port ids are in use (part groups of large Services count too)", name.name, s.rec.limit)
	}
	if fresh {
		s.fresh = append(s.fresh, key)
	}
	return id, nil
}

// freeIDs frees the ids recorded under keys (their flows and groups are gone from the
// switch), in memory and in the record; a record that cannot be written is logged (its
// next change writes a whole snapshot). s.mu is held.
func (s *serviceProxy) freeIDs(keys []string) {
	var freed []string
	for _, k := range keys {
		if s.rec.release(k) {
			freed = append(freed, k)
		}
	}
	if err := s.rec.record(freed...); err != nil {
		s.log.Warn("freed Service port ids not recorded; the next change rewrites the record", "err", err)
	}
}

// groupParts gives sp (view key) the part group ids its endpoints need
// (flows.ServiceGroupParts): those key holds first, then new ones (allocID). It returns
// the ids key is to hold once the sync is confirmed. s.mu is held.
func (s *serviceProxy) groupParts(key portKey, sp *flows.ServicePort) ([]uint32, error) {
	need := flows.ServiceGroupParts(*sp)
	ids := append([]uint32(nil), s.parts[key]...)
	for len(ids) < need {
		id, err := s.allocID(key, key.partRecKey(len(ids)))
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	sp.GroupParts = nil
	for _, id := range ids[:need] {
		sp.GroupParts = append(sp.GroupParts, flows.GroupIDMin+id) // as flows.ServiceGroupID
	}
	return ids[:need], nil
}

// servicePortViews returns the switch's views of st for this node's pods (IPv4): the
// port with its ClusterIP (Internal's verdict) and, when ExternalFromPods chooses the
// same endpoints, its other frontends too: the external IPs and load-balancer IPs at the
// port (with loadBalancerSourceRanges) and, with a NodePort, every address of nodeAddrs
// at it (kube-proxy's nftables proxier takes pods' traffic to all of them as external
// traffic and short-circuits it to the Cluster endpoints, whatever
// externalTrafficPolicy). When they differ (internalTrafficPolicy Local), the other
// frontends are a second view, external, with ExternalFromPods' verdict. Ids come from
// id. No view when the port has no ClusterIP of st's family.
//
// Each family's views are built from that family's state (one proxy.Tracker per family,
// kube-proxy's per-family proxiers): its ClusterIP, its external and load-balancer IPs,
// its source ranges, the node addresses of its family, its endpoints only.
func servicePortViews(st *proxy.ServicePortState, nodeAddrs []net.IP, id func(portKey) (uint32, error)) ([]portView, error) {
	fam := st.Family
	if fam != proxy.IPv6 {
		fam = proxy.IPv4
	}
	v6 := fam == proxy.IPv6
	vip := st.Port.ClusterIP(fam)
	if !vip.IsValid() {
		return nil, nil
	}
	bits := 32
	if v6 {
		bits = 128
	}
	proto := map[proxy.Protocol]uint8{proxy.ProtocolTCP: flows.IPProtoTCP, proxy.ProtocolUDP: flows.IPProtoUDP, proxy.ProtocolSCTP: flows.IPProtoSCTP}[st.Port.Name.Protocol]
	var ranges []*net.IPNet
	for _, r := range st.Port.LoadBalancerSourceRanges {
		if fam.Has(r.Addr()) {
			ranges = append(ranges, &net.IPNet{IP: net.IP(r.Masked().Addr().AsSlice()), Mask: net.CIDRMask(r.Bits(), bits)})
		}
	}
	if len(st.Port.LoadBalancerSourceRanges) > 0 && len(ranges) == 0 {
		// Only ranges of the other family: no client of this one may reach the
		// load-balancer IPs (kube-proxy's firewall chain of this family lets none through
		// either); an unmatchable range (the unspecified address alone) says so.
		zero := net.IPv4(0, 0, 0, 0).To4()
		if v6 {
			zero = net.IPv6unspecified
		}
		ranges = []*net.IPNet{{IP: zero, Mask: net.CIDRMask(bits, bits)}}
	}
	var fes []flows.ServiceFrontend
	for _, a := range st.Port.ExternalIPs {
		if fam.Has(a) {
			fes = append(fes, flows.ServiceFrontend{IP: net.IP(a.AsSlice()), Port: st.Port.Port})
		}
	}
	for _, a := range st.Port.LoadBalancerIPs {
		if fam.Has(a) {
			fes = append(fes, flows.ServiceFrontend{IP: net.IP(a.AsSlice()), Port: st.Port.Port, SourceRanges: ranges})
		}
	}
	if st.Port.NodePort != 0 {
		for _, a := range nodeAddrs {
			if (a.To4() == nil) == v6 {
				fes = append(fes, flows.ServiceFrontend{IP: a, Port: st.Port.NodePort, NodePort: true})
			}
		}
	}
	build := func(key portKey, ch proxy.Choice, clusterIP net.IP, fes []flows.ServiceFrontend) (portView, error) {
		id, err := id(key)
		if err != nil {
			return portView{}, err
		}
		sp := flows.ServicePort{ID: id, ClusterIP: clusterIP, Frontends: fes, Proto: proto, Port: st.Port.Port,
			AffinitySeconds: st.Port.AffinitySeconds}
		if ch.Verdict == proxy.Forward {
			for _, ep := range ch.Endpoints {
				if fam.Has(ep.Addr) {
					sp.Endpoints = append(sp.Endpoints, flows.ServiceEndpoint{IP: net.IP(ep.Addr.AsSlice()), Port: ep.Port, Weight: 1})
				}
			}
			if len(sp.Endpoints) == 0 {
				ch.Verdict = proxy.Reject
			}
		}
		return portView{key: key, sp: sp, verdict: ch.Verdict}, nil
	}
	in, ext := st.Internal(), st.ExternalFromPods()
	if len(fes) == 0 || sameChoice(in, ext) {
		v, err := build(portKey{name: st.Port.Name, v6: v6}, in, net.IP(vip.AsSlice()), fes)
		return []portView{v}, err
	}
	v, err := build(portKey{name: st.Port.Name, v6: v6}, in, net.IP(vip.AsSlice()), nil)
	if err != nil {
		return nil, err
	}
	e, err := build(portKey{name: st.Port.Name, external: true, v6: v6}, ext, nil, fes)
	return []portView{v, e}, err
}

// portView is one view of a Service port: its key, what the switch is given, its verdict.
type portView struct {
	key     portKey
	sp      flows.ServicePort
	verdict proxy.Verdict
}

// sameChoice reports whether a and b send new connections the same way.
func sameChoice(a, b proxy.Choice) bool {
	if a.Verdict != b.Verdict || len(a.Endpoints) != len(b.Endpoints) {
		return false
	}
	for i := range a.Endpoints {
		if a.Endpoints[i].AddrPort() != b.Endpoints[i].AddrPort() {
			return false
		}
	}
	return true
}

// nodeAddresses returns the addresses pods reach NodePorts at, in both families: this
// node's IP and every peer's (each Node's InternalIP of the underlay's family, as the
// topology gives them) and, beside an IPv4 one, the node's IPv6 address (its IPv6
// InternalIP: OverlayOptions.NodeIPv6, flows.Peer.NodeIPv6): kube-proxy's nftables
// default, --nodeport-addresses primary, the node's primary IP of each family. Sorted
// (IPv4 first), once each. None on a node without an overlay (no node IP known).
func (n *Node) nodeAddresses() []net.IP {
	var out []net.IP
	seen := map[string]bool{}
	add := func(ip net.IP) {
		if ip4 := ip.To4(); ip4 != nil {
			ip = ip4
		} else if len(ip) != net.IPv6len {
			return
		}
		if !ip.IsUnspecified() && !seen[ip.String()] {
			seen[ip.String()] = true
			out = append(out, ip)
		}
	}
	add(n.config().NodeIP)
	if n.overlay != nil {
		add(n.overlay.NodeIPv6())
		for _, p := range n.overlay.Peers() {
			add(p.NodeIP)
			add(p.NodeIPv6)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) < len(out[j])
		}
		return string(out[i]) < string(out[j])
	})
	return out
}

// affinityID returns the affinity id of endpoint ep of Service port name, allocating
// one (never 0, never one in use). s.mu is held.
func (s *serviceProxy) affinityID(name portKey, ep flows.ServiceEndpoint) uint32 {
	k := affinityKey{port: name, ep: fmt.Sprintf("%s:%d", ep.IP, ep.Port)}
	if id, ok := s.affIDs[k]; ok {
		return id
	}
	used := map[uint32]bool{}
	for _, id := range s.affIDs {
		used[id] = true
	}
	for {
		s.affNext++
		if s.affNext != 0 && !used[s.affNext] {
			break
		}
	}
	s.affIDs[k] = s.affNext
	return s.affNext
}

// staleAffinity returns the affinity ids of old's endpoints whose learned flows must go
// when old becomes now (nil now: the port is gone): every endpoint's when the affinity
// timeout changed or affinity was turned off (kube-proxy starts over then too), else
// those of the endpoints no longer selected.
func staleAffinity(old flows.ServicePort, now *flows.ServicePort) []uint32 {
	if old.AffinitySeconds == 0 {
		return nil
	}
	keep := map[uint32]bool{}
	if now != nil && now.AffinitySeconds == old.AffinitySeconds {
		for _, ep := range now.Endpoints {
			keep[ep.AffinityID] = true
		}
	}
	var out []uint32
	for _, ep := range old.Endpoints {
		if !keep[ep.AffinityID] {
			out = append(out, ep.AffinityID)
		}
	}
	return out
}

// Sync realizes u on the switch (proxy.Sink): every changed Service port's group and
// flows (ClusterIP and its other frontends), every deleted one's removal, one switch
// change confirmed before it returns; then the stale UDP/SCTP conntrack entries are
// flushed (failures logged and counted, not returned: the change itself is on the
// switch). When the node addresses changed since the last sync (a Node added or
// removed), every port with a NodePort is rebuilt with them in the same change.
func (s *serviceProxy) Sync(ctx context.Context, u *proxy.Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sync(ctx, u)
}

// nodeAddrsChanged rebuilds the NodePort frontends of every Service port when the node
// addresses differ from those on the switch (a peer added, updated or removed), retrying
// while the switch is unreachable until ctx ends; another error is logged (the next Sync
// rebuilds them).
func (s *serviceProxy) nodeAddrsChanged(ctx context.Context) {
	err := retryUnavailable(ctx, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if equalIPs(s.nodeAddrs, s.n.nodeAddresses()) {
			return nil
		}
		return s.sync(ctx, &proxy.Update{})
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("NodePort frontends not rebuilt for the new node addresses; the next Service sync does it", "err", err)
	}
}

func equalIPs(a, b []net.IP) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// sync is Sync; s.mu is held.
func (s *serviceProxy) sync(ctx context.Context, u *proxy.Update) error {
	cfg := s.n.config()
	addrs := s.n.nodeAddresses()
	changed := u.Changed
	fam := updateFamily(u)
	if !equalIPs(addrs, s.nodeAddrs) {
		// Every port with a NodePort gets the new node addresses (those in u.Changed
		// already do), in both families.
		in := map[portKey]bool{}
		for _, st := range u.Changed {
			in[familyKey(st.Port.Name, fam)] = true
		}
		changed = append([]*proxy.ServicePortState(nil), u.Changed...)
		var more []*proxy.ServicePortState
		for key, st := range s.states {
			if !in[key] && st.Port.NodePort != 0 && !(key.family() == fam && slices.Contains(u.Deleted, key.name)) {
				more = append(more, st)
			}
		}
		sort.Slice(more, func(i, j int) bool {
			return lessKey(familyKey(more[i].Port.Name, more[i].Family), familyKey(more[j].Port.Name, more[j].Family))
		})
		changed = append(changed, more...)
	}
	want := map[portKey]bool{}
	var ups []OwnerUpdate
	built := map[portKey]flows.ServicePort{}
	verdicts := map[portKey]proxy.Verdict{}
	newIDs := map[portKey]bool{}
	parts := map[portKey][]uint32{} // the part group ids each built view keeps
	var errs []error
	s.fresh = s.fresh[:0]
	id := func(key portKey) (uint32, error) {
		_, had := s.ids[key]
		id, err := s.alloc(key)
		if err == nil && !had {
			newIDs[key] = true
		}
		return id, err
	}
	for _, st := range changed {
		name := st.Port.Name
		// A view not built now is gone (a port without IPv4 ClusterIP, an external
		// view no longer needed).
		v6 := st.Family == proxy.IPv6
		want[portKey{name: name, v6: v6}], want[portKey{name: name, external: true, v6: v6}] = false, false
		views, err := servicePortViews(st, addrs, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, v := range views {
			key, sp, verdict := v.key, v.sp, v.verdict
			want[key] = true
			if sp.AffinitySeconds != 0 {
				if old, ok := s.ports[key]; ok && old.AffinitySeconds != sp.AffinitySeconds {
					// A new timeout starts over: new ids, so the old learned flows (deleted
					// below) and the new ones never share a cookie.
					for _, ep := range old.Endpoints {
						delete(s.affIDs, affinityKey{port: key, ep: fmt.Sprintf("%s:%d", ep.IP, ep.Port)})
					}
				}
				for i := range sp.Endpoints {
					sp.Endpoints[i].AffinityID = s.affinityID(key, sp.Endpoints[i])
				}
			}
			keep, err := s.groupParts(key, &sp)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			parts[key] = keep
			if err := sp.Validate(); err != nil {
				errs = append(errs, err)
				continue
			}
			fs, gs := flows.ServicePortFlows(cfg, sp)
			if verdict == proxy.Drop {
				for i := range fs {
					fs[i].Actions, fs[i].Meter = nil, 0
				}
				gs, sp.Endpoints, sp.GroupParts = nil, nil, nil
				parts[key] = nil
			}
			ups = append(ups, OwnerUpdate{Owner: flows.ServicePortOwner(sp), Replace: true, Flows: fs, Groups: gs})
			built[key], verdicts[key] = sp, verdict
		}
	}
	var gone []portKey
	for _, name := range u.Deleted {
		v6 := fam == proxy.IPv6
		for _, key := range []portKey{{name: name, v6: v6}, {name: name, external: true, v6: v6}} {
			if !want[key] {
				gone = append(gone, key)
			}
		}
	}
	if u.Full {
		// A Full update replaces its own family's views only (the other family's
		// tracker feeds the same sink).
		for key := range s.ids {
			if !want[key] && key.family() == fam {
				gone = append(gone, key)
			}
		}
	}
	for key, ok := range want {
		if !ok {
			gone = append(gone, key)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return lessKey(gone[i], gone[j]) })
	var freed []string // the record keys this sync frees once confirmed
	seen := map[portKey]bool{}
	for _, key := range gone {
		id, ok := s.ids[key]
		if !ok || seen[key] {
			continue
		}
		seen[key] = true
		ups = append(ups, OwnerUpdate{Owner: flows.Owner{Kind: flows.OwnerService, ID: id}, Replace: true})
		freed = append(freed, key.recKey())
	}
	recorded := false
	if len(errs) == 0 && len(s.fresh) > 0 {
		// New ids are recorded before any flow or group carries them. The ids are kept
		// for operators, never needed to clean up: a record that cannot be written is a
		// warning, not a failed sync (as the policy rules' record).
		if err := s.rec.record(s.fresh...); err != nil {
			s.log.Warn("new Service port ids not recorded; a restarted daemon may give these ports other ids", "err", err)
		} else {
			recorded = true
		}
	}
	if len(errs) == 0 && len(ups) > 0 {
		if err := s.n.store.Update(ctx, ups); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Nothing of u counts as applied: new ids go back (the next attempt allocates
		// again), the switch keeps what it had.
		for key := range newIDs {
			delete(s.ids, key)
		}
		for _, k := range s.fresh {
			s.rec.release(k)
		}
		if recorded {
			if err := s.rec.record(s.fresh...); err != nil {
				s.log.Warn("Service port ids of a failed sync not freed in the record; the next change rewrites the record", "err", err)
			}
		}
		s.fresh = s.fresh[:0]
		return fmt.Errorf("service proxy: %w", errors.Join(errs...))
	}
	s.fresh = s.fresh[:0]
	s.nodeAddrs = addrs
	if u.Full {
		for key := range s.states {
			if key.family() == fam {
				delete(s.states, key)
			}
		}
	}
	for _, st := range u.Changed {
		s.states[familyKey(st.Port.Name, fam)] = st
	}
	for _, name := range u.Deleted {
		delete(s.states, familyKey(name, fam))
	}
	// Learned affinity flows of endpoints that left (or of a changed or removed
	// affinity) go after the switch dropped the flows that learn them.
	var staleAff []uint32
	var staleAffPorts []flows.ServicePort // every learned flow of these ports goes
	for key, sp := range built {
		if old, ok := s.ports[key]; ok {
			staleAff = append(staleAff, staleAffinity(old, &sp)...)
			// (A lost frontend loses nothing: the learned flows key on the port, whatever
			// frontend the client came through, as kube-proxy's affinity.)
			if old.AffinitySeconds != 0 && old.AffinitySeconds != sp.AffinitySeconds {
				staleAffPorts = append(staleAffPorts, old)
			}
		}
		s.ports[key], s.verdicts[key] = sp, verdicts[key]
		// Part groups no longer needed were deleted with this sync: their ids are free.
		keep := parts[key]
		for i := len(keep); i < len(s.parts[key]); i++ {
			freed = append(freed, key.partRecKey(i))
		}
		if len(keep) == 0 {
			delete(s.parts, key)
		} else {
			s.parts[key] = keep
		}
	}
	for _, key := range gone {
		if seen[key] {
			if old, ok := s.ports[key]; ok {
				staleAff = append(staleAff, staleAffinity(old, nil)...)
				if old.AffinitySeconds != 0 {
					staleAffPorts = append(staleAffPorts, old)
				}
			}
			delete(s.ids, key)
			delete(s.ports, key)
			delete(s.verdicts, key)
			for i := range s.parts[key] {
				freed = append(freed, key.partRecKey(i))
			}
			delete(s.parts, key)
		}
	}
	if u.Full {
		// Service ports gone while the daemon was down (or of a failed sync's record
		// write) still hold their recorded ids: every key no view holds now is freed.
		live := map[string]bool{}
		for key := range s.ids {
			live[key.recKey()] = true
		}
		for key, ps := range s.parts {
			for i := range ps {
				live[key.partRecKey(i)] = true
			}
		}
		for k := range s.rec.byKey {
			// Only this family's: the other family's first Full may be yet to come.
			if !live[k] && recKeyIPv6(k) == (fam == proxy.IPv6) {
				freed = append(freed, k)
			}
		}
	}
	s.freeIDs(freed)
	s.publishCounts()
	if len(ups) > 0 && s.opts.PurgeDatapath != nil {
		if err := s.opts.PurgeDatapath(ctx); err != nil {
			s.log.Warn("datapath flows not purged after a Service change; the revalidators update them instead", "err", err)
		}
	}
	// After the purge: a datapath flow that ran a learn action keeps it in its
	// translation cache, and ovs-vswitchd re-adds a deleted learned flow from there
	// when it pushes that datapath flow's statistics (ofproto_flow_mod_learn_refresh);
	// the purge drops those caches, and a second one after the delete drops any made in
	// between.
	if s.forgetAffinity(ctx, cfg, staleAff, staleAffPorts) && s.opts.PurgeDatapath != nil {
		if err := s.opts.PurgeDatapath(ctx); err != nil {
			s.log.Warn("datapath flows not purged after deleting learned affinity flows; a cached datapath flow may re-add one", "err", err)
		}
	}
	s.flushStale(ctx, u.Stale)
	return nil
}

// forgetAffinity deletes the learned affinity flows of ids from the switch (by owner
// cookie, kind OwnerServiceAffinity) and every learned flow of ports (a changed or
// removed affinity: flows.AffinityPortDelete), frees the ids no live port still uses and
// reports whether it deleted anything. A
// failure is logged: the endpoint's flow in service_endpoint is gone already, so a
// remaining learned flow only sends its client to the select group (and is relearned).
func (s *serviceProxy) forgetAffinity(ctx context.Context, cfg flows.NodeConfig, ids []uint32, ports []flows.ServicePort) bool {
	if len(ids) == 0 && len(ports) == 0 {
		return false
	}
	if len(ports) > 0 {
		var ops []openflow.FlowModOp
		for _, sp := range ports {
			for _, fm := range flows.AffinityPortDelete(cfg, sp) {
				ops = append(ops, openflow.FlowModOp{Mod: fm, Name: fmt.Sprintf("service port %v: delete its learned affinity flows", sp)})
			}
		}
		c, err := s.n.sw.Conn()
		if err == nil {
			err = c.Apply(ctx, ops)
		}
		if err != nil {
			s.log.Warn("learned session-affinity flows of changed Service ports not deleted; they time out instead", "ports", len(ports), "err", err)
		}
	}
	live := map[uint32]bool{}
	for _, sp := range s.ports {
		for _, ep := range sp.Endpoints {
			if sp.AffinitySeconds != 0 {
				live[ep.AffinityID] = true
			}
		}
	}
	for _, id := range ids {
		if err := s.n.store.DeleteOwner(ctx, flows.Owner{Kind: flows.OwnerServiceAffinity, ID: id}); err != nil {
			s.log.Warn("learned session-affinity flows not deleted; their clients fall back to the select group", "affinity_id", id, "err", err)
			continue
		}
		s.log.Debug("learned session-affinity flows deleted", "affinity_id", id)
	}
	for k, id := range s.affIDs {
		if !live[id] {
			delete(s.affIDs, k)
		}
	}
	return true
}

// flushStale flushes each stale entry set from ofsdn's conntrack zone: per frontend (and,
// with a NodePort, per node address at it), the entries to it whose reply source is the
// stale endpoint. s.mu is held.
func (s *serviceProxy) flushStale(ctx context.Context, stale []proxy.StaleConntrack) {
	if s.opts.FlushConntrack == nil {
		return
	}
	for _, sc := range stale {
		fam := proxy.FamilyOf(sc.Endpoint.Addr())
		if fam == 0 {
			continue
		}
		proto := map[proxy.Protocol]uint8{proxy.ProtocolUDP: flows.IPProtoUDP, proxy.ProtocolSCTP: flows.IPProtoSCTP}[sc.Protocol]
		if proto == 0 {
			continue
		}
		// ovs-dpctl(8) ct tuples: ct_nw_src/ct_nw_dst for IPv4, ct_ipv6_src/ct_ipv6_dst
		// for IPv6 (the same zone holds both families, keyed apart).
		src, dst := "ct_nw_src", "ct_nw_dst"
		if fam == proxy.IPv6 {
			src, dst = "ct_ipv6_src", "ct_ipv6_dst"
		}
		reply := fmt.Sprintf("%s=%s,ct_nw_proto=%d,ct_tp_src=%d", src, sc.Endpoint.Addr(), proto, sc.Endpoint.Port())
		fes := sc.Frontends
		if sc.NodePort != 0 {
			// Pods reached the NodePort at the node addresses (those the switch has now:
			// a removed node's entries to a live endpoint are not stale).
			fes = slices.Clone(fes)
			for _, a := range s.nodeAddrs {
				if ap, ok := netip.AddrFromSlice(a); ok && fam.Has(ap.Unmap()) {
					fes = append(fes, netip.AddrPortFrom(ap.Unmap(), sc.NodePort))
				}
			}
		}
		for _, fe := range fes {
			if !fam.Has(fe.Addr()) {
				continue
			}
			orig := fmt.Sprintf("%s=%s,ct_nw_proto=%d,ct_tp_dst=%d", dst, fe.Addr(), proto, fe.Port())
			if err := s.opts.FlushConntrack(ctx, flows.ConntrackZone, orig, reply); err != nil {
				s.flushErrs.Add(1)
				s.log.Warn("stale conntrack entries not flushed; they time out instead", "service", sc.Service.String(),
					"frontend", fe.String(), "endpoint", sc.Endpoint.String(), "err", err)
				continue
			}
			s.flushed.Add(1)
			s.log.Debug("stale conntrack entries flushed", "service", sc.Service.String(), "frontend", fe.String(), "endpoint", sc.Endpoint.String())
		}
	}
}

// run answers rejected packets until close; it also hands the deny log its packet-ins
// (one queue per connection: StartNode).
func (s *serviceProxy) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case p := <-s.q.C():
			switch {
			case flows.TableID(p.TableID) == s.lbTable:
				s.handle(p)
			case s.n.denyLog != nil: // the deny log's packet-ins share the queue
				s.n.denyLog.handle(p)
			}
		case f := <-s.frq.C():
			s.remainder(f)
		}
	}
}

func (s *serviceProxy) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// wantsFlowRemoved is the OpenFlow connection's flow-removed filter
// (openflow.Options.FlowRemovedFilter): only what remainder may act on, learned affinity
// flows of service_affinity removed at their idle timeout, is queued; the deletes of the
// daemon's own changes and of a reconnection are not.
func wantsFlowRemoved(f openflow.FlowRemoved) bool {
	t, _ := flows.StageTable(flows.StageServiceAffinity)
	return f.Reason == openflow.FlowRemovedIdleTimeout && flows.TableID(f.TableID) == t &&
		flows.Cookie(f.Cookie).Owner() == flows.OwnerServiceAffinity
}

// remainder carries on the session affinity of a learned flow the switch removed (f):
// when it is a learned flow of a live Service port and endpoint of this run that expired
// at the learn limit while the port's timeout is longer (flows.AffinityRemainder), the
// remainder flow goes to the switch (an add: it replaces an earlier remainder of the same
// client and frontend). s.mu is held from the look-up to the switch's answer, so a Sync
// that removes the endpoint or the port, or changes its timeout, comes either before
// (nothing added: the id is no longer the port's) or after (its delete by cookie or by
// port takes the remainder too). Everything else is ignored: deletes, other tables and
// owners, the remainder flows' own expiry (they ask for no message anyway). A failure is
// logged and counted: the client's affinity then ends at the limit.
func (s *serviceProxy) remainder(f openflow.FlowRemoved) {
	if !wantsFlowRemoved(f) {
		return
	}
	t, _ := flows.StageTable(flows.StageServiceAffinity)
	cookie := flows.Cookie(f.Cookie)
	r := flows.AffinityRemoved{Table: t, Priority: f.Priority, Cookie: cookie, IdleTimeout: f.IdleTimeout, IdleExpired: true}
	if v, ok := f.Field(oxmOpenFlowBasic, oxmIPv4Src); ok && len(v) == 4 {
		r.Client = net.IP(v)
	} else if v, ok := f.Field(oxmOpenFlowBasic, oxmIPv6Src); ok && len(v) == 16 {
		r.Client = net.IP(v)
	}
	if v, ok := f.Field(oxmNXM1, oxmReg5); ok && len(v) == 4 {
		r.PortID = binary.BigEndian.Uint32(v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg := s.n.config()
	var rf flows.AffinityRemainderFlow
	var port flows.ServicePort
	found := false
	for _, sp := range s.ports { // the port whose id the flow names (AffinityRemainder checks it)
		if rf, found = flows.AffinityRemainder(cfg, sp, r); found {
			port = sp
			break
		}
	}
	if !found {
		s.log.Debug("learned session-affinity flow removed, no remainder", "cookie", fmt.Sprintf("%#x", f.Cookie),
			"priority", f.Priority, "idle_timeout", f.IdleTimeout, "client", r.Client, "service_port_id", r.PortID)
		return
	}
	ctx, cancel := context.WithTimeout(s.n.runCtx, UndoTimeout)
	defer cancel()
	c, err := s.n.sw.Conn()
	if err == nil {
		err = c.Apply(ctx, []openflow.FlowModOp{{Mod: rf.FlowMod(), Name: fmt.Sprintf("service port %v: session-affinity remainder of client %s: %s", port, r.Client, rf)}})
	}
	if err != nil {
		s.remErr.Add(1)
		s.log.Warn("session-affinity remainder flow not added; the client's affinity ends now, before its timeout", "service", port.String(),
			"client", r.Client, "err", err)
		return
	}
	s.remainders.Add(1)
	s.log.Debug("session-affinity remainder flow added", "service", port.String(), "client", r.Client, "idle_timeout", rf.IdleTimeout)
}

// The fields of a learned affinity flow's match that name its client and Service port:
// OXM ipv4_src (OpenFlow 1.3.5 §7.2.3.7) and Nicira's reg5 (class NXM_1, field 5:
// flows.ServicePortField).
const (
	oxmOpenFlowBasic = 0x8000
	oxmIPv4Src       = 11
	oxmIPv6Src       = 26 // OXM_OF_IPV6_SRC, an IPv6 affinity flow's client
	oxmNXM1          = 0x0001
	oxmReg5          = 5
)

// handle answers one packet-in of a no-endpoint flow.
func (s *serviceProxy) handle(p openflow.PacketIn) {
	frame, err := rejectFrame(p.Data)
	if err != nil || p.InPort == 0 {
		s.rejDrop.Add(1)
		s.log.Debug("service proxy: rejected packet not answered", "in_port", p.InPort, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(s.n.runCtx, UndoTimeout)
	defer cancel()
	if err := s.n.sw.PacketOut(ctx, p.InPort, frame); err != nil {
		s.rejDrop.Add(1)
		s.log.Debug("service proxy: reject not sent", "in_port", p.InPort, "err", err)
		return
	}
	s.rejected.Add(1)
}

// rejectFrame builds the answer to a packet refused for want of endpoints: for a TCP SYN
// a RST+ACK (RFC 9293 §3.10.7.1: seq 0, ack = SYN's seq + 1), for UDP an ICMP port
// unreachable (RFC 792, RFC 1122 §3.2.2.1) quoting its IPv4 header and first 8 bytes;
// from the packet's destination (the ClusterIP:port) to its source, Ethernet addresses
// swapped. Anything else is an error (not answered).
func rejectFrame(in []byte) ([]byte, error) {
	if len(in) >= 14 && binary.BigEndian.Uint16(in[12:]) == 0x86dd {
		return rejectFrameIPv6(in)
	}
	if len(in) < 14+20 || binary.BigEndian.Uint16(in[12:]) != 0x0800 {
		return nil, errors.New("not an untagged IPv4 or IPv6 frame")
	}
	ip := in[14:]
	ihl := int(ip[0]&0xf) * 4
	if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+8 {
		return nil, errors.New("IPv4 header or transport header cut short")
	}
	if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
		return nil, errors.New("a non-first fragment")
	}
	l4 := ip[ihl:]
	var src, dst [4]byte
	copy(src[:], ip[12:16])
	copy(dst[:], ip[16:20])
	eth := replyEthernet(in, 0x0800)
	var proto uint8
	var payload []byte
	switch ip[9] {
	case ipProtoTCP:
		t, err := tcpRSTFor(l4, func(seg []byte) uint16 { return l4Checksum(dst, src, ipProtoTCP, seg) })
		if err != nil {
			return nil, err
		}
		proto, payload = ipProtoTCP, t
	case ipProtoUDP:
		proto = ipProtoICMP
		quote := ip[:ihl+8]
		m := make([]byte, 8+len(quote))
		m[0], m[1] = 3, 3 // destination unreachable, port unreachable
		copy(m[8:], quote)
		binary.BigEndian.PutUint16(m[2:], checksum(m, 0))
		payload = m
	default:
		return nil, fmt.Errorf("IP protocol %d: only TCP SYNs and UDP are answered", ip[9])
	}
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
	h[8] = 64
	h[9] = proto
	copy(h[12:16], dst[:])
	copy(h[16:20], src[:])
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
	return append(append(eth, h...), payload...), nil
}

// replyEthernet is the Ethernet header of the answer to frame in: its addresses swapped
// (to the client's MAC, from the MAC it sent to: the gateway's), EtherType etherType.
func replyEthernet(in []byte, etherType uint16) []byte {
	eth := make([]byte, 14)
	copy(eth[0:6], in[6:12])
	copy(eth[6:12], in[0:6])
	binary.BigEndian.PutUint16(eth[12:], etherType)
	return eth
}

// tcpRSTFor returns the TCP header answering the SYN whose TCP header is l4 with a
// RST+ACK (RFC 9293 §3.10.7.1: seq 0, ack = the SYN's seq + 1, ports swapped: from the
// Service port to the client's), its checksum by sum (over the reply's pseudo-header,
// IPv4 or IPv6). Errors: l4 cut short, or not a SYN (a SYN with RST or ACK is not one).
func tcpRSTFor(l4 []byte, sum func(seg []byte) uint16) ([]byte, error) {
	if len(l4) < 14 {
		return nil, errors.New("TCP header cut short")
	}
	if flags := l4[13]; flags&0x02 == 0 || flags&0x14 != 0 {
		return nil, fmt.Errorf("TCP flags %#02x: not a SYN", flags)
	}
	t := make([]byte, 20)
	copy(t[0:2], l4[2:4])
	copy(t[2:4], l4[0:2])
	binary.BigEndian.PutUint32(t[8:], binary.BigEndian.Uint32(l4[4:])+1)
	t[12] = 5 << 4
	t[13] = 0x14 // RST, ACK
	binary.BigEndian.PutUint16(t[16:], sum(t))
	return t, nil
}

// checksum is the Internet checksum (RFC 1071) of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// l4Checksum is the TCP/UDP checksum over the IPv4 pseudo-header and seg.
func l4Checksum(src, dst [4]byte, proto uint8, seg []byte) uint16 {
	var sum uint32
	sum += uint32(binary.BigEndian.Uint16(src[0:])) + uint32(binary.BigEndian.Uint16(src[2:]))
	sum += uint32(binary.BigEndian.Uint16(dst[0:])) + uint32(binary.BigEndian.Uint16(dst[2:]))
	sum += uint32(proto) + uint32(len(seg))
	return checksum(seg, sum)
}

// ipProtoICMPv6 is ICMPv6's next header value (RFC 4443).
const ipProtoICMPv6 = 58

// rejectFrameIPv6 is rejectFrame for IPv6 (an IPv6 Service port's no-endpoint flow):
// for a TCP SYN a RST+ACK, for UDP an ICMPv6 destination unreachable, code 4 port
// unreachable (RFC 4443 §3.1; kube-proxy's nftables proxier rejects IPv6 so, "reject
// with icmpv6 type port-unreachable"), quoting as much of the packet as the packet-in
// carried (at most flows.ServiceRejectMaxLen bytes of it, well within the minimum MTU);
// hop limit 64. Only a packet whose next header is TCP or UDP (no extension header) is
// answered.
func rejectFrameIPv6(in []byte) ([]byte, error) {
	if len(in) < 14+40+8 {
		return nil, errors.New("IPv6 header or transport header cut short")
	}
	ip := in[14:]
	if ip[0]>>4 != 6 {
		return nil, errors.New("IPv6 frame without an IPv6 header")
	}
	l4 := ip[40:]
	var src, dst [16]byte
	copy(src[:], ip[8:24])
	copy(dst[:], ip[24:40])
	eth := replyEthernet(in, 0x86dd)
	var next uint8
	var payload []byte
	switch ip[6] {
	case ipProtoTCP:
		t, err := tcpRSTFor(l4, func(seg []byte) uint16 { return l4ChecksumIPv6(dst, src, ipProtoTCP, seg) })
		if err != nil {
			return nil, err
		}
		next, payload = ipProtoTCP, t
	case ipProtoUDP:
		next = ipProtoICMPv6
		m := make([]byte, 8+len(ip))
		m[0], m[1] = 1, 4 // destination unreachable, port unreachable
		copy(m[8:], ip)
		binary.BigEndian.PutUint16(m[2:], l4ChecksumIPv6(dst, src, ipProtoICMPv6, m))
		payload = m
	default:
		return nil, fmt.Errorf("IPv6 next header %d: only TCP SYNs and UDP are answered", ip[6])
	}
	h := make([]byte, 40)
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = next
	h[7] = 64
	copy(h[8:24], dst[:])
	copy(h[24:40], src[:])
	return append(append(eth, h...), payload...), nil
}

// l4ChecksumIPv6 is the TCP/UDP/ICMPv6 checksum over the IPv6 pseudo-header (RFC 8200
// §8.1) and seg.
func l4ChecksumIPv6(src, dst [16]byte, next uint8, seg []byte) uint16 {
	var sum uint32
	for i := 0; i < 16; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(src[i:])) + uint32(binary.BigEndian.Uint16(dst[i:]))
	}
	sum += uint32(len(seg)) + uint32(next)
	return checksum(seg, sum)
}
