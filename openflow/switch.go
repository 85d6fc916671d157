package openflow

// The OpenFlow connection that survives ovs-vswitchd restarts.
//
// Design history. Conn is one connection and never reconnects: when ovs-vswitchd dies
// every pending call fails at once with ErrDisconnected and the connection is finished.
// Switch owns the re-dialling: it watches the current connection's Done channel, dials the
// bridge's management socket again with exponential backoff (no upper bound on attempts,
// pauses capped at SwitchOptions.MaxBackoff so that a returning ovs-vswitchd is found
// within about a second), and hands each new connection to its OnConnect hook before
// anyone else may use it. The node's hook (package controller) replays the complete desired
// flow state as one atomic bundle and then clears other_config:flow-restore-wait, so no
// flow change is accepted on a connection whose tables are not yet whole (after Antrea's
// pkg/agent/openflow client: ReplayFlows on reconnect, then flow-restore-wait removed).
//
// While there is no ready connection every call fails fast with an error matching
// ErrDisconnected; nothing waits for the reconnect, so a CNI request during the outage gets
// "try again later" (CNI error 11) at once instead of hanging.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/contiv/libOpenflow/openflow13"
)

// Defaults of SwitchOptions.
const (
	// DefaultMinBackoff is the first pause between two dial attempts (50 milliseconds).
	DefaultMinBackoff = 50 * time.Millisecond
	// DefaultMaxBackoff is the longest pause between two dial attempts (1 second).
	DefaultMaxBackoff = time.Second
	// DefaultSyncTimeout bounds one run of the OnConnect hook (60 seconds).
	DefaultSyncTimeout = 60 * time.Second
)

// SwitchOptions tunes a Switch. The zero value is usable.
type SwitchOptions struct {
	// OF tunes each OpenFlow connection (keep-alive, timeouts, logger).
	OF Options
	// MinBackoff is the first pause between dial attempts after a connection is lost or a
	// dial fails; pauses grow by 1.5 (with ±50 % jitter) up to MaxBackoff and attempts
	// never stop. Zero means DefaultMinBackoff (50 ms), DefaultMaxBackoff (1 s).
	MinBackoff, MaxBackoff time.Duration
	// SyncTimeout bounds one run of the OnConnect hook on a reconnect; zero means
	// DefaultSyncTimeout (60 s). The first connection's hook is bounded by Start's ctx.
	SyncTimeout time.Duration
	// Logger receives reconnection events; nil means OF.Logger or slog.Default().
	Logger *slog.Logger
}

// OnConnectFunc prepares a fresh connection before it is published: first is true for the
// first connection of a Switch (daemon start), false after a reconnect. If it returns an
// error the connection is closed and the Switch dials again after a backoff pause.
type OnConnectFunc func(ctx context.Context, c *Conn, first bool) error

// Switch is the OpenFlow connection to one bridge that survives ovs-vswitchd restarts: it
// reconnects by itself and runs an OnConnect hook (the flow replay) on every new connection
// before publishing it. All methods are safe for concurrent use. Create it with NewSwitch,
// then Start it.
type Switch struct {
	path      string
	opts      SwitchOptions
	log       *slog.Logger
	onConnect OnConnectFunc

	mu      sync.Mutex
	cur     *Conn // the published (synced) connection; nil while down
	lastErr error // why there is no connection
	closed  bool

	down       chan struct{} // always closed: Done's answer while there is no connection
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
	reconnects atomic.Int64
}

// NewSwitch returns a Switch for the OpenFlow management socket at socketPath
// (OVS_RUNDIR/BRIDGE.mgmt) that runs onConnect (may be nil) on each new connection. It does
// not dial; call Start.
func NewSwitch(socketPath string, opts SwitchOptions, onConnect OnConnectFunc) *Switch {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.Logger == nil {
		opts.Logger = opts.OF.Logger
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OF.Logger == nil {
		opts.OF.Logger = opts.Logger
	}
	down := make(chan struct{})
	close(down)
	return &Switch{
		path: socketPath, opts: opts, log: opts.Logger.With("socket", socketPath), onConnect: onConnect,
		lastErr: errors.New("not started"), down: down, stop: make(chan struct{}),
	}
}

// Start makes the first connection: it dials (retrying with backoff), runs the OnConnect
// hook with first=true and publishes the connection, all within ctx; then it keeps the
// connection up in the background until Close. Errors: ctx ended before a connection was
// ready (the error names the last dial or hook failure), or Start was called twice.
func (s *Switch) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.closed || s.cur != nil {
		s.mu.Unlock()
		return errors.New("openflow switch: Start called twice or after Close")
	}
	s.mu.Unlock()
	c, err := s.connect(ctx, true)
	if err != nil {
		return err
	}
	s.wg.Add(1)
	go s.supervise(c)
	return nil
}

