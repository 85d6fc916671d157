package main

// NetworkPolicy: the informers start before the node, and the node starts only once they
// have synced, so that its first flow sync already holds every restored pod's policy.

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/internal/unixctl"
	"github.com/ofsdn/ofsdn/policy"
)

// startPolicy starts the policy informers (until runCtx ends) and waits, bounded by
// waitCtx (startTimeout), for them to sync. Without policy (config networkPolicy) it
// returns nil.
func startPolicy(waitCtx, runCtx context.Context, cfg Config, log *slog.Logger) (*controller.PolicyOptions, error) {
	if !cfg.policyOn() {
		return nil, nil
	}
	client, err := kubeClient(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	agent := policy.NewAgent()
	// The rules' conjunction ids of the last run, before the initial lists compile them.
	if rec, last, err := controller.RecordedPolicyRuleIDs(cfg.DataDir); err != nil {
		log.Warn("NetworkPolicy conjunction id record unreadable; the rules get new ids and the record is replaced",
			"file", filepath.Join(cfg.DataDir, controller.PolicyRuleIDsFile), "err", err)
	} else {
		agent.View(func(e *policy.Engine) { e.ConjIDs().Prefer(rec, last) })
	}
	// Pods scheduled to this node count for their rules before their ADD (the rules'
	// peer and port clauses are on the switch when it comes), set before any event.
	agent.View(func(e *policy.Engine) { e.SetNode(cfg.NodeName) })
	w := &policy.Watcher{Client: client, Agent: agent, Logger: log}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	select {
	case <-agent.Synced():
	case err := <-errc:
		return nil, fmt.Errorf("network policy informers: %w", err)
	case <-waitCtx.Done():
		return nil, fmt.Errorf("network policy: the Pod, Namespace and NetworkPolicy informers did not sync within startTimeout: check the API server and that the ClusterRole grants get, list and watch on pods, namespaces and networking.k8s.io networkpolicies (or set networkPolicy: false)")
	}
	opts := &controller.PolicyOptions{Agent: agent, DenyLog: cfg.PolicyDenyLog, DenyLogRate: uint32(cfg.PolicyDenyLogRate)}
	if cfg.DatapathType == "netdev" {
		opts.PurgeDatapath = purgeDatapath(cfg.OVSRunDir)
	}
	return opts, nil
}

// purgeDatapath returns a function that empties ovs-vswitchd's datapath flow cache
// (revalidator/purge over its control socket in runDir, package internal/unixctl), for
// the userspace datapath after each NetworkPolicy change.
func purgeDatapath(runDir string) func(context.Context) error {
	return func(ctx context.Context) error {
		path, err := unixctl.SocketPath(runDir)
		if err != nil {
			return err
		}
		_, err = unixctl.Call(ctx, path, "revalidator/purge")
		return err
	}
}
