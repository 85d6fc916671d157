package controller

// Pod wiring: the ADD, DEL and CHECK of one pod attachment, in the order the design fixes.
//
// ADD: IP lease (reserved in memory; its write to disk runs while the next step does) →
// veth pair with the pod end born in the pod's netns (no link is moved between
// namespaces) → wait until the lease is durable (before anything can be seen outside the
// node, so a crash never hands one address out twice) → OVS port in one OVSDB
// transaction with an ofport chosen here (ofport_request), and at the same time the pod's
// flows on that ofport as one batch confirmed by a barrier; ADD succeeds once both are
// done and the port got the ofport asked for. Each step registers its undo; on any
// failure the undos run in reverse, so a failed ADD leaves nothing behind.
//
// DEL runs the other way round: flows first (so nothing is forwarded to a port that is
// going away), then the port and the veth at once, and last the lease (so an address is
// never handed out while a device holding it exists). Every step treats "already gone"
// as done, so DEL is idempotent and works without the netns.
//
// Everything is keyed on container ID + interface name, never on the pod's name: a new
// sandbox for the same pod must not be touched by the old sandbox's DEL. Each attachment
// also records the CNI network (netconf "name") it was added with; a request for another
// network never touches it (scope.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

// Interface external_ids keys that identify a pod attachment on its OVS port.
const (
	// ExtIDContainerID holds the runtime's container ID (CNI_CONTAINERID).
	ExtIDContainerID = "ofsdn-container-id"
	// ExtIDIfName holds the interface name inside the pod (CNI_IFNAME).
	ExtIDIfName = "ofsdn-ifname"
	// ExtIDPodNamespace holds K8S_POD_NAMESPACE from CNI_ARGS ("" when not given).
	ExtIDPodNamespace = "ofsdn-pod-namespace"
	// ExtIDPodName holds K8S_POD_NAME from CNI_ARGS ("" when not given).
	ExtIDPodName = "ofsdn-pod-name"
	// ExtIDIP holds the pod's IPv4 address with prefix length, e.g. "10.128.0.5/24";
	// absent on an IPv6-only node's ports, which record ExtIDIPv6 alone.
	ExtIDIP = "ofsdn-ip"
	// ExtIDIPv6 holds a dual-stack or IPv6-only pod's IPv6 address with prefix length,
	// e.g. "fd00:10:128::5/64"; absent on an IPv4-only node's ports. Ports written before
	// ofsdn recorded it lack it: a lease rebuilt from such a port gets the IPv6 pool's next
	// address (restoreLease).
	ExtIDIPv6 = "ofsdn-ipv6"
	// ExtIDMAC holds the pod interface's MAC address.
	ExtIDMAC = "ofsdn-mac"
	// ExtIDNetns holds the path of the pod's network namespace (CNI_NETNS).
	ExtIDNetns = "ofsdn-netns"
	// ExtIDNetwork holds the CNI network name (netconf "name", SPEC.md "Section 1:
	// Network configuration format") the attachment was added with. Ports written before
	// ofsdn recorded it lack the key; they belong to every network (scope.go).
	ExtIDNetwork = "ofsdn-network"
	// ExtIDOwnerID holds the attachment's flow owner id (Attachment.OwnerID, decimal), so
	// that its flows can be found from its port when its lease is gone. Ports written
	// before ofsdn recorded it lack the key; their flows carry the pod's IPv4 address as
	// the id (ownerIDOf).
	ExtIDOwnerID = "ofsdn-owner-id"
)

// PodRequest is what the pod manager needs from a CNI request, in the CNI wire format's
// terms but without its types (cmd/ofsdn-node's CNI handler converts a cni.Request).
type PodRequest struct {
	// ContainerID is CNI_CONTAINERID; required.
	ContainerID string
	// IfName is CNI_IFNAME, the interface name inside the pod; required.
	IfName string
	// Netns is CNI_NETNS, the path of the pod's network namespace; required for ADD and
	// CHECK, may be empty or gone for DEL.
	Netns string
	// PodNamespace and PodName come from CNI_ARGS K8S_POD_NAMESPACE / K8S_POD_NAME.
	PodNamespace, PodName string
	// Network is the netconf's "name", the CNI network the request is for; an ADD
	// records it with the attachment, and DEL and CHECK act only on an attachment of
	// that network (or one recorded without a network). "" matches every network.
	Network string
}

// String names the request for logs: "pod namespace/name (container ID)", the ID
// shortened, or "container ID" when the runtime gave no pod name (CNI_ARGS).
func (r PodRequest) String() string {
	if r.PodName != "" {
		return fmt.Sprintf("pod %s/%s (container %s)", r.PodNamespace, r.PodName, shortID(r.ContainerID))
	}
	return "container " + shortID(r.ContainerID)
}

// Attachment is one pod interface wired into the bridge.
type Attachment struct {
	ContainerID, IfName, Netns string
	PodNamespace, PodName      string
	// Network is the CNI network name the attachment was added with ("" when it was
	// added before ofsdn recorded it: it belongs to every network).
	Network string
	// HostVeth is the host end's name, also the OVS port and interface name.
	HostVeth string
	// OFPort is the port's OpenFlow port number (1..0xfffffeff).
	OFPort uint32
	// IPs are the pod's addresses, each with its pod subnet's prefix length, in the order
	// of the node's pod subnets (the CNI result's order): one IPv4 address and, on a
	// dual-stack node, one IPv6 address (the IPv6 one first on an IPv6-first node); on
	// an IPv6-only node one IPv6 address.
	IPs []*net.IPNet
	// Gateway is the pod's IPv4 default gateway (the node's gateway port address); nil
	// on an IPv6-only node.
	Gateway net.IP
	// Gateway6 is the pod's IPv6 default gateway (the gateway port's IPv6 address) on a
	// dual-stack node, nil on an IPv4-only one.
	Gateway6 net.IP
	// MAC is the pod interface's MAC address.
	MAC net.HardwareAddr
	// HostMAC is the host veth's MAC address (nil after a daemon restart).
	HostMAC net.HardwareAddr
	// ContainerIfIndex is the pod interface's ifindex inside the netns (0 if unknown, e.g.
	// after a daemon restart).
	ContainerIfIndex int
	// MTU is the pod interface's MTU in bytes.
	MTU int
	// OwnerID is the attachment's flow owner id (the id of its flows' cookies, kind
	// flows.OwnerPod), 1..2^32-1: the one its IP lease holds (ipam.Lease.OwnerID), also
	// recorded on its port (ExtIDOwnerID).
	OwnerID uint32
}

