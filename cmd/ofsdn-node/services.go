package main

// The Service proxy (serviceProxy: ofsdn): the node starts with the Services datapath on,
// then the Service and EndpointSlice informers and the rate-bounded runner feed the
// node's sink (controller/services.go). Until the first sync, pods' Service traffic takes
// the host's kube-proxy path (service_host), which is why kube-proxy keeps running.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/internal/unixctl"
	"github.com/ofsdn/ofsdn/proxy"
)

// serviceOptions returns the node's ServiceOptions with serviceProxy ofsdn, else nil.
func serviceOptions(cfg Config) *controller.ServiceOptions {
	if !cfg.servicesOn() {
		return nil
	}
	o := &controller.ServiceOptions{FlushConntrack: flushConntrack(cfg.OVSRunDir), AffinityLearnMax: uint16(cfg.ServiceAffinityLearnMax)}
	if cfg.DatapathType == "netdev" {
		o.PurgeDatapath = purgeDatapath(cfg.OVSRunDir)
	}
	return o
}

// startServices starts the informers and the runner (until ctx ends) feeding node's
// Service sink. It does nothing without serviceProxy ofsdn.
//
// onSync, if set, gets each sync's duration, error and the trigger times it realized
// (metrics.Metrics.ServiceSync).
func startServices(ctx context.Context, cfg Config, node *controller.Node, log *slog.Logger, onSync func(time.Duration, error, []time.Time)) error {
	sink := node.Services()
	if !cfg.servicesOn() || sink == nil {
		return nil
	}
	client, err := kubeClient(cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	// One tracker and runner per family of the node (kube-proxy's per-family proxiers),
	// both fed by one pair of informers and both syncing into the one sink.
	var ts []*proxy.Tracker
	for _, f := range node.ServiceFamilies() {
		ts = append(ts, proxy.NewTracker(cfg.NodeName, f))
	}
	log = log.With("component", "service-proxy")
	go func() {
		if err := (&proxy.Watcher{Client: client, Tracker: ts[0], Trackers: ts[1:], Logger: log}).Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("Service and EndpointSlice informers stopped: check the API server and that the ClusterRole grants get, list and watch on services and discovery.k8s.io endpointslices", "err", err)
		}
	}()
	for _, t := range ts {
		go func() {
			r := &proxy.Runner{Tracker: t, Sink: sink, Logger: log.With("family", t.Family().String())}
			if onSync != nil {
				r.OnSync = func(u *proxy.Update, took time.Duration, err error) {
					var ts []time.Time
					for _, tt := range u.TriggerTimes {
						ts = append(ts, tt...)
					}
					onSync(took, err, ts)
				}
			}
			_ = r.Run(ctx)
		}()
	}
	return nil
}

// flushConntrack returns a function that flushes conntrack entries by zone and partial
// tuples with ovs-vswitchd's dpctl/flush-conntrack over its control socket in runDir
// (ovs-dpctl(8); partial tuples since OVS 3.1).
func flushConntrack(runDir string) func(ctx context.Context, zone uint16, orig, reply string) error {
	return func(ctx context.Context, zone uint16, orig, reply string) error {
		path, err := unixctl.SocketPath(runDir)
		if err != nil {
			return err
		}
		_, err = unixctl.Call(ctx, path, "dpctl/flush-conntrack", fmt.Sprintf("zone=%d", zone), orig, reply)
		return err
	}
}
