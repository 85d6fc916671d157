// Command ofsdn-plugin-cpu measures the CPU time one exec of the ofsdn CNI plugin costs
// for CNI_COMMAND=ADD and DEL, beside an empty static Go program (the floor: what any Go
// binary exec'd per CNI operation pays for fork, exec, the Go runtime's start and exit).
//
// It serves the plugin with the daemon's real CNI server (cni/server) on a unix socket in
// a temporary directory, whose handler answers every ADD with a typical ofsdn result (the
// pod's eth0 with one IPv4 address and a default route) and every DEL with success, so the
// plugin runs its whole path: stdin, netconf checks, CNI_NETNS check against a real
// network namespace (held by a child process in a new one), the HTTP request, the result's
// checks and conversion, stdout. The DEL netconf carries the ADD result as prevResult, as
// libcni sends it.
//
// Each plugin given with -plugin (name=path, repeatable: e.g. a before and an after build)
// and the floor are run -n times per command, interleaved (one exec of each in turn, in a
// rotating order), so that a busy machine's drift falls on all of them alike. The CPU of an
// exec is the user + system time of the child from wait4(2) (its rusage, all threads),
// minor page faults likewise. It prints per binary and command the mean, median and p90
// CPU in ms, the mean page faults, and the ratio of the means to the first plugin's and to
// the floor's. Failures (an exit status other than 0 or an ADD without a result) stop it.
// Every binary is run from a fresh copy in a temporary directory (see main), so that the
// page cache holds them alike.
//
// It needs root (the CNI server's socket is root-only, and the network namespace). Run it
// under `nice -n 19` on a shared machine; the figures are CPU time, not wall time, so a
// busy machine disturbs them less than latencies, but caches and frequency still move them.
//
//	CGO_ENABLED=0 go build -o /tmp/ofsdn ./cmd/ofsdn
//	go run ./bench/cmd/ofsdn-plugin-cpu -n 300 -plugin ofsdn=/tmp/ofsdn
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ofsdn/ofsdn/cni"
	"github.com/ofsdn/ofsdn/cni/cnitest"
	"github.com/ofsdn/ofsdn/cni/server"
)

// handler answers like the daemon's pod manager, without touching anything.
type handler struct{}

func (handler) Add(_ context.Context, req *cni.Request) (*current.Result, error) {
	return cnitest.CannedResult(req.Netns), nil
}
func (handler) Del(context.Context, *cni.Request) error    { return nil }
func (handler) Check(context.Context, *cni.Request) error  { return nil }
func (handler) GC(context.Context, *cni.Request) error     { return nil }
func (handler) Status(context.Context, *cni.Request) error { return nil }

type binary struct{ name, path string }

type plugins []binary

func (p *plugins) String() string { return fmt.Sprint(*p) }
func (p *plugins) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("-plugin %q: want NAME=PATH", v)
	}
	*p = append(*p, binary{name, path})
	return nil
}

// sample is one exec's CPU (ms) and minor page faults.
type sample struct {
	cpu    float64
	faults float64
}

