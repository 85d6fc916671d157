package ovsdb

// The echo round trip: a liveness probe of ovsdb-server (the daemon's readiness) and a
// barrier behind every request sent before it on the session.

import (
	"context"
	"fmt"
)

// Echo sends an RFC 7047 §4.1.11 "echo" on the current session and waits for its answer,
// at most until ctx ends (give ctx a deadline: a hung ovsdb-server never answers).
//
// ovsdb-server handles one session's requests in order, and libovsdb applies the monitor
// updates it receives before it reads the replies that follow them, so once Echo returns
// nil the cache shows the outcome of every transaction this client had sent before
// (e.g. one whose caller gave up waiting, "it may still commit").
//
// Errors: ErrClosed after Close; an error matching ErrUnavailable while the session is
// down or its cache is not yet refilled after a reconnection; ctx's error (wrapped,
// naming the endpoint) when ovsdb-server does not answer in time.
func (c *Client) Echo(ctx context.Context) error {
	if c.isClosed() {
		return ErrClosed
	}
	if c.lost.Load() {
		return fmt.Errorf("ovsdb: echo to %s: %w (the session was lost; reconnecting)", c.endpoint, ErrUnavailable)
	}
	if err := c.ovs.Echo(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ovsdb: echo to %s: ovsdb-server did not answer (hung or overloaded?): %w", c.endpoint, ctx.Err())
		}
		return fmt.Errorf("ovsdb: echo to %s: %w (%v)", c.endpoint, ErrUnavailable, err)
	}
	return nil
}