// IPv4 returns the pod's IPv4 address with its prefix length, the first of IPs that is
// one; nil if it has none.
func (a *Attachment) IPv4() *net.IPNet {
	for _, ip := range a.IPs {
		if ip != nil && ip.IP.To4() != nil {
			return ip
		}
	}
	return nil
}

// IPv6 returns the pod's IPv6 address with its prefix length, the first of IPs that is
// one; nil if it has none (an IPv4-only node's pods).
func (a *Attachment) IPv6() *net.IPNet {
	for _, ip := range a.IPs {
		if ip != nil && ip.IP.To4() == nil && len(ip.IP) == net.IPv6len {
			return ip
		}
	}
	return nil
}

// firstIP returns the pod's first address (its primary one, the CNI result's first),
// nil if it has none.
func (a *Attachment) firstIP() *net.IPNet {
	for _, ip := range a.IPs {
		if ip != nil {
			return ip
		}
	}
	return nil
}

// addrString lists the pod's addresses for logs and errors, e.g. "10.128.0.5" or
// "10.128.0.5,fd00:10:128::5".
func (a *Attachment) addrString() string {
	var ss []string
	for _, ip := range a.IPs {
		if ip != nil {
			ss = append(ss, ip.IP.String())
		}
	}
	return strings.Join(ss, ",")
}

// expects is what CHECK looks for in the pod: each address with its family's gateway.
func (a *Attachment) expects() []podnet.Expect {
	var out []podnet.Expect
	for _, ip := range a.IPs {
		if ip == nil {
			continue
		}
		gw := a.Gateway
		if ip.IP.To4() == nil {
			gw = a.Gateway6
		}
		out = append(out, podnet.Expect{Addr: ip, Gateway: gw})
	}
	return out
}

func (a *Attachment) key() string { return attachmentKey(a.ContainerID, a.IfName) }

// owner is the attachment's flow owner: its flows' store key and cookie (flows.PodOwner).
func (a *Attachment) owner() flows.Owner { return flows.PodOwner(a.flowPod()) }
func (a *Attachment) flowPod() flows.Pod {
	p := flows.Pod{OFPort: a.OFPort, MAC: a.MAC, OwnerID: a.OwnerID}
	for _, ip := range a.IPs {
		if ip4 := ip.IP.To4(); ip4 != nil {
			p.IPs = append(p.IPs, ip4)
		} else {
			p.IPs = append(p.IPs, ip.IP)
		}
	}
	return p
}

// ownerIDOf returns the flow owner id of the attachment (containerID, ifName) at ip when a
// does not know it (rebuilt from a port of an older ofsdn, or from a lease): the id its
// lease holds, else the one ofsdn gave pods before it recorded owner ids, the IPv4
// address as a big-endian uint32 (what the flows of such a pod carry).
func (n *Node) ownerIDOf(containerID, ifName string, ip net.IP) uint32 {
	if l, ok := n.leases.Get(containerID, ifName); ok && slices.ContainsFunc(l.IPs, ip.Equal) && l.OwnerID != 0 {
		return l.OwnerID
	}
	if ip4 := ip.To4(); ip4 != nil {
		return uint32(ip4[0])<<24 | uint32(ip4[1])<<16 | uint32(ip4[2])<<8 | uint32(ip4[3])
	}
	return 0
}

// fillOwnerID gives a (when not nil) its flow owner id if it has none (ownerIDOf).
func (n *Node) fillOwnerID(a *Attachment) {
	if a != nil && a.OwnerID == 0 && a.IPv4() != nil {
		a.OwnerID = n.ownerIDOf(a.ContainerID, a.IfName, a.IPv4().IP)
	} else if a != nil && a.OwnerID == 0 && a.firstIP() != nil {
		// An IPv6-only pod: only its lease knows the id (no build gave one by address).
		a.OwnerID = n.ownerIDOf(a.ContainerID, a.IfName, a.firstIP().IP)
	}
}

func attachmentKey(containerID, ifName string) string { return containerID + "/" + ifName }

// StepError is a failed step of a pod operation. Step is one of "ipam", "veth", "ovsdb",
// "openflow", "check".
type StepError struct {
	Step string
	Err  error
}

// Error returns "step: the step's error".
func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }

// Unwrap returns the step's error, for errors.Is and errors.As.
func (e *StepError) Unwrap() error { return e.Err }

// stepErr names the failed step; an OVSDB or OpenFlow outage also matches
// ErrOVSUnavailable.
func stepErr(step string, err error) error { return &StepError{Step: step, Err: ovsUnavailable(err)} }

