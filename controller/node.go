package controller

// The node: bridge, gateway and base pipeline.
//
// Start brings the node's switch into the shape the pipeline expects, in this order: the
// integration bridge through OVSDB (fail_mode=secure so that without us nothing forwards,
// protocols=OpenFlow13, flow tables named after the pipeline stages), the gateway internal
// port and its address through netlink, our own OpenFlow connection to the bridge, the base
// pipeline, and then the flows of every pod already attached (their ports carry our
// external_ids), so a daemon restart re-creates its state from OVSDB and the IPAM store
// instead of losing it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/cni/ipam"
	"github.com/ofsdn/ofsdn/cni/podnet"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ovsdb"
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
	PodSubnet *net.IPNet
	// MTU is the pods' and the gateway's MTU in bytes (68..65535).
	MTU int
	// OVSRunDir is Open vSwitch's run directory; the bridge's OpenFlow management socket is
	// OVSRunDir/<Bridge>.mgmt.
	OVSRunDir string
	// DataDir holds the daemon's persistent state (the IPAM store).
	DataDir string
	// EchoInterval is the OpenFlow keep-alive period (seconds resolution is enough).
	EchoInterval time.Duration
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
	// Hooks lets an observer (the metrics package) time the node's work; nil fields are
	// skipped.
	Hooks Hooks
}

// Hooks are optional callbacks with which an observer times the node's work without
// controller/ depending on it. They must be cheap and safe for concurrent use.
type Hooks struct {
	// AddStep is called after each step of a pod ADD with the step's name ("ipam", "veth",
	// "ovsdb", "openflow") and its duration.
	AddStep func(step string, d time.Duration)
	// FlowOp is called after each batch sent to the switch: kind is "flow_mod" or "bundle",
	// n the number of flow mods, d the time until the barrier or commit reply, err the result.
	FlowOp func(kind string, n int, d time.Duration, err error)
}

// Node is one node's switch state: the OVSDB client, the OpenFlow connection, the desired
// flow store, the IPAM store and the local pods. Create it with StartNode.
type Node struct {
	opts   NodeOptions
	log    *slog.Logger
	db     *ovsdb.Client
	sw     *OFSwitch
	store  *FlowStore
	ipam   *ipam.Store
	cfg    flows.NodeConfig
	gwAddr *net.IPNet

	locks keyedMutex
	mu    sync.Mutex
	pods  map[string]*Attachment // attachmentKey → attachment
}

