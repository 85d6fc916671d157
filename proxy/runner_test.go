package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gateSink records each Update and blocks each Sync until released (or, when open,
// returns at once); fail makes the next Syncs fail.
type gateSink struct {
	mu      sync.Mutex
	updates []*Update
	starts  []time.Time
	entered chan struct{}
	release chan error
	open    bool
}

func newGateSink() *gateSink {
	return &gateSink{entered: make(chan struct{}, 100), release: make(chan error)}
}

func (g *gateSink) Sync(ctx context.Context, u *Update) error {
	g.mu.Lock()
	g.updates = append(g.updates, u)
	g.starts = append(g.starts, time.Now())
	open := g.open
	g.mu.Unlock()
	g.entered <- struct{}{}
	if open {
		return nil
	}
	select {
	case err := <-g.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gateSink) n() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.updates)
}

func (g *gateSink) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no Sync within 30 s")
	}
}

func startRunner(t *testing.T, r *Runner) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("runner ended with %v", err)
		}
	})
}

func svcN(i int) (ServiceName, []*ServicePort) {
	n := ServiceName{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
	sp := port("", ProtocolTCP, 80)
	sp.Name.ServiceName = n
	return n, []*ServicePort{sp}
}

// Events while a sync runs are coalesced into one next sync; the first sync waits for
// the informers and is Full.
func TestRunnerCoalesces(t *testing.T) {
	tr := NewTracker("me", IPv4)
	g := newGateSink()
	startRunner(t, &Runner{Tracker: tr, Sink: g, MinInterval: time.Millisecond})
	n, sp := svcN(0)
	tr.SetService(n, sp)
	time.Sleep(50 * time.Millisecond)
	if g.n() != 0 {
		t.Fatal("synced before the tracker was synced")
	}
	tr.MarkSynced()
	g.wait(t)
	for i := 1; i <= 50; i++ {
		tr.SetService(svcN(i))
	}
	g.release <- nil
	g.wait(t)
	g.release <- nil
	g.mu.Lock()
	first, second := g.updates[0], g.updates[1]
	g.mu.Unlock()
	if !first.Full || len(first.Changed) != 1 {
		t.Errorf("first update: full %v, %d changed", first.Full, len(first.Changed))
	}
	if second.Full || len(second.Changed) != 50 {
		t.Errorf("second update: full %v, %d changed, want the 50 events in one", second.Full, len(second.Changed))
	}
	time.Sleep(50 * time.Millisecond)
	if g.n() != 2 {
		t.Errorf("%d syncs, want 2", g.n())
	}
}

// Syncs start at least MinInterval apart (a lower bound only: no machine-speed
// assumption), and a failed sync is retried with its changes.
func TestRunnerMinIntervalAndRetry(t *testing.T) {
	const minInterval = 300 * time.Millisecond
	tr := newSynced(t)
	g := newGateSink()
	startRunner(t, &Runner{Tracker: tr, Sink: g, MinInterval: minInterval, RetryInterval: 10 * time.Millisecond})
	g.wait(t)
	g.release <- nil // the (empty) first, Full sync
	tr.SetService(svcN(1))
	g.wait(t)
	g.release <- errors.New("switch disconnected")
	g.wait(t) // the retry
	g.release <- nil
	tr.SetService(svcN(2))
	g.wait(t)
	g.release <- nil
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.updates) != 4 {
		t.Fatalf("%d syncs, want 4", len(g.updates))
	}
	if u := g.updates[2]; len(u.Changed) != 1 || u.Changed[0].Port.Name.Name != "s1" {
		t.Errorf("retry carried %+v, want s1 again", u.Changed)
	}
	if u := g.updates[3]; len(u.Changed) != 1 || u.Changed[0].Port.Name.Name != "s2" {
		t.Errorf("after the retry: %+v, want s2 only", u.Changed)
	}
	for i := 1; i < len(g.starts); i++ {
		if d := g.starts[i].Sub(g.starts[i-1]); d < minInterval {
			t.Errorf("sync %d started %v after the one before, want at least %v", i, d, minInterval)
		}
	}
}
