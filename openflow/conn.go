// Package openflow is ofsdn's OpenFlow 1.3 connection to one Open vSwitch bridge: the
// handshake (HELLO with a version bitmap, FEATURES_REQUEST), echo keep-alive, flow mods
// confirmed by a barrier, atomic bundles (ONF EXT-230), flow statistics, meters (meter.go)
// and packet-ins to a bounded queue (packetin.go), OFPT_ERROR
// decoding in the specification's names, and a connection that re-dials by itself and
// runs a hook on every new connection before publishing it (Switch), where the caller
// replays its flows. It speaks the wire protocol only: it knows nothing of pods, IPAM,
// OVSDB or the pipeline (flow mods come in as libOpenflow messages, built by package
// flows), and imports no other ofsdn package.
//
// # Design history
//
// contiv/libOpenflow (the version pinned in go.mod) ships an OpenFlow 1.3 message codec and
// util.MessageStream, but no controller (the later ofctrl package is not in this version).
// MessageStream hands frames to 25 parser goroutines, so messages can be delivered out of
// order, and it logs through logrus. The barrier contract this package is built on
// (OpenFlow 1.3.5 §6.2: every reply and error caused by a message sent before a barrier
// request arrives before the barrier reply) only holds if we see messages in the order the
// switch sent them, so Conn frames the stream itself with a single reader goroutine
// (OpenFlow 1.3.5 §7.1: 8-byte header, the length field covers the whole message) and uses
// libOpenflow only to marshal requests and to decode the messages whose decoders are sound.
// Where the codec is wrong we work around it here (see encodeFlowMod, decodeHello and
// decodeFlowStatsReply) instead of patching the module.
//
// Every request gets its own transaction id (xid); a call (Apply, Barrier, DumpFlows, a
// bundle, an echo) registers all of its xids before writing, and the reader routes errors
// and replies to the call by xid. A call ends on the reply to its final message (a barrier
// reply, the last part of a multipart reply, a bundle commit reply) or on an error for that
// message. Each call's messages are written with one locked write, so calls from many
// goroutines never interleave on the wire. A write error, a read error, a missing echo reply
// or Close ends the connection: Done is closed, Err says why and every pending call fails
// at once with an error that matches ErrDisconnected. A Conn never reconnects: Switch
// (switch.go) dials again and runs its OnConnect hook, in which the node's flow store
// replays its desired state.
package openflow

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/contiv/libOpenflow/common"
	"github.com/contiv/libOpenflow/openflow13"
	"github.com/contiv/libOpenflow/util"
)

const (
	// ofpVersion13 is the wire version of OpenFlow 1.3 (OpenFlow 1.3.5 §7.1, OFP_VERSION).
	ofpVersion13 = openflow13.VERSION
	// ofpHeaderLen is the size of struct ofp_header in bytes (OpenFlow 1.3.5 §7.1).
	ofpHeaderLen = 8
	// ofpMaxMsgLen is the largest message the 16-bit length field can describe, in bytes.
	ofpMaxMsgLen = 0xffff
	// ofpHelloElemVersionBitmap is OFPHET_VERSIONBITMAP (OpenFlow 1.3.5 §7.5.1).
	ofpHelloElemVersionBitmap = 1
	// onfExperimenterID is the ONF experimenter id used by the bundle extension for
	// OpenFlow 1.3 (ONF EXT-230), 0x4f4e4600.
	onfExperimenterID = 0x4f4e4600
)

// TableAll selects every flow table in a flow-stats request or a delete (OFPTT_ALL, 255;
// OpenFlow 1.3.5 §7.3.4.1, §7.3.5.2).
const TableAll = openflow13.OFPTT_ALL

// Defaults of Options.
const (
	// DefaultEchoInterval is the default time between two echo requests (5 seconds).
	DefaultEchoInterval = 5 * time.Second
	// DefaultEchoTimeoutFactor times the echo interval is the default echo timeout
	// (15 seconds with the default interval).
	DefaultEchoTimeoutFactor = 3
	// DefaultWriteTimeout is the default bound on writing one call's messages (30 seconds).
	DefaultWriteTimeout = 30 * time.Second
)

// ErrDisconnected matches (errors.Is) every error returned because the OpenFlow connection
// is gone: the switch closed it, ovs-vswitchd died, an echo went unanswered, a write failed
// or Close was called; and, from a Switch, every error while it has no ready connection.
// The remedy is to dial again and replay the desired flows (Switch does both). The
// condition is transient: callers that also talk OVSDB (package controller) fold it into
// their own "Open vSwitch unavailable" error.
var ErrDisconnected = errors.New("openflow connection to the switch is down")

// errClosedByUser is the cause recorded when Close ends the connection.
var errClosedByUser = errors.New("closed by Conn.Close")

// Options tunes an OpenFlow connection. The zero value is usable.
type Options struct {
	// EchoInterval is the time between two OFPT_ECHO_REQUEST keep-alives sent to the
	// switch (OpenFlow 1.3.5 §7.5.2). Zero means DefaultEchoInterval (5 s); negative
	// disables the keep-alive.
	EchoInterval time.Duration
	// EchoTimeout is how long the switch has to answer one echo request (and, during
	// Dial, each handshake step when ctx has no deadline) before the connection is
	// declared dead. Zero means DefaultEchoTimeoutFactor × EchoInterval (15 s by default).
	EchoTimeout time.Duration
	// WriteTimeout bounds writing the messages of one call to the socket. A write that
	// times out ends the connection, since a partly written message breaks the framing.
	// Zero means DefaultWriteTimeout (30 s).
	WriteTimeout time.Duration
	// Logger receives connection events; nil means slog.Default().
	Logger *slog.Logger
	// PacketIns, when set, receives the switch's packet-ins (OFPT_PACKET_IN, OpenFlow
	// 1.3.5 §7.4.1): Dial then sets miss_send_len with OFPT_SET_CONFIG (§7.3.2), without
	// which OVS sends no asynchronous message to a .mgmt connection. The reader never
	// blocks on the queue: a packet-in that does not fit is dropped and counted
	// (PacketInQueue.Dropped). nil: packet-ins are discarded.
	PacketIns *PacketInQueue
	// FlowRemoved, when set, receives the switch's flow-removed messages
	// (OFPT_FLOW_REMOVED, OpenFlow 1.3.5 §7.4.2, for flows with OFPFF_SEND_FLOW_REM): Dial
	// then sets miss_send_len as for PacketIns. The reader never blocks on the queue: a
	// message that does not fit is dropped and counted (FlowRemovedQueue.Dropped). nil:
	// they are discarded.
	FlowRemoved *FlowRemovedQueue
	// FlowRemovedFilter, when set, says which decoded flow-removed messages go to the
	// FlowRemoved queue; the rest are discarded by the reader, uncounted (a mass delete
	// of flows with send_flow_rem, such as a reconnection's delete of every flow, then
	// does not fill the queue). It runs on the reader goroutine: it must be quick and
	// must not block. nil: every message is queued.
	FlowRemovedFilter func(FlowRemoved) bool
}