// StartNode ensures the bridge, the gateway port and its address, connects OpenFlow,
// installs the base pipeline and re-installs the flows of pods already attached.
// It returns an error naming the step that failed (OVSDB, gateway, OpenFlow, pipeline).
func StartNode(ctx context.Context, db *ovsdb.Client, opts NodeOptions) (*Node, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PodSubnet == nil || opts.PodSubnet.IP.To4() == nil {
		return nil, errors.New("node: pod subnet must be an IPv4 CIDR (set podSubnet in the config)")
	}
	n := &Node{opts: opts, log: opts.Logger, db: db, pods: map[string]*Attachment{}}
	gwIP := nthIP(opts.PodSubnet, 1)
	n.gwAddr = &net.IPNet{IP: gwIP, Mask: opts.PodSubnet.Mask}

	if err := db.EnsureBridge(ctx, ovsdb.BridgeSpec{
		Name:         opts.Bridge,
		DatapathType: opts.DatapathType,
		FailMode:     "secure",
		Protocols:    []string{"OpenFlow13"},
		TableNames:   flows.TableNames(),
	}); err != nil {
		return nil, fmt.Errorf("node: ensure bridge %s: %w", opts.Bridge, err)
	}
	gwPort, err := db.EnsureInternalPort(ctx, opts.Bridge, opts.Gateway, nil)
	if err != nil {
		return nil, fmt.Errorf("node: ensure gateway port %s on %s: %w", opts.Gateway, opts.Bridge, err)
	}
	gwMAC, err := podnet.ConfigureGateway(ctx, opts.Gateway, n.gwAddr, opts.MTU)
	if err != nil {
		return nil, fmt.Errorf("node: configure gateway %s with %s: %w", opts.Gateway, n.gwAddr, err)
	}
	n.cfg = flows.NodeConfig{
		GatewayOFPort: uint32(gwPort),
		GatewayMAC:    gwMAC,
		GatewayIP:     gwIP,
		PodSubnet:     opts.PodSubnet,
		Generation:    1,
	}
	if err := n.cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}

	n.ipam, err = ipam.Open(opts.DataDir, opts.PodSubnet, gwIP)
	if err != nil {
		return nil, fmt.Errorf("node: IPAM store: %w", err)
	}

	mgmt := filepath.Join(opts.OVSRunDir, opts.Bridge+".mgmt")
	n.sw, err = DialOpenFlow(ctx, mgmt, OFOptions{EchoInterval: opts.EchoInterval, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("node: OpenFlow connection to bridge %s at %s: %w", opts.Bridge, mgmt, err)
	}
	n.store = NewFlowStore(n.sw)
	n.store.observe = opts.Hooks.FlowOp
	if err := n.store.SetOwner(ctx, ownerPipeline, flows.PipelineFlows(n.cfg)); err != nil {
		n.sw.Close()
		return nil, fmt.Errorf("node: install base pipeline: %w", err)
	}
	if err := n.restorePods(ctx); err != nil {
		n.sw.Close()
		return nil, err
	}
	n.log.Info("node ready", "bridge", opts.Bridge, "datapath_type", opts.DatapathType,
		"gateway", opts.Gateway, "gateway_ofport", gwPort, "gateway_ip", n.gwAddr.String(),
		"pod_subnet", opts.PodSubnet.String(), "pods", len(n.pods))
	return n, nil
}

// Close closes the OpenFlow connection. Flows stay on the switch, so pods keep forwarding
// while the daemon is down.
func (n *Node) Close() error { return n.sw.Close() }

// Switch returns the node's OpenFlow connection.
func (n *Node) Switch() *OFSwitch { return n.sw }

// Store returns the node's desired-state flow store.
func (n *Node) Store() *FlowStore { return n.store }

// IPAM returns the node's IP address store.
func (n *Node) IPAM() *ipam.Store { return n.ipam }

// Config returns the flow builders' view of the node (gateway ofport, MAC, IP, pod subnet).
func (n *Node) Config() flows.NodeConfig { return n.cfg }

// Gateway returns the gateway's address with the pod subnet's prefix length.
func (n *Node) Gateway() *net.IPNet { return n.gwAddr }

// restorePods rebuilds the local pod table from the bridge's ports that carry our
// external_ids and re-installs their flows.
func (n *Node) restorePods(ctx context.Context) error {
	for _, p := range n.db.ListPorts(n.opts.Bridge) {
		a, ok := attachmentFromPort(p)
		if !ok {
			continue
		}
		if _, ok := n.ipam.Get(a.ContainerID, a.IfName); !ok {
			n.log.Warn("port has no IP lease; leaving it for garbage collection", "port", p.Name, "container_id", a.ContainerID)
			continue
		}
		a.Gateway, a.MTU = n.cfg.GatewayIP, n.opts.MTU
		if err := n.store.SetOwner(ctx, a.owner(), flows.PodFlows(n.cfg, a.flowPod())); err != nil {
			return fmt.Errorf("node: restore flows of pod %s/%s (port %s): %w", a.PodNamespace, a.PodName, p.Name, err)
		}
		n.pods[a.key()] = a
	}
	return nil
}

// nthIP returns the n-th address of subnet (0 is the network address).
func nthIP(subnet *net.IPNet, n uint32) net.IP {
	ip := subnet.IP.To4()
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += n
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
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
