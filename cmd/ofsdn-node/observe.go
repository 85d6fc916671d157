package main

// Observability wiring: the metrics and health listener (package metrics) and the
// inspection socket (package ctl). Both start before the daemon connects to Open vSwitch,
// so /healthz answers at once and /readyz says why the daemon is not ready yet.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/ofsdn/ofsdn/cni/server"
	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/metrics"
	"github.com/ofsdn/ofsdn/ovsdb"
)

// observer owns the daemon's metrics, health endpoints and inspection socket.
type observer struct {
	cfg     Config
	cniSrv  *server.Server
	metrics *metrics.Metrics
	http    *metrics.Server // nil when metricsAddress is ""
	ctl     *ctl.Server     // nil when ctlSocket is ""
	db      atomic.Pointer[ovsdb.Client]
	// ovsdbReconnects counts ovsdb.Client.Reconnected notifications.
	ovsdbReconnects atomic.Int64
	node            atomic.Pointer[controller.Node]
	// probe asks ovs-vswitchd and ovsdb-server whether they answer
	// (controller.HealthProbe); nil until setNode.
	probe atomic.Pointer[controller.HealthProbe]
	stop  chan struct{}
}

// startObserver creates the metrics, installs the CNI server's observer (call it before
// srv.Start), and starts the metrics listener and the inspection socket.
func startObserver(cfg Config, srv *server.Server, log *slog.Logger) (*observer, error) {
	o := &observer{cfg: cfg, cniSrv: srv, metrics: metrics.New(), stop: make(chan struct{})}
	srv.SetObserver(o.metrics.ObserveCNI)
	o.metrics.SetSource(o.stats)
	if cfg.MetricsAddress != "" {
		o.http = metrics.NewServer(cfg.MetricsAddress, o.metrics.Registry(), log)
		o.http.SetReadiness(o.readiness)
		if err := o.http.Start(); err != nil {
			return nil, err
		}
	}
	if cfg.CtlSocket != "" {
		o.ctl = ctl.NewServer(cfg.CtlSocket, ctl.NodeSource(o.node.Load), log)
		if err := o.ctl.Start(); err != nil {
			o.close()
			return nil, err
		}
	}
	return o, nil
}

// hooks returns the node's observer hooks.
// serviceSync returns the Service proxy's sync hook (its metrics registered) when the
// node proxies Services, else nil.
func (o *observer) serviceSync(cfg Config) func(time.Duration, error, []time.Time) {
	if !cfg.servicesOn() {
		return nil
	}
	o.metrics.EnableServices()
	return o.metrics.ServiceSync
}

func (o *observer) hooks() controller.Hooks {
	return controller.Hooks{AddStep: o.metrics.AddStep, FlowOp: o.metrics.FlowOp, FlowRepair: o.metrics.FlowRepair,
		PolicyRealize: o.metrics.PolicyRealize}
}

// setDB records the OVSDB client once connected and counts its reconnections.
func (o *observer) setDB(db *ovsdb.Client) {
	o.db.Store(db)
	ch := db.Reconnected()
	go func() {
		for {
			select {
			case <-ch:
				o.ovsdbReconnects.Add(1)
			case <-o.stop:
				return
			}
		}
	}()
}

// setNode records the started node: from now on the gauges, /readyz and the inspection
// socket read it, and the health probe asks its switch and database whether they answer.
func (o *observer) setNode(n *controller.Node) {
	if p := n.Health(); p != nil {
		o.probe.Store(p)
	}
	o.node.Store(n)
}

// readiness is /readyz: OVSDB and OpenFlow connected and answering (the health probe's
// last echo of each was answered within controller.HealthProbeTimeout), base pipeline installed, CNI
// socket serving. The error lists what is not.
func (o *observer) readiness() error {
	var errs []error
	n := o.node.Load()
	var ofErr, dbErr error
	if p := o.probe.Load(); p != nil {
		ofErr, dbErr = p.Errs()
	}
	if db := o.db.Load(); db == nil || !db.Connected() {
		errs = append(errs, fmt.Errorf("OVSDB at %s not connected", o.cfg.OVSDB))
	} else if dbErr != nil {
		errs = append(errs, dbErr)
	}
	if n == nil {
		errs = append(errs, fmt.Errorf("bridge %s: node not started (OpenFlow connection and base pipeline pending)", o.cfg.Bridge))
	} else {
		if !n.OpenFlowConnected() {
			errs = append(errs, fmt.Errorf("OpenFlow connection to bridge %s down", o.cfg.Bridge))
		} else if ofErr != nil {
			errs = append(errs, ofErr)
		}
		if !n.PipelineInstalled() {
			errs = append(errs, fmt.Errorf("base pipeline not installed on bridge %s", o.cfg.Bridge))
		}
	}
	if !o.cniSrv.Ready() {
		errs = append(errs, fmt.Errorf("CNI socket %s not serving yet", o.cfg.Socket))
	} else if c, err := net.DialTimeout("unix", o.cfg.Socket, time.Second); err != nil {
		errs = append(errs, fmt.Errorf("CNI socket %s not accepting connections: %v", o.cfg.Socket, err))
	} else {
		c.Close()
	}
	return errors.Join(errs...)
}

// stats samples the node for the metrics collector.
func (o *observer) stats() metrics.NodeStats {
	var s metrics.NodeStats
	if db := o.db.Load(); db != nil {
		s.OVSDBUp = db.Connected()
		s.OVSDBReconnects = o.ovsdbReconnects.Load()
	}
	if n := o.node.Load(); n != nil {
		s.LocalPods = len(n.Pods())
		s.PoolAddresses, s.AllocatedAddresses = n.IPAM().Capacity(), n.IPAM().InUse()
		s.FlowsByTable = n.Store().CountByTable()
		s.OpenFlowUp = n.OpenFlowConnected()
		s.OpenFlowReconnects = n.Switch().Reconnects()
		if ov := n.Overlay(); ov != nil {
			s.Peers = len(ov.Peers())
		}
		if st := n.PolicyStatus(); st != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			denied, err := n.PolicyDenied(ctx) // the totals so far even on error
			_ = err
			s.Policy = &metrics.PolicyStats{Policies: st.Policies, Rules: st.Conjunctions, Flows: st.RuleFlows, Denied: denied}
			if dl, _ := n.DenyLogStats(ctx); dl != nil { // the totals so far even on error
				s.Policy.DenyLog = &metrics.DenyLogStats{Logged: dl.Logged, Dropped: map[string]uint64{
					"meter": dl.MeterDropped, "queue": dl.QueueDropped, "undecodable": dl.Undecodable}}
			}
			cancel()
		}
		if st := n.ServiceStats(); st != nil {
			s.Services = &metrics.ServiceStats{Ports: st.Ports, Endpoints: st.Endpoints, Rejected: st.Rejected,
				RejectDropped: st.RejectDropped, Flushed: st.Flushed, FlushErrors: st.FlushErrors,
				AffinityRemainders: st.AffinityRemainders, AffinityRemainderErrors: st.AffinityRemainderErrors}
		}
		s.Ready = o.readiness() == nil
	}
	return s
}

// close stops the listeners.
func (o *observer) close() {
	select {
	case <-o.stop:
		return
	default:
		close(o.stop)
	}
	// The probe is the node's (Node.Health): the node closes it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if o.http != nil {
		_ = o.http.Shutdown(ctx)
	}
	if o.ctl != nil {
		_ = o.ctl.Shutdown(ctx)
	}
}
