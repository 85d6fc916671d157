package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ofsdn/ofsdn/cni"
	"github.com/ofsdn/ofsdn/metrics"
)

// Config is the daemon's configuration: defaults, overridden by the config file (YAML or
// JSON, keys as in the json tags), overridden by flags given on the command line.
type Config struct {
	// PodSubnet is this node's pod subnet (IPv4 CIDR); the gateway takes its first address.
	PodSubnet string `json:"podSubnet"`
	// PodSubnets are this node's pod subnets, at most one per IP family, in the order of
	// the pods' addresses and CNI results: a dual-stack node's e.g. [10.128.0.0/24,
	// fd00:10:128::/64], an IPv6-first one's [fd00:10:128::/64, 10.128.0.0/24], an
	// IPv6-only one's [fd00:10:128::/64] (the IPv6 gateway takes the IPv6 subnet's
	// first address, ::1 of it). Empty = [PodSubnet], an IPv4-only node as before. When
	// set, podSubnet must be left out or be its IPv4 entry.
	PodSubnets []string `json:"podSubnets"`
	// Bridge is the integration bridge's name.
	Bridge string `json:"bridge"`
	// Gateway is the gateway internal port's name (at most 15 bytes).
	Gateway string `json:"gateway"`
	// DatapathType is the bridge's datapath_type: "system" (kernel module), "netdev"
	// (userspace, for machines without the openvswitch module) or "auto" (chosen at start:
	// system where the kernel has or loads the openvswitch module, else netdev;
	// controller.ResolveDatapathType).
	DatapathType string `json:"datapathType"`
	// OVS says who runs Open vSwitch on the node: "host" (default: ovsdb-server and
	// ovs-vswitchd managed on the host, as before) or "bundled" (the DaemonSet's ovs
	// container runs them from the image: cmd/ofsdn-ovs reads this key from the same
	// file). The daemon itself connects to ovsdb and ovsRunDir either way.
	OVS string `json:"ovs"`
	// UnderlayBridge, with the userspace datapath and a topology, is the OVS bridge the
	// node IP is moved onto at start (e.g. br-phy): the interface holding the node IP
	// becomes a port of that bridge, its IPv4 and IPv6 addresses (not link-local) and
	// routes move to the bridge's internal port (controller.MoveUnderlay), as the
	// userspace datapath's tunnels need (node IP IPv4, or IPv6 on an IPv6 underlay).
	// "" (default) moves nothing (the node IP must already be on an OVS bridge for
	// tunnels with netdev). Ignored with the kernel datapath.
	UnderlayBridge string `json:"underlayBridge"`
	// OVSDB is the ovsdb-server endpoint, "unix:PATH" or "tcp:HOST:PORT".
	OVSDB string `json:"ovsdb"`
	// OVSRunDir is Open vSwitch's run directory (where BRIDGE.mgmt lives).
	OVSRunDir string `json:"ovsRunDir"`
	// Socket is the CNI server's unix socket path.
	Socket string `json:"socket"`
	// DataDir holds persistent state (IP leases).
	DataDir string `json:"dataDir"`
	// MTU is the pods' and gateway's MTU in bytes (576..9000); 0 = automatic: the
	// topology's (FLANNEL_MTU), else with an overlay the underlay interface's (the one
	// holding nodeIP) minus 50 bytes of VXLAN or Geneve over IPv4 (topology.TunnelOverhead;
	// ofsdn sends Geneve without options, each of which would add 4..128 bytes), else 1450.
	MTU int `json:"mtu"`
	// StartTimeout bounds the start-up (OVSDB, bridge, OpenFlow), e.g. "30s".
	StartTimeout string `json:"startTimeout"`
	// AddTimeout bounds one CNI ADD in the daemon, waits on Open vSwitch included, e.g.
	// "60s"; more than 0 and less than the plugin's own 90 s (cni.DefaultTimeout), so the
	// runtime gets the daemon's clean error (code 11) rather than a timeout.
	AddTimeout string `json:"addTimeout"`
	// FlowAuditInterval is the period of the flow audit, e.g. "30s": one flow-stats
	// request compared with the desired flows; missing ones are installed again, ones with
	// this daemon run's cookie that no owner wants are deleted, other flows only reported.
	// "0" turns it off.
	FlowAuditInterval string `json:"flowAuditInterval"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"logLevel"`
	// LogFormat is text or json.
	LogFormat string `json:"logFormat"`
	// MetricsAddress is the host:port of the /metrics, /healthz and /readyz listener
	// (default 127.0.0.1:9469; ":9469" for every address; "" turns it off).
	MetricsAddress string `json:"metricsAddress"`
	// CtlSocket is the inspection socket ofsdnctl talks to; default ctl.sock next to the
	// CNI socket (/var/run/ofsdn/ctl.sock); "off" turns it off.
	CtlSocket string `json:"ctlSocket"`

	// Topology says where this node's subnet and its peers come from: "" (none: a single
	// node with podSubnet), "file" (topologyFile, reloaded on change) or "kubernetes" (Node
	// objects: this node's spec.podCIDRs, peers' podCIDRs and InternalIPs).
	Topology string `json:"topology"`
	// TopologyFile is the static topology (YAML/JSON, see topology.FileSpec) or flannel's
	// subnet.env (a path ending in .env); setting it implies topology "file".
	TopologyFile string `json:"topologyFile"`
	// NodeName is this node's name; default $NODE_NAME, else the host name.
	NodeName string `json:"nodeName"`
	// Kubeconfig is the kubeconfig file for topology "kubernetes"; "" = in-cluster.
	Kubeconfig string `json:"kubeconfig"`
	// ClusterCIDR is the IPv4 range every node's pod subnet is cut from; default the
	// topology's (FLANNEL_NETWORK, clusterCIDR of the file); required with a topology.
	ClusterCIDR string `json:"clusterCIDR"`
	// ClusterCIDRIPv6 is the IPv6 range every dual-stack node's IPv6 pod subnet is cut
	// from (e.g. fd00:10:244::/56); default the topology's (clusterCIDRIPv6 of the file,
	// FLANNEL_IPV6_NETWORK). With it a dual-stack node's pods reach the outside over IPv6,
	// masqueraded (nftables table ip6 ofsdn) when masquerade is on; without it their IPv6
	// stays inside the cluster (local pods, the gateway, peers' pods).
	ClusterCIDRIPv6 string `json:"clusterCIDRIPv6"`
	// ServiceCIDR is the Kubernetes service IPv4 range, sent to the gateway for kube-proxy;
	// "" = none.
	ServiceCIDR string `json:"serviceCIDR"`
	// NodeIP is this node's underlay address, IPv4 or IPv6 (tunnels over an IPv6
	// underlay); default the topology's, else the
	// address of the default route's interface.
	NodeIP string `json:"nodeIP"`
	// TunnelType is vxlan (default) or geneve (without options: the same 50 bytes of
	// overhead as VXLAN), used when a topology is set.
	TunnelType string `json:"tunnelType"`
	// TunnelPort is the tunnel's UDP port; 0 = 4789 (VXLAN) or 6081 (Geneve).
	TunnelPort int `json:"tunnelPort"`
	// Masquerade masquerades pod traffic leaving the cluster CIDR to the node's address
	// (nftables table ip ofsdn), with a topology; default true (FLANNEL_IPMASQ may turn it
	// off).
	Masquerade *bool `json:"masquerade"`
	// CNIBinDir, when set, is where the daemon installs its plugin binary (atomically,
	// once ready), e.g. /opt/cni/bin.
	CNIBinDir string `json:"cniBinDir"`
	// CNIConfDir, when set, is where the daemon writes its conflist (atomically, once
	// ready), e.g. /etc/cni/net.d.
	CNIConfDir string `json:"cniConfDir"`
	// PluginBinary is the plugin binary to install; default "ofsdn" next to this daemon's
	// executable.
	PluginBinary string `json:"pluginBinary"`

	// NetworkPolicy enforces Kubernetes NetworkPolicy (networking.k8s.io/v1) in the
	// pipeline; default true with topology "kubernetes" (it needs the API: get, list and
	// watch on pods, namespaces and networkpolicies), and it cannot be on without it.
	NetworkPolicy *bool `json:"networkPolicy"`
	// PolicyDenyLog logs each denied new connection (one structured line: source,
	// destination, protocol, port, direction), rate-limited in the switch; default false.
	PolicyDenyLog bool `json:"policyDenyLog"`
	// PolicyDenyLogRate is the deny log's limit in packets per second per node (the
	// OpenFlow meter's rate); default 100.
	PolicyDenyLogRate int `json:"policyDenyLogRate"`
	// ServiceProxy says who load-balances pods' traffic to Kubernetes Services:
	// "ofsdn" (ClusterIP:port of TCP, UDP and SCTP Services DNAT'ed in OVS by select
	// groups, controller/services.go, so NetworkPolicy judges Service traffic by the
	// client pod's own address; needs topology "kubernetes" and get, list and watch on
	// services and discovery.k8s.io endpointslices) or "kube-proxy" (pods' Service traffic
	// leaves through the gateway to the host's kube-proxy, whose replies the host
	// masquerades). Empty (the default) is "ofsdn" with topology "kubernetes" and
	// "kube-proxy" without it (no API to watch Services from), as networkPolicy defaults.
	// kube-proxy keeps running beside ofsdn either way (the node's own traffic, NodePort
	// and external IPs: README "Services in OVS").
	ServiceProxy string `json:"serviceProxy"`
	// ServiceAffinityLearnMax is the largest idle timeout, seconds, of the flows the
	// switch learns for sessionAffinity ClientIP (1..65535); 0, the default, is 65535,
	// the learn action's maximum. A Service's timeoutSeconds above it is carried on by
	// the daemon's remainder flows (docs/design.md "Session affinity"). Only tests lower
	// it, to show a long timeout in seconds.
	ServiceAffinityLearnMax int `json:"serviceAffinityLearnMax"`

	// podSubnetSet records that the config file or a flag set podSubnet, even to its
	// default value, so that podSubnets() checks it against podSubnets (loadConfig).
	podSubnetSet bool
}

