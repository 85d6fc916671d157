package bench

// The modes: four ways of wiring the same pod, each on its own private OVS.

import (
	"bytes"
	"context"
	"fmt"
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

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

// Mode names, in the order tables list them.
const (
	ModeFull        = "ofsdn-cni"     // plugin binary through libcni → ofsdn-node
	ModeInDaemon    = "ofsdn-daemon"  // controller.Node.AddPod in-process
	ModeFloor       = "floor"         // the unavoidable steps only
	ModeShellFlows  = "shell-addflow" // ovs-vsctl + one ovs-ofctl add-flow per flow
	ModeShellBundle = "shell-bundle"  // ovs-vsctl + one ovs-ofctl bundle per pod
	ModeNoop        = "noop-cni"      // a plugin that does nothing, exec'd by libcni
	ModeOVSCNI      = "ovs-cni"       // k8snetworkplumbingwg/ovs-cni + host-local, through libcni
	// ModeFullDualStack and ModeInDaemonDualStack are ModeFull and ModeInDaemon on a
	// dual-stack node (pod subnets IPv4 and IPv6): every pod gets one address of each
	// family (issue 23: the second address must not cost more than 20% of an ADD).
	ModeFullDualStack     = "ofsdn-cni-dualstack"
	ModeInDaemonDualStack = "ofsdn-daemon-dualstack"
)

// AllModes lists every mode in table order.
var AllModes = []string{ModeFull, ModeInDaemon, ModeFloor, ModeShellFlows, ModeShellBundle, ModeNoop, ModeOVSCNI,
	ModeFullDualStack, ModeInDaemonDualStack}

// Pod is one pod interface to wire: what a CNI request carries.
type Pod struct {
	// ContainerID is CNI_CONTAINERID, unique per pod in the run.
	ContainerID string
	// IfName is CNI_IFNAME ("eth0" for measured pods; fillers share a namespace and use
	// "f0", "f1", ...).
	IfName string
	// Netns is CNI_NETNS, the path of the pod's network namespace.
	Netns string
	// Name is K8S_POD_NAME.
	Name string
}

// Mode wires pods one way. Add and Del run on a goroutine locked into NodeNetns.
type Mode interface {
	// Name is one of the Mode* constants.
	Name() string
	// Sandbox is the mode's private OVS.
	Sandbox() *Sandbox
	// Add wires p (CNI ADD).
	Add(ctx context.Context, p Pod) error
	// Del unwires p (CNI DEL).
	Del(ctx context.Context, p Pod) error
	// Fill puts p on the bridge the cheapest way that leaves the mode's state consistent
	// (for the daemon modes that is Add itself); it is not timed.
	Fill(ctx context.Context, p Pod) error
	// Close stops the mode's processes and its sandbox.
	Close()
}

// stepLog collects per-step durations of ADDs by mode and phase.
type stepLog struct {
	mu    sync.Mutex
	phase string
	d     map[string]map[string][]time.Duration // "mode/phase" → step → durations
}

func (s *stepLog) setPhase(p string) { s.mu.Lock(); s.phase = p; s.mu.Unlock() }

func (s *stepLog) add(mode, step string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		s.d = map[string]map[string][]time.Duration{}
	}
	k := mode + "/" + s.phase
	if s.d[k] == nil {
		s.d[k] = map[string][]time.Duration{}
	}
	s.d[k][step] = append(s.d[k][step], d)
}

// timer returns a function that records the time since the previous call under a step name.
func (s *stepLog) timer(mode string) func(string) {
	last := time.Now()
	return func(step string) {
		now := time.Now()
		s.add(mode, step, now.Sub(last))
		last = now
	}
}

// ---- floor ----

type floorMode struct {
	sb   *Sandbox
	n    *plainNode
	ips  ipPool
	log  *stepLog
	mu   sync.Mutex
	pods map[string]net.IP
}