// AddPod wires one pod interface (CNI ADD, CNI spec 1.1 "ADD: Add container to network").
// A repeated ADD for the same container ID and interface returns the existing attachment.
// Operations on the same pod (container ID, or pod namespace/name) run one at a time, see
// lockPod. ctx bounds the whole ADD, waits on OVS included (the CNI handler gives it the
// configured ADD deadline): AddPod returns at the latest shortly after ctx ends, also
// when Open vSwitch does not answer at all. On failure, a passed deadline included,
// everything it created is removed again (undoAdd: each step retried until it is done,
// each attempt bounded by UndoTimeout, for up to UndoRetryFor) and the error is a
// *StepError naming the step, wrapping ctx's error when that ended it. AddPod waits for
// that undo at most UndoWait and never past ctx; an undo still running then (OVS not
// answering) goes on in the background and keeps holding the pod's lock, so a DEL or
// another ADD of the same pod waits for it (or gives up when its own context ends).
func (n *Node) AddPod(ctx context.Context, req PodRequest) (_ *Attachment, retErr error) {
	if req.ContainerID == "" || req.IfName == "" || req.Netns == "" {
		return nil, errors.New("container ID, interface name and netns are required for ADD")
	}
	unlock, err := n.lockPod(ctx, req)
	if err != nil {
		return nil, err
	}
	// Released when AddPod returns, or, after a failure, when its undo has finished.
	finally := []func(){unlock}
	defer func() {
		for i := len(finally) - 1; i >= 0; i-- {
			finally[i]()
		}
	}()

	key := attachmentKey(req.ContainerID, req.IfName)
	n.mu.Lock()
	existing := n.pods[key]
	n.mu.Unlock()
	if existing != nil {
		if !sameNetwork(existing.Network, req.Network) {
			return nil, stepErr("ipam", fmt.Errorf("%s: interface %s is already attached to network %q, not %q; use another CNI_IFNAME for the second network", req, req.IfName, existing.Network, req.Network))
		}
		if existing.Netns == req.Netns {
			return existing, nil
		}
		return nil, stepErr("ipam", fmt.Errorf("%s: interface %s is already attached in netns %s; DEL it first", req, req.IfName, existing.Netns))
	}
	if l, ok := n.leases.Get(req.ContainerID, req.IfName); ok && !sameNetwork(l.Network, req.Network) {
		return nil, stepErr("ipam", fmt.Errorf("%s: interface %s holds an IP lease of network %q, not %q; use another CNI_IFNAME for the second network", req, req.IfName, l.Network, req.Network))
	}

	step := n.stepTimer()
	// 0. With network policy: the Pod must be known before anything is made, so that its
	// policy goes in with its first flows (policy.go).
	if n.policy != nil {
		err := n.policy.waitPod(ctx, req)
		step("policy")
		if err != nil {
			return nil, stepErr("policy", fmt.Errorf("%s: %w", req, err))
		}
	}

	var undo []undoStep
	var waitFlows func() error // set once the pod's flows are on their way (step 2)
	defer func() {
		if retErr != nil && waitFlows != nil {
			// The undo's delete of the flows comes after their install has ended.
			_ = waitFlows()
		}
		if retErr != nil && len(undo) > 0 {
			// Runs before the deferred release of the lock above: the undo takes it over.
			retErr = n.undoAdd(ctx, req, undo, finally, retErr)
			finally = nil
		}
	}()

	// 1. The pod's ofport (step 5 asks for it) is chosen first, so that the lease records
	// it: with the netns and the host veth, the lease is the attachment's record on the
	// node's disk, from which the port is re-created if the OVS database is lost (node.go,
	// "Restarts"). Then the IP lease, reserved in memory; ipam's flusher writes it to
	// disk while the veth is made (the write's fsyncs cost 1–4 ms, bench/RESULTS.md).
	hostVeth := podnet.HostVethName(req.ContainerID, req.IfName)
	ofreq, release, err := n.ports.ReserveOFPort(hostVeth)
	if err != nil {
		step("ovsdb")
		return nil, stepErr("ovsdb", fmt.Errorf("%s: port %s on bridge %s: %w", req, hostVeth, n.opts.Bridge, err))
	}
	// The ofport stays held until the port is gone: after a failure, until its undo ends.
	finally = append(finally, release)
	owner := req.PodNamespace + "/" + req.PodName
	ips, durable, err := n.leases.ReserveLease(ipam.Lease{ContainerID: req.ContainerID, IfName: req.IfName, Owner: owner,
		Network: req.Network, Netns: req.Netns, HostVeth: hostVeth, OFPort: ofreq})
	if err != nil {
		step("ipam")
		return nil, stepErr("ipam", fmt.Errorf("%s: %w", req, err))
	}
	// Runs last. A lease whose write failed is already gone: Release is then a no-op.
	undo = append(undo, undoStep{what: fmt.Sprintf("IP lease %v", ips), last: true, run: func(context.Context) error {
		return n.leases.Release(req.ContainerID, req.IfName)
	}})
	a := &Attachment{
		ContainerID: req.ContainerID, IfName: req.IfName, Netns: req.Netns,
		PodNamespace: req.PodNamespace, PodName: req.PodName, Network: req.Network,
		HostVeth: hostVeth,
		IPs:      n.leaseNets(ips),
		MTU:      n.opts.MTU,
	}
	if a.IPv4() != nil {
		a.Gateway = n.config().GatewayIP
	}
	if a.IPv6() != nil {
		a.Gateway6 = n.config().GatewayIPv6
	}
	n.fillOwnerID(a) // the id the lease was given with the address
	// Everything the pod's flows name is known now: the ofport asked for, the addresses,
	// the owner id and the MAC, which ofsdn derives from the address (podnet.MACFromIP)
	// and gives the pod interface in step 3.
	a.OFPort = uint32(ofreq)
	a.MAC = podnet.PodMAC(a.IPv4(), a.IPv6())

	// 2. The pod's flows go to the switch while the veth pair is made and the port added
	// (with NetworkPolicy: its default deny and rule flows with them, in the policy
	// runner's bundle), so an ADD waits for the switch only where its round trips take
	// longer than the veth and the port together. Flows naming a port that does not exist
	// yet forward nothing, and nothing else holds the address or the ofport. Their undo is
	// registered first; it runs after the install ended (waitFlows, above) and before the
	// port's and the veth's, as in DEL.
	//
	// With NetworkPolicy, the attach replaces in the policy any earlier attachment of the
	// same Pod (a sandbox whose DEL has not come yet): the rule flows then name this
	// ADD's ofport instead of the earlier one's. The undo gives the policy back to that
	// earlier attachment, else the Pod's live sandbox would keep its default deny and
	// lose every rule that admits traffic to or from it.
	var prev *Attachment
	if n.policy != nil {
		prev = n.policy.attachedOf(podKeyOf(a))
	}
	undo = append(undo, undoStep{what: "flows of pod " + a.addrString(), run: func(uctx context.Context) error {
		if n.policy != nil {
			n.policy.detach(a) // its rule flows too; nothing if the attach was undone already
		}
		if err := n.deletePodFlows(uctx, a); err != nil {
			return err
		}
		if prev != nil && prev.key() != a.key() {
			n.mu.Lock()
			live := n.pods[prev.key()]
			n.mu.Unlock()
			if live != nil { // (its DEL waits for this undo: the pod's lock)
				return n.policy.attach(uctx, live)
			}
		}
		return nil
	}})
	flowsDone := make(chan error, 1)
	go func() { flowsDone <- n.installPodFlows(ctx, a) }()
	waitFlows = sync.OnceValue(func() error { return <-flowsDone })

	// 3. The veth pair, pod end born in the pod netns, configured with the reserved
	// address and MAC (nothing outside the pod's netns and the host veth sees it before
	// step 5).
	res, vethErr := n.netns.Setup(podnet.Spec{
		Netns: req.Netns, IfName: req.IfName, HostVeth: a.HostVeth, MTU: a.MTU,
		Addr: a.IPv4(), Gateway: a.Gateway, Addr6: a.IPv6(), Gateway6: a.Gateway6,
		MAC: a.MAC, DisableTxChecksum: n.opts.DatapathType == "netdev",
	})
	step("veth")
	if vethErr == nil {
		undo = append(undo, undoStep{what: "host veth " + a.HostVeth, run: func(context.Context) error {
			return n.netns.Teardown(a.HostVeth, req.Netns, req.IfName)
		}})
	}

	// 4. The lease is durable before the port is attached and before ADD can succeed; on
	// every path its write has ended before the undos run. The "ipam" step is what the
	// write still took after the veth was made.
	leaseErr := durable()
	step("ipam")
	if vethErr != nil {
		if leaseErr != nil {
			n.log.Warn("failed ADD: the IP lease could not be written either", "container_id", req.ContainerID, "error", leaseErr)
		}
		return nil, stepErr("veth", fmt.Errorf("%s: %w", req, vethErr))
	}
	if leaseErr != nil {
		return nil, stepErr("ipam", fmt.Errorf("%s: %w", req, leaseErr))
	}
	if !bytes.Equal(res.ContainerMAC, a.MAC) {
		return nil, stepErr("veth", fmt.Errorf("%s: pod interface %s has MAC %s, not %s its flows name", req, req.IfName, res.ContainerMAC, a.MAC))
	}
	a.HostMAC = res.HostMAC
	a.ContainerIfIndex = res.ContainerIfIndex

	// 5. The OVS port, while the flows of step 2 may still be on their way. The ofport is
	// chosen here (ofport_request, from the half of the range ovs-vswitchd never assigns
	// itself: ovsdb.ReserveOFPort), so the flows go to the switch before ovs-vswitchd
	// adds the port instead of after it: with hundreds of ports on a userspace bridge
	// that saves a whole main-loop iteration of ovs-vswitchd (bench/RESULTS.md). ADD
	// succeeds only once the port has the ofport asked for (or the flows were redone for
	// the one it got) and the flows are confirmed by a barrier (or their bundle's commit).
	//
	// The port's undo is registered before the step starts: a transaction that committed
	// but whose ofport wait ran out of time (vswitchd stuck) still leaves a row to remove.
	// The flows' undo (step 2) deletes by cookie, queued on the OpenFlow connection behind
	// the adds, so a switch that resumes applies both in order even when the wait for
	// its confirmation runs out.
	undo = append(undo, undoStep{what: "OVS port " + a.HostVeth + " on bridge " + n.opts.Bridge, run: func(uctx context.Context) error {
		// A transaction whose answer the ADD gave up waiting for may still commit (a hung
		// ovsdb-server that resumes): once an echo sent after it is answered, the cache
		// shows its outcome, and the delete sees the row if it committed.
		if err := n.portsSettled(uctx); err != nil {
			return err
		}
		return n.ports.DeletePort(uctx, n.opts.Bridge, a.HostVeth)
	}})
	ofport, portErr := n.ports.AddPortWithOFPort(ctx, n.opts.Bridge, a.HostVeth, ofreq, a.externalIDs())
	step("ovsdb")
	flowsErr := waitFlows()
	step("openflow")
	if portErr != nil {
		return nil, stepErr("ovsdb", fmt.Errorf("%s: add port %s to bridge %s: %w", req, a.HostVeth, n.opts.Bridge, portErr))
	}
	if flowsErr == nil && ofport != ofreq {
		// Another interface holds the number. The port's ofport_request is pinned to the
		// ofport it got, else ovs-vswitchd would move the port to the number asked for as
		// soon as the other interface goes, under flows naming the old one; then the flows
		// are redone for it.
		n.log.Warn("ovs-vswitchd did not give the pod's port the ofport asked for (another interface holds it); its ofport_request is set to the one it got and its flows are reinstalled for it",
			"port", a.HostVeth, "ofport_request", ofreq, "ofport", ofport, "container_id", req.ContainerID)
		if ofport, portErr = n.pinOFPort(ctx, a, ofport); portErr != nil {
			step("ovsdb")
			return nil, stepErr("ovsdb", fmt.Errorf("%s: port %s on bridge %s: %w", req, a.HostVeth, n.opts.Bridge, portErr))
		}
		a.OFPort = uint32(ofport)
		flowsErr = n.installPodFlows(ctx, a)
		step("openflow")
		if flowsErr == nil {
			n.recordLeases([]*Attachment{a}) // the lease records the ofport it has now
		}
	}
	if flowsErr != nil {
		return nil, stepErr("openflow", fmt.Errorf("%s: %w", req, flowsErr))
	}

	n.mu.Lock()
	n.pods[key] = a
	n.mu.Unlock()
	return a, nil
}

