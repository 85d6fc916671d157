package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	libovsdb "github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ofsdn/ofsdn/ovsdb/vswitchd"
)

// Table names of the Open_vSwitch database (vswitch.ovsschema) that the client monitors.
const (
	tableOpenvSwitch = vswitchd.OpenvSwitchTable
	tableBridge      = vswitchd.BridgeTable
	tablePort        = vswitchd.PortTable
	tableInterface   = vswitchd.InterfaceTable
	tableFlowTable   = vswitchd.FlowTableTable
)

// closedEndpoint replaces the real endpoint when the client is closed, so that a
// reconnection attempt that libovsdb had already scheduled can never succeed.
const closedEndpoint = "unix:/dev/null/ofsdn-ovsdb-client-closed"

// ErrClosed is returned by every operation on a Client after Close.
var ErrClosed = errors.New("ovsdb: client is closed")

// ErrUnavailable matches (errors.Is) every error returned because Open vSwitch cannot be
// reached right now: the session with ovsdb-server is lost and did not come back within
// Options.ReconnectWait, or it was lost while a write or a wait was in progress. The
// condition is transient (the client keeps reconnecting), so callers should fail the
// request with "try again later" (CNI error 11) rather than as a permanent error. The
// controller folds it, with OpenFlow's openflow.ErrDisconnected, into
// controller.ErrOVSUnavailable.
var ErrUnavailable = errors.New("Open vSwitch is unavailable (ovsdb-server or ovs-vswitchd is down or restarting); try again later")

// Options tunes a Client. The zero value is valid: every zero field takes the default
// given in its comment.
type Options struct {
	// Logger receives the client's logs and libovsdb's (libovsdb's verbosity level V(n)
	// becomes slog level -n, so its chatter shows only at slog.LevelDebug).
	// Default: slog.Default().
	Logger *slog.Logger
	// ConnectTimeout bounds one connection attempt: dial, schema fetch and the initial
	// monitor reply. Default: 5 seconds.
	ConnectTimeout time.Duration
	// MaxBackoff is the longest pause between two reconnection attempts; pauses start at
	// 100 milliseconds and grow by 1.5 each time. Default: 5 seconds.
	MaxBackoff time.Duration
	// EchoInterval, when > 0, makes the client send an RFC 7047 §4.1.11 echo after that
	// much idle time and reconnect when it is not answered. Needed on tcp: endpoints to
	// notice a peer that vanished without closing the connection; a unix: socket reports a
	// dead ovsdb-server at once. It must exceed ConnectTimeout. Default: 0 (off).
	EchoInterval time.Duration
	// WaitTimeout bounds waits for ovs-vswitchd (an ofport, a reconfiguration) and single
	// transactions when the caller's context has no deadline. Default: 10 seconds.
	WaitTimeout time.Duration
	// ReconnectWait is how long a write issued while the session is down waits for the
	// client to reconnect before it fails with an error matching ErrUnavailable (never
	// longer than the caller's context allows). Default: 2 seconds.
	ReconnectWait time.Duration
	// GroupCommitMaxWait bounds how long a port insert or delete that arrives while
	// another group of them is in flight waits before its own group transaction is sent
	// (see commit.go: a change arriving when nothing is in flight is sent at once).
	// Default: 5 milliseconds.
	GroupCommitMaxWait time.Duration
	// GroupCommitMaxBatch is the most port inserts and deletes one group transaction
	// carries; 1 sends every change in a transaction of its own. Default: 64.
	GroupCommitMaxBatch int
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 10 * time.Second
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = 2 * time.Second
	}
	if o.GroupCommitMaxWait <= 0 {
		o.GroupCommitMaxWait = defaultGroupCommitMaxWait
	}
	if o.GroupCommitMaxBatch <= 0 {
		o.GroupCommitMaxBatch = defaultGroupCommitMaxBatch
	}
}

// Client is a connection to ovsdb-server's Open_vSwitch database with a monitor cache of
// the Open_vSwitch, Bridge, Port, Interface and Flow_Table tables. It is safe for
// concurrent use. Reads come from the cache; writes are RFC 7047 transactions that block
// while the client is reconnecting, until their context is done.
type Client struct {
	endpoint string
	opts     Options
	log      *slog.Logger
	ovs      client.Client

	closeOnce sync.Once
	closed    chan struct{}
	lost      atomic.Bool // the session was lost; cleared when the cache is refilled

	commit  *committer    // group commit of port inserts and deletes
	uuidSeq atomic.Uint64 // makes named UUIDs unique within a group transaction

	mu          sync.Mutex
	waiters     map[string]map[chan struct{}]struct{} // key: "Table/name" (see waitKey)
	reconnectCh []chan struct{}                       // see Reconnected

	ofportMu   sync.Mutex     // guards the chosen-ofport state (ofport.go)
	ofportHeld map[int]string // ofport → interface name, held by ReserveOFPort; nil until first use
	ofportNext int            // the last ofport ReserveOFPort handed out
}

