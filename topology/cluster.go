package main

// Joining the cluster: the topology source, the node's network settings derived from it
// (pod subnet, cluster CIDR, node IP, MTU, masquerade), the overlay, and the CNI files a
// kubelet waits for.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/masq"
	"github.com/ofsdn/ofsdn/topology"
)

// cluster is what the daemon learned from its topology before starting the node.
type cluster struct {
	src         topology.Source
	peers       map[string]topology.Peer // by name: the peers known at start
	podSubnet   *net.IPNet
	clusterCIDR *net.IPNet
	serviceCIDR *net.IPNet
	nodeIP      net.IP
	nodeIPFixed bool   // nodeIP is the config's: the topology's changes of it are ignored
	underlay    string // the interface holding nodeIP
	mtu         int
	masquerade  bool
}

// defaultMTU is the pod MTU without a topology and without mtu in the config (bytes): a
// 1500-byte underlay minus VXLAN's 50.
const defaultMTU = 1450

// prepareCluster starts the topology source (it runs until runCtx ends) and waits, bounded
// by waitCtx, for this node's settings; then it derives the pod subnet, cluster and
// service CIDRs, node IP, MTU and masquerade choice (config first, then topology, then
// detection). Without a topology it returns nil.
func prepareCluster(waitCtx, runCtx context.Context, cfg Config, log *slog.Logger) (*cluster, error) {
	var src topology.Source
	switch cfg.Topology {
	case "":
		return nil, nil
	case "file":
		f := topology.NewFile(cfg.TopologyFile)
		f.Logger = log
		src = f
	case "kubernetes":
		client, err := kubeClient(cfg.Kubeconfig)
		if err != nil {
			return nil, err
		}
		var cidr *net.IPNet
		if cfg.ClusterCIDR != "" {
			_, cidr, _ = net.ParseCIDR(cfg.ClusterCIDR)
		}
		k := topology.NewKubernetes(client, cfg.NodeName, cidr)
		k.Logger = log
		src = k
	}
	runErr := make(chan error, 1)
	go func() { runErr <- src.Run(runCtx) }()

	c := &cluster{src: src, peers: map[string]topology.Peer{}}
	var local topology.Local
	for found := false; !found; {
		select {
		case <-waitCtx.Done():
			return nil, fmt.Errorf("topology %s: this node's pod subnet not known before the start timeout (%w): for kubernetes, check that the controller manager allocates node CIDRs", cfg.Topology, waitCtx.Err())
		case err := <-runErr:
			return nil, fmt.Errorf("topology %s: %w", cfg.Topology, err)
		case e := <-src.Events():
			if e.Kind == topology.EventLocal {
				local, found = e.Local, true
			} else {
				c.track(e)
			}
		}
	}
	// The peers known now go into the node's first flow sync; so that a restart does not
	// drop a peer's flows for a moment, wait (briefly) for the ones the source is about to
	// report.
	var expect map[string]bool
	if f, ok := src.(*topology.File); ok {
		expect = filePeers(f.Path)
	}
	if err := c.collectPeers(waitCtx, src.Events(), expect, initialPeersSettle, initialPeersWait); err != nil {
		return nil, fmt.Errorf("topology %s: %w", cfg.Topology, err)
	}
	go func() {
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			log.Error("topology source stopped; peers no longer follow it", "topology", cfg.Topology, "err", err)
		}
	}()

	c.podSubnet = local.PodSubnet
	c.clusterCIDR = local.ClusterCIDR
	if cfg.ClusterCIDR != "" {
		_, c.clusterCIDR, _ = net.ParseCIDR(cfg.ClusterCIDR)
	}
	if c.clusterCIDR == nil {
		return nil, errors.New("no cluster CIDR: set clusterCIDR in the config (or in the topology file / FLANNEL_NETWORK)")
	}
	if cfg.ServiceCIDR != "" {
		_, c.serviceCIDR, _ = net.ParseCIDR(cfg.ServiceCIDR)
	}
	c.nodeIP = local.NodeIP
	if cfg.NodeIP != "" {
		c.nodeIP = net.ParseIP(cfg.NodeIP).To4()
		c.nodeIPFixed = true
	}
	var underlay topology.Underlay
	var err error
	if c.nodeIP == nil {
		underlay, err = topology.DefaultUnderlay()
		c.nodeIP = underlay.IP
	} else {
		underlay, err = topology.FindUnderlay(c.nodeIP)
	}
	if err != nil {
		return nil, fmt.Errorf("node IP: %w", err)
	}
	c.underlay = underlay.Name
	switch {
	case cfg.MTU != 0:
		c.mtu = cfg.MTU
	case local.MTU != 0:
		c.mtu = local.MTU
	default:
		c.mtu = underlay.PodMTU()
	}
	c.masquerade = true
	if local.IPMasq != nil {
		c.masquerade = *local.IPMasq
	}
	if cfg.Masquerade != nil {
		c.masquerade = *cfg.Masquerade
	}
	log.Info("cluster settings", "topology", cfg.Topology, "node", cfg.NodeName, "pod_subnet", c.podSubnet,
		"cluster_cidr", c.clusterCIDR, "service_cidr", c.serviceCIDR, "node_ip", c.nodeIP,
		"underlay", underlay.Name, "underlay_mtu", underlay.MTU, "mtu", c.mtu, "masquerade", c.masquerade)
	return c, nil
}

