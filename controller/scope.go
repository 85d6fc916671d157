package controller

// Which network an attachment belongs to, and what an operation on many attachments may
// remove.
//
// Design history (issue 10): a CNI GC sent for one network (its netconf "name") once
// removed the pods of every other network served by the same daemon, because it compared
// container ID and interface name only; a GC without "cni.dev/valid-attachments" removed
// every pod. Now every attachment records the network it was added with, in its OVS
// interface's external_ids (ExtIDNetwork) and in its IP lease (ipam.Lease.Network), and
// every path that removes more than the one attachment a request names follows one rule:
// remove only what is provably stale. For GC that means: the attachment is recorded
// under the GC's network and is not in the valid list. An attachment recorded without a
// network (made before ofsdn recorded it) belongs to every network, so no GC can prove
// it stale: it is kept (and logged) until a DEL names it. Reconciliation at start and
// after GC removes only attachments that cannot work and cannot be in use: a port whose
// host veth is gone (the pod's end went with it), or a lease with neither a port nor a
// host veth (an ADD that died after its lease and never answered).

import "sort"

// sameNetwork reports whether an attachment recorded under network recorded may be
// touched by a request for network req: "" on either side (an attachment from before
// networks were recorded, or a request without one) matches every network.
func sameNetwork(recorded, req string) bool {
	return recorded == "" || req == "" || recorded == req
}

// gcPlan is what a CNI GC for one network does with the attachments the node knows.
type gcPlan struct {
	// Remove are the attachments recorded under the GC's network and not valid, sorted.
	Remove []AttachmentID
	// Unscoped are the attachments not valid but recorded under no network at all (every
	// network's, so never provably stale for one network's GC): kept, sorted.
	Unscoped []AttachmentID
}

// planGC decides a GC for network: known maps every attachment the node knows (pods in
// memory, ports with our external_ids, IP leases) to the networks its records carry (""
// for a record without one). An attachment is removed only when it is not in valid, at
// least one of its records names network, and none names another network. It is pure.
func planGC(network string, valid []AttachmentID, known map[AttachmentID][]string) gcPlan {
	keep := make(map[AttachmentID]bool, len(valid))
	for _, v := range valid {
		keep[v] = true
	}
	var p gcPlan
	for id, nets := range known {
		if keep[id] {
			continue
		}
		ours, other := false, false
		for _, n := range nets {
			switch n {
			case "":
			case network:
				ours = true
			default:
				other = true
			}
		}
		switch {
		case other:
			// Another network's (or contradictory records): not this GC's to judge.
		case ours:
			p.Remove = append(p.Remove, id)
		default:
			p.Unscoped = append(p.Unscoped, id)
		}
	}
	sortIDs(p.Remove)
	sortIDs(p.Unscoped)
	return p
}

func sortIDs(ids []AttachmentID) {
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].ContainerID != ids[j].ContainerID {
			return ids[i].ContainerID < ids[j].ContainerID
		}
		return ids[i].IfName < ids[j].IfName
	})
}

// brokenKind classifies one attachment for reconciliation from what exists of it: its OVS
// port (with our external_ids, for this attachment), its host veth, and its IP lease. It
// returns why the attachment is provably stale, or "" when it may be in use. It is pure.
//
//   - Port, host veth gone: the pod's end of the pair went with the host end, so the pod
//     has no interface left: stale, whatever the ofport says.
//   - Port, host veth present: may be in use, even with ofport -1 (ovs-vswitchd could not
//     open the device: a transient failure must not cost a running pod its address; a
//     DEL or GC naming it removes it).
//   - No port, lease, no host veth: an ADD that died after its lease (the runtime never
//     got an answer): stale.
//   - No port, lease, host veth present: an ADD that died between the veth and the port,
//     or a port lost from OVSDB while the pod runs: may be in use, kept for DEL or GC.
func brokenKind(hasPort, vethExists, leased bool) string {
	switch {
	case hasPort && !vethExists:
		return "its host veth is gone"
	case !hasPort && leased && !vethExists:
		return "IP lease without an OVS port or a host veth"
	}
	return ""
}
