package ovsdb

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/model"
	libovsdb "github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ofsdn/ofsdn/ovsdb/vswitchd"
)

// Datapath types (Bridge.datapath_type).
const (
	// DatapathNetdev is the userspace datapath, the only one without the openvswitch
	// kernel module.
	DatapathNetdev = "netdev"
	// DatapathSystem is the kernel datapath (needs the openvswitch module).
	DatapathSystem = "system"
)

// Interface types (Interface.type) ofsdn uses.
const (
	// TypeSystem is an existing network device such as the host end of a veth pair.
	TypeSystem = ""
	// TypeInternal is a port whose network device ovs-vswitchd creates (a tap device on
	// the userspace datapath), like the bridge's own local port.
	TypeInternal = "internal"
)

// BridgeSpec is the desired state of one bridge for EnsureBridge. Empty fields are left
// as they are on an existing bridge (and take Open vSwitch's defaults on a new one).
type BridgeSpec struct {
	// Name of the bridge, and of its local internal port and network device:
	// 1..15 bytes (Linux IFNAMSIZ - 1).
	Name string
	// DatapathType is DatapathNetdev or DatapathSystem ("" means Open vSwitch's default,
	// "system").
	DatapathType string
	// FailMode is "secure" (no flows until a controller adds them; what ofsdn wants) or
	// "standalone" (learning switch when no controller is connected).
	FailMode string
	// Protocols is the set of OpenFlow versions the bridge accepts, e.g. {"OpenFlow13"}.
	// On an existing bridge the whole set is replaced when it differs.
	Protocols []string
	// TableNames names flow tables (OpenFlow table id 0..254 → name). Each becomes a
	// Flow_Table row referenced from Bridge.flow_tables, so that `ovs-ofctl dump-flows
	// --names` and ofproto/trace show stage names. Ids not listed are left alone.
	TableNames map[int]string
	// ExternalIDs are set on Bridge.external_ids, key by key (other keys survive).
	ExternalIDs map[string]string
	// OtherConfig is set on Bridge.other_config, key by key (e.g. "hwaddr",
	// "datapath-id", "disable-in-band").
	OtherConfig map[string]string
}

func (s *BridgeSpec) validate() error {
	if s.Name == "" || len(s.Name) > 15 {
		return fmt.Errorf("ovsdb: bridge name %q: want 1 to 15 bytes (it is also a network device name)", s.Name)
	}
	switch s.FailMode {
	case "", vswitchd.BridgeFailModeSecure, vswitchd.BridgeFailModeStandalone:
	default:
		return fmt.Errorf("ovsdb: bridge %s: fail mode %q: want \"secure\" or \"standalone\"", s.Name, s.FailMode)
	}
	for _, p := range s.Protocols {
		switch p {
		case vswitchd.BridgeProtocolsOpenflow10, vswitchd.BridgeProtocolsOpenflow11, vswitchd.BridgeProtocolsOpenflow12,
			vswitchd.BridgeProtocolsOpenflow13, vswitchd.BridgeProtocolsOpenflow14, vswitchd.BridgeProtocolsOpenflow15:
		default:
			return fmt.Errorf("ovsdb: bridge %s: protocol %q: want OpenFlow10 to OpenFlow15", s.Name, p)
		}
	}
	for id, name := range s.TableNames {
		if id < 0 || id > 254 {
			return fmt.Errorf("ovsdb: bridge %s: flow table id %d (%q): want 0..254", s.Name, id, name)
		}
	}
	return nil
}