func (o Options) withDefaults() Options {
	if o.EchoInterval == 0 {
		o.EchoInterval = DefaultEchoInterval
	}
	if o.EchoTimeout <= 0 {
		if o.EchoInterval > 0 {
			o.EchoTimeout = DefaultEchoTimeoutFactor * o.EchoInterval
		} else {
			o.EchoTimeout = DefaultEchoTimeoutFactor * DefaultEchoInterval
		}
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// FlowModOp is one message of a batch or bundle, with the human text used to name it in
// errors: a flow mod (Mod), or instead a group mod (Group) or a meter mod (Meter) when one
// of those is set (ops.go). OVS 3.1 takes group mods inside bundles but refuses meter
// mods there (see ops.go): send meter mods with Apply.
type FlowModOp struct {
	// Mod is the OFPT_FLOW_MOD to send (OpenFlow 1.3.5 §7.3.4.1), typically built by
	// flows.Flow.FlowMod. Its header (version, type, length, xid) is ignored and left
	// untouched: Conn sets its own. libOpenflow's encoders store computed lengths into
	// some Nicira actions while marshalling, so do not send one Mod value from two
	// goroutines at the same time; building a fresh FlowMod per call is always safe.
	Mod *openflow13.FlowMod
	// Group, when set, is sent instead of Mod: an OFPT_GROUP_MOD (OpenFlow 1.3.5 §7.3.4.2).
	Group *GroupMod
	// Meter, when set, is sent instead of Mod: an OFPT_METER_MOD (OpenFlow 1.3.5 §7.3.4.4).
	Meter *MeterMod
	// Name describes the flow in errors, e.g. "pod x flow 2: table=classifier,...".
	Name string
}

// Conn is an OpenFlow 1.3 connection to one bridge of ovs-vswitchd, made with
// Dial. All methods are safe for concurrent use.
type Conn struct {
	path    string
	bridge  string
	conn    net.Conn
	opts    Options
	log     *slog.Logger
	dpid    uint64
	nTables uint8

	xid      atomic.Uint32
	bundleID atomic.Uint32

	// wmu serialises writes to conn: a semaphore (capacity 1) rather than a mutex, so
	// that a caller whose ctx ends while another call's write is blocked (a switch that
	// no longer reads its socket) gives up instead of waiting for WriteTimeout; blocked
	// senders on a channel are served in arrival order, so the calls' order holds.
	wmu chan struct{}

	mu    sync.Mutex
	calls map[uint32]*call // every xid of every pending call

	done      chan struct{}
	closeOnce sync.Once
	err       error // why the connection ended; written once before done is closed
	wg        sync.WaitGroup
}

// call is one pending request/response exchange, possibly of many messages.
type call struct {
	labels    map[uint32]string // xid → what that message was, for errors
	names     map[uint32]string // xid → FlowModOp.Name, for flow mods
	final     uint32            // xid whose reply (or error) ends the call
	multipart bool              // final's reply may come in parts (OFPMPF_REPLY_MORE)

	// Written by the reader under Conn.mu, read by the caller after done is closed.
	errs    []*RequestError
	replies [][]byte // raw replies to final, in order
	done    chan struct{}
}

// Dial connects to a bridge's OpenFlow management socket (OVS_RUNDIR/BRIDGE.mgmt,
// a unix socket ovs-vswitchd listens on without authentication; root or the OVS user may
// connect) and completes the OpenFlow 1.3 handshake: both sides send OFPT_HELLO with a
// version bitmap (OpenFlow 1.3.5 §7.5.1, §6.3.1), then OFPT_FEATURES_REQUEST/REPLY gives the
// datapath id (§7.3.1). It then starts the read loop and the echo keep-alive.
//
// ctx bounds the handshake only (without a deadline, each step must be answered within
// opts.EchoTimeout); cancelling it later has no effect on the connection.
//
// Errors: the socket is missing or refused (ovs-vswitchd not running or no such bridge),
// the bridge does not allow OpenFlow 1.3 (fix: ovs-vsctl set bridge BRIDGE
// protocols=OpenFlow13), the switch answered with OFPT_ERROR, or the handshake timed out.
func Dial(ctx context.Context, socketPath string, opts Options) (*Conn, error) {
	opts = opts.withDefaults()
	bridge := strings.TrimSuffix(filepath.Base(socketPath), ".mgmt")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("connect to OpenFlow management socket %s of bridge %s: %w (is ovs-vswitchd running with OVS_RUNDIR=%s, and does bridge %s exist?)",
			socketPath, bridge, err, filepath.Dir(socketPath), bridge)
	}
	s := &Conn{
		path:   socketPath,
		bridge: bridge,
		conn:   conn,
		opts:   opts,
		calls:  map[uint32]*call{},
		done:   make(chan struct{}),
		wmu:    make(chan struct{}, 1),
	}
	s.log = opts.Logger.With("bridge", bridge, "socket", socketPath)
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := s.handshake(ctx, br); err != nil {
		conn.Close()
		return nil, err
	}
	if opts.PacketIns != nil || opts.FlowRemoved != nil {
		// Before the read loop: answered only by an error, which the loop logs.
		conn.SetWriteDeadline(time.Now().Add(opts.WriteTimeout))
		if _, err := conn.Write(setConfigMsg(s.nextXid(), packetInMissSendLen)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("OpenFlow handshake with bridge %s on %s: send SET_CONFIG (miss_send_len %d, for packet-ins and flow-removed messages): %w", bridge, socketPath, packetInMissSendLen, err)
		}
		conn.SetWriteDeadline(time.Time{})
	}
	s.log = s.log.With("dpid", fmt.Sprintf("%016x", s.dpid))
	s.log.Info("OpenFlow 1.3 connection established", "tables", s.nTables)
	s.wg.Add(1)
	go s.readLoop(br)
	if opts.EchoInterval > 0 {
		s.wg.Add(1)
		go s.keepAlive()
	}
	return s, nil
}

// handshake exchanges HELLO (§7.5.1) and FEATURES_REQUEST/REPLY (§7.3.1) synchronously,
// before the read loop starts.
func (s *Conn) handshake(ctx context.Context, br *bufio.Reader) error {
	stop := context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Now()) })
	defer stop()
	defer s.conn.SetDeadline(time.Time{})
	step := func() {
		dl := time.Now().Add(s.opts.EchoTimeout)
		if cdl, ok := ctx.Deadline(); ok {
			dl = cdl
		}
		if ctx.Err() != nil {
			dl = time.Now()
		}
		s.conn.SetDeadline(dl)
	}
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return fmt.Errorf("OpenFlow handshake with bridge %s on %s: %s: %w", s.bridge, s.path, what, err)
	}

	// OFPT_HELLO: header version = highest version we speak (1.3), plus a version bitmap
	// element naming only 1.3 (libOpenflow's default bitmap also claims 1.0).
	step()
	hello, err := common.NewHello(ofpVersion13)
	if err != nil {
		return fail("build HELLO", err)
	}
	bm := common.NewHelloElemVersionBitmap()
	bm.Bitmaps = []uint32{1 << ofpVersion13}
	bm.Length = bm.Len()
	hello.Elements = []common.HelloElem{bm}
	hello.Header.Xid = s.nextXid()
	b, err := hello.MarshalBinary()
	if err != nil {
		return fail("encode HELLO", err)
	}
	if _, err := s.conn.Write(b); err != nil {
		return fail("send HELLO", err)
	}
	step()
	msg, err := readMsg(br)
	if err != nil {
		return fail("read the switch's HELLO", err)
	}
	switch msg[1] {
	case openflow13.Type_Hello:
	case openflow13.Type_Error:
		return fail("switch refused the connection", s.decodeError(msg))
	default:
		return fail("switch's first message", fmt.Errorf("got message type %d, want OFPT_HELLO", msg[1]))
	}
	peerMax, bitmap, err := decodeHello(msg)
	if err != nil {
		return fail("decode the switch's HELLO", err)
	}
	speaks13 := peerMax >= ofpVersion13
	if bitmap != nil {
		speaks13 = len(bitmap) > 0 && bitmap[0]&(1<<ofpVersion13) != 0
	}
	if !speaks13 {
		return fmt.Errorf("bridge %s (%s) does not allow OpenFlow 1.3 (it offers %s): set protocols=OpenFlow13 on the bridge (ovs-vsctl set bridge %s protocols=OpenFlow13)",
			s.bridge, s.path, describeVersions(peerMax, bitmap), s.bridge)
	}

	// OFPT_FEATURES_REQUEST → OFPT_FEATURES_REPLY (ofp_switch_features, §7.3.1).
	step()
	fxid := s.nextXid()
	if _, err := s.conn.Write(headerOnly(openflow13.Type_FeaturesRequest, fxid)); err != nil {
		return fail("send FEATURES_REQUEST", err)
	}
	for {
		step()
		msg, err := readMsg(br)
		if err != nil {
			return fail("read FEATURES_REPLY", err)
		}
		xid := binary.BigEndian.Uint32(msg[4:8])
		switch msg[1] {
		case openflow13.Type_EchoRequest:
			echo := append([]byte(nil), msg...)
			echo[1] = openflow13.Type_EchoReply
			if _, err := s.conn.Write(echo); err != nil {
				return fail("answer ECHO_REQUEST", err)
			}
		case openflow13.Type_Error:
			return fail("switch rejected FEATURES_REQUEST", s.decodeError(msg))
		case openflow13.Type_FeaturesReply:
			if xid != fxid {
				continue
			}
			m, err := safeParse(msg)
			if err != nil {
				return fail("decode FEATURES_REPLY", err)
			}
			f, ok := m.(*openflow13.SwitchFeatures)
			if !ok || len(f.DPID) != 8 {
				return fail("decode FEATURES_REPLY", fmt.Errorf("unexpected %T", m))
			}
			s.dpid = binary.BigEndian.Uint64(f.DPID)
			s.nTables = f.NumTables
			return nil
		default:
			s.log.Debug("ignoring message during handshake", "type", msgTypeName(msg[1]))
		}
	}
}

