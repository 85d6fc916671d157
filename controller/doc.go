// Package controller is the node's orchestration: it turns CNI operations and topology
// events into OVS ports, pod network namespaces, IP leases and flows, and keeps the
// switch's flow tables equal to the desired state across restarts of the daemon,
// ovs-vswitchd and ovsdb-server.
//
// What lives here, by file:
//
//   - node.go: StartNode brings up the bridge, gateway and tunnel ports (OVSDB), the
//     gateway's address (podnet), the IPAM store, a new flow generation, the first flow
//     sync as one bundle, and re-ensures them after OVSDB reconnections.
//   - pods.go: AddPod, DelPod, CheckPod, GC of pod attachments, in the order the design
//     fixes (IPAM → veth → OVSDB port → flows; DEL the other way round), with a per-pod
//     lock and the undo of a failed ADD.
//   - reconcile.go: what start-up and GC remove because it can no longer work;
//     scope.go: which CNI network an attachment belongs to, and what a GC may remove.
//   - peers.go: the overlay: one flow owner per peer node, topology events.
//   - join.go: joining the cluster: the overlay options from topology.Prepare's Cluster
//     (OverlayOptionsFor), then JoinCluster: IPv4 forwarding and the NAT rules (package
//     masq), the node IP's announcement (topology.KeepAnnounced), the topology's events
//     followed.
//   - health.go: the readiness probe of OVS (HealthProbe): OpenFlow and OVSDB echoes,
//     what the daemon's /readyz reads.
//   - store.go: the node's switchstate.Store (the desired flows, groups and meters per
//     flows.Owner, the diff of each change, the replay on every new OpenFlow connection,
//     the audit), its errors folded into ErrOVSUnavailable; audit_loop.go: the periodic
//     audit that repairs the switch while connected, its logs and counts.
//   - inspect.go: read-only views for metrics and the inspection API (ctl/).
//   - seams.go: the small interfaces pod wiring uses for its collaborators (OVSDB ports,
//     switch state, IPAM, pod netns plumbing), so that its decisions are unit-tested with
//     fakes beside the real-OVS tests.
//   - unavailable.go: ErrOVSUnavailable, where OVSDB's and OpenFlow's outages meet.
//
// What does not: the OpenFlow 1.3 wire protocol and the reconnecting connection are
// package openflow; turning the desired state into OpenFlow messages is package
// switchstate (controller imports no OpenFlow codec); the pipeline and its flow builders are package flows; OVSDB is package
// ovsdb; leases are package ipam; netlink plumbing is package podnet; the CNI wire format
// is package cni (cmd/ofsdn-node converts CNI requests into PodRequest); the NAT rules
// and the forwarding sysctl are package masq. controller imports those (but cni),
// switchstate and topology, and nothing imports controller but cmd/ofsdn-node, ctl and bench
// (docs/design.md has the import rules, checked by a test).
package controller
