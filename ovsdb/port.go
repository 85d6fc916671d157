package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	libovsdb "github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ofsdn/ofsdn/ovsdb/vswitchd"
)

// MaxOFPortRequest is the largest ofport number that may be requested: the schema
// allows Interface.ofport_request 1..65279, since Open vSwitch keeps ofports below the
// reserved range that starts at 0xff00 (OFPP_MAX in the 16-bit OpenFlow 1.0 numbering).
const MaxOFPortRequest = 65279

// PortSpec is the desired state of one port with a single interface of the same name.
type PortSpec struct {
	// Bridge the port belongs to; it must exist (EnsureBridge).
	Bridge string
	// Name of both the Port and its Interface. For TypeSystem and TypeInternal it is a
	// network device name, 1..15 bytes.
	Name string
	// Type is the Interface type: TypeSystem ("", an existing device such as a pod veth's
	// host end), TypeInternal, or a tunnel type such as "vxlan" or "geneve".
	Type string
	// ExternalIDs are set on the Interface's external_ids, key by key (other keys are
	// kept on an existing interface). ofsdn stores the pod identity here.
	ExternalIDs map[string]string
	// Options replace the Interface's options when non-nil and different (tunnels:
	// "remote_ip", "key", "dst_port"...).
	Options map[string]string
	// OFPortRequest asks ovs-vswitchd for this ofport number, 1..MaxOFPortRequest;
	// 0 lets it choose.
	OFPortRequest int
}

func (s *PortSpec) validate() error {
	if s.Bridge == "" {
		return fmt.Errorf("ovsdb: port %q: no bridge given", s.Name)
	}
	if s.Name == "" {
		return fmt.Errorf("ovsdb: port on bridge %s: empty port name", s.Bridge)
	}
	if (s.Type == TypeSystem || s.Type == TypeInternal) && len(s.Name) > 15 {
		return fmt.Errorf("ovsdb: port %q: a network device name has at most 15 bytes", s.Name)
	}
	if s.OFPortRequest < 0 || s.OFPortRequest > MaxOFPortRequest {
		return fmt.Errorf("ovsdb: port %s: ofport_request %d: want 1..%d, or 0 for any", s.Name, s.OFPortRequest, MaxOFPortRequest)
	}
	return nil
}

// PortInfo is a port as the cache shows it (one interface of the same name, the usual
// case; for a port with several interfaces, the first).
type PortInfo struct {
	// Name of the port and its interface.
	Name string
	// Bridge holding the port ("" if none references it).
	Bridge string
	// OFPort is the OpenFlow port number ovs-vswitchd assigned: 1..65279 for ordinary
	// ports, 65534 (OFPP_LOCAL) for the bridge's local port, 0 while not yet assigned,
	// -1 when ovs-vswitchd could not open the interface (see Error).
	OFPort int
	// Type is the Interface type ("" for a system device, "internal", "vxlan"...).
	Type string
	// ExternalIDs of the Interface (a copy).
	ExternalIDs map[string]string
	// Error is the Interface's "error" column: why ovs-vswitchd could not open it.
	Error string
	// MAC is the Interface's mac_in_use ("aa:bb:cc:dd:ee:ff"), "" until known.
	MAC string
}

// InterfaceError reports that ovs-vswitchd could not open an interface: it set ofport to
// -1 and wrote the reason into the Interface's "error" column.
type InterfaceError struct {
	Bridge, Interface string
	// Reason is the Interface "error" column, e.g. "could not open network device x (No
	// such device)".
	Reason string
}

// Error names the interface, its bridge and ovs-vswitchd's reason (Interface.error).
func (e *InterfaceError) Error() string {
	return fmt.Sprintf("ovsdb: interface %s on bridge %s: ovs-vswitchd could not open it (ofport -1): %s",
		e.Interface, e.Bridge, e.Reason)
}

// AddPort attaches an existing network device (the host end of a pod's veth pair) to
// bridge as a port of type system, with externalIDs on its Interface, and returns the
// ofport ovs-vswitchd assigned (1..65279). See EnsurePort for the transaction, the wait
// and the errors. It is idempotent: for a port already on bridge it only updates the
// external_ids and returns the ofport.
func (c *Client) AddPort(ctx context.Context, bridge, name string, externalIDs map[string]string) (int, error) {
	return c.AddPortWithOFPort(ctx, bridge, name, 0, externalIDs)
}