// Values of Config.ServiceProxy.
const (
	serviceProxyKube  = "kube-proxy"
	serviceProxyOFSDN = "ofsdn"
)

// servicesOn reports whether ofsdn load-balances Services in OVS: serviceProxy ofsdn, or
// serviceProxy unset with the Kubernetes topology.
func (c Config) servicesOn() bool {
	if c.ServiceProxy == "" {
		return c.Topology == "kubernetes"
	}
	return c.ServiceProxy == serviceProxyOFSDN
}

// policyOn reports whether NetworkPolicy is enforced: networkPolicy, defaulting to the
// Kubernetes topology.
func (c Config) policyOn() bool {
	if c.NetworkPolicy != nil {
		return *c.NetworkPolicy
	}
	return c.Topology == "kubernetes"
}

func defaultConfig() Config {
	return Config{
		PodSubnet:    "10.128.0.0/24",
		Bridge:       "br-int",
		Gateway:      "ofsdn-gw0",
		DatapathType: "system",
		OVS:          "host",
		OVSDB:        "unix:/var/run/openvswitch/db.sock",
		OVSRunDir:    "/var/run/openvswitch",
		Socket:       "/var/run/ofsdn/cni.sock",
		DataDir:      "/var/lib/ofsdn",
		MTU:          1450,
		StartTimeout: "60s",
		AddTimeout:   "60s",
		LogLevel:     "info",

		FlowAuditInterval: "30s",
		LogFormat:         "text",

		MetricsAddress:    metrics.DefaultAddress,
		TunnelType:        "vxlan",
		PolicyDenyLogRate: 100,
	}
}

