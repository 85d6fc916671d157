package controller

// The node: bridge, gateway, tunnel port and base pipeline.
//
// Start brings the node's switch into the shape the pipeline expects, in this order: the
// integration bridge through OVSDB (fail_mode=secure so that without us nothing forwards,
// protocols=OpenFlow13, flow tables named after the pipeline stages), the gateway internal
// port and, on a cluster member, the flow-based tunnel port (ensureSwitchConfig), the
// gateway's address through netlink and the host's route for the cluster CIDR, the IPAM
// store, a new generation number, the reconciliation of broken attachments
// (reconcile.go), the desired flows of the base pipeline (with its tunnel and cluster
// flows), of every pod already attached (their ports carry our external_ids, or, when the
// OVS database lost them, their IP leases and live host veths do) and of every
// peer the topology already lists (peers.go), and last our own OpenFlow connection, whose
// first sync installs all of it as one bundle. So a daemon restart re-creates its state
// from OVSDB, the IPAM store, the host's veths and the topology instead of losing it.
//
// Restarts (design history and the rules every change here must keep):
//   - Flows are never deleted at start. Each daemon run has a generation (cookie bits
//     55..40), one more than the last run's and never one a flow on the switch carries,
//     persisted in DataDir/generation (atomically, fsync'd) and in the bridge's
//     external_ids:ofsdn-generation BEFORE any flow carries it. It once lived only in the
//     bridge: after a lost database a restarted daemon took the generation of the run
//     before, so its audit deleted the still-running pods' flows (issue 20). The first
//     sync is one atomic bundle: an OFPFC_ADD of every desired flow (replacing the old entry with the
//     same match, so packets never see a gap), then a delete by cookie mask of every
//     earlier generation found on the switch (flows.GenerationCookie). Pods forward with
//     the old flows while the daemon is down.
//   - ovs-vswitchd restart: openflow.Switch re-dials with backoff forever; each new
//     connection is synced with one bundle "delete every flow, add every desired flow"
//     before any other flow change is accepted. Only then is
//     other_config:flow-restore-wait removed: whoever restarts ovs-vswitchd (ovs-ctl
//     restart, the DaemonSet's start script, the e2e test) sets it to true before the
//     start, so ovs-vswitchd keeps the kernel datapath's flows and does not handle
//     packets with its own, still empty, tables until the controller has restored them.
//     The first bundle must already hold every flow the node wants, the overlay's
//     included: a flow missing from it is deleted with the earlier generation and stays
//     missing until added (the tunnel and peer flows were once added after the first sync,
//     and cross-node traffic stopped for tens of milliseconds at every daemon restart).
//   - ovsdb-server restart: the ovsdb client reconnects and refreshes its cache; the node
//     then re-ensures the bridge (with its table names), the gateway port and the tunnel
//     port, and the gateway's address. If the gateway's or the tunnel's ofport or the
//     gateway's MAC changed (the database lost the ports and they were created again),
//     the pipeline's and the peers' flows are rebuilt for the new values and the switch
//     resynchronised with one bundle (rebuild); pods' flows do not name those ports.
//     If the database lost the pods' ports (an empty conf.db: ovs-vswitchd then deletes
//     the bridge with every port and flow), each pod whose host veth exists gets its port
//     back with its identity and its ofport (reattachPods), and the OpenFlow reconnection
//     replays its flows; a daemon started on an empty database re-creates them from the
//     IP leases, which record netns, host veth and ofport (restorePods). Before issue 20
//     no pod port came back: the pods kept their addresses and had no network.
//   - While OVS is unreachable, operations fail fast with errors matching
//     ErrOVSUnavailable (CNI error 11, try again later) instead of waiting.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
	"github.com/ofsdn/ofsdn/switchstate"
)

// NodeOptions configures a Node. Zero values are not defaults: cmd/ofsdn-node fills them.
type NodeOptions struct {
	// Bridge is the integration bridge's name, e.g. "br-int".
	Bridge string
	// Gateway is the name of the gateway internal port, e.g. "ofsdn-gw0".
	Gateway string
	// DatapathType is the bridge's datapath_type: "system" (kernel) or "netdev" (userspace).
	// On "netdev" the pods' TX checksum offload is turned off (TCP fails otherwise).
	DatapathType string
	// PodSubnet is this node's pod subnet (IPv4); its first address is the gateway's.
	// Nil on an IPv6-only node (PodSubnetIPv6 alone): its pods get one IPv6 address each.
	PodSubnet *net.IPNet
	// PodSubnetIPv6 is this node's IPv6 pod subnet on a dual-stack node (/126 or shorter;
	// its first address, ::1 of it, is the gateway's IPv6 address), nil on an IPv4-only
	// node. Every pod then gets one address of each (the IPv4 one first, the order of
	// the CNI result), from one lease. Without PodSubnet (an IPv6-only node) NetworkPolicy
	// and Services in OVS handle IPv6 alone.
	PodSubnetIPv6 *net.IPNet
	// IPv6First lists the IPv6 pod subnet before the IPv4 one on a dual-stack node
	// (Node.spec.podCIDRs in that order, an IPv6-first cluster): every pod's addresses,
	// its lease and the CNI result then hold the IPv6 address first.
	IPv6First bool
	// MTU is the pods' and the gateway's MTU in bytes (68..65535; MinMTUIPv6 or more on
	// a node with an IPv6 pod subnet).
	MTU int
	// OVSRunDir is Open vSwitch's run directory; the bridge's OpenFlow management socket is
	// OVSRunDir/<Bridge>.mgmt.
	OVSRunDir string
	// DataDir holds the daemon's persistent state (the IPAM store).
	DataDir string
	// EchoInterval is the OpenFlow keep-alive period (seconds resolution is enough).
	EchoInterval time.Duration
	// MaxReconnectBackoff is the longest pause between two OpenFlow dial attempts after the
	// connection is lost (attempts never stop); zero means DefaultMaxBackoff (1 s).
	MaxReconnectBackoff time.Duration
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
	// Hooks lets an observer (the metrics package) time the node's work; nil fields are
	// skipped.
	Hooks Hooks
	// Overlay makes the node a cluster member (tunnel port, cluster flows, peers); nil = a
	// single node without a tunnel. Its Peers are installed by the first flow sync.
	Overlay *OverlayOptions
	// FlowAuditInterval is the period of the flow audit (audit.go) that re-installs
	// missing desired flows and deletes our undesired ones; 0 turns it off.
	FlowAuditInterval time.Duration
	// Policy turns NetworkPolicy enforcement on (policy.go): conntrack and the rule stages
	// in the pipeline, each pod's policy flows installed with its forwarding flows. Its
	// Agent must have synced before StartNode. nil = off (the policy stages pass
	// everything).
	Policy *PolicyOptions
	// Services turns on Services load-balanced in OVS (services.go, NodeConfig.Services):
	// Node.Services is then the proxy.Sink to feed. nil = off (pods' Service traffic goes
	// to the host's kube-proxy through the gateway).
	Services *ServiceOptions
}

// Hooks are optional callbacks with which an observer times the node's work without
// controller/ depending on it. They must be cheap and safe for concurrent use.
type Hooks struct {
	// AddStep is called after each step of a pod ADD with the step's name and its duration:
	// "veth" (address reserved and veth made), "ipam" (the rest of the lease's write to
	// disk, which ran during "veth"), "ovsdb", "openflow", in that order.
	AddStep func(step string, d time.Duration)
	// FlowOp is called after each batch sent to the switch: kind is "flow_mod", "bundle"
	// or "meter_mod", n the number of mods, d the time until the barrier or commit reply,
	// err the result.
	FlowOp func(kind string, n int, d time.Duration, err error)
	// FlowRepair is called after an audit repaired the switch: kind is one of the Repair*
	// constants (flows, groups, meters missing or unexpected), n (>= 1) the number of
	// objects of that kind.
	FlowRepair func(kind string, n int)
	// PolicyRealize is called after each NetworkPolicy change reached the switch (or
	// failed to): d is the time from the API event (or the attach) to the switch's
	// confirmation.
	PolicyRealize func(d time.Duration, err error)
}

