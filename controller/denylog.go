package controller

// The NetworkPolicy deny log: one structured line per denied new connection.
//
// Design history. With PolicyOptions.DenyLog the isolated pods' default-deny flows send
// the packet to the controller (flows.OutputController) through meter flows.DenyLogMeter
// instead of dropping it; the switch drops it either way, and the flow's packet counter
// still counts every denied packet (ofsdnctl policies, ofsdn_network_policy_denied_packets_total).
// The meter (one drop band at DenyLogRate packets per second, burst DenyLogRate) is the
// rate limit, so a flood of denied packets never reaches the daemon: what the band drops
// is read back from the meter's statistics. The meter lives in ovs-vswitchd only, and OVS
// refuses a flow naming a missing meter (OFPMMFC_INVALID_METER), so it is a desired meter
// of the pipeline's owner in the switch state (package switchstate), replayed before the
// flows on every new connection and audited like them. Packet-ins go from the connection's
// reader to a bounded queue (openflow.PacketInQueue, what does not fit is counted) and
// from there to one goroutine here that decodes and logs them.
//
// Only new connections reach the default-deny flows: conntrack_state sends established
// and related packets past the rule stages (and SCTP in the original direction back
// through them, see flows/policy.go), so a denied connection's retransmitted SYN logs
// again but nothing of an allowed connection ever does.
//
// The packet-in names its flow by table (egress_rules or ingress_rules: the direction)
// and cookie (owner kind pod, owner id the isolated pod's IPv4 address). Addresses are
// named by local attachments first, then by the policy model's pods (remote pods).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/policy"
	"github.com/ofsdn/ofsdn/switchstate"
)

// DenyLogMessage is the msg of every deny log line.
const DenyLogMessage = "network policy denied connection"

// DenyLogQueueSize is how many packet-ins wait for the deny logger (packet-ins beyond it
// are dropped and counted): ten seconds at the default rate.
const DenyLogQueueSize = 1024

// denyLog consumes the deny flows' packet-ins.
type denyLog struct {
	log   *slog.Logger
	q     *openflow.PacketInQueue
	rate  uint32
	names func(ip netip.Addr) string // "ns/name" or ""
	// podAddr returns the address of the pod whose flow owner id is id (Attachment.OwnerID).
	podAddr func(id uint32) (netip.Addr, bool)

	logged      atomic.Uint64
	undecodable atomic.Uint64

	meterMu      sync.Mutex
	meterSeen    uint64 // the band's counter at the last sample
	meterDropped uint64 // monotonic

	stop chan struct{}
	done chan struct{}
}

func newDenyLog(log *slog.Logger, rate uint32, names func(netip.Addr) string, podAddr func(id uint32) (netip.Addr, bool)) *denyLog {
	return &denyLog{log: log, q: openflow.NewPacketInQueue(DenyLogQueueSize), rate: rate, names: names, podAddr: podAddr,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// run logs packet-ins until close.
func (d *denyLog) run() {
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case p := <-d.q.C():
			d.handle(p)
		}
	}
}

func (d *denyLog) close() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

// meter is the deny log's meter: one drop band at the rate, burst the rate, in packets.
func (d *denyLog) meter() flows.Meter {
	return flows.Meter{ID: flows.DenyLogMeter, Rate: d.rate, Burst: d.rate}
}

// loadMeter makes the deny log's meter a desired meter of the pipeline's owner in store,
// so that the store creates it before the default-deny flows that use it on every new
// connection (a restarted ovs-vswitchd has no meters) and the audit re-creates it.
func (d *denyLog) loadMeter(store *switchstate.Store) error {
	st, _ := store.OwnerState(flows.PipelineOwner)
	st.Meters = append(st.Meters, d.meter())
	if err := store.LoadState(flows.PipelineOwner, st); err != nil {
		return fmt.Errorf("network policy deny log: meter %d (drop band %d packets/s, burst %d): %w (fix: a smaller policyDenyLogRate, or policyDenyLog: false)",
			flows.DenyLogMeter, d.rate, d.rate, err)
	}
	return nil
}