// loadConfig parses args: -config FILE first, then the other flags on top of it.
func loadConfig(args []string) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("ofsdn-node", flag.ContinueOnError)
	file := fs.String("config", "", "config file (YAML or JSON); flags given explicitly override it")
	fs.StringVar(&cfg.PodSubnet, "pod-subnet", cfg.PodSubnet, "this node's pod subnet (IPv4 CIDR)")
	fs.Func("pod-subnets", "this node's pod subnets, comma-separated, at most one per IP family, in the order pods get their addresses (dual-stack: 10.128.0.0/24,fd00:10:128::/64; IPv6-first: the other order; IPv6-only: fd00:10:128::/64; IPv6 needs mtu >= 1280)", func(v string) error {
		cfg.PodSubnets = strings.Split(v, ",")
		return nil
	})
	fs.StringVar(&cfg.Bridge, "bridge", cfg.Bridge, "integration bridge name")
	fs.StringVar(&cfg.Gateway, "gateway", cfg.Gateway, "gateway internal port name")
	fs.StringVar(&cfg.DatapathType, "datapath-type", cfg.DatapathType, "bridge datapath_type: system, netdev or auto (system where the kernel has the openvswitch module, else netdev)")
	fs.StringVar(&cfg.UnderlayBridge, "underlay-bridge", cfg.UnderlayBridge, "with the userspace datapath: the OVS bridge the node IP's interface, addresses and routes are moved onto at start (e.g. br-phy); \"\" moves nothing")
	fs.StringVar(&cfg.OVSDB, "ovsdb", cfg.OVSDB, "ovsdb-server endpoint (unix:PATH or tcp:HOST:PORT)")
	fs.StringVar(&cfg.OVSRunDir, "ovs-rundir", cfg.OVSRunDir, "Open vSwitch run directory (holds BRIDGE.mgmt)")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "CNI server unix socket path")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for persistent state (IP leases)")
	fs.IntVar(&cfg.MTU, "mtu", cfg.MTU, "pod and gateway MTU in bytes; 0 = automatic: the topology's, else underlay MTU - 50 with an overlay over IPv4 (VXLAN, or Geneve without options as ofsdn sends it), - 70 over an IPv6 underlay, else 1450")
	fs.StringVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "bound on start-up, e.g. 60s")
	fs.StringVar(&cfg.AddTimeout, "add-timeout", cfg.AddTimeout, "bound on one CNI ADD, waits on OVS included, e.g. 60s (below the plugin's 90s)")
	fs.StringVar(&cfg.FlowAuditInterval, "flow-audit-interval", cfg.FlowAuditInterval, "period of the flow audit that re-installs missing flows and deletes stray ones with our cookie, e.g. 30s (0 turns it off)")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text or json")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", cfg.MetricsAddress, "host:port of /metrics, /healthz and /readyz (\"\" turns it off)")
	fs.StringVar(&cfg.CtlSocket, "ctl-socket", cfg.CtlSocket, "inspection socket for ofsdnctl (default: ctl.sock next to -socket; \"off\" turns it off)")
	fs.StringVar(&cfg.Topology, "topology", cfg.Topology, "where peers come from: \"\" (single node), file or kubernetes")
	fs.StringVar(&cfg.TopologyFile, "topology-file", cfg.TopologyFile, "static topology (YAML/JSON) or flannel subnet.env; implies -topology file")
	fs.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "this node's name (default $NODE_NAME, else the host name)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "kubeconfig for -topology kubernetes (default in-cluster)")
	fs.StringVar(&cfg.ClusterCIDR, "cluster-cidr", cfg.ClusterCIDR, "IPv4 range of all pod subnets (default from the topology)")
	fs.StringVar(&cfg.ClusterCIDRIPv6, "cluster-cidr-ipv6", cfg.ClusterCIDRIPv6, "IPv6 range of all IPv6 pod subnets on dual-stack and IPv6-only nodes (default from the topology)")
	fs.StringVar(&cfg.ServiceCIDR, "service-cidr", cfg.ServiceCIDR, "Kubernetes service IPv4 range, sent to the gateway")
	fs.StringVar(&cfg.NodeIP, "node-ip", cfg.NodeIP, "this node's underlay address, IPv4, or IPv6 for tunnels over an IPv6 underlay (default from the topology, else the IPv4 default route's interface address)")
	fs.StringVar(&cfg.TunnelType, "tunnel-type", cfg.TunnelType, "vxlan or geneve")
	fs.IntVar(&cfg.TunnelPort, "tunnel-port", cfg.TunnelPort, "tunnel UDP port (0 = the type's default)")
	fs.Func("masquerade", "masquerade pod traffic leaving the cluster CIDR: true or false (default true)", func(v string) error {
		b, err := strconv.ParseBool(v)
		cfg.Masquerade = &b
		return err
	})
	fs.StringVar(&cfg.CNIBinDir, "cni-bin-dir", cfg.CNIBinDir, "install the plugin binary here once ready (e.g. /opt/cni/bin)")
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", cfg.CNIConfDir, "write the conflist here once ready (e.g. /etc/cni/net.d)")
	fs.StringVar(&cfg.PluginBinary, "plugin-binary", cfg.PluginBinary, "plugin binary to install (default ofsdn next to this executable)")
	fs.Func("network-policy", "enforce Kubernetes NetworkPolicy: true or false (default true with -topology kubernetes)", func(v string) error {
		b, err := strconv.ParseBool(v)
		cfg.NetworkPolicy = &b
		return err
	})
	fs.BoolVar(&cfg.PolicyDenyLog, "policy-deny-log", cfg.PolicyDenyLog, "log each connection NetworkPolicy denies (rate-limited in the switch)")
	fs.IntVar(&cfg.PolicyDenyLogRate, "policy-deny-log-rate", cfg.PolicyDenyLogRate, "deny log limit, packets per second per node")
	fs.StringVar(&cfg.ServiceProxy, "service-proxy", cfg.ServiceProxy, "who load-balances pods' Service traffic: ofsdn (in OVS; needs -topology kubernetes) or kube-proxy (on the host); default ofsdn with -topology kubernetes, kube-proxy without")
	fs.IntVar(&cfg.ServiceAffinityLearnMax, "service-affinity-learn-max", cfg.ServiceAffinityLearnMax, "largest idle timeout of a learned session-affinity flow, seconds (0 = 65535; longer Service timeouts are carried on by remainder flows); for tests")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: ofsdn-node takes only flags (see -help)", fs.Arg(0))
	}
	podSubnetSet := false
	if *file != "" {
		fromFile := defaultConfig()
		// A value no file gives before decoding, so that a podSubnet in the file is seen
		// even when it equals the default.
		const unset = "\x00unset"
		fromFile.PodSubnet = unset
		b, err := os.ReadFile(*file)
		if err != nil {
			return cfg, fmt.Errorf("config file %s: %w", *file, err)
		}
		if err := yaml.UnmarshalStrict(b, &fromFile); err != nil {
			return cfg, fmt.Errorf("config file %s: %w (keys are: podSubnet, podSubnets, bridge, gateway, datapathType, ovs, underlayBridge, ovsdb, ovsRunDir, socket, dataDir, mtu, startTimeout, addTimeout, flowAuditInterval, logLevel, logFormat, metricsAddress, ctlSocket, topology, topologyFile, nodeName, kubeconfig, clusterCIDR, clusterCIDRIPv6, serviceCIDR, nodeIP, tunnelType, tunnelPort, masquerade, cniBinDir, cniConfDir, pluginBinary, networkPolicy, policyDenyLog, policyDenyLogRate, serviceProxy, serviceAffinityLearnMax)", *file, err)
		}
		podSubnetSet = fromFile.PodSubnet != unset
		if !podSubnetSet {
			fromFile.PodSubnet = defaultConfig().PodSubnet
		}
		// The flag variables point into cfg: parsing again re-applies only the flags given
		// explicitly, over the file's values.
		cfg = fromFile
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "pod-subnet" {
			podSubnetSet = true
		}
	})
	cfg.podSubnetSet = podSubnetSet
	switch cfg.CtlSocket {
	case "":
		cfg.CtlSocket = filepath.Join(filepath.Dir(cfg.Socket), "ctl.sock")
	case "off":
		cfg.CtlSocket = ""
	}
	if cfg.TopologyFile != "" && cfg.Topology == "" {
		cfg.Topology = "file"
	}
	if cfg.NodeName == "" {
		cfg.NodeName = os.Getenv("NODE_NAME")
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
	return cfg, cfg.validate()
}

