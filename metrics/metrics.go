// Package metrics is the ofsdn-node daemon's Prometheus instrumentation (client_golang) and
// its HTTP listener: /metrics, /healthz and /readyz on one address (DefaultAddress).
//
// Every metric is named ofsdn_<subsystem>_<what>_<unit>, counters end in _total, and no
// label takes values that grow with pods or containers: labels are a CNI command, a CNI
// result, an ADD step, a pipeline stage or a flow batch kind, all bounded sets. Event
// metrics (durations, batches) are fed by the daemon's hooks (ObserveCNI, AddStep,
// FlowOp); state metrics (local pods, IP pool, flows per stage, connections) are read from
// a NodeStats source at scrape time, so they can never drift from the daemon's state. The
// flow counts come from the desired-state flow store, not from dumping the switch.
//
// Design history: the layout follows Antrea's agent metrics (pkg/agent/metrics: gauges read
// from the agent's caches, a histogram per operation) and kube-state-metrics' rule of no
// unbounded labels; the names follow https://prometheus.io/docs/practices/naming/ and pass
// client_golang's promlint (see TestLint).
package metrics

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ofsdn/ofsdn/flows"
)

// Metric names, for documentation and tests. README.md lists them with their labels.
const (
	// CNIRequestDuration is a histogram (seconds) of CNI requests answered by the daemon,
	// labels command (ADD, DEL, CHECK, STATUS, GC, other) and result (success or
	// error_<CNI code>).
	CNIRequestDuration = "ofsdn_cni_request_duration_seconds"
	// PodAddStepDuration is a histogram (seconds) of the steps of a pod ADD, label step
	// (ipam, veth, ovsdb, openflow).
	PodAddStepDuration = "ofsdn_pod_add_step_duration_seconds"
	// LocalPods is a gauge: pod interfaces attached on this node.
	LocalPods = "ofsdn_local_pods"
	// IPAMPoolAddresses is a gauge: leases the pod subnets can hold (ipam.Store.Capacity:
	// the addresses the smallest pool offers to pods).
	IPAMPoolAddresses = "ofsdn_ipam_pool_addresses"
	// IPAMAllocatedAddresses is a gauge: addresses leased to pods.
	IPAMAllocatedAddresses = "ofsdn_ipam_allocated_addresses"
	// OpenFlowFlows is a gauge: flows the daemon holds installed, from its desired-state
	// store, label stage (the pipeline stage name, or table_<id> outside the pipeline).
	OpenFlowFlows = "ofsdn_openflow_flows"
	// OpenFlowBatches is a counter: flow-mod batches (confirmed by a barrier) and bundles
	// sent to the switch, label kind (flow_mod, bundle).
	OpenFlowBatches = "ofsdn_openflow_batches_total"
	// OpenFlowFlowMods is a counter: flow mods sent in those batches, label kind.
	OpenFlowFlowMods = "ofsdn_openflow_flow_mods_total"
	// OpenFlowBatchErrors is a counter: batches that failed (switch error, disconnect,
	// timeout), label kind.
	OpenFlowBatchErrors = "ofsdn_openflow_batch_errors_total"
	// OpenFlowBatchDuration is a histogram (seconds) of a batch's time until the barrier or
	// bundle commit reply, label kind.
	OpenFlowBatchDuration = "ofsdn_openflow_batch_duration_seconds"
	// OpenFlowRepairs is a counter: flows the periodic flow audit repaired, label kind
	// (missing: a desired flow re-installed; unexpected: a flow with this daemon run's
	// cookie that no owner wants, deleted).
	OpenFlowRepairs = "ofsdn_openflow_repairs_total"
	// OpenFlowConnected is a gauge: 1 while the OpenFlow connection to the bridge is up.
	OpenFlowConnected = "ofsdn_openflow_connected"
	// OpenFlowReconnects is a counter: OpenFlow connections re-established after the first.
	OpenFlowReconnects = "ofsdn_openflow_reconnects_total"
	// OVSDBConnected is a gauge: 1 while the OVSDB session with ovsdb-server is up.
	OVSDBConnected = "ofsdn_ovsdb_connected"
	// OVSDBReconnects is a counter: OVSDB sessions re-established after the first.
	OVSDBReconnects = "ofsdn_ovsdb_reconnects_total"
	// Peers is a gauge: peer nodes known (0 until the overlay exists).
	Peers = "ofsdn_peers"
	// Ready is a gauge: 1 while /readyz answers 200.
	Ready = "ofsdn_ready"
	// BuildInfo is the usual constant-1 gauge with labels version, revision and goversion.
	BuildInfo = "ofsdn_build_info"
	// NetworkPolicies is a gauge: NetworkPolicies in the node's model of the API (absent
	// when the node does not enforce NetworkPolicy).
	NetworkPolicies = "ofsdn_network_policies"
	// NetworkPolicyRules is a gauge: compiled rules (conjunctions) with flows on this node.
	NetworkPolicyRules = "ofsdn_network_policy_rules"
	// NetworkPolicyFlows is a gauge: rule flows on this node, label direction (ingress,
	// egress).
	NetworkPolicyFlows = "ofsdn_network_policy_flows"
	// NetworkPolicyRealization is a histogram (seconds) from an API event (or a pod ADD)
	// to the switch confirming the change's flows.
	NetworkPolicyRealization = "ofsdn_network_policy_realization_duration_seconds"
	// NetworkPolicyRealizationErrors is a counter: changes whose bundle failed (retried by
	// a full resynchronisation).
	NetworkPolicyRealizationErrors = "ofsdn_network_policy_realization_errors_total"
	// NetworkPolicyDenied is a counter: packets (first packets of new connections) dropped
	// by isolated pods' default-deny flows, label direction; from the flows' counters.
	NetworkPolicyDenied = "ofsdn_network_policy_denied_packets_total"
	// NetworkPolicyDenyLogEntries is a counter: deny log lines logged (one per denied
	// packet that passed the switch's meter; absent when policyDenyLog is off).
	NetworkPolicyDenyLogEntries = "ofsdn_network_policy_deny_log_entries_total"
	// NetworkPolicyDenyLogDropped is a counter: denied packets not logged, label reason:
	// meter (the switch's meter dropped it over policyDenyLogRate, from the meter's drop
	// band counter), queue (the daemon's packet-in queue was full), undecodable (not a
	// default-deny flow's IPv4 packet).
	NetworkPolicyDenyLogDropped = "ofsdn_network_policy_deny_log_dropped_total"
	// ServicePorts is a gauge: Service ports in the switch (serviceProxy: ofsdn), one flow
	// each; those with endpoints also have a select group.
	ServicePorts = "ofsdn_service_ports"
	// ServiceEndpoints is a gauge: endpoints over all Service ports (their groups'
	// buckets; a UDP port's endpoints, which have slot flows, no group).
	ServiceEndpoints = "ofsdn_service_endpoints"
	// ServiceRejected is a counter: packets of new connections to Service ports without
	// endpoints, by result: answered (TCP RST or ICMP port unreachable sent) or dropped
	// (not answered: not a TCP SYN or UDP, undecodable, queue full, packet-out failed).
	ServiceRejected = "ofsdn_service_rejected_total"
	// ServiceConntrackFlushes is a counter: flushes of stale UDP/SCTP conntrack entries
	// after an endpoint left, by result: ok or error.
	ServiceConntrackFlushes = "ofsdn_service_conntrack_flushes_total"
	// ServiceAffinityRemainders is a counter: remainder flows of session-affinity
	// timeouts above 65,535 s (a learned flow expired at the learn action's limit), by
	// result: added or error (not added: the client's affinity ended at the limit).
	ServiceAffinityRemainders = "ofsdn_service_affinity_remainders_total"
	// ServiceSyncDuration is a histogram (seconds) of the Service proxy's syncs, from the
	// start of one sync of the proxy's changes to the switch confirming them (kube-proxy's
	// kubeproxy_sync_proxy_rules_duration_seconds).
	ServiceSyncDuration = "ofsdn_service_sync_duration_seconds"
	// ServiceSyncErrors is a counter: Service proxy syncs that failed (retried).
	ServiceSyncErrors = "ofsdn_service_sync_errors_total"
	// NetworkProgrammingDuration is a histogram (seconds) with kube-proxy's meaning and
	// buckets (kubeproxy_network_programming_duration_seconds, which clusterloader2's
	// NetworkProgrammingLatency reads): from the last-change trigger time of an
	// EndpointSlice change (annotation endpoints.kubernetes.io/last-change-trigger-time)
	// to the switch confirming the flows and groups that realize it.
	NetworkProgrammingDuration = "ofsdn_network_programming_duration_seconds"
)