// DatapathID returns the bridge's 64-bit datapath id from the FEATURES_REPLY (OpenFlow
// 1.3.5 §7.3.1); it equals `ovs-vsctl get bridge BRIDGE datapath_id` read as hex.
func (s *Conn) DatapathID() uint64 { return s.dpid }

// NumTables returns the number of flow tables the switch reported (n_tables, §7.3.1).
func (s *Conn) NumTables() uint8 { return s.nTables }

// Done returns a channel closed when the connection is gone: a read or write error (e.g.
// ovs-vswitchd exited), an unanswered echo request, or Close.
func (s *Conn) Done() <-chan struct{} { return s.done }

// Err returns why the connection ended, or nil while it is up. The error matches
// ErrDisconnected.
func (s *Conn) Err() error {
	select {
	case <-s.done:
		return fmt.Errorf("%w: %w", ErrDisconnected, s.err)
	default:
		return nil
	}
}

// Close ends the connection, fails pending calls with an error matching ErrDisconnected and
// waits for the connection's goroutines to exit. It returns nil, also when called again.
func (s *Conn) Close() error {
	s.shutdown(errClosedByUser)
	s.wg.Wait()
	return nil
}

// shutdown records cause, closes Done and the socket; the first cause wins.
func (s *Conn) shutdown(cause error) {
	s.closeOnce.Do(func() {
		s.err = cause
		close(s.done)
		s.conn.Close()
		// At debug level: the connection's owner (Switch, which reconnects) warns once
		// per outage.
		if errors.Is(cause, errClosedByUser) {
			s.log.Info("OpenFlow connection closed")
		} else {
			s.log.Debug("OpenFlow connection lost", "err", cause)
		}
	})
}

// downErr is the error pending and new calls get once the connection is gone.
func (s *Conn) downErr() error {
	return fmt.Errorf("bridge %s (%s): %w: %w", s.bridge, s.path, ErrDisconnected, s.err)
}

// nextXid returns a fresh transaction id, never 0.
func (s *Conn) nextXid() uint32 {
	for {
		if x := s.xid.Add(1); x != 0 {
			return x
		}
	}
}

// Apply sends every flow mod of ops (OFPT_FLOW_MOD, OpenFlow 1.3.5 §7.3.4.1) followed by
// an OFPT_BARRIER_REQUEST (§7.3.8), in one write, and waits for the barrier reply. The
// switch processes the mods in order and, by the barrier semantics of §6.2, has reported
// every error caused by them before the reply, so when Apply returns nil all mods are in
// the flow tables. Mods are applied one by one, not atomically: when some fail the others
// still take effect (use ApplyBundle for all-or-nothing).
//
// Errors: a *RequestError per rejected mod (OFPT_ERROR, §7.4.4), naming the mod by its
// FlowModOp.Name and its type/code in words (e.g. OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ),
// joined with errors.Join; an error matching ErrDisconnected if the connection is or goes
// down; ctx.Err() (wrapped) if ctx ends first, in which case some mods may still be applied.
// An empty ops returns nil without touching the switch.
func (s *Conn) Apply(ctx context.Context, ops []FlowModOp) error {
	if len(ops) == 0 {
		return nil
	}
	c := newCall()
	bufs := make([][]byte, 0, len(ops)+1)
	for i, op := range ops {
		xid := s.nextXid()
		b, err := encodeOp(op, xid)
		if err != nil {
			return fmt.Errorf("encode flow mod %s: %w", opLabel(op, i), err)
		}
		c.labels[xid] = opLabel(op, i)
		c.names[xid] = op.Name
		bufs = append(bufs, b)
	}
	c.final = s.nextXid()
	c.labels[c.final] = "barrier request"
	bufs = append(bufs, headerOnly(openflow13.Type_BarrierRequest, c.final))
	if err := s.roundTrip(ctx, c, bufs); err != nil {
		return fmt.Errorf("apply %d flow mods to bridge %s: %w", len(ops), s.bridge, err)
	}
	if len(c.errs) > 0 {
		return fmt.Errorf("bridge %s rejected %d of %d flow mods: %w", s.bridge, len(c.errs), len(ops), c.joinedErrs())
	}
	return nil
}