// connect dials and prepares one connection, retrying with backoff until ctx ends or the
// Switch is closed, and publishes it.
func (s *Switch) connect(ctx context.Context, first bool) (*Conn, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = s.opts.MinBackoff
	b.MaxInterval = s.opts.MaxBackoff
	b.Multiplier = 1.5
	b.MaxElapsedTime = 0 // never give up
	b.Reset()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		c, err := s.try(ctx, first)
		if err == nil {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return nil, errors.New("openflow switch closed")
			}
			s.cur, s.lastErr = c, nil
			s.mu.Unlock()
			if !first {
				s.reconnects.Add(1)
			}
			s.log.Info("OpenFlow connection ready", "first", first, "attempts", attempt, "after", time.Since(start).Round(time.Millisecond))
			return c, nil
		}
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		// A reconnection's first failure says nothing the "connection lost" warning did
		// not; a first connection's does. Every 20th attempt reminds, at info level,
		// that it goes on: an outage is warned about once.
		lvl := slog.LevelDebug
		switch {
		case first && attempt == 1:
			lvl = slog.LevelWarn
		case attempt%20 == 0:
			lvl = slog.LevelInfo
		}
		pause := b.NextBackOff()
		s.log.Log(ctx, lvl, "OpenFlow connection attempt failed, retrying", "attempt", attempt, "down_for", time.Since(start).Round(time.Second), "retry_in", pause.Round(time.Millisecond), "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("openflow connection to %s not ready after %d attempts (last error: %w): %w", s.path, attempt, err, ctx.Err())
		case <-s.stop:
			t.Stop()
			return nil, errors.New("openflow switch closed")
		case <-t.C:
		}
	}
}

// try makes one dial and runs the hook.
func (s *Switch) try(ctx context.Context, first bool) (*Conn, error) {
	c, err := Dial(ctx, s.path, s.opts.OF)
	if err != nil {
		return nil, err
	}
	if s.onConnect != nil {
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if !first {
			hctx, cancel = context.WithTimeout(ctx, s.opts.SyncTimeout)
		}
		err := s.onConnect(hctx, c, first)
		cancel()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("prepare new connection: %w", err)
		}
	}
	return c, nil
}

// supervise waits for c to end, then reconnects, forever until Close.
func (s *Switch) supervise(c *Conn) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-c.Done():
		}
		s.mu.Lock()
		if s.cur == c {
			s.cur, s.lastErr = nil, c.Err()
		}
		s.mu.Unlock()
		s.log.Warn("OpenFlow connection lost; reconnecting (flows stay in the switch unless ovs-vswitchd restarted)", "err", c.Err())
		var err error
		c, err = s.connect(ctx, false)
		if err != nil {
			return // closed
		}
	}
}

// Close stops reconnecting and closes the current connection. Flows stay in the switch.
// It returns nil, also when called again.
func (s *Switch) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.mu.Lock()
	s.closed = true
	c := s.cur
	s.cur, s.lastErr = nil, errClosedByUser
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

// Conn returns the current ready connection, or an error matching ErrDisconnected that
// says why there is none.
func (s *Switch) Conn() (*Conn, error) {
	s.mu.Lock()
	c, why := s.cur, s.lastErr
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("openflow connection to %s: %w (reconnecting; last error: %v)", s.path, ErrDisconnected, why)
	}
	select {
	case <-c.Done():
		return nil, c.downErr()
	default:
		return c, nil
	}
}

// Connected reports whether a ready connection is published.
func (s *Switch) Connected() bool {
	_, err := s.Conn()
	return err == nil
}

// Done returns a channel that is closed when the current connection ends; while there is
// no ready connection it returns an already closed channel. Ask again after it fires: a
// reconnect publishes a new connection with a new channel.
func (s *Switch) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return s.down
	}
	return s.cur.Done()
}

// Err returns nil while a ready connection is up, else why there is none (matching
// ErrDisconnected).
func (s *Switch) Err() error {
	_, err := s.Conn()
	return err
}

// Reconnects returns how many times a lost connection was re-established (0 after Start).
func (s *Switch) Reconnects() int64 { return s.reconnects.Load() }

// DatapathID returns the bridge's datapath id from the current connection (OpenFlow 1.3.5
// §7.3.1), or 0 while there is none.
func (s *Switch) DatapathID() uint64 {
	c, err := s.Conn()
	if err != nil {
		return 0
	}
	return c.DatapathID()
}

// DumpFlows is Conn.DumpFlows on the current connection; it fails fast with an error
// matching ErrDisconnected while there is none.
func (s *Switch) DumpFlows(ctx context.Context, tableID uint8, cookie, cookieMask uint64) ([]*openflow13.FlowStats, error) {
	return onConn(s, func(c *Conn) ([]*openflow13.FlowStats, error) { return c.DumpFlows(ctx, tableID, cookie, cookieMask) })
}

// Barrier is Conn.Barrier on the current connection; it fails fast with an error
// matching ErrDisconnected while there is none.
func (s *Switch) Barrier(ctx context.Context) error {
	return onConnErr(s, func(c *Conn) error { return c.Barrier(ctx) })
}

// Echo is Conn.Echo on the current connection: one OFPT_ECHO_REQUEST (OpenFlow 1.3.5
// §7.5.2), its round-trip time once answered. It is the daemon's readiness probe of
// ovs-vswitchd: unlike Connected, which stays true until the keep-alive declares a hung
// switch dead (EchoTimeout, 15 s by default), an echo bounded by a short ctx says within
// that bound that the switch does not answer. It fails fast with an error matching
// ErrDisconnected while there is no connection, and with ctx's error (wrapped) when the
// switch does not answer in time.
func (s *Switch) Echo(ctx context.Context) (time.Duration, error) {
	return onConn(s, func(c *Conn) (time.Duration, error) { return c.Echo(ctx) })
}

// onConn runs f on the current connection; it fails fast with an error matching
// ErrDisconnected while there is none (the zero T with it).
func onConn[T any](s *Switch, f func(*Conn) (T, error)) (T, error) {
	c, err := s.Conn()
	if err != nil {
		var zero T
		return zero, err
	}
	return f(c)
}

// onConnErr is onConn for calls that return only an error.
func onConnErr(s *Switch, f func(*Conn) error) error {
	c, err := s.Conn()
	if err != nil {
		return err
	}
	return f(c)
}