// Bounds of the wait for the peers a topology source reports at start.
const (
	// initialPeersSettle: without a list of expected peers, the peers are complete once
	// no event came for this long (the sources report their initial state in a burst).
	initialPeersSettle = 300 * time.Millisecond
	// initialPeersWait bounds the whole wait; a peer reported later is added by the
	// topology follower (a moment without its flows after a daemon restart).
	initialPeersWait = 5 * time.Second
)

// track applies one peer event to the start-time peer set.
func (c *cluster) track(e topology.Event) {
	switch e.Kind {
	case topology.EventPeerAdded, topology.EventPeerUpdated:
		c.peers[e.Peer.Name] = e.Peer
	case topology.EventPeerDeleted:
		delete(c.peers, e.Peer.Name)
	}
}

// collectPeers reads the events that follow this node's settings into the peer set:
// with expect (peer names the source will report) until all of them are in, else until
// no event came for settle; at most for limit. An EventLocal here is a change of this
// node's settings between two reads: the first one stays (logged by the overlay later).
// Errors: ctx ended, or the source stopped.
func (c *cluster) collectPeers(ctx context.Context, events <-chan topology.Event, expect map[string]bool, settle, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	quiet := time.NewTimer(settle)
	defer quiet.Stop()
	complete := func() bool {
		if expect == nil {
			return false
		}
		for name := range expect {
			if _, ok := c.peers[name]; !ok {
				return false
			}
		}
		return true
	}
	for !complete() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("peers not known before the start timeout: %w", ctx.Err())
		case <-deadline.C:
			return nil
		case <-quiet.C:
			if expect == nil {
				return nil
			}
		case e, ok := <-events:
			if !ok {
				return errors.New("the source stopped while reporting the peers")
			}
			c.track(e)
			if !quiet.Stop() {
				select {
				case <-quiet.C:
				default:
				}
			}
			quiet.Reset(settle)
		}
	}
	return nil
}

// filePeers returns the names of the peers the topology file at path lists now (nil if it
// cannot be read or parsed: the settle wait applies then).
func filePeers(path string) map[string]bool {
	if strings.HasSuffix(path, ".env") {
		return map[string]bool{} // flannel's subnet.env lists no peers
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	_, peers, err := topology.ParseFileSpec(b)
	if err != nil {
		return nil
	}
	out := make(map[string]bool, len(peers))
	for name := range peers {
		out[name] = true
	}
	return out
}

// overlayOptions returns the node's overlay settings with the peers known at start,
// sorted by name.
func (c *cluster) overlayOptions(cfg Config) *controller.OverlayOptions {
	o := &controller.OverlayOptions{
		TunnelType: cfg.TunnelType, TunnelName: tunnelPortName(cfg.TunnelType), TunnelDstPort: cfg.TunnelPort,
		NodeIP: c.nodeIP, ClusterCIDR: c.clusterCIDR, ServiceCIDR: c.serviceCIDR,
	}
	for _, p := range c.peers {
		o.Peers = append(o.Peers, flows.Peer{Name: p.Name, NodeIP: p.NodeIP, PodSubnet: p.PodSubnet})
	}
	sort.Slice(o.Peers, func(i, j int) bool { return o.Peers[i].Name < o.Peers[j].Name })
	return o
}

// kubeClient returns a clientset from kubeconfig, or the in-cluster config if it is "".
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w (in a pod, mount the service account; elsewhere set kubeconfig)", err)
	}
	rc.UserAgent = "ofsdn-node"
	return kubernetes.NewForConfig(rc)
}

