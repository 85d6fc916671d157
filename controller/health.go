package controller

// The readiness probe of Open vSwitch: whether ovs-vswitchd and ovsdb-server answer, not
// only whether their sockets are connected. A hung ovs-vswitchd (SIGSTOP, a stuck main
// loop) keeps its OpenFlow connection open, and the keep-alive declares it dead only
// after its echo timeout (15 s, plus up to the 5 s interval); a hung ovsdb-server keeps
// its unix socket too, and libovsdb never notices. Meanwhile every ADD fails at its
// deadline, so /readyz must say 503 long before that: the probe sends an OpenFlow echo
// (OFPT_ECHO_REQUEST) and an OVSDB echo (RFC 7047 §4.1.11) every HealthProbeInterval,
// each bounded by HealthProbeTimeout, and the last answer of each is what /readyz reads.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
)

const (
	// HealthProbeInterval is the time between the starts of two probes of each side: 1 s.
	HealthProbeInterval = time.Second
	// HealthProbeTimeout is how long each side has to answer one probe: 3 s. So /readyz
	// says 503 at most HealthProbeInterval + HealthProbeTimeout (4 s) after a side stops
	// answering, and 200 again at most HealthProbeInterval after it answers (plus, after
	// the keep-alive dropped the OpenFlow connection, the reconnect and flow replay).
	HealthProbeTimeout = 3 * time.Second
)

// HealthProbe probes the switch (OpenFlow) and the database (OVSDB) in the background;
// its methods are safe for concurrent use. Both sides count as answering until a probe
// says otherwise. Create it with StartHealthProbe; the daemon's /readyz reads Errs.
type HealthProbe struct {
	interval, timeout time.Duration
	log               *slog.Logger // nil: transitions are not logged

	mu    sync.Mutex
	ofErr error // the last OpenFlow probe's failure; nil when it was answered
	dbErr error // the last OVSDB probe's failure

	stop chan struct{}
	wg   sync.WaitGroup
}

// StartHealthProbe starts probing sw (bridge's OpenFlow connection) with OpenFlow echoes
// and db with OVSDB echoes, each every HealthProbeInterval and bounded by
// HealthProbeTimeout, until Close. An unanswered probe's error names the bridge or the
// OVSDB endpoint and the timeout. With log not nil, an outage is logged once (a warning,
// when the first side stops answering, one side or both) and once again when both answer
// (info), never per probe. The node
// starts one (Node.Health): CNI STATUS and /readyz read it.
func StartHealthProbe(sw *openflow.Switch, bridge string, db *ovsdb.Client, log *slog.Logger) *HealthProbe {
	p := &HealthProbe{interval: HealthProbeInterval, timeout: HealthProbeTimeout, log: log, stop: make(chan struct{})}
	p.wg.Add(2)
	ofTimeout := fmt.Errorf("ovs-vswitchd does not answer OpenFlow echo requests on bridge %s within %s (hung or overloaded)", bridge, p.timeout)
	go p.loop(func(ctx context.Context) error {
		if _, err := sw.Echo(ctx); err != nil {
			if ctx.Err() != nil {
				return ofTimeout
			}
			return fmt.Errorf("OpenFlow echo on bridge %s: %w", bridge, err)
		}
		return nil
	}, ofTimeout, &p.ofErr)
	dbTimeout := fmt.Errorf("ovsdb-server at %s does not answer OVSDB echo requests within %s (hung or overloaded)", db.Endpoint(), p.timeout)
	go p.loop(func(ctx context.Context) error {
		if err := db.Echo(ctx); err != nil {
			if ctx.Err() != nil {
				return dbTimeout
			}
			return err
		}
		return nil
	}, dbTimeout, &p.dbErr)
	return p
}

// loop runs probe every interval and records its outcome in *last. A probe not answered
// within timeout counts as failed (timeoutErr) at once, even if it is itself stuck (a
// write to a peer that no longer reads); no new probe starts before the stuck one returns.
func (p *HealthProbe) loop(probe func(ctx context.Context) error, timeoutErr error, last *error) {
	defer p.wg.Done()
	var inflight chan error // the last probe's outcome, while it runs
	for {
		start := time.Now()
		if inflight == nil {
			inflight = make(chan error, 1)
			go func(ch chan<- error) {
				ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
				defer cancel()
				ch <- probe(ctx)
			}(inflight)
		}
		var err error
		t := time.NewTimer(p.timeout)
		select {
		case err = <-inflight:
			inflight = nil
		case <-t.C:
			err = timeoutErr
		case <-p.stop:
			t.Stop()
			return
		}
		t.Stop()
		// One outage of Open vSwitch is one warning, whether one side or both stop
		// answering (a restart of the ovs container stops both, each probe noticing it on
		// its own), and one info line when both answer again.
		p.mu.Lock()
		was := *last
		downBefore := p.ofErr != nil || p.dbErr != nil
		*last = err
		downAfter := p.ofErr != nil || p.dbErr != nil
		p.mu.Unlock()
		if p.log != nil {
			switch {
			case downAfter && !downBefore:
				p.log.Warn("Open vSwitch not answering; CNI STATUS fails and ADDs wait until it answers", "err", err)
			case downBefore && !downAfter:
				p.log.Info("Open vSwitch answering again", "was", was)
			}
		}
		t = time.NewTimer(p.interval - time.Since(start))
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Errs returns the last failures of the OpenFlow and the OVSDB probe (nil: answered, or
// not probed yet).
func (p *HealthProbe) Errs() (openFlow, ovsDB error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ofErr, p.dbErr
}

// Close stops the probes and waits for their loops (a stuck probe is left to end by
// itself). Call it once.
func (p *HealthProbe) Close() {
	close(p.stop)
	p.wg.Wait()
}