// Node is one node's switch state: the OVSDB client, the OpenFlow connection, the desired
// flow store, the IPAM store and the local pods. Create it with StartNode.
type Node struct {
	opts    NodeOptions
	log     *slog.Logger
	db      *ovsdb.Client // the bridge, its own ports, generation, flow-restore-wait
	health  *HealthProbe  // echoes of both sides (Status, /readyz)
	sw      *openflow.Switch
	store   flowStore
	ipam    *ipam.Store
	gwAddr  *net.IPNet
	gwAddr6 *net.IPNet // nil on an IPv4-only node

	// The collaborators of pod wiring (seams.go): in a running node ports is db, owners
	// is store, leases is ipam and netns is package podnet.
	ports  portDB
	owners flowOwners
	leases leaseStore
	netns  podPlumbing

	// cfg is the flow builders' view of the node. It is complete before any goroutine
	// starts; afterwards only rebuild changes it (new gateway/tunnel ofport or gateway MAC
	// after an OVSDB reconnection), under cfgMu, and bumps cfgVer.
	cfgMu  sync.RWMutex
	cfg    flows.NodeConfig
	cfgVer uint64

	overlay *Overlay // nil on a single node

	policy   *policyRealizer // nil without NetworkPolicy
	denyLog  *denyLog        // nil without PolicyOptions.DenyLog
	services *serviceProxy   // nil without NodeOptions.Services

	// rebuildPending: a rebuild's bundle failed; the next attempt runs it again even if
	// the ports no longer differ from cfg. Used by the watchOVSDB goroutine only.
	rebuildPending bool

	// runCtx lives until Close: it bounds the node's background work (the kept route).
	runCtx    context.Context
	cancelRun context.CancelFunc

	locks keyedMutex
	mu    sync.Mutex
	pods  map[string]*Attachment // attachmentKey → attachment

	stop chan struct{}  // closed by Close: ends the background loops
	wg   sync.WaitGroup // background loops (OVSDB reconnect watcher)
}

// GenerationKey is the bridge external_ids key that holds the generation (1..65535) of
// the daemon run that last started on this bridge; see flows.Cookie.
const GenerationKey = "ofsdn-generation"

// FlowRestoreWaitKey is the Open_vSwitch other_config key with which whoever restarts
// ovs-vswitchd asks it to keep the datapath's flows and not forward with its own tables
// until the controller has restored them (vswitchd.conf.db(5), other_config
// flow-restore-wait). The node removes it after every full flow sync.
const FlowRestoreWaitKey = "flow-restore-wait"

// MinMTUIPv6 is IPv6's minimum link MTU in bytes (RFC 8200 §5): Linux removes IPv6 from
// a link whose MTU is below it, so a node with an IPv6 pod subnet refuses a smaller pod
// MTU at start (its pods and gateway could carry no IPv6).
const MinMTUIPv6 = 1280