// ApplyBundle installs ops atomically with the ONF bundle extension for OpenFlow 1.3
// (ONF EXT-230, the OpenFlow 1.4 bundles of §7.3.9 carried as experimenter messages; OVS
// implements it for flow mods). Either every mod takes effect or none does.
//
// It runs in two phases (OpenBundle, then Bundle.Commit). First OFPBCT_OPEN_REQUEST
// (flags ATOMIC|ORDERED), one bundle-add per flow mod and a barrier: OVS decodes and
// checks each mod when it is added and answers a bad one with an error at once, but keeps
// the bundle open and would commit the other mods, so on any error here ApplyBundle sends
// OFPBCT_DISCARD_REQUEST instead of committing. Then OFPBCT_COMMIT_REQUEST and wait for
// the commit reply; a mod that fails while being applied (e.g. OFPFMFC_OVERLAP) makes the
// switch roll the whole bundle back and report the mod and OFPBFC_MSG_FAILED for the
// commit.
//
// Errors: as Apply; a rejected bundle returns a *RequestError naming each failing mod (and,
// at commit, one for the commit request), joined. If ctx ends or the connection drops
// before the commit is sent, the bundle is discarded (best effort); if it ends after, the
// outcome is unknown, as with Apply. An empty ops returns nil.
func (s *Conn) ApplyBundle(ctx context.Context, ops []FlowModOp) error {
	if len(ops) == 0 {
		return nil
	}
	b, err := s.OpenBundle(ctx, ops)
	if err != nil {
		return err
	}
	return b.Commit(ctx)
}

// Bundle is a bundle OpenBundle opened on the switch with every mod added and checked,
// not committed yet: Commit or Discard it (exactly one of them, once). A caller may open
// the next bundle while one is being committed (pipelining: the switch handles a
// connection's messages in order, so the next bundle's open, adds and barrier are answered
// in the same pass as the commit before them) and commit it only once the one before is
// confirmed, discarding it otherwise.
type Bundle struct {
	s     *Conn
	id    uint32
	n     int // mods in the bundle
	ctrl  func(c *call, typ uint16, label string) ([]byte, uint32, error)
	added *call // phase 1: its labels and names name the mods' errors at commit
	ended bool
}

// OpenBundle runs the first phase of ApplyBundle: OFPBCT_OPEN_REQUEST (flags
// ATOMIC|ORDERED), one bundle-add per mod and a barrier, and waits for the barrier reply.
// A mod the switch refuses at add time, ctx ending or the connection dropping discard the
// bundle (best effort) and return the error (as ApplyBundle's). ops must not be empty.
func (s *Conn) OpenBundle(ctx context.Context, ops []FlowModOp) (*Bundle, error) {
	if len(ops) == 0 {
		return nil, errors.New("open bundle: no flow mods")
	}
	id := s.bundleID.Add(1)
	flags := openflow13.OFPBCT_ATOMIC | openflow13.OFPBCT_ORDERED
	ctrl := func(c *call, typ uint16, label string) ([]byte, uint32, error) {
		xid := s.nextXid()
		b, err := encodeMsg(openflow13.NewBundleControl(&openflow13.BundleControl{BundleID: id, Type: typ, Flags: flags}), xid)
		if err != nil {
			return nil, 0, fmt.Errorf("encode %s: %w", label, err)
		}
		c.labels[xid] = label
		return b, xid, nil
	}

	// Phase 1: open, add, barrier.
	c := newCall()
	bufs := make([][]byte, 0, len(ops)+2)
	b, _, err := ctrl(c, openflow13.OFPBCT_OPEN_REQUEST, fmt.Sprintf("bundle %d open request", id))
	if err != nil {
		return nil, err
	}
	bufs = append(bufs, b)
	for i, op := range ops {
		xid := s.nextXid()
		// The inner flow mod carries the bundle-add's xid: OVS reports a mod that fails at
		// commit time with the inner message's xid, and at add time with the outer one.
		inner, err := encodeOp(op, xid)
		if err != nil {
			return nil, fmt.Errorf("encode flow mod %s: %w", opLabel(op, i), err)
		}
		add := openflow13.NewBundleAdd(&openflow13.BundleAdd{BundleID: id, Flags: flags, Message: rawMsg(inner)})
		b, err := encodeMsg(add, xid)
		if err != nil {
			return nil, fmt.Errorf("encode bundle add of flow mod %s: %w", opLabel(op, i), err)
		}
		c.labels[xid] = opLabel(op, i)
		c.names[xid] = op.Name
		bufs = append(bufs, b)
	}
	c.final = s.nextXid()
	c.labels[c.final] = fmt.Sprintf("barrier request after bundle %d adds", id)
	bufs = append(bufs, headerOnly(openflow13.Type_BarrierRequest, c.final))
	bd := &Bundle{s: s, id: id, n: len(ops), ctrl: ctrl, added: c}
	if err := s.roundTrip(ctx, c, bufs); err != nil {
		bd.Discard()
		return nil, fmt.Errorf("apply bundle %d of %d flow mods to bridge %s: %w", id, len(ops), s.bridge, err)
	}
	if len(c.errs) > 0 {
		bd.Discard()
		return nil, fmt.Errorf("bridge %s rejected flow mods of bundle %d (%d mods), bundle discarded, none installed: %w",
			s.bridge, id, len(ops), c.joinedErrs())
	}
	return bd, nil
}

// Discard sends OFPBCT_DISCARD_REQUEST for the bundle, fire and forget (the reply, or an
// error, is logged as unclaimed): none of its mods takes effect. It does nothing once the
// bundle was committed or discarded.
func (b *Bundle) Discard() {
	if b.ended {
		return
	}
	b.ended = true
	s := b.s
	d := newCall()
	msg, xid, err := b.ctrl(d, openflow13.OFPBCT_DISCARD_REQUEST, fmt.Sprintf("bundle %d discard request", b.id))
	if err == nil {
		wctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
		_ = s.write(wctx, [][]byte{msg})
		cancel()
		s.log.Debug("discarded bundle", "bundle", b.id, "xid", xid)
	}
}

