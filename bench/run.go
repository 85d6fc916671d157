package bench

// The run: set up every mode, then the phases, each interleaving the modes batch by batch
// (with the order rotated every round) so that a burst of noise on this shared machine
// lands on all of them.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Config sizes a run. Quick() and Full() give the two standard sizes.
type Config struct {
	// Name is "quick" or "full", printed in the report.
	Name string
	// BinDir holds the ofsdn and ofsdn-node binaries (make build puts them in bin/).
	BinDir string
	// Script is test/sandbox.sh; empty means SandboxScript().
	Script string
	// Modes to run (AllModes when empty).
	Modes []string
	// SeqRounds × SeqBatch sequential ADDs, then as many DELs, per mode on an empty node.
	SeqRounds, SeqBatch int
	// Conc lists the concurrency levels above 1; ConcPods[i] pods are added at Conc[i],
	// then deleted, ConcRounds times per mode.
	Conc, ConcPods []int
	ConcRounds     int
	// FillLevels are the numbers of pods already on the bridge at which FillRounds ×
	// FillBatch sequential ADDs (and DELs) are timed, in ascending order.
	FillLevels            []int
	FillRounds, FillBatch int
	// At the highest fill level, FillConcRounds × (FillConcPods ADDs at concurrency
	// FillConc, then as many DELs) per mode (phase "fillN-concC"); 0 pods skips it.
	FillConc, FillConcPods, FillConcRounds int
	// ProfileOps sequential ADD+DEL pairs of the in-daemon mode run under the CPU profiler.
	ProfileOps int
	// PluginExecs times this many bare executions of the plugin binary (CNI VERSION).
	PluginExecs int
	// ScalePods and ScalePeers size the flow-scale phase (flows only, no veths); 0 pods
	// skips it.
	ScalePods, ScalePeers int
	// Out is the directory for results.json, results.md and cpu.pprof.
	Out string
	// Progress receives one line per step of the run.
	Progress io.Writer
}

// Quick is the CI smoke size: every mode and every phase, a few pods each (under a minute).
func Quick() Config {
	return Config{Name: "quick", SeqRounds: 2, SeqBatch: 4, Conc: []int{8, 32}, ConcPods: []int{8, 32}, ConcRounds: 1,
		FillLevels: []int{10}, FillRounds: 1, FillBatch: 3, FillConc: 8, FillConcPods: 8, FillConcRounds: 1,
		ProfileOps: 5, PluginExecs: 5, ScalePods: 200, ScalePeers: 20}
}

// Full is the size RESULTS.md reports (about 5 minutes on 2 quiet cores). Its highest fill
// is 500 pods: filling five bridges to 1,000 veths takes about 4 minutes on its own here
// (every port added costs ovs-vswitchd more as the bridge grows; 7.5 minutes under load);
// pass FillLevels 10,100,1000 (ofsdn-bench -fill) for that, about 10 minutes in all.
func Full() Config {
	return Config{Name: "full", SeqRounds: 10, SeqBatch: 10, Conc: []int{8, 32}, ConcPods: []int{64, 100}, ConcRounds: 2,
		FillLevels: []int{10, 100, 500}, FillRounds: 4, FillBatch: 5, FillConc: 8, FillConcPods: 32, FillConcRounds: 6,
		ProfileOps: 200, PluginExecs: 30,
		ScalePods: 10000, ScalePeers: 1000}
}

// Series is one set of timed operations: one mode, one op, one phase.
type Series struct {
	Mode  string `json:"mode"`
	Op    string `json:"op"` // "add" or "del"
	Phase string `json:"phase"`
	Conc  int    `json:"concurrency"`
	// Fill is the number of pods on the bridge before the batch (not counting its own).
	Fill int `json:"fill"`
	// SamplesUS are the latencies in microseconds, in completion-independent order.
	SamplesUS []int64 `json:"samples_us"`
	// Errors are the failed operations' messages.
	Errors []string `json:"errors,omitempty"`
	// BatchPods and BatchWallUS give each batch's size and wall time (for pods/s).
	BatchPods   []int   `json:"batch_pods"`
	BatchWallUS []int64 `json:"batch_wall_us"`
}