// StartNode ensures the bridge, the gateway port and its address (and with
// opts.Overlay the tunnel port and the host's route for the cluster CIDR), opens the IPAM
// store, takes a new generation, removes broken attachments, connects OpenFlow and
// installs the base pipeline, the flows of pods already attached and those of the
// overlay's initial peers in one bundle (deleting earlier generations' flows in the same
// commit). It returns an error naming the step that failed (config, OVSDB, gateway,
// tunnel, route, IPAM, generation, OpenFlow). The OpenFlow connection is retried with
// backoff until ctx ends. An initial peer that fails flows.Peer.Validate is logged and
// left out (the topology's next event for it tries again).
func StartNode(ctx context.Context, db *ovsdb.Client, opts NodeOptions) (*Node, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if (opts.PodSubnet == nil && opts.PodSubnetIPv6 == nil) || (opts.PodSubnet != nil && opts.PodSubnet.IP.To4() == nil) {
		return nil, errors.New("node: pod subnet must be an IPv4 CIDR, or on an IPv6-only node left out beside the IPv6 one (set podSubnet or podSubnets in the config)")
	}
	if sn := opts.PodSubnetIPv6; sn != nil && (sn.IP.To4() != nil || len(sn.IP) != net.IPv6len) {
		return nil, fmt.Errorf("node: IPv6 pod subnet %v is not an IPv6 CIDR (set the IPv6 entry of podSubnets in the config)", sn)
	}
	if opts.PodSubnetIPv6 != nil && opts.MTU < MinMTUIPv6 {
		return nil, fmt.Errorf("node: pod MTU %d is below IPv6's minimum link MTU %d (RFC 8200 §5), and this node has an IPv6 pod subnet %v: set mtu to %d or more (with a tunnel: an underlay MTU of %d or more, %d over an IPv6 underlay), or leave IPv6 out of podSubnets", opts.MTU, MinMTUIPv6, opts.PodSubnetIPv6, MinMTUIPv6, MinMTUIPv6+50, MinMTUIPv6+70)
	}
	if ov := opts.Overlay; ov != nil && ov.ClusterCIDR == nil && opts.PodSubnet != nil {
		return nil, errors.New("overlay: no cluster CIDR: set clusterCIDR in the config or the topology")
	}
	n := &Node{opts: opts, log: opts.Logger, db: db, ports: db, netns: netlinkPlumbing{},
		pods: map[string]*Attachment{}, stop: make(chan struct{})}
	var gwIP net.IP
	if opts.PodSubnet != nil {
		gwIP = nthIP(opts.PodSubnet, 1)
		n.gwAddr = &net.IPNet{IP: gwIP, Mask: opts.PodSubnet.Mask}
	}
	var gwIP6 net.IP
	if sn := opts.PodSubnetIPv6; sn != nil {
		gwIP6 = nthIP6(sn, 1)
		n.gwAddr6 = &net.IPNet{IP: gwIP6, Mask: sn.Mask}
	}

	ports, err := n.ensureSwitchConfig(ctx)
	if err != nil {
		return nil, err
	}
	gwMAC, err := n.configureGateway(ctx)
	if err != nil {
		return nil, err
	}
	n.cfg = flows.NodeConfig{
		GatewayOFPort: uint32(ports.gateway),
		GatewayMAC:    gwMAC,
		GatewayIP:     gwIP,
		PodSubnet:     opts.PodSubnet,
		PodSubnetIPv6: opts.PodSubnetIPv6,
		GatewayIPv6:   gwIP6,
		Policy:        opts.Policy != nil,
		DenyLog:       opts.Policy != nil && opts.Policy.DenyLog,
		Services:      opts.Services != nil,
	}
	if opts.Services != nil {
		n.cfg.AffinityLearnMax = opts.Services.AffinityLearnMax
	}
	if ov := opts.Overlay; ov != nil {
		n.cfg.TunnelOFPort = uint32(ports.tunnel)
		n.cfg.NodeIP = ov.NodeIP.To4()
		if n.cfg.NodeIP == nil { // an IPv6 underlay
			n.cfg.NodeIP = ov.NodeIP.To16()
		}
		n.cfg.ClusterCIDR = ov.ClusterCIDR
		if opts.PodSubnetIPv6 != nil {
			n.cfg.ClusterCIDRIPv6 = ov.ClusterCIDRIPv6
		}
		n.cfg.ServiceCIDR = ov.ServiceCIDR
	}
	if err := n.cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}

	n.runCtx, n.cancelRun = context.WithCancel(context.Background())
	if ov := opts.Overlay; ov != nil {
		// Kept (re-added when the gateway is created again) until Close. An IPv6-only
		// node has no IPv4 cluster CIDR.
		if ov.ClusterCIDR != nil {
			if err := podnet.KeepRoute(n.runCtx, n.log, opts.Gateway, ov.ClusterCIDR, gwIP); err != nil {
				n.cancelRun()
				return nil, fmt.Errorf("overlay: route for cluster CIDR %v via %s: %w", ov.ClusterCIDR, opts.Gateway, err)
			}
		}
		if sn := n.clusterCIDR6(); sn != nil {
			if err := podnet.Keep(n.runCtx, n.log, opts.Gateway, fmt.Sprintf("IPv6 route %v", sn), n.ensureRouteIPv6); err != nil {
				n.cancelRun()
				return nil, fmt.Errorf("overlay: IPv6 route for cluster CIDR %v via %s: %w", sn, opts.Gateway, err)
			}
		}
	}

	var reserved []net.IP
	if gwIP != nil {
		reserved = append(reserved, gwIP)
	}
	if gwIP6 != nil {
		reserved = append(reserved, gwIP6)
	}
	n.ipam, err = ipam.Open(opts.DataDir, n.podSubnets(), reserved...)
	if err != nil {
		n.cancelRun()
		return nil, fmt.Errorf("node: IPAM store: %w", err)
	}
	n.leases = n.ipam
	fail := func(err error) (*Node, error) {
		n.cancelRun()
		if n.policy != nil {
			n.policy.close()
		}
		if n.denyLog != nil {
			n.denyLog.close()
		}
		if n.services != nil {
			n.services.close()
		}
		n.ipam.Close()
		return nil, err
	}

	if n.cfg.Generation, err = n.nextGeneration(ctx); err != nil {
		return fail(err)
	}
	if err := n.cfg.Validate(); err != nil {
		return fail(fmt.Errorf("node: %w", err))
	}

	n.store = flowStore{switchstate.New()}
	n.store.SetObserver(opts.Hooks.FlowOp)
	n.owners = n.store

	// Broken attachments go before anything is installed; their flows of the earlier
	// generation are deleted with the rest of it by the first sync.
	if removed, err := n.reconcile(ctx, ""); err != nil {
		n.log.Warn("reconciliation at start left broken attachments; CNI GC will retry", "removed", removed, "err", err)
	} else if removed > 0 {
		n.log.Info("reconciliation at start removed broken attachments", "removed", removed)
	}

	n.store.Load(flows.PipelineOwner, flows.PipelineFlows(n.cfg))
	n.restorePods(ctx)
	if po := opts.Policy; po != nil {
		// The first sync must already hold every restored pod's policy flows (it deletes
		// the earlier run's): the informers have synced before StartNode (cmd/ofsdn-node).
		select {
		case <-po.Agent.Synced():
		default:
			return fail(errors.New("network policy: the policy informers have not synced; start the policy.Watcher and wait for Agent.Synced before StartNode"))
		}
		n.policy = newPolicyRealizer(n, *po)
		n.policy.load(n.Pods())
	}
	if ov := opts.Overlay; ov != nil {
		n.overlay = newOverlay(n, *ov)
		if err := n.overlay.load(ov.Peers); err != nil {
			return fail(err)
		}
	}

	mgmt := filepath.Join(opts.OVSRunDir, opts.Bridge+".mgmt")
	ofOpts := openflow.Options{EchoInterval: opts.EchoInterval, Logger: opts.Logger}
	if n.cfg.DenyLog {
		rate := opts.Policy.DenyLogRate
		if rate == 0 {
			rate = 100
		}
		n.denyLog = newDenyLog(n.log, rate, n.podName, n.podAddrOfOwner)
		if err := n.denyLog.loadMeter(n.store.Store); err != nil {
			close(n.denyLog.done) // its loop never ran: fail's close must not wait for it
			return fail(err)
		}
	}
	if so := opts.Services; so != nil {
		sp := newServiceProxy(n, *so)
		if err := sp.loadMeter(n.store.Store); err != nil {
			if n.denyLog != nil {
				close(n.denyLog.done) // its loop never ran
			}
			return fail(err)
		}
		n.services = sp
	}
	// One packet-in queue per connection: with the Service proxy its goroutine reads it
	// and hands the deny log's packet-ins on (the deny log's own loop does not run).
	switch {
	case n.services != nil:
		if n.denyLog != nil {
			n.denyLog.q = n.services.q
			close(n.denyLog.done)
		}
		ofOpts.PacketIns = n.services.q
		ofOpts.FlowRemoved = n.services.frq // learned affinity flows at the learn limit
		ofOpts.FlowRemovedFilter = wantsFlowRemoved
		go n.services.run()
	case n.denyLog != nil:
		ofOpts.PacketIns = n.denyLog.q
		go n.denyLog.run()
	}
	n.sw = openflow.NewSwitch(mgmt, openflow.SwitchOptions{
		OF:         ofOpts,
		MaxBackoff: opts.MaxReconnectBackoff,
		Logger:     opts.Logger,
	}, n.onConnect)
	if err := n.sw.Start(ctx); err != nil {
		return fail(fmt.Errorf("node: OpenFlow connection to bridge %s at %s and first flow sync: %w", opts.Bridge, mgmt, err))
	}

	n.health = StartHealthProbe(n.sw, opts.Bridge, db, n.log)
	n.wg.Add(1)
	go n.watchOVSDB()
	if opts.FlowAuditInterval > 0 {
		n.wg.Add(1)
		go n.auditFlows(opts.FlowAuditInterval)
	}
	n.log.Info("node ready", "bridge", opts.Bridge, "datapath_type", opts.DatapathType,
		"gateway", opts.Gateway, "gateway_ofport", ports.gateway, "gateway_ip", fmt.Sprint(n.gwAddr),
		"pod_subnet", fmt.Sprint(opts.PodSubnet), "pod_subnet_ipv6", fmt.Sprint(opts.PodSubnetIPv6), "pods", len(n.pods), "generation", n.Generation())
	if ov := opts.Overlay; ov != nil {
		n.log.Info("overlay ready", "tunnel", ov.TunnelName, "type", ov.TunnelType, "tunnel_ofport", ports.tunnel,
			"node_ip", ov.NodeIP, "cluster_cidr", ov.ClusterCIDR, "service_cidr", ov.ServiceCIDR,
			"peers", len(n.overlay.Peers()))
	}
	return n, nil
}

// configureGateway gives the gateway port its MTU and IPv4 address, sets it up
// (podnet.ConfigureGateway) and, on a dual-stack node, its IPv6 address
// (podnet.ConfigureGatewayIPv6); it returns the port's MAC. Idempotent.
func (n *Node) configureGateway(ctx context.Context) (net.HardwareAddr, error) {
	gwMAC, err := podnet.ConfigureGateway(ctx, n.opts.Gateway, n.gwAddr, n.opts.MTU)
	if err != nil {
		return nil, fmt.Errorf("node: configure gateway %s with %s: %w", n.opts.Gateway, n.gwAddr, err)
	}
	if n.gwAddr6 != nil {
		if err := podnet.ConfigureGatewayIPv6(n.opts.Gateway, n.gwAddr6); err != nil {
			return nil, fmt.Errorf("node: configure gateway %s with %s: %w", n.opts.Gateway, n.gwAddr6, err)
		}
		if n.clusterCIDR6() != nil {
			if err := n.ensureRouteIPv6(); err != nil {
				return nil, fmt.Errorf("node: configure gateway %s: %w", n.opts.Gateway, err)
			}
		}
	}
	return gwMAC, nil
}

// clusterCIDR6 is the IPv6 cluster CIDR the host routes through the gateway: set on a
// dual-stack node with an overlay that knows it (clusterCIDRIPv6), else nil.
func (n *Node) clusterCIDR6() *net.IPNet {
	if n.gwAddr6 == nil || n.opts.Overlay == nil {
		return nil
	}
	return n.opts.Overlay.ClusterCIDRIPv6
}

