package openflow

import "sync/atomic"

// Queue is a bounded queue of asynchronous messages from the switch (packet-ins,
// flow-removed messages), shared by every connection of a Switch: the connection's reader
// offers each decoded message without blocking, a consumer receives from C. All methods
// are safe for concurrent use.
type Queue[T any] struct {
	ch       chan T
	received atomic.Uint64
	dropped  atomic.Uint64
}

// newQueue returns a queue holding at most size messages (size < 1 means 1).
func newQueue[T any](size int) *Queue[T] {
	return &Queue[T]{ch: make(chan T, max(size, 1))}
}

// C is the channel to receive messages from. It is never closed.
func (q *Queue[T]) C() <-chan T { return q.ch }

// Received is the number of messages decoded since the queue was made (queued or
// dropped), monotonic.
func (q *Queue[T]) Received() uint64 { return q.received.Load() }

// Dropped is the number of messages dropped because the queue was full, monotonic.
func (q *Queue[T]) Dropped() uint64 { return q.dropped.Load() }

// offer queues m without blocking; it reports false (and counts a drop) when full.
func (q *Queue[T]) offer(m T) bool {
	q.received.Add(1)
	select {
	case q.ch <- m:
		return true
	default:
		q.dropped.Add(1)
		return false
	}
}