// podSubnets returns the node's IPv4 pod subnet and, on a dual-stack node, its IPv6 one,
// from podSubnets (or podSubnet); on an IPv6-only node (podSubnets one IPv6 CIDR) v4 is
// nil; v6First reports a dual-stack list that names the IPv6 subnet first (an IPv6-first
// node: pods' addresses and CNI results in that order). Errors name the key and the fix:
// podSubnets that is not one or two CIDRs, at most one per family (IPv6: /126 or
// shorter, a unicast prefix), or a podSubnet that differs from podSubnets' IPv4 entry.
func (c Config) podSubnets() (v4, v6 *net.IPNet, v6First bool, err error) {
	if len(c.PodSubnets) == 0 {
		_, v4, err = net.ParseCIDR(c.PodSubnet)
		if err != nil || v4.IP.To4() == nil {
			return nil, nil, false, fmt.Errorf("config podSubnet %q: want an IPv4 CIDR such as 10.128.0.0/24 (an IPv6-only node sets podSubnets: [IPv6 CIDR])", c.PodSubnet)
		}
		return v4, nil, false, nil
	}
	want := "one IPv4 CIDR and/or one IPv6 CIDR in the order the pods' addresses take, e.g. [10.128.0.0/24, fd00:10:128::/64], [fd00:10:128::/64, 10.128.0.0/24] (IPv6-first) or [fd00:10:128::/64] (IPv6-only)"
	if len(c.PodSubnets) > 2 {
		return nil, nil, false, fmt.Errorf("config podSubnets %q: %d entries; want %s", c.PodSubnets, len(c.PodSubnets), want)
	}
	for i, str := range c.PodSubnets {
		_, n, err := net.ParseCIDR(strings.TrimSpace(str))
		if err != nil {
			return nil, nil, false, fmt.Errorf("config podSubnets %q: entry %q is not a CIDR; want %s", c.PodSubnets, str, want)
		}
		if n.IP.To4() != nil {
			if v4 != nil {
				return nil, nil, false, fmt.Errorf("config podSubnets %q: two IPv4 subnets; want %s", c.PodSubnets, want)
			}
			v4 = n
			continue
		}
		if v6 != nil {
			return nil, nil, false, fmt.Errorf("config podSubnets %q: two IPv6 subnets; want %s", c.PodSubnets, want)
		}
		if ones, _ := n.Mask.Size(); ones > 126 {
			return nil, nil, false, fmt.Errorf("config podSubnets %q: IPv6 prefix /%d leaves no room for pods; use /126 or shorter (a /64 is usual)", c.PodSubnets, ones)
		}
		// A unicast prefix (RFC 4291 §2.4) whose ::1 can be the gateway: not multicast,
		// link-local, unspecified or loopback, nor so short it holds them (::/0).
		if ip := n.IP; ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsLoopback() ||
			n.Contains(net.IPv6loopback) || n.Contains(net.ParseIP("ff00::")) {
			return nil, nil, false, fmt.Errorf("config podSubnets %q: IPv6 entry %v is not a unicast prefix for pods (multicast ff00::/8, link-local fe80::/10, ::/128, ::1 and prefixes holding them are not); use a ULA or global /64 such as fd00:10:128::/64", c.PodSubnets, n)
		}
		v6 = n
		v6First = i == 0 && len(c.PodSubnets) == 2
	}
	// podSubnet given (even as its default value, podSubnetSet), or differing from the
	// default, must be podSubnets' IPv4 entry.
	if c.PodSubnet != "" && (c.podSubnetSet || c.PodSubnet != defaultConfig().PodSubnet) {
		if _, p, err := net.ParseCIDR(c.PodSubnet); err != nil || v4 == nil || p.String() != v4.String() {
			return nil, nil, false, fmt.Errorf("config podSubnet %q and podSubnets %q disagree: leave podSubnet out, or make it podSubnets' IPv4 entry", c.PodSubnet, c.PodSubnets)
		}
	}
	return v4, v6, v6First, nil
}

