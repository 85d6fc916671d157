// Package bench measures how fast ofsdn wires pods, against a shell-out baseline (the way
// OpenShift SDN drove Open vSwitch), against the floor of this design, against a plugin
// that does nothing (what any CNI plugin costs a runtime) and against peer plugins built
// at run time from the Go module proxy at pinned versions (ovs-cni), in one run with the
// modes interleaved so that machine noise hits all of them alike.
//
// Every mode gets a private Open vSwitch of its own (test/sandbox.sh: ovsdb-server and
// ovs-vswitchd with the userspace datapath, in a network namespace of their own), so that
// the pods of one mode never slow down another mode's switch. Operations that need the
// node's network namespace (the host end of a pod's veth must live where ovs-vswitchd
// runs) run on goroutines whose OS thread is locked into that sandbox's namespace.
//
// This package may execute ovs-vsctl, ovs-ofctl and ip: it is the benchmark, not the
// product (hack/check-no-shellout.sh exempts bench/).
package bench

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sandbox is one private Open vSwitch instance (userspace datapath) started by
// test/sandbox.sh in a network namespace of its own.
type Sandbox struct {
	// Dir is the run directory (OVS_RUNDIR): database, sockets, pid and log files.
	Dir string
	// Netns is the name of the network namespace (under /var/run/netns) vswitchd runs in.
	Netns  string
	script string
}

// SandboxScript returns the path of test/sandbox.sh in the source tree this package was
// built from.
func SandboxScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "test", "sandbox.sh")
}

// StartSandbox starts a private OVS whose run directory and namespace names contain name.
// script is test/sandbox.sh (SandboxScript when empty). The error carries the script's
// output; Open vSwitch must be installed (make deps).
func StartSandbox(script, name string) (*Sandbox, error) {
	if script == "" {
		script = SandboxScript()
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	dir, err := os.MkdirTemp("", "ofsdn-bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	s := &Sandbox{Dir: dir, Netns: "ofsdn-b-" + name + "-" + hex.EncodeToString(b), script: script}
	out, err := exec.Command(script, "start", dir, s.Netns).CombinedOutput()
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("sandbox %s: %s start: %v\n%s", name, script, err, out)
	}
	return s, nil
}

// Stop stops ovsdb-server and ovs-vswitchd, deletes the namespace (and with it every host
// veth end and tap device in it) and the run directory. Safe to call twice.
func (s *Sandbox) Stop() {
	if s == nil || s.Dir == "" {
		return
	}
	_ = exec.Command(s.script, "stop", s.Dir).Run()
	_ = exec.Command("ip", "netns", "del", s.Netns).Run()
	_ = os.RemoveAll(s.Dir)
	s.Dir = ""
}

// Endpoint returns the libovsdb endpoint of the database, "unix:DIR/db.sock".
func (s *Sandbox) Endpoint() string { return "unix:" + filepath.Join(s.Dir, "db.sock") }

// NetnsPath returns the path of the sandbox's network namespace.
func (s *Sandbox) NetnsPath() string { return filepath.Join("/var/run/netns", s.Netns) }

// Mgmt returns the OpenFlow management socket of bridge, DIR/BRIDGE.mgmt.
func (s *Sandbox) Mgmt(bridge string) string { return filepath.Join(s.Dir, bridge+".mgmt") }

// Env returns the environment for OVS tools aimed at this sandbox (OVS_RUNDIR=DIR, so
// that `ovs-ofctl BRIDGE` finds DIR/BRIDGE.mgmt, as it finds /var/run/openvswitch on a node).
func (s *Sandbox) Env() []string { return append(os.Environ(), "OVS_RUNDIR="+s.Dir) }

// Pid returns the pid of daemon ("ovs-vswitchd" or "ovsdb-server") from its pid file, or 0.
func (s *Sandbox) Pid(daemon string) int {
	b, err := os.ReadFile(filepath.Join(s.Dir, daemon+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// StopVswitchd kills ovs-vswitchd (SIGTERM, then SIGKILL after 5 seconds) and waits until
// it is gone. The flow tables die with it; OVSDB and the devices stay.
func (s *Sandbox) StopVswitchd() error {
	pid := s.Pid("ovs-vswitchd")
	if pid == 0 {
		return fmt.Errorf("sandbox %s: no ovs-vswitchd pid file", s.Dir)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// StartVswitchd starts ovs-vswitchd again exactly as test/sandbox.sh does. It returns when
// the daemon has detached, which ovs-vswitchd does after its first reconfiguration (the
// bridges and their management sockets exist then).
func (s *Sandbox) StartVswitchd() error {
	cmd := exec.Command("ip", "netns", "exec", s.Netns, "env", "OVS_RUNDIR="+s.Dir, "OVS_LOGDIR="+s.Dir, "OVS_DBDIR="+s.Dir,
		"ovs-vswitchd", "unix:"+filepath.Join(s.Dir, "db.sock"), "--unixctl="+filepath.Join(s.Dir, "ovs-vswitchd.ctl"),
		"--pidfile="+filepath.Join(s.Dir, "ovs-vswitchd.pid"), "--log-file="+filepath.Join(s.Dir, "ovs-vswitchd.log"),
		"--detach", "--no-chdir", "-vconsole:off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("restart ovs-vswitchd in %s: %v\n%s", s.Dir, err, out.String())
	}
	return nil
}

// CPUTime returns the user+system CPU time consumed so far by process pid (from
// /proc/PID/stat, clock ticks of 10 ms), or 0 if it cannot be read.
func CPUTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// RSS returns the resident set size of process pid in bytes (VmRSS in /proc/PID/status),
// or 0 if it cannot be read.
func RSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