// Label values of the event metrics, pre-created so that the set of series is fixed.
var (
	// CNICommands are the command label's values (cni/server.Observer's set).
	CNICommands = []string{"ADD", "DEL", "CHECK", "STATUS", "GC", "other"}
	// AddSteps are the step label's values (controller.Hooks.AddStep's set).
	AddSteps = []string{"policy", "ipam", "veth", "ovsdb", "openflow"}
	// Directions are the direction label's values of the NetworkPolicy metrics.
	Directions = []string{"ingress", "egress"}
	// RejectResults are the result label's values of ServiceRejected.
	RejectResults = []string{"answered", "dropped"}
	// FlushResults are the result label's values of ServiceConntrackFlushes.
	FlushResults = []string{"ok", "error"}
	// RemainderResults are the result label's values of ServiceAffinityRemainders.
	RemainderResults = []string{"added", "error"}
	// DenyLogDropReasons are the reason label's values of NetworkPolicyDenyLogDropped.
	DenyLogDropReasons = []string{"meter", "queue", "undecodable"}
	// BatchKinds are the kind label's values (controller.Hooks.FlowOp's set).
	BatchKinds = []string{"flow_mod", "bundle", "meter_mod"}
	// RepairKinds are the kind label's values of OpenFlowRepairs
	// (controller.Hooks.FlowRepair's set: controller.RepairMissing, RepairUnexpected,
	// RepairMissingGroup, RepairUnexpectedGroup, RepairMissingMeter, RepairUnexpectedMeter).
	RepairKinds = []string{"missing", "unexpected", "missing_group", "unexpected_group", "missing_meter", "unexpected_meter"}
)

