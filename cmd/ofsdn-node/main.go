// Command ofsdn-node is the ofsdn node daemon: a native SDN controller for one node's
// Open vSwitch. It programs the integration bridge's ports through OVSDB and its flow tables
// through its own OpenFlow 1.3 connection, and serves the CNI plugin's requests on a
// root-only unix socket.
//
// Usage: ofsdn-node [-config FILE] [flags]; see -help for the flags and defaults.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ofsdn/ofsdn/cni/install"
	"github.com/ofsdn/ofsdn/cni/server"
	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/masq"
	"github.com/ofsdn/ofsdn/ovsdb"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ofsdn-node:", err)
		os.Exit(1)
	}
}

func newLogger(cfg Config) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(cfg.LogLevel))); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: textAttr} // MACs as text (logattrs.go)
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// checkForwarding warns, naming the sysctl, when the host forwarding the node's pods
// need is off: IPv4's (net.ipv4.ip_forward, file v4Path) on a node with an IPv4 pod subnet
// (ipv4: IPv4-only, dual-stack or IPv6-first), IPv6's (net.ipv6.conf.all.forwarding, file
// v6Path) on an IPv6-only node, which has no use for IPv4 forwarding. It only reads the
// files; one it cannot read is a warning too.
func checkForwarding(log *slog.Logger, ipv4 bool, v4Path, v6Path string) {
	check, path, sysctl, family := masq.CheckIPForward, v4Path, "net.ipv4.ip_forward", "IPv4"
	if !ipv4 {
		check, path, sysctl, family = masq.CheckIPv6Forward, v6Path, "net.ipv6.conf.all.forwarding", "IPv6"
	}
	if warn, err := check(path); err != nil {
		log.Warn("cannot check "+family+" forwarding", "sysctl", sysctl, "err", err)
	} else if warn != "" {
		log.Warn(warn, "sysctl", sysctl)
	}
}

func run(args []string) error {
	cfg, err := loadConfig(args)
	if err != nil {
		return err
	}
	log := newLogger(cfg)
	slog.SetDefault(log)
	dpType, why, err := controller.ResolveDatapathType(cfg.DatapathType)
	if err != nil {
		return err
	}
	log.Info("datapath", "datapath_type", dpType, "configured", cfg.DatapathType, "why", why, "ovs", cfg.OVS)
	cfg.DatapathType = dpType

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// One controller per bridge: a second daemon waits here rather than replace our flows.
	unlockBridge, err := lockBridge(ctx, cfg.OVSRunDir, cfg.Bridge, log)
	if err != nil {
		return err
	}
	defer unlockBridge()

	// The CNI socket answers "try again later" (code 11) until the node is ready.
	addTimeout, _ := time.ParseDuration(cfg.AddTimeout) // checked by loadConfig
	h := &handler{log: log, addTimeout: addTimeout}
	srv := server.New(cfg.Socket, h, log)
	// Metrics, /healthz, /readyz and the inspection socket come up before OVS is reached.
	obs, err := startObserver(cfg, srv, log)
	if err != nil {
		return err
	}
	defer obs.close()
	if err := srv.Start(); err != nil {
		return fmt.Errorf("CNI server on %s: %w", cfg.Socket, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	startTimeout, _ := time.ParseDuration(cfg.StartTimeout)
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	db, err := ovsdb.Connect(sctx, cfg.OVSDB, ovsdb.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("OVSDB at %s: %w", cfg.OVSDB, err)
	}
	defer db.Close()
	obs.setDB(db)
	subnet, subnet6, v6First, _ := cfg.podSubnets() // checked by loadConfig
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = defaultMTU
	}
	// With a topology (file or Kubernetes) the node's subnet, MTU and peers come from it.
	cl, err := prepareCluster(sctx, ctx, cfg, log)
	if err != nil {
		return err
	}
	if cl != nil && cfg.UnderlayBridge != "" && cfg.DatapathType == controller.DatapathNetdev {
		holder, err := controller.MoveUnderlay(sctx, db, cfg.UnderlayBridge, cl.NodeIP, log)
		if err != nil {
			return err
		}
		cl.Underlay = holder
	}
	var overlay *controller.OverlayOptions
	if cl != nil {
		subnet, subnet6, v6First, mtu = cl.PodSubnet, cl.PodSubnetIPv6, cl.IPv6First, cl.MTU
		// The overlay (tunnel port, cluster flows, the peers known now) is part of the
		// node's first flow sync: a restart replaces the earlier run's flows in one bundle.
		overlay = controller.OverlayOptionsFor(cl, cfg.TunnelType, cfg.TunnelPort)
	}
	// NetworkPolicy: informers synced before the node's first flow sync.
	pol, err := startPolicy(sctx, ctx, cfg, log)
	if err != nil {
		return err
	}
	auditInterval, _ := time.ParseDuration(cfg.FlowAuditInterval) // checked by loadConfig
	node, err := controller.StartNode(sctx, db, controller.NodeOptions{
		Bridge: cfg.Bridge, Gateway: cfg.Gateway, DatapathType: cfg.DatapathType,
		PodSubnet: subnet, PodSubnetIPv6: subnet6, IPv6First: v6First, MTU: mtu, OVSRunDir: cfg.OVSRunDir, DataDir: cfg.DataDir,
		EchoInterval: 5 * time.Second, Logger: log, Hooks: obs.hooks(), Overlay: overlay,
		FlowAuditInterval: auditInterval, Policy: pol, Services: serviceOptions(cfg),
	})
	if err != nil {
		return err
	}
	defer node.Close()
	if cl != nil {
		if err := node.JoinCluster(ctx, cl); err != nil {
			return err
		}
	}
	// After JoinCluster, which turns forwarding on: read, never written here.
	checkForwarding(log, subnet != nil, masq.IPForwardSysctl, masq.IPv6ForwardSysctl)
	if err := startServices(ctx, cfg, node, log, obs.serviceSync(cfg)); err != nil {
		return err
	}
	h.node = node
	srv.SetReady(true)
	// Only now, ready to serve ADD, show the kubelet the plugin and its config.
	if err := install.Files(install.Options{BinDir: cfg.CNIBinDir, PluginBinary: cfg.PluginBinary,
		ConfDir: cfg.CNIConfDir, Socket: cfg.Socket}, log); err != nil {
		return err
	}
	obs.setNode(node)
	log.Info("serving CNI requests", "socket", cfg.Socket)

	// A lost OpenFlow or OVSDB connection is not fatal: the node reconnects by itself
	// (openflow.Switch, ovsdb.Client), replays its flows and answers CNI requests with
	// "try again later" meanwhile.
	<-ctx.Done()
	log.Info("shutting down; flows stay installed so pods keep forwarding")
	return nil
}
