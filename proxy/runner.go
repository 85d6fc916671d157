package proxy

// The sync runner: one goroutine that turns the tracker's changes into Updates for the
// Sink, no more often than MinInterval (kube-proxy's BoundedFrequencyRunner with
// minSyncPeriod; Antrea's proxier runner), so a burst of API events costs one sync.

import (
	"context"
	"log/slog"
	"time"
)

// Sink is the consumer of Updates: the controller, which turns them into groups and
// flows. Sync must realize u and return once the switch has confirmed it (a barrier or a
// bundle commit), or return an error: then nothing of u counts as applied, and the same
// changes (merged with later ones) come again after Runner.RetryInterval. Sync is never
// called concurrently with itself. After Sync returns nil the consumer observes
// u.TriggerTimes into its network programming latency histogram and flushes u.Stale.
type Sink interface {
	Sync(ctx context.Context, u *Update) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, u *Update) error

// Sync calls f.
func (f SinkFunc) Sync(ctx context.Context, u *Update) error { return f(ctx, u) }

// Defaults of the Runner (kube-proxy's --iptables-min-sync-period and
// --nftables-min-sync-period default to 1 s).
const (
	DefaultMinSyncInterval = time.Second
	DefaultRetryInterval   = time.Second
)

// Runner delivers the Tracker's Updates to the Sink. The first Update (Full) waits for
// the Tracker to be synced (the informers' initial lists), as kube-proxy waits for its
// Service and EndpointSlice caches before its first sync.
type Runner struct {
	// Tracker is where the changes come from.
	Tracker *Tracker
	// Sink receives the Updates.
	Sink Sink
	// MinInterval is the least time from the start of one sync to the start of the next
	// (events in between are coalesced); 0 = DefaultMinSyncInterval. A change after a
	// quiet period longer than MinInterval is synced at once. Unlike kube-proxy v1.37,
	// whose BoundedFrequencyRunner counts its minSyncPeriod from the end of a sync (so a
	// sync of duration d delays the next by MinInterval + d), this counts from the start:
	// a change waits at most MinInterval behind the previous sync's start, however long
	// that sync took (make bench-services, bench/RESULTS.md, paces its changes by this).
	MinInterval time.Duration
	// RetryInterval is the wait after a failed Sync before the next attempt;
	// 0 = DefaultRetryInterval.
	RetryInterval time.Duration
	// Logger gets sync failures; nil = slog.Default().
	Logger *slog.Logger
	// OnSync, if set, is called after each Sync with its duration and error (metrics).
	OnSync func(u *Update, took time.Duration, err error)
}

// Run syncs until ctx ends and returns ctx.Err().
func (r *Runner) Run(ctx context.Context) error {
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	minInterval, retry := r.MinInterval, r.RetryInterval
	if minInterval <= 0 {
		minInterval = DefaultMinSyncInterval
	}
	if retry <= 0 {
		retry = DefaultRetryInterval
	}
	t := r.Tracker
	select {
	case <-t.Synced():
	case <-ctx.Done():
		return ctx.Err()
	}
	var last time.Time // start of the last sync
	var notBefore time.Time
	for {
		if !t.hasWork() {
			select {
			case <-t.Changed():
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		wait := time.Until(last.Add(minInterval))
		if w := time.Until(notBefore); w > wait {
			wait = w
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			}
		}
		// Drain the kick that announced what this checkout takes.
		select {
		case <-t.Changed():
		default:
		}
		last = time.Now()
		p := t.checkout()
		if p.Update.Empty() {
			t.commit(p)
			continue
		}
		err := r.Sink.Sync(ctx, &p.Update)
		took := time.Since(last)
		if r.OnSync != nil {
			r.OnSync(&p.Update, took, err)
		}
		if err != nil {
			t.abort(p)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Error("service proxy: sync failed; retrying", "retryIn", retry, "changed", len(p.Changed),
				"deleted", len(p.Deleted), "err", err)
			notBefore = time.Now().Add(retry)
			continue
		}
		t.commit(p)
	}
}
