//go:build vswcpu

// TestVswitchdPerAdd measures what one pod ADD costs ovs-vswitchd: its CPU (utime+stime
// from /proc) and its coverage counters (ovs-appctl coverage/show, totals) around bursts
// of ADDs, on bridges already holding VSW_FILL veth ports (200), side by side, one
// private OVS each, for the modes in VSW_MODES (default ofsdn-cni,ports-only,floor,vsctl):
//
//   - ofsdn-cni: the real ofsdn-node (--flow-audit-interval 0) and the real plugin through
//     libcni, as `make bench` runs them (ofsdn-cni-extra: the same with the binaries in
//     VSW_BIN2, for an A/B of two builds);
//   - ports-only: the product's port floor: the veth exactly as the daemon makes it
//     (podnet.Setup) and the port through the product's OVSDB client (group commit, the
//     daemon's external_ids); no flows, no OpenFlow;
//   - floor: bench's floor mode (a plain veth, up, not promiscuous; one libovsdb
//     transaction without ofport_request; the pod's flows and a barrier after the port);
//   - vsctl: OVS's own floor: a plain veth and one `ovs-vsctl add-port` per port (one
//     transaction each, waiting for ovs-vswitchd), no flows.
//
// Per round and mode (the order rotates): VSW_PODS ADDs (96) at concurrency VSW_CONC (32),
// then as many DELs (not measured), VSW_ROUNDS rounds (3). ovs-vswitchd folds its threads'
// counts into the totals about once a second, so every snapshot is taken after a 1.5 s
// pause; the CPU and counts of the same pause on the idle switch are subtracted. VSW_BIN
// holds ofsdn and ofsdn-node (default bin/ of this tree: make build). VSW_WATCH runs a
// diagnostic over each burst (startWatch). Run (root, Open vSwitch installed):
//
//	make build && go test -tags vswcpu -count=1 -timeout 30m -v -run TestVswitchdPerAdd ./bench/
//
// Results: bench/RESULTS.md "ovs-vswitchd CPU per ADD". Nothing is asserted.
package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/podnet"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

var coverageLine = regexp.MustCompile(`(?m)^(\S+)\s+.*total: (\d+)$`)

// coverage returns ovs-vswitchd's coverage totals by counter name.
func coverage(sb *Sandbox) (map[string]int64, error) {
	out, err := exec.Command("ovs-appctl", "-t", filepath.Join(sb.Dir, "ovs-vswitchd.ctl"), "coverage/show").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ovs-appctl coverage/show: %v: %s", err, out)
	}
	m := map[string]int64{}
	for _, s := range coverageLine.FindAllStringSubmatch(string(out), -1) {
		m[s[1]], _ = strconv.ParseInt(s[2], 10, 64)
	}
	return m, nil
}

// vsctlMode is OVS's own floor: a veth and one ovs-vsctl add-port per pod, no flows.
type vsctlMode struct {
	sb *Sandbox
	n  *plainNode
	ip ipPool
	mu sync.Mutex
	ps map[string]*net.IPNet
}

func (m *vsctlMode) Name() string      { return "vsctl" }
func (m *vsctlMode) Sandbox() *Sandbox { return m.sb }
func (m *vsctlMode) Close()            { m.n.close(); m.sb.Stop() }
func (m *vsctlMode) vsctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ovs-vsctl", append([]string{"--db=" + m.sb.Endpoint(), "--timeout=60"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ovs-vsctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
func (m *vsctlMode) Add(ctx context.Context, p Pod) error {
	ip, err := m.ip.get()
	if err != nil {
		return err
	}
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	if err := floorVeth(p, hostVeth, ip, m.n.cfg.GatewayIP, podnet.MACFromIP(ip.IP)); err != nil {
		return err
	}
	m.mu.Lock()
	m.ps[p.ContainerID] = ip
	m.mu.Unlock()
	return m.vsctl(ctx, "add-port", benchBridge, hostVeth)
}
func (m *vsctlMode) Fill(ctx context.Context, p Pod) error { return m.Add(ctx, p) }
func (m *vsctlMode) Del(ctx context.Context, p Pod) error {
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	if err := m.vsctl(ctx, "--if-exists", "del-port", benchBridge, hostVeth); err != nil {
		return err
	}
	if err := netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostVeth}}); err != nil {
		return fmt.Errorf("delete veth %s: %w", hostVeth, err)
	}
	m.mu.Lock()
	ip := m.ps[p.ContainerID]
	delete(m.ps, p.ContainerID)
	m.mu.Unlock()
	if ip != nil {
		m.ip.put(ip.IP)
	}
	return nil
}

