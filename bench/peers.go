package bench

// Modes driven through libcni like ofsdn-cni but running someone else's plugin: the
// do-nothing plugin (the plugin path's own floor) and the peers, built at run time from
// the Go module proxy at pinned versions in throw-away modules under the output directory
// (nothing of theirs is kept in this repository).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// Pinned peer versions. The proxy refuses to list ovs-cni's versions (403) but serves
// this one when asked by number.
const (
	// OVSCNIModule is k8snetworkplumbingwg/ovs-cni: OVSDB-native (libovsdb), L2 only (no
	// flows of its own: the bridge forwards with NORMAL), IPAM delegated.
	OVSCNIModule = "github.com/k8snetworkplumbingwg/ovs-cni"
	// OVSCNIVersion is the ovs-cni version built (its cmd/plugin, binary "ovs").
	OVSCNIVersion = "v0.39.0"
	// PluginsModule gives host-local, the IPAM plugin ovs-cni delegates to here.
	PluginsModule = "github.com/containernetworking/plugins"
	// PluginsVersion is the containernetworking/plugins version host-local is built from.
	PluginsVersion = "v1.10.0"
	// NoopPlugin is the do-nothing plugin's binary name (bench/cmd/ofsdn-bench-noop,
	// built into the -bin directory by make bench).
	NoopPlugin = "ofsdn-bench-noop"
)

// PeerBuild records how one peer binary was built for this run.
type PeerBuild struct {
	// Name is the binary's name (its CNI type).
	Name string `json:"name"`
	// Module is module@version.
	Module string `json:"module"`
	// Package is the package path built.
	Package string `json:"package"`
	// Seconds is the wall time of `go get` + `go build`.
	Seconds float64 `json:"seconds"`
	// Error is why it could not be built ("" when it was).
	Error string `json:"error,omitempty"`
}

// buildPeer builds pkg of module@version into binDir/name from a throw-away module in
// workDir/name (go.mod created here, `go get`, `go build`), with the go command on PATH.
func buildPeer(ctx context.Context, workDir, binDir, name, module, ver, pkg string) (pb PeerBuild) {
	pb = PeerBuild{Name: name, Module: module + "@" + ver, Package: pkg}
	t0 := time.Now()
	defer func() { pb.Seconds = time.Since(t0).Seconds() }()
	dir := filepath.Join(workDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		pb.Error = err.Error()
		return pb
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module ofsdn.invalid/bench-peer/"+name+"\n\ngo 1.22\n"), 0o644); err != nil {
		pb.Error = err.Error()
		return pb
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "GOTOOLCHAIN=local")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s (in %s): %v: %s", strings.Join(args, " "), dir, err, tail(strings.TrimSpace(out.String()), 1500))
		}
		return nil
	}
	if err := run("get", module+"@"+ver); err != nil {
		pb.Error = err.Error()
		return pb
	}
	if err := run("build", "-o", filepath.Join(binDir, name), pkg); err != nil {
		pb.Error = err.Error()
	}
	return pb
}

// pluginMode runs a CNI plugin through libcni on a private OVS, like ofsdn-cni but with
// no daemon of ours.
type pluginMode struct {
	name    string
	sb      *Sandbox
	cni     *libcni.CNIConfig
	netconf *libcni.NetworkConfigList
	fill    bool // Fill calls Add (false: Fill does nothing, for the noop plugin)
	// cacheDir, when set, is where the plugin keeps a file per attachment named
	// "<container ID>-<ifname>"; Close removes those of attachments never deleted.
	cacheDir string
	mu       sync.Mutex
	live     map[string]bool // attachments added and not deleted
}

func newPluginMode(name string, sb *Sandbox, binDirs []string, conf string, log *stepLog, fill bool) (*pluginMode, error) {
	nc, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		return nil, fmt.Errorf("%s netconf: %w", name, err)
	}
	// The peers log every call to stderr; their errors reach us on stdout (CNI error JSON).
	exe := &timedExec{DefaultExec: invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: io.Discard}, PluginDecoder: version.PluginDecoder{}},
		log: log, mode: name}
	return &pluginMode{name: name, sb: sb, netconf: nc, fill: fill, live: map[string]bool{},
		cni: libcni.NewCNIConfigWithCacheDir(binDirs, filepath.Join(sb.Dir, "cni-cache"), exe)}, nil
}