// Histogram buckets, in seconds.
var (
	// CNIBuckets resolve the low milliseconds an ADD takes up to the 90 s a plugin waits
	// (cni.DefaultTimeout): 0.5 ms … 60 s.
	CNIBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}
	// SyncBuckets are kube-proxy's for its sync duration: 1 ms … 16 s, doubling.
	SyncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)
	// NetworkProgrammingBuckets are kube-proxy's for network programming latency:
	// 0.25 s, 0.5 s, 1..59 s by 1 s, 60..115 s by 5 s, 120..300 s by 30 s.
	NetworkProgrammingBuckets = append(append(append(prometheus.LinearBuckets(0.25, 0.25, 2),
		prometheus.LinearBuckets(1, 1, 59)...), prometheus.LinearBuckets(60, 5, 12)...), prometheus.LinearBuckets(120, 30, 7)...)
	// StepBuckets resolve sub-millisecond steps (a lease, a flow batch) up to 10 s:
	// 0.1 ms … 10 s.
	StepBuckets = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}
)

// Version is the daemon's version for ofsdn_build_info; set it with
// -ldflags "-X github.com/ofsdn/ofsdn/metrics.Version=v1.2.3". When empty, the main
// module's version from the Go build info is used ("(devel)" for a source build).
var Version string

// NodeStats is one sample of the node's state, read at every scrape. The zero value
// describes a node that is not started yet.
type NodeStats struct {
	// LocalPods is the number of pod interfaces attached on this node.
	LocalPods int
	// PoolAddresses and AllocatedAddresses are the leases the IP pools can hold
	// (ipam.Store.Capacity) and the leases held (ipam.Store.InUse).
	PoolAddresses, AllocatedAddresses int
	// FlowsByTable is the desired-state store's flow count per OpenFlow table id.
	FlowsByTable map[uint8]int
	// OpenFlowUp reports whether the OpenFlow connection is up.
	OpenFlowUp bool
	// OpenFlowReconnects counts OpenFlow connections re-established since the daemon
	// started (monotonic).
	OpenFlowReconnects int64
	// OVSDBUp reports whether the OVSDB session is up.
	OVSDBUp bool
	// OVSDBReconnects counts OVSDB sessions re-established since the daemon started
	// (monotonic).
	OVSDBReconnects int64
	// Peers is the number of peer nodes known.
	Peers int
	// Ready reports whether the daemon is ready (what /readyz says).
	Ready bool
	// Policy is the NetworkPolicy state; nil when the node does not enforce it.
	Policy *PolicyStats
	// Services is the Service proxy's state; nil when kube-proxy does Services.
	Services *ServiceStats
}