func newFloor(ctx context.Context, sb *Sandbox, subnet *net.IPNet, log *stepLog) (*floorMode, error) {
	n, err := newPlainNode(ctx, sb, subnet)
	if err != nil {
		return nil, err
	}
	return &floorMode{sb: sb, n: n, ips: ipPool{subnet: subnet}, log: log, pods: map[string]net.IP{}}, nil
}

func (m *floorMode) Name() string      { return ModeFloor }
func (m *floorMode) Sandbox() *Sandbox { return m.sb }
func (m *floorMode) Close()            { m.n.close(); m.sb.Stop() }

func (m *floorMode) Add(ctx context.Context, p Pod) error {
	step := m.log.timer(ModeFloor)
	ip, err := m.ips.get()
	if err != nil {
		return err
	}
	if _, err := m.n.wire(ctx, p, ip, step); err != nil {
		return err
	}
	m.mu.Lock()
	m.pods[p.ContainerID] = ip.IP
	m.mu.Unlock()
	return nil
}

func (m *floorMode) Fill(ctx context.Context, p Pod) error { return m.Add(ctx, p) }

func (m *floorMode) Del(ctx context.Context, p Pod) error {
	m.mu.Lock()
	ip := m.pods[p.ContainerID]
	delete(m.pods, p.ContainerID)
	m.mu.Unlock()
	if ip == nil {
		return fmt.Errorf("floor: DEL of unknown pod %s", p.ContainerID)
	}
	if err := m.n.unwire(ctx, p, ip, m.log.timer(ModeFloor)); err != nil {
		return err
	}
	m.ips.put(ip)
	return nil
}

// ---- shell-out baseline ----

// shellMode wires pods as OpenShift SDN did: IPAM and the veth exactly as ofsdn does
// (ipam, podnet), then `ovs-vsctl add-port` (which waits for ovs-vswitchd to apply
// the change) and `ovs-vsctl get Interface ofport`, then the pod's flows with one
// `ovs-ofctl add-flow` exec per flow (bundle=false) or one `ovs-ofctl bundle` exec per pod
// with the flows on stdin (bundle=true, as its later transaction code did). ovs-ofctl runs
// with --no-names and flows use table numbers: without it, OVS 2.8+ ovs-ofctl fetches the
// switch's table features (about 1 MB over OpenFlow 1.3) on every exec to resolve names,
// which roughly triples each exec's cost; the baseline should be the fastest honest one.
type shellMode struct {
	name   string
	bundle bool
	sb     *Sandbox
	n      *plainNode
	ipam   *ipam.Store
	log    *stepLog
}

func newShell(ctx context.Context, sb *Sandbox, subnet *net.IPNet, bundle bool, log *stepLog) (*shellMode, error) {
	n, err := newPlainNode(ctx, sb, subnet)
	if err != nil {
		return nil, err
	}
	store, err := ipam.Open(filepath.Join(sb.Dir, "data"), []*net.IPNet{subnet}, n.cfg.GatewayIP)
	if err != nil {
		n.close()
		return nil, err
	}
	name := ModeShellFlows
	if bundle {
		name = ModeShellBundle
	}
	return &shellMode{name: name, bundle: bundle, sb: sb, n: n, ipam: store, log: log}, nil
}

func (m *shellMode) Name() string      { return m.name }
func (m *shellMode) Sandbox() *Sandbox { return m.sb }
func (m *shellMode) Close()            { _ = m.ipam.Close(); m.n.close(); m.sb.Stop() }

func (m *shellMode) run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = m.sb.Env()
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (m *shellMode) vsctl(ctx context.Context, args ...string) (string, error) {
	return m.run(ctx, "", "ovs-vsctl", append([]string{"--db=" + m.sb.Endpoint(), "--timeout=60"}, args...)...)
}

func (m *shellMode) ofctl(ctx context.Context, stdin string, args ...string) error {
	_, err := m.run(ctx, stdin, "ovs-ofctl", append([]string{"--no-names", "-O", "OpenFlow13"}, args...)...)
	return err
}