func (m *pluginMode) Name() string      { return m.name }
func (m *pluginMode) Sandbox() *Sandbox { return m.sb }

// Close stops the sandbox (and with it every port and host veth) and removes the
// plugin's cache files of the attachments still live (the filler pods).
func (m *pluginMode) Close() {
	m.sb.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cacheDir != "" {
		for k := range m.live {
			_ = os.Remove(filepath.Join(m.cacheDir, k))
		}
	}
	m.live = map[string]bool{}
}

func (m *pluginMode) track(p Pod, live bool) {
	m.mu.Lock()
	if live {
		m.live[p.ContainerID+"-"+p.IfName] = true
	} else {
		delete(m.live, p.ContainerID+"-"+p.IfName)
	}
	m.mu.Unlock()
}

func (m *pluginMode) rt(p Pod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.ContainerID, NetNS: p.Netns, IfName: p.IfName,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", p.Name}}}
}

func (m *pluginMode) Add(ctx context.Context, p Pod) error {
	m.track(p, true)
	_, err := m.cni.AddNetworkList(ctx, m.netconf, m.rt(p))
	return err
}

func (m *pluginMode) Del(ctx context.Context, p Pod) error {
	err := m.cni.DelNetworkList(ctx, m.netconf, m.rt(p))
	if err == nil {
		m.track(p, false)
	}
	return err
}

func (m *pluginMode) Fill(ctx context.Context, p Pod) error {
	if !m.fill {
		return nil
	}
	return m.Add(ctx, p)
}

// newNoop is the do-nothing plugin (bench/cmd/ofsdn-bench-noop) exec'd by libcni exactly as
// ofsdn-cni's plugin is: what a runtime pays for any plugin. Its sandbox only gives it a
// node namespace to run in, like the others.
func newNoop(sb *Sandbox, binDir string, log *stepLog) (*pluginMode, error) {
	if !exists(filepath.Join(binDir, NoopPlugin)) {
		return nil, fmt.Errorf("%s not found in %s: run make bench (it builds bench/cmd/%s)", NoopPlugin, binDir, NoopPlugin)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"noop-bench","plugins":[{"type":%q}]}`, NoopPlugin)
	return newPluginMode(ModeNoop, sb, []string{binDir}, conf, log, false)
}

// newOVSCNI is ovs-cni with host-local IPAM on its own private OVS: a netdev bridge made
// with ovs-vsctl (as its users do), the plugin exec'd by libcni in the node namespace,
// talking OVSDB to the sandbox's ovsdb-server. host-local keeps its leases under the
// sandbox directory; ovs-cni keeps its per-attachment cache where it always does
// (/var/lib/cni/ovs-cni/cache, one file per container ID, removed by its DEL).
func newOVSCNI(ctx context.Context, sb *Sandbox, subnet *net.IPNet, peerBin string, log *stepLog) (*pluginMode, error) {
	for _, b := range []string{"ovs", "host-local"} {
		if !exists(filepath.Join(peerBin, b)) {
			return nil, fmt.Errorf("peer plugin %s was not built (see the peer build errors)", b)
		}
	}
	cmd := exec.CommandContext(ctx, "ovs-vsctl", "--db="+sb.Endpoint(), "--timeout=30", "add-br", benchBridge,
		"--", "set", "Bridge", benchBridge, "datapath_type=netdev")
	cmd.Env = sb.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ovs-cni: create bridge: %v: %s", err, out)
	}
	gw := nthIP(subnet, 1)
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ovs-cni-bench","plugins":[{"type":"ovs","bridge":%q,`+
		`"socket_file":%q,"mtu":%d,"ipam":{"type":"host-local","subnet":%q,"gateway":%q,"dataDir":%q,`+
		`"routes":[{"dst":"0.0.0.0/0"}]}}]}`,
		benchBridge, sb.Endpoint(), benchMTU, subnet.String(), gw.String(), filepath.Join(sb.Dir, "host-local"))
	m, err := newPluginMode(ModeOVSCNI, sb, []string{peerBin}, conf, log, true)
	if err != nil {
		return nil, err
	}
	m.cacheDir = "/var/lib/cni/ovs-cni/cache"
	return m, nil
}