// Connect dials ovsdb-server at endpoint ("unix:/path/db.sock" or "tcp:host:port"),
// checks that it serves the Open_vSwitch database, and starts a monitor of the
// Open_vSwitch, Bridge, Port, Interface and Flow_Table tables (RFC 7047 §4.1.5; libovsdb
// uses the monitor_cond_since extension) that fills the client's cache before Connect
// returns.
//
// Until the first connection succeeds Connect retries with backoff for as long as ctx
// allows, so give ctx a deadline. The error then names the endpoint and the last
// failure. After that, a lost connection is re-established automatically (libovsdb
// WithReconnect, backoff capped at Options.MaxBackoff, never giving up) and the monitor
// is re-issued; see Connected.
func Connect(ctx context.Context, endpoint string, opts Options) (*Client, error) {
	if !strings.HasPrefix(endpoint, "unix:") && !strings.HasPrefix(endpoint, "tcp:") {
		return nil, fmt.Errorf("ovsdb: endpoint %q: want \"unix:/path/to/db.sock\" or \"tcp:HOST:PORT\"", endpoint)
	}
	opts.setDefaults()
	if opts.EchoInterval > 0 && opts.EchoInterval <= opts.ConnectTimeout {
		return nil, fmt.Errorf("ovsdb: EchoInterval %s must be longer than ConnectTimeout %s", opts.EchoInterval, opts.ConnectTimeout)
	}
	dbModel, err := model.NewClientDBModel("Open_vSwitch", map[string]model.Model{
		tableOpenvSwitch: &vswitchd.OpenvSwitch{},
		tableBridge:      &vswitchd.Bridge{},
		tablePort:        &vswitchd.Port{},
		tableInterface:   &vswitchd.Interface{},
		tableFlowTable:   &vswitchd.FlowTable{},
	})
	if err != nil {
		return nil, fmt.Errorf("ovsdb: building the client database model: %w", err)
	}
	c := &Client{
		endpoint: endpoint,
		opts:     opts,
		log:      opts.Logger.With("ovsdb", endpoint),
		closed:   make(chan struct{}),
		waiters:  make(map[string]map[chan struct{}]struct{}),
	}
	c.commit = newCommitter(c, opts.GroupCommitMaxWait, opts.GroupCommitMaxBatch)
	lr := logr.New(reconnectQuiet{logr.FromSlogHandler(c.log.Handler()).GetSink()}).WithName("libovsdb")
	rb := newReconnectBackoff(opts.MaxBackoff, c.closed, &c.lost, c.log)
	copts := []client.Option{client.WithEndpoint(endpoint), client.WithLogger(&lr)}
	if opts.EchoInterval > 0 {
		copts = append(copts, client.WithInactivityCheck(opts.EchoInterval, opts.ConnectTimeout, rb))
	} else {
		copts = append(copts, client.WithReconnect(opts.ConnectTimeout, rb))
	}
	c.ovs, err = client.NewOVSDBClient(dbModel, copts...)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: creating the client for %s: %w", endpoint, err)
	}

	// libovsdb's own reconnection only starts after a first success, so retry here.
	first := newExponentialBackoff(opts.MaxBackoff)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
		err = c.ovs.Connect(actx)
		cancel()
		if err == nil {
			break
		}
		c.log.Debug("ovsdb connection attempt failed", "attempt", attempt, "err", err)
		t := time.NewTimer(first.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			c.ovs.Close()
			return nil, fmt.Errorf("ovsdb: cannot connect to %s after %d attempts (last error: %v): "+
				"ovsdb-server must be running there and serve the Open_vSwitch database "+
				"(e.g. ovsdb-server --remote=punix:PATH conf.db): %w", endpoint, attempt, err, ctx.Err())
		case <-t.C:
		}
	}

	c.ovs.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(table string, m model.Model) { c.onEvent(table, m, true) },
		UpdateFunc: func(table string, _, m model.Model) { c.onEvent(table, m, false) },
		DeleteFunc: func(table string, m model.Model) { c.onEvent(table, m, false) },
	})

	ovsRow := &vswitchd.OpenvSwitch{}
	br := &vswitchd.Bridge{}
	port := &vswitchd.Port{}
	iface := &vswitchd.Interface{}
	ft := &vswitchd.FlowTable{}
	mon := c.ovs.NewMonitor(
		client.WithTable(ovsRow, &ovsRow.Bridges, &ovsRow.CurCfg, &ovsRow.NextCfg,
			&ovsRow.OtherConfig, &ovsRow.ExternalIDs, &ovsRow.OVSVersion),
		client.WithTable(br, &br.Name, &br.Ports, &br.DatapathType, &br.FailMode, &br.Protocols,
			&br.FlowTables, &br.ExternalIDs, &br.OtherConfig, &br.DatapathID),
		client.WithTable(port, &port.Name, &port.Interfaces, &port.ExternalIDs),
		client.WithTable(iface, &iface.Name, &iface.Type, &iface.Ofport, &iface.OfportRequest,
			&iface.Error, &iface.ExternalIDs, &iface.Options, &iface.MACInUse),
		client.WithTable(ft, &ft.Name),
	)
	mctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	_, err = c.ovs.Monitor(mctx, mon)
	cancel()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("ovsdb: monitoring the Open_vSwitch database at %s: %w", endpoint, err)
	}
	c.log.Info("connected to ovsdb-server", "bridges", len(c.rows(tableBridge)))
	go c.watchReconnect()
	return c, nil
}