// ServiceStats is the Service proxy part of a NodeStats sample.
type ServiceStats struct {
	// Ports and Endpoints are the Service ports on the switch and their buckets.
	Ports, Endpoints int
	// Rejected and RejectDropped count refused connections' packets answered and not
	// answered; Flushed and FlushErrors the stale conntrack flushes; AffinityRemainders
	// and AffinityRemainderErrors the session-affinity remainder flows added and not
	// added. All monotonic.
	Rejected, RejectDropped, Flushed, FlushErrors, AffinityRemainders, AffinityRemainderErrors uint64
}

// PolicyStats is the NetworkPolicy part of a NodeStats sample.
type PolicyStats struct {
	// Policies and Rules are the model's policies and the compiled rules on this node.
	Policies, Rules int
	// Flows is the number of rule flows by direction ("ingress", "egress").
	Flows map[string]int
	// Denied is the number of packets dropped by default-deny flows by direction,
	// monotonic.
	Denied map[string]uint64
	// DenyLog is the deny log's counters; nil when policyDenyLog is off.
	DenyLog *DenyLogStats
}

// DenyLogStats is the deny log part of a PolicyStats sample; every field is monotonic.
type DenyLogStats struct {
	// Logged is the number of deny log lines logged.
	Logged uint64
	// Dropped is the number of denied packets not logged, by reason (DenyLogDropReasons).
	Dropped map[string]uint64
}

// Metrics is the daemon's registry and its instruments. Create it with New; all methods
// are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	cniDuration   *prometheus.HistogramVec
	addStep       *prometheus.HistogramVec
	batches       *prometheus.CounterVec
	flowMods      *prometheus.CounterVec
	batchErrors   *prometheus.CounterVec
	batchDuration *prometheus.HistogramVec
	repairs       *prometheus.CounterVec
	polRealize    prometheus.Histogram
	polErrors     prometheus.Counter
	svcSync       prometheus.Histogram
	svcSyncErrors prometheus.Counter
	netProgram    prometheus.Histogram
	svcOnce       sync.Once

	mu     sync.Mutex
	source func() NodeStats
}

// New returns the daemon's metrics on a new registry that also holds the Go runtime and
// process collectors and ofsdn_build_info.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.cniDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: CNIRequestDuration, Buckets: CNIBuckets,
		Help: "Time from receiving a CNI request on the daemon's socket to answering it, by command and result (success or error_<CNI error code>).",
	}, []string{"command", "result"})
	m.addStep = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: PodAddStepDuration, Buckets: StepBuckets,
		Help: "Duration of each step of a pod ADD: ipam (lease), veth (netlink), ovsdb (port transaction until ofport), openflow (pod flows until barrier).",
	}, []string{"step"})
	m.batches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: OpenFlowBatches,
		Help: "Flow-mod batches (each confirmed by a barrier) and bundles sent to the switch.",
	}, []string{"kind"})
	m.flowMods = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: OpenFlowFlowMods,
		Help: "Flow mods sent to the switch in batches and bundles.",
	}, []string{"kind"})
	m.batchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: OpenFlowBatchErrors,
		Help: "Flow-mod batches and bundles that failed: rejected by the switch, connection lost or timed out.",
	}, []string{"kind"})
	m.batchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: OpenFlowBatchDuration, Buckets: StepBuckets,
		Help: "Time from sending a flow-mod batch or bundle to its barrier or commit reply.",
	}, []string{"kind"})
	m.repairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: OpenFlowRepairs,
		Help: "Flows the periodic flow audit repaired: missing (a desired flow re-installed) or unexpected (a flow with this daemon run's cookie that no owner wants, deleted).",
	}, []string{"kind"})
	for _, k := range RepairKinds {
		m.repairs.WithLabelValues(k)
	}
	m.polRealize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: NetworkPolicyRealization, Buckets: StepBuckets,
		Help: "Time from a NetworkPolicy-relevant API event (or a pod ADD) to the switch confirming its flows.",
	})
	m.polErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NetworkPolicyRealizationErrors,
		Help: "NetworkPolicy changes whose bundle failed; a full resynchronisation retries them.",
	})
	for _, k := range BatchKinds {
		m.batches.WithLabelValues(k)
		m.flowMods.WithLabelValues(k)
		m.batchErrors.WithLabelValues(k)
		m.batchDuration.WithLabelValues(k)
	}
	for _, s := range AddSteps {
		m.addStep.WithLabelValues(s)
	}
	version, revision := buildVersion()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: BuildInfo,
		Help: "Build information of the ofsdn-node binary; the value is always 1.",
	}, []string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(version, revision, runtime.Version()).Set(1)

	m.reg.MustRegister(m.cniDuration, m.addStep, m.batches, m.flowMods, m.batchErrors,
		m.batchDuration, m.repairs, m.polRealize, m.polErrors, buildInfo, nodeCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// EnableServices registers the Service proxy's event metrics (ServiceSyncDuration,
// ServiceSyncErrors, NetworkProgrammingDuration); call it once the node proxies Services
// (serviceProxy: ofsdn). Without it they are not exported, as the ofsdn_service_ gauges
// are not. Calling it again does nothing.
func (m *Metrics) EnableServices() {
	m.svcOnce.Do(func() {
		m.svcSync = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: ServiceSyncDuration, Buckets: SyncBuckets,
			Help: "Time of each Service proxy sync: from its start to the switch confirming its groups and flows.",
		})
		m.svcSyncErrors = prometheus.NewCounter(prometheus.CounterOpts{
			Name: ServiceSyncErrors,
			Help: "Service proxy syncs that failed; their changes are retried in the next sync.",
		})
		m.netProgram = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: NetworkProgrammingDuration, Buckets: NetworkProgrammingBuckets,
			Help: "Network programming latency as kube-proxy defines it: from an EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time to the switch confirming the change.",
		})
		m.reg.MustRegister(m.svcSync, m.svcSyncErrors, m.netProgram)
	})
}