// Commit sends OFPBCT_COMMIT_REQUEST and waits for the commit reply: when it returns nil
// every mod of the bundle is in the switch's tables, else none is (a mod that fails while
// being applied rolls the whole bundle back; errors name it). If ctx ends or the
// connection drops after the commit is sent, the outcome is unknown, as with Apply.
// Committing a bundle twice or after Discard is an error.
func (b *Bundle) Commit(ctx context.Context) error {
	if b.ended {
		return fmt.Errorf("bundle %d on bridge %s: already committed or discarded", b.id, b.s.bridge)
	}
	b.ended = true
	s, c := b.s, b.added
	// Errors name the inner messages, whose xids are those of the adds.
	cc := newCall()
	for xid, l := range c.labels {
		cc.labels[xid] = l
	}
	for xid, n := range c.names {
		cc.names[xid] = n
	}
	delete(cc.labels, c.final)
	msg, final, err := b.ctrl(cc, openflow13.OFPBCT_COMMIT_REQUEST, fmt.Sprintf("bundle %d commit request", b.id))
	if err != nil {
		b.ended = false
		b.Discard()
		return err
	}
	cc.final = final
	if err := s.roundTrip(ctx, cc, [][]byte{msg}); err != nil {
		return fmt.Errorf("commit bundle %d of %d flow mods to bridge %s: %w", b.id, b.n, s.bridge, err)
	}
	if len(cc.errs) > 0 {
		return fmt.Errorf("bridge %s rejected bundle %d of %d flow mods at commit, none installed: %w", s.bridge, b.id, b.n, cc.joinedErrs())
	}
	if err := checkBundleReply(cc.replies, openflow13.OFPBCT_COMMIT_REPLY); err != nil {
		return fmt.Errorf("bundle %d on bridge %s: %w", b.id, s.bridge, err)
	}
	return nil
}

// Barrier sends an OFPT_BARRIER_REQUEST and waits for its reply (OpenFlow 1.3.5 §7.3.8):
// when it returns nil, the switch has finished every message sent before it on this
// connection. Errors: as Apply (ErrDisconnected, ctx).
func (s *Conn) Barrier(ctx context.Context) error {
	c := newCall()
	c.final = s.nextXid()
	c.labels[c.final] = "barrier request"
	if err := s.roundTrip(ctx, c, [][]byte{headerOnly(openflow13.Type_BarrierRequest, c.final)}); err != nil {
		return fmt.Errorf("barrier on bridge %s: %w", s.bridge, err)
	}
	if len(c.errs) > 0 {
		return fmt.Errorf("barrier on bridge %s: %w", s.bridge, c.joinedErrs())
	}
	return nil
}

// Echo sends one OFPT_ECHO_REQUEST (OpenFlow 1.3.5 §7.5.2) and returns the round-trip
// time. The keep-alive uses it; callers may use it as a liveness probe.
func (s *Conn) Echo(ctx context.Context) (time.Duration, error) {
	c := newCall()
	c.final = s.nextXid()
	c.labels[c.final] = "echo request"
	start := time.Now()
	if err := s.roundTrip(ctx, c, [][]byte{headerOnly(openflow13.Type_EchoRequest, c.final)}); err != nil {
		return 0, fmt.Errorf("echo to bridge %s: %w", s.bridge, err)
	}
	if len(c.errs) > 0 {
		return 0, fmt.Errorf("echo to bridge %s: %w", s.bridge, c.joinedErrs())
	}
	return time.Since(start), nil
}

// DumpFlows returns the flow entries of table tableID (TableAll, 255, for all
// tables) whose cookie matches cookie under cookieMask (a zero mask matches every flow),
// with an OFPMP_FLOW multipart request (OpenFlow 1.3.5 §7.3.5.2). Replies split over several
// messages (OFPMPF_REPLY_MORE) are gathered. Each entry is an ofp_flow_stats decoded with
// libOpenflow; an entry whose instructions libOpenflow cannot decode keeps its fixed
// fields and match, has nil Instructions, and is logged: at debug level when the cause is
// a Nicira action libOpenflow has no decoder for (multipath, in every UDP Service port's
// flow), else at warning level.
//
// Errors: OFPT_ERROR for the request (*RequestError, e.g. OFPBRC_BAD_TABLE_ID), a malformed
// reply, ErrDisconnected, ctx.
func (s *Conn) DumpFlows(ctx context.Context, tableID uint8, cookie, cookieMask uint64) ([]*openflow13.FlowStats, error) {
	req := openflow13.NewFlowStatsRequest()
	req.TableId = tableID
	req.Cookie = cookie
	req.CookieMask = cookieMask
	mp := &openflow13.MultipartRequest{Header: openflow13.NewOfp13Header(), Type: openflow13.MultipartType_Flow, Body: req}
	mp.Header.Type = openflow13.Type_MultiPartRequest
	c := newCall()
	c.final = s.nextXid()
	c.multipart = true
	c.labels[c.final] = fmt.Sprintf("flow stats request (table %d, cookie %#x/%#x)", tableID, cookie, cookieMask)
	b, err := encodeMsg(mp, c.final)
	if err != nil {
		return nil, fmt.Errorf("encode flow stats request: %w", err)
	}
	if err := s.roundTrip(ctx, c, [][]byte{b}); err != nil {
		return nil, fmt.Errorf("dump flows of bridge %s: %w", s.bridge, err)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("dump flows of bridge %s: %w", s.bridge, c.joinedErrs())
	}
	var out []*openflow13.FlowStats
	for _, r := range c.replies {
		fs, err := s.decodeFlowStatsReply(r)
		if err != nil {
			return nil, fmt.Errorf("dump flows of bridge %s: %w", s.bridge, err)
		}
		out = append(out, fs...)
	}
	return out, nil
}

func newCall() *call {
	return &call{labels: map[uint32]string{}, names: map[uint32]string{}, done: make(chan struct{})}
}

// joinedErrs returns the call's switch errors as one error (errors.Join of *RequestError).
func (c *call) joinedErrs() error {
	errs := make([]error, len(c.errs))
	for i, e := range c.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// roundTrip registers c under all its xids, writes bufs in one write and waits until the
// reader finishes c, ctx ends or the connection goes down.
func (s *Conn) roundTrip(ctx context.Context, c *call, bufs [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return s.downErr()
	default:
	}
	for xid := range c.labels {
		s.calls[xid] = c
	}
	s.mu.Unlock()

	if err := s.write(ctx, bufs); err != nil {
		s.forget(c)
		return err
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		s.forget(c)
		return fmt.Errorf("waiting for the switch's reply to %s: %w", c.labels[c.final], ctx.Err())
	case <-s.done:
		select {
		case <-c.done: // finished just before the connection went
			return nil
		default:
		}
		s.forget(c)
		return s.downErr()
	}
}

// forget unregisters c; late replies for it are then logged and dropped.
func (s *Conn) forget(c *call) {
	s.mu.Lock()
	for xid := range c.labels {
		if s.calls[xid] == c {
			delete(s.calls, xid)
		}
	}
	s.mu.Unlock()
}

// write sends bufs with one vectored write under the write lock. Any failure ends the
// connection: after a partial write the peer can no longer find message boundaries. When
// ctx ends while it waits for the lock (another call's write is blocked), nothing of bufs
// is sent and the error wraps ctx's; a write once started is bounded by WriteTimeout only.
func (s *Conn) write(ctx context.Context, bufs [][]byte) error {
	select {
	case s.wmu <- struct{}{}:
	case <-s.done:
		return s.downErr()
	case <-ctx.Done():
		return fmt.Errorf("not sent to the switch: another write to it has been blocked (is ovs-vswitchd reading its socket?): %w", ctx.Err())
	}
	defer func() { <-s.wmu }()
	select {
	case <-s.done:
		return s.downErr()
	default:
	}
	s.conn.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	nb := net.Buffers(bufs)
	if _, err := nb.WriteTo(s.conn); err != nil {
		s.shutdown(fmt.Errorf("write to the switch: %w", err))
		return s.downErr()
	}
	return nil
}

// keepAlive sends an echo request every EchoInterval and ends the connection when one is
// not answered within EchoTimeout (OpenFlow 1.3.5 §6.3.2 connection interruption).
func (s *Conn) keepAlive() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.EchoInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.EchoTimeout)
		rtt, err := s.Echo(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				s.shutdown(fmt.Errorf("no echo reply from the switch within %s, connection declared dead", s.opts.EchoTimeout))
			}
			return
		}
		s.log.Log(context.Background(), slog.LevelDebug-4, "echo reply", "rtt", rtt)
	}
}