// reconnectPoll is how often watchReconnect looks whether a lost session is back.
const reconnectPoll = 100 * time.Millisecond

// watchReconnect ends a lost session's reconnection (Reconnected, waiters woken) once
// libovsdb has a session again, until Close. libovsdb re-runs the monitor (which refills
// the cache) while it holds the lock CurrentEndpoint takes, so a non-empty endpoint means
// the cache is the new server's. onEvent also ends it when the refill re-adds the
// Open_vSwitch row; but a database made by `ovsdb-tool create` (a reinstalled package, a
// wiped /etc/openvswitch) has no Open_vSwitch row, and waiting for one left the node
// without its bridge and pod ports until some other client (an ovs-vsctl) inserted it:
// 33 s in the test (issue 20).
func (c *Client) watchReconnect() {
	t := time.NewTicker(reconnectPoll)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-t.C:
		}
		if c.lost.Load() && c.ovs.CurrentEndpoint() != "" {
			c.reconnected()
		}
	}
}

// reconnected ends a reconnection once (whoever sees it first: watchReconnect, onEvent).
func (c *Client) reconnected() {
	if c.lost.Swap(false) {
		c.log.Info("reconnected to ovsdb-server, cache refreshed", "bridges", len(c.rows(tableBridge)))
		c.notifyReconnected()
	}
	c.wakeAll()
}

// Connected reports whether the client has a live session with ovsdb-server. It is false
// while libovsdb is reconnecting (writes then block until it succeeds or their context
// ends, and reads return the last known state) and after Close. While one reconnection
// attempt is in flight it blocks until that attempt ends (immediately on a unix: socket
// with no server; up to Options.ConnectTimeout on an unreachable tcp: peer).
func (c *Client) Connected() bool {
	select {
	case <-c.closed:
		return false
	default:
	}
	// libovsdb's Connected() stays true while it reconnects; CurrentEndpoint is "" then.
	return c.ovs.Connected() && c.ovs.CurrentEndpoint() != ""
}

// Endpoint returns the endpoint given to Connect.
func (c *Client) Endpoint() string { return c.endpoint }

// Close ends the session and stops reconnecting. Pending waits return ErrClosed.
// Calling Close more than once is harmless.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.ovs.Close()
		// If the session was down, libovsdb's reconnect loop is still running and Close
		// above could not stop it; point it at a path that never answers (its backoff now
		// waits forever, see reconnectBackoff).
		c.ovs.UpdateEndpoints([]string{closedEndpoint})
		c.log.Debug("ovsdb client closed")
	})
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// reconnectQuiet is libovsdb's log sink: libovsdb logs each failed reconnection attempt
// (its first four, then that it stops) as an error, although reconnectBackoff.Reset has
// already warned once that the connection is lost and the attempts go on; those go to
// debug level, so an outage is logged once, not per retry. Everything else passes.
type reconnectQuiet struct{ logr.LogSink }

