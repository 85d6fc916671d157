package bench

// Flow scale: program the flows of many pods and peer nodes with no veths behind them, and
// re-install them after ovs-vswitchd restarts.

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/switchstate"
)

// ScaleStats are the flow-scale timings (milliseconds) and sizes.
type ScaleStats struct {
	Pods     int `json:"pods"`
	PodFlows int `json:"pod_flows"`
	Peers    int `json:"peers"`
	// PeerFlows is the number of peer flows (flows.PeerFlows: tunnel ingress, ARP
	// responder, remote route per peer).
	PeerFlows int `json:"peer_flows"`
	// PodsPerOwnerMS: FlowStore.SetOwner once per pod, sequentially (one batch + barrier
	// each), as pod ADDs arrive at run time.
	PodsPerOwnerMS float64 `json:"pods_per_owner_ms"`
	// PodsOneBatchMS: every pod flow in one openflow.Conn.Apply (one write, one barrier).
	PodsOneBatchMS float64 `json:"pods_one_batch_ms"`
	// PodsOfctlMS: every pod flow through one `ovs-ofctl add-flows` exec (reference).
	PodsOfctlMS float64 `json:"pods_ofctl_add_flows_ms"`
	// PeersPerOwnerMS and PeersOneBatchMS: the same for the peer flows.
	PeersPerOwnerMS float64 `json:"peers_per_owner_ms"`
	PeersOneBatchMS float64 `json:"peers_one_batch_ms"`
	// StoreHeapBytes is the Go heap the FlowStore holds for all pods and peers.
	StoreHeapBytes int64 `json:"store_heap_bytes"`
	// VswitchdStartMS is how long a restarted ovs-vswitchd takes to detach (bridges up).
	VswitchdStartMS float64 `json:"vswitchd_start_ms"`
	// SyncBundleMS: FlowStore.Sync on the live connection, one atomic bundle deleting
	// every flow and adding every desired one (what a daemon start does).
	SyncBundleMS float64 `json:"sync_bundle_ms"`
	// ReplaySyncMS: after a vswitchd restart, from its start: dial + FlowStore.Sync (the
	// daemon's reconnect path).
	ReplaySyncMS float64 `json:"replay_sync_ms"`
	// ReplayOneBatchMS: after a vswitchd restart, from its start: dial + FlowStore.All()
	// as one plain Apply (not atomic; the floor).
	ReplayOneBatchMS float64 `json:"replay_one_batch_ms"`
	// FlowsOnSwitch is the flow count after each replay (checks that all arrived).
	FlowsOnSwitch []int `json:"flows_on_switch"`
}

type owned struct {
	owner flows.Owner
	fs    []flows.Flow
}

