// Package sandbox starts private Open vSwitch instances for tests: ovsdb-server and
// ovs-vswitchd (userspace datapath) in a network namespace of their own, so that parallel
// tests never collide on tap device names and nothing touches the host's OVS or links.
//
// It drives test/sandbox.sh, the same script the demo uses, and registers the teardown with
// t.Cleanup. Tests that use it need root and Open vSwitch installed; they do not skip
// without them, since CI has both.
package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// OVS is one running private Open vSwitch instance.
type OVS struct {
	// Dir is the run directory (OVS_RUNDIR): database, sockets, pid and log files.
	Dir string
	// DBSock is the path of ovsdb-server's unix socket.
	DBSock string
	// Netns is the name (under /var/run/netns) of the network namespace vswitchd runs in.
	Netns string
}

// Script returns the absolute path of test/sandbox.sh.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "sandbox.sh")
}

// Start starts a sandbox and stops it when the test ends. It fails the test if
// Open vSwitch is not installed or the daemons do not start.
func Start(t testing.TB) *OVS {
	t.Helper()
	testenv.Privileged(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "ofsdn-t-" + hex.EncodeToString(b)
	dir, err := os.MkdirTemp("", "ofsdn-ovs-")
	if err != nil {
		t.Fatal(err)
	}
	o := &OVS{Dir: dir, DBSock: filepath.Join(dir, "db.sock"), Netns: ns}
	t.Cleanup(func() { o.Stop(t) })
	out, err := exec.Command(Script(), "start", dir, ns).CombinedOutput()
	if err != nil {
		t.Fatalf("sandbox start: %v\n%s", err, out)
	}
	return o
}

// Stop stops both daemons and deletes the namespace (and with it the tap devices that
// userspace internal ports leave behind). Safe to call twice.
func (o *OVS) Stop(t testing.TB) {
	out, err := exec.Command(Script(), "stop", o.Dir).CombinedOutput()
	if err != nil {
		t.Logf("sandbox stop: %v\n%s", err, out)
	}
	if !t.Failed() {
		_ = os.RemoveAll(o.Dir)
	} else {
		t.Logf("sandbox logs kept in %s", o.Dir)
	}
}

// OVSDBEndpoint returns the libovsdb endpoint of the database, "unix:" + DBSock.
func (o *OVS) OVSDBEndpoint() string { return "unix:" + o.DBSock }

// MgmtSocket returns the OpenFlow management socket of bridge, DIR/BRIDGE.mgmt.
func (o *OVS) MgmtSocket(bridge string) string { return filepath.Join(o.Dir, bridge+".mgmt") }

// NetnsPath returns the path of the sandbox's network namespace.
func (o *OVS) NetnsPath() string { return filepath.Join("/var/run/netns", o.Netns) }

// Vsctl runs ovs-vsctl against the sandbox's database and returns its trimmed output.
func (o *OVS) Vsctl(t testing.TB, args ...string) string {
	t.Helper()
	return o.run(t, "ovs-vsctl", append([]string{"--db=" + o.OVSDBEndpoint(), "--timeout=10"}, args...)...)
}

// Ofctl runs ovs-ofctl -O OpenFlow13 with args; name bridges by MgmtSocket.
func (o *OVS) Ofctl(t testing.TB, args ...string) string {
	t.Helper()
	return o.run(t, "ovs-ofctl", append([]string{"-O", "OpenFlow13"}, args...)...)
}

// Appctl runs ovs-appctl against ovs-vswitchd's control socket.
func (o *OVS) Appctl(t testing.TB, args ...string) string {
	t.Helper()
	return o.run(t, "ovs-appctl", append([]string{"-t", filepath.Join(o.Dir, "ovs-vswitchd.ctl")}, args...)...)
}

// AppctlOutput runs ovs-appctl like Appctl but never fails the test: it returns the
// output, followed by the error when the command failed (for diagnostics gathered after a
// test has already failed).
func (o *OVS) AppctlOutput(args ...string) string {
	out, err := exec.Command("ovs-appctl", append([]string{"-t", filepath.Join(o.Dir, "ovs-vswitchd.ctl")}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: %v", out, err)
	}
	return string(out)
}

// Exec runs a command inside the sandbox's network namespace and returns its output.
func (o *OVS) Exec(t testing.TB, name string, args ...string) string {
	t.Helper()
	return o.run(t, "ip", append([]string{"netns", "exec", o.Netns, name}, args...)...)
}

func (o *OVS) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+o.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
