package ovsdb

// Chosen ofports.
//
// A pod's flows name its ofport (in_port matches, output actions). When ovs-vswitchd picks
// the number, the flows can only be sent once it has added the port and written the
// number back, one main-loop iteration after its reconfiguration, and at hundreds of
// ports on a userspace bridge that iteration is itself the next pod's reconfiguration
// (bench/RESULTS.md). When the controller picks the number (Interface ofport_request,
// vswitch.ovsschema), the flows go to the switch while ovs-vswitchd adds the port.
//
// The numbers come from the upper half of the ofport range, [MinChosenOFPort,
// MaxOFPortRequest]: ovs-vswitchd's own allocation stays below 32768 ("we limit the
// automatically assigned port numbers to the lower half of the port range, to reserve the
// upper half for assignment by controllers", ofproto.c alloc_ofp_port), so a chosen number
// can only be taken first by another controller that requests it. ovs-vswitchd honours a
// request unless the number is taken; the caller compares the ofport it gets with the one
// it asked for (EnsurePort returns the real one).

import (
	"fmt"

	"github.com/ofsdn/ofsdn/ovsdb/vswitchd"
)

// MinChosenOFPort is the lowest ofport ReserveOFPort hands out: 32768, the first number
// of the upper half that ovs-vswitchd never assigns by itself.
const MinChosenOFPort = 32768

// ReserveOFPort chooses an ofport for the interface called name, to be asked for with
// PortSpec.OFPortRequest, and holds it for name until release is called. Call release
// once EnsurePort has returned (the cache then shows the row's ofport_request, or the row
// is gone), or when the port is not added after all; release is idempotent.
//
// An interface of that name already in the cache keeps its number: its ofport_request,
// else its ofport, when set. Otherwise the number is the next one after the last handed
// out, in [MinChosenOFPort, MaxOFPortRequest] and wrapping, that no interface in the
// cache uses as ofport or ofport_request (on any bridge) and no other caller holds, so a
// number freed by a deleted pod is not reused until the range has gone round. The first
// choice after Connect starts after the highest number in use in the range. The error
// says the range is exhausted (32,512 numbers, each in use or held).
func (c *Client) ReserveOFPort(name string) (ofport int, release func(), err error) {
	used := map[int]bool{}
	for _, m := range c.rows(tableInterface) {
		ifc := m.(*vswitchd.Interface)
		if ifc.Name == name {
			if ifc.OfportRequest != nil && *ifc.OfportRequest > 0 {
				return *ifc.OfportRequest, func() {}, nil
			}
			if ifc.Ofport != nil && *ifc.Ofport > 0 && *ifc.Ofport <= MaxOFPortRequest {
				return *ifc.Ofport, func() {}, nil
			}
			continue
		}
		for _, p := range []*int{ifc.Ofport, ifc.OfportRequest} {
			if p != nil && *p >= MinChosenOFPort && *p <= MaxOFPortRequest { // not 65534, the local port
				used[*p] = true
			}
		}
	}

	c.ofportMu.Lock()
	defer c.ofportMu.Unlock()
	if c.ofportHeld == nil {
		c.ofportHeld = map[int]string{}
		for n := range used {
			c.ofportNext = max(c.ofportNext, n)
		}
	}
	const span = MaxOFPortRequest - MinChosenOFPort + 1
	n := c.ofportNext
	for range span {
		n++
		if n < MinChosenOFPort || n > MaxOFPortRequest {
			n = MinChosenOFPort
		}
		if used[n] {
			continue
		}
		if _, held := c.ofportHeld[n]; held {
			continue
		}
		c.ofportHeld[n] = name
		c.ofportNext = n
		var done bool
		return n, func() {
			c.ofportMu.Lock()
			defer c.ofportMu.Unlock()
			if !done && c.ofportHeld[n] == name {
				delete(c.ofportHeld, n)
			}
			done = true
		}, nil
	}
	return 0, func() {}, fmt.Errorf("ovsdb: no free ofport for interface %s in %d..%d: every number is in use or held; delete unused ports",
		name, MinChosenOFPort, MaxOFPortRequest)
}

// HoldOFPort holds the given ofport for the interface called name until release is
// called, like ReserveOFPort but for a number the caller chose: the one a lost port had,
// so that a port re-created after the OVS database lost it (or after a daemon restart on
// an empty database) gets the ofport its flows name. Call release as with ReserveOFPort;
// it is idempotent. Holding a number name already holds, or one name's own interface in
// the cache has, succeeds. Errors: ofport outside 1..MaxOFPortRequest; another interface
// in the cache uses the number (as ofport or ofport_request); another name holds it.
func (c *Client) HoldOFPort(name string, ofport int) (release func(), err error) {
	if ofport < 1 || ofport > MaxOFPortRequest {
		return func() {}, fmt.Errorf("ovsdb: ofport %d for interface %s is outside 1..%d", ofport, name, MaxOFPortRequest)
	}
	highest := 0 // the highest chosen number in use, as ReserveOFPort's first choice counts it
	for _, m := range c.rows(tableInterface) {
		ifc := m.(*vswitchd.Interface)
		for _, p := range []*int{ifc.Ofport, ifc.OfportRequest} {
			if p == nil {
				continue
			}
			if ifc.Name != name && *p == ofport {
				return func() {}, fmt.Errorf("ovsdb: ofport %d for interface %s: interface %s uses it", ofport, name, ifc.Name)
			}
			if *p >= MinChosenOFPort && *p <= MaxOFPortRequest {
				highest = max(highest, *p)
			}
		}
	}
	c.ofportMu.Lock()
	defer c.ofportMu.Unlock()
	if c.ofportHeld == nil {
		c.ofportHeld = map[int]string{}
		c.ofportNext = max(c.ofportNext, highest)
	}
	if ofport >= MinChosenOFPort {
		// Numbers chosen later start after the held one, as after one ReserveOFPort chose.
		c.ofportNext = max(c.ofportNext, ofport)
	}
	if other, held := c.ofportHeld[ofport]; held {
		if other == name {
			return func() {}, nil
		}
		return func() {}, fmt.Errorf("ovsdb: ofport %d for interface %s: held for interface %s", ofport, name, other)
	}
	c.ofportHeld[ofport] = name
	var done bool
	return func() {
		c.ofportMu.Lock()
		defer c.ofportMu.Unlock()
		if !done && c.ofportHeld[ofport] == name {
			delete(c.ofportHeld, ofport)
		}
		done = true
	}, nil
}