// beforeReplay adds the drops the meter counted so far (a reconnect to the same
// ovs-vswitchd) to the total, before the replay sets the meter again; afterReplay takes
// the counter the meter then has as the new baseline. So the total stays monotonic
// whether the switch kept, reset or lost the meter. Both do nothing on a nil d (no deny
// log).
func (d *denyLog) beforeReplay(ctx context.Context, c *openflow.Conn) {
	if d == nil {
		return
	}
	d.meterMu.Lock()
	defer d.meterMu.Unlock()
	if st, err := c.MeterStats(ctx, flows.DenyLogMeter); err == nil {
		_ = d.foldLocked(st)
	}
}

// afterReplay: see beforeReplay.
func (d *denyLog) afterReplay(ctx context.Context, c *openflow.Conn) {
	if d == nil {
		return
	}
	d.meterMu.Lock()
	defer d.meterMu.Unlock()
	d.meterSeen = 0
	if st, err := c.MeterStats(ctx, flows.DenyLogMeter); err == nil && len(st) == 1 && len(st[0].Bands) == 1 {
		d.meterSeen = st[0].Bands[0].Packets
	}
}

// foldLocked adds the drop band's growth since the last sample to the total. d.meterMu
// is held.
func (d *denyLog) foldLocked(st []openflow.MeterStats) error {
	if len(st) != 1 || len(st[0].Bands) != 1 {
		return fmt.Errorf("meter %d: switch returned %d meters (want 1 with 1 band): was it deleted?", flows.DenyLogMeter, len(st))
	}
	c := st[0].Bands[0].Packets
	if c >= d.meterSeen {
		d.meterDropped += c - d.meterSeen
	} else {
		d.meterDropped += c // reset underneath us: all of it is new
	}
	d.meterSeen = c
	return nil
}

// deniedEntry is one decoded deny log entry.
type deniedEntry struct {
	Direction   string // "ingress" or "egress"
	IsolatedPod string // ns/name, or the IP if not attached any more
	Src, Dst    string // ns/name or IP
	Headers     packetHeaders
}

// decode turns a packet-in into an entry; ok is false for a packet-in that is not a
// default-deny flow's.
func (d *denyLog) decode(p openflow.PacketIn) (deniedEntry, error) {
	var e deniedEntry
	egress, ingress := policyTables()
	switch flows.TableID(p.TableID) {
	case egress:
		e.Direction = "egress"
	case ingress:
		e.Direction = "ingress"
	default:
		return e, fmt.Errorf("packet-in from table %d, not egress_rules (%d) or ingress_rules (%d)", p.TableID, egress, ingress)
	}
	ck := flows.Cookie(p.Cookie)
	if ck.Owner() != flows.OwnerPod {
		return e, fmt.Errorf("packet-in with cookie %s of owner kind %d, not a pod's default-deny flow", ck, ck.Owner())
	}
	h, err := parsePacket(p.Data)
	if err != nil {
		return e, fmt.Errorf("packet-in from table %s cookie %s: %w", flows.TableID(p.TableID).Name(), ck, err)
	}
	e.Headers = h
	if iso, ok := d.podAddr(ck.OwnerID()); ok {
		e.IsolatedPod = d.name(iso)
	} else {
		e.IsolatedPod = fmt.Sprintf("pod owner id %d (gone)", ck.OwnerID())
	}
	e.Src, e.Dst = d.name(h.Src), d.name(h.Dst)
	return e, nil
}

func (d *denyLog) name(ip netip.Addr) string {
	if n := d.names(ip); n != "" {
		return n
	}
	return ip.String()
}