// readLoop reads messages in order and routes them; it ends the connection on a read
// error or a framing error.
func (s *Conn) readLoop(br *bufio.Reader) {
	defer s.wg.Done()
	for {
		msg, err := readMsg(br)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("switch closed the connection (ovs-vswitchd exited or the bridge was deleted): %w", err)
			} else {
				err = fmt.Errorf("read from the switch: %w", err)
			}
			s.shutdown(err)
			return
		}
		s.dispatch(msg)
	}
}

// dispatch handles one framed message from the switch.
func (s *Conn) dispatch(msg []byte) {
	typ := msg[1]
	xid := binary.BigEndian.Uint32(msg[4:8])
	switch typ {
	case openflow13.Type_EchoRequest:
		// Answer with the same xid and payload (§7.5.2); from another goroutine, so the
		// reader never blocks behind a large write.
		reply := append([]byte(nil), msg...)
		reply[1] = openflow13.Type_EchoReply
		s.log.Debug("answering the switch's echo request", "xid", xid)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
			defer cancel()
			_ = s.write(ctx, [][]byte{reply})
		}()
		return
	case openflow13.Type_PacketIn:
		q := s.opts.PacketIns
		if q == nil {
			s.log.Debug("ignoring packet-in (no packet-in queue)", "xid", xid)
			return
		}
		p, err := decodePacketIn(msg)
		if err != nil {
			s.log.Warn("dropping undecodable packet-in", "err", err)
			return
		}
		p.Data = append([]byte(nil), p.Data...) // msg is not reused, but keep Data independent
		q.offer(p)
		return
	case openflow13.Type_FlowRemoved:
		q := s.opts.FlowRemoved
		if q == nil {
			s.log.Debug("ignoring flow-removed (no flow-removed queue)", "xid", xid)
			return
		}
		f, err := decodeFlowRemoved(msg)
		if err != nil {
			s.log.Warn("dropping undecodable flow-removed", "err", err)
			return
		}
		if s.opts.FlowRemovedFilter != nil && !s.opts.FlowRemovedFilter(f) {
			return
		}
		if !q.offer(f) { // counted (FlowRemovedQueue.Dropped); a mass delete can fill it
			s.log.Debug("flow-removed dropped: queue full", "table", f.TableID, "cookie", fmt.Sprintf("%#x", f.Cookie))
		}
		return
	case openflow13.Type_Hello, openflow13.Type_PortStatus:
		s.log.Debug("ignoring unsolicited message", "type", msgTypeName(typ), "xid", xid)
		return
	case openflow13.Type_Error:
		oe := s.decodeError(msg)
		s.mu.Lock()
		c := s.calls[xid]
		if c != nil {
			c.errs = append(c.errs, &RequestError{Request: c.labels[xid], Name: c.names[xid], Err: oe})
			if xid == c.final {
				s.finishLocked(c)
			}
		}
		s.mu.Unlock()
		if c == nil {
			s.log.Warn("OpenFlow error for a request nobody waits for", "xid", xid, "err", oe)
		}
		return
	}
	s.mu.Lock()
	c := s.calls[xid]
	if c != nil && xid == c.final {
		c.replies = append(c.replies, msg)
		more := c.multipart && typ == openflow13.Type_MultiPartReply && len(msg) >= 12 &&
			binary.BigEndian.Uint16(msg[10:12])&openflow13.OFPMPF_REPLY_MORE != 0
		if !more {
			s.finishLocked(c)
		}
	}
	s.mu.Unlock()
	if c == nil {
		s.log.Debug("ignoring message nobody waits for", "type", msgTypeName(typ), "xid", xid)
	}
}

// finishLocked unregisters c and wakes its caller. s.mu must be held.
func (s *Conn) finishLocked(c *call) {
	for x := range c.labels {
		if s.calls[x] == c {
			delete(s.calls, x)
		}
	}
	close(c.done)
}

// readMsg reads one OpenFlow message: the 8-byte ofp_header, then length-8 more bytes
// (OpenFlow 1.3.5 §7.1).
func readMsg(r io.Reader) ([]byte, error) {
	var hdr [ofpHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[2:4]))
	if n < ofpHeaderLen {
		return nil, fmt.Errorf("malformed OpenFlow header: length %d < %d bytes", n, ofpHeaderLen)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[ofpHeaderLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return msg, nil
}

// headerOnly returns a body-less OpenFlow 1.3 message (barrier, echo, features request).
func headerOnly(typ uint8, xid uint32) []byte {
	h := common.Header{Version: ofpVersion13, Type: typ, Length: ofpHeaderLen, Xid: xid}
	b, _ := h.MarshalBinary()
	return b
}

// encodeMsg marshals m with libOpenflow and stamps xid into the header, leaving m's own
// header untouched so a message value can be shared.
func encodeMsg(m util.Message, xid uint32) ([]byte, error) {
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if len(b) < ofpHeaderLen || len(b) > ofpMaxMsgLen {
		return nil, fmt.Errorf("encoded message is %d bytes, want %d..%d", len(b), ofpHeaderLen, ofpMaxMsgLen)
	}
	binary.BigEndian.PutUint32(b[4:8], xid)
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	return b, nil
}

// encodeFlowMod marshals an ofp_flow_mod (OpenFlow 1.3.5 §7.3.4.1) with xid, correcting
// two libOpenflow encoder bugs on the bytes:
//   - FlowMod.MarshalBinary writes OutPort into the out_group field too, so a delete
//     filtered by out_port would also filter by a bogus group; out_group is rewritten from
//     Mod.OutGroup (offset 40 of the message).
//   - For OFPFC_DELETE/DELETE_STRICT, FlowMod.Len (hence the header length) leaves out the
//     instructions that MarshalBinary still appends, which would desynchronise the stream;
//     the header length is set to the real size (encodeMsg).
//
// It also sets the header version and type, so a FlowMod built without NewFlowMod is sent
// as OpenFlow 1.3 OFPT_FLOW_MOD. The caller's FlowMod header is not modified.
func encodeFlowMod(m *openflow13.FlowMod, xid uint32) ([]byte, error) {
	if m == nil {
		return nil, errors.New("nil flow mod")
	}
	cp := *m // MarshalBinary stores the length in the header: keep the caller's intact
	b, err := encodeMsg(&cp, xid)
	if err != nil {
		return nil, err
	}
	if len(b) < 48 {
		return nil, fmt.Errorf("encoded flow mod is %d bytes, shorter than the 48-byte fixed part", len(b))
	}
	b[0] = ofpVersion13
	b[1] = openflow13.Type_FlowMod
	binary.BigEndian.PutUint32(b[40:44], m.OutGroup)
	return b, nil
}

// rawMsg is an already-encoded OpenFlow message, for embedding in a bundle add.
type rawMsg []byte

func (r rawMsg) Len() uint16                       { return uint16(len(r)) }
func (r rawMsg) MarshalBinary() ([]byte, error)    { return []byte(r), nil }
func (r rawMsg) UnmarshalBinary(data []byte) error { return errors.New("rawMsg is encode-only") }

// safeParse runs openflow13.Parse, turning a decoder panic (libOpenflow indexes slices
// without bounds checks and dereferences nil decoders for unknown types) into an error.
func safeParse(msg []byte) (m util.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("libOpenflow decoder panicked on message type %d (%d bytes): %v", msg[1], len(msg), r)
		}
	}()
	return openflow13.Parse(msg)
}