// DelPod unwires one pod interface (CNI DEL). It is idempotent: it succeeds for container
// IDs never seen, when the netns is empty or already gone, and when called twice. Errors
// are *StepError values naming the step that could not be completed; a retry finishes it.
func (n *Node) DelPod(ctx context.Context, req PodRequest) error {
	if req.ContainerID == "" || req.IfName == "" {
		return errors.New("container ID and interface name are required for DEL")
	}
	unlock, err := n.lockPod(ctx, req)
	if err != nil {
		return err
	}
	defer unlock()

	key := attachmentKey(req.ContainerID, req.IfName)
	hostVeth := podnet.HostVethName(req.ContainerID, req.IfName)
	n.mu.Lock()
	a := n.pods[key]
	n.mu.Unlock()
	if p, ok := n.ports.GetPort(hostVeth); ok {
		pa, ours := attachmentFromPort(p)
		if ours && (pa.ContainerID != req.ContainerID || pa.IfName != req.IfName) {
			// A host-name hash collision (48 bits): the port and veth
			// belong to another attachment and are not touched.
			n.log.Warn("DEL: port with this attachment's host name belongs to another container; leaving it",
				"port", hostVeth, "container_id", req.ContainerID, "owner_container_id", pa.ContainerID)
			hostVeth = ""
		} else if a == nil && ours {
			// Not in memory (e.g. ADD failed half-way before a restart): rebuild from the port.
			a = pa
		}
	}
	lease, leased := n.leases.Get(req.ContainerID, req.IfName)
	if a == nil && leased {
		a = &Attachment{ContainerID: req.ContainerID, IfName: req.IfName, HostVeth: hostVeth, Network: lease.Network,
			IPs: n.leaseNets(lease.IPs), OwnerID: lease.OwnerID}
	}
	n.fillOwnerID(a)
	// Another network's attachment with the same container ID and interface name (its
	// ADD for this network failed on the conflict, and the runtime cleans up): not ours
	// to remove. DEL of this network has nothing to do.
	for _, recorded := range []string{attachmentNetwork(a), lease.Network} {
		if !sameNetwork(recorded, req.Network) {
			n.log.Warn("DEL: the attachment belongs to another network; leaving it",
				"container_id", req.ContainerID, "ifname", req.IfName, "network", req.Network, "attachment_network", recorded)
			return nil
		}
	}
	if n.policy != nil && a != nil {
		// First out of the policy: no policy change rewrites its flows afterwards, and
		// the rule flows naming it go.
		n.policy.detach(a)
	}
	if a != nil && (a.IPv4() != nil || a.OwnerID != 0) {
		if err := n.deletePodFlows(ctx, a); err != nil {
			return stepErr("openflow", fmt.Errorf("%s: %w", req, err))
		}
	}
	// The port and the veth go at once: the kernel's unregistering of the veth pair is most
	// of a DEL (bench/RESULTS.md), and the OVSDB delete need not wait for it, nor it for
	// the delete. DEL returns only once both are gone; a failure of either is returned
	// (the port's first) and a retry finishes what is left.
	portDone := make(chan error, 1)
	go func() {
		if hostVeth == "" {
			portDone <- nil
			return
		}
		portDone <- n.ports.DeletePort(ctx, n.opts.Bridge, hostVeth)
	}()
	vethErr := n.netns.Teardown(hostVeth, req.Netns, req.IfName)
	if err := <-portDone; err != nil {
		return stepErr("ovsdb", fmt.Errorf("%s: delete port %s: %w", req, hostVeth, err))
	}
	if vethErr != nil {
		return stepErr("veth", fmt.Errorf("%s: %w", req, vethErr))
	}
	if err := n.leases.Release(req.ContainerID, req.IfName); err != nil {
		return stepErr("ipam", fmt.Errorf("%s: %w", req, err))
	}
	n.mu.Lock()
	delete(n.pods, key)
	n.mu.Unlock()
	return nil
}