// AddPortWithOFPort is AddPort asking ovs-vswitchd for ofport ofportRequest
// (1..MaxOFPortRequest, Interface ofport_request; 0 lets it choose), e.g. one chosen with
// ReserveOFPort. It returns the ofport ovs-vswitchd assigned, which differs from the
// request when another interface holds that number: the caller must compare them.
func (c *Client) AddPortWithOFPort(ctx context.Context, bridge, name string, ofportRequest int, externalIDs map[string]string) (int, error) {
	return c.EnsurePort(ctx, PortSpec{Bridge: bridge, Name: name, Type: TypeSystem, ExternalIDs: externalIDs, OFPortRequest: ofportRequest})
}

// EnsureInternalPort makes sure bridge has an internal port name (ovs-vswitchd creates
// its network device; on the userspace datapath a tap device) with externalIDs on its
// Interface, and returns its ofport (1..65279, or 65534 for the bridge's own local port).
// See EnsurePort for the transaction, the wait and the errors.
func (c *Client) EnsureInternalPort(ctx context.Context, bridge, name string, externalIDs map[string]string) (int, error) {
	return c.EnsurePort(ctx, PortSpec{Bridge: bridge, Name: name, Type: TypeInternal, ExternalIDs: externalIDs})
}

// EnsurePort makes sure spec.Bridge has the port spec describes and returns the ofport
// ovs-vswitchd assigned to its interface.
//
// A missing port is created in ONE transaction (RFC 7047 §4.1.3) with named UUIDs:
// insert (§5.2.1) the Interface and the Port, and mutate (§5.2.4) Bridge.ports to insert
// the Port. That transaction may also carry the port changes of concurrent callers (group
// commit, commit.go); it is this call's operations alone that decide its result. An existing port on the same bridge gets its Interface type, options and
// ofport_request updated (§5.2.3) when they differ and its external_ids mutated key by
// key; an existing port whose interface has ofport -1 (e.g. a stale row for a device that
// was re-created) is replaced in the same transaction.
//
// Then it waits, on the monitor cache (a cache event handler wakes it when the Interface
// row changes; nothing is polled), until ovs-vswitchd sets the interface's ofport, bounded
// by ctx (or Options.WaitTimeout when ctx has no deadline).
//
// Errors: invalid spec; no such bridge; the port already on another bridge; a failed
// transaction; *InterfaceError when ovs-vswitchd sets ofport -1 (the device does not
// exist, for instance), naming the interface and its "error" column; a timeout naming
// the interface when ovs-vswitchd never assigns an ofport. On those last two, a port that
// this call created is deleted again.
func (c *Client) EnsurePort(ctx context.Context, spec PortSpec) (int, error) {
	if c.isClosed() {
		return 0, ErrClosed
	}
	if err := spec.validate(); err != nil {
		return 0, err
	}
	br := c.bridgeRow(spec.Bridge)
	if br == nil {
		return 0, fmt.Errorf("ovsdb: add port %s: bridge %s does not exist (create it with EnsureBridge first)", spec.Name, spec.Bridge)
	}
	what := fmt.Sprintf("add port %s to bridge %s", spec.Name, spec.Bridge)

	var ops []libovsdb.Operation
	created := false
	port := c.portRow(spec.Name)
	ifc := c.interfaceRow(spec.Name)
	if port != nil {
		if owner := c.bridgeOfPort(port.UUID); owner != "" && owner != spec.Bridge {
			return 0, fmt.Errorf("ovsdb: %s: the port is already on bridge %s (delete it there first)", what, owner)
		}
		if ifc == nil || !contains(port.Interfaces, ifc.UUID) {
			return 0, fmt.Errorf("ovsdb: %s: port %s exists without an interface of the same name", what, spec.Name)
		}
	}
	if port != nil && ifc.Ofport != nil && *ifc.Ofport == -1 {
		c.log.Info("replacing port whose interface failed", "port", spec.Name, "bridge", spec.Bridge, "error", deref(ifc.Error))
		delOps, err := c.deletePortOps(spec.Bridge, port.UUID)
		if err != nil {
			return 0, fmt.Errorf("ovsdb: %s: %w", what, err)
		}
		ops = append(ops, delOps...)
		port = nil
	}
	mutateIdx := -1
	if port == nil {
		createOps, err := c.createPortOps(spec)
		if err != nil {
			return 0, fmt.Errorf("ovsdb: %s: %w", what, err)
		}
		ops = append(ops, createOps...)
		mutateIdx = len(ops) - 1
		created = true
	} else {
		updOps, err := c.updateInterfaceOps(spec, ifc)
		if err != nil {
			return 0, fmt.Errorf("ovsdb: %s: %w", what, err)
		}
		ops = append(ops, updOps...)
	}
	settle := func() {}
	if len(ops) > 0 {
		// Port changes of concurrent callers share one transaction (commit.go).
		res, s, err := c.commit.submit(ctx, what, ops)
		if err != nil {
			return 0, err
		}
		settle = s
		if mutateIdx >= 0 && res[mutateIdx].Count == 0 {
			// The Port and Interface, referenced by nothing, were garbage collected.
			settle()
			// The database was replaced or the bridge removed under us (an OVS database
			// lost, issue 20): the node re-creates the bridge; the runtime should retry.
			return 0, fmt.Errorf("ovsdb: %s: bridge %s was deleted meanwhile (the daemon re-creates it): %w", what, spec.Bridge, ErrUnavailable)
		}
	}

	ofport, err := c.waitOFPort(ctx, spec)
	settle()
	if err != nil {
		if created {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if derr := c.DeletePort(cctx, spec.Bridge, spec.Name); derr != nil {
				c.log.Warn("could not delete the port after its failure", "port", spec.Name, "bridge", spec.Bridge, "err", derr)
			}
			cancel()
		}
		return 0, err
	}
	if created {
		c.log.Info("port added", "port", spec.Name, "bridge", spec.Bridge, "type", spec.Type, "ofport", ofport)
	}
	return ofport, nil
}

