package topology

// The static-file source: a YAML/JSON topology, or flannel's subnet.env, re-read whenever
// the file changes.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"sigs.k8s.io/yaml"
)

// FileSpec is the static topology file's content (YAML or JSON, keys as in the json tags):
//
//	clusterCIDR: 10.244.0.0/16
//	nodeName: node-a
//	podSubnet: 10.244.1.0/24
//	nodeIP: 172.16.0.1
//	peers:
//	- {name: node-b, podSubnet: 10.244.2.0/24, nodeIP: 172.16.0.2}
//
// A dual-stack node lists its pod subnets, one per family in the order its pods get
// them (IPv4 or IPv6 first), instead of (or beside an equal) podSubnet: podSubnets: [10.244.1.0/24, fd00:10:244:1::/64]; a peer likewise (a
// dual-stack node routes its IPv6 subnet through the tunnel), and clusterCIDRIPv6:
// fd00:10:244::/56 is the IPv6 prefix they are cut from (IPv6 egress needs it).
// nodeIPv6: fd00:172:16::1 beside an IPv4 nodeIP (this node's and each peer's, optional)
// is the node's IPv6 address, where pods reach IPv6 NodePorts.
type FileSpec struct {
	// ClusterCIDR is the IPv4 prefix every pod subnet is cut from.
	ClusterCIDR string `json:"clusterCIDR"`
	// ClusterCIDRIPv6 is the IPv6 prefix every IPv6 pod subnet is cut from; optional.
	ClusterCIDRIPv6 string `json:"clusterCIDRIPv6,omitempty"`
	// NodeName is this node's name.
	NodeName string `json:"nodeName"`
	// PodSubnet is this node's IPv4 pod subnet.
	PodSubnet string `json:"podSubnet,omitempty"`
	// PodSubnets are this node's pod subnets, one per family, in the order pods get them
	// (IPv4 first, IPv6 first, or IPv6 alone);
	// empty = [PodSubnet].
	PodSubnets []string `json:"podSubnets,omitempty"`
	// NodeIP is this node's underlay IPv4 address (optional: the daemon's config or
	// interface detection fills it).
	NodeIP string `json:"nodeIP,omitempty"`
	// NodeIPv6 is this node's IPv6 address beside an IPv4 NodeIP (optional): pods reach
	// IPv6 NodePorts at it.
	NodeIPv6 string `json:"nodeIPv6,omitempty"`
	// MTU is the pods' and gateway's MTU in bytes (optional; 0 = the daemon decides: the
	// underlay's MTU less the tunnel overhead). The daemon's config mtu, unless 0, wins
	// over it; read at start (Prepare): a change takes effect when the daemon restarts.
	MTU int `json:"mtu,omitempty"`
	// Peers are the other nodes.
	Peers []FilePeer `json:"peers"`
}

// FilePeer is one peer in a FileSpec.
type FilePeer struct {
	// Name is the peer's node name (unique in the file).
	Name string `json:"name"`
	// PodSubnet is its IPv4 pod subnet.
	PodSubnet string `json:"podSubnet,omitempty"`
	// PodSubnets are its pod subnets, one per family (either order); empty = [PodSubnet].
	PodSubnets []string `json:"podSubnets,omitempty"`
	// NodeIP is its underlay IPv4 address.
	NodeIP string `json:"nodeIP"`
	// NodeIPv6 is its IPv6 address beside an IPv4 NodeIP (optional): pods reach IPv6
	// NodePorts at it.
	NodeIPv6 string `json:"nodeIPv6,omitempty"`
}

// File is the static-file Source. A path ending in ".env" is read as flannel's
// subnet.env (FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ: this node's
// settings only, no peers); any other path as a FileSpec. The file is re-read when it or
// its directory changes (fsnotify; a Kubernetes ConfigMap volume swaps a symlink), and
// every PollInterval as a fallback. A file that does not parse is logged and ignored:
// the last good topology stays.
type File struct {
	// Path is the file's path.
	Path string
	// PollInterval re-reads the file even without a change notification; 0 = 30 s.
	PollInterval time.Duration
	// Logger gets reload errors and changes; nil = slog.Default().
	Logger *slog.Logger

	t *tracker
}

// NewFile returns a File source for path.
func NewFile(path string) *File { return &File{Path: path, t: newTracker()} }

// Events returns the event channel (Source).
func (f *File) Events() <-chan Event { return f.t.out }