// EnsureBridge creates the bridge described by spec, or brings an existing one in line
// with it, and waits until ovs-vswitchd has applied the change (so the bridge's OpenFlow
// management socket exists when it returns).
//
// A new bridge is made as `ovs-vsctl add-br` makes it, in ONE transaction (RFC 7047
// §4.1.3) with named UUIDs: insert (§5.2.1) the Flow_Table rows, an Interface of type
// "internal" and a Port both named like the bridge, the Bridge, then mutate (§5.2.4)
// Open_vSwitch.bridges to reference it (inserting the Open_vSwitch row if the database
// has none). On an existing bridge, datapath_type, fail_mode and protocols are updated
// (§5.2.3) when they differ; external_ids, other_config and flow_tables are mutated only
// for the keys spec gives. Nothing is sent when the bridge already matches.
//
// Errors: invalid spec; a failed transaction (the error carries ovsdb-server's reason);
// ovs-vswitchd not applying the change (cur_cfg below next_cfg) before ctx ends, or
// Options.WaitTimeout when ctx has no deadline; ovs-vswitchd having applied it without
// creating the bridge (no datapath_id, no ofport on the local port: a datapath type this
// host lacks, typically), with the local Interface's "error" column when it has one.
func (c *Client) EnsureBridge(ctx context.Context, spec BridgeSpec) error {
	if c.isClosed() {
		return ErrClosed
	}
	if err := spec.validate(); err != nil {
		return err
	}
	root := c.rootRow()
	var ops []libovsdb.Operation
	var err error
	if br := c.bridgeRow(spec.Name); br == nil {
		ops, err = c.createBridgeOps(spec, root)
	} else {
		ops, err = c.updateBridgeOps(spec, br)
	}
	if err != nil {
		return err
	}
	what := "ensure bridge " + spec.Name
	var nextCfg int
	if len(ops) == 0 {
		// Nothing to write; still make sure ovs-vswitchd has caught up and made the bridge.
		if root != nil {
			nextCfg = root.NextCfg
		}
	} else {
		cfgIdx := -1
		if root != nil {
			ops = append(ops, bumpCfgOps(root.UUID)...)
			cfgIdx = len(ops) - 1
		}
		res, err := c.transact(ctx, what, ops)
		if err != nil {
			return err
		}
		nextCfg = 1 // the Open_vSwitch row inserted by createBridgeOps has next_cfg 1
		if cfgIdx >= 0 {
			var ok bool
			if nextCfg, ok = selectedInt(res[cfgIdx], "next_cfg"); !ok {
				return fmt.Errorf("ovsdb: %s: no next_cfg in ovsdb-server's select reply", what)
			}
		}
	}
	if err := c.waitCfg(ctx, nextCfg, what); err != nil {
		return err
	}
	// Like ovs-vsctl: once ovs-vswitchd has caught up, a bridge it failed to create has no
	// datapath_id and its local port no ofport.
	br := c.bridgeRow(spec.Name)
	ifc := c.interfaceRow(spec.Name)
	if br == nil || br.DatapathID == nil || (ifc != nil && (ifc.Ofport == nil || *ifc.Ofport <= 0)) {
		reason := "see ovs-vswitchd's log"
		if ifc != nil && deref(ifc.Error) != "" {
			reason = deref(ifc.Error)
		}
		dp := spec.DatapathType
		if br != nil {
			dp = br.DatapathType
		}
		return fmt.Errorf("ovsdb: bridge %s (datapath_type %q): ovs-vswitchd did not create it: %s "+
			"(the userspace datapath needs datapath_type \"netdev\"; \"system\" needs the openvswitch kernel module)",
			spec.Name, dp, reason)
	}
	if len(ops) > 0 {
		c.log.Info("bridge ensured", "bridge", spec.Name, "datapath_type", br.DatapathType, "operations", len(ops))
	}
	return nil
}

func (c *Client) createBridgeOps(spec BridgeSpec, root *vswitchd.OpenvSwitch) ([]libovsdb.Operation, error) {
	const (
		ifaceID  = "ofsdn_iface"
		portID   = "ofsdn_port"
		bridgeID = "ofsdn_bridge"
	)
	var ops []libovsdb.Operation
	var flowTables map[int]string
	for _, id := range sortedIDs(spec.TableNames) {
		name := spec.TableNames[id]
		ftID := "ofsdn_ft_" + strconv.Itoa(id)
		op, err := c.ovs.Create(&vswitchd.FlowTable{UUID: ftID, Name: &name})
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: flow table %d %q: %w", spec.Name, id, name, err)
		}
		ops = append(ops, op...)
		if flowTables == nil {
			flowTables = make(map[int]string)
		}
		flowTables[id] = ftID
	}
	br := &vswitchd.Bridge{
		UUID:         bridgeID,
		Name:         spec.Name,
		DatapathType: spec.DatapathType,
		Protocols:    spec.Protocols,
		FlowTables:   flowTables,
		ExternalIDs:  spec.ExternalIDs,
		OtherConfig:  spec.OtherConfig,
		Ports:        []string{portID},
	}
	if spec.FailMode != "" {
		fm := spec.FailMode
		br.FailMode = &fm
	}
	for _, m := range []model.Model{
		&vswitchd.Interface{UUID: ifaceID, Name: spec.Name, Type: TypeInternal},
		&vswitchd.Port{UUID: portID, Name: spec.Name, Interfaces: []string{ifaceID}},
		br,
	} {
		op, err := c.ovs.Create(m)
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: building insert: %w", spec.Name, err)
		}
		ops = append(ops, op...)
	}
	if root == nil {
		// A database fresh from ovsdb-tool create has no Open_vSwitch row until
		// `ovs-vsctl init` or ovs-vswitchd makes one.
		op, err := c.ovs.Create(&vswitchd.OpenvSwitch{UUID: "ofsdn_root", Bridges: []string{bridgeID}, NextCfg: 1})
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: building Open_vSwitch insert: %w", spec.Name, err)
		}
		return append(ops, op...), nil
	}
	r := &vswitchd.OpenvSwitch{UUID: root.UUID}
	op, err := c.ovs.Where(r).Mutate(r, model.Mutation{Field: &r.Bridges, Mutator: libovsdb.MutateOperationInsert, Value: []string{bridgeID}})
	if err != nil {
		return nil, fmt.Errorf("ovsdb: bridge %s: building Open_vSwitch.bridges mutate: %w", spec.Name, err)
	}
	return append(ops, op...), nil
}