// Error implements logr.LogSink.
func (q reconnectQuiet) Error(err error, msg string, kv ...any) {
	if msg == "failed to reconnect" || strings.HasPrefix(msg, "reconnect has failed") {
		if q.LogSink.Enabled(4) { // V(4): slog.LevelDebug through logr's slog bridge
			q.LogSink.Info(4, msg, append(kv, "err", err)...)
		}
		return
	}
	q.LogSink.Error(err, msg, kv...)
}

// WithValues implements logr.LogSink (keeping the filter).
func (q reconnectQuiet) WithValues(kv ...any) logr.LogSink {
	return reconnectQuiet{q.LogSink.WithValues(kv...)}
}

// WithName implements logr.LogSink (keeping the filter).
func (q reconnectQuiet) WithName(name string) logr.LogSink {
	return reconnectQuiet{q.LogSink.WithName(name)}
}

// reconnectBackoff is libovsdb's reconnection backoff. It never returns backoff.Stop:
// libovsdb panics when its reconnect loop gives up. Once the client is closed it returns
// an endless pause instead, which parks the loop for good.
type reconnectBackoff struct {
	b      *backoff.ExponentialBackOff
	closed <-chan struct{}
	lost   *atomic.Bool
	log    *slog.Logger
}

func newExponentialBackoff(maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.Multiplier = 1.5
	b.MaxInterval = maxInterval
	b.MaxElapsedTime = 0 // never stop
	b.Reset()
	return b
}

func newReconnectBackoff(maxInterval time.Duration, closed <-chan struct{}, lost *atomic.Bool, log *slog.Logger) *reconnectBackoff {
	return &reconnectBackoff{b: newExponentialBackoff(maxInterval), closed: closed, lost: lost, log: log}
}

// NextBackOff implements backoff.BackOff.
func (r *reconnectBackoff) NextBackOff() time.Duration {
	select {
	case <-r.closed:
		return time.Duration(math.MaxInt64)
	default:
	}
	d := r.b.NextBackOff()
	r.log.Debug("ovsdb reconnection attempt failed", "retry_in", d)
	return d
}

// Reset implements backoff.BackOff. libovsdb calls it once each time the session is lost,
// before its first reconnection attempt.
func (r *reconnectBackoff) Reset() {
	r.lost.Store(true)
	r.log.Warn("ovsdb-server connection lost, reconnecting")
	r.b.Reset()
}

// ---- cache access and waiting -------------------------------------------------------

// table returns the cache of one table, or nil when the client has no cache (closed).
func (c *Client) table(name string) *cache.RowCache {
	tc := c.ovs.Cache()
	if tc == nil {
		return nil
	}
	return tc.Table(name)
}

// rows returns the cached rows of a table (shared, read only).
func (c *Client) rows(table string) map[string]model.Model {
	t := c.table(table)
	if t == nil {
		return nil
	}
	return t.RowsShallow()
}

// rowByName looks a row up by its "name" column (Bridge, Port, Interface) in the cache.
// The row is the cache's own (shared, read only: libovsdb replaces a cached row instead
// of changing it), not a copy: libovsdb's RowByModel copies a row through JSON, which
// for the Bridge row (its ports set, hundreds of UUIDs on a full node) cost more CPU per
// ADD than the rest of the port's transaction.
func rowByName[T any, PT interface {
	*T
	model.Model
}](c *Client, table, name string, nameOf func(PT) string) PT {
	for _, m := range c.rows(table) {
		if r, ok := m.(PT); ok && nameOf(r) == name {
			return r
		}
	}
	return nil
}

func (c *Client) bridgeRow(name string) *vswitchd.Bridge {
	return rowByName(c, tableBridge, name, func(b *vswitchd.Bridge) string { return b.Name })
}

func (c *Client) portRow(name string) *vswitchd.Port {
	return rowByName(c, tablePort, name, func(p *vswitchd.Port) string { return p.Name })
}

func (c *Client) interfaceRow(name string) *vswitchd.Interface {
	return rowByName(c, tableInterface, name, func(i *vswitchd.Interface) string { return i.Name })
}

// rootRow returns the (single, maxRows 1) Open_vSwitch row, or nil if there is none.
func (c *Client) rootRow() *vswitchd.OpenvSwitch {
	for _, m := range c.rows(tableOpenvSwitch) {
		if r, ok := m.(*vswitchd.OpenvSwitch); ok {
			return r
		}
	}
	return nil
}