func (c *Client) createPortOps(spec PortSpec) ([]libovsdb.Operation, error) {
	// Named UUIDs are scoped to one transaction, which may carry other callers' ports.
	n := c.uuidSeq.Add(1)
	ifaceID := fmt.Sprintf("ofsdn_iface%d", n)
	portID := fmt.Sprintf("ofsdn_port%d", n)
	iface := &vswitchd.Interface{
		UUID:        ifaceID,
		Name:        spec.Name,
		Type:        spec.Type,
		ExternalIDs: spec.ExternalIDs,
		Options:     spec.Options,
	}
	if spec.OFPortRequest > 0 {
		req := spec.OFPortRequest
		iface.OfportRequest = &req
	}
	var ops []libovsdb.Operation
	for _, m := range []model.Model{iface, &vswitchd.Port{UUID: portID, Name: spec.Name, Interfaces: []string{ifaceID}}} {
		op, err := c.ovs.Create(m)
		if err != nil {
			return nil, fmt.Errorf("building insert: %w", err)
		}
		ops = append(ops, op...)
	}
	return append(ops, bridgePortsOp(spec.Bridge, libovsdb.MutateOperationInsert, portID)), nil
}

// bridgePortsOp returns the operation that inserts port (a UUID, or a named UUID of the
// same transaction) into bridge's ports, or deletes it from them (RFC 7047 §5.2.4
// "mutate", where name == bridge). It is built here rather than by libovsdb's
// Where(model).Mutate, which looks the Bridge row up in the cache and copies it (through
// JSON) to make a _uuid condition: the row holds the bridge's whole ports set, hundreds of
// UUIDs on a full node, and that copy was half of what a pod's ADD allocated in the
// daemon. The name is the Bridge table's index, so the condition selects the same row.
func bridgePortsOp(bridge string, mutator libovsdb.Mutator, port string) libovsdb.Operation {
	return libovsdb.Operation{
		Op:        libovsdb.OperationMutate,
		Table:     tableBridge,
		Where:     []libovsdb.Condition{libovsdb.NewCondition("name", libovsdb.ConditionEqual, bridge)},
		Mutations: []libovsdb.Mutation{*libovsdb.NewMutation("ports", mutator, libovsdb.OvsSet{GoSet: []any{libovsdb.UUID{GoUUID: port}}})},
	}
}

