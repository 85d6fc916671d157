// Package ctl is the ofsdn-node daemon's inspection API and its client: read-only HTTP+JSON
// over a root-only unix socket (DefaultSocketPath), separate from the CNI socket so that
// operators' tools never compete with the container runtime. It lists the local pods,
// dumps the installed flows grouped by pipeline stage with packet counts (from OpenFlow
// flow-stats requests the daemon sends, OpenFlow 1.3.5 §7.3.5.2) and lists the peer nodes.
// cmd/ofsdnctl is its command-line front end.
//
// Endpoints (all GET, JSON bodies; errors are {"error": "..."} with a 4xx/5xx status):
//
//	/v1/pods   → []Pod, sorted by namespace, name, container ID
//	/v1/flows  → []Stage, in pipeline order
//	/v1/peers  → []Peer, sorted by node name
//	/v1/policies → PolicyReport: NetworkPolicy state and, per local pod, its isolation,
//	             the policies selecting it, each rule's flows with packet counts, and the
//	             packets its default-deny flows dropped
//	/v1/policies/status → PolicyReport without PodPolicies: the counts, the realized
//	             versions and the error state only, cheap at any scale (no flow dump, no
//	             flow text); for polling until a change is realized
//	/v1/services → ServiceReport: the Service ports the switch load-balances (config
//	             serviceProxy: ofsdn), with endpoints and connection counts
package ctl

import "time"

// DefaultSocketPath is the inspection socket's default path, next to the CNI socket
// (cni.DefaultSocketPath) in the root-only directory /var/run/ofsdn.
const DefaultSocketPath = "/var/run/ofsdn/ctl.sock"

// API paths.
const (
	// PathPods lists the local pods.
	PathPods = "/v1/pods"
	// PathFlows dumps the installed flows by stage.
	PathFlows = "/v1/flows"
	// PathPeers lists the peer nodes.
	PathPeers = "/v1/peers"
	// PathPolicies reports NetworkPolicy enforcement.
	PathPolicies = "/v1/policies"
	// PathPolicyStatus reports NetworkPolicy enforcement without the per-pod detail.
	PathPolicyStatus = "/v1/policies/status"
	// PathServices reports the Service ports load-balanced in the switch.
	PathServices = "/v1/services"
)

// Pod is one pod interface attached on the node.
type Pod struct {
	// ContainerID is the runtime's container ID (CNI_CONTAINERID).
	ContainerID string `json:"containerID"`
	// IfName is the interface name inside the pod (CNI_IFNAME).
	IfName string `json:"ifName"`
	// Namespace and Name are the pod's (K8S_POD_NAMESPACE, K8S_POD_NAME); empty if the
	// runtime did not pass them.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// IP is the pod's first address with prefix length, e.g. "10.128.0.5/24" (IPs[0]).
	IP string `json:"ip"`
	// IPs are all the pod's addresses with prefix length, one per pod subnet of the node,
	// in the order of the node's pod subnets (the CNI result's order).
	IPs []string `json:"ips"`
	// MAC is the pod interface's MAC address.
	MAC string `json:"mac"`
	// OFPort is the OVS port's OpenFlow port number.
	OFPort uint32 `json:"ofport"`
	// OwnerID is the id of the pod's flow owner: the low 32 bits of its flows' cookies,
	// whose owner kind (bits 39..32) is 2, pod (flows.Cookie); 1..2^32-1.
	OwnerID uint32 `json:"ownerID"`
	// HostVeth is the host end of the veth pair, also the OVS port's name.
	HostVeth string `json:"hostVeth"`
	// Netns is the path of the pod's network namespace.
	Netns string `json:"netns"`
	// Isolation is the pod's NetworkPolicy isolation: "ingress+egress", "ingress",
	// "egress" or "none"; "" when the node does not enforce NetworkPolicy.
	Isolation string `json:"isolation,omitempty"`
}

// Stage is one pipeline stage's flow table as the switch holds it.
type Stage struct {
	// Table is the OpenFlow table id (0..254).
	Table uint8 `json:"table"`
	// Name is the stage name (docs/pipeline.md), or "table_<id>" outside the pipeline.
	Name string `json:"name"`
	// Flows are the table's entries, by descending priority.
	Flows []Flow `json:"flows"`
	// Missing are the daemon's desired flows for this table that the switch lacks
	// (ovs-ofctl text form); normally empty.
	Missing []string `json:"missing,omitempty"`
}

