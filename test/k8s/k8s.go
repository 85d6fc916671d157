// Package k8s runs a real Kubernetes for ofsdn's tests: etcd, kube-apiserver,
// kube-controller-manager (node IPAM), kube-scheduler, and kubelet nodes with containerd
// (runc) and kube-proxy (iptables mode), built from source by test/k8s/build.sh into a
// version-keyed cache outside the repository.
//
// StartControlPlane runs etcd and kube-apiserver (plus, on request, the controller manager
// and scheduler) for a test; it needs no root when run in the test's own network namespace.
// StartCluster runs a whole cluster: the control plane in a network namespace of its own
// that also holds the underlay bridge, and nodes that are each a private Open vSwitch
// (test/sandbox, userspace datapath) in a network namespace with a br-phy bridge holding
// the node IP (as test/e2e's multi-node test), a private mount and PID namespace (see
// node-init.sh) and a cgroup subtree of its own. deploy/ofsdn.yaml then runs on it as it
// would on any cluster. ClusterConfig.DualStack makes the cluster dual-stack (IPv4
// primary, ULA IPv6): two service ranges, a pod CIDR per family per node, both node IPs;
// ClusterConfig.IPv6Only an IPv6-only one (IPv6 underlay, node IPs, pod CIDRs, services).
//
// Everything binds to 127.0.0.1 or to addresses inside the namespaces the test made, is
// started with Pdeathsig and torn down by PID at t.Cleanup, and leaves no process,
// namespace, cgroup or mount behind; the host's sysctls are never written (the kubelet is
// shown the values it wants in its own mount namespace). Needs root for nodes, Linux with
// cgroup v1 or hybrid hierarchies, overlayfs, Open vSwitch and the cache (the tests fail,
// naming build.sh, when it is missing: they never skip).
package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the Kubernetes version build.sh builds.
const Version = "1.37.2"

// CacheDir is build.sh's output directory: $K8S_CACHE, else /var/cache/ofsdn/k8s-vVERSION.
func CacheDir() string {
	if d := os.Getenv("K8S_CACHE"); d != "" {
		return d
	}
	return "/var/cache/ofsdn/k8s-v" + Version
}

// Bin returns the path of a Kubernetes or etcd binary in the cache, failing the test with
// the command that builds it when it is missing.
func Bin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(CacheDir(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: build Kubernetes v%s once with test/k8s/build.sh (or make k8s-build; about 20 min cold, then cached in %s)",
			p, Version, CacheDir())
	}
	return p
}

// RepoRoot is the repository's top directory (this file is test/k8s/k8s.go).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Process is a server the tests started: its own process group, killed by the kernel if
// the test binary dies (Pdeathsig), output in LogPath.
type Process struct {
	// Name names the process in logs and its log file.
	Name string
	// Cmd is the running command (nsenter exec'ed into the server inside a namespace).
	Cmd *exec.Cmd
	// LogPath is the file holding its stdout and stderr.
	LogPath string
	done    chan struct{}
}

// StartProcess runs bin with args, inside the network namespace at netns unless it is ""
// (through nsenter, which execs bin: the PID stays bin's), with stdout and stderr in
// logDir/NAME.log.
func StartProcess(logDir, name, netns, bin string, args []string, env []string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + netns, "--", bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startCmd(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// The kernel sends Pdeathsig when the *thread* that forked the child exits, and the Go
// runtime ends threads (a goroutine that locked its thread and returned, as netns code
// does), which would kill a server long before the test ends. So every child is forked
// from one goroutine locked to its thread for the life of the test binary.
var spawn = func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
}()

// startCmd starts cmd from the spawner thread (see spawn).
func startCmd(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawn <- func() { done <- cmd.Start() }
	return <-done
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits up to grace, then SIGKILLs the process group and waits.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return tail(p.LogPath, n) }

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// NetnsDialer returns a DialContext that opens each socket inside the network namespace at
// path (a socket stays in the namespace it was made in), so a test in its own namespace
// reaches servers bound inside another. "" dials from the caller's namespace. The dialing
// thread returns to its namespace afterwards; if it cannot, it stays locked and the Go
// runtime discards it.
func NetnsDialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if path == "" {
		var d net.Dialer
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer orig.Close()
			f, err := os.Open(path)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, fmt.Errorf("enter netns %s: %w", path, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			ch <- result{c, err}
		}()
		select {
		case r := <-ch:
			return r.c, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// WaitFor polls cond every 200 ms until it returns nil, failing t with the last error after
// limit (a bound against hangs, never an assertion on speed) or at once when cond returns
// an error made by Permanent.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() error) {
	t.Helper()
	if err := poll(limit, 200*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// permanent marks an error no further polling can cure (a process exited).
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent wraps err so that WaitFor stops polling and fails at once.
func Permanent(err error) error { return permanent{err} }

func poll(limit, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still failing after %v: %w", limit, err)
		}
		time.Sleep(interval)
	}
}

// run runs a command and returns its combined output, with the output in the error.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// pidAlive reports whether pid exists.
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