func (m *shellMode) Add(ctx context.Context, p Pod) error {
	step := m.log.timer(m.name)
	ips, err := m.ipam.Allocate(p.ContainerID, p.IfName, "bench/"+p.Name)
	step("ipam")
	if err != nil {
		return err
	}
	addr := &net.IPNet{IP: ips[0].To4(), Mask: m.n.subnet.Mask} // one IPv4 pool
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	res, err := podnet.Setup(podnet.Spec{Netns: p.Netns, IfName: p.IfName, HostVeth: hostVeth, MTU: benchMTU,
		Addr: addr, Gateway: m.n.cfg.GatewayIP, DisableTxChecksum: true})
	step("veth")
	if err != nil {
		return err
	}
	args := []string{"add-port", benchBridge, hostVeth, "--", "set", "Interface", hostVeth}
	for k, v := range podExternalIDs(p, addr, res.ContainerMAC) {
		args = append(args, fmt.Sprintf("external_ids:%s=%q", k, v))
	}
	if _, err := m.vsctl(ctx, args...); err != nil {
		return err
	}
	step("vsctl add-port")
	out, err := m.vsctl(ctx, "get", "Interface", hostVeth, "ofport")
	step("vsctl get ofport")
	if err != nil {
		return err
	}
	var ofport uint32
	if _, err := fmt.Sscan(out, &ofport); err != nil || ofport == 0 || ofport >= 0xff00 {
		return fmt.Errorf("ovs-vsctl get Interface %s ofport: %q", hostVeth, out)
	}
	fs := flows.PodFlows(m.n.cfg, flows.Pod{OFPort: ofport, MAC: res.ContainerMAC, IPs: []net.IP{addr.IP}, OwnerID: benchOwnerID(addr.IP)})
	if m.bundle {
		var b strings.Builder
		for _, f := range fs {
			b.WriteString("flow add " + ofctlText(f.String()) + "\n")
		}
		err = m.ofctl(ctx, b.String(), "bundle", benchBridge, "-")
	} else {
		for _, f := range fs {
			if err = m.ofctl(ctx, "", "add-flow", benchBridge, ofctlText(f.String())); err != nil {
				break
			}
		}
	}
	step("ofctl")
	return err
}