// Flow is one flow entry with its statistics.
type Flow struct {
	// Priority is the entry's priority (0..65535).
	Priority uint16 `json:"priority"`
	// Cookie is the entry's cookie in hex, e.g. "0x100000002000003".
	Cookie string `json:"cookie"`
	// Packets and Bytes are the entry's counters (n_packets, n_bytes).
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// DurationSeconds is how long the entry has been installed, in seconds.
	DurationSeconds float64 `json:"durationSeconds"`
	// Flow is the entry in `ovs-ofctl -O OpenFlow13 dump-flows --names` form without the
	// statistics.
	Flow string `json:"flow"`
	// Desired is false for an entry the daemon did not install (someone else's flow).
	Desired bool `json:"desired"`
}

// Duration returns DurationSeconds as a time.Duration.
func (f Flow) Duration() time.Duration {
	return time.Duration(f.DurationSeconds * float64(time.Second))
}

// Peer is one remote node known to this node (the overlay's tunnel endpoints).
type Peer struct {
	// Node is the peer's node name.
	Node string `json:"node"`
	// IP is the peer's tunnel endpoint address.
	IP string `json:"ip"`
	// PodSubnet is the peer's pod subnet (CIDR).
	PodSubnet string `json:"podSubnet"`
	// PodSubnetIPv6 is the peer's IPv6 pod subnet (CIDR) when this node is dual-stack and
	// routes it; absent otherwise.
	PodSubnetIPv6 string `json:"podSubnetIPv6,omitempty"`
	// IPv6 is the peer node's IPv6 address beside an IPv4 tunnel endpoint (its IPv6
	// InternalIP, or the topology file's nodeIPv6): pods reach IPv6 NodePorts at it; absent
	// when not known.
	IPv6 string `json:"ipv6,omitempty"`
	// OwnerID is the id of the peer's flow owner: the low 32 bits of its flows' cookies,
	// whose owner kind (bits 39..32) is 3, peer (flows.Cookie); 1..2^32-1, recorded in
	// the node's data directory (controller.PeerIDsFile).
	OwnerID uint32 `json:"ownerID"`
	// OFPort is the OpenFlow port number (1..65279) of the tunnel port that reaches the
	// peer: one flow-based port serves every peer, so all peers show the same.
	OFPort uint32 `json:"ofport,omitempty"`
}

// ServiceReport is the node's Service proxy (config serviceProxy: ofsdn).
type ServiceReport struct {
	// Enabled is false when the node leaves Services to kube-proxy (serviceProxy:
	// kube-proxy); the rest is then empty.
	Enabled bool `json:"enabled"`
	// Rejected counts packets of new connections to Service ports without endpoints that
	// the daemon answered (TCP RST, ICMP port unreachable); RejectDropped those it did not
	// answer (not a TCP SYN or UDP, over the reject meter's rate, a full queue).
	Rejected      uint64 `json:"rejected"`
	RejectDropped uint64 `json:"rejectDropped"`
	// ConntrackFlushes counts flushes of stale UDP/SCTP conntrack entries after an
	// endpoint left; ConntrackFlushErrors the failed ones.
	ConntrackFlushes     uint64 `json:"conntrackFlushes"`
	ConntrackFlushErrors uint64 `json:"conntrackFlushErrors"`
	// Ports are the Service ports on the switch, sorted by namespace/name:port/PROTOCOL.
	Ports []ServicePort `json:"ports"`
}