// ensureRouteIPv6 routes the IPv6 cluster CIDR out of the gateway port via the link-local
// address of flows.VirtualRouterMAC, a permanent neighbor (podnet.EnsureRouteIPv6Via): the
// host reaches other nodes' pods over IPv6 as it does over IPv4, the pipeline's remote
// stage sending it into the tunnel by ipv6_dst, with the gateway's IPv6 address as the
// source (in this node's IPv6 pod subnet, which peers' tunnel_ingress accepts). This
// node's own pods are on-link by the gateway address's longer prefix route.
func (n *Node) ensureRouteIPv6() error {
	return podnet.EnsureRouteIPv6Via(n.opts.Gateway, n.clusterCIDR6(), flows.LinkLocalFromMAC(flows.VirtualRouterMAC), flows.VirtualRouterMAC)
}

// switchPorts are the ofports of the node's own ports (1..65279; tunnel 0 = none).
type switchPorts struct{ gateway, tunnel int }

// ensureSwitchConfig makes OVSDB hold what the node needs: the integration bridge (with
// fail_mode, protocols and table names), the gateway internal port and, with an overlay,
// the flow-based tunnel port (ovsdb.EnsureTunnelPort). It returns their ofports. It runs
// at start and again after every OVSDB reconnection.
func (n *Node) ensureSwitchConfig(ctx context.Context) (switchPorts, error) {
	var ports switchPorts
	if err := n.db.EnsureBridge(ctx, ovsdb.BridgeSpec{
		Name:         n.opts.Bridge,
		DatapathType: n.opts.DatapathType,
		FailMode:     "secure",
		Protocols:    []string{"OpenFlow13"},
		TableNames:   flows.TableNames(),
	}); err != nil {
		return ports, fmt.Errorf("node: ensure bridge %s: %w", n.opts.Bridge, err)
	}
	var err error
	ports.gateway, err = n.db.EnsureInternalPort(ctx, n.opts.Bridge, n.opts.Gateway, nil)
	if err != nil {
		return ports, fmt.Errorf("node: ensure gateway port %s on %s: %w", n.opts.Gateway, n.opts.Bridge, err)
	}
	if ov := n.opts.Overlay; ov != nil {
		ports.tunnel, err = n.db.EnsureTunnelPort(ctx, ovsdb.TunnelSpec{
			Bridge: n.opts.Bridge, Name: ov.TunnelName, Type: ov.TunnelType, DstPort: ov.TunnelDstPort,
		})
		if err != nil {
			return ports, fmt.Errorf("overlay: tunnel port %s (%s) on %s: %w", ov.TunnelName, ov.TunnelType, n.opts.Bridge, err)
		}
	}
	return ports, nil
}

// GenerationFile is the file in NodeOptions.DataDir that holds the generation (1..65535,
// decimal) of the daemon run that last started on this node: the record of the
// generation that a lost OVS database cannot take (the bridge's
// external_ids:ofsdn-generation, GenerationKey, is written too, for operators and
// tools, but is only a second source).
const GenerationFile = "generation"

// nextGeneration chooses this run's generation and records it before any flow carries
// it: one more than the highest of the previous run's records (GenerationFile, the
// bridge's external_ids, the generations of the flows on the switch), wrapping past
// 65535 to 1, and never one that a flow on the switch carries (switchGenerations), so a
// run can never share a generation with flows it did not install, even when both
// records are lost (an empty OVS database and a wiped data directory). The file is written atomically and fsync'd (with its
// directory) first, then the bridge's external_ids. Errors: the switch cannot be asked
// for its flows before ctx ends; the file or the bridge cannot be written; every
// generation is on the switch.
func (n *Node) nextGeneration(ctx context.Context) (uint16, error) {
	path := filepath.Join(n.opts.DataDir, GenerationFile)
	prev, err := readGeneration(path)
	if err != nil {
		n.log.Warn("generation file unreadable; choosing the generation from the bridge and the switch's flows", "file", path, "err", err)
	}
	ids, _ := n.db.BridgeExternalIDs(n.opts.Bridge)
	if g, err := strconv.ParseUint(ids[GenerationKey], 10, 16); err == nil {
		prev = max(prev, uint16(g))
	}
	onSwitch, err := n.switchGenerations(ctx)
	if err != nil {
		return 0, err
	}
	for g := range onSwitch {
		prev = max(prev, g) // the switch's flows are a record too, when both others are gone
	}
	gen, err := pickGeneration(prev, onSwitch)
	if err != nil {
		return 0, fmt.Errorf("node: bridge %s: %w", n.opts.Bridge, err)
	}
	if err := writeGeneration(path, gen); err != nil {
		return 0, fmt.Errorf("node: persist generation %d in %s: %w", gen, path, err)
	}
	if err := n.db.SetBridgeExternalID(ctx, n.opts.Bridge, GenerationKey, strconv.Itoa(int(gen))); err != nil {
		return 0, fmt.Errorf("node: persist generation %d in bridge %s external_ids:%s: %w", gen, n.opts.Bridge, GenerationKey, err)
	}
	if len(onSwitch) > 0 || prev == 0 {
		n.log.Info("generation chosen", "generation", gen, "previous", prev, "on_switch", sortedGenerations(onSwitch))
	}
	return gen, nil
}

// pickGeneration returns the first generation after prev (1..65535, wrapping past 65535
// to 1) that is not in taken. The error says every generation is taken.
func pickGeneration(prev uint16, taken map[uint16]bool) (uint16, error) {
	g := prev
	for range 1 << 16 {
		g++
		if g == 0 {
			g = 1
		}
		if !taken[g] {
			return g, nil
		}
	}
	return 0, errors.New("every generation 1..65535 is carried by a flow on the switch: delete the bridge's flows by hand (ovs-ofctl del-flows)")
}