// CPUUse is the CPU time (milliseconds, user + system, from /proc/PID/stat and
// getrusage) spent by each process class during a mode's batches of one op in one phase,
// and how many pod operations that covered.
type CPUUse struct {
	Mode  string `json:"mode"`
	Phase string `json:"phase"`
	// Op is "add" or "del".
	Op  string `json:"op"`
	Ops int    `json:"ops"`
	// MS maps process class ("vswitchd", "ovsdb-server", "ofsdn-node", "bench", "children")
	// to CPU milliseconds. "bench" is this process (which is the daemon in ofsdn-daemon and
	// the controller in floor); "children" are the processes it executed and waited for
	// (CNI plugins and what they exec, ovs-vsctl, ovs-ofctl).
	MS map[string]float64 `json:"cpu_ms"`
}

// Results is everything a run measured; it is written as results.json.
type Results struct {
	Config   string    `json:"config"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Series   []*Series `json:"series"`
	// Steps maps "mode/phase" → step → per-ADD durations in microseconds.
	Steps map[string]map[string][]int64 `json:"steps_us"`
	// DaemonSideUS are ofsdn-node's own ADD durations (from its log) for the ofsdn-cni
	// sequential phase; the rest of the client's time is exec + socket hop.
	DaemonSideUS []int64 `json:"daemon_side_add_us"`
	// PluginExecUS are bare executions of the plugin binary (CNI VERSION, no daemon).
	PluginExecUS []int64     `json:"plugin_exec_us"`
	CPU          []*CPUUse   `json:"cpu"`
	RSS          []RSSPoint  `json:"daemon_rss"`
	Restart      *Restart    `json:"restart,omitempty"`
	Scale        *ScaleStats `json:"flow_scale,omitempty"`
	Profile      string      `json:"profile_top,omitempty"`
	Failures     int         `json:"failures"`
	SetupErrors  []string    `json:"setup_errors,omitempty"`
	// PeerBuilds are the peers built for this run (module@version, time, error).
	PeerBuilds []PeerBuild `json:"peer_builds,omitempty"`
	// PeerErrors are why a peer mode did not run (build or set-up failure); they are
	// reported, not counted as failures of the run.
	PeerErrors []string `json:"peer_errors,omitempty"`
	// LoadAvg samples /proc/loadavg (1-minute figure) at the start of every phase.
	LoadAvg []LoadSample `json:"load_avg,omitempty"`
}

// LoadSample is the machine's 1-, 5- and 15-minute load average at the start of a phase.
type LoadSample struct {
	Phase string `json:"phase"`
	Load  string `json:"load"`
}

// RSSPoint is ofsdn-node's resident set size with Pods pods attached.
type RSSPoint struct {
	Pods  int   `json:"pods"`
	Bytes int64 `json:"bytes"`
}

// Restart is the recovery measurement at the highest fill (see restartPhase).
type Restart struct {
	Pods int `json:"pods"`
	// VswitchdStartMS is how long the restarted ovs-vswitchd took to detach.
	VswitchdStartMS float64 `json:"vswitchd_start_ms"`
	// VswitchdRecoverMS runs from the vswitchd start until the bridge held every flow
	// again, re-installed by the running daemon (0 if it never did).
	VswitchdRecoverMS float64 `json:"vswitchd_recover_ms"`
	// DaemonExited is true if the daemon exited on the OpenFlow disconnect instead.
	DaemonExited bool `json:"daemon_exited"`
	// DaemonStopMS is how long ofsdn-node took to exit after SIGINT (killed after 10 s).
	DaemonStopMS float64 `json:"daemon_stop_ms"`
	// DaemonReadyMS runs from starting ofsdn-node until CNI STATUS passes.
	DaemonReadyMS float64 `json:"daemon_ready_ms"`
	FlowsBefore   int     `json:"flows_before"`
	FlowsAfter    int     `json:"flows_after"`
}

type runner struct {
	cfg    Config
	ctx    context.Context
	modes  []Mode
	steps  stepLog
	res    *Results
	pool   *netnsPool
	seq    atomic.Int64
	fill   map[string]int // mode → filler pods attached
	fillNS map[string][]string
	nsTag  string
}

func (r *runner) logf(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
}

// Run sets up every mode, runs the phases and the flow-scale measurement, and writes
// results.json and results.md to cfg.Out. It returns the results even when operations
// failed (Results.Failures counts them); the error is for set-up failures.
func Run(ctx context.Context, cfg Config, command string) (*Results, error) {
	if len(cfg.Modes) == 0 {
		cfg.Modes = AllModes
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join(os.TempDir(), "ofsdn-bench")
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, ctx: ctx, fill: map[string]int{}, fillNS: map[string][]string{},
		nsTag: fmt.Sprintf("ofsdn-bp%d", os.Getpid()%100000)}
	r.res = &Results{Config: cfg.Name, Command: command, Started: time.Now()}
	r.res.Machine = DescribeMachine()
	defer r.teardown()

	if err := r.setup(); err != nil {
		return r.res, err
	}
	r.pluginExec()
	r.seqPhase("seq", 0, cfg.SeqRounds, cfg.SeqBatch)
	for i, c := range cfg.Conc {
		r.concPhase(fmt.Sprintf("conc%d", c), c, cfg.ConcPods[i])
	}
	r.profilePhase()
	if fm := r.full(); fm != nil { // baseline after the timed phases: heap warmed up, no pods
		r.res.RSS = append(r.res.RSS, RSSPoint{Pods: 0, Bytes: RSS(fm.pid())})
	}
	for _, lvl := range cfg.FillLevels {
		if err := r.fillTo(lvl); err != nil {
			r.res.SetupErrors = append(r.res.SetupErrors, err.Error())
			break
		}
		r.seqPhase(fmt.Sprintf("fill%d", lvl), lvl, cfg.FillRounds, cfg.FillBatch)
	}
	if n := len(cfg.FillLevels); n > 0 && cfg.FillConcPods > 0 && r.fill[r.modes[0].Name()] == cfg.FillLevels[n-1] {
		lvl := cfg.FillLevels[n-1]
		r.concPhaseAt(fmt.Sprintf("fill%d-conc%d", lvl, cfg.FillConc), cfg.FillConc, cfg.FillConcPods, cfg.FillConcRounds, lvl)
	}
	r.restartPhase()
	r.daemonSide()
	r.teardown()

	if cfg.ScalePods > 0 {
		r.logf("flow scale: %d pods' and %d peers' flows", cfg.ScalePods, cfg.ScalePeers)
		sc, err := RunScale(ctx, cfg.Script, cfg.ScalePods, cfg.ScalePeers, r.logf)
		if err != nil {
			r.res.SetupErrors = append(r.res.SetupErrors, "flow scale: "+err.Error())
		}
		r.res.Scale = sc
	}

	r.res.Steps = map[string]map[string][]int64{}
	for k, m := range r.steps.d {
		r.res.Steps[k] = map[string][]int64{}
		for s, ds := range m {
			r.res.Steps[k][s] = toUS(ds)
		}
	}
	for _, s := range r.res.Series {
		r.res.Failures += len(s.Errors)
	}
	r.res.Failures += len(r.res.SetupErrors)
	r.res.Duration = time.Since(r.res.Started).Round(time.Second).String()
	if err := writeResults(cfg.Out, r.res); err != nil {
		return r.res, err
	}
	return r.res, nil
}

func (r *runner) setup() error {
	n := r.cfg.SeqBatch
	for _, p := range r.cfg.ConcPods {
		n = max(n, p)
	}
	n = max(n, r.cfg.FillBatch, r.cfg.FillConcPods)
	r.logf("creating %d pod namespaces", n)
	var err error
	if r.pool, err = newNetnsPool(r.nsTag, n); err != nil {
		return err
	}
	peerBin := filepath.Join(r.cfg.Out, "peers", "bin")
	if contains(r.cfg.Modes, ModeOVSCNI) {
		r.logf("building peers: %s@%s, host-local from %s@%s (throw-away modules in %s)", OVSCNIModule, OVSCNIVersion,
			PluginsModule, PluginsVersion, filepath.Join(r.cfg.Out, "peers"))
		work := filepath.Join(r.cfg.Out, "peers")
		for _, b := range []PeerBuild{
			buildPeer(r.ctx, work, peerBin, "host-local", PluginsModule, PluginsVersion, PluginsModule+"/plugins/ipam/host-local"),
			buildPeer(r.ctx, work, peerBin, "ovs", OVSCNIModule, OVSCNIVersion, OVSCNIModule+"/cmd/plugin"),
		} {
			r.res.PeerBuilds = append(r.res.PeerBuilds, b)
			if b.Error != "" {
				r.res.PeerErrors = append(r.res.PeerErrors, fmt.Sprintf("%s (%s) cannot be built here: %s", b.Name, b.Module, b.Error))
			}
			r.logf("  %s (%s): %.1f s %s", b.Name, b.Module, b.Seconds, b.Error)
		}
	}
	for i, name := range r.cfg.Modes {
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.%d.0.0/20", 128+i))
		var subnet6 *net.IPNet // the dual-stack modes' IPv6 pod subnet (ULA)
		if name == ModeFullDualStack || name == ModeInDaemonDualStack {
			_, subnet6, _ = net.ParseCIDR(fmt.Sprintf("fd00:10:%d::/64", 128+i))
		}
		if name == ModeOVSCNI && len(r.res.PeerErrors) > 0 {
			r.logf("skipping %s: not built", name)
			continue
		}
		r.logf("starting %s (private OVS, pod subnet %s)", name, subnet)
		sb, err := StartSandbox(r.cfg.Script, fmt.Sprint(i))
		if err != nil {
			return err
		}
		var m Mode
		switch name {
		case ModeNoop:
			m, err = newNoop(sb, r.cfg.BinDir, &r.steps)
		case ModeOVSCNI:
			m, err = newOVSCNI(r.ctx, sb, subnet, peerBin, &r.steps)
			if err != nil {
				r.res.PeerErrors = append(r.res.PeerErrors, fmt.Sprintf("%s: set-up failed: %v", name, err))
				sb.Stop()
				continue
			}
		case ModeFloor:
			m, err = newFloor(r.ctx, sb, subnet, &r.steps)
		case ModeShellFlows:
			m, err = newShell(r.ctx, sb, subnet, false, &r.steps)
		case ModeShellBundle:
			m, err = newShell(r.ctx, sb, subnet, true, &r.steps)
		case ModeInDaemon, ModeInDaemonDualStack:
			m, err = newDaemon(r.ctx, sb, subnet, subnet6, &r.steps)
		case ModeFull, ModeFullDualStack:
			m, err = newFull(r.ctx, sb, subnet, subnet6, r.cfg.BinDir, &r.steps)
		default:
			err = fmt.Errorf("unknown mode %q (want one of %s)", name, strings.Join(AllModes, ", "))
		}
		if err != nil {
			sb.Stop()
			return fmt.Errorf("set up mode %s: %w", name, err)
		}
		r.modes = append(r.modes, m)
	}
	return nil
}

func (r *runner) teardown() {
	var wg sync.WaitGroup
	for _, m := range r.modes {
		wg.Add(1)
		go func() { defer wg.Done(); m.Close() }()
	}
	wg.Wait()
	r.modes = nil
	for _, nss := range r.fillNS {
		for _, n := range nss {
			DelNetns(n)
		}
	}
	r.fillNS = map[string][]string{}
	if r.pool != nil {
		r.pool.close()
		r.pool = nil
	}
}

// full returns the ModeFull mode (IPv4-only), nil when it does not run.
func (r *runner) full() *fullMode {
	for _, m := range r.modes {
		if f, ok := m.(*fullMode); ok && f.name == ModeFull {
			return f
		}
	}
	return nil
}

// rotated returns the modes starting at offset round, so no mode always goes first.
func (r *runner) rotated(round int) []Mode {
	n := len(r.modes)
	out := make([]Mode, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, r.modes[(i+round)%n])
	}
	return out
}

func (r *runner) series(mode, op, phase string, conc, fill int) *Series {
	for _, s := range r.res.Series {
		if s.Mode == mode && s.Op == op && s.Phase == phase {
			return s
		}
	}
	s := &Series{Mode: mode, Op: op, Phase: phase, Conc: conc, Fill: fill}
	r.res.Series = append(r.res.Series, s)
	return s
}

func (r *runner) cpuUse(mode, phase, op string) *CPUUse {
	for _, c := range r.res.CPU {
		if c.Mode == mode && c.Phase == phase && c.Op == op {
			return c
		}
	}
	c := &CPUUse{Mode: mode, Phase: phase, Op: op, MS: map[string]float64{}}
	r.res.CPU = append(r.res.CPU, c)
	return c
}

// cpuSnap reads the CPU time used so far by the mode's processes.
func (r *runner) cpuSnap(m Mode) map[string]time.Duration {
	out := map[string]time.Duration{
		"vswitchd":     CPUTime(m.Sandbox().Pid("ovs-vswitchd")),
		"ovsdb-server": CPUTime(m.Sandbox().Pid("ovsdb-server")),
	}
	if f, ok := m.(*fullMode); ok {
		out["ofsdn-node"] = CPUTime(f.pid())
	}
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	out["bench"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
	out["children"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return out
}

// batch times ADDs (op "add") or DELs of pods on mode m at concurrency conc and files the
// samples under phase.
func (r *runner) batch(m Mode, op, phase string, conc, fill int, pods []Pod) {
	s := r.series(m.Name(), op, phase, conc, fill)
	before := r.cpuSnap(m)
	samples, wall, err := runBatch(m.Sandbox().NetnsPath(), len(pods), conc, func(i int) error {
		ctx, cancel := context.WithTimeout(r.ctx, 120*time.Second)
		defer cancel()
		if op == "add" {
			return m.Add(ctx, pods[i])
		}
		return m.Del(ctx, pods[i])
	})
	after := r.cpuSnap(m)
	cu := r.cpuUse(m.Name(), phase, op)
	cu.Ops += len(pods)
	for k, v := range after {
		cu.MS[k] += float64(v-before[k]) / 1e6
	}
	if err != nil {
		s.Errors = append(s.Errors, err.Error())
		return
	}
	for i, sm := range samples {
		s.SamplesUS = append(s.SamplesUS, sm.D.Microseconds())
		if sm.Err != "" {
			s.Errors = append(s.Errors, fmt.Sprintf("%s %s: %s", op, pods[i].ContainerID, sm.Err))
		}
	}
	s.BatchPods = append(s.BatchPods, len(pods))
	s.BatchWallUS = append(s.BatchWallUS, wall.Microseconds())
}

// newPods returns n measured pods for mode m, one per pool namespace, interface eth0.
func (r *runner) newPods(m Mode, phase string, n int) []Pod {
	pods := make([]Pod, n)
	for i := range pods {
		id := r.seq.Add(1)
		pods[i] = Pod{ContainerID: fmt.Sprintf("bench-%s-%s-%06d", m.Name(), phase, id), IfName: "eth0",
			Netns: r.pool.paths[i], Name: fmt.Sprintf("%s-%d", phase, id)}
	}
	return pods
}

// seqPhase: rounds × (batch sequential ADDs, then batch sequential DELs) per mode.
func (r *runner) seqPhase(phase string, fill, rounds, batch int) {
	r.logf("phase %s: %d rounds × %d sequential ADD+DEL per mode, %d pods on each bridge", phase, rounds, batch, fill)
	r.phaseStart(phase)
	for round := 0; round < rounds; round++ {
		for _, m := range r.rotated(round) {
			pods := r.newPods(m, phase, batch)
			r.batch(m, "add", phase, 1, fill, pods)
			r.batch(m, "del", phase, 1, fill, pods)
		}
	}
}

// concPhase: rounds × (n ADDs at concurrency conc, then n DELs at conc) per mode.
func (r *runner) concPhase(phase string, conc, n int) {
	r.concPhaseAt(phase, conc, n, r.cfg.ConcRounds, 0)
}

// concPhaseAt is concPhase with fill pods already on each bridge.
func (r *runner) concPhaseAt(phase string, conc, n, rounds, fill int) {
	r.logf("phase %s: %d rounds × %d pods at concurrency %d per mode, %d pods on each bridge", phase, rounds, n, conc, fill)
	r.phaseStart(phase)
	for round := 0; round < rounds; round++ {
		for _, m := range r.rotated(round) {
			pods := r.newPods(m, phase, n)
			r.batch(m, "add", phase, conc, fill, pods)
			r.batch(m, "del", phase, conc, fill, pods)
		}
	}
}

// phaseStart names the phase for the step log and samples the load average.
func (r *runner) phaseStart(phase string) {
	r.steps.setPhase(phase)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			r.res.LoadAvg = append(r.res.LoadAvg, LoadSample{Phase: phase, Load: strings.Join(f[:3], " ")})
		}
	}
}

// profilePhase runs sequential in-daemon ADD+DEL pairs under the CPU profiler.
func (r *runner) profilePhase() {
	var dm Mode
	for _, m := range r.modes {
		if m.Name() == ModeInDaemon {
			dm = m
		}
	}
	if dm == nil || r.cfg.ProfileOps == 0 {
		return
	}
	path := filepath.Join(r.cfg.Out, "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		r.res.SetupErrors = append(r.res.SetupErrors, err.Error())
		return
	}
	r.logf("phase profile: %d sequential in-daemon ADD+DEL under the CPU profiler (%s)", r.cfg.ProfileOps, path)
	r.steps.setPhase("profile")
	if err := pprof.StartCPUProfile(f); err != nil {
		r.res.SetupErrors = append(r.res.SetupErrors, err.Error())
		f.Close()
		return
	}
	for done := 0; done < r.cfg.ProfileOps; {
		n := min(r.cfg.ProfileOps-done, len(r.pool.paths))
		pods := r.newPods(dm, "profile", n)
		r.batch(dm, "add", "profile", 1, 0, pods)
		r.batch(dm, "del", "profile", 1, 0, pods)
		done += n
	}
	pprof.StopCPUProfile()
	f.Close()
	if exe, err := os.Executable(); err == nil {
		if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", exe, path).Output(); err == nil {
			r.res.Profile = string(out)
		}
		if out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=40", exe, path).Output(); err == nil {
			r.res.Profile += "\n--- cumulative ---\n" + string(out)
		}
	}
}

// fillTo brings every mode's bridge to lvl filler pods (untimed), 100 fillers per
// namespace (interfaces f0..f99), at concurrency 8.
func (r *runner) fillTo(lvl int) error {
	r.steps.setPhase(fmt.Sprintf("fill-setup%d", lvl))
	for mi, m := range r.modes {
		have := r.fill[m.Name()]
		if have >= lvl {
			continue
		}
		r.logf("filling %s to %d pods", m.Name(), lvl)
		t0 := time.Now()
		var pods []Pod
		for k := have; k < lvl; k++ {
			nsIdx := k / 100
			for len(r.fillNS[m.Name()]) <= nsIdx {
				name := fmt.Sprintf("%s-f%d-%d", r.nsTag, mi, len(r.fillNS[m.Name()]))
				if _, err := NewNetns(name); err != nil {
					return err
				}
				r.fillNS[m.Name()] = append(r.fillNS[m.Name()], name)
			}
			id := r.seq.Add(1)
			pods = append(pods, Pod{ContainerID: fmt.Sprintf("bench-fill-%s-%06d", m.Name(), id), IfName: fmt.Sprintf("f%d", k%100),
				Netns: "/var/run/netns/" + r.fillNS[m.Name()][nsIdx], Name: fmt.Sprintf("fill-%d", k)})
		}
		samples, _, err := runBatch(m.Sandbox().NetnsPath(), len(pods), 8, func(i int) error {
			ctx, cancel := context.WithTimeout(r.ctx, 120*time.Second)
			defer cancel()
			return m.Fill(ctx, pods[i])
		})
		if err != nil {
			return err
		}
		for i, s := range samples {
			if s.Err != "" {
				return fmt.Errorf("fill %s pod %s: %s", m.Name(), pods[i].ContainerID, s.Err)
			}
		}
		r.fill[m.Name()] = lvl
		r.logf("  %s filled to %d in %s", m.Name(), lvl, time.Since(t0).Round(time.Millisecond))
		if f, ok := m.(*fullMode); ok {
			runtime.GC()
			r.res.RSS = append(r.res.RSS, RSSPoint{Pods: lvl, Bytes: RSS(f.pid())})
		}
	}
	return nil
}

// restartPhase, at the highest fill of the full mode: (1) ovs-vswitchd restarts under the
// running daemon (flow-restore-wait set first, as ovs-ctl restart does), timed from its
// start until the bridge holds every flow again; (2) the daemon itself restarts, timed
// until CNI STATUS passes (by then StartNode has re-installed the pipeline and every pod's
// flows), and the flows are counted again.
func (r *runner) restartPhase() {
	f := r.full()
	if f == nil {
		return
	}
	fail := func(err error) { r.res.SetupErrors = append(r.res.SetupErrors, "restart: "+err.Error()) }
	rs := &Restart{Pods: r.fill[ModeFull], FlowsBefore: flowCount(f.sb)}
	r.res.Restart = rs
	r.logf("restart: ovs-vswitchd under a running ofsdn-node with %d pods (%d flows)", rs.Pods, rs.FlowsBefore)
	if err := f.sb.StopVswitchd(); err != nil {
		fail(err)
		return
	}
	vsctl := exec.Command("ovs-vsctl", "--db="+f.sb.Endpoint(), "--no-wait", "set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true")
	if out, err := vsctl.CombinedOutput(); err != nil {
		fail(fmt.Errorf("set flow-restore-wait: %v: %s", err, out))
		return
	}
	t0 := time.Now()
	if err := f.sb.StartVswitchd(); err != nil {
		fail(err)
		return
	}
	rs.VswitchdStartMS = ms(time.Since(t0))
	for {
		n := flowCount(f.sb)
		if n == rs.FlowsBefore {
			rs.VswitchdRecoverMS = ms(time.Since(t0))
			break
		}
		if !f.running() {
			rs.DaemonExited = true
			break
		}
		if time.Since(t0) > 60*time.Second {
			fail(fmt.Errorf("flows not restored 60 s after the ovs-vswitchd restart: %d of %d", n, rs.FlowsBefore))
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.logf("restart: ofsdn-node with %d pods", rs.Pods)
	t1 := time.Now()
	f.stopDaemon()
	rs.DaemonStopMS = ms(time.Since(t1))
	d, err := f.startDaemon(r.ctx)
	if err != nil {
		fail(err)
		return
	}
	rs.DaemonReadyMS = ms(d)
	rs.FlowsAfter = flowCount(f.sb)
	if rs.FlowsAfter != rs.FlowsBefore {
		fail(fmt.Errorf("%d flows before, %d after the daemon restart", rs.FlowsBefore, rs.FlowsAfter))
	}
}

// flowCount returns the number of flows on the sandbox's bridge (ovs-ofctl dump-aggregate).
func flowCount(sb *Sandbox) int {
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", benchBridge)
	cmd.Env = sb.Env()
	out, err := cmd.Output()
	if err != nil {
		return -1
	}
	i := strings.Index(string(out), "flow_count=")
	if i < 0 {
		return -1
	}
	var n int
	fmt.Sscan(string(out[i+len("flow_count="):]), &n)
	return n
}

// pluginExec times bare executions of the plugin binary: CNI VERSION, answered by the
// plugin itself, so this is the cost of exec + Go runtime start + stdin/stdout.
func (r *runner) pluginExec() {
	if r.full() == nil {
		return
	}
	bin := filepath.Join(r.cfg.BinDir, "ofsdn")
	for i := 0; i < r.cfg.PluginExecs; i++ {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.1.0"}`)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			r.res.SetupErrors = append(r.res.SetupErrors, fmt.Sprintf("plugin VERSION: %v: %s", err, out))
			return
		}
		r.res.PluginExecUS = append(r.res.PluginExecUS, time.Since(t0).Microseconds())
	}
}

// daemonSide reads ofsdn-node's own ADD durations for the sequential phase from its log.
func (r *runner) daemonSide() {
	f := r.full()
	if f == nil {
		return
	}
	b, err := os.ReadFile(f.logPath)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `msg="ADD done"`) || !strings.Contains(line, "bench-"+ModeFull+"-seq-") {
			continue
		}
		i := strings.Index(line, "duration_ms=")
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[i+len("duration_ms="):], &v); err == nil {
			r.res.DaemonSideUS = append(r.res.DaemonSideUS, int64(v*1000))
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func toUS(ds []time.Duration) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Microseconds()
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
