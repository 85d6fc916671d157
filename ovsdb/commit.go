package ovsdb

// Group commit of port changes.
//
// Each port insert or delete (EnsurePort, DeletePort) hands its operations to the client's
// committer instead of sending its own transaction. When no group is in flight the
// committer sends them at once, alone: a lone ADD never waits. While a group is in flight
// (from its transaction until every member has seen its effect in the monitor cache: the
// new ofport, the row gone), the changes that arrive queue up and go together in the next
// transaction, sent when that group settles or after Options.GroupCommitMaxWait at most,
// whichever comes first, with at most Options.GroupCommitMaxBatch members each (a full
// queue is sent at once). So N concurrent pod ADDs cost ovsdb-server a few transactions
// instead of N, ovs-vswitchd sees their ports in a few reconfigurations, and each member
// still waits for its own ofport in the cache.
//
// An OVSDB transaction is atomic (RFC 7047 §4.1.3): when one operation fails, nothing of
// it is committed. So a group whose transaction fails on an operation or at commit is
// retried member by member, each alone, and only the member whose own operations fail
// gets an error; the others' retries commit. A group that fails for want of a session
// (ovsdb-server down) fails every member: retrying alone would fail the same way. This is
// ipam's group commit applied to OVSDB: one writer of the pending group at a time,
// changes arriving meanwhile join the next.

import (
	"context"
	"fmt"
	"sync"
	"time"

	libovsdb "github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// Group-commit defaults (Options.GroupCommitMaxWait and GroupCommitMaxBatch).
const (
	defaultGroupCommitMaxWait  = 5 * time.Millisecond
	defaultGroupCommitMaxBatch = 64
)

// commitReq is one caller's share of a group transaction.
type commitReq struct {
	what     string
	ops      []libovsdb.Operation
	deadline time.Time

	// Set by the committer before done is closed.
	res   []libovsdb.OperationResult // this member's results, same length as ops
	err   error
	alone bool // the group failed on an operation or at commit: retry alone
	group *commitGroup
	done  chan struct{}
}

// commitGroup is one group transaction; it settles when every member has called settle.
type commitGroup struct {
	members int
	left    int
	settled chan struct{}
}

// committer batches port transactions of one Client.
type committer struct {
	c        *Client
	maxWait  time.Duration
	maxBatch int

	mu       sync.Mutex
	pending  []*commitReq
	sending  bool          // a sender goroutine is running
	inflight *commitGroup  // the last group sent, until it settles
	kick     chan struct{} // wakes the sender early (queue full); buffered 1
	txns     int           // group transactions sent (tests, logs)
}

func newCommitter(c *Client, maxWait time.Duration, maxBatch int) *committer {
	return &committer{c: c, maxWait: maxWait, maxBatch: maxBatch, kick: make(chan struct{}, 1)}
}

// settleFunc marks the caller's part of its group done (its waits are over). It must be
// called exactly once per successful submit.
type settleFunc func()

// submit runs ops as part of a group transaction and returns this member's results (one
// per operation of ops) and a settle function to call once the caller has waited for the
// effect of its change. Errors are those of Client.transact for the member's own
// operations (a failed group is retried alone), ctx's error when ctx ends before the
// transaction is sent (nothing was sent then), or an error saying the outcome is unknown
// when ctx ends while the transaction is in flight.
func (m *committer) submit(ctx context.Context, what string, ops []libovsdb.Operation) ([]libovsdb.OperationResult, settleFunc, error) {
	if m.c.isClosed() {
		return nil, func() {}, ErrClosed
	}
	r := &commitReq{what: what, ops: ops, done: make(chan struct{})}
	if d, ok := ctx.Deadline(); ok {
		r.deadline = d
	} else {
		r.deadline = time.Now().Add(m.c.opts.WaitTimeout)
	}
	m.mu.Lock()
	m.pending = append(m.pending, r)
	if !m.sending {
		m.sending = true
		go m.send()
	} else if len(m.pending) >= m.maxBatch {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		m.mu.Lock()
		for i, p := range m.pending {
			if p == r {
				m.pending = append(m.pending[:i], m.pending[i+1:]...)
				m.mu.Unlock()
				return nil, func() {}, fmt.Errorf("ovsdb: %s: not sent: %w", what, ctx.Err())
			}
		}
		m.mu.Unlock()
		go func() { // settle this member's share once its group is known
			<-r.done
			if r.group != nil {
				m.settle(r.group)
			}
		}()
		return nil, func() {}, fmt.Errorf("ovsdb: %s: gave up waiting for the transaction's outcome (it may still commit): %w", what, ctx.Err())
	}
	settle := func() {}
	if g := r.group; g != nil {
		var once sync.Once
		settle = func() { once.Do(func() { m.settle(g) }) }
	}
	if r.alone {
		// The group failed as a whole; this member's own operations, in a transaction of
		// their own, decide its fate.
		settle()
		res, err := m.c.transact(ctx, what, ops)
		return res, func() {}, err
	}
	if r.err != nil {
		settle()
		return nil, func() {}, r.err
	}
	return r.res, settle, nil
}

func (m *committer) settle(g *commitGroup) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g.left--
	if g.left == 0 {
		close(g.settled)
	}
}

// send is the sender goroutine: while requests are pending it waits for the group in
// flight to settle (at most maxWait, less when the queue fills), then sends up to
// maxBatch of them as one transaction and hands each member its results.
func (m *committer) send() {
	m.mu.Lock()
	for len(m.pending) > 0 {
		if g := m.inflight; g != nil && len(m.pending) < m.maxBatch {
			m.mu.Unlock()
			t := time.NewTimer(m.maxWait)
			select {
			case <-g.settled:
			case <-t.C:
			case <-m.kick:
			}
			t.Stop()
			m.mu.Lock()
			if len(m.pending) == 0 {
				break
			}
		}
		n := min(len(m.pending), m.maxBatch)
		batch := append([]*commitReq(nil), m.pending[:n]...)
		m.pending = append(m.pending[:0], m.pending[n:]...)
		g := &commitGroup{members: n, left: n, settled: make(chan struct{})}
		m.inflight = g
		m.txns++
		m.mu.Unlock()
		m.run(batch, g)
		m.mu.Lock()
	}
	m.sending = false
	m.mu.Unlock()
}

// run sends one group's transaction and completes its members.
func (m *committer) run(batch []*commitReq, g *commitGroup) {
	var ops []libovsdb.Operation
	deadline := batch[0].deadline
	for _, r := range batch {
		ops = append(ops, r.ops...)
		if r.deadline.After(deadline) {
			deadline = r.deadline
		}
	}
	what := batch[0].what
	if len(batch) > 1 {
		what = fmt.Sprintf("group of %d port changes (%s, ...)", len(batch), batch[0].what)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	res, err := m.c.transactRaw(ctx, what, ops)
	cancel()
	off := 0
	for _, r := range batch {
		r.group = g
		switch {
		case err == nil:
			r.res = res[off : off+len(r.ops)]
		case len(batch) > 1 && isOpError(err):
			r.alone = true
		case len(batch) == 1 && isOpError(err):
			r.err = fmt.Errorf("ovsdb: %s: %w", r.what, err.(*opError).err)
		default:
			r.err = err
		}
		off += len(r.ops)
		close(r.done)
	}
}

// opError is a transaction that ovsdb-server answered with an operation or commit error
// (as opposed to one that never got an answer).
type opError struct{ err error }

func (e *opError) Error() string { return e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

func isOpError(err error) bool {
	_, ok := err.(*opError)
	return ok
}

// transactions returns how many group transactions the committer has sent.
func (m *committer) transactions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.txns
}
