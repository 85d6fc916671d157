package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigDefaultsRunAsTheyAre(t *testing.T) {
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if cfg.Bridge != "br-int" || cfg.Gateway != "ofsdn-gw0" || cfg.DatapathType != "system" || cfg.Socket != "/var/run/ofsdn/cni.sock" ||
		cfg.FlowAuditInterval != "30s" {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
}

func TestConfigFileThenFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ofsdn.yaml")
	yaml := "podSubnet: 10.200.3.0/24\ndatapathType: netdev\nmtu: 1400\nbridge: br-file\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"-config", file, "-bridge", "br-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PodSubnet != "10.200.3.0/24" || cfg.DatapathType != "netdev" || cfg.MTU != 1400 {
		t.Errorf("file values not applied: %+v", cfg)
	}
	if cfg.Bridge != "br-flag" {
		t.Errorf("explicit flag must win over the file: bridge=%q", cfg.Bridge)
	}
	if cfg.Gateway != "ofsdn-gw0" {
		t.Errorf("keys absent from file and flags keep their defaults: gateway=%q", cfg.Gateway)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct {
		args []string
		file string
		want string
	}{
		"bad subnet":            {args: []string{"-pod-subnet", "10.0.0.0"}, want: "podSubnet"},
		"ipv6 subnet":           {args: []string{"-pod-subnet", "fd00::/64"}, want: "podSubnet"},
		"tiny subnet":           {args: []string{"-pod-subnet", "10.0.0.0/31"}, want: "podSubnet"},
		"bad datapath":          {args: []string{"-datapath-type", "dpdk"}, want: "datapathType"},
		"bad mtu":               {args: []string{"-mtu", "100"}, want: "mtu"},
		"long gateway":          {args: []string{"-gateway", "a-very-long-gateway-name"}, want: "gateway"},
		"unknown file key":      {file: "podSubnet: 10.1.0.0/24\nbirdge: x\n", want: "birdge"},
		"JSON file":             {file: `{"mtu": 70000}`, want: "mtu"},
		"missing file":          {args: []string{"-config", filepath.Join(dir, "absent.yaml")}, want: "absent.yaml"},
		"bad start timeout":     {args: []string{"-start-timeout", "soon"}, want: "startTimeout"},
		"stray argument":        {args: []string{"-bridge", "br-x", "extra"}, want: `unexpected argument "extra"`},
		"bad audit period":      {args: []string{"-flow-audit-interval", "often"}, want: "flowAuditInterval"},
		"tiny audit period":     {args: []string{"-flow-audit-interval", "1ms"}, want: "flowAuditInterval"},
		"bad log level":         {args: []string{"-log-level", "bogus"}, want: "logLevel"},
		"deny log, no policy":   {args: []string{"-policy-deny-log"}, want: "policyDenyLog"},
		"deny log rate 0":       {args: []string{"-policy-deny-log-rate", "0"}, want: "policyDenyLogRate"},
		"service proxy, no API": {args: []string{"-service-proxy", "ofsdn"}, want: "serviceProxy ofsdn"},
		"bad service proxy":     {args: []string{"-topology", "kubernetes", "-service-proxy", "iptables"}, want: "serviceProxy"},
		"bad ovs":               {file: "ovs: container\n", want: "config ovs \"container\""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				f := filepath.Join(t.TempDir(), "c.yaml")
				if err := os.WriteFile(f, []byte(c.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append([]string{"-config", f}, args...)
			}
			_, err := loadConfig(args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error naming %q, got %v", c.want, err)
			}
		})
	}
}

// TestConfigPodSubnets: podSubnets makes a dual-stack node (IPv4 first); today's configs
// with podSubnet alone work unchanged; NetworkPolicy with IPv6 is refused.
func TestConfigPodSubnets(t *testing.T) {
	cfg, err := loadConfig([]string{"-pod-subnets", "10.200.3.0/24,fd00:10:200:3::/64", "-data-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	v4, v6, first, err := cfg.podSubnets()
	if err != nil || v4.String() != "10.200.3.0/24" || v6.String() != "fd00:10:200:3::/64" || first {
		t.Fatalf("podSubnets() = %v, %v, %v, %v", v4, v6, first, err)
	}
	if _, err := loadConfig([]string{"-pod-subnets", "10.200.3.0/24,fd00:10:200:3::/64", "-cluster-cidr-ipv6", "fd00:10:200::/56"}); err != nil {
		t.Fatalf("IPv6 cluster CIDR: %v", err)
	}
	cfg, err = loadConfig([]string{"-pod-subnet", "10.200.4.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	if v4, v6, _, err := cfg.podSubnets(); err != nil || v4.String() != "10.200.4.0/24" || v6 != nil {
		t.Fatalf("IPv4-only: podSubnets() = %v, %v, %v", v4, v6, err)
	}
	// NetworkPolicy (on by default with the Kubernetes topology) and its deny log on a
	// dual-stack node: both families are policed (issue 23).
	if cfg, err := loadConfig([]string{"-pod-subnets", "10.0.0.0/24,fd00::/64", "-topology", "kubernetes", "-policy-deny-log"}); err != nil || !cfg.policyOn() {
		t.Fatalf("dual-stack with NetworkPolicy: policy on %v, %v", err == nil && cfg.policyOn(), err)
	}
	// And on an IPv6-only node, with the Service proxy: IPv6 alone is policed and
	// load-balanced (issue 23).
	if cfg, err := loadConfig([]string{"-pod-subnets", "fd00::/64", "-topology", "kubernetes", "-policy-deny-log", "-service-proxy", "ofsdn"}); err != nil || !cfg.policyOn() || !cfg.servicesOn() {
		t.Fatalf("IPv6-only with NetworkPolicy and the Service proxy: policy on %v, services on %v, %v", err == nil && cfg.policyOn(), err == nil && cfg.servicesOn(), err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-pod-subnets", "fd00::/64,fd01::/64"}, "two IPv6 subnets"},
		{[]string{"-pod-subnets", "fd00::/64", "-cluster-cidr", "10.0.0.0/8"}, `config clusterCIDR "10.0.0.0/8" is an IPv4 range, but this node is IPv6-only`},
		{[]string{"-pod-subnets", "fd00::/64", "-pod-subnet", "10.0.0.0/24"}, "disagree"},
		{[]string{"-pod-subnets", "fd00::/64", "-node-ip", "fe80::1"}, "config nodeIP"},
		{[]string{"-pod-subnets", "10.0.0.0/24,10.1.0.0/24"}, "two IPv4 subnets"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fd00::/64,fd01::/64"}, "3 entries"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fd00::/127"}, "/126 or shorter"},
		{[]string{"-pod-subnets", "10.0.0.0/24,ff05::/64"}, "not a unicast prefix"},
		{[]string{"-pod-subnets", "10.0.0.0/24,::/0"}, "not a unicast prefix"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fe80::/64"}, "not a unicast prefix"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fc00::/6"}, "not a unicast prefix"},
		{[]string{"-pod-subnet", "10.9.0.0/24", "-pod-subnets", "10.0.0.0/24,fd00::/64"}, "disagree"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fd00:1::/64", "-cluster-cidr-ipv6", "10.0.0.0/8"}, "config clusterCIDRIPv6 \"10.0.0.0/8\": want an IPv6 CIDR"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fd00:1::/64", "-cluster-cidr-ipv6", "::/0"}, "want an IPv6 CIDR"},
		{[]string{"-pod-subnets", "10.0.0.0/24,fd00:1::/64", "-cluster-cidr-ipv6", "fd00:2::/48"}, "does not contain the IPv6 pod subnet fd00:1::/64"},
	} {
		if _, err := loadConfig(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestConfigPodSubnetAtDefaultChecked: a podSubnet given in the file or as a flag is
// checked against podSubnets even when it equals podSubnet's default (10.128.0.0/24):
// disagreeing, it is refused naming both keys, as any other value is; podSubnets alone
// (podSubnet left out, at its default) is not.
func TestConfigPodSubnetAtDefaultChecked(t *testing.T) {
	def := defaultConfig().PodSubnet
	file := func(body string) []string {
		f := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"-config", f}
	}
	for _, c := range []struct {
		name     string
		args     []string
		disagree bool
	}{
		{"file, IPv6-only podSubnets", file("podSubnet: " + def + "\npodSubnets: [fd00:10:128::/64]\n"), true},
		{"file, other IPv4 entry", file("podSubnet: " + def + "\npodSubnets: [10.9.0.0/24, fd00:10:128::/64]\n"), true},
		{"flag, other IPv4 entry", []string{"-pod-subnet", def, "-pod-subnets", "10.9.0.0/24,fd00:10:128::/64"}, true},
		{"flag over a file's podSubnets", append(file("podSubnets: [fd00:10:128::/64]\n"), "-pod-subnet", def), true},
		{"file, the IPv4 entry", file("podSubnet: " + def + "\npodSubnets: [" + def + ", fd00:10:128::/64]\n"), false},
		{"flag, the IPv4 entry", []string{"-pod-subnet", def, "-pod-subnets", def + ",fd00:10:128::/64"}, false},
		{"podSubnets alone", file("podSubnets: [fd00:10:128::/64]\n"), false},
		{"podSubnet alone, the default", file("podSubnet: " + def + "\n"), false},
	} {
		_, err := loadConfig(c.args)
		if !c.disagree {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), `config podSubnet "`+def+`" and podSubnets [`) || !strings.Contains(err.Error(), "disagree") {
			t.Errorf("%s: %v; want the disagreement refused naming podSubnet %s and podSubnets", c.name, err, def)
		}
	}
}

// TestConfigIPv6OnlyRangesRefused: on an IPv6-only node clusterCIDR and serviceCIDR (IPv4
// ranges) are refused with a message that names the key and the value given, says what is
// wrong with that value (an IPv6 value is not called IPv4) and gives the fix.
func TestConfigIPv6OnlyRangesRefused(t *testing.T) {
	for _, c := range []struct {
		key, flag, value string
		want             []string
	}{
		{"serviceCIDR", "-service-cidr", "fd00:10:96::/112", []string{`config serviceCIDR "fd00:10:96::/112" is an IPv6 range`, "takes only an IPv4 range", "leave serviceCIDR out"}},
		{"serviceCIDR", "-service-cidr", "10.96.0.0/12", []string{`config serviceCIDR "10.96.0.0/12" is an IPv4 range`, "IPv6-only", "leave serviceCIDR out, or add an IPv4 pod subnet"}},
		{"serviceCIDR", "-service-cidr", "services", []string{`config serviceCIDR "services" is not a CIDR`, "leave serviceCIDR out"}},
		{"clusterCIDR", "-cluster-cidr", "fd00:10:244::/56", []string{`config clusterCIDR "fd00:10:244::/56" is an IPv6 range`, "set it as clusterCIDRIPv6"}},
		{"clusterCIDR", "-cluster-cidr", "10.244.0.0/16", []string{`config clusterCIDR "10.244.0.0/16" is an IPv4 range`, "leave clusterCIDR out"}},
	} {
		_, err := loadConfig([]string{"-pod-subnets", "fd00:10:128::/64", c.flag, c.value})
		if err == nil {
			t.Errorf("%s %s on an IPv6-only node: accepted", c.key, c.value)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: error %q does not say %q", c.key, c.value, err, w)
			}
		}
		// Only the key given is named, and an IPv6 value is never called IPv4.
		other := map[string]string{"serviceCIDR": "clusterCIDR ", "clusterCIDR": "serviceCIDR "}[c.key]
		if strings.Contains(err.Error(), other) || (!strings.Contains(c.value, ".") && strings.Contains(err.Error(), "is an IPv4")) {
			t.Errorf("%s %s: error %q names the wrong key or family", c.key, c.value, err)
		}
	}
	// A dual-stack node's IPv6 serviceCIDR: the key takes the IPv4 range only.
	if _, err := loadConfig([]string{"-pod-subnets", "10.128.0.0/24,fd00:10:128::/64", "-service-cidr", "fd00:10:96::/112"}); err == nil ||
		!strings.Contains(err.Error(), `config serviceCIDR "fd00:10:96::/112": want an IPv4 CIDR such as 10.96.0.0/12`) {
		t.Errorf("dual-stack, IPv6 serviceCIDR: %v", err)
	}
}

// TestConfigIPv6OnlyAndFirst: podSubnets of one IPv6 CIDR makes an IPv6-only node (no
// IPv4 subnet), an IPv6 CIDR listed first an IPv6-first one; nodeIP may be IPv6 (an
// IPv6 underlay).
func TestConfigIPv6OnlyAndFirst(t *testing.T) {
	cfg, err := loadConfig([]string{"-pod-subnets", "fd00:10:200:3::/64", "-node-ip", "fd00:172:16::1", "-data-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if v4, v6, first, err := cfg.podSubnets(); err != nil || v4 != nil || v6.String() != "fd00:10:200:3::/64" || first {
		t.Fatalf("IPv6-only: podSubnets() = %v, %v, %v, %v", v4, v6, first, err)
	}
	cfg, err = loadConfig([]string{"-pod-subnets", "fd00:10:200:3::/64,10.200.3.0/24", "-data-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if v4, v6, first, err := cfg.podSubnets(); err != nil || v4.String() != "10.200.3.0/24" || v6.String() != "fd00:10:200:3::/64" || !first {
		t.Fatalf("IPv6-first: podSubnets() = %v, %v, %v, %v", v4, v6, first, err)
	}
}

// TestConfigServiceProxyDefault: with the Kubernetes topology ofsdn load-balances
// Services unless serviceProxy says kube-proxy; without it (no API to watch) kube-proxy
// does, and an explicit ofsdn is refused (TestConfigErrorsNameTheKey).
func TestConfigServiceProxyDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-topology", "kubernetes"}, true},
		{[]string{"-topology", "kubernetes", "-service-proxy", "ofsdn"}, true},
		{[]string{"-topology", "kubernetes", "-service-proxy", "kube-proxy"}, false},
		{nil, false},
		{[]string{"-service-proxy", "kube-proxy"}, false},
	} {
		cfg, err := loadConfig(c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := cfg.servicesOn(); got != c.want {
			t.Errorf("%v: Services in OVS %v, want %v", c.args, got, c.want)
		}
	}
}

// TestConfigOVSBundledAuto: the DaemonSet's keys for Open vSwitch in the pod (issue 25)
// load: ovs bundled, datapathType auto; ovs defaults to host.
func TestConfigOVSBundledAuto(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte("ovs: bundled\ndatapathType: auto\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"-config", f})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OVS != "bundled" || cfg.DatapathType != "auto" {
		t.Errorf("ovs %q, datapathType %q; want bundled, auto", cfg.OVS, cfg.DatapathType)
	}
	if cfg, err = loadConfig(nil); err != nil || cfg.OVS != "host" {
		t.Errorf("default ovs %q (%v), want host", cfg.OVS, err)
	}
}

// TestClusterKeysSet: the keys a node without a topology ignores (and warns of at start)
// are exactly those of the cluster settings that the config sets.
func TestClusterKeysSet(t *testing.T) {
	on := true
	if got := clusterKeysSet(Config{}); len(got) != 0 {
		t.Errorf("no keys set: %v", got)
	}
	got := clusterKeysSet(Config{ClusterCIDR: "10.128.0.0/16", ClusterCIDRIPv6: "fd00:10::/32", NodeIP: "172.16.0.1", Masquerade: &on})
	if want := "clusterCIDR,clusterCIDRIPv6,nodeIP,masquerade"; strings.Join(got, ",") != want {
		t.Errorf("clusterKeysSet = %v, want %s", got, want)
	}
}

// TestPodSubnetKeysSet: the pod subnet keys a topology replaces are named when the config
// sets them (podSubnet even at its default value), and only then.
func TestPodSubnetKeysSet(t *testing.T) {
	if got := podSubnetKeysSet(defaultConfig()); len(got) != 0 {
		t.Errorf("defaults: %v, want none", got)
	}
	cfg := defaultConfig()
	cfg.podSubnetSet, cfg.PodSubnets = true, []string{"10.128.0.0/24", "fd00:10:128::/64"}
	if got := strings.Join(podSubnetKeysSet(cfg), ","); got != "podSubnet,podSubnets" {
		t.Errorf("both set: %q, want podSubnet,podSubnets", got)
	}
}