func (m *shellMode) Del(ctx context.Context, p Pod) error {
	step := m.log.timer(m.name)
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	lease, ok := m.ipam.Get(p.ContainerID, p.IfName)
	if !ok {
		return fmt.Errorf("%s: DEL of unknown pod %s", m.name, p.ContainerID)
	}
	port, ok := m.n.db.GetPort(hostVeth)
	if ok && port.OFPort > 0 {
		ip := lease.IPs[0].To4() // one IPv4 pool
		mac := podnet.MACFromIP(ip)
		fs := flows.PodFlows(m.n.cfg, flows.Pod{OFPort: uint32(port.OFPort), MAC: mac, IPs: []net.IP{ip}, OwnerID: benchOwnerID(ip)})
		var err error
		if m.bundle {
			var b strings.Builder
			for _, f := range fs {
				b.WriteString("flow delete_strict " + f.MatchKey() + "\n")
			}
			err = m.ofctl(ctx, b.String(), "bundle", benchBridge, "-")
		} else {
			for _, f := range fs {
				if err = m.ofctl(ctx, "", "--strict", "del-flows", benchBridge, f.MatchKey()); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
	}
	step("del ofctl")
	if _, err := m.vsctl(ctx, "--if-exists", "del-port", benchBridge, hostVeth); err != nil {
		return err
	}
	step("del vsctl del-port")
	if err := podnet.Teardown(hostVeth, p.Netns, p.IfName); err != nil {
		return err
	}
	step("del veth")
	err := m.ipam.Release(p.ContainerID, p.IfName)
	step("del ipam")
	return err
}

// Fill attaches a filler pod through the floor's path (the state on the bridge is the same;
// only the time to get there differs), with its address from the mode's IPAM.
func (m *shellMode) Fill(ctx context.Context, p Pod) error {
	ips, err := m.ipam.Allocate(p.ContainerID, p.IfName, "bench/"+p.Name)
	if err != nil {
		return err
	}
	_, err = m.n.wire(ctx, p, &net.IPNet{IP: ips[0].To4(), Mask: m.n.subnet.Mask}, func(string) {})
	return err
}

// ---- ofsdn in-daemon ----

// daemonMode runs controller.StartNode in this process and calls Node.AddPod/DelPod
// directly: the daemon's work without the plugin exec and the socket hop.
type daemonMode struct {
	name string // ModeInDaemon, or ModeInDaemonDualStack with subnet6
	sb   *Sandbox
	db   *ovsdb.Client
	node *controller.Node
}

// newDaemon starts mode ModeInDaemon, or ModeInDaemonDualStack when subnet6 (the node's
// IPv6 pod subnet) is not nil.
func newDaemon(ctx context.Context, sb *Sandbox, subnet, subnet6 *net.IPNet, log *stepLog) (*daemonMode, error) {
	m := &daemonMode{sb: sb, name: ModeInDaemon}
	if subnet6 != nil {
		m.name = ModeInDaemonDualStack
	}
	var err error
	m.db, err = ovsdb.Connect(ctx, sb.Endpoint(), ovsdb.Options{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	err = RunIn(sb.NetnsPath(), func() error {
		var err error
		m.node, err = controller.StartNode(ctx, m.db, controller.NodeOptions{
			Bridge: benchBridge, Gateway: benchGateway, DatapathType: "netdev", PodSubnet: subnet, PodSubnetIPv6: subnet6, MTU: benchMTU,
			OVSRunDir: sb.Dir, DataDir: filepath.Join(sb.Dir, "data"), EchoInterval: 5 * time.Second,
			Logger: quietLogger(),
			Hooks:  controller.Hooks{AddStep: func(step string, d time.Duration) { log.add(m.name, step, d) }},
		})
		return err
	})
	if err != nil {
		m.db.Close()
		return nil, err
	}
	return m, nil
}

func (m *daemonMode) Name() string      { return m.name }
func (m *daemonMode) Sandbox() *Sandbox { return m.sb }
func (m *daemonMode) Close()            { m.node.Close(); m.db.Close(); m.sb.Stop() }

func (m *daemonMode) req(p Pod) controller.PodRequest {
	return controller.PodRequest{ContainerID: p.ContainerID, IfName: p.IfName, Netns: p.Netns, PodNamespace: "bench", PodName: p.Name}
}

func (m *daemonMode) Add(ctx context.Context, p Pod) error {
	_, err := m.node.AddPod(ctx, m.req(p))
	return err
}
func (m *daemonMode) Del(ctx context.Context, p Pod) error  { return m.node.DelPod(ctx, m.req(p)) }
func (m *daemonMode) Fill(ctx context.Context, p Pod) error { return m.Add(ctx, p) }

// ---- ofsdn full CNI path ----

// fullMode runs the real ofsdn-node in the sandbox's namespace and executes the real ofsdn
// plugin binary through libcni (the library containerd and CRI-O use) for every ADD/DEL.
type fullMode struct {
	name    string // ModeFull, or ModeFullDualStack with an IPv6 pod subnet
	sb      *Sandbox
	binDir  string
	subnet  string // the daemon's --pod-subnets value: IPv4, or "IPv4,IPv6"
	socket  string
	logPath string
	daemon  *exec.Cmd
	exited  chan struct{} // closed when the daemon process has exited
	cni     *libcni.CNIConfig
	netconf *libcni.NetworkConfigList
	// args are more ofsdn-node flags (none in make bench).
	args []string
}

// timedExec is libcni's default plugin executor, timing each plugin execution into the
// step log of mode ("plugin exec" for ADD, "del plugin exec" for DEL).
type timedExec struct {
	invoke.DefaultExec
	log  *stepLog
	mode string
}

func (e *timedExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	t0 := time.Now()
	out, err := e.DefaultExec.ExecPlugin(ctx, pluginPath, stdin, environ)
	for _, kv := range environ {
		switch kv {
		case "CNI_COMMAND=ADD":
			e.log.add(e.mode, "plugin exec", time.Since(t0))
		case "CNI_COMMAND=DEL":
			e.log.add(e.mode, "del plugin exec", time.Since(t0))
		}
	}
	return out, err
}

// newFull starts mode ModeFull, or ModeFullDualStack when subnet6 (the node's IPv6 pod
// subnet) is not nil. args are more ofsdn-node flags.
func newFull(ctx context.Context, sb *Sandbox, subnet, subnet6 *net.IPNet, binDir string, log *stepLog, args ...string) (*fullMode, error) {
	m := &fullMode{name: ModeFull, sb: sb, binDir: binDir, subnet: subnet.String(), socket: filepath.Join(sb.Dir, "cni", "cni.sock"),
		logPath: filepath.Join(sb.Dir, "ofsdn-node.log"), args: args}
	if subnet6 != nil {
		m.name, m.subnet = ModeFullDualStack, subnet.String()+","+subnet6.String()
	}
	for _, b := range []string{"ofsdn", "ofsdn-node"} {
		if !exists(filepath.Join(binDir, b)) {
			return nil, fmt.Errorf("%s not found in %s: run make build (or pass -bin)", b, binDir)
		}
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ofsdn-bench","plugins":[{"type":"ofsdn","socket":%q}]}`, m.socket)
	var err error
	if m.netconf, err = libcni.ConfListFromBytes([]byte(conf)); err != nil {
		return nil, err
	}
	exe := &timedExec{DefaultExec: invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}, log: log, mode: m.name}
	m.cni = libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(sb.Dir, "cni-cache"), exe)
	if _, err := m.startDaemon(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// startDaemon starts ofsdn-node as the e2e tests do and returns when CNI STATUS passes,
// with the time that took.
func (m *fullMode) startDaemon(ctx context.Context) (time.Duration, error) {
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", m.sb.Netns, filepath.Join(m.binDir, "ofsdn-node"),
		"--ovsdb", m.sb.Endpoint(), "--ovs-rundir", m.sb.Dir, "--datapath-type", "netdev",
		"--socket", m.socket, "--data-dir", filepath.Join(m.sb.Dir, "data"), "--pod-subnets", m.subnet,
		"--bridge", benchBridge, "--gateway", benchGateway, "--mtu", fmt.Sprint(benchMTU), "--log-level", "info")
	cmd.Args = append(cmd.Args, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	m.daemon = cmd
	exited := make(chan struct{})
	m.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := m.cni.GetStatusNetworkList(ctx, m.netconf)
		if err == nil {
			return time.Since(t0), nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(m.logPath)
			m.stopDaemon()
			return 0, fmt.Errorf("ofsdn-node not ready after 60s: %v\n%s", err, tail(string(b), 2000))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (m *fullMode) stopDaemon() {
	if m.daemon == nil {
		return
	}
	_ = m.daemon.Process.Signal(os.Interrupt)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.daemon.Process.Kill()
		<-m.exited
	}
	m.daemon = nil
}

// running reports whether the daemon process is still running.
func (m *fullMode) running() bool {
	if m.daemon == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// pid returns the daemon's pid (ip netns exec execs it in place).
func (m *fullMode) pid() int {
	if m.daemon == nil {
		return 0
	}
	return m.daemon.Process.Pid
}

func (m *fullMode) Name() string      { return m.name }
func (m *fullMode) Sandbox() *Sandbox { return m.sb }
func (m *fullMode) Close()            { m.stopDaemon(); m.sb.Stop() }

func (m *fullMode) rt(p Pod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.ContainerID, NetNS: p.Netns, IfName: p.IfName,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", p.Name}}}
}

func (m *fullMode) Add(ctx context.Context, p Pod) error {
	_, err := m.cni.AddNetworkList(ctx, m.netconf, m.rt(p))
	return err
}
func (m *fullMode) Del(ctx context.Context, p Pod) error {
	return m.cni.DelNetworkList(ctx, m.netconf, m.rt(p))
}
func (m *fullMode) Fill(ctx context.Context, p Pod) error { return m.Add(ctx, p) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