func (c *Client) flowTableName(uuid string) (string, bool) {
	t := c.table(tableFlowTable)
	if t == nil {
		return "", false
	}
	ft, ok := t.Row(uuid).(*vswitchd.FlowTable)
	if !ok || ft.Name == nil {
		return "", ok
	}
	return *ft.Name, true
}

// waitKey names what a waiter waits on: a row of table by name ("Interface/veth1"), or
// the Open_vSwitch row (name "").
func waitKey(table, name string) string { return table + "/" + name }

// onEvent is the cache event handler: it wakes the waiters of the row that changed.
// It runs on libovsdb's event goroutine and must not block.
func (c *Client) onEvent(table string, m model.Model, added bool) {
	var key string
	switch r := m.(type) {
	case *vswitchd.Interface:
		key = waitKey(tableInterface, r.Name)
	case *vswitchd.Port:
		key = waitKey(tablePort, r.Name)
	case *vswitchd.Bridge:
		key = waitKey(tableBridge, r.Name)
	case *vswitchd.OpenvSwitch:
		if added {
			// The root row is (re)added when the cache is filled after a reconnection:
			// every waiter must re-check, rows may have gone without a delete event.
			c.reconnected()
			return
		}
		key = waitKey(tableOpenvSwitch, "")
	default:
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.waiters[key] {
		select {
		case ch <- struct{}{}:
		default: // already signalled
		}
	}
}

// Reconnected returns a channel that receives a value each time the client has
// re-established a lost session and refilled its cache (at most one value is buffered;
// several reconnections before the receiver reads coalesce into one). The owner uses it to
// re-ensure what a restarted ovsdb-server may have lost (bridge, ports, table names). Each
// call returns a new channel; it is never closed.
func (c *Client) Reconnected() <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.reconnectCh = append(c.reconnectCh, ch)
	c.mu.Unlock()
	return ch
}

func (c *Client) notifyReconnected() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.reconnectCh {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (c *Client) wakeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, set := range c.waiters {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// waitFor calls check until it reports done or fails, re-running it each time the cache
// changes a row named by keys. It subscribes before the first check, so no change is
// missed. It returns ctx.Err() when ctx ends first, ErrClosed when the client is closed.
func (c *Client) waitFor(ctx context.Context, keys []string, check func() (bool, error)) error {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	for _, k := range keys {
		if c.waiters[k] == nil {
			c.waiters[k] = make(map[chan struct{}]struct{})
		}
		c.waiters[k][ch] = struct{}{}
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		for _, k := range keys {
			delete(c.waiters[k], ch)
			if len(c.waiters[k]) == 0 {
				delete(c.waiters, k)
			}
		}
		c.mu.Unlock()
	}()
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if !c.Connected() {
				return fmt.Errorf("%w: the session with ovsdb-server at %s is down: %w", ErrUnavailable, c.endpoint, ctx.Err())
			}
			return ctx.Err()
		case <-c.closed:
			return ErrClosed
		}
	}
}

// waitContext bounds ctx by Options.WaitTimeout when it has no deadline of its own.
func (c *Client) waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.WaitTimeout)
}

// ---- transactions ---------------------------------------------------------------------

// transact runs ops as one RFC 7047 §4.1.3 transaction and turns any per-operation or
// commit error of the reply into a Go error naming the operation.
//
// While the session is down it first waits up to Options.ReconnectWait (bounded by ctx) for
// the client to reconnect, then fails with an error matching ErrUnavailable; a ctx without
// deadline is bounded by Options.WaitTimeout, so a transaction never hangs.
func (c *Client) transact(ctx context.Context, what string, ops []libovsdb.Operation) ([]libovsdb.OperationResult, error) {
	res, err := c.transactRaw(ctx, what, ops)
	if oe, ok := err.(*opError); ok {
		return nil, fmt.Errorf("ovsdb: %s: %w", what, oe.err)
	}
	return res, err
}

// transactRaw is transact, except that an operation or commit error of the reply is
// returned as an *opError without naming what.
func (c *Client) transactRaw(ctx context.Context, what string, ops []libovsdb.Operation) ([]libovsdb.OperationResult, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if err := c.awaitConnected(ctx); err != nil {
		return nil, fmt.Errorf("ovsdb: %s: %w", what, err)
	}
	tctx, cancel := c.waitContext(ctx)
	defer cancel()
	res, err := c.ovs.Transact(tctx, ops...)
	if err != nil {
		if !c.Connected() {
			return nil, fmt.Errorf("ovsdb: %s: %w: the session with ovsdb-server at %s was lost: %w", what, ErrUnavailable, c.endpoint, err)
		}
		return nil, fmt.Errorf("ovsdb: %s: transaction with %s failed: %w", what, c.endpoint, err)
	}
	if err := checkResults(ops, res); err != nil {
		return nil, &opError{err: err}
	}
	return res, nil
}