// ipv6OnlyRanges refuses, on an IPv6-only node (podSubnets one IPv6 CIDR), clusterCIDR
// and serviceCIDR, which are IPv4 ranges and have no use there. The error names the key,
// its value, what is wrong with that value (not a CIDR, an IPv6 range given to an IPv4
// key, or an IPv4 range on a node without IPv4) and the fix; nil when neither is set.
func (c Config) ipv6OnlyRanges() error {
	for _, k := range []struct{ key, value, ipv6Fix string }{
		{"clusterCIDR", c.ClusterCIDR, "set it as clusterCIDRIPv6 (the IPv6 range every node's IPv6 pod subnet is cut from) and leave clusterCIDR out"},
		{"serviceCIDR", c.ServiceCIDR, "leave serviceCIDR out: IPv6 ClusterIPs need no service range here (serviceProxy ofsdn load-balances them in OVS; with serviceProxy kube-proxy a pod's IPv6 for a ClusterIP goes to the host as off-cluster IPv6 does, with clusterCIDRIPv6)"},
	} {
		if k.value == "" {
			continue
		}
		ip, _, err := net.ParseCIDR(k.value)
		switch {
		case err != nil:
			return fmt.Errorf("config %s %q is not a CIDR, and this node is IPv6-only (podSubnets %q), where %s (an IPv4 range) does not apply: leave %s out", k.key, k.value, c.PodSubnets, k.key, k.key)
		case ip.To4() == nil:
			return fmt.Errorf("config %s %q is an IPv6 range, but %s takes only an IPv4 range and this node is IPv6-only (podSubnets %q): %s", k.key, k.value, k.key, c.PodSubnets, k.ipv6Fix)
		default:
			return fmt.Errorf("config %s %q is an IPv4 range, but this node is IPv6-only (podSubnets %q, no IPv4 pod subnet): leave %s out, or add an IPv4 pod subnet to podSubnets (a dual-stack node)", k.key, k.value, c.PodSubnets, k.key)
		}
	}
	return nil
}