// decodeHello decodes an OFPT_HELLO (OpenFlow 1.3.5 §7.5.1): the header version and, if
// present, the version bitmap. Decoded here because common.Hello.UnmarshalBinary loops
// forever on an element type it does not know.
func decodeHello(msg []byte) (version uint8, bitmap []uint32, err error) {
	version = msg[0]
	for off := ofpHeaderLen; off+4 <= len(msg); {
		typ := binary.BigEndian.Uint16(msg[off:])
		l := int(binary.BigEndian.Uint16(msg[off+2:]))
		if l < 4 || off+l > len(msg) {
			return version, bitmap, fmt.Errorf("malformed hello element at offset %d (length %d)", off, l)
		}
		if typ == ofpHelloElemVersionBitmap {
			bitmap = []uint32{}
			for p := off + 4; p+4 <= off+l; p += 4 {
				bitmap = append(bitmap, binary.BigEndian.Uint32(msg[p:]))
			}
		}
		off += (l + 7) / 8 * 8 // elements are padded to 8 bytes
	}
	return version, bitmap, nil
}

// describeVersions renders the OpenFlow versions a HELLO offers, e.g. "OpenFlow 1.0, 1.4".
func describeVersions(max uint8, bitmap []uint32) string {
	names := map[int]string{1: "1.0", 2: "1.1", 3: "1.2", 4: "1.3", 5: "1.4", 6: "1.5"}
	name := func(v int) string {
		if n, ok := names[v]; ok {
			return n
		}
		return fmt.Sprintf("wire version %d", v)
	}
	if bitmap == nil {
		return "OpenFlow up to " + name(int(max))
	}
	var vs []string
	for i, w := range bitmap {
		for bit := 0; bit < 32; bit++ {
			if w&(1<<bit) != 0 {
				vs = append(vs, name(i*32+bit))
			}
		}
	}
	if len(vs) == 0 {
		return "no OpenFlow version"
	}
	return "OpenFlow " + strings.Join(vs, ", ")
}

// checkBundleReply checks that the last reply is a bundle control message of type want.
func checkBundleReply(replies [][]byte, want uint16) error {
	if len(replies) == 0 {
		return errors.New("no bundle control reply")
	}
	r := replies[len(replies)-1]
	// ofp_experimenter_header (16 bytes) + ofp_bundle_ctrl_msg (bundle_id 4, type 2, flags 2).
	if r[1] != openflow13.Type_Experimenter || len(r) < 24 ||
		binary.BigEndian.Uint32(r[8:12]) != onfExperimenterID ||
		binary.BigEndian.Uint32(r[12:16]) != openflow13.Type_BundleCtrl {
		return fmt.Errorf("unexpected reply to bundle control request: message type %d, %d bytes", r[1], len(r))
	}
	if got := binary.BigEndian.Uint16(r[20:22]); got != want {
		return fmt.Errorf("bundle control reply type %d, want %d", got, want)
	}
	return nil
}

// decodeFlowStatsReply decodes one OFPMP_FLOW multipart reply (OpenFlow 1.3.5 §7.3.5.2):
// ofp_multipart_reply (16 bytes) followed by ofp_flow_stats entries, each starting with its
// own length. Framed here rather than with MultipartReply.UnmarshalBinary, which steps by
// the re-computed length of each decoded entry (so one mis-decoded field shifts every
// following entry) and panics on entries it cannot decode.
func (s *Conn) decodeFlowStatsReply(msg []byte) ([]*openflow13.FlowStats, error) {
	if len(msg) < 16 || msg[1] != openflow13.Type_MultiPartReply {
		return nil, fmt.Errorf("malformed flow stats reply: message type %d, %d bytes", msg[1], len(msg))
	}
	if t := binary.BigEndian.Uint16(msg[8:10]); t != openflow13.MultipartType_Flow {
		return nil, fmt.Errorf("multipart reply of type %d to a flow stats request", t)
	}
	var out []*openflow13.FlowStats
	for off := 16; off < len(msg); {
		if off+2 > len(msg) {
			return nil, fmt.Errorf("malformed flow stats reply: %d trailing bytes", len(msg)-off)
		}
		l := int(binary.BigEndian.Uint16(msg[off:]))
		if l < 56 || off+l > len(msg) { // 48-byte fixed part + at least an 8-byte match
			return nil, fmt.Errorf("malformed flow stats entry at offset %d: length %d", off, l)
		}
		out = append(out, s.decodeFlowStats(msg[off:off+l]))
		off += l
	}
	return out, nil
}