// handle logs one packet-in.
func (d *denyLog) handle(p openflow.PacketIn) {
	e, err := d.decode(p)
	if err != nil {
		d.undecodable.Add(1)
		d.log.Debug("network policy deny log: packet-in not logged", "err", err)
		return
	}
	h := e.Headers
	attrs := []any{"direction", e.Direction, "isolated_pod", e.IsolatedPod,
		"src", e.Src, "src_ip", h.Src.String(), "dst", e.Dst, "dst_ip", h.Dst.String(), "protocol", h.protoName()}
	switch h.Proto {
	case ipProtoTCP, ipProtoUDP, ipProtoSCTP:
		attrs = append(attrs, "src_port", h.SrcPort, "port", h.DstPort)
	case ipProtoICMP, ipProtoICMPv6:
		attrs = append(attrs, "icmp_type", h.ICMPType, "icmp_code", h.ICMPCode)
	}
	if h.Fragment {
		attrs = append(attrs, "fragment", true)
	}
	d.logged.Add(1)
	d.log.Info(DenyLogMessage, attrs...)
}

// meterDrops samples the meter's drop band and returns the monotonic total of the
// denied packets it dropped (see ensureMeter for how re-created meters are handled).
func (d *denyLog) meterDrops(ctx context.Context, sw *openflow.Switch) (uint64, error) {
	d.meterMu.Lock()
	defer d.meterMu.Unlock()
	st, err := sw.MeterStats(ctx, flows.DenyLogMeter)
	if err != nil {
		return d.meterDropped, err
	}
	err = d.foldLocked(st)
	return d.meterDropped, err
}

// DenyLogStats counts the deny log's entries since the daemon started (monotonic).
type DenyLogStats struct {
	// Logged is the number of lines logged.
	Logged uint64
	// MeterDropped is the number of denied packets the switch's meter dropped before
	// they reached the daemon (its drop band's counter, OpenFlow 1.3.5 §7.3.5.12).
	MeterDropped uint64
	// QueueDropped is the number of packet-ins dropped because the daemon's queue
	// (DenyLogQueueSize) was full.
	QueueDropped uint64
	// Undecodable is the number of packet-ins not logged because they were not a
	// default-deny flow's IPv4 or IPv6 packet.
	Undecodable uint64
}

// DenyLogStats returns the deny log's counters, or nil when the deny log is off. On a
// meter statistics error (switch down) MeterDropped holds the total so far and the error
// is returned with the stats.
func (n *Node) DenyLogStats(ctx context.Context) (*DenyLogStats, error) {
	d := n.denyLog
	if d == nil {
		return nil, nil
	}
	st := &DenyLogStats{Logged: d.logged.Load(), QueueDropped: d.q.Dropped(), Undecodable: d.undecodable.Load()}
	var err error
	st.MeterDropped, err = d.meterDrops(ctx, n.sw)
	return st, err
}

// podAddrOfOwner returns an address (the IPv4 one) of the local attachment, or else of
// the IP lease, whose flow owner id is id: podName names the pod by it.
func (n *Node) podAddrOfOwner(id uint32) (netip.Addr, bool) {
	for _, a := range n.Pods() {
		if a.OwnerID == id && a.IPv4() != nil {
			if ip, ok := netip.AddrFromSlice(a.IPv4().IP.To4()); ok {
				return ip, true
			}
		}
	}
	for _, l := range n.leases.List() {
		if l.OwnerID == id {
			for _, lip := range l.IPs {
				if ip4 := lip.To4(); ip4 != nil {
					lip = ip4
				}
				if ip, ok := netip.AddrFromSlice(lip); ok {
					return ip, true
				}
			}
		}
	}
	return netip.Addr{}, false
}

// podName names ip (either family): a local attachment's pod, else a pod of the policy
// model, else "".
func (n *Node) podName(ip netip.Addr) string {
	want := net.IP(ip.AsSlice())
	for _, a := range n.Pods() {
		if a.PodName == "" {
			continue
		}
		for _, aip := range a.IPs {
			if aip != nil && aip.IP.Equal(want) {
				return a.PodNamespace + "/" + a.PodName
			}
		}
	}
	if p := n.policy; p != nil {
		var name string
		p.opts.Agent.View(func(e *policy.Engine) {
			if pod := e.PodByIP(ip); pod != nil {
				name = pod.Key()
			}
		})
		return name
	}
	return ""
}