// Bounds of the undo of a failed ADD (undoAdd), independent of the ADD's own deadline,
// which may already have passed.
const (
	// UndoTimeout bounds one attempt of one undo step (removing the ADD's flows, its OVS
	// port, its host veth, its IP lease): 10 seconds.
	UndoTimeout = 10 * time.Second
	// UndoRetryFor is how long an undo step that fails (Open vSwitch down or not
	// answering) is retried, with pauses from 250 ms doubling up to 5 s: 5 minutes. A step
	// still failing then is logged and left to reconciliation (at daemon start and CNI
	// GC: a port whose host veth is gone, a lease with neither; flows of this run that no
	// owner wants go at the next flow audit), and the next step runs.
	UndoRetryFor = 5 * time.Minute
	// UndoWait is how long AddPod waits for the undo of a failed ADD before it returns
	// (never past the ADD's own deadline): 1 second. An undo still running then goes on
	// in the background, holding the pod's lock.
	UndoWait = time.Second

	undoFirstPause = 250 * time.Millisecond
	undoMaxPause   = 5 * time.Second
)

// undoStep is one undo of a failed ADD: what it removes (for the log) and how; run
// returns nil once the object is gone (already gone counts), and is retried otherwise.
type undoStep struct {
	what string
	run  func(ctx context.Context) error
	// last: the step runs only after every other step is done (the IP lease: while the
	// pod's flows may still be on the switch, its address must not be handed out again).
	last bool
}