// ServiceSync records one Service proxy sync that took d and ended with err, and, when it
// succeeded, each trigger time it realized (time since then, into
// NetworkProgrammingDuration). Before EnableServices it does nothing.
func (m *Metrics) ServiceSync(d time.Duration, err error, triggers []time.Time) {
	if m.svcSync == nil {
		return
	}
	m.svcSync.Observe(d.Seconds())
	if err != nil {
		m.svcSyncErrors.Inc()
		return
	}
	now := time.Now()
	for _, t := range triggers {
		m.netProgram.Observe(now.Sub(t).Seconds())
	}
}

// Registry returns the registry holding every metric, for the HTTP handler and tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetSource installs the function that samples the node's state at scrape time. It must
// be cheap and safe for concurrent use; nil means the zero NodeStats (node not started).
func (m *Metrics) SetSource(f func() NodeStats) {
	m.mu.Lock()
	m.source = f
	m.mu.Unlock()
}

// ObserveCNI records one answered CNI request; its signature is cni/server.Observer's.
// code 0 is success, anything else is reported as result="error_<code>".
func (m *Metrics) ObserveCNI(command string, code uint, d time.Duration) {
	result := "success"
	if code != 0 {
		result = "error_" + strconv.FormatUint(uint64(code), 10)
	}
	m.cniDuration.WithLabelValues(boundedCommand(command), result).Observe(d.Seconds())
}

// AddStep records the duration of one ADD step; it is controller.Hooks.AddStep.
func (m *Metrics) AddStep(step string, d time.Duration) {
	m.addStep.WithLabelValues(bounded(step, AddSteps)).Observe(d.Seconds())
}

// FlowOp records one flow-mod batch or bundle of n flow mods that took d and ended with
// err; it is controller.Hooks.FlowOp.
func (m *Metrics) FlowOp(kind string, n int, d time.Duration, err error) {
	kind = bounded(kind, BatchKinds)
	m.batches.WithLabelValues(kind).Inc()
	m.flowMods.WithLabelValues(kind).Add(float64(n))
	m.batchDuration.WithLabelValues(kind).Observe(d.Seconds())
	if err != nil {
		m.batchErrors.WithLabelValues(kind).Inc()
	}
}

// FlowRepair records n flows of kind ("missing" or "unexpected") repaired by the flow
// audit; it is controller.Hooks.FlowRepair.
func (m *Metrics) FlowRepair(kind string, n int) {
	m.repairs.WithLabelValues(bounded(kind, RepairKinds)).Add(float64(n))
}

