package controller

// Reconciliation of pod attachments against what really exists.
//
// A pod attachment lives in three places: an IP lease (the IPAM store, written first), a
// veth pair (netlink) and an OVS port with our external_ids (OVSDB, written last). A crash
// of the daemon, a DEL that never came, or somebody deleting a link by hand can leave
// these out of step. At start (before the flows are installed) and on every CNI GC (for
// the GC's network only) the node removes what is provably stale (brokenKind, scope.go):
//
//   - a port with our external_ids whose host veth is gone: its flows, the port and its
//     lease are removed (a port with ofport -1 whose veth still exists is only logged:
//     the pod may be running);
//   - a lease with neither a port nor a host veth (the daemon died between the allocation
//     and the veth, so the runtime never got an answer for it): the lease is removed.
//
// A lease whose port or host veth still exists is never freed, even if nothing else
// mentions it: the pod may be running. Each removal takes the attachment's per-container
// lock and checks the condition again under it, so an ADD in flight (lease allocated,
// port not yet made) is waited for rather than robbed of its address.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

// brokenReason says why an attachment is provably stale (brokenKind), or "" when it is
// not (or no longer) stale. port is the name of its OVS port (and host veth); byPort says
// the attachment was found by its port (else by its lease, and port is
// podnet.HostVethName). It also returns the port and whether it exists.
func (n *Node) brokenReason(containerID, ifName, port string, byPort bool) (string, ovsdb.PortInfo, bool) {
	p, hasPort := n.ports.GetPort(port)
	if hasPort {
		if a, ours := attachmentFromPort(p); !ours || a.ContainerID != containerID || a.IfName != ifName {
			return "", p, true
		}
	} else if byPort {
		return "", p, false // the port went meanwhile (a DEL): nothing left to do here
	}
	_, leased := n.leases.Get(containerID, ifName)
	return brokenKind(hasPort, n.netns.HostVethExists(port), leased), p, hasPort
}

// reconcile removes broken attachments (see the file comment) of network ("" = of every
// network; an attachment recorded without a network is of every network) and returns how
// many it removed and the first error after trying all of them. It must not run while
// the node holds a per-container lock.
func (n *Node) reconcile(ctx context.Context, network string) (int, error) {
	type cand struct {
		containerID, ifName, port string
		byPort                    bool
	}
	var cands []cand
	seen := map[string]bool{}
	for _, p := range n.ports.ListPorts(n.opts.Bridge) {
		if a, ok := attachmentFromPort(p); ok && !seen[a.key()] {
			seen[a.key()] = true
			if !sameNetwork(a.Network, network) {
				continue
			}
			if p.OFPort == -1 && n.netns.HostVethExists(p.Name) {
				n.log.Warn("ovs-vswitchd cannot open a pod's port; kept, since the pod may be running: DEL it, or fix the device",
					"port", p.Name, "container_id", a.ContainerID, "ifname", a.IfName, "network", a.Network, "error", p.Error)
			}
			cands = append(cands, cand{a.ContainerID, a.IfName, p.Name, true})
		}
	}
	for _, l := range n.leases.List() {
		if k := attachmentKey(l.ContainerID, l.IfName); !seen[k] && sameNetwork(l.Network, network) {
			seen[k] = true
			cands = append(cands, cand{l.ContainerID, l.IfName, podnet.HostVethName(l.ContainerID, l.IfName), false})
		}
	}
	removed := 0
	var firstErr error
	for _, c := range cands {
		// Cheap check without the lock first; most attachments are fine.
		if why, _, _ := n.brokenReason(c.containerID, c.ifName, c.port, c.byPort); why == "" {
			continue
		}
		ok, err := n.removeBroken(ctx, c.containerID, c.ifName, c.port, c.byPort)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if ok {
			removed++
		}
	}
	return removed, firstErr
}

// removeBroken re-checks one attachment under its lock and removes it if still broken:
// flows (by the pod's cookie), port, host veth, lease, in DEL's order.
func (n *Node) removeBroken(ctx context.Context, containerID, ifName, port string, byPort bool) (bool, error) {
	unlock, err := n.lockCtx(ctx, "container:"+containerID) // the key lockPod (pods.go) takes too
	if err != nil {
		return false, fmt.Errorf("reconcile container %s: an operation on it is still running: %w", shortID(containerID), err)
	}
	defer unlock()
	why, p, hasPort := n.brokenReason(containerID, ifName, port, byPort)
	if why == "" {
		return false, nil
	}
	hostVeth := port
	key := attachmentKey(containerID, ifName)
	n.log.Warn("removing broken pod attachment", "container_id", containerID, "ifname", ifName,
		"port", hostVeth, "reason", why)

	n.mu.Lock()
	a := n.pods[key]
	n.mu.Unlock()
	if a == nil && hasPort {
		a, _ = attachmentFromPort(p)
	}
	if a == nil {
		// As DEL does: the lease names the pod's address, hence its flows' cookie.
		if lease, ok := n.leases.Get(containerID, ifName); ok {
			a = &Attachment{ContainerID: containerID, IfName: ifName, IPs: n.leaseNets(lease.IPs),
				OwnerID: lease.OwnerID}
		}
	}
	n.fillOwnerID(a)
	var errs []error
	if n.policy != nil && a != nil {
		n.policy.detach(a)
	}
	if a != nil && (a.IPv4() != nil || a.OwnerID != 0) {
		if err := n.deletePodFlows(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	if hasPort {
		if err := n.ports.DeletePort(ctx, n.opts.Bridge, hostVeth); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.netns.Teardown(hostVeth, "", ifName); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := n.leases.Release(containerID, ifName); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("remove broken attachment of container %s (%s; port %s): %w", shortID(containerID), why, hostVeth, err)
	}
	n.mu.Lock()
	delete(n.pods, key)
	n.mu.Unlock()
	return true, nil
}