// Run reads the file, sends the initial events, then watches it until ctx ends (Source).
// It returns an error without watching if the first read fails (the error names the file
// and the problem), else ctx.Err().
func (f *File) Run(ctx context.Context) error {
	defer close(f.t.out)
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	poll := f.PollInterval
	if poll <= 0 {
		poll = 30 * time.Second
	}
	// Watch first, then read: a change between the two is not lost.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("topology file %s: watch: %w", f.Path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(f.Path)); err != nil {
		return fmt.Errorf("topology file %s: watch its directory: %w", f.Path, err)
	}
	if err := f.reload(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-w.Errors:
			log.Warn("topology file watch error; polling continues", "file", f.Path, "err", err)
		case ev := <-w.Events:
			// Any change in the directory may be ours: editors rename, ConfigMaps swap
			// "..data". Let a burst settle, then re-read once.
			_ = ev
			settle := time.NewTimer(100 * time.Millisecond)
		drain:
			for {
				select {
				case <-w.Events:
				case <-settle.C:
					break drain
				case <-ctx.Done():
					settle.Stop()
					return ctx.Err()
				}
			}
		case <-tick.C:
		}
		if err := f.reload(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Error("topology file not reloaded; keeping the last good topology", "file", f.Path, "err", err)
		}
	}
}

// reload reads the file and sends the events that take the last state to it.
func (f *File) reload(ctx context.Context) error {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return fmt.Errorf("topology file %s: %w", f.Path, err)
	}
	var local Local
	var peers map[string]Peer
	if strings.HasSuffix(f.Path, ".env") {
		local, err = ParseFlannelEnv(b)
	} else {
		local, peers, err = ParseFileSpec(b)
	}
	if err != nil {
		return fmt.Errorf("topology file %s: %w", f.Path, err)
	}
	if peers == nil {
		peers = map[string]Peer{}
	}
	for _, e := range f.t.diff(&local, peers, true) {
		if !f.t.send(ctx, e) {
			return ctx.Err()
		}
	}
	return nil
}

// ParseFileSpec parses a FileSpec (YAML or JSON, unknown keys rejected) into this node's
// settings and its peers by name. Errors name the key and the expected form.
func ParseFileSpec(b []byte) (Local, map[string]Peer, error) {
	var s FileSpec
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return Local{}, nil, fmt.Errorf("%w (keys: clusterCIDR, clusterCIDRIPv6, nodeName, podSubnet, podSubnets, nodeIP, nodeIPv6, mtu, peers[].name/podSubnet/podSubnets/nodeIP/nodeIPv6)", err)
	}
	var l Local
	var err error
	if s.NodeName == "" {
		return Local{}, nil, errors.New("nodeName is empty: set this node's name")
	}
	l.Name = s.NodeName
	if len(s.PodSubnets) > 0 {
		if l.PodSubnet, l.PodSubnetIPv6, l.IPv6First, err = podSubnetList(s.PodSubnets, s.PodSubnet); err != nil {
			return Local{}, nil, fmt.Errorf("podSubnets: %w", err)
		}
	} else if l.PodSubnet, err = parseIPv4Net(s.PodSubnet); err != nil {
		return Local{}, nil, fmt.Errorf("podSubnet: %w", err)
	}
	if s.ClusterCIDR != "" {
		if l.ClusterCIDR, err = parseIPv4Net(s.ClusterCIDR); err != nil {
			return Local{}, nil, fmt.Errorf("clusterCIDR: %w", err)
		}
	}
	if s.ClusterCIDRIPv6 != "" {
		if l.ClusterCIDRIPv6, err = parseIPv6Net(s.ClusterCIDRIPv6); err != nil {
			return Local{}, nil, fmt.Errorf("clusterCIDRIPv6: %w", err)
		}
	}
	if s.NodeIP != "" {
		if l.NodeIP, err = parseNodeIP(s.NodeIP); err != nil {
			return Local{}, nil, fmt.Errorf("nodeIP: %w", err)
		}
	}
	if s.NodeIPv6 != "" {
		if l.NodeIPv6, err = fileNodeIPv6(s.NodeIPv6, l.NodeIP); err != nil {
			return Local{}, nil, fmt.Errorf("nodeIPv6: %w", err)
		}
	}
	// 68: the least MTU of an IPv4 link (RFC 791); 65535 the most of a Linux link (as
	// podnet.MinMTU and MaxMTU).
	if s.MTU != 0 && (s.MTU < 68 || s.MTU > 65535) {
		return Local{}, nil, fmt.Errorf("mtu %d: want 0 (auto: the underlay's minus the tunnel's overhead) or 68..65535 bytes", s.MTU)
	}
	l.MTU = s.MTU
	peers := map[string]Peer{}
	for i, fp := range s.Peers {
		if fp.Name == "" || fp.Name == s.NodeName {
			return Local{}, nil, fmt.Errorf("peers[%d]: name %q must be set and differ from nodeName", i, fp.Name)
		}
		if _, dup := peers[fp.Name]; dup {
			return Local{}, nil, fmt.Errorf("peers[%d]: name %q appears twice", i, fp.Name)
		}
		p := Peer{Name: fp.Name}
		if len(fp.PodSubnets) > 0 {
			if p.PodSubnet, p.PodSubnetIPv6, _, err = podSubnetList(fp.PodSubnets, fp.PodSubnet); err != nil {
				return Local{}, nil, fmt.Errorf("peers[%d] (%s) podSubnets: %w", i, fp.Name, err)
			}
		} else if p.PodSubnet, err = parseIPv4Net(fp.PodSubnet); err != nil {
			return Local{}, nil, fmt.Errorf("peers[%d] (%s) podSubnet: %w", i, fp.Name, err)
		}
		if p.NodeIP, err = parseNodeIP(fp.NodeIP); err != nil {
			return Local{}, nil, fmt.Errorf("peers[%d] (%s) nodeIP: %w", i, fp.Name, err)
		}
		if fp.NodeIPv6 != "" {
			if p.NodeIPv6, err = fileNodeIPv6(fp.NodeIPv6, p.NodeIP); err != nil {
				return Local{}, nil, fmt.Errorf("peers[%d] (%s) nodeIPv6: %w", i, fp.Name, err)
			}
		}
		peers[fp.Name] = p
	}
	return l, peers, nil
}

