package controller

// Read-only views of the node for the daemon's metrics and its inspection API (ctl/):
// connection state, readiness, and the switch's flows grouped by pipeline stage with their
// packet counts, each paired with the desired flow it implements.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/switchstate"
)

// OpenFlowConnected reports whether the node's OpenFlow connection to the bridge is up
// and ready (Switch.Connected: false while reconnecting and replaying the flows).
func (n *Node) OpenFlowConnected() bool {
	sw := n.Switch()
	return sw != nil && sw.Connected()
}

// OVSDBConnected reports whether the node's OVSDB session is up (ovsdb.Client.Connected).
func (n *Node) OVSDBConnected() bool { return n.db != nil && n.db.Connected() }

// PipelineInstalled reports whether the base pipeline's flows are in the desired-state
// store, which happens only after the switch confirmed them with a barrier.
func (n *Node) PipelineInstalled() bool {
	if n.Store() == nil {
		return false
	}
	_, ok := n.Store().Owner(flows.PipelineOwner)
	return ok
}

// Bridge returns the integration bridge's name.
func (n *Node) Bridge() string { return n.opts.Bridge }

// InstalledFlow is one flow entry as the switch reports it in a flow-stats reply
// (OpenFlow 1.3.5 §7.3.5.2 ofp_flow_stats), paired with the desired flow it implements.
type InstalledFlow struct {
	// Table is the OpenFlow table id (0..254).
	Table uint8
	// Priority is the entry's priority (0..65535).
	Priority uint16
	// Cookie is the entry's cookie (flows.Cookie layout).
	Cookie uint64
	// Packets and Bytes are the entry's counters (n_packets, n_bytes).
	Packets, Bytes uint64
	// Duration is how long the entry has been installed (seconds and nanoseconds on the
	// wire).
	Duration time.Duration
	// Text is the flow as `ovs-ofctl -O OpenFlow13 dump-flows --names` prints it, without
	// the statistics, taken from the desired flow; for an entry the daemon does not want it
	// is a short description with the match's field count.
	Text string
	// Desired is true when the entry is one of the daemon's desired flows.
	Desired bool
}

// StageFlows is one pipeline stage's flow table on the switch.
type StageFlows struct {
	// Table is the OpenFlow table id.
	Table uint8
	// Stage is the stage name (flows.Tables), or "table_<id>" for a table outside the
	// pipeline.
	Stage string
	// Flows are the entries the switch holds, by descending priority then text.
	Flows []InstalledFlow
	// Missing are desired flows of this table that the switch does not hold (text form);
	// normally empty.
	Missing []string
}

// InstalledFlows dumps every flow table with one flow-stats request (OpenFlow 1.3.5
// §7.3.5.2, OFPTT_ALL, no cookie filter) and groups the entries by stage, in pipeline
// order; every stage of the pipeline is present even when empty. Entries are paired with
// the desired-state store's flows by table, priority, cookie and match (every field's
// value and mask).
//
// Errors: those of openflow.Conn.DumpFlows (matching ErrOVSUnavailable while the
// connection is down, ctx's error).
func (n *Node) InstalledFlows(ctx context.Context) ([]StageFlows, error) {
	sw := n.Switch()
	if sw == nil {
		return nil, fmt.Errorf("bridge %s: no OpenFlow connection yet", n.opts.Bridge)
	}
	stats, err := sw.DumpFlows(ctx, openflow.TableAll, 0, 0)
	if err != nil {
		return nil, ovsUnavailable(err)
	}
	desired := n.Store().All()
	cfg := n.config()
	ports := flows.PortNames{cfg.GatewayOFPort: n.opts.Gateway}
	if n.overlay != nil {
		ports[cfg.TunnelOFPort] = n.overlay.opts.TunnelName
	}
	for _, a := range n.Pods() {
		ports[a.OFPort] = a.HostVeth
	}

	// Pair by table, priority, cookie and the match's full field values.
	type entry struct {
		f    flows.Flow
		used bool
	}
	byKey := map[string][]*entry{}
	for _, f := range desired {
		k := switchstate.FlowKey(f)
		byKey[k] = append(byKey[k], &entry{f: f})
	}
	out := make([]InstalledFlow, len(stats))
	for i, s := range stats {
		out[i] = InstalledFlow{
			Table: s.TableId, Priority: s.Priority, Cookie: s.Cookie,
			Packets: s.PacketCount, Bytes: s.ByteCount,
			Duration: time.Duration(s.DurationSec)*time.Second + time.Duration(s.DurationNSec),
			Text: fmt.Sprintf("cookie=%#x, table=%d, priority=%d, a match of %d fields: not one of the daemon's flows",
				s.Cookie, s.TableId, s.Priority, len(s.Match.Fields)),
		}
		for _, e := range byKey[switchstate.StatsKey(s)] {
			if !e.used {
				e.used = true
				out[i].Text, out[i].Desired = e.f.Format(ports), true
				break
			}
		}
	}

	stages := map[uint8]*StageFlows{}
	var order []uint8
	stage := func(id uint8) *StageFlows {
		if st, ok := stages[id]; ok {
			return st
		}
		name := flows.TableID(id).Name()
		if name == "" {
			name = fmt.Sprintf("table_%d", id)
		}
		st := &StageFlows{Table: id, Stage: name}
		stages[id] = st
		order = append(order, id)
		return st
	}
	for _, t := range flows.Tables() {
		stage(t.ID)
	}
	for _, f := range out {
		st := stage(f.Table)
		st.Flows = append(st.Flows, f)
	}
	for _, es := range byKey {
		for _, e := range es {
			if !e.used {
				st := stage(uint8(e.f.Table))
				st.Missing = append(st.Missing, e.f.Format(ports))
			}
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	res := make([]StageFlows, 0, len(order))
	for _, id := range order {
		st := stages[id]
		sort.Slice(st.Flows, func(i, j int) bool {
			a, b := st.Flows[i], st.Flows[j]
			if a.Priority != b.Priority {
				return a.Priority > b.Priority
			}
			return a.Text < b.Text
		})
		sort.Strings(st.Missing)
		res = append(res, *st)
	}
	return res, nil
}