// portsMode is the product's port floor: the veth exactly as the daemon makes it
// (podnet.Setup, the same spec) and the port through the product's OVSDB client (one
// transaction per port, shared with concurrent ones: group commit), with the daemon's
// external_ids; no flows, no OpenFlow.
type portsMode struct {
	sb *Sandbox
	n  *plainNode
	ip ipPool
	mu sync.Mutex
	ps map[string]*net.IPNet
}

func (m *portsMode) Name() string      { return "ports-only" }
func (m *portsMode) Sandbox() *Sandbox { return m.sb }
func (m *portsMode) Close()            { m.n.close(); m.sb.Stop() }
func (m *portsMode) Add(ctx context.Context, p Pod) error {
	ip, err := m.ip.get()
	if err != nil {
		return err
	}
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	mac := podnet.MACFromIP(ip.IP)
	if _, err := podnet.Setup(podnet.Spec{Netns: p.Netns, IfName: p.IfName, HostVeth: hostVeth, MTU: benchMTU,
		Addr: ip, Gateway: m.n.cfg.GatewayIP, MAC: mac, DisableTxChecksum: true}); err != nil {
		return err
	}
	m.mu.Lock()
	m.ps[p.ContainerID] = ip
	m.mu.Unlock()
	_, err = m.n.db.AddPort(ctx, benchBridge, hostVeth, podExternalIDs(p, ip, mac))
	return err
}
func (m *portsMode) Fill(ctx context.Context, p Pod) error { return m.Add(ctx, p) }
func (m *portsMode) Del(ctx context.Context, p Pod) error {
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	if err := m.n.db.DeletePort(ctx, benchBridge, hostVeth); err != nil {
		return err
	}
	if err := podnet.Teardown(hostVeth, p.Netns, p.IfName); err != nil {
		return err
	}
	m.mu.Lock()
	ip := m.ps[p.ContainerID]
	delete(m.ps, p.ContainerID)
	m.mu.Unlock()
	if ip != nil {
		m.ip.put(ip.IP)
	}
	return nil
}