// switchGenerations asks the switch, over a short-lived OpenFlow connection of its own,
// for every flow and returns the generations their cookies carry (0 excluded: not ours).
// Dialing is retried every 100 ms until ctx ends (the bridge was just ensured, its
// management socket may take a moment).
func (n *Node) switchGenerations(ctx context.Context) (map[uint16]bool, error) {
	mgmt := filepath.Join(n.opts.OVSRunDir, n.opts.Bridge+".mgmt")
	for {
		c, err := openflow.Dial(ctx, mgmt, openflow.Options{EchoInterval: -1, Logger: n.log})
		if err == nil {
			gens, err := staleGenerations(ctx, c, 0)
			c.Close()
			if err != nil {
				return nil, fmt.Errorf("node: generations of the flows on bridge %s: %w", n.opts.Bridge, err)
			}
			out := make(map[uint16]bool, len(gens))
			for _, g := range gens {
				out[g] = true
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node: generations of the flows on bridge %s: %w (last: %v)", n.opts.Bridge, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func sortedGenerations(m map[uint16]bool) []uint16 {
	out := make([]uint16, 0, len(m))
	for g := range m {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// readGeneration reads GenerationFile; a missing file is generation 0 (none) without
// error.
func readGeneration(path string) (uint16, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	g, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not a generation 1..65535: %w", path, b, err)
	}
	return uint16(g), nil
}

// writeGeneration replaces GenerationFile atomically and durably (writeFileAtomic).
func writeGeneration(path string, gen uint16) error {
	return writeFileAtomic(path, []byte(strconv.Itoa(int(gen))+"\n"))
}

// writeFileAtomic replaces the file at path with data atomically and durably: a temp
// file in the same directory (created, mode 0600), fsync, rename over path, fsync of the
// directory, so after a crash path holds either the old or the new content. Temp files
// a crash left are removed. The data directory's records (GenerationFile, PeerIDsFile)
// are written with it.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if old, _ := filepath.Glob(path + ".tmp-*"); len(old) > 0 {
		for _, f := range old {
			_ = os.Remove(f)
		}
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs directory dir, so that names created, renamed or removed in it survive a
// crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// onConnect prepares a new OpenFlow connection before anything else may use it (see
// Switch): one bundle makes the tables hold exactly the desired state, then
// flow-restore-wait is cleared. On the first connection earlier generations are deleted
// by cookie after the adds; on a reconnect every flow is deleted before them.
func (n *Node) onConnect(ctx context.Context, c *openflow.Conn, first bool) error {
	var pre, post []openflow.FlowModOp
	if first {
		gen := n.Generation()
		stale, err := staleGenerations(ctx, c, gen)
		if err != nil {
			return err
		}
		for _, g := range stale {
			cookie, mask := flows.GenerationCookie(g)
			post = append(post, openflow.FlowModOp{Mod: flows.DeleteByCookie(cookie, mask),
				Name: fmt.Sprintf("delete flows of earlier generation %d (cookie=%#x/%#x)", g, cookie, mask)})
		}
		if len(stale) > 0 {
			n.log.Info("replacing flows of earlier daemon runs", "generation", gen, "earlier", stale)
		}
	} else {
		pre = []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow before the replay"}}
		// On the userspace datapath a restarted ovs-vswitchd re-opens the gateway's tap;
		// make sure it is up with its address (idempotent).
		if _, err := n.configureGateway(ctx); err != nil {
			n.log.Warn("gateway not reconfigured after reconnect", "gateway", n.opts.Gateway, "err", err)
		}
	}
	n.denyLog.beforeReplay(ctx, c) // the deny log's meter is replayed with its owner
	start := time.Now()
	if err := n.store.Sync(ctx, c, pre, post); err != nil {
		return err
	}
	n.denyLog.afterReplay(ctx, c)
	n.log.Info("flow tables synchronised", "first", first, "flows", n.store.Len(), "duration", time.Since(start).Round(time.Microsecond))
	return n.clearFlowRestoreWait(ctx)
}

// clearFlowRestoreWait removes other_config:flow-restore-wait once the tables are whole.
func (n *Node) clearFlowRestoreWait(ctx context.Context) error {
	if v, ok := n.db.OtherConfig()[FlowRestoreWaitKey]; !ok || v != "true" {
		return nil
	}
	if err := n.db.RemoveOtherConfig(ctx, FlowRestoreWaitKey); err != nil {
		return fmt.Errorf("remove other_config:%s after restoring flows: %w", FlowRestoreWaitKey, err)
	}
	n.log.Info("flows restored: removed other_config:flow-restore-wait, ovs-vswitchd forwards with them now")
	return nil
}

// staleGenerations dumps every flow (OFPMP_FLOW, OpenFlow 1.3.5 §7.3.5.2) and returns the
// generations other than current that their cookies carry, sorted. Generation 0 is never
// one of ours (generations are 1..65535): flows with it, such as an operator's flow added
// with the default cookie 0, are not the daemon's to delete and are left alone.
func staleGenerations(ctx context.Context, c *openflow.Conn, current uint16) ([]uint16, error) {
	stats, err := c.DumpFlows(ctx, openflow.TableAll, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("list flows of earlier generations: %w", err)
	}
	seen := map[uint16]bool{}
	var out []uint16
	for _, s := range stats {
		if g := flows.Cookie(s.Cookie).Generation(); g != 0 && g != current && !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// watchOVSDB re-ensures the bridge, the gateway and tunnel ports and the gateway's address
// after each OVSDB reconnection (ovsdb-server restarted, perhaps with a database that lost
// them), retrying with backoff until it succeeds or the node closes; if an ofport or the
// gateway's MAC changed it rebuilds the flows that use them.
func (n *Node) watchOVSDB() {
	defer n.wg.Done()
	ch := n.db.Reconnected()
	for {
		select {
		case <-n.stop:
			return
		case <-ch:
		}
		for attempt := 1; ; attempt++ {
			// A newer reconnection (the database replaced again meanwhile) ends this
			// attempt at once: it may be waiting for ovs-vswitchd to apply a change to
			// a database that no longer exists (seen: two losses 0.5 s apart cost 30 s).
			ctx, cancel := context.WithTimeout(n.runCtx, 30*time.Second)
			again, watched := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(watched)
				select {
				case <-ch:
					close(again)
					cancel()
				case <-ctx.Done():
				}
			}()
			err := n.reensure(ctx)
			cancel()
			<-watched // the watcher has either passed the signal on (again) or left it in ch
			newer := false
			select {
			case <-again:
				newer = true
			default:
			}
			if newer {
				n.log.Info("OVSDB reconnected again while re-ensuring the bridge; starting over", "attempt", attempt)
				attempt = 0
				continue
			}
			if err == nil {
				break
			}
			// ovs-vswitchd reconnects to a restarted ovsdb-server on its own schedule: the
			// first attempts may find the bridge not created yet. Warned once, at the
			// third attempt.
			lvl := slog.LevelDebug
			if attempt == 3 {
				lvl = slog.LevelWarn
			}
			n.log.Log(n.runCtx, lvl, "re-ensuring bridge after OVSDB reconnection failed, retrying", "attempt", attempt, "err", err)
			select {
			case <-n.stop:
				return
			case <-time.After(time.Duration(min(attempt, 10)) * 500 * time.Millisecond):
			}
		}
	}
}

// reensure is one run of watchOVSDB's work: ensureSwitchConfig, the gateway's address,
// and a rebuild of the flows if the gateway's or tunnel's ofport or the gateway's MAC
// changed.
func (n *Node) reensure(ctx context.Context) error {
	ports, err := n.ensureSwitchConfig(ctx)
	if err != nil {
		return err
	}
	gwMAC, err := n.configureGateway(ctx)
	if err != nil {
		return err
	}
	cfg := n.config()
	if n.rebuildPending || uint32(ports.gateway) != cfg.GatewayOFPort || uint32(ports.tunnel) != cfg.TunnelOFPort ||
		!bytes.Equal(gwMAC, cfg.GatewayMAC) {
		n.log.Warn("gateway or tunnel port changed after the OVSDB reconnection; rebuilding the flows that use them",
			"gateway", n.opts.Gateway, "gateway_ofport_was", cfg.GatewayOFPort, "gateway_ofport", ports.gateway,
			"gateway_mac_was", cfg.GatewayMAC.String(), "gateway_mac", gwMAC.String(),
			"tunnel_ofport_was", cfg.TunnelOFPort, "tunnel_ofport", ports.tunnel)
		n.rebuildPending = true // until the switch holds the rebuilt flows
		if err := n.rebuild(ctx, ports, gwMAC); err != nil {
			return err
		}
		n.rebuildPending = false
	}
	if gen := strconv.Itoa(int(cfg.Generation)); cfg.Generation != 0 {
		if ids, _ := n.db.BridgeExternalIDs(n.opts.Bridge); ids[GenerationKey] != gen {
			// A new database: the bridge's copy of the generation is gone (the data
			// directory's GenerationFile is the record that counts).
			if err := n.db.SetBridgeExternalID(ctx, n.opts.Bridge, GenerationKey, gen); err != nil {
				return fmt.Errorf("node: write generation %s to bridge %s external_ids:%s: %w", gen, n.opts.Bridge, GenerationKey, err)
			}
		}
	}
	recreated, err := n.reattachPods(ctx)
	if err != nil {
		return err
	}
	n.log.Info("bridge, gateway and tunnel re-ensured after OVSDB reconnection", "bridge", n.opts.Bridge, "pod_ports_recreated", recreated)
	return nil
}

// reattachPods re-creates the OVS port of every attachment the node holds whose port
// OVSDB no longer has (an ovsdb-server that came back with an empty or another database
// lost it; ovs-vswitchd then removed it from the datapath), with its identity in
// external_ids and its ofport (ofport_request), so the pod's flows, which the OpenFlow
// replay keeps on the switch, forward to it again. A pod whose host veth is gone is left
// to DEL and GC (reconcile). It returns how many ports it re-created and the errors of
// those it could not (watchOVSDB retries).
func (n *Node) reattachPods(ctx context.Context) (int, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
		errs []error
	)
	for _, a := range n.Pods() {
		if p, ok := n.ports.GetPort(a.HostVeth); ok {
			if pa, ours := attachmentFromPort(p); ours && pa.ContainerID == a.ContainerID && pa.IfName == a.IfName && p.OFPort == int(a.OFPort) {
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := n.reattachPod(ctx, a.key())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				done++
			}
		}()
	}
	wg.Wait()
	return done, errors.Join(errs...)
}

// reattachPod is reattachPods for one attachment, under its container's lock (the key
// lockPod takes), so that it never races a DEL or an ADD of the same container.
func (n *Node) reattachPod(ctx context.Context, key string) (bool, error) {
	n.mu.Lock()
	a := n.pods[key]
	n.mu.Unlock()
	if a == nil {
		return false, nil
	}
	unlock, err := n.lockCtx(ctx, "container:"+a.ContainerID)
	if err != nil {
		return false, fmt.Errorf("re-create the port of container %s: an operation on it is still running: %w", shortID(a.ContainerID), err)
	}
	defer unlock()
	n.mu.Lock()
	cur := n.pods[key]
	n.mu.Unlock()
	if cur != a {
		return false, nil // DEL'd, or replaced, meanwhile
	}
	if p, ok := n.ports.GetPort(a.HostVeth); ok {
		if pa, ours := attachmentFromPort(p); ours && pa.ContainerID == a.ContainerID && p.OFPort == int(a.OFPort) {
			return false, nil
		}
	}
	if !n.netns.HostVethExists(a.HostVeth) {
		n.log.Warn("pod's OVS port is gone and so is its host veth: not re-created; DEL or CNI GC removes the attachment",
			"port", a.HostVeth, "container_id", a.ContainerID, "pod", a.PodNamespace+"/"+a.PodName)
		return false, nil
	}
	ofport, err := n.addPodPort(ctx, a)
	if err != nil {
		return false, fmt.Errorf("re-create port %s of pod %s/%s (container %s) on bridge %s: %w", a.HostVeth, a.PodNamespace, a.PodName, shortID(a.ContainerID), n.opts.Bridge, err)
	}
	if ofport != int(a.OFPort) {
		// Its number was taken meanwhile: the flows follow the port.
		b := *a
		b.OFPort = uint32(ofport)
		if err := n.installPodFlows(ctx, &b); err != nil {
			return false, fmt.Errorf("pod %s/%s (container %s): flows for its re-created port %s on ofport %d: %w", a.PodNamespace, a.PodName, shortID(a.ContainerID), a.HostVeth, ofport, err)
		}
		n.mu.Lock()
		n.pods[key] = &b
		n.mu.Unlock()
		n.recordLeases([]*Attachment{&b})
	}
	n.log.Info("pod's OVS port re-created after the OVS database lost it", "port", a.HostVeth, "ofport", ofport,
		"ofport_was", a.OFPort, "pod", a.PodNamespace+"/"+a.PodName, "container_id", a.ContainerID, "network", a.Network)
	return true, nil
}

// addPodPort adds a's port to the bridge with its external_ids, asking for a.OFPort
// (held for it first) or, when that number is not free (another interface holds it) or
// unknown, for a new one (ReserveOFPort), and pins the ofport_request to the ofport it
// got if that differs (pinOFPort). It returns the port's ofport.
func (n *Node) addPodPort(ctx context.Context, a *Attachment) (int, error) {
	want := int(a.OFPort)
	release := func() {}
	var err error
	if want > 0 {
		release, err = n.ports.HoldOFPort(a.HostVeth, want)
	}
	if want == 0 || err != nil {
		if err != nil {
			n.log.Warn("pod's ofport is not free; its port gets another and its flows follow", "port", a.HostVeth, "ofport", want, "err", err)
		}
		if want, release, err = n.ports.ReserveOFPort(a.HostVeth); err != nil {
			return 0, err
		}
	}
	defer release()
	got, err := n.ports.AddPortWithOFPort(ctx, n.opts.Bridge, a.HostVeth, want, a.externalIDs())
	if err != nil {
		return 0, err
	}
	if got != want {
		return n.pinOFPort(ctx, a, got)
	}
	return got, nil
}

// recordLeases writes the attachment record (netns, host veth, ofport) of each of as into
// its lease where it differs (ipam.Store.Record, one write), so that a later start on an
// empty OVS database re-creates the ports as they are. A failure is logged: the leases
// keep their older record, and the next start tries again.
func (n *Node) recordLeases(as []*Attachment) {
	var ups []ipam.Lease
	for _, a := range as {
		l, ok := n.leases.Get(a.ContainerID, a.IfName)
		if !ok || !sameAddrs(l.IPs, a.IPs) {
			continue
		}
		if l.Netns != a.Netns || l.HostVeth != a.HostVeth || l.OFPort != int(a.OFPort) {
			l.Netns, l.HostVeth, l.OFPort = a.Netns, a.HostVeth, int(a.OFPort)
			ups = append(ups, l)
		}
	}
	if len(ups) == 0 {
		return
	}
	if err := n.leases.Record(ups); err != nil {
		n.log.Warn("IP leases not updated with their attachments' netns, host veth and ofport; the next start tries again", "leases", len(ups), "err", err)
	}
}

// rebuild takes new gateway/tunnel ofports and gateway MAC into the node's config and
// replaces the pipeline's and every peer's flows with ones built from it, resynchronising
// the switch in one bundle (switchstate.Store.Rebuild). Pods' flows do not name these ports.
// A peer added concurrently re-checks the config version after its own change
// (Overlay.AddPeer), so none keeps flows of the old config. Errors: an invalid new config
// (e.g. the new tunnel ofport equals the gateway's) or the bundle's.
func (n *Node) rebuild(ctx context.Context, ports switchPorts, gwMAC net.HardwareAddr) error {
	n.cfgMu.Lock()
	cfg := n.cfg
	cfg.GatewayOFPort, cfg.GatewayMAC = uint32(ports.gateway), gwMAC
	if cfg.TunnelOFPort != 0 {
		cfg.TunnelOFPort = uint32(ports.tunnel)
	}
	if err := cfg.Validate(); err != nil {
		n.cfgMu.Unlock()
		return fmt.Errorf("node: rebuild flows for the new ports: %w", err)
	}
	n.cfg = cfg
	n.cfgVer++
	n.cfgMu.Unlock()

	owners := map[flows.Owner][]flows.Flow{flows.PipelineOwner: flows.PipelineFlows(cfg)}
	if n.overlay != nil {
		for _, p := range n.overlay.Peers() {
			owners[flows.PeerOwner(p)] = flows.PeerFlows(cfg, p)
		}
	}
	if err := n.store.Rebuild(ctx, owners); err != nil {
		return fmt.Errorf("node: rebuild flows for gateway ofport %d, tunnel ofport %d: %w", cfg.GatewayOFPort, cfg.TunnelOFPort, err)
	}
	n.log.Info("flows rebuilt for the new ports", "owners", len(owners), "gateway_ofport", cfg.GatewayOFPort, "tunnel_ofport", cfg.TunnelOFPort)
	return nil
}

// configVersion returns the flow builders' view of the node (a copy) and its version,
// which rebuild bumps.
func (n *Node) configVersion() (flows.NodeConfig, uint64) {
	n.cfgMu.RLock()
	defer n.cfgMu.RUnlock()
	return n.cfg, n.cfgVer
}

// config returns the flow builders' view of the node (a copy).
func (n *Node) config() flows.NodeConfig {
	cfg, _ := n.configVersion()
	return cfg
}

// Close stops the background loops and closes the OpenFlow connection. Flows stay on the
// switch, so pods keep forwarding while the daemon is down.
func (n *Node) Close() error {
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	n.cancelRun()
	if n.policy != nil {
		n.policy.close()
	}
	err := n.sw.Close()
	n.wg.Wait()
	if n.health != nil {
		n.health.Close()
	}
	if n.services != nil {
		n.services.close()
	}
	if n.denyLog != nil {
		n.denyLog.close()
	}
	return err
}

// Health returns the node's probe of Open vSwitch (StartHealthProbe): whether
// ovs-vswitchd and ovsdb-server answer echoes, not only whether their sockets are
// connected.
func (n *Node) Health() *HealthProbe { return n.health }

// Switch returns the node's reconnecting OpenFlow connection.
func (n *Node) Switch() *openflow.Switch { return n.sw }

// Generation returns this daemon run's generation (1..65535), the cookie bits 55..40 of
// every flow it installs; it is also in DataDir/generation (GenerationFile) and the
// bridge's external_ids:ofsdn-generation.
func (n *Node) Generation() uint16 { return n.config().Generation }

// Store returns the node's desired switch state.
func (n *Node) Store() *switchstate.Store { return n.store.Store }

// IPAM returns the node's IP address store.
func (n *Node) IPAM() *ipam.Store { return n.ipam }

// Config returns the flow builders' view of the node (gateway ofport, MAC, IP, pod subnet,
// and with an overlay the tunnel ofport, node IP, cluster and service CIDRs), a copy.
func (n *Node) Config() flows.NodeConfig { return n.config() }

// Overlay returns the node's cluster membership (tunnel and peers), or nil on a single
// node (NodeOptions.Overlay unset).
func (n *Node) Overlay() *Overlay { return n.overlay }

// Gateway returns the gateway's address with the pod subnet's prefix length.
func (n *Node) Gateway() *net.IPNet { return n.gwAddr }

// restorePods rebuilds the local pod table and loads the pods' desired flows into the
// store (installed by the first sync), from two records of each attachment:
//
//   - the bridge's ports that carry our external_ids. A port whose IP lease the store
//     lost (a lease file deleted or restored from an old backup) gets it back from its
//     external_ids (restoreLease): otherwise the first sync would delete a running pod's
//     flows with the earlier generation and its address would be handed out again. Leases
//     without the attachment's record (written by an older ofsdn) or with another ofport
//     get the port's (recordLeases).
//   - the IP leases that have no port (the OVS database was lost: an empty conf.db)
//     but whose host veth exists, which proves the pod is live (reconcile removed those
//     without a veth): the port is re-created from the lease (restoreFromLease), with
//     the pod's identity and the ofport the lease records, so the pod keeps its address,
//     its ofport and its network.
func (n *Node) restorePods(ctx context.Context) {
	var fromPorts []*Attachment
	// A port whose lease is lost gets it back from its external_ids in two rounds: first
	// every port with its recorded addresses (both families), then, with the IPv4 address
	// alone and the IPv6 pool's next free address, the ports that record no IPv6 address
	// (written before ExtIDIPv6) or whose recorded one was taken (another port recorded
	// it too). So a pool address is never one that another pod's port records (found by
	// a breaker test: two pods whose ports recorded ::2 and ::4 lost their leases, IPv4
	// too, to ports listed before them that had taken those addresses from the pool).
	type portAttachment struct {
		p ovsdb.PortInfo
		a *Attachment
	}
	var ready, later []portAttachment
	dualStack := n.opts.PodSubnet != nil && n.opts.PodSubnetIPv6 != nil
	for _, p := range n.ports.ListPorts(n.opts.Bridge) {
		a, ok := attachmentFromPort(p)
		if !ok {
			continue
		}
		if _, ok := n.leases.Get(a.ContainerID, a.IfName); !ok {
			if dualStack && a.IPv6() == nil {
				later = append(later, portAttachment{p, a})
				continue
			}
			if err := n.restoreLease(ctx, a, true); err != nil {
				if dualStack {
					later = append(later, portAttachment{p, a})
					continue
				}
				n.log.Error("pod port has no IP lease and it cannot be restored; its flows are not installed: DEL the pod",
					"port", p.Name, "container_id", a.ContainerID, "ip", a.IPv4(), "err", err)
				continue
			}
			n.log.Warn("IP lease of a pod port was missing from the lease store; restored from the port's external_ids",
				"port", p.Name, "container_id", a.ContainerID, "ifname", a.IfName, "ip", a.IPv4(), "network", a.Network)
		}
		ready = append(ready, portAttachment{p, a})
	}
	for _, pa := range later {
		p, a := pa.p, pa.a
		if err := n.restoreLease(ctx, a, false); err != nil {
			n.log.Error("pod port has no IP lease and it cannot be restored; its flows are not installed: DEL the pod",
				"port", p.Name, "container_id", a.ContainerID, "ip", a.IPv4(), "err", err)
			continue
		}
		n.log.Warn("IP lease of a pod port was missing from the lease store; restored from the port's external_ids with the IPv6 pool's next address (the port records no IPv6 address, or one another port holds)",
			"port", p.Name, "container_id", a.ContainerID, "ifname", a.IfName, "ip", a.IPv4(), "recorded_ipv6", fmt.Sprint(a.IPv6()), "network", a.Network)
		ready = append(ready, pa)
	}
	for _, pa := range ready {
		p, a := pa.p, pa.a
		if l, ok := n.leases.Get(a.ContainerID, a.IfName); ok && slices.ContainsFunc(l.IPs, a.firstIP().IP.Equal) {
			// The lease is the record of the pod's addresses (a port of a build before
			// ExtIDIPv6 records the IPv4 one only).
			a.IPs = n.leaseNets(l.IPs)
		}
		if a.OFPort == 0 {
			n.log.Warn("port has no ofport yet; leaving it for garbage collection", "port", p.Name, "container_id", a.ContainerID)
			continue
		}
		n.fillOwnerID(a)
		n.loadRestored(a)
		fromPorts = append(fromPorts, a)
	}
	n.recordLeases(fromPorts)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		more []*Attachment
	)
	for _, l := range n.leases.List() {
		k := attachmentKey(l.ContainerID, l.IfName)
		n.mu.Lock()
		_, known := n.pods[k]
		n.mu.Unlock()
		if known {
			continue
		}
		hostVeth := l.HostVeth
		if hostVeth == "" {
			hostVeth = podnet.HostVethName(l.ContainerID, l.IfName)
		}
		if _, hasPort := n.ports.GetPort(hostVeth); hasPort || !n.netns.HostVethExists(hostVeth) {
			continue // a port (not restorable above, already logged), or nothing live
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := n.restoreFromLease(ctx, l, hostVeth)
			if err != nil {
				n.log.Error("pod has an IP lease and a host veth but its OVS port (the OVS database lost it) cannot be re-created; its lease and veth are kept: DEL the pod, or restart ofsdn-node to try again",
					"port", hostVeth, "container_id", l.ContainerID, "ifname", l.IfName, "ips", fmt.Sprint(l.IPs), "pod", l.Owner, "err", err)
				return
			}
			mu.Lock()
			more = append(more, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, a := range more {
		n.loadRestored(a)
		n.log.Warn("pod's OVS port was missing (the OVS database lost it); re-created from its IP lease",
			"port", a.HostVeth, "ofport", a.OFPort, "pod", a.PodNamespace+"/"+a.PodName, "container_id", a.ContainerID,
			"ifname", a.IfName, "ip", a.IPv4().String(), "network", a.Network)
	}
	n.recordLeases(more)
}

// loadRestored puts a restored attachment into the pod table with its desired flows,
// and isolates its host end from the host's IP stack: a pod wired by an ofsdn that left
// the host's IP stack on it gets the same isolation as a new one
// (podnet.IsolateHostEnd; idempotent).
func (n *Node) loadRestored(a *Attachment) {
	cfg := n.config()
	a.Gateway, a.Gateway6, a.MTU = cfg.GatewayIP, cfg.GatewayIPv6, n.opts.MTU
	n.store.Load(a.owner(), flows.PodFlows(cfg, a.flowPod()))
	n.mu.Lock()
	n.pods[a.key()] = a
	n.mu.Unlock()
	if n.netns.HostVethExists(a.HostVeth) {
		if err := n.netns.IsolateHostEnd(a.HostVeth); err != nil {
			n.log.Warn("restored pod: host veth not isolated from the host's IP stack; DEL and ADD the pod to fix", "port", a.HostVeth, "container_id", a.ContainerID, "err", err)
		}
	}
}

// restoreFromLease rebuilds the attachment of lease l, whose host veth hostVeth exists
// but whose OVS port does not, and re-creates the port (addPodPort) with the identity
// the lease holds: the pod's namespace/name (Owner), network, netns, address, the MAC
// ofsdn derives from it (podnet.MACFromIP, what every ADD gives the pod) and the ofport
// the lease records (a new one when it records none). When the lease names the netns,
// the pod interface is checked there first (address, route, MAC); a mismatch is logged,
// the port is re-created all the same (the veth is live).
func (n *Node) restoreFromLease(ctx context.Context, l ipam.Lease, hostVeth string) (*Attachment, error) {
	ns, name, _ := strings.Cut(l.Owner, "/")
	a := &Attachment{
		ContainerID: l.ContainerID, IfName: l.IfName, Netns: l.Netns,
		PodNamespace: ns, PodName: name, Network: l.Network, HostVeth: hostVeth,
		IPs:     n.leaseNets(l.IPs),
		OFPort:  uint32(l.OFPort),
		OwnerID: l.OwnerID,
	}
	if a.IPv4() != nil {
		a.Gateway = n.config().GatewayIP
	}
	if a.IPv6() != nil {
		a.Gateway6 = n.config().GatewayIPv6
	}
	if v4 := a.IPv4(); v4 != nil {
		a.MAC = podnet.MACFromIP(v4.IP) // what every ADD gives the pod: derived from its IPv4 address
	} else if v6 := a.IPv6(); v6 != nil {
		a.MAC = podnet.MACFromIPv6(v6.IP) // an IPv6-only pod's: derived from its IPv6 address
	}
	if a.Netns != "" && len(a.expects()) > 0 {
		if err := n.netns.Check(a.Netns, a.IfName, a.expects(), a.MAC); err != nil {
			n.log.Warn("restoring a pod from its lease: its interface does not look as ofsdn made it; DEL and ADD the pod if it has no network",
				"port", hostVeth, "container_id", a.ContainerID, "netns", a.Netns, "err", err)
		}
	}
	unlock := n.locks.Lock("container:" + a.ContainerID)
	defer unlock()
	ofport, err := n.addPodPort(ctx, a)
	if err != nil {
		return nil, err
	}
	a.OFPort = uint32(ofport)
	return a, nil
}

// restoreLease records a's addresses as its IP lease (ipam.Store.Restore), with its pod
// and network, when its IPv4 address lies in this node's pod subnet with the same prefix.
// With withIPv6, its IPv6 address (a dual-stack port records it, ExtIDIPv6) is kept when
// it lies in the node's IPv6 pod subnet; otherwise (or without one: a port of a build
// before ExtIDIPv6) the store gives the IPv6 pool's next address. Errors: the IPv4
// address is outside the pod subnet, or the store's (an address another lease holds).
func (n *Node) restoreLease(ctx context.Context, a *Attachment, withIPv6 bool) error {
	var ips []*net.IPNet
	if n.opts.PodSubnet == nil { // an IPv6-only node: the recorded IPv6 address is the lease
		v6, sn := a.IPv6(), n.opts.PodSubnetIPv6
		if v6 == nil {
			return fmt.Errorf("the port records no IPv6 address for this IPv6-only node (pod subnet %s)", sn)
		}
		if ones, _ := v6.Mask.Size(); ones != maskOnes(sn) || !sn.Contains(v6.IP) {
			return fmt.Errorf("address %s is not in this node's IPv6 pod subnet %s", v6, sn)
		}
		ips = []*net.IPNet{v6}
	} else {
		if a.IPv4() == nil {
			return fmt.Errorf("the port records no IPv4 address for this node's pod subnet %s", n.opts.PodSubnet)
		}
		if ones, _ := a.IPv4().Mask.Size(); ones != maskOnes(n.opts.PodSubnet) || !n.opts.PodSubnet.Contains(a.IPv4().IP) {
			return fmt.Errorf("address %s is not in this node's pod subnet %s", a.IPv4(), n.opts.PodSubnet)
		}
		ips = []*net.IPNet{a.IPv4()}
		if v6, sn := a.IPv6(), n.opts.PodSubnetIPv6; withIPv6 && v6 != nil && sn != nil {
			if ones, _ := v6.Mask.Size(); ones == maskOnes(sn) && sn.Contains(v6.IP) {
				ips = append(ips, v6)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return n.ipam.Restore(ipam.Lease{IPs: addrsOf(ips), ContainerID: a.ContainerID, IfName: a.IfName,
		Owner: a.PodNamespace + "/" + a.PodName, Network: a.Network, OwnerID: a.OwnerID})
}

// podSubnets returns the node's pod subnets, one per IP family, in the order the node
// lists them (the order of every pod's addresses and of the CNI result): the IPv4 pod
// subnet, then on a dual-stack node the IPv6 one (IPv6 first with IPv6First); the IPv6
// one alone on an IPv6-only node.
func (n *Node) podSubnets() []*net.IPNet {
	switch {
	case n.opts.PodSubnet == nil:
		return []*net.IPNet{n.opts.PodSubnetIPv6}
	case n.opts.PodSubnetIPv6 == nil:
		return []*net.IPNet{n.opts.PodSubnet}
	case n.opts.IPv6First:
		return []*net.IPNet{n.opts.PodSubnetIPv6, n.opts.PodSubnet}
	}
	return []*net.IPNet{n.opts.PodSubnet, n.opts.PodSubnetIPv6}
}

// leaseNets returns a lease's addresses, each with the prefix length of the pod subnet
// it lies in (an address in none keeps a host prefix), in the lease's order.
func (n *Node) leaseNets(ips []net.IP) []*net.IPNet {
	out := make([]*net.IPNet, 0, len(ips))
	for _, ip := range ips {
		ipn := &net.IPNet{IP: ip, Mask: net.CIDRMask(8*len(ip), 8*len(ip))}
		if ip4 := ip.To4(); ip4 != nil {
			ipn = &net.IPNet{IP: ip4, Mask: net.CIDRMask(32, 32)}
		}
		for _, sn := range n.podSubnets() {
			if sn.Contains(ip) {
				ipn.Mask = sn.Mask
				break
			}
		}
		out = append(out, ipn)
	}
	return out
}

// addrsOf returns the addresses of nets, in order.
func addrsOf(nets []*net.IPNet) []net.IP {
	out := make([]net.IP, 0, len(nets))
	for _, ipn := range nets {
		out = append(out, ipn.IP)
	}
	return out
}

// sameAddrs reports whether a lease's addresses are an attachment's, in order.
func sameAddrs(ips []net.IP, nets []*net.IPNet) bool {
	if len(ips) != len(nets) {
		return false
	}
	for i := range ips {
		if !ips[i].Equal(nets[i].IP) {
			return false
		}
	}
	return true
}

func maskOnes(n *net.IPNet) int {
	ones, _ := n.Mask.Size()
	return ones
}

// nthIP returns the n-th address of subnet (0 is the network address).
func nthIP(subnet *net.IPNet, n uint32) net.IP {
	ip := subnet.IP.To4()
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += n
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
}

// nthIP6 returns the n-th address of an IPv6 subnet (0 is the subnet-router anycast
// address), 16 bytes.
func nthIP6(subnet *net.IPNet, n uint32) net.IP {
	ip := append(net.IP(nil), subnet.IP.To16().Mask(subnet.Mask)...)
	carry := uint64(n)
	for i := len(ip) - 1; i >= 0 && carry > 0; i-- {
		v := uint64(ip[i]) + carry&0xff
		ip[i] = byte(v)
		carry = carry>>8 + v>>8
	}
	return ip
}

// keyedMutex serialises operations per key (a container ID) without a global lock held
// across waits on OVS.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key and returns its unlock function.
func (k *keyedMutex) Lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