// undoAdd runs the undo steps of a failed ADD (flows, port and veth at once, then the
// lease), each retried until done (undoRetry), then runs finally (the pod's unlock, the
// ofport's release). It waits for that at most UndoWait and not past ctx; then it
// returns addErr and the undo goes on in the background.
func (n *Node) undoAdd(ctx context.Context, req PodRequest, steps []undoStep, finally []func(), addErr error) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(finally) - 1; i >= 0; i-- {
				finally[i]()
			}
		}()
		// Steps that do not wait for each other run at once, so a stuck ovs-vswitchd (the
		// flows' delete) does not keep the OVS port or the host veth, and a stuck
		// ovsdb-server does not keep the flows; the ofport stays held (finally) until all
		// are done, so no new port takes it while the pod's flows may remain. Steps marked
		// last (the IP lease) run after all of them.
		var wg sync.WaitGroup
		var lasts []undoStep
		for i := len(steps) - 1; i >= 0; i-- {
			if steps[i].last {
				lasts = append(lasts, steps[i])
				continue
			}
			wg.Add(1)
			go func(s undoStep) { defer wg.Done(); n.undoRetry(req, s) }(steps[i])
		}
		wg.Wait()
		for _, s := range lasts {
			n.undoRetry(req, s)
		}
	}()
	t := time.NewTimer(UndoWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		n.log.Warn("failed ADD: its undo goes on in the background (Open vSwitch slow or not answering); operations on the pod wait for it",
			"container_id", req.ContainerID, "pod", req.PodNamespace+"/"+req.PodName, "error", addErr)
	case <-ctx.Done():
		select {
		case <-done:
		default:
			n.log.Warn("failed ADD: answered at its deadline, its undo goes on in the background (Open vSwitch slow or not answering); operations on the pod wait for it",
				"container_id", req.ContainerID, "pod", req.PodNamespace+"/"+req.PodName, "error", addErr)
		}
	}
	return addErr
}