func (c *Client) updateInterfaceOps(spec PortSpec, cur *vswitchd.Interface) ([]libovsdb.Operation, error) {
	i := &vswitchd.Interface{UUID: cur.UUID}
	where := c.ovs.Where(i)
	var fields []any
	if spec.Type != cur.Type {
		i.Type = spec.Type
		fields = append(fields, &i.Type)
	}
	if spec.OFPortRequest > 0 && (cur.OfportRequest == nil || *cur.OfportRequest != spec.OFPortRequest) {
		req := spec.OFPortRequest
		i.OfportRequest = &req
		fields = append(fields, &i.OfportRequest)
	}
	if spec.Options != nil && !(hasAll(cur.Options, spec.Options) && hasAll(spec.Options, cur.Options)) {
		i.Options = spec.Options
		fields = append(fields, &i.Options)
	}
	var ops []libovsdb.Operation
	if len(fields) > 0 {
		op, err := where.Update(i, fields...)
		if err != nil {
			return nil, fmt.Errorf("building Interface update: %w", err)
		}
		ops = append(ops, op...)
	}
	mapOps, err := c.mapKeysOps(where, i, &i.ExternalIDs, cur.ExternalIDs, spec.ExternalIDs)
	if err != nil {
		return nil, fmt.Errorf("building external_ids mutate: %w", err)
	}
	return append(ops, mapOps...), nil
}

// waitOFPort waits until the cache shows spec's interface with an ofport and with the
// type and external_ids spec asked for (so that reads right after see the write).
func (c *Client) waitOFPort(ctx context.Context, spec PortSpec) (int, error) {
	wctx, cancel := c.waitContext(ctx)
	defer cancel()
	ofport := 0
	seen := false
	err := c.waitFor(wctx, []string{waitKey(tableInterface, spec.Name)}, func() (bool, error) {
		ifc := c.interfaceRow(spec.Name)
		if ifc == nil && !c.lost.Load() && (c.bridgeRow(spec.Bridge) == nil || seen && c.portRow(spec.Name) == nil) {
			// The transaction committed, so the port went after it: with its bridge (an
			// administrator's del-br, a lost database), or deleted by another client. No
			// ofport can come; waiting would hold the caller until its deadline (a pod's
			// ADD: addTimeout). (While the session is being re-established the cache may
			// be empty or half refilled: lost is set until it is the new server's.)
			return false, fmt.Errorf("ovsdb: interface %s on bridge %s: the port was removed before ovs-vswitchd gave it an ofport "+
				"(bridge %s deleted meanwhile, or the port deleted by another client): %w", spec.Name, spec.Bridge, spec.Bridge, ErrUnavailable)
		}
		if ifc == nil || ifc.Type != spec.Type || !hasAll(ifc.ExternalIDs, spec.ExternalIDs) {
			return false, nil
		}
		seen = true
		if ifc.Ofport == nil || *ifc.Ofport == 0 {
			return false, nil
		}
		if *ifc.Ofport == -1 {
			return false, &InterfaceError{Bridge: spec.Bridge, Interface: spec.Name, Reason: deref(ifc.Error)}
		}
		ofport = *ifc.Ofport
		return true, nil
	})
	switch {
	case err == nil:
		return ofport, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		if !seen {
			return 0, fmt.Errorf("ovsdb: interface %s on bridge %s: the monitor never showed the new row (is the connection to %s up?): %w",
				spec.Name, spec.Bridge, c.endpoint, err)
		}
		return 0, fmt.Errorf("ovsdb: interface %s on bridge %s: ovs-vswitchd assigned no ofport in time "+
			"(is ovs-vswitchd running and connected to %s?): %w", spec.Name, spec.Bridge, c.endpoint, err)
	default:
		return 0, err
	}
}