// PolicyRealize records one NetworkPolicy change reaching the switch (or failing to); it
// is controller.Hooks.PolicyRealize.
func (m *Metrics) PolicyRealize(d time.Duration, err error) {
	m.polRealize.Observe(d.Seconds())
	if err != nil {
		m.polErrors.Inc()
	}
}

// Sample reads the source once (the zero NodeStats without one); the collector calls it
// at every scrape.
func (m *Metrics) Sample() NodeStats {
	m.mu.Lock()
	f := m.source
	m.mu.Unlock()
	if f == nil {
		return NodeStats{}
	}
	return f()
}

// nodeCollector exports the NodeStats gauges at scrape time.
type nodeCollector struct{ m *Metrics }

var (
	descLocalPods  = prometheus.NewDesc(LocalPods, "Pod interfaces attached on this node.", nil, nil)
	descPool       = prometheus.NewDesc(IPAMPoolAddresses, "Leases the node's pod subnets can hold: addresses available to pods (without network, broadcast and gateway addresses), the smallest pool's where there is one pool per IP family.", nil, nil)
	descAllocated  = prometheus.NewDesc(IPAMAllocatedAddresses, "Addresses of the node's pod subnet leased to pods.", nil, nil)
	descFlows      = prometheus.NewDesc(OpenFlowFlows, "Flows installed by the daemon per pipeline stage, from its desired-state flow store.", []string{"stage"}, nil)
	descOFUp       = prometheus.NewDesc(OpenFlowConnected, "1 while the OpenFlow connection to the integration bridge is up, else 0.", nil, nil)
	descOVSDBUp    = prometheus.NewDesc(OVSDBConnected, "1 while the OVSDB session with ovsdb-server is up, else 0.", nil, nil)
	descOFRecon    = prometheus.NewDesc(OpenFlowReconnects, "OpenFlow connections to the bridge re-established after the first one.", nil, nil)
	descOVSDBRecon = prometheus.NewDesc(OVSDBReconnects, "OVSDB sessions with ovsdb-server re-established after the first one.", nil, nil)
	descPeers      = prometheus.NewDesc(Peers, "Peer nodes known to this node (0 until the overlay exists).", nil, nil)
	descReady      = prometheus.NewDesc(Ready, "1 while the daemon is ready (/readyz answers 200), else 0.", nil, nil)
	descPolicies   = prometheus.NewDesc(NetworkPolicies, "NetworkPolicies in the node's model of the API.", nil, nil)
	descPolRules   = prometheus.NewDesc(NetworkPolicyRules, "Compiled NetworkPolicy rules (conjunctions) with flows on this node.", nil, nil)
	descPolFlows   = prometheus.NewDesc(NetworkPolicyFlows, "NetworkPolicy rule flows on this node, by direction.", []string{"direction"}, nil)
	descPolDenied  = prometheus.NewDesc(NetworkPolicyDenied, "Packets (first packets of new connections) dropped by isolated pods' default-deny flows, by direction.", []string{"direction"}, nil)
	descDenyLogged = prometheus.NewDesc(NetworkPolicyDenyLogEntries, "NetworkPolicy deny log lines logged (denied packets that passed the switch's rate-limiting meter).", nil, nil)
	descSvcPorts   = prometheus.NewDesc(ServicePorts, "Service ports in the switch (serviceProxy: ofsdn), one flow each; those with endpoints also have a select group.", nil, nil)
	descSvcEPs     = prometheus.NewDesc(ServiceEndpoints, "Endpoints over all Service ports in the switch (group buckets; a UDP port's endpoints).", nil, nil)
	descSvcReject  = prometheus.NewDesc(ServiceRejected, "Packets of new connections to Service ports without endpoints, by result: answered (TCP RST or ICMP port unreachable sent by the daemon) or dropped (not answered).", []string{"result"}, nil)
	descSvcFlush   = prometheus.NewDesc(ServiceConntrackFlushes, "Flushes of stale UDP/SCTP conntrack entries of ofsdn's zone after an endpoint left, by result: ok or error.", []string{"result"}, nil)
	descSvcRemain  = prometheus.NewDesc(ServiceAffinityRemainders, "Remainder flows of session-affinity timeouts above 65,535 s added when a learned flow expired at the learn limit, by result: added or error (the client's affinity ended at the limit).", []string{"result"}, nil)
	descDenyLogDrp = prometheus.NewDesc(NetworkPolicyDenyLogDropped, "Denied packets not logged, by reason: meter (over policyDenyLogRate, dropped in the switch), queue (daemon's queue full), undecodable.", []string{"reason"}, nil)
	nodeCollectors = []*prometheus.Desc{descSvcPorts, descSvcEPs, descSvcReject, descSvcFlush, descSvcRemain, descLocalPods, descPool, descAllocated, descFlows, descOFUp, descOVSDBUp, descOFRecon, descOVSDBRecon, descPeers, descReady,
		descPolicies, descPolRules, descPolFlows, descPolDenied, descDenyLogged, descDenyLogDrp}
)

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range nodeCollectors {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Sample()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descLocalPods, float64(s.LocalPods))
	gauge(descPool, float64(s.PoolAddresses))
	gauge(descAllocated, float64(s.AllocatedAddresses))
	for stage, n := range FlowsByStage(s.FlowsByTable) {
		gauge(descFlows, float64(n), stage)
	}
	gauge(descOFUp, b2f(s.OpenFlowUp))
	gauge(descOVSDBUp, b2f(s.OVSDBUp))
	ch <- prometheus.MustNewConstMetric(descOFRecon, prometheus.CounterValue, float64(s.OpenFlowReconnects))
	ch <- prometheus.MustNewConstMetric(descOVSDBRecon, prometheus.CounterValue, float64(s.OVSDBReconnects))
	gauge(descPeers, float64(s.Peers))
	gauge(descReady, b2f(s.Ready))
	if p := s.Policy; p != nil {
		gauge(descPolicies, float64(p.Policies))
		gauge(descPolRules, float64(p.Rules))
		for _, d := range Directions {
			gauge(descPolFlows, float64(p.Flows[d]), d)
			ch <- prometheus.MustNewConstMetric(descPolDenied, prometheus.CounterValue, float64(p.Denied[d]), d)
		}
		if dl := p.DenyLog; dl != nil {
			ch <- prometheus.MustNewConstMetric(descDenyLogged, prometheus.CounterValue, float64(dl.Logged))
			for _, r := range DenyLogDropReasons {
				ch <- prometheus.MustNewConstMetric(descDenyLogDrp, prometheus.CounterValue, float64(dl.Dropped[r]), r)
			}
		}
	}
	if sv := s.Services; sv != nil {
		gauge(descSvcPorts, float64(sv.Ports))
		gauge(descSvcEPs, float64(sv.Endpoints))
		counter := func(d *prometheus.Desc, v uint64, label string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
		}
		counter(descSvcReject, sv.Rejected, RejectResults[0])
		counter(descSvcReject, sv.RejectDropped, RejectResults[1])
		counter(descSvcFlush, sv.Flushed, FlushResults[0])
		counter(descSvcFlush, sv.FlushErrors, FlushResults[1])
		counter(descSvcRemain, sv.AffinityRemainders, RemainderResults[0])
		counter(descSvcRemain, sv.AffinityRemainderErrors, RemainderResults[1])
	}
}

// FlowsByStage turns per-table flow counts into per-stage counts: every stage of the
// pipeline (flows.Tables) is present, 0 when empty; a table outside the pipeline is named
// table_<id>.
func FlowsByStage(byTable map[uint8]int) map[string]int {
	out := map[string]int{}
	for _, t := range flows.Tables() {
		out[t.Name] = byTable[t.ID]
	}
	for id, n := range byTable {
		if flows.TableID(id).Name() == "" {
			out[fmt.Sprintf("table_%d", id)] = n
		}
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func boundedCommand(c string) string { return bounded(c, CNICommands) }

// bounded returns v if it is one of allowed, else "other": label values stay a fixed set
// even if a caller passes something new.
func bounded(v string, allowed []string) string {
	for _, a := range allowed {
		if a == v {
			return v
		}
	}
	return "other"
}

// buildVersion returns the version and VCS revision for ofsdn_build_info.
func buildVersion() (version, revision string) {
	version, revision = Version, "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	if version == "" {
		version = "unknown"
	}
	return version, revision
}