func (c *Client) updateBridgeOps(spec BridgeSpec, cur *vswitchd.Bridge) ([]libovsdb.Operation, error) {
	var ops []libovsdb.Operation
	b := &vswitchd.Bridge{UUID: cur.UUID}
	where := c.ovs.Where(b)

	var fields []any
	if spec.DatapathType != "" && spec.DatapathType != cur.DatapathType {
		b.DatapathType = spec.DatapathType
		fields = append(fields, &b.DatapathType)
	}
	if spec.FailMode != "" && (cur.FailMode == nil || *cur.FailMode != spec.FailMode) {
		fm := spec.FailMode
		b.FailMode = &fm
		fields = append(fields, &b.FailMode)
	}
	if len(spec.Protocols) > 0 && !sameSet(spec.Protocols, cur.Protocols) {
		b.Protocols = spec.Protocols
		fields = append(fields, &b.Protocols)
	}
	if len(fields) > 0 {
		op, err := where.Update(b, fields...)
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: building update: %w", spec.Name, err)
		}
		ops = append(ops, op...)
	}

	mapOps, err := c.mapKeysOps(where, b, &b.ExternalIDs, cur.ExternalIDs, spec.ExternalIDs)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: bridge %s: external_ids: %w", spec.Name, err)
	}
	ops = append(ops, mapOps...)
	mapOps, err = c.mapKeysOps(where, b, &b.OtherConfig, cur.OtherConfig, spec.OtherConfig)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: bridge %s: other_config: %w", spec.Name, err)
	}
	ops = append(ops, mapOps...)

	// Flow table names: a wrong or missing name gets a new Flow_Table row; the old row,
	// no longer referenced, is garbage collected (Flow_Table is not a root table).
	var staleIDs []int
	newRefs := map[int]string{}
	for _, id := range sortedIDs(spec.TableNames) {
		name := spec.TableNames[id]
		if ref, ok := cur.FlowTables[id]; ok {
			if have, _ := c.flowTableName(ref); have == name {
				continue
			}
			staleIDs = append(staleIDs, id)
		}
		ftID := "ofsdn_ft_" + strconv.Itoa(id)
		op, err := c.ovs.Create(&vswitchd.FlowTable{UUID: ftID, Name: &name})
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: flow table %d %q: %w", spec.Name, id, name, err)
		}
		ops = append(ops, op...)
		newRefs[id] = ftID
	}
	if len(staleIDs) > 0 {
		op, err := where.Mutate(b, model.Mutation{Field: &b.FlowTables, Mutator: libovsdb.MutateOperationDelete, Value: staleIDs})
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: flow_tables delete: %w", spec.Name, err)
		}
		ops = append(ops, op...)
	}
	if len(newRefs) > 0 {
		op, err := where.Mutate(b, model.Mutation{Field: &b.FlowTables, Mutator: libovsdb.MutateOperationInsert, Value: newRefs})
		if err != nil {
			return nil, fmt.Errorf("ovsdb: bridge %s: flow_tables insert: %w", spec.Name, err)
		}
		ops = append(ops, op...)
	}
	return ops, nil
}

// mapKeysOps returns the mutate operations (RFC 7047 §5.2.4) that set the keys of want
// that differ in have, without touching other keys: delete those keys, then insert the
// new pairs (a map "insert" never overwrites an existing key, hence two operations).
func (c *Client) mapKeysOps(where conditional, m model.Model, field *map[string]string, have, want map[string]string) ([]libovsdb.Operation, error) {
	keys, values := changedKeys(have, want)
	if len(keys) == 0 {
		return nil, nil
	}
	sort.Strings(keys)
	del, err := where.Mutate(m, model.Mutation{Field: field, Mutator: libovsdb.MutateOperationDelete, Value: keys})
	if err != nil {
		return nil, err
	}
	ins, err := where.Mutate(m, model.Mutation{Field: field, Mutator: libovsdb.MutateOperationInsert, Value: values})
	if err != nil {
		return nil, err
	}
	return append(del, ins...), nil
}

// conditional is the part of libovsdb's client.ConditionalAPI that mapKeysOps uses.
type conditional interface {
	Mutate(model.Model, ...model.Mutation) ([]libovsdb.Operation, error)
}

// BridgeExternalIDs returns a copy of the bridge's external_ids from the cache, and
// false if the cache has no bridge of that name.
func (c *Client) BridgeExternalIDs(name string) (map[string]string, bool) {
	br := c.bridgeRow(name)
	if br == nil {
		return nil, false
	}
	return cloneMap(br.ExternalIDs), true
}