// DeletePort removes port name from bridge in one transaction (shared with concurrent
// port changes, see commit.go): mutate (RFC 7047 §5.2.4) Bridge.ports to delete the
// Port's UUID and delete (§5.2.5) the Port row; its Interface, no longer referenced and
// not a root table, is garbage collected with it. It then waits
// until the cache no longer shows the port. A port that does not exist is not an error
// (DeletePort is idempotent). Errors: the port is on another bridge; a failed
// transaction; ctx ending first.
func (c *Client) DeletePort(ctx context.Context, bridge, name string) error {
	if c.isClosed() {
		return ErrClosed
	}
	port := c.portRow(name)
	if port == nil {
		c.log.Debug("port to delete does not exist", "port", name, "bridge", bridge)
		return nil
	}
	what := fmt.Sprintf("delete port %s from bridge %s", name, bridge)
	if owner := c.bridgeOfPort(port.UUID); owner != "" && owner != bridge {
		return fmt.Errorf("ovsdb: %s: the port is on bridge %s, not %s", what, owner, bridge)
	}
	ops, err := c.deletePortOps(bridge, port.UUID)
	if err != nil {
		return fmt.Errorf("ovsdb: %s: %w", what, err)
	}
	_, settle, err := c.commit.submit(ctx, what, ops)
	if err != nil {
		return err
	}
	wctx, cancel := c.waitContext(ctx)
	defer cancel()
	err = c.waitFor(wctx, []string{waitKey(tablePort, name)}, func() (bool, error) {
		p := c.portRow(name)
		return p == nil || p.UUID != port.UUID, nil
	})
	settle()
	if err != nil {
		return fmt.Errorf("ovsdb: %s: the monitor still shows the port: %w", what, err)
	}
	c.log.Info("port deleted", "port", name, "bridge", bridge)
	return nil
}

func (c *Client) deletePortOps(bridge, portUUID string) ([]libovsdb.Operation, error) {
	ops := []libovsdb.Operation{bridgePortsOp(bridge, libovsdb.MutateOperationDelete, portUUID)}
	del, err := c.ovs.Where(&vswitchd.Port{UUID: portUUID}).Delete()
	if err != nil {
		return nil, fmt.Errorf("building Port delete: %w", err)
	}
	return append(ops, del...), nil
}

// bridgeOfPort returns the name of the bridge whose ports reference portUUID, or "".
func (c *Client) bridgeOfPort(portUUID string) string {
	for _, m := range c.rows(tableBridge) {
		if br, ok := m.(*vswitchd.Bridge); ok && contains(br.Ports, portUUID) {
			return br.Name
		}
	}
	return ""
}

// ListPorts returns the ports of bridge from the cache, sorted by name, including the
// bridge's own local port (OFPort 65534). It returns nil for an unknown bridge.
func (c *Client) ListPorts(bridge string) []PortInfo {
	br := c.bridgeRow(bridge)
	ports := c.table(tablePort)
	if br == nil || ports == nil {
		return nil
	}
	var out []PortInfo
	for _, uuid := range br.Ports {
		p, ok := ports.Row(uuid).(*vswitchd.Port)
		if !ok {
			continue
		}
		out = append(out, c.portInfo(p, bridge))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// GetPort returns the port called name from the cache, on whichever bridge it is, and
// false if the cache has no such port.
func (c *Client) GetPort(name string) (PortInfo, bool) {
	p := c.portRow(name)
	if p == nil {
		return PortInfo{}, false
	}
	return c.portInfo(p, c.bridgeOfPort(p.UUID)), true
}

func (c *Client) portInfo(p *vswitchd.Port, bridge string) PortInfo {
	info := PortInfo{Name: p.Name, Bridge: bridge}
	ifaces := c.table(tableInterface)
	if ifaces == nil {
		return info
	}
	var ifc *vswitchd.Interface
	for _, uuid := range p.Interfaces {
		i, ok := ifaces.Row(uuid).(*vswitchd.Interface)
		if !ok {
			continue
		}
		if ifc == nil || i.Name == p.Name {
			ifc = i
		}
	}
	if ifc == nil {
		return info
	}
	if ifc.Ofport != nil {
		info.OFPort = *ifc.Ofport
	}
	info.Type = ifc.Type
	info.ExternalIDs = cloneMap(ifc.ExternalIDs)
	info.Error = deref(ifc.Error)
	info.MAC = deref(ifc.MACInUse)
	return info
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