// undoRetry runs one undo step until it succeeds: each attempt bounded by UndoTimeout,
// pauses from undoFirstPause doubling up to undoMaxPause, for up to UndoRetryFor. Once
// the node is closing each step gets one last attempt.
func (n *Node) undoRetry(req PodRequest, s undoStep) {
	start := time.Now()
	pause := undoFirstPause
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(context.Background(), UndoTimeout)
		err := s.run(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				n.log.Info("failed ADD: removed its "+s.what, "container_id", req.ContainerID, "attempts", attempt,
					"after", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		if time.Since(start)+pause > UndoRetryFor {
			n.log.Error("failed ADD: gave up removing its "+s.what+"; reconciliation (daemon start, CNI GC) or the flow audit removes it",
				"container_id", req.ContainerID, "attempts", attempt, "after", time.Since(start).Round(time.Millisecond), "error", err)
			return
		}
		lvl := slog.LevelDebug
		if attempt == 1 || attempt%10 == 0 {
			lvl = slog.LevelWarn
		}
		n.log.Log(context.Background(), lvl, "failed ADD: cannot remove its "+s.what+" yet, retrying",
			"container_id", req.ContainerID, "attempt", attempt, "retry_in", pause, "error", err)
		t := time.NewTimer(pause)
		select {
		case <-n.stop:
			t.Stop()
			actx, cancel := context.WithTimeout(context.Background(), UndoTimeout)
			err := s.run(actx)
			cancel()
			if err != nil {
				n.log.Warn("failed ADD: node closing, its "+s.what+" is left to reconciliation at the next start",
					"container_id", req.ContainerID, "error", err)
			}
			return
		case <-t.C:
		}
		pause = min(2*pause, undoMaxPause)
	}
}

// portsSettled waits until the OVSDB session has answered every transaction sent before
// (ovsdb.Client.Echo); a port store without such a barrier (the unit tests' fakes)
// settles at once.
func (n *Node) portsSettled(ctx context.Context) error {
	if e, ok := n.ports.(interface{ Echo(context.Context) error }); ok {
		return ovsUnavailable(e.Echo(ctx))
	}
	return nil
}

// lockPod serialises operations on one pod: it takes the lock of the pod's
// namespace/name (when CNI_ARGS named it), then the lock of the container ID,
// always in that order. Operations on other pods are not blocked, and no
// global lock is held while waiting on OVS. Waiting honours ctx: when ctx
// ends first, lockPod returns an error saying another operation on the pod
// is still running (the abandoned lock is released as soon as it is granted).
func (n *Node) lockPod(ctx context.Context, req PodRequest) (func(), error) {
	var unlocks []func()
	unlockAll := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	keys := []string{"container:" + req.ContainerID}
	if req.PodName != "" {
		keys = []string{"pod:" + req.PodNamespace + "/" + req.PodName, keys[0]}
	}
	for _, k := range keys {
		u, err := n.lockCtx(ctx, k)
		if err != nil {
			unlockAll()
			return nil, fmt.Errorf("%s: another operation on this pod is still running: %w", req, err)
		}
		unlocks = append(unlocks, u)
	}
	return unlockAll, nil
}

// lockCtx takes n.locks' lock of key, or gives up when ctx ends.
func (n *Node) lockCtx(ctx context.Context, key string) (func(), error) {
	got := make(chan func(), 1)
	go func() { got <- n.locks.Lock(key) }()
	select {
	case u := <-got:
		return u, nil
	case <-ctx.Done():
		go func() { (<-got)() }()
		return nil, ctx.Err()
	}
}

// stepTimer returns a function that reports the time since the previous call (or since
// stepTimer) to Hooks.AddStep under the given step name.
func (n *Node) stepTimer() func(step string) {
	last := time.Now()
	return func(step string) {
		now := time.Now()
		if n.opts.Hooks.AddStep != nil {
			n.opts.Hooks.AddStep(step, now.Sub(last))
		}
		last = now
	}
}

// attachmentNetwork returns a's network, "" for nil.
func attachmentNetwork(a *Attachment) string {
	if a == nil {
		return ""
	}
	return a.Network
}

// pinOFPort sets the ofport_request of a's port to ofport, the number ovs-vswitchd gave
// it instead of the one asked for, and returns the port's ofport once it holds its
// request. If the port moves meanwhile (the number asked for came free), it pins the new
// one, up to three times; then the error says the ofport keeps changing.
func (n *Node) pinOFPort(ctx context.Context, a *Attachment, ofport int) (int, error) {
	for range 3 {
		got, err := n.ports.AddPortWithOFPort(ctx, n.opts.Bridge, a.HostVeth, ofport, a.externalIDs())
		if err != nil {
			return 0, err
		}
		if got == ofport {
			return got, nil
		}
		ofport = got
	}
	return 0, fmt.Errorf("its ofport keeps changing (last %d): another controller is requesting ofports in %d..%d on this bridge; ADD again", ofport, ovsdb.MinChosenOFPort, ovsdb.MaxOFPortRequest)
}

// installPodFlows installs a's flows on its ofport, confirmed by a barrier: with network
// policy, its forwarding, default-deny and the rule flows it brings in one bundle
// (policyRealizer.attach); without, its forwarding flows (flows.PodFlows).
func (n *Node) installPodFlows(ctx context.Context, a *Attachment) error {
	if n.policy != nil {
		return n.policy.attach(ctx, a)
	}
	return n.owners.SetOwner(ctx, a.owner(), flows.PodFlows(n.config(), a.flowPod()))
}

// deletePodFlows removes the attachment's flows, by its owner's cookie.
func (n *Node) deletePodFlows(ctx context.Context, a *Attachment) error {
	return n.owners.DeleteOwner(ctx, a.owner())
}

// CheckPod verifies an attachment (CNI CHECK): the interface, address and default route
// inside the netns, the OVS port and its ofport, and every desired flow of the pod on the
// switch. The error names what is missing.
//
// wantIPs are the addresses of the runtime's prevResult (nil without one): each must be
// one of the pod's. Every address of the pod (both families on a dual-stack node) is
// checked in the netns with its family's default route.
func (n *Node) CheckPod(ctx context.Context, req PodRequest, wantIPs []*net.IPNet) error {
	n.mu.Lock()
	a := n.pods[attachmentKey(req.ContainerID, req.IfName)]
	n.mu.Unlock()
	if a == nil {
		return stepErr("check", fmt.Errorf("%s: no attachment for interface %s; run ADD first", req, req.IfName))
	}
	if !sameNetwork(a.Network, req.Network) {
		return stepErr("check", fmt.Errorf("%s: interface %s is attached to network %q, not %q", req, req.IfName, a.Network, req.Network))
	}
	for _, w := range wantIPs {
		if w != nil && !slices.ContainsFunc(a.IPs, func(ip *net.IPNet) bool { return ip != nil && ip.IP.Equal(w.IP) }) {
			return stepErr("check", fmt.Errorf("%s: prevResult has IP %s but the pod was given %s", req, w, a.addrString()))
		}
	}
	if err := n.netns.Check(req.Netns, req.IfName, a.expects(), a.MAC); err != nil {
		return stepErr("check", fmt.Errorf("%s: %w", req, err))
	}
	p, ok := n.ports.GetPort(a.HostVeth)
	if !ok {
		return stepErr("check", fmt.Errorf("%s: OVS port %s is missing from bridge %s", req, a.HostVeth, n.opts.Bridge))
	}
	if p.OFPort != int(a.OFPort) {
		return stepErr("check", fmt.Errorf("%s: OVS port %s has ofport %d, flows use %d", req, a.HostVeth, p.OFPort, a.OFPort))
	}
	want, _ := n.owners.Owner(a.owner())
	cookie, mask := a.owner().Cookie()
	got, err := n.sw.DumpFlows(ctx, openflow.TableAll, cookie, mask)
	if err != nil {
		return stepErr("check", fmt.Errorf("%s: dump flows: %w", req, err))
	}
	if len(got) != len(want) {
		return stepErr("check", fmt.Errorf("%s: the switch has %d of the pod's %d flows (cookie %#x)", req, len(got), len(want), cookie))
	}
	return nil
}

// Pods returns the local attachments.
func (n *Node) Pods() []*Attachment {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Attachment, 0, len(n.pods))
	for _, a := range n.pods {
		out = append(out, a)
	}
	return out
}