// BridgeExists reports whether the cache holds a bridge of that name.
func (c *Client) BridgeExists(name string) bool { return c.bridgeRow(name) != nil }

// SetBridgeExternalID sets one key of the bridge's external_ids (RFC 7047 §5.2.4 mutate:
// delete the key, insert the pair; other keys are kept) and waits until the cache shows
// it. Errors: no such bridge; a failed transaction; ctx ending before the cache update.
func (c *Client) SetBridgeExternalID(ctx context.Context, bridge, key, value string) error {
	if c.isClosed() {
		return ErrClosed
	}
	br := c.bridgeRow(bridge)
	if br == nil {
		return fmt.Errorf("ovsdb: set external_ids:%s on bridge %s: no such bridge (create it with EnsureBridge)", key, bridge)
	}
	if v, ok := br.ExternalIDs[key]; ok && v == value {
		return nil
	}
	b := &vswitchd.Bridge{UUID: br.UUID}
	ops, err := c.mapKeysOps(c.ovs.Where(b), b, &b.ExternalIDs, br.ExternalIDs, map[string]string{key: value})
	if err != nil {
		return fmt.Errorf("ovsdb: set external_ids:%s on bridge %s: %w", key, bridge, err)
	}
	what := fmt.Sprintf("set external_ids:%s on bridge %s", key, bridge)
	res, err := c.transact(ctx, what, ops)
	if err != nil {
		return err
	}
	if res[0].Count == 0 {
		return fmt.Errorf("ovsdb: %s: the bridge was deleted meanwhile (the daemon re-creates it): %w", what, ErrUnavailable)
	}
	wctx, cancel := c.waitContext(ctx)
	defer cancel()
	return c.waitFor(wctx, []string{waitKey(tableBridge, bridge)}, func() (bool, error) {
		br := c.bridgeRow(bridge)
		return br != nil && br.ExternalIDs[key] == value, nil
	})
}

// OtherConfig returns a copy of Open_vSwitch.other_config from the cache (nil if the
// database has no Open_vSwitch row).
func (c *Client) OtherConfig() map[string]string {
	root := c.rootRow()
	if root == nil {
		return nil
	}
	return cloneMap(root.OtherConfig)
}

// SetOtherConfig sets one key of Open_vSwitch.other_config (RFC 7047 §5.2.4 mutate,
// other keys kept), e.g. "flow-restore-wait" = "true" to keep ovs-vswitchd from
// forwarding with a half-restored flow table, and waits until the cache shows it (not
// for ovs-vswitchd). Errors: no Open_vSwitch row; a failed transaction; ctx ending first.
func (c *Client) SetOtherConfig(ctx context.Context, key, value string) error {
	return c.mutateOtherConfig(ctx, key, &value)
}

// RemoveOtherConfig deletes one key of Open_vSwitch.other_config (RFC 7047 §5.2.4
// mutate) and waits until the cache shows it gone; a missing key is not an error.
// Errors: no Open_vSwitch row; a failed transaction; ctx ending first.
func (c *Client) RemoveOtherConfig(ctx context.Context, key string) error {
	return c.mutateOtherConfig(ctx, key, nil)
}

func (c *Client) mutateOtherConfig(ctx context.Context, key string, value *string) error {
	if c.isClosed() {
		return ErrClosed
	}
	root := c.rootRow()
	if root == nil {
		return fmt.Errorf("ovsdb: other_config:%s: the database has no Open_vSwitch row (start ovs-vswitchd or run ovs-vsctl init)", key)
	}
	r := &vswitchd.OpenvSwitch{UUID: root.UUID}
	where := c.ovs.Where(r)
	var ops []libovsdb.Operation
	var err error
	if value == nil {
		if _, ok := root.OtherConfig[key]; !ok {
			return nil
		}
		ops, err = where.Mutate(r, model.Mutation{Field: &r.OtherConfig, Mutator: libovsdb.MutateOperationDelete, Value: []string{key}})
	} else {
		ops, err = c.mapKeysOps(where, r, &r.OtherConfig, root.OtherConfig, map[string]string{key: *value})
	}
	if err != nil {
		return fmt.Errorf("ovsdb: other_config:%s: %w", key, err)
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := c.transact(ctx, "set Open_vSwitch other_config:"+key, ops); err != nil {
		return err
	}
	wctx, cancel := c.waitContext(ctx)
	defer cancel()
	return c.waitFor(wctx, []string{waitKey(tableOpenvSwitch, "")}, func() (bool, error) {
		root := c.rootRow()
		if root == nil {
			return false, nil
		}
		v, ok := root.OtherConfig[key]
		if value == nil {
			return !ok, nil
		}
		return ok && v == *value, nil
	})
}

func sortedIDs(m map[int]string) []int {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