// ServicePort is one Service port load-balanced in the switch.
type ServicePort struct {
	// Namespace and Name are the Service's; Port is the port's name ("" for the unnamed
	// one); Protocol is TCP, UDP or SCTP.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Port      string `json:"port"`
	Protocol  string `json:"protocol"`
	// Frontend is the ClusterIP and port, "IP:PORT" (of an external view, its first
	// frontend).
	Frontend string `json:"frontend"`
	// Frontends are every address this node's pods reach the port at, "IP:PORT": the
	// ClusterIP first, then external IPs and load-balancer IPs at the port, then each
	// node's address at the NodePort.
	Frontends []string `json:"frontends"`
	// External marks the port's external view (its frontends other than the ClusterIP,
	// with their own group and verdict: internalTrafficPolicy Local, whose ClusterIP
	// endpoints differ from those of pods' external traffic).
	External bool `json:"external,omitempty"`
	// OwnerID is the Service port's flow owner id (cookie owner kind 5, service). GroupID
	// is its OpenFlow select group's id (flows.GroupIDMin + OwnerID) when it has endpoints,
	// 0 when it has none (reject or drop: a flow, no group) and for a UDP port, whose
	// endpoint is chosen by a multipath hash and its slot flows (flows.ServiceHashSelect).
	OwnerID uint32 `json:"ownerID"`
	GroupID uint32 `json:"groupID"`
	// Verdict is what a new connection gets: "forward" (to one of Endpoints), "reject"
	// (no endpoint: TCP RST or ICMP port unreachable) or "drop" (no endpoint usable under
	// the traffic policy).
	Verdict string `json:"verdict"`
	// Endpoints are the group's buckets (a UDP port's: its slot flows' endpoints),
	// "IP:PORT", in bucket order.
	Endpoints []string `json:"endpoints"`
	// Connections is the packet count of the port's service_lb flow: new connections
	// sent to the group, or refused/dropped; -1 when the switch could not be asked.
	Connections int64 `json:"connections"`
}

// PolicyReport is the node's NetworkPolicy enforcement.
type PolicyReport struct {
	// Enabled is false when the node does not enforce NetworkPolicy (config networkPolicy).
	Enabled bool `json:"enabled"`
	// Synced is true once the Pod, Namespace and NetworkPolicy informers have synced.
	Synced bool `json:"synced"`
	// Pods, Namespaces and Policies are the sizes of the node's model of the API.
	Pods       int `json:"pods"`
	Namespaces int `json:"namespaces"`
	Policies   int `json:"policies"`
	// Rules is the number of compiled rules (conjunctions) that apply to local pods.
	Rules int `json:"rules"`
	// RuleFlows is the number of rule flows by direction ("ingress", "egress").
	RuleFlows map[string]int `json:"ruleFlows"`
	// Versions is, per kind (pods, namespaces, networkpolicies), the highest API
	// resourceVersion whose change is on the switch.
	Versions map[string]uint64 `json:"versions"`
	// Dirty is true while a failed change is being retried (the switch lags); LastError
	// says why.
	Dirty     bool   `json:"dirty"`
	LastError string `json:"lastError,omitempty"`
	// Pods are the local pods, sorted by namespace and name.
	PodPolicies []PodPolicy `json:"podPolicies"`
}

// PodPolicy is one local pod's NetworkPolicy state.
type PodPolicy struct {
	// Namespace and Name identify the pod.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// IngressIsolated and EgressIsolated say whether a policy isolates it.
	IngressIsolated bool `json:"ingressIsolated"`
	EgressIsolated  bool `json:"egressIsolated"`
	// IngressPolicies and EgressPolicies name the policies selecting it per direction.
	IngressPolicies []string `json:"ingressPolicies"`
	EgressPolicies  []string `json:"egressPolicies"`
	// Rules are the rules that apply to it.
	Rules []PolicyRule `json:"rules"`
	// Denied is the number of new connections' packets its default-deny flows dropped,
	// by direction.
	Denied map[string]uint64 `json:"denied"`
}

// PolicyRule is one compiled rule (a conjunction) applying to a pod.
type PolicyRule struct {
	// Rule names it: "namespace/policy ingress[0]".
	Rule string `json:"rule"`
	// Group is its port group ("*" = any port).
	Group string `json:"group"`
	// ConjID is its conjunction id.
	ConjID uint32 `json:"conjID"`
	// Allowed is the packets (first packets of new connections) the rule let through,
	// from its conj_id flow (or, for a rule on the pod alone, its allow flow).
	Allowed uint64 `json:"allowed"`
	// Flows are the flows it contributes to, with their counters.
	Flows []Flow `json:"flows"`
}

// errorBody is the JSON body of an error answer.
type errorBody struct {
	Error string `json:"error"`
}