// fileNodeIPv6 parses a nodeIPv6 key: an IPv6 unicast address, beside a nodeIP that is
// not IPv6 (an IPv6 nodeIP is the node's IPv6 address already).
func fileNodeIPv6(s string, nodeIP net.IP) (net.IP, error) {
	ip, err := parseNodeIPv6(s)
	if err != nil {
		return nil, err
	}
	if nodeIP != nil && nodeIP.To4() == nil {
		return nil, fmt.Errorf("%s beside the IPv6 nodeIP %v: nodeIPv6 is the IPv6 address of a node whose nodeIP is IPv4; leave it out", s, nodeIP)
	}
	return ip, nil
}

// ParseFlannelEnv parses flannel's subnet.env (KEY=VALUE lines, as flanneld writes
// /run/flannel/subnet.env): FLANNEL_NETWORK (cluster CIDR), FLANNEL_SUBNET (this node's
// subnet, written with the gateway address, e.g. 10.244.1.1/24), FLANNEL_MTU (bytes),
// FLANNEL_IPMASQ (true/false), and on a dual-stack flannel FLANNEL_IPV6_SUBNET (this
// node's IPv6 subnet, e.g. fd00:10:244:1::1/64: a dual-stack node) and
// FLANNEL_IPV6_NETWORK (the IPv6 cluster CIDR). FLANNEL_SUBNET is required, unless
// FLANNEL_IPV6_SUBNET is there alone (an IPv6-only node); other keys are ignored. The
// node name is the host name.
func ParseFlannelEnv(b []byte) (Local, error) {
	var l Local
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return l, fmt.Errorf("line %q: want KEY=VALUE", line)
		}
		vals[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	var err error
	sub, ok := vals["FLANNEL_SUBNET"]
	if !ok && vals["FLANNEL_IPV6_SUBNET"] == "" {
		return l, errors.New("FLANNEL_SUBNET (or, on an IPv6-only flannel, FLANNEL_IPV6_SUBNET) missing: is this flannel's subnet.env?")
	}
	if ok {
		if l.PodSubnet, err = parseIPv4Net(sub); err != nil {
			return l, fmt.Errorf("FLANNEL_SUBNET: %w", err)
		}
	}
	if v, ok := vals["FLANNEL_IPV6_SUBNET"]; ok && v != "" {
		if l.PodSubnetIPv6, err = parseIPv6Net(v); err != nil {
			return l, fmt.Errorf("FLANNEL_IPV6_SUBNET: %w", err)
		}
	}
	if v, ok := vals["FLANNEL_IPV6_NETWORK"]; ok && v != "" {
		if l.ClusterCIDRIPv6, err = parseIPv6Net(v); err != nil {
			return l, fmt.Errorf("FLANNEL_IPV6_NETWORK: %w", err)
		}
	}
	if v, ok := vals["FLANNEL_NETWORK"]; ok {
		if l.ClusterCIDR, err = parseIPv4Net(v); err != nil {
			return l, fmt.Errorf("FLANNEL_NETWORK: %w", err)
		}
	}
	if v, ok := vals["FLANNEL_MTU"]; ok {
		if l.MTU, err = strconv.Atoi(v); err != nil || l.MTU < 68 || l.MTU > 65535 {
			return l, fmt.Errorf("FLANNEL_MTU %q: want bytes, 68..65535", v)
		}
	}
	if v, ok := vals["FLANNEL_IPMASQ"]; ok {
		m, err := strconv.ParseBool(v)
		if err != nil {
			return l, fmt.Errorf("FLANNEL_IPMASQ %q: want true or false", v)
		}
		l.IPMasq = &m
	}
	l.Name, _ = os.Hostname()
	return l, nil
}