func main() {
	var bins plugins
	flag.Var(&bins, "plugin", "NAME=PATH of a plugin binary to measure (repeatable; the first is the reference of the ratios)")
	floor := flag.String("floor", "", "path of the floor binary; empty builds an empty Go program with CGO_ENABLED=0")
	n := flag.Int("n", 300, "execs per binary and command")
	warm := flag.Int("warmup", 10, "execs per binary and command before measuring (page cache, CPU caches)")
	cniVersion := flag.String("cni-version", "1.1.0", "the netconf's cniVersion")
	flag.Parse()
	if len(bins) == 0 {
		fail(fmt.Errorf("give at least one -plugin NAME=PATH"))
	}
	dir, err := os.MkdirTemp("", "ofsdn-plugin-cpu-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	if *floor == "" {
		if *floor, err = buildFloor(dir); err != nil {
			fail(err)
		}
	}
	all := append(slices.Clone(bins), binary{"floor (empty Go program)", *floor})
	// Each binary is measured from a copy written here with write(2), so that all have
	// their file pages cached alike: a binary as the Go linker leaves it (written
	// through a shared mapping) costs each exec ~8% more CPU than a copy of it
	// (measured on ext4, Linux 6.18), and cni/install puts the plugin on a node as a copy.
	for i := range all {
		data, err := os.ReadFile(all[i].path)
		if err != nil {
			fail(err)
		}
		all[i].path = filepath.Join(dir, fmt.Sprintf("bin%d", i), filepath.Base(all[i].path))
		if err := os.MkdirAll(filepath.Dir(all[i].path), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(all[i].path, data, 0o755); err != nil {
			fail(err)
		}
	}
	floorPath := all[len(all)-1].path

	srv := server.New(filepath.Join(dir, "run", "cni.sock"), handler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := srv.Start(); err != nil {
		fail(err)
	}
	srv.SetReady(true)
	defer srv.Shutdown(context.Background())

	// A real pod network namespace for CNI_NETNS: held by a child in a new one.
	holder := exec.Command("sleep", "3600")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := holder.Start(); err != nil {
		fail(fmt.Errorf("start the network namespace holder: %w", err))
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	netns := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)

	addConf := fmt.Sprintf(`{"cniVersion":%q,"name":"ofsdn","type":"ofsdn","socket":%q}`, *cniVersion, srv.SocketPath())
	prev, err := json.Marshal(cnitest.CannedResult(netns))
	if err != nil {
		fail(err)
	}
	delConf := fmt.Sprintf(`{"cniVersion":%q,"name":"ofsdn","type":"ofsdn","socket":%q,"prevResult":%s}`, *cniVersion, srv.SocketPath(), prev)

	cmds := []string{cni.CmdAdd, cni.CmdDel}
	res := map[string]map[string][]sample{} // binary name -> command -> samples
	for _, b := range all {
		res[b.name] = map[string][]sample{}
	}
	for i := -*warm; i < *n; i++ {
		for k := range all {
			b := all[(k+i+*warm)%len(all)]
			for _, cmd := range cmds {
				stdin := addConf
				if cmd == cni.CmdDel {
					stdin = delConf
				}
				s, err := run(b, cmd, fmt.Sprintf("bench-%d", i+*warm), netns, stdin, b.path == floorPath)
				if err != nil {
					fail(fmt.Errorf("%s %s: %w", b.name, cmd, err))
				}
				if i >= 0 {
					res[b.name][cmd] = append(res[b.name][cmd], s)
				}
			}
		}
	}

	fmt.Printf("CPU per exec (user+sys from wait4), %d execs each, interleaved; cniVersion %s\n\n", *n, *cniVersion)
	fmt.Printf("| binary | command | mean ms | p50 ms | p90 ms | page faults | mean / %s | mean / floor |\n", bins[0].name)
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	floorName := all[len(all)-1].name
	for _, cmd := range cmds {
		ref := mean(res[bins[0].name][cmd], false)
		fl := mean(res[floorName][cmd], false)
		for _, b := range all {
			s := res[b.name][cmd]
			m := mean(s, false)
			fmt.Printf("| %s | %s | %.3f | %.3f | %.3f | %.0f | %.2f | %.2f |\n", b.name, cmd, m,
				quantile(s, 0.5), quantile(s, 0.9), mean(s, true), m/ref, m/fl)
		}
	}
}

// run execs b once for cmd as a container runtime does and returns its CPU and faults.
func run(b binary, cmd, id, netns, stdin string, floor bool) (sample, error) {
	c := exec.Command(b.path)
	c.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CNI_COMMAND=" + cmd,
		"CNI_CONTAINERID=" + id,
		"CNI_NETNS=" + netns,
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(b.path),
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + id + ";K8S_POD_INFRA_CONTAINER_ID=" + id,
	}
	c.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return sample{}, fmt.Errorf("%v: stdout %q stderr %q", err, out.String(), errOut.String())
	}
	if !floor && cmd == cni.CmdAdd && !bytes.Contains(out.Bytes(), []byte(`"10.244.1.5/24"`)) {
		return sample{}, fmt.Errorf("ADD printed no result with the pod's address: %q", out.String())
	}
	if !floor && cmd == cni.CmdDel && out.Len() != 0 {
		return sample{}, fmt.Errorf("DEL printed %q, want nothing", out.String())
	}
	ru := c.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	return sample{cpu: float64(cpu) / 1e6, faults: float64(ru.Minflt + ru.Majflt)}, nil
}

// buildFloor builds an empty Go program, statically (CGO_ENABLED=0) as the plugin is.
func buildFloor(dir string) (string, error) {
	src := filepath.Join(dir, "floor")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module floor\n\ngo 1.25\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "floor-bin")
	c := exec.Command("go", "build", "-o", bin, ".")
	c.Dir = src
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := c.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the floor program: %v\n%s", err, out)
	}
	return bin, nil
}

func mean(s []sample, faults bool) float64 {
	var sum float64
	for _, x := range s {
		if faults {
			sum += x.faults
		} else {
			sum += x.cpu
		}
	}
	return sum / float64(len(s))
}

func quantile(s []sample, q float64) float64 {
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = x.cpu
	}
	slices.Sort(v)
	return v[int(q*float64(len(v)-1))]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ofsdn-plugin-cpu:", err)
	os.Exit(1)
}