// RunScale measures flow programming at scale on a private OVS of its own. logf gets
// progress lines.
func RunScale(ctx context.Context, script string, pods, peers int, logf func(string, ...any)) (*ScaleStats, error) {
	sb, err := StartSandbox(script, "scale")
	if err != nil {
		return nil, err
	}
	defer sb.Stop()
	_, subnet, _ := net.ParseCIDR("10.200.0.0/16")
	db, err := ovsdb.Connect(ctx, sb.Endpoint(), ovsdb.Options{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := db.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: benchBridge, DatapathType: "netdev", FailMode: "secure",
		Protocols: []string{"OpenFlow13"}, TableNames: flows.TableNames()}); err != nil {
		return nil, err
	}
	gwPort, err := db.EnsureInternalPort(ctx, benchBridge, benchGateway, nil)
	if err != nil {
		return nil, err
	}
	// The tunnel port is only a number in flows (no tunnel is created; nothing is sent).
	_, cluster, _ := net.ParseCIDR("10.0.0.0/8")
	cfg := flows.NodeConfig{GatewayOFPort: uint32(gwPort), GatewayMAC: net.HardwareAddr{0x0a, 0x58, 10, 200, 0, 1},
		GatewayIP: nthIP(subnet, 1), PodSubnet: subnet, Generation: 1, ClusterCIDR: cluster,
		TunnelOFPort: 65000, NodeIP: net.IPv4(192, 168, 255, 254).To4()}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dial := func() (*openflow.Conn, error) {
		return openflow.Dial(ctx, sb.Mgmt(benchBridge), openflow.Options{Logger: quietLogger()})
	}
	sw, err := dial()
	if err != nil {
		return nil, err
	}
	defer func() { sw.Close() }()

	st := &ScaleStats{Pods: pods, Peers: peers}
	var podOwners, peerOwners []owned
	for i := 0; i < pods; i++ {
		ip := nthIP(subnet, uint32(i+2))
		p := flows.Pod{OFPort: uint32(i + 2), MAC: net.HardwareAddr{0x0a, 0x58, ip[0], ip[1], ip[2], ip[3]}, IPs: []net.IP{ip}, OwnerID: uint32(i + 1)}
		if p.OFPort == cfg.GatewayOFPort {
			p.OFPort = uint32(pods + 10)
		}
		fs := flows.PodFlows(cfg, p)
		st.PodFlows += len(fs)
		podOwners = append(podOwners, owned{flows.PodOwner(p), fs})
	}
	for i := 0; i < peers; i++ {
		p, fs, err := peerFlows(cfg, i)
		if err != nil {
			return nil, err
		}
		st.PeerFlows += len(fs)
		peerOwners = append(peerOwners, owned{flows.PeerOwner(p), fs})
	}

	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	store := switchstate.New()
	if err := store.Sync(ctx, sw, nil, nil); err != nil { // attach the store to sw
		return nil, err
	}
	if err := store.SetOwner(ctx, flows.PipelineOwner, flows.PipelineFlows(cfg)); err != nil {
		return nil, err
	}
	// One owner at a time (how pod ADDs and peer updates arrive at run time).
	t0 := time.Now()
	for _, o := range podOwners {
		if err := store.SetOwner(ctx, o.owner, o.fs); err != nil {
			return st, err
		}
	}
	st.PodsPerOwnerMS = ms(time.Since(t0))
	logf("  %d pods' flows (%d) one owner at a time: %.0f ms", pods, st.PodFlows, st.PodsPerOwnerMS)
	t0 = time.Now()
	for _, o := range peerOwners {
		if err := store.SetOwner(ctx, o.owner, o.fs); err != nil {
			return st, err
		}
	}
	st.PeersPerOwnerMS = ms(time.Since(t0))
	logf("  %d peers' flows (%d) one owner at a time: %.0f ms", peers, st.PeerFlows, st.PeersPerOwnerMS)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	st.StoreHeapBytes = int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	want := flowCount(sb)

	// The same flows in one batch each (behind the store's back: it still wants them all).
	delKind := func(kind flows.OwnerKind) error {
		return sw.Apply(ctx, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(uint64(kind)<<36, flows.CookieOwnerKindMask), Name: "delete all of kind"}})
	}
	if err := delKind(flows.OwnerPod); err != nil {
		return st, err
	}
	if err := delKind(flows.OwnerPeer); err != nil {
		return st, err
	}
	if st.PodsOneBatchMS, err = timeApply(ctx, sw, podOwners); err != nil {
		return st, err
	}
	logf("  %d pods' flows in one batch: %.0f ms", pods, st.PodsOneBatchMS)
	if st.PeersOneBatchMS, err = timeApply(ctx, sw, peerOwners); err != nil {
		return st, err
	}
	logf("  %d peers' flows in one batch: %.0f ms", peers, st.PeersOneBatchMS)

	// ovs-ofctl add-flows reference for the pod flows.
	if err := delKind(flows.OwnerPod); err != nil {
		return st, err
	}
	var text strings.Builder
	for _, o := range podOwners {
		for _, f := range o.fs {
			text.WriteString(ofctlText(f.String()) + "\n")
		}
	}
	cmd := exec.CommandContext(ctx, "ovs-ofctl", "--no-names", "-O", "OpenFlow13", "add-flows", benchBridge, "-")
	cmd.Env, cmd.Stdin = sb.Env(), strings.NewReader(text.String())
	t0 = time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return st, fmt.Errorf("ovs-ofctl add-flows: %v: %s", err, tail(string(out), 500))
	}
	st.PodsOfctlMS = ms(time.Since(t0))
	logf("  %d pods' flows through one ovs-ofctl add-flows: %.0f ms", pods, st.PodsOfctlMS)

	// The store's full sync on the live connection: what the daemon's start does.
	deleteAll := []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow"}}
	t0 = time.Now()
	if err := store.Sync(ctx, sw, deleteAll, nil); err != nil {
		return st, err
	}
	st.SyncBundleMS = ms(time.Since(t0))
	logf("  full sync (one bundle: delete all + add all %d): %.0f ms", st.PodFlows+st.PeerFlows, st.SyncBundleMS)
	if got := flowCount(sb); got != want {
		return st, fmt.Errorf("after the full sync the switch has %d flows, want %d", got, want)
	}

	// Restart vswitchd twice: re-install with the store's sync (one atomic bundle, the
	// daemon's reconnect path), then with one plain batch (no atomicity: the floor).
	for _, oneBatch := range []bool{false, true} {
		sw.Close()
		if err := sb.StopVswitchd(); err != nil {
			return st, err
		}
		t0 = time.Now()
		if err := sb.StartVswitchd(); err != nil {
			return st, err
		}
		st.VswitchdStartMS = ms(time.Since(t0))
		if sw, err = dial(); err != nil {
			return st, err
		}
		if oneBatch {
			var ops []openflow.FlowModOp
			for _, f := range store.All() {
				ops = append(ops, addOps("replay", []flows.Flow{f})...)
			}
			if err := sw.Apply(ctx, ops); err != nil {
				return st, err
			}
			st.ReplayOneBatchMS = ms(time.Since(t0))
			logf("  re-install after vswitchd restart, one batch: %.0f ms", st.ReplayOneBatchMS)
		} else {
			if err := store.Sync(ctx, sw, deleteAll, nil); err != nil {
				return st, err
			}
			st.ReplaySyncMS = ms(time.Since(t0))
			logf("  re-install after vswitchd restart, FlowStore.Sync bundle: %.0f ms", st.ReplaySyncMS)
		}
		got := flowCount(sb)
		st.FlowsOnSwitch = append(st.FlowsOnSwitch, got)
		if got != want {
			return st, fmt.Errorf("after re-install the switch has %d flows, want %d", got, want)
		}
	}
	return st, nil
}