// join completes the cluster membership of a node started with overlayOptions (tunnel
// port, pipeline and initial peers' flows, cluster route are in place): IP forwarding and
// the NAT rules (service return path; egress masquerade if on), a gratuitous ARP for the
// node IP (again whenever its interface's MAC changes, topology.KeepAnnounced, and for
// the new address whenever the topology changes this node's IP, unless the config fixes
// nodeIP), then it follows the topology's peer events in the background until ctx ends.
func (c *cluster) join(ctx context.Context, node *controller.Node, log *slog.Logger) error {
	ov := node.Overlay()
	if ov == nil {
		return errors.New("join the cluster: the node was started without its overlay settings")
	}
	// The host routes pods' egress and service traffic (gateway in, kube-proxy's DNAT,
	// gateway or uplink out) either way; masquerade decides only the egress rules.
	if err := masq.EnableIPForward(); err != nil {
		return err
	}
	if err := masq.Ensure(masq.Rules{PodSubnet: c.podSubnet, ClusterCIDR: c.clusterCIDR, Masquerade: c.masquerade}); err != nil {
		return err
	}
	// Peers' tunnel neighbour caches learn this node's underlay MAC now, not when their
	// entry for a previous MAC (a replaced node) ages out.
	announcer, err := topology.KeepAnnounced(ctx, log, c.underlay, c.nodeIP)
	if err != nil {
		log.Warn("node IP not announced", "interface", c.underlay, "node_ip", c.nodeIP, "err", err)
	}
	events := c.src.Events()
	if announcer != nil && !c.nodeIPFixed {
		events = followNodeIP(ctx, events, announcer)
	}
	go ov.Follow(ctx, events)
	return nil
}

// followNodeIP passes every event of events on to the returned channel, in order, and
// hands the node IP of each EventLocal that names one to the announcer, so that a node IP
// changed in the topology at run time is the one announced from then on (issue 20). The
// returned channel is closed when events is; it stops when ctx ends.
func followNodeIP(ctx context.Context, events <-chan topology.Event, a *topology.Announcer) <-chan topology.Event {
	out := make(chan topology.Event)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-events:
				if !ok {
					return
				}
				if e.Kind == topology.EventLocal && e.Local.NodeIP != nil {
					a.SetNodeIP(e.Local.NodeIP)
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// tunnelPortName is the tunnel port's name for a tunnel type: vxlan0 or geneve0.
func tunnelPortName(typ string) string { return typ + "0" }

// installCNI installs the plugin binary into cfg.CNIBinDir and writes the conflist into
// cfg.CNIConfDir, each by writing a temporary file in the same directory and renaming it
// over the final name, so a kubelet never sees a partial file. It is called once the
// daemon serves ADD: the conflist's appearance is what tells the kubelet the network is
// ready. Either directory may be unset (nothing written there).
func installCNI(cfg Config, log *slog.Logger) error {
	if cfg.CNIBinDir != "" {
		src := cfg.PluginBinary
		if src == "" {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("install CNI plugin: find this executable: %w (set pluginBinary)", err)
			}
			src = filepath.Join(filepath.Dir(self), "ofsdn")
		}
		in, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("install CNI plugin: %w (set pluginBinary to the ofsdn plugin)", err)
		}
		defer in.Close()
		if err := writeAtomic(filepath.Join(cfg.CNIBinDir, "ofsdn"), 0o755, func(w io.Writer) error {
			_, err := io.Copy(w, in)
			return err
		}); err != nil {
			return fmt.Errorf("install CNI plugin into %s: %w", cfg.CNIBinDir, err)
		}
		log.Info("CNI plugin installed", "path", filepath.Join(cfg.CNIBinDir, "ofsdn"))
	}
	if cfg.CNIConfDir != "" {
		b := confList(cfg.Socket)
		path := filepath.Join(cfg.CNIConfDir, confListName)
		if err := writeAtomic(path, 0o644, func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		}); err != nil {
			return fmt.Errorf("write CNI config into %s: %w", cfg.CNIConfDir, err)
		}
		log.Info("CNI config written", "path", path)
	}
	return nil
}

// confListName is the file the daemon writes into cniConfDir.
const confListName = "10-ofsdn.conflist"

// Versions in the written conflist (SPEC.md "Section 1: Network configuration format"):
// "cniVersions" (spec 1.1) lists every version the plugin offers, and a runtime whose CNI
// library reads it (containernetworking/cni v1.2.0 and later) picks the highest it
// implements, 1.1.0 with STATUS and GC; older libraries (v1.1.x, e.g. containerd 1.7,
// Podman 4) ignore it and use "cniVersion", so that must be one they can parse results
// of: 1.0.0 (a 1.1.0 result makes them refuse every ADD, "unsupported CNI result version").
const confListCNIVersion = "1.0.0"

var confListCNIVersions = []string{"1.0.0", "1.1.0"}

// confList returns the network configuration list the daemon writes: network "ofsdn", one
// ofsdn plugin on socket, indented JSON ending in a newline.
func confList(socket string) []byte {
	conf := struct {
		CNIVersion  string           `json:"cniVersion"`
		CNIVersions []string         `json:"cniVersions"`
		Name        string           `json:"name"`
		Plugins     []map[string]any `json:"plugins"`
	}{confListCNIVersion, confListCNIVersions, "ofsdn", []map[string]any{{"type": "ofsdn", "socket": socket}}}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n')
}

// writeAtomic writes path through a temporary file in its directory, fsyncs it, sets
// mode and renames it over path (rename(2) is atomic within a file system).
func writeAtomic(path string, mode os.FileMode, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := fill(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