// Status reports whether the node can serve ADD (CNI STATUS): the OpenFlow and OVSDB
// connections are up, ovs-vswitchd and ovsdb-server answer echoes (Health: a hung one
// fails STATUS within HealthProbeInterval + HealthProbeTimeout) and the IP pool has a free
// address. The error says which is not.
func (n *Node) Status() error {
	select {
	case <-n.sw.Done():
		return fmt.Errorf("OpenFlow connection to bridge %s is down: %v", n.opts.Bridge, n.sw.Err())
	default:
	}
	if !n.db.Connected() {
		return fmt.Errorf("OVSDB connection is down; is ovsdb-server running?")
	}
	// Connected is not answering: a hung ovsdb-server or ovs-vswitchd keeps its socket,
	// and every ADD would wait for its deadline and fail.
	if n.health != nil {
		if ofErr, dbErr := n.health.Errs(); dbErr != nil {
			return dbErr
		} else if ofErr != nil {
			return ofErr
		}
	}
	if n.leases.InUse() >= n.leases.Capacity() {
		return fmt.Errorf("IP pools %v exhausted (%d in use): delete unused pods or give the node a larger pod subnet", n.podSubnets(), n.leases.InUse())
	}
	return nil
}

// AttachmentID identifies one attachment for GC: container ID and interface name.
type AttachmentID struct{ ContainerID, IfName string }

// GC removes the attachments of network that are not in valid (CNI GC, spec 1.1 "GC:
// Clean up any stale resources"; network is the netconf's "name", valid its
// "cni.dev/valid-attachments"): known pods, ports with our external_ids and IP leases
// alike, each only when its records name network (planGC, scope.go). Attachments of other
// networks are never touched; those recorded without a network are kept and logged.
// Then it removes the network's broken attachments (reconcile). The caller must not call
// it for a GC without a valid list: that would declare every attachment of the network
// stale. It returns the first error after trying all of them.
func (n *Node) GC(ctx context.Context, network string, valid []AttachmentID) error {
	known := map[AttachmentID][]string{}
	reqs := map[AttachmentID]PodRequest{}
	note := func(id AttachmentID, netns, recorded string) {
		known[id] = append(known[id], recorded)
		if r, ok := reqs[id]; !ok || r.Netns == "" {
			reqs[id] = PodRequest{ContainerID: id.ContainerID, IfName: id.IfName, Netns: netns, Network: network}
		}
	}
	for _, a := range n.Pods() {
		note(AttachmentID{a.ContainerID, a.IfName}, a.Netns, a.Network)
	}
	for _, p := range n.ports.ListPorts(n.opts.Bridge) {
		if a, ok := attachmentFromPort(p); ok {
			note(AttachmentID{a.ContainerID, a.IfName}, a.Netns, a.Network)
		}
	}
	for _, l := range n.leases.List() {
		note(AttachmentID{l.ContainerID, l.IfName}, "", l.Network)
	}
	plan := planGC(network, valid, known)
	for _, id := range plan.Unscoped {
		n.log.Info("GC keeps attachment recorded without a network name (from an older ofsdn): it may belong to another network; DEL it if it is stale",
			"network", network, "container_id", id.ContainerID, "ifname", id.IfName)
	}
	var firstErr error
	for _, id := range plan.Remove {
		n.log.Info("GC removes attachment", "network", network, "container_id", id.ContainerID, "ifname", id.IfName)
		if err := n.DelPod(ctx, reqs[id]); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	// Valid attachments of the network that are broken anyway (veth gone, lease alone).
	if _, err := n.reconcile(ctx, network); err != nil && firstErr == nil {
		firstErr = err
	}
	return ovsUnavailable(firstErr)
}

func (a *Attachment) externalIDs() map[string]string {
	ids := map[string]string{
		ExtIDContainerID:  a.ContainerID,
		ExtIDIfName:       a.IfName,
		ExtIDPodNamespace: a.PodNamespace,
		ExtIDPodName:      a.PodName,
		ExtIDMAC:          a.MAC.String(),
		ExtIDNetns:        a.Netns,
	}
	if v4 := a.IPv4(); v4 != nil {
		ids[ExtIDIP] = v4.String()
	}
	if v6 := a.IPv6(); v6 != nil {
		ids[ExtIDIPv6] = v6.String()
	}
	if a.Network != "" {
		ids[ExtIDNetwork] = a.Network
	}
	if a.OwnerID != 0 {
		ids[ExtIDOwnerID] = strconv.FormatUint(uint64(a.OwnerID), 10)
	}
	return ids
}

// attachmentFromPort rebuilds an attachment from a port's external_ids; ok is false for
// ports that are not ours.
func attachmentFromPort(p ovsdb.PortInfo) (*Attachment, bool) {
	e := p.ExternalIDs
	cid := e[ExtIDContainerID]
	if cid == "" {
		return nil, false
	}
	var ips []*net.IPNet
	if ip, ipnet, err := net.ParseCIDR(e[ExtIDIP]); err == nil && ip.To4() != nil {
		ips = append(ips, &net.IPNet{IP: ip.To4(), Mask: ipnet.Mask})
	}
	if ip6, net6, err := net.ParseCIDR(e[ExtIDIPv6]); err == nil && ip6.To4() == nil {
		ips = append(ips, &net.IPNet{IP: ip6, Mask: net6.Mask})
	}
	if len(ips) == 0 {
		return nil, false
	}
	mac, _ := net.ParseMAC(e[ExtIDMAC])
	a := &Attachment{
		ContainerID: cid, IfName: e[ExtIDIfName], Netns: e[ExtIDNetns],
		PodNamespace: e[ExtIDPodNamespace], PodName: e[ExtIDPodName], Network: e[ExtIDNetwork],
		HostVeth: p.Name, IPs: ips, MAC: mac,
	}
	if id, err := strconv.ParseUint(e[ExtIDOwnerID], 10, 32); err == nil && id != 0 {
		a.OwnerID = uint32(id)
	}
	if p.OFPort > 0 {
		a.OFPort = uint32(p.OFPort)
	}
	return a, true
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
