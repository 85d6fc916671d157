package controller

// The node's collaborators in pod wiring, each behind the small interface the pod logic
// (pods.go, reconcile.go) needs: the OVS ports of pod attachments (OVSDB), the desired
// flows per owner (switchstate.Store), the IP leases (IPAM) and the pod netns plumbing (netlink).
// StartNode wires the real ones; unit tests wire fakes and check the decisions AddPod,
// DelPod, GC and reconciliation take (undo order, idempotence, what is kept), while the
// tests against a real OVS and real namespaces (test/e2e, bench) check the real ones.

import (
	"context"
	"net"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

// portDB holds the OVS ports of pod attachments: *ovsdb.Client.
type portDB interface {
	// ReserveOFPort chooses the ofport to ask for for interface name and holds it until
	// release (ovsdb.Client.ReserveOFPort).
	ReserveOFPort(name string) (ofport int, release func(), err error)
	// HoldOFPort holds the given ofport for interface name until release, for a port
	// re-created with the ofport it had (ovsdb.Client.HoldOFPort); the error says another
	// interface uses or holds it.
	HoldOFPort(name string, ofport int) (release func(), err error)
	// AddPortWithOFPort adds port name to bridge with the attachment's Interface
	// external_ids and ofport_request in one transaction and returns the ofport
	// ovs-vswitchd assigned, which may differ from the request
	// (ovsdb.Client.AddPortWithOFPort). On error the row may exist (committed, ofport
	// not seen in time): the caller removes it.
	AddPortWithOFPort(ctx context.Context, bridge, name string, ofportRequest int, externalIDs map[string]string) (int, error)
	// DeletePort removes port name from bridge; a missing port is not an error.
	DeletePort(ctx context.Context, bridge, name string) error
	// GetPort returns the port called name from the monitor cache.
	GetPort(name string) (ovsdb.PortInfo, bool)
	// ListPorts returns the ports of bridge from the monitor cache.
	ListPorts(bridge string) []ovsdb.PortInfo
}

// flowOwners holds the desired flows of each pod attachment: the node's switchstate.Store.
type flowOwners interface {
	// SetOwner makes the switch hold exactly fs for owner (switchstate.Store.SetOwner).
	SetOwner(ctx context.Context, owner flows.Owner, fs []flows.Flow) error
	// DeleteOwner removes every flow of owner by its cookie; an unknown owner is not an
	// error (switchstate.Store.DeleteOwner).
	DeleteOwner(ctx context.Context, owner flows.Owner) error
	// Owner returns owner's desired flows and whether it is known.
	Owner(owner flows.Owner) ([]flows.Flow, bool)
}

// leaseStore hands out the pod subnet's addresses: *ipam.Store.
type leaseStore interface {
	// ReserveLease leases an address to (want.ContainerID, want.IfName) of CNI network
	// want.Network in memory, recording want's owner and attachment record (netns, host
	// veth, ofport), and returns it with durable, which waits for the lease's write to
	// disk and returns its error; after an error the lease is gone
	// (ipam.Store.ReserveLease). The address must not be attached or returned before
	// durable returned nil.
	ReserveLease(want ipam.Lease) (ips []net.IP, durable func() error, err error)
	// Record replaces the attachment records of existing leases, in one durable write
	// (ipam.Store.Record).
	Record(updates []ipam.Lease) error
	// Release frees the lease of (containerID, ifName); none is not an error.
	Release(containerID, ifName string) error
	// Get returns the lease of (containerID, ifName), with the network it was made for.
	Get(containerID, ifName string) (ipam.Lease, bool)
	// List returns every lease.
	List() []ipam.Lease
	// InUse is the number of leases; Capacity the number of leases the pools can hold
	// (each lease takes one address of every pool: the smallest pool's size).
	InUse() int
	Capacity() int
}

// podPlumbing wires pod network namespaces: package podnet (netlink).
type podPlumbing interface {
	// Setup creates the veth pair with the pod end in the pod's netns and configures it
	// (podnet.Setup).
	Setup(spec podnet.Spec) (podnet.Result, error)
	// Teardown deletes the host veth (and with it the pod end); one already gone is not an
	// error (podnet.Teardown).
	Teardown(hostVeth, netnsPath, ifName string) error
	// HostVethExists reports whether the host end called name exists.
	HostVethExists(name string) bool
	// IsolateHostEnd keeps the host's IP stack off the host end called name
	// (podnet.IsolateHostEnd), for pods restored from a daemon that did not.
	IsolateHostEnd(name string) error
	// Check verifies the pod interface's address, default route and MAC (podnet.Check).
	Check(netnsPath, ifName string, want []podnet.Expect, mac net.HardwareAddr) error
}

// netlinkPlumbing is podPlumbing with package podnet.
type netlinkPlumbing struct{}

func (netlinkPlumbing) Setup(spec podnet.Spec) (podnet.Result, error) { return podnet.Setup(spec) }
func (netlinkPlumbing) Teardown(hostVeth, netnsPath, ifName string) error {
	return podnet.Teardown(hostVeth, netnsPath, ifName)
}
func (netlinkPlumbing) HostVethExists(name string) bool  { return podnet.HostVethExists(name) }
func (netlinkPlumbing) IsolateHostEnd(name string) error { return podnet.IsolateHostEnd(name) }
func (netlinkPlumbing) Check(netnsPath, ifName string, want []podnet.Expect, mac net.HardwareAddr) error {
	return podnet.Check(netnsPath, ifName, want, mac)
}
