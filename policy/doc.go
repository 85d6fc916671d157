// Package policy computes what Kubernetes NetworkPolicy (networking.k8s.io/v1) means for
// the pods of one node, as conjunctions ready for OpenFlow: for each policy rule, the
// local pods it applies to, the peer addresses it allows and the ports it allows, each a
// clause of one conjunctive match (ovs-fields(7) "Conjunctive Match Fields"), so that N
// peers × M pods × K ports cost N+M+K flows instead of N·M·K. It knows nothing of
// OpenFlow, OVS or sockets; the controller turns its output into flows (flows/policy.go)
// and installs them.
//
// # Pieces
//
//   - A bounded in-memory model (Pod, Namespace, Policy) fed by client-go informers whose
//     transforms keep only what policy needs: name, namespace, labels, pod IPs, node name,
//     container ports, host network and phase (Watcher, StripPod, StripNamespace,
//     StripNetworkPolicy).
//   - The API's semantics, exactly (ConvertPolicy, Engine): policyTypes defaulting,
//     isolation per direction, podSelector / namespaceSelector / both, ipBlock with except
//     (split into CIDRs, ExceptCIDRs), empty from/to, matchExpressions
//     (metav1.LabelSelectorAsSelector), TCP/UDP/SCTP ports, numeric and named (resolved per
//     destination pod), endPort ranges as the fewest masked matches (RangeMasks).
//   - An incremental engine (Engine): each event (pod, namespace, policy, local attachment)
//     returns exactly the conjunctions whose clauses changed and the local pods whose
//     isolation changed. Conjunction ids come from ConjIDs, which never hands out an id
//     that a flow may still hold.
//
// # Semantics in brief (networking.k8s.io/v1 NetworkPolicySpec)
//
// A pod is isolated for ingress when a policy of its namespace selects it (podSelector)
// and has Ingress in its policyTypes; the same for egress. policyTypes defaults to
// [Ingress], plus Egress when the policy has egress rules. An isolated pod gets only what
// the union of the rules of the selecting policies allows; a pod no policy selects gets
// everything. A rule allows traffic when the peer matches one of its peers (none listed =
// any address) and the port matches one of its ports (none listed = any port and
// protocol). Named ports resolve against the destination pod: the selected local pod for
// ingress, the peer pod for egress; a pod that has no container port of that name and
// protocol does not match, and an ipBlock peer never matches a named port (it has no pod).
//
// Peers are pods' addresses, every one of status.podIPs (both families on a dual-stack
// cluster; pods on the host network, terminated pods and pods without an address are
// never peers), and ipBlocks' CIDRs of either family minus their excepts; an ipBlock
// matches addresses of its own family only (an except of the other family cannot be
// there: the API server refuses an except that is not inside the cidr). A local pod's
// addresses are all of its attachment's. The flows keep each family apart (package
// flows); an IPv4-only node gets IPv4 peers only (controller).
//
// # Design history
//
// The shape follows Antrea's agent (a rule compiles to a conjunction with from/to
// addresses, applied-to pods and services as clauses; pkg/agent/openflow
// network_policy.go), without its central controller: every node watches the API and
// computes only what its own pods need. Membership of peers is kept per rule and updated
// one pod at a time, so a label change costs one selector evaluation per rule, not a scan
// of every pod. Rules whose named ports resolve differently for different pods are split
// into one conjunction per distinct port set (Antrea does the same), so the N+M+K shape
// holds within each part.
package policy