// awaitConnected returns nil at once when the session is up; otherwise it polls every
// 50 milliseconds for up to Options.ReconnectWait (or until ctx ends) and then returns an
// error matching ErrUnavailable (and ctx's error when ctx ended first).
func (c *Client) awaitConnected(ctx context.Context) error {
	if c.Connected() {
		return nil
	}
	t := time.NewTimer(c.opts.ReconnectWait)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: not connected to ovsdb-server at %s: %w", ErrUnavailable, c.endpoint, ctx.Err())
		case <-c.closed:
			return ErrClosed
		case <-t.C:
			return fmt.Errorf("%w: not connected to ovsdb-server at %s for %s (is ovsdb-server running?)", ErrUnavailable, c.endpoint, c.opts.ReconnectWait)
		case <-tick.C:
			if c.Connected() {
				return nil
			}
		}
	}
}

// checkResults applies RFC 7047 §4.1.3: the reply has one result per operation, an
// error in the result of the failed one, and one extra result when the commit failed.
func checkResults(ops []libovsdb.Operation, res []libovsdb.OperationResult) error {
	if len(res) < len(ops) {
		return fmt.Errorf("ovsdb-server answered %d of %d operations", len(res), len(ops))
	}
	for i, r := range res {
		if r.Error == "" {
			continue
		}
		if i >= len(ops) {
			return fmt.Errorf("commit failed: %s: %s", r.Error, r.Details)
		}
		op := ops[i]
		return fmt.Errorf("operation %d (%s on table %s) failed: %s: %s", i, op.Op, op.Table, r.Error, r.Details)
	}
	return nil
}

// bumpCfgOps returns the operations that increment Open_vSwitch.next_cfg (§5.2.4 mutate)
// and read the new value back (§5.2.2 select), as ovs-vsctl does to wait for
// ovs-vswitchd. The select's result is the last one.
func bumpCfgOps(rootUUID string) []libovsdb.Operation {
	where := []libovsdb.Condition{libovsdb.NewCondition("_uuid", libovsdb.ConditionEqual, libovsdb.UUID{GoUUID: rootUUID})}
	return []libovsdb.Operation{
		{
			Op:        libovsdb.OperationMutate,
			Table:     tableOpenvSwitch,
			Where:     where,
			Mutations: []libovsdb.Mutation{*libovsdb.NewMutation("next_cfg", libovsdb.MutateOperationAdd, 1)},
		},
		{
			Op:      libovsdb.OperationSelect,
			Table:   tableOpenvSwitch,
			Where:   where,
			Columns: []string{"next_cfg"},
		},
	}
}

// selectedInt reads an integer column from the first row of a select result.
func selectedInt(r libovsdb.OperationResult, column string) (int, bool) {
	if len(r.Rows) == 0 {
		return 0, false
	}
	switch v := r.Rows[0][column].(type) {
	case float64:
		return int(v), true
	case int:
		return v, true
	case int64:
		return int(v), true
	}
	return 0, false
}

// waitCfg waits until ovs-vswitchd has applied database generation nextCfg
// (Open_vSwitch.cur_cfg >= nextCfg).
func (c *Client) waitCfg(ctx context.Context, nextCfg int, what string) error {
	wctx, cancel := c.waitContext(ctx)
	defer cancel()
	cur := 0
	err := c.waitFor(wctx, []string{waitKey(tableOpenvSwitch, "")}, func() (bool, error) {
		root := c.rootRow()
		if root == nil {
			return false, nil
		}
		cur = root.CurCfg
		return cur >= nextCfg, nil
	})
	if err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("ovsdb: %s: ovs-vswitchd has not applied the change (cur_cfg %d, want %d): "+
			"is ovs-vswitchd running and connected to %s? %w", what, cur, nextCfg, c.endpoint, err)
	}
	return err
}

// changedKeys returns the keys of want whose value in have differs or is missing.
func changedKeys(have, want map[string]string) (keys []string, values map[string]string) {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			keys = append(keys, k)
			if values == nil {
				values = make(map[string]string)
			}
			values[k] = v
		}
	}
	return keys, values
}

// hasAll reports whether have contains every key/value of want.
func hasAll(have, want map[string]string) bool {
	keys, _ := changedKeys(have, want)
	return len(keys) == 0
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