// decodeFlowStats decodes one ofp_flow_stats entry with libOpenflow; if that fails it
// returns the fixed fields and (if decodable) the match, without instructions. The MAC
// match fields libOpenflow reads as zeros are then filled from the entry's bytes
// (fillMACFields).
func (s *Conn) decodeFlowStats(e []byte) (fs *openflow13.FlowStats) {
	defer func() {
		if err := fillMACFields(&fs.Match, e[48:]); err != nil {
			s.log.Warn("flow stats entry: MAC match fields not decoded", "table", fs.TableId,
				"priority", fs.Priority, "cookie", fmt.Sprintf("%#x", fs.Cookie), "err", err)
		}
	}()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("libOpenflow decoder panicked: %v", r)
			}
		}()
		fs = openflow13.NewFlowStats()
		return fs.UnmarshalBinary(e)
	}()
	if err == nil {
		return fs
	}
	fs = openflow13.NewFlowStats()
	fs.Length = binary.BigEndian.Uint16(e[0:])
	fs.TableId = e[2]
	fs.DurationSec = binary.BigEndian.Uint32(e[4:])
	fs.DurationNSec = binary.BigEndian.Uint32(e[8:])
	fs.Priority = binary.BigEndian.Uint16(e[12:])
	fs.IdleTimeout = binary.BigEndian.Uint16(e[14:])
	fs.HardTimeout = binary.BigEndian.Uint16(e[16:])
	fs.Flags = binary.BigEndian.Uint16(e[18:])
	fs.Cookie = binary.BigEndian.Uint64(e[24:])
	fs.PacketCount = binary.BigEndian.Uint64(e[32:])
	fs.ByteCount = binary.BigEndian.Uint64(e[40:])
	merr := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("libOpenflow match decoder panicked: %v", r)
			}
		}()
		m := openflow13.NewMatch()
		if err := m.UnmarshalBinary(e[48:]); err != nil {
			return err
		}
		fs.Match = *m
		return nil
	}()
	if sub := undecodedNXSubtype(e); sub >= 0 && merr == nil {
		// A well-formed flow with a Nicira action the pinned libOpenflow has no decoder
		// for (multipath): expected on every dump, so not a warning.
		s.log.Debug("flow stats entry without instructions: a Nicira action libOpenflow does not decode", "table", fs.TableId,
			"priority", fs.Priority, "cookie", fmt.Sprintf("%#x", fs.Cookie), "subtype", sub)
		return fs
	}
	s.log.Warn("flow stats entry only partly decoded: instructions dropped", "table", fs.TableId,
		"priority", fs.Priority, "cookie", fmt.Sprintf("%#x", fs.Cookie), "err", err, "matchErr", merr)
	return fs
}

// undecodedNXSubtype returns the subtype of the first Nicira action (OFPAT_EXPERIMENTER,
// vendor 0x2320) in the write- or apply-actions instructions of ofp_flow_stats entry e
// (OpenFlow 1.3.5 §7.3.5.2: 48 fixed bytes, the match padded to 8, then instructions)
// that the pinned libOpenflow has no decoder for (openflow13.DecodeNxAction gives none,
// e.g. NXAST_MULTIPATH, 10), or -1 when there is none or e is malformed.
func undecodedNXSubtype(e []byte) int {
	if len(e) < 52 {
		return -1
	}
	end := min(int(binary.BigEndian.Uint16(e[0:])), len(e))
	off := 48 + (int(binary.BigEndian.Uint16(e[50:]))+7)/8*8
	for off+4 <= end {
		typ, l := binary.BigEndian.Uint16(e[off:]), int(binary.BigEndian.Uint16(e[off+2:]))
		if l < 4 || off+l > end {
			return -1
		}
		if typ == openflow13.InstrType_WRITE_ACTIONS || typ == openflow13.InstrType_APPLY_ACTIONS {
			for a := off + 8; a+4 <= off+l; {
				at, al := binary.BigEndian.Uint16(e[a:]), int(binary.BigEndian.Uint16(e[a+2:]))
				if al < 8 || a+al > off+l {
					return -1
				}
				if at == openflow13.ActionType_Experimenter && al >= openflow13.NxActionHeaderLength &&
					binary.BigEndian.Uint32(e[a+4:]) == openflow13.NxExperimenterID && openflow13.DecodeNxAction(e[a:a+al]) == nil {
					return int(binary.BigEndian.Uint16(e[a+8:]))
				}
				a += al
			}
		}
		off += l
	}
	return -1
}

// fillMACFields sets the values (and masks) of m's MAC match fields (eth_src, eth_dst,
// arp_sha, arp_tha) from raw, the ofp_match they were decoded from (OpenFlow 1.3.5
// §7.2.3: type, length, then OXM TLVs of a 4-byte header class:16 field:7 hasmask:1
// length:8 and length bytes of value then mask). The pinned libOpenflow decodes these
// fields by copying into a nil net.HardwareAddr (EthSrcField, EthDstField and ArpXHaField
// UnmarshalBinary), so they read as zeros. Fields are walked by the lengths on the wire
// and matched to m.Fields by position and header. Errors: raw does not describe m's
// fields (m is left as libOpenflow decoded it from there on).
func fillMACFields(m *openflow13.Match, raw []byte) error {
	if len(raw) < 4 {
		return fmt.Errorf("match of %d bytes", len(raw))
	}
	end := min(int(binary.BigEndian.Uint16(raw[2:])), len(raw))
	off := 4
	for i := range m.Fields {
		f := &m.Fields[i]
		if off+4 > end {
			return fmt.Errorf("match field %d (class %#x field %d) beyond the match's %d bytes", i, f.Class, f.Field, end)
		}
		class, field, hasMask, l := binary.BigEndian.Uint16(raw[off:]), raw[off+2]>>1, raw[off+2]&1 == 1, int(raw[off+3])
		if class != f.Class || field != f.Field || hasMask != f.HasMask || off+4+l > end {
			return fmt.Errorf("match field %d: wire header class %#x field %d length %d, decoded class %#x field %d", i, class, field, l, f.Class, f.Field)
		}
		payload := raw[off+4 : off+4+l]
		if class == openflow13.OXM_CLASS_EXPERIMENTER && len(payload) >= 4 {
			payload = payload[4:]
		}
		off += 4 + l
		n := 6
		if !hasMask && len(payload) != n || hasMask && len(payload) != 2*n {
			continue // not a 6-byte address
		}
		mac := func(b []byte) net.HardwareAddr { return append(net.HardwareAddr(nil), b[:n]...) }
		set := func(v util.Message, b []byte) util.Message {
			switch v.(type) {
			case *openflow13.EthSrcField:
				return &openflow13.EthSrcField{EthSrc: mac(b)}
			case *openflow13.EthDstField:
				return &openflow13.EthDstField{EthDst: mac(b)}
			case *openflow13.ArpXHaField:
				return &openflow13.ArpXHaField{ArpHa: mac(b)}
			}
			return v
		}
		f.Value = set(f.Value, payload)
		if hasMask && f.Mask != nil {
			f.Mask = set(f.Mask, payload[n:])
		}
	}
	return nil
}

// MatchKey returns a match as a comparable string: its encoded OXM/NXM fields with their
// values and masks, sorted, since a switch may return the fields of a dumped entry in
// another order than they were sent (OpenFlow 1.3.5 §7.2.3.5 leaves the order open). MAC
// fields of entries from DumpFlows carry their values (fillMACFields), so a dumped match
// and the match that was sent give the same key.
func MatchKey(m openflow13.Match) string {
	fields := make([][]byte, 0, len(m.Fields))
	for i := range m.Fields {
		b, err := m.Fields[i].MarshalBinary()
		if err != nil {
			b = []byte(fmt.Sprintf("unencodable field class %d field %d", m.Fields[i].Class, m.Fields[i].Field))
		}
		fields = append(fields, b)
	}
	sort.Slice(fields, func(i, j int) bool { return bytes.Compare(fields[i], fields[j]) < 0 })
	return fmt.Sprintf("%x", bytes.Join(fields, []byte{0xff}))
}

// opLabel names op i of a batch for errors.
func opLabel(op FlowModOp, i int) string {
	if op.Name == "" {
		return fmt.Sprintf("flow mod #%d of the batch", i+1)
	}
	return fmt.Sprintf("flow mod %q", op.Name)
}
