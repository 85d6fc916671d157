package controller

// The health probe's log as a node's operator reads it: one warning per outage of Open
// vSwitch, also when both sides (OpenFlow and OVSDB) stop answering, as when the ovs
// container restarts, and one line when it answers again.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHealthProbeLogsOneOutageOnce(t *testing.T) {
	var out lockedBuf
	p := &HealthProbe{interval: 5 * time.Millisecond, timeout: time.Second,
		log: slog.New(slog.NewTextHandler(&out, nil)), stop: make(chan struct{})}
	logText := func() string { out.mu.Lock(); defer out.mu.Unlock(); return out.b.String() }
	var down atomic.Bool
	probe := func(side string) func(context.Context) error {
		return func(context.Context) error {
			if down.Load() {
				return errors.New(side + " down")
			}
			return nil
		}
	}
	p.wg.Add(2)
	go p.loop(probe("OpenFlow"), errors.New("timeout"), &p.ofErr)
	go p.loop(probe("OVSDB"), errors.New("timeout"), &p.dbErr)
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	waitUntil := func(what string, f func(of, db error) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !f(p.Errs()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 s; log:\n%s", what, logText())
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range 2 { // two outages: each logged once
		down.Store(true)
		waitUntil("both sides failing", func(of, db error) bool { return of != nil && db != nil })
		down.Store(false)
		waitUntil("both sides answering", func(of, db error) bool { return of == nil && db == nil })
	}
	p.Close() // the loops log after they record: their last lines are written once closed
	closed = true
	log := logText()
	if n := strings.Count(log, "Open vSwitch not answering"); n != 2 {
		t.Errorf("two outages, both sides down in each: %d warnings, want 2 (one per outage):\n%s", n, log)
	}
	if n := strings.Count(log, "Open vSwitch answering again"); n != 2 {
		t.Errorf("two outages: %d recoveries logged, want 2:\n%s", n, log)
	}
}