func timeApply(ctx context.Context, sw *openflow.Conn, os []owned) (float64, error) {
	var ops []openflow.FlowModOp
	for _, o := range os {
		ops = append(ops, addOps(o.owner.String(), o.fs)...)
	}
	t0 := time.Now()
	err := sw.Apply(ctx, ops)
	return ms(time.Since(t0)), err
}

func timeApplyOK(ctx context.Context, sw *openflow.Conn, os []owned) error {
	_, err := timeApply(ctx, sw, os)
	return err
}

// peerFlows returns the flows of peer node i (flows.PeerFlows): node IPs 192.168.x.y, pod
// subnets 10.64.0.0/24 onwards, behind the tunnel port of cfg. No packet is ever sent: these
// flows only load the switch.
func peerFlows(cfg flows.NodeConfig, i int) (flows.Peer, []flows.Flow, error) {
	p := flows.Peer{Name: fmt.Sprintf("peer-%d", i), NodeIP: net.IPv4(192, 168, byte(i/250), byte(i%250+1)).To4(),
		PodSubnet: &net.IPNet{IP: net.IPv4(10, byte(64+i/256), byte(i%256), 0).To4(), Mask: net.CIDRMask(24, 32)}, OwnerID: uint32(i + 1)}
	if err := p.Validate(cfg); err != nil {
		return p, nil, err
	}
	return p, flows.PeerFlows(cfg, p), nil
}
