package main

// ofsdn-ovs as the DaemonSet's ovs container runs it, in a network namespace of its own,
// with the machine's Open vSwitch programs (the image's are the same Debian 12 build;
// test/k8s runs the image's own): database created, probes, SIGTERM, restart on the kept
// database, the node's addresses (dual-stack: IPv4, IPv6 with its default route via a
// link-local next hop) back on the NIC while no ovs-vswitchd runs and on the underlay
// bridge again after, flow-restore-wait only for the kernel datapath, a dead ovs-vswitchd
// ending the container with the node IP back on the NIC, a crash-looping container (killed,
// then its database unreadable) giving the node IP back to the NIC, and a host's
// ovsdb-server on the run directory refused with a message naming `ovs: host`.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/testenv"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return strings.TrimSpace(string(b))
}

func TestOVSContainer(t *testing.T) {
	testenv.Privileged(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "ofsdn-ovs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	nsName := fmt.Sprintf("ofsdn-ovs-t-%d", os.Getpid())
	ulName := nsName + "-ul"
	for _, n := range []string{nsName, ulName} {
		sh(t, "ip", "netns", "add", n)
		n := n
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}
	sh(t, "ip", "-n", ulName, "link", "add", "gw0", "type", "veth", "peer", "name", "uplink0", "netns", nsName)
	sh(t, "ip", "-n", ulName, "addr", "add", "192.168.78.1/24", "dev", "gw0")
	sh(t, "ip", "-n", ulName, "link", "set", "gw0", "up")
	sh(t, "ip", "netns", "exec", ulName, "ethtool", "-K", "gw0", "tx", "off")
	sh(t, "ip", "-n", nsName, "link", "set", "lo", "up")
	sh(t, "ip", "-n", nsName, "addr", "add", "192.168.78.11/24", "dev", "uplink0")
	sh(t, "ip", "-n", nsName, "link", "set", "uplink0", "up")
	sh(t, "ip", "-n", nsName, "route", "add", "default", "via", "192.168.78.1")
	// IPv6 beside it (ULA), the default route via the gateway's link-local address.
	sh(t, "ip", "-n", ulName, "addr", "add", "fd00:78::1/64", "dev", "gw0", "nodad")
	sh(t, "ip", "-n", ulName, "addr", "add", "fe80::1/64", "dev", "gw0", "nodad")
	sh(t, "ip", "-n", nsName, "addr", "add", "fd00:78::11/64", "dev", "uplink0", "nodad")
	sh(t, "ip", "-n", nsName, "-6", "route", "add", "default", "via", "fe80::1", "dev", "uplink0")

	run := filepath.Join(dir, "run")
	conf := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("ovs: bundled\novsdb: unix:%s/db.sock\novsRunDir: %s\nbridge: br-int\n", run, run)), 0o600); err != nil {
		t.Fatal(err)
	}
	vsctl := func(args ...string) string {
		t.Helper()
		return sh(t, "ovs-vsctl", append([]string{"--db=unix:" + run + "/db.sock", "--timeout=10"}, args...)...)
	}
	probe := func(kind string) error {
		out, err := exec.Command("ip", "netns", "exec", nsName, bin, "-config", conf, "-probe", kind).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	waitFor := func(what string, f func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := f()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	type container struct {
		cmd  *exec.Cmd
		log  *syncBuf
		done chan error
	}
	start := func() *container {
		t.Helper()
		c := &container{log: &syncBuf{}, done: make(chan error, 1)}
		c.cmd = exec.Command("ip", "netns", "exec", nsName, bin, "-config", conf, "-db-dir", filepath.Join(dir, "db"))
		c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { c.done <- c.cmd.Wait() }()
		t.Cleanup(func() {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.done:
			case <-time.After(15 * time.Second):
				_ = c.cmd.Process.Kill()
			}
		})
		waitFor("ofsdn-ovs live", func() error { return probe("live") })
		return c
	}
	stop := func(c *container, sig syscall.Signal, wantExit int) {
		t.Helper()
		if err := c.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-c.done:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != wantExit {
				t.Errorf("ofsdn-ovs exited %d, want %d:\n%s", code, wantExit, c.log.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("ofsdn-ovs did not exit within 15 s of %v:\n%s", sig, c.log.String())
		}
		if pids := ovsPIDs(t, nsName); len(pids) > 0 {
			t.Errorf("Open vSwitch processes %v left in the namespace", pids)
		}
	}
	// addrs lists the node's IPv4 and global IPv6 addresses ("DEV    inet ...").
	addrs := func() string {
		return sh(t, "ip", "-n", nsName, "-4", "-o", "addr", "show") + "\n" + sh(t, "ip", "-n", nsName, "-6", "-o", "addr", "show", "scope", "global")
	}
	// on reports why the node's addresses and default routes are not on dev alone, if so.
	on := func(dev, other string) error {
		a := addrs()
		if !strings.Contains(a, dev+"    inet 192.168.78.11/24") || !strings.Contains(a, dev+"    inet6 fd00:78::11/64") || strings.Contains(a, other+"    inet") {
			return fmt.Errorf("addresses\n%s\nwant 192.168.78.11/24 and fd00:78::11/64 on %s alone", a, dev)
		}
		r := sh(t, "ip", "-n", nsName, "-4", "route", "show", "default") + "\n" + sh(t, "ip", "-n", nsName, "-6", "route", "show", "default")
		if !strings.Contains(r, "default via 192.168.78.1 dev "+dev) || !strings.Contains(r, "default via fe80::1 dev "+dev) || strings.Contains(r, other) {
			return fmt.Errorf("default routes\n%s\nwant both through %s (IPv6 via fe80::1)", r, dev)
		}
		return nil
	}
	pingGateway := func(count string) error {
		sh(t, "ip", "-n", ulName, "neigh", "flush", "dev", "gw0")
		for _, gw := range []string{"192.168.78.1", "fd00:78::1"} {
			if b, err := exec.Command("ip", "netns", "exec", nsName, "ping", "-c"+count, "-i0.2", "-W2", gw).CombinedOutput(); err != nil {
				return fmt.Errorf("the gateway %s does not answer: %v\n%s", gw, err, b)
			}
		}
		return nil
	}
	onNIC := func(when string) {
		t.Helper()
		if err := on("uplink0", "br-phy"); err != nil {
			t.Errorf("%s: %v", when, err)
		}
		if err := pingGateway("1"); err != nil {
			t.Errorf("%s (no OVS runs): %v", when, err)
		}
	}
	onBridge := func(when string) {
		t.Helper()
		waitFor(when+": node addresses on br-phy", func() error { return on("br-phy", "uplink0") })
		if err := pingGateway("2"); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	// runFailing runs ofsdn-ovs expecting it to exit on its own, and returns its exit code and log.
	runFailing := func() (int, string) {
		t.Helper()
		log := &syncBuf{}
		cmd := exec.Command("ip", "netns", "exec", nsName, bin, "-config", conf, "-db-dir", filepath.Join(dir, "db"))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), log.String()
			}
			return 0, log.String()
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-done
			t.Fatalf("ofsdn-ovs did not exit on its own:\n%s", log.String())
			return 0, ""
		}
	}

	// First start: the database is created, vswitchd answers, the bridge is not there yet.
	c := start()
	if !strings.Contains(c.log.String(), "database created") {
		t.Errorf("first start did not create the database:\n%s", c.log.String())
	}
	if err := probe("ready"); err == nil || !strings.Contains(err.Error(), "bridge br-int is not in the database") {
		t.Errorf("ready probe before br-int: %v, want a failure naming br-int", err)
	}
	vsctl("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev")
	waitFor("ofsdn-ovs ready", func() error { return probe("ready") })
	// What ofsdn-node's underlayBridge makes (controller.MoveUnderlay).
	vsctl("add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev", "fail_mode=standalone",
		"external_ids:ofsdn-underlay=uplink0", "--", "add-port", "br-phy", "uplink0")
	sh(t, "ip", "-n", nsName, "addr", "add", "192.168.78.11/24", "dev", "br-phy")
	sh(t, "ip", "-n", nsName, "addr", "add", "fd00:78::11/64", "dev", "br-phy", "nodad")
	sh(t, "ip", "-n", nsName, "link", "set", "br-phy", "up")
	sh(t, "ip", "-n", nsName, "addr", "del", "192.168.78.11/24", "dev", "uplink0")
	sh(t, "ip", "-n", nsName, "addr", "del", "fd00:78::11/64", "dev", "uplink0")
	sh(t, "ip", "-n", nsName, "route", "replace", "default", "via", "192.168.78.1", "dev", "br-phy")
	sh(t, "ip", "-n", nsName, "-6", "route", "replace", "default", "via", "fe80::1", "dev", "br-phy")
	onBridge("ofsdn-node's move")

	// SIGTERM: the node's addresses back on the NIC, both daemons gone, exit 0.
	stop(c, syscall.SIGTERM, 0)
	onNIC("after SIGTERM")

	// Restart on the kept database: nothing created, the bridges kept, the node IP on
	// br-phy again and forwarded by it; no flow-restore-wait (userspace datapath).
	c = start()
	if strings.Contains(c.log.String(), "database created") {
		t.Errorf("restart created the database again:\n%s", c.log.String())
	}
	waitFor("ofsdn-ovs ready after a restart", func() error { return probe("ready") })
	onBridge("restart")
	if v := vsctl("--if-exists", "get", "Open_vSwitch", ".", "other_config:flow-restore-wait"); v != "" {
		t.Errorf("flow-restore-wait %q on the userspace datapath, want none", v)
	}

	// ovs-vswitchd dies: ofsdn-ovs gives the node IP back to the NIC, stops ovsdb-server and
	// exits 1 (the kubelet restarts the container).
	pid := strings.TrimSpace(sh(t, "cat", filepath.Join(run, "ovs-vswitchd.pid")))
	sh(t, "kill", "-9", pid)
	select {
	case err := <-c.done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("after ovs-vswitchd died: ofsdn-ovs exit %v, want 1", err)
		}
		c.done <- err // for stop's and the cleanup's wait
	case <-time.After(15 * time.Second):
		t.Fatalf("ofsdn-ovs did not exit after ovs-vswitchd died:\n%s", c.log.String())
	}
	if pids := ovsPIDs(t, nsName); len(pids) > 0 {
		t.Errorf("after ovs-vswitchd died: Open vSwitch processes %v left", pids)
	}
	onNIC("after ovs-vswitchd died")

	// The container killed (SIGKILL: ofsdn-ovs and both daemons) leaves the node IP on
	// br-phy, whose tap device outlives ovs-vswitchd; the restarted container then finds its
	// database unreadable and exits 1 before any OVS runs: it gives the node IP back to the
	// NIC first, and its error names the fix.
	c = start()
	onBridge("restart after ovs-vswitchd died")
	_ = c.cmd.Process.Kill()
	for _, p := range ovsPIDs(t, nsName) {
		_ = syscall.Kill(atoi(t, strings.Fields(p)[0]), syscall.SIGKILL)
	}
	c.done <- <-c.done
	waitFor("Open vSwitch gone after SIGKILL", func() error {
		if pids := ovsPIDs(t, nsName); len(pids) > 0 {
			return fmt.Errorf("left: %v", pids)
		}
		return nil
	})
	if a := addrs(); !strings.Contains(a, "br-phy    inet 192.168.78.11/24") || !strings.Contains(a, "br-phy    inet6 fd00:78::11/64") {
		t.Fatalf("after the container was killed: addresses\n%s\nwant the node's addresses still on br-phy (what the restart must repair)", a)
	}
	db := filepath.Join(dir, "db", "conf.db")
	if err := os.Rename(db, db+".good"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, []byte("OVSDB JSON garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, log := runFailing()
	if code != 1 || !strings.Contains(log, "delete it on the node ("+db) || !strings.Contains(log, "restart the pod") {
		t.Errorf("on an unreadable database: exit %d, log\n%s\nwant exit 1 and an error naming the fix (delete %s, restart the pod)", code, log, db)
	}
	onNIC("after a start on an unreadable database")
	if !strings.Contains(log, `why="ovs-vswitchd not running yet`) {
		t.Errorf("on an unreadable database: log\n%s\nwant the node IP moved back at start, before the database is read", log)
	}
	if err := os.Rename(db+".good", db); err != nil {
		t.Fatal(err)
	}

	// br-int on the kernel datapath: a restart sets flow-restore-wait before ovs-vswitchd
	// starts (which cannot make a system bridge here: no module; the key is what counts).
	sh(t, "ovsdb-tool", "transact", filepath.Join(dir, "db", "conf.db"),
		`["Open_vSwitch",{"op":"update","table":"Bridge","where":[["name","==","br-int"]],"row":{"datapath_type":"system"}}]`)
	c = start()
	if v := vsctl("--if-exists", "get", "Open_vSwitch", ".", "other_config:flow-restore-wait"); v != `"true"` {
		t.Errorf("flow-restore-wait %q after a restart with br-int on the kernel datapath, want \"true\"\n%s", v, c.log.String())
	}
	stop(c, syscall.SIGTERM, 0)
	onNIC("after SIGTERM")

	// The host's Open vSwitch on the shared run directory (the host's /var/run/openvswitch,
	// its db.sock and pid file): refused at once, naming ovs: host, nothing started, the
	// node's links left alone.
	hostDB := filepath.Join(dir, "host.db")
	sh(t, "ovsdb-tool", "create", hostDB, "/usr/share/openvswitch/vswitch.ovsschema")
	host := exec.Command("ovsdb-server", hostDB, "--remote=punix:"+filepath.Join(run, "db.sock"),
		"--pidfile="+filepath.Join(run, "ovsdb-server.pid"), "--unixctl="+filepath.Join(run, "ovsdb-server.ctl"))
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	waitFor("the host's ovsdb-server", func() error {
		return exec.Command("ovsdb-client", "list-dbs", "unix:"+filepath.Join(run, "db.sock")).Run()
	})
	code, log = runFailing()
	if code != 1 || !strings.Contains(log, "set ovs: host") {
		t.Errorf("with the host's ovsdb-server on db.sock: exit %d, log\n%s\nwant exit 1 and an error naming ovs: host", code, log)
	}
	if pids := ovsPIDs(t, nsName); len(pids) > 0 {
		t.Errorf("with the host's ovsdb-server: Open vSwitch processes %v started", pids)
	}
	onNIC("after refusing the host's Open vSwitch")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ovsPIDs returns the ovsdb-server and ovs-vswitchd processes in network namespace ns.
func ovsPIDs(t *testing.T, ns string) []string {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	var pids []string
	for _, p := range strings.Fields(string(out)) {
		b, _ := os.ReadFile("/proc/" + p + "/comm")
		if c := strings.TrimSpace(string(b)); c == "ovsdb-server" || c == "ovs-vswitchd" {
			pids = append(pids, p+" "+c)
		}
	}
	return pids
}