func (c Config) validate() error {
	n, v6, _, err := c.podSubnets()
	if err != nil {
		return err
	}
	if n == nil {
		if err := c.ipv6OnlyRanges(); err != nil {
			return err
		}
	}
	if n == nil {
		// IPv6-only: checked above.
	} else if ones, _ := n.Mask.Size(); ones > 30 {
		return fmt.Errorf("config podSubnet %q: prefix /%d leaves no room for pods; use /30 or shorter", n, ones)
	}
	if c.DatapathType != "system" && c.DatapathType != "netdev" && c.DatapathType != "auto" {
		return fmt.Errorf("config datapathType %q: want system, netdev or auto", c.DatapathType)
	}
	if len(c.UnderlayBridge) > 15 || c.UnderlayBridge != "" && c.UnderlayBridge == c.Bridge {
		return fmt.Errorf("config underlayBridge %q: want a bridge name of at most 15 bytes other than bridge %q", c.UnderlayBridge, c.Bridge)
	}
	if c.OVS != "host" && c.OVS != "bundled" {
		return fmt.Errorf("config ovs %q: want host (Open vSwitch managed on the node) or bundled (run by the DaemonSet's ovs container)", c.OVS)
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 9000) {
		return fmt.Errorf("config mtu %d: want 576..9000 bytes, or 0 for automatic", c.MTU)
	}
	switch c.Topology {
	case "", "kubernetes":
	case "file":
		if c.TopologyFile == "" {
			return fmt.Errorf("config topology file: set topologyFile to the topology's path")
		}
	default:
		return fmt.Errorf("config topology %q: want \"\", file or kubernetes", c.Topology)
	}
	for _, k := range []struct{ key, value, example string }{
		{"clusterCIDR", c.ClusterCIDR, "10.244.0.0/16 (an IPv6 cluster range goes in clusterCIDRIPv6)"},
		{"serviceCIDR", c.ServiceCIDR, "10.96.0.0/12, the IPv4 service range (there is no key for an IPv6 one)"},
	} {
		if k.value == "" {
			continue
		}
		if ip, _, err := net.ParseCIDR(k.value); err != nil || ip.To4() == nil {
			return fmt.Errorf("config %s %q: want an IPv4 CIDR such as %s", k.key, k.value, k.example)
		}
	}
	if v := c.ClusterCIDRIPv6; v != "" {
		ip, n, err := net.ParseCIDR(v)
		if err != nil || ip.To4() != nil || n.Mask[0] == 0 {
			return fmt.Errorf("config clusterCIDRIPv6 %q: want an IPv6 CIDR such as fd00:10:244::/56", v)
		}
		if v6 != nil && !n.Contains(v6.IP) {
			return fmt.Errorf("config clusterCIDRIPv6 %q does not contain the IPv6 pod subnet %v: set it to the range every node's IPv6 subnet is cut from", v, v6)
		}
	}
	if c.NodeIP != "" {
		if ip := net.ParseIP(c.NodeIP); ip == nil || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsLoopback() {
			return fmt.Errorf("config nodeIP %q: want a unicast IPv4 or IPv6 address of this node (IPv6: the tunnels run over an IPv6 underlay)", c.NodeIP)
		}
	}
	if c.TunnelType != "vxlan" && c.TunnelType != "geneve" {
		return fmt.Errorf("config tunnelType %q: want vxlan or geneve", c.TunnelType)
	}
	if c.TunnelPort < 0 || c.TunnelPort > 65535 {
		return fmt.Errorf("config tunnelPort %d: want 1..65535, or 0 for the default", c.TunnelPort)
	}
	if len(c.Gateway) > 15 || c.Gateway == "" {
		return fmt.Errorf("config gateway %q: want a link name of 1..15 bytes", c.Gateway)
	}
	if _, err := time.ParseDuration(c.StartTimeout); err != nil {
		return fmt.Errorf("config startTimeout %q: want a duration such as 60s", c.StartTimeout)
	}
	if c.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			return fmt.Errorf("config metricsAddress %q: want host:port such as 127.0.0.1:9469 or :9469", c.MetricsAddress)
		}
	}
	if c.CtlSocket != "" && (!filepath.IsAbs(c.CtlSocket) || c.CtlSocket == c.Socket) {
		return fmt.Errorf("config ctlSocket %q: want an absolute path other than the CNI socket, e.g. /var/run/ofsdn/ctl.sock", c.CtlSocket)
	}
	if d, err := time.ParseDuration(c.AddTimeout); err != nil || d <= 0 || d >= cni.DefaultTimeout {
		return fmt.Errorf("config addTimeout %q: want a duration above 0 and below the plugin's %s, such as 60s", c.AddTimeout, cni.DefaultTimeout)
	}
	if d, err := time.ParseDuration(c.FlowAuditInterval); err != nil || d < 0 || (d > 0 && d < 100*time.Millisecond) {
		return fmt.Errorf("config flowAuditInterval %q: want a duration of 100ms or more such as 30s, or 0 to turn the audit off", c.FlowAuditInterval)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("config logFormat %q: want text or json", c.LogFormat)
	}
	if c.policyOn() && c.Topology != "kubernetes" {
		return fmt.Errorf("config networkPolicy: NetworkPolicy needs the Kubernetes API; set topology: kubernetes, or networkPolicy: false")
	}
	if c.ServiceAffinityLearnMax < 0 || c.ServiceAffinityLearnMax > 65535 {
		return fmt.Errorf("config serviceAffinityLearnMax %d: want 0 (= 65535) or 1..65535 seconds", c.ServiceAffinityLearnMax)
	}
	if c.PolicyDenyLogRate < 1 || c.PolicyDenyLogRate > 1000000 {
		return fmt.Errorf("config policyDenyLogRate %d: want 1..1000000 packets per second", c.PolicyDenyLogRate)
	}
	if c.PolicyDenyLog && !c.policyOn() {
		return fmt.Errorf("config policyDenyLog: the deny log needs NetworkPolicy enforcement (topology: kubernetes with networkPolicy on); turn policyDenyLog off or enable NetworkPolicy")
	}
	switch c.ServiceProxy {
	case "", serviceProxyKube:
	case serviceProxyOFSDN:
		if c.Topology != "kubernetes" {
			return fmt.Errorf("config serviceProxy ofsdn: the Service proxy needs the Kubernetes API; set topology: kubernetes, or serviceProxy: kube-proxy")
		}
	default:
		return fmt.Errorf("config serviceProxy %q: want kube-proxy or ofsdn", c.ServiceProxy)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(c.LogLevel))); err != nil {
		return fmt.Errorf("config logLevel %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}
