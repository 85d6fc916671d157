package sandbox

// Crash and restart of a sandbox's daemons, for the restart tests. The start commands are
// those of test/sandbox.sh (keep them in step).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// KillVswitchd kills ovs-vswitchd with SIGKILL (a crash: no clean-up, the OpenFlow
// connections drop, userspace datapath flows die with the process) and waits until it
// is gone.
func (o *OVS) KillVswitchd(t testing.TB) { o.kill9(t, "ovs-vswitchd") }

// KillOVSDB kills ovsdb-server with SIGKILL and waits until it is gone. The database
// file stays, as on a real node.
func (o *OVS) KillOVSDB(t testing.TB) { o.kill9(t, "ovsdb-server") }

// StartVswitchd starts ovs-vswitchd again as test/sandbox.sh does. With flowRestoreWait it
// first sets other_config:flow-restore-wait=true (ovs-vsctl --no-wait, since no vswitchd
// is there to wait for), as `ovs-ctl restart` does: the new ovs-vswitchd then keeps the
// datapath's flows and does not forward with its empty tables until the controller has
// restored its flows and removed the key. It returns when ovs-vswitchd has detached
// (it has then read the database and created its bridges).
func (o *OVS) StartVswitchd(t testing.TB, flowRestoreWait bool) {
	t.Helper()
	if flowRestoreWait {
		o.run(t, "ovs-vsctl", "--db="+o.OVSDBEndpoint(), "--timeout=10", "--no-wait",
			"set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true")
	}
	o.runInNetns(t, "ovs-vswitchd", "unix:"+o.DBSock, "--unixctl="+filepath.Join(o.Dir, "ovs-vswitchd.ctl"),
		"--pidfile="+filepath.Join(o.Dir, "ovs-vswitchd.pid"), "--log-file="+filepath.Join(o.Dir, "ovs-vswitchd.log"),
		"--detach", "--no-chdir", "-vconsole:off")
}

// StartOVSDB starts ovsdb-server again on the same database file, as test/sandbox.sh
// does, and returns when it has detached (its socket then accepts connections).
func (o *OVS) StartOVSDB(t testing.TB) {
	t.Helper()
	o.runInNetns(t, "ovsdb-server", filepath.Join(o.Dir, "conf.db"), "--remote=punix:"+o.DBSock,
		"--unixctl="+filepath.Join(o.Dir, "ovsdb-server.ctl"), "--pidfile="+filepath.Join(o.Dir, "ovsdb-server.pid"),
		"--log-file="+filepath.Join(o.Dir, "ovsdb-server.log"), "--detach", "--no-chdir", "-vconsole:off")
}

// StopVswitchd stops ovs-vswitchd with SIGSTOP (it hangs: no OpenFlow or OVSDB progress)
// and ContVswitchd resumes it.
func (o *OVS) StopVswitchd(t testing.TB) { o.signal(t, "ovs-vswitchd", syscall.SIGSTOP) }

// ContVswitchd resumes an ovs-vswitchd stopped by StopVswitchd.
func (o *OVS) ContVswitchd(t testing.TB) { o.signal(t, "ovs-vswitchd", syscall.SIGCONT) }

func (o *OVS) pid(t testing.TB, daemon string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(o.Dir, daemon+".pid"))
	if err != nil {
		t.Fatalf("%s pid file: %v", daemon, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s pid file: %v", daemon, err)
	}
	return pid
}

func (o *OVS) signal(t testing.TB, daemon string, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(o.pid(t, daemon), sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, daemon, err)
	}
}

func (o *OVS) kill9(t testing.TB, daemon string) {
	t.Helper()
	pid := o.pid(t, daemon)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s (pid %d): %v", daemon, pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		// A killed daemon is a zombie until its parent (init, after --detach) reaps it.
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still running 10s after SIGKILL", daemon, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (o *OVS) runInNetns(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", o.Netns, name}, args...)...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+o.Dir, "OVS_LOGDIR="+o.Dir, "OVS_DBDIR="+o.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start %s: %v\n%s", name, err, out)
	}
}