// startWatch starts the diagnostic VSW_WATCH names over one burst, its output in
// VSW_WATCH_DIR/WHAT-NAME.txt, and returns the function that stops it (after 200 ms):
//
//   - perf: perf stat --per-thread of ovs-vswitchd with the events in VSW_PERF_EVENTS
//     (e.g. syscalls:sys_enter_poll,syscalls:sys_enter_sendmsg,task-clock): poll() calls
//     of the main thread are its main-loop iterations;
//   - strace: ovs-vswitchd's sendmsg, sendto and ioctl calls with their bytes (the
//     netlink requests: RTM_GETLINK is type 18);
//   - ovsdb: every update ovsdb-server sends (ovsdb-client monitor ALL): the
//     transactions that reach ovs-vswitchd;
//   - rtnl: every rtnetlink message in the switch's namespace (ip monitor all).
//
// The diagnostics slow the switch: their runs' CPU figures are not the results'.
func startWatch(t *testing.T, sb *Sandbox, name string) func() {
	what := os.Getenv("VSW_WATCH")
	if what == "" {
		return func() {}
	}
	out := filepath.Join(os.Getenv("VSW_WATCH_DIR"), what+"-"+name+".txt")
	pid := strconv.Itoa(sb.Pid("ovs-vswitchd"))
	var cmd *exec.Cmd
	switch what {
	case "perf":
		cmd = exec.Command("perf", "stat", "--per-thread", "-e", os.Getenv("VSW_PERF_EVENTS"), "-p", pid, "-o", out)
	case "strace":
		cmd = exec.Command("strace", "-p", pid, "-e", "trace=sendmsg,sendto,ioctl", "-s", "200", "-xx", "-o", out)
	case "ovsdb":
		cmd = exec.Command("ovsdb-client", "--timestamp", "monitor", sb.Endpoint(), "Open_vSwitch", "ALL")
	case "rtnl":
		cmd = exec.Command("ip", "-n", sb.Netns, "-t", "monitor", "all")
	default:
		t.Fatalf("VSW_WATCH %q: want perf, strace, ovsdb or rtnl", what)
	}
	if cmd.Args[0] == "ovsdb-client" || cmd.Args[0] == "ip" {
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = f
		defer func() { _ = f.Close() }() // the child holds its own copy
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // attached before the burst
	return func() {
		time.Sleep(200 * time.Millisecond)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
}

type vswSnap struct {
	cpu, dbCPU time.Duration
	cov        map[string]int64
}

func snap(t *testing.T, sb *Sandbox) vswSnap {
	time.Sleep(1500 * time.Millisecond)
	c, err := coverage(sb)
	if err != nil {
		t.Fatal(err)
	}
	return vswSnap{cpu: CPUTime(sb.Pid("ovs-vswitchd")), dbCPU: CPUTime(sb.Pid("ovsdb-server")), cov: c}
}

func TestVswitchdPerAdd(t *testing.T) {
	fill, pods, conc, rounds := envInt("VSW_FILL", 200), envInt("VSW_PODS", 96), envInt("VSW_CONC", 32), envInt("VSW_ROUNDS", 3)
	binDir := os.Getenv("VSW_BIN")
	if binDir == "" {
		binDir = filepath.Join(filepath.Dir(SandboxScript()), "..", "bin")
	}
	ctx := context.Background()
	log := &stepLog{}
	tag := fmt.Sprintf("vsw%d", os.Getpid()%100000)
	var modes []Mode
	defer func() {
		for _, m := range modes {
			m.Close()
		}
	}()
	want := strings.Split(envStr("VSW_MODES", "ofsdn-cni,ports-only,floor,vsctl"), ",")
	for _, name := range want {
		switch name {
		case "ofsdn-cni", "ofsdn-cni-extra", "floor", "vsctl", "ports-only":
		default:
			t.Fatalf("VSW_MODES: unknown mode %q (ofsdn-cni, ofsdn-cni-extra, ports-only, floor, vsctl)", name)
		}
	}
	for i, name := range want {
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.%d.0.0/16", 100+i))
		sb, err := StartSandbox("", fmt.Sprintf("%s-%d", tag, i))
		if err != nil {
			t.Fatal(err)
		}
		var m Mode
		switch name {
		case "ofsdn-cni":
			var f *fullMode
			f, err = newFull(ctx, sb, subnet, nil, binDir, log, "--flow-audit-interval", "0")
			m = f
		case "ofsdn-cni-extra":
			var f *fullMode
			f, err = newFull(ctx, sb, subnet, nil, os.Getenv("VSW_BIN2"), log, "--flow-audit-interval", "0")
			if f != nil {
				f.name = "ofsdn-cni-extra"
			}
			m = f
		case "floor":
			var f *floorMode
			f, err = newFloor(ctx, sb, subnet, log)
			m = f
		case "vsctl":
			var n *plainNode
			n, err = newPlainNode(ctx, sb, subnet)
			if err == nil {
				m = &vsctlMode{sb: sb, n: n, ip: ipPool{subnet: subnet}, ps: map[string]*net.IPNet{}}
			}
		case "ports-only":
			var n *plainNode
			n, err = newPlainNode(ctx, sb, subnet)
			if err == nil {
				m = &portsMode{sb: sb, n: n, ip: ipPool{subnet: subnet}, ps: map[string]*net.IPNet{}}
			}
		default:
			t.Fatalf("unknown mode %q", name)
		}
		if err != nil {
			sb.Stop()
			t.Fatal(err)
		}
		modes = append(modes, m)
	}
	// Fill every bridge to `fill` ports (pods in shared namespaces, as make bench does).
	var nsNames []string
	defer func() {
		for _, n := range nsNames {
			DelNetns(n)
		}
	}()
	for mi, m := range modes {
		var ps []Pod
		for k := 0; k < fill; k++ {
			if k%100 == 0 {
				name := fmt.Sprintf("%s-f%d-%d", tag, mi, k/100)
				if _, err := NewNetns(name); err != nil {
					t.Fatal(err)
				}
				nsNames = append(nsNames, name)
			}
			ps = append(ps, Pod{ContainerID: fmt.Sprintf("vswfill%d-%06d", mi, k), IfName: fmt.Sprintf("f%d", k%100),
				Netns: "/var/run/netns/" + nsNames[len(nsNames)-1], Name: fmt.Sprintf("fill-%d", k)})
		}
		t0 := time.Now()
		samples, _, err := runBatch(m.Sandbox().NetnsPath(), len(ps), 8, func(i int) error {
			c, cancel := context.WithTimeout(ctx, 120*time.Second)
			defer cancel()
			return m.Fill(c, ps[i])
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range samples {
			if s.Err != "" {
				t.Fatalf("fill %s %s: %s", m.Name(), ps[i].ContainerID, s.Err)
			}
		}
		t.Logf("%s filled to %d ports in %s", m.Name(), fill, time.Since(t0).Round(time.Millisecond))
	}
	// One pool of pod namespaces per mode, reused every round.
	pools := map[string]*netnsPool{}
	for mi, m := range modes {
		p, err := newNetnsPool(fmt.Sprintf("%s-p%d", tag, mi), pods)
		if err != nil {
			t.Fatal(err)
		}
		pools[m.Name()] = p
		defer p.close()
	}
	type acc struct {
		cpu, idle, db time.Duration
		n             int
		cov           map[string]int64
	}
	res := map[string]*acc{}
	for r := 0; r < rounds; r++ {
		for k := range modes {
			m := modes[(k+r)%len(modes)]
			a := res[m.Name()]
			if a == nil {
				a = &acc{cov: map[string]int64{}}
				res[m.Name()] = a
			}
			sb := m.Sandbox()
			// Idle: the same pause on a switch doing nothing.
			i0 := snap(t, sb)
			i1 := snap(t, sb)
			ps := make([]Pod, pods)
			for i := range ps {
				ps[i] = Pod{ContainerID: fmt.Sprintf("vsw-%s-r%d-%03d", strings.ReplaceAll(m.Name(), "-", ""), r, i), IfName: "eth0",
					Netns: pools[m.Name()].paths[i], Name: fmt.Sprintf("p-%d", i)}
			}
			s0 := snap(t, sb)
			watch := startWatch(t, sb, fmt.Sprintf("%s-r%d", m.Name(), r))
			samples, wall, err := runBatch(sb.NetnsPath(), pods, conc, func(i int) error {
				c, cancel := context.WithTimeout(ctx, 120*time.Second)
				defer cancel()
				return m.Add(c, ps[i])
			})
			if err != nil {
				t.Fatal(err)
			}
			watch()
			s1 := snap(t, sb)
			for i, s := range samples {
				if s.Err != "" {
					t.Fatalf("%s ADD %s: %s", m.Name(), ps[i].ContainerID, s.Err)
				}
			}
			a.cpu += s1.cpu - s0.cpu
			a.idle += i1.cpu - i0.cpu
			a.db += s1.dbCPU - s0.dbCPU
			a.n += pods
			for k, v := range s1.cov {
				a.cov[k] += v - s0.cov[k]
			}
			for k, v := range i1.cov {
				a.cov["idle:"+k] += v - i0.cov[k]
			}
			ds := make([]int64, len(samples))
			for i, x := range samples {
				ds[i] = x.D.Microseconds()
			}
			t.Logf("round %d %s: %d ADDs in %s (p50 %.1f ms), vswitchd %.2f ms/ADD (idle pause %s), ovsdb-server %.2f ms/ADD",
				r, m.Name(), pods, wall.Round(time.Millisecond), float64(Percentile(ds, 50))/1000, float64((s1.cpu-s0.cpu-(i1.cpu-i0.cpu)).Microseconds())/1000/float64(pods),
				i1.cpu-i0.cpu, float64((s1.dbCPU-s0.dbCPU).Microseconds())/1000/float64(pods))
			samples, _, err = runBatch(sb.NetnsPath(), pods, conc, func(i int) error {
				c, cancel := context.WithTimeout(ctx, 120*time.Second)
				defer cancel()
				return m.Del(c, ps[i])
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range samples {
				if s.Err != "" {
					t.Fatalf("%s DEL %s: %s", m.Name(), ps[i].ContainerID, s.Err)
				}
			}
		}
	}
	// Report: CPU per ADD, then every counter that moved, per ADD, mode by mode.
	var b strings.Builder
	fmt.Fprintf(&b, "\nfill %d, %d ADDs x %d rounds at concurrency %d\n", fill, pods, rounds, conc)
	fmt.Fprintf(&b, "%-28s", "per ADD")
	for _, m := range modes {
		fmt.Fprintf(&b, " %14s", m.Name())
	}
	fmt.Fprintf(&b, "\n%-28s", "vswitchd CPU ms (- idle)")
	for _, m := range modes {
		a := res[m.Name()]
		fmt.Fprintf(&b, " %14.3f", float64((a.cpu-a.idle).Microseconds())/1000/float64(a.n))
	}
	fmt.Fprintf(&b, "\n%-28s", "ovsdb-server CPU ms")
	for _, m := range modes {
		a := res[m.Name()]
		fmt.Fprintf(&b, " %14.3f", float64(a.db.Microseconds())/1000/float64(a.n))
	}
	names := map[string]bool{}
	for _, a := range res {
		for k, v := range a.cov {
			if v != 0 && !strings.HasPrefix(k, "idle:") {
				names[k] = true
			}
		}
	}
	var keys []string
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n%-28s", k)
		for _, m := range modes {
			a := res[m.Name()]
			fmt.Fprintf(&b, " %14.2f", float64(a.cov[k]-a.cov["idle:"+k])/float64(a.n))
		}
	}
	t.Log(b.String())
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestVswitchdReconfigureCost measures what one event costs ovs-vswitchd on a bridge
// holding VSW_FILL ports (200, made as ports-only does), with VSW_EVENTS (20) events of
// each kind 100 ms apart, beside as many idle 100 ms pauses:
//
//   - db: a write to Open_vSwitch external_ids (ovs-vsctl --no-wait);
//   - db-iface: a write to one port's Interface external_ids, as a daemon updating a pod's
//     record would make;
//   - link: a link appearing in the switch's namespace that never becomes a port (a veth
//     pair added; its deletion is the next event).
//
// Run: go test -tags vswcpu -count=1 -v -run TestVswitchdReconfigureCost ./bench/
func TestVswitchdReconfigureCost(t *testing.T) {
	fill, events := envInt("VSW_FILL", 200), envInt("VSW_EVENTS", 20)
	ctx := context.Background()
	_, subnet, _ := net.ParseCIDR("10.120.0.0/16")
	sb, err := StartSandbox("", fmt.Sprintf("vswrc%d", os.Getpid()%100000))
	if err != nil {
		t.Fatal(err)
	}
	n, err := newPlainNode(ctx, sb, subnet)
	if err != nil {
		sb.Stop()
		t.Fatal(err)
	}
	m := &portsMode{sb: sb, n: n, ip: ipPool{subnet: subnet}, ps: map[string]*net.IPNet{}}
	defer m.Close()
	var nsNames []string
	defer func() {
		for _, n := range nsNames {
			DelNetns(n)
		}
	}()
	var ps []Pod
	for k := 0; k < fill; k++ {
		if k%100 == 0 {
			name := fmt.Sprintf("vswrc%d-f%d", os.Getpid()%100000, k/100)
			if _, err := NewNetns(name); err != nil {
				t.Fatal(err)
			}
			nsNames = append(nsNames, name)
		}
		ps = append(ps, Pod{ContainerID: fmt.Sprintf("vswrc-%06d", k), IfName: fmt.Sprintf("f%d", k%100),
			Netns: "/var/run/netns/" + nsNames[len(nsNames)-1], Name: fmt.Sprintf("fill-%d", k)})
	}
	samples, _, err := runBatch(sb.NetnsPath(), len(ps), 8, func(i int) error { return m.Fill(ctx, ps[i]) })
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		if s.Err != "" {
			t.Fatalf("fill %s: %s", ps[i].ContainerID, s.Err)
		}
	}
	run := func(name string, ev func(i int) error) {
		s0 := snap(t, sb)
		for i := 0; i < events; i++ {
			if err := ev(i); err != nil {
				t.Fatalf("%s event %d: %v", name, i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		s1 := snap(t, sb)
		per := func(k string) float64 { return float64(s1.cov[k]-s0.cov[k]) / float64(events) }
		t.Logf("%-5s per event: vswitchd %.2f ms CPU, bridge_reconfigure %.2f, netlink_sent %.1f, poll_create_node %.1f, nln_changed %.2f",
			name, float64((s1.cpu-s0.cpu).Microseconds())/1000/float64(events), per("bridge_reconfigure"), per("netlink_sent"),
			per("poll_create_node"), per("nln_changed"))
	}
	vsctl := &vsctlMode{sb: sb}
	run("idle", func(int) error { return nil })
	run("db", func(i int) error {
		return vsctl.vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".", fmt.Sprintf("external_ids:vswrc=%d", i))
	})
	port := podnet.HostVethName(ps[0].ContainerID, ps[0].IfName)
	run("db-iface", func(i int) error {
		return vsctl.vsctl(ctx, "--no-wait", "set", "Interface", port, fmt.Sprintf("external_ids:vswrc=%d", i))
	})
	run("link", func(i int) error {
		args := []string{"-n", sb.Netns, "link", "add", "vswrca", "type", "veth", "peer", "name", "vswrcb"}
		if i%2 == 1 {
			args = []string{"-n", sb.Netns, "link", "del", "vswrca"}
		}
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	})
	run("idle", func(int) error { return nil })
}
