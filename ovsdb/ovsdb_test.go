package ovsdb_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// These tests run against a real, private Open vSwitch (test/sandbox: ovsdb-server and
// ovs-vswitchd with the userspace datapath in a network namespace of their own) and
// check every effect with ovs-vsctl / ovs-ofctl. They need root.

const bridge = "br-int"

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("OFSDN_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func connect(t *testing.T, o *sandbox.OVS) *ovsdb.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ovsdb.Connect(ctx, o.OVSDBEndpoint(), ovsdb.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func brIntSpec() ovsdb.BridgeSpec {
	return ovsdb.BridgeSpec{
		Name:         bridge,
		DatapathType: ovsdb.DatapathNetdev,
		FailMode:     "secure",
		Protocols:    []string{"OpenFlow13"},
		TableNames:   map[int]string{0: "classifier", 10: "spoof_guard"},
		ExternalIDs:  map[string]string{"ofsdn-pipeline": "1"},
		OtherConfig:  map[string]string{"disable-in-band": "true"},
	}
}

// setup starts a sandbox, connects, and creates br-int.
func setup(t *testing.T) (*sandbox.OVS, *ovsdb.Client) {
	t.Helper()
	o := sandbox.Start(t)
	c := connect(t, o)
	if err := c.EnsureBridge(ctxT(t), brIntSpec()); err != nil {
		t.Fatal(err)
	}
	return o, c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// veth creates a veth pair inside the sandbox's netns (where ovs-vswitchd runs) and
// returns the name of the end to attach.
func veth(t *testing.T, o *sandbox.OVS, name string) string {
	t.Helper()
	o.Exec(t, "ip", "link", "add", name, "type", "veth", "peer", "name", name+"-p")
	o.Exec(t, "ip", "link", "set", name, "up")
	o.Exec(t, "ip", "link", "set", name+"-p", "up")
	return name
}

// veths makes n veth pairs in the sandbox's netns, host ends prefix0..prefixN-1.
func veths(t *testing.T, o *sandbox.OVS, prefix string, n int) []string {
	t.Helper()
	devs := make([]string, n)
	for i := range devs {
		devs[i] = veth(t, o, fmt.Sprintf("%s%d", prefix, i))
	}
	return devs
}

func vsctlInt(t *testing.T, o *sandbox.OVS, args ...string) int {
	t.Helper()
	s := o.Vsctl(t, args...)
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("ovs-vsctl %v: %q is not a number", args, s)
	}
	return n
}

func listPorts(t *testing.T, o *sandbox.OVS) []string {
	return strings.Fields(o.Vsctl(t, "list-ports", bridge))
}

func TestEnsureBridgeCreatesAndIsIdempotent(t *testing.T) {
	t.Parallel()
	o, c := setup(t)

	got := o.Vsctl(t, "get", "bridge", bridge, "datapath_type", "fail_mode", "protocols")
	if want := "netdev\nsecure\n[OpenFlow13]"; got != want {
		t.Fatalf("bridge columns:\n%s\nwant\n%s", got, want)
	}
	// Like add-br: a local internal port of the same name, ofport 65534 (OFPP_LOCAL).
	if got := o.Vsctl(t, "get", "interface", bridge, "type"); got != "internal" {
		t.Fatalf("local interface type %q, want internal", got)
	}
	if got := vsctlInt(t, o, "get", "interface", bridge, "ofport"); got != 65534 {
		t.Fatalf("local port ofport %d, want 65534", got)
	}
	if got := o.Vsctl(t, "br-get-external-id", bridge, "ofsdn-pipeline"); got != "1" {
		t.Fatalf("external_ids:ofsdn-pipeline = %q", got)
	}
	if got := o.Vsctl(t, "get", "bridge", bridge, "other_config:disable-in-band"); got != `"true"` {
		t.Fatalf("other_config:disable-in-band = %s", got)
	}
	// EnsureBridge waited for ovs-vswitchd: the management socket is already there.
	if _, err := os.Stat(o.MgmtSocket(bridge)); err != nil {
		t.Fatalf("management socket missing right after EnsureBridge: %v", err)
	}
	// Table names reach OpenFlow: dump-flows --names prints them (OVS quotes names
	// with characters other than letters and digits).
	o.Ofctl(t, "add-flow", o.MgmtSocket(bridge), "table=10,priority=5,actions=drop")
	if flows := o.Ofctl(t, "dump-flows", "--names", o.MgmtSocket(bridge)); !strings.Contains(flows, `table="spoof_guard"`) {
		t.Fatalf("dump-flows --names does not show table name spoof_guard:\n%s", flows)
	}

	// Second call: nothing to change, so no transaction (next_cfg unchanged).
	before := vsctlInt(t, o, "get", "Open_vSwitch", ".", "next_cfg")
	if err := c.EnsureBridge(ctxT(t), brIntSpec()); err != nil {
		t.Fatal(err)
	}
	if after := vsctlInt(t, o, "get", "Open_vSwitch", ".", "next_cfg"); after != before {
		t.Fatalf("idempotent EnsureBridge wrote to the database: next_cfg %d -> %d", before, after)
	}
	if n := strings.Count(o.Vsctl(t, "list-br"), "\n") + 1; n != 1 {
		t.Fatalf("want 1 bridge, got %d: %s", n, o.Vsctl(t, "list-br"))
	}
}

func TestEnsureBridgeUpdatesOnlyItsKeys(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	// Someone else's keys.
	o.Vsctl(t, "br-set-external-id", bridge, "operator", "keep-me")
	o.Vsctl(t, "set", "bridge", bridge, "other_config:foo=bar")

	spec := brIntSpec()
	spec.FailMode = "standalone"
	spec.Protocols = []string{"OpenFlow13", "OpenFlow14"}
	spec.TableNames = map[int]string{10: "spoof_guard2", 20: "arp"}
	spec.ExternalIDs = map[string]string{"ofsdn-pipeline": "2"}
	if err := c.EnsureBridge(ctxT(t), spec); err != nil {
		t.Fatal(err)
	}
	if got := o.Vsctl(t, "get", "bridge", bridge, "fail_mode", "protocols"); got != "standalone\n[OpenFlow13, OpenFlow14]" {
		t.Fatalf("fail_mode/protocols: %s", got)
	}
	ids := o.Vsctl(t, "get", "bridge", bridge, "external_ids")
	if !strings.Contains(ids, `ofsdn-pipeline="2"`) || !strings.Contains(ids, `operator=keep-me`) {
		t.Fatalf("external_ids %s: want ofsdn-pipeline=2 and operator's key kept", ids)
	}
	if got := o.Vsctl(t, "get", "bridge", bridge, "other_config:foo"); got != "bar" {
		t.Fatalf("other_config:foo = %q, want it kept", got)
	}
	names := o.Vsctl(t, "--columns=name", "list", "Flow_Table")
	for _, want := range []string{"classifier", "spoof_guard2", "arp"} {
		if !strings.Contains(names, `"`+want+`"`) && !strings.Contains(names, ": "+want) {
			t.Fatalf("Flow_Table names %q: missing %s", names, want)
		}
	}
	if strings.Contains(names, "spoof_guard\n") || strings.HasSuffix(names, "spoof_guard") {
		t.Fatalf("old Flow_Table row not garbage collected: %s", names)
	}
	if got := o.Vsctl(t, "get", "bridge", bridge, "flow_tables"); strings.Count(got, "=") != 3 {
		t.Fatalf("flow_tables %s: want ids 0, 10, 20", got)
	}

	// BridgeExternalIDs / SetBridgeExternalID: from the cache, read-your-writes.
	if err := c.SetBridgeExternalID(ctxT(t), bridge, "ofsdn-node", "node-1"); err != nil {
		t.Fatal(err)
	}
	got, ok := c.BridgeExternalIDs(bridge)
	if !ok || got["ofsdn-node"] != "node-1" || got["operator"] != "keep-me" || got["ofsdn-pipeline"] != "2" {
		t.Fatalf("BridgeExternalIDs = %v, %v", got, ok)
	}
	if v := o.Vsctl(t, "br-get-external-id", bridge, "ofsdn-node"); v != "node-1" {
		t.Fatalf("ovs-vsctl sees ofsdn-node=%q", v)
	}
	if _, ok := c.BridgeExternalIDs("br-nope"); ok {
		t.Fatal("BridgeExternalIDs of a missing bridge reported ok")
	}
	if err := c.SetBridgeExternalID(ctxT(t), "br-nope", "k", "v"); err == nil || !strings.Contains(err.Error(), "br-nope") {
		t.Fatalf("SetBridgeExternalID on a missing bridge: %v", err)
	}
}

func TestEnsureInternalPort(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	ofport, err := c.EnsureInternalPort(ctxT(t), bridge, "ofs-gw0", map[string]string{"ofsdn-role": "gateway"})
	if err != nil {
		t.Fatal(err)
	}
	if want := vsctlInt(t, o, "get", "interface", "ofs-gw0", "ofport"); ofport != want || ofport <= 0 {
		t.Fatalf("EnsureInternalPort ofport %d, ovs-vsctl says %d", ofport, want)
	}
	if got := o.Vsctl(t, "get", "interface", "ofs-gw0", "type", "external_ids:ofsdn-role"); got != "internal\ngateway" {
		t.Fatalf("interface columns: %s", got)
	}
	again, err := c.EnsureInternalPort(ctxT(t), bridge, "ofs-gw0", map[string]string{"ofsdn-role": "gateway"})
	if err != nil || again != ofport {
		t.Fatalf("second EnsureInternalPort = %d, %v; want %d", again, err, ofport)
	}
	info, ok := c.GetPort("ofs-gw0")
	if !ok || info.OFPort != ofport || info.Type != "internal" || info.Bridge != bridge || info.MAC == "" {
		t.Fatalf("GetPort = %+v, %v", info, ok)
	}
	if mac := strings.Trim(o.Vsctl(t, "get", "interface", "ofs-gw0", "mac_in_use"), `"`); mac != info.MAC {
		t.Fatalf("PortInfo.MAC %s, mac_in_use %s", info.MAC, mac)
	}
	// The bridge's own local port is an internal port too.
	local, err := c.EnsureInternalPort(ctxT(t), bridge, bridge, nil)
	if err != nil || local != 65534 {
		t.Fatalf("EnsureInternalPort(local) = %d, %v; want 65534", local, err)
	}
}

func TestAddPortVethAndDelete(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	dev := veth(t, o, "ofs-pod1")
	ids := map[string]string{"ofsdn-pod": "default/web-0", "ofsdn-container": "abc123"}
	ofport, err := c.AddPort(ctxT(t), bridge, dev, ids)
	if err != nil {
		t.Fatal(err)
	}
	if want := vsctlInt(t, o, "get", "interface", dev, "ofport"); ofport != want || ofport <= 0 {
		t.Fatalf("AddPort ofport %d, ovs-vsctl says %d", ofport, want)
	}
	got := o.Vsctl(t, "get", "interface", dev, "external_ids")
	if !strings.Contains(got, `ofsdn-pod="default/web-0"`) || !strings.Contains(got, "ofsdn-container=abc123") {
		t.Fatalf("interface external_ids %s", got)
	}
	if typ := o.Vsctl(t, "get", "interface", dev, "type"); typ != `""` {
		t.Fatalf("interface type %s, want \"\" (system)", typ)
	}
	// Idempotent: the same call returns the same ofport.
	if again, err := c.AddPort(ctxT(t), bridge, dev, ids); err != nil || again != ofport {
		t.Fatalf("second AddPort = %d, %v; want %d", again, err, ofport)
	}

	ports := c.ListPorts(bridge)
	var found bool
	for _, p := range ports {
		if p.Name == dev {
			found = true
			if p.OFPort != ofport || p.ExternalIDs["ofsdn-pod"] != "default/web-0" || p.Type != "" || p.Error != "" {
				t.Fatalf("ListPorts entry %+v", p)
			}
		}
	}
	if !found || len(ports) != 2 { // br-int's local port + the pod port
		t.Fatalf("ListPorts = %+v", ports)
	}

	if err := c.DeletePort(ctxT(t), bridge, dev); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePort(ctxT(t), bridge, dev); err != nil {
		t.Fatalf("second DeletePort: %v", err)
	}
	if ps := listPorts(t, o); len(ps) != 0 {
		t.Fatalf("ports left on %s: %v", bridge, ps)
	}
	if rows := o.Vsctl(t, "--columns=name", "find", "Interface", "name="+dev); rows != "" {
		t.Fatalf("Interface row left behind: %s", rows)
	}
	if _, ok := c.GetPort(dev); ok {
		t.Fatal("GetPort still finds the deleted port")
	}
}

func TestAddPortMissingDeviceFailsAndLeavesNothing(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	_, err := c.AddPort(ctxT(t), bridge, "ofs-nosuch", map[string]string{"ofsdn-pod": "x/y"})
	var ie *ovsdb.InterfaceError
	if !errors.As(err, &ie) {
		t.Fatalf("AddPort of a missing device: %v, want *InterfaceError", err)
	}
	if ie.Interface != "ofs-nosuch" || !strings.Contains(ie.Reason, "No such device") {
		t.Fatalf("InterfaceError %+v", ie)
	}
	if !strings.Contains(err.Error(), "ofs-nosuch") || !strings.Contains(err.Error(), "No such device") {
		t.Fatalf("error text does not name the interface and reason: %v", err)
	}
	if ps := listPorts(t, o); len(ps) != 0 {
		t.Fatalf("failed AddPort left ports: %v", ps)
	}
	if _, ok := c.GetPort("ofs-nosuch"); ok {
		t.Fatal("cache still shows the failed port")
	}
}

func TestAddPortOnMissingBridge(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	dev := veth(t, o, "ofs-pod2")
	_, err := c.AddPort(ctxT(t), "br-nope", dev, nil)
	if err == nil || !strings.Contains(err.Error(), "br-nope") || !strings.Contains(err.Error(), "EnsureBridge") {
		t.Fatalf("AddPort on a missing bridge: %v", err)
	}
}

func TestEnsurePortOFPortRequest(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	dev := veth(t, o, "ofs-pod3")
	ofport, err := c.EnsurePort(ctxT(t), ovsdb.PortSpec{Bridge: bridge, Name: dev, OFPortRequest: 42})
	if err != nil {
		t.Fatal(err)
	}
	if ofport != 42 || vsctlInt(t, o, "get", "interface", dev, "ofport") != 42 {
		t.Fatalf("ofport %d, want the requested 42", ofport)
	}
}

func TestConcurrentAddPorts(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	const n = 16
	devs := veths(t, o, "ofs-c", n)
	ofports := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ofports[i], errs[i] = c.AddPort(ctxT(t), bridge, devs[i], map[string]string{"i": strconv.Itoa(i)})
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range devs {
		if errs[i] != nil {
			t.Fatalf("AddPort %s: %v", devs[i], errs[i])
		}
		if want := vsctlInt(t, o, "get", "interface", devs[i], "ofport"); ofports[i] != want || seen[want] {
			t.Fatalf("%s: ofport %d, ovs-vsctl says %d (seen before: %v)", devs[i], ofports[i], want, seen[want])
		}
		seen[ofports[i]] = true
	}
	if got := len(c.ListPorts(bridge)); got != n+1 {
		t.Fatalf("ListPorts has %d ports, want %d", got, n+1)
	}
}

func TestOtherConfig(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	if err := c.SetOtherConfig(ctxT(t), "flow-restore-wait", "true"); err != nil {
		t.Fatal(err)
	}
	if got := o.Vsctl(t, "get", "Open_vSwitch", ".", "other_config:flow-restore-wait"); got != `"true"` {
		t.Fatalf("other_config:flow-restore-wait = %s", got)
	}
	if got := c.OtherConfig()["flow-restore-wait"]; got != "true" {
		t.Fatalf("OtherConfig() from the cache: flow-restore-wait = %q", got)
	}
	if err := c.RemoveOtherConfig(ctxT(t), "flow-restore-wait"); err != nil {
		t.Fatal(err)
	}
	if got := o.Vsctl(t, "get", "Open_vSwitch", ".", "other_config"); strings.Contains(got, "flow-restore-wait") {
		t.Fatalf("other_config still has flow-restore-wait: %s", got)
	}
}

func TestConnectWithoutServerNamesEndpoint(t *testing.T) {
	t.Parallel()
	ep := "unix:" + filepath.Join(t.TempDir(), "db.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := ovsdb.Connect(ctx, ep, ovsdb.Options{Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "ovsdb-server must be running") {
		t.Fatalf("Connect without a server: %v", err)
	}
}

// killDaemon kills one of the sandbox's daemons with SIGKILL.
func killDaemon(t *testing.T, o *sandbox.OVS, daemon string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(o.Dir, daemon+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", daemon, pid, err)
	}
}

// startOVSDB starts ovsdb-server again on the sandbox's database, as test/sandbox.sh does.
func startOVSDB(t *testing.T, o *sandbox.OVS) {
	t.Helper()
	d := o.Dir
	cmd := exec.Command("ip", "netns", "exec", o.Netns, "env", "OVS_RUNDIR="+d, "OVS_LOGDIR="+d, "OVS_DBDIR="+d,
		"ovsdb-server", filepath.Join(d, "conf.db"), "--remote=punix:"+o.DBSock,
		"--unixctl="+filepath.Join(d, "ovsdb-server.ctl"), "--pidfile="+filepath.Join(d, "ovsdb-server.pid"),
		"--log-file="+filepath.Join(d, "ovsdb-server.log"), "--detach", "--no-chdir", "-vconsole:off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restarting ovsdb-server: %v\n%s", err, out)
	}
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReconnectAfterOVSDBServerRestart(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	if !c.Connected() {
		t.Fatal("not connected after setup")
	}
	killDaemon(t, o, "ovsdb-server")
	eventually(t, "Connected() to turn false", 5*time.Second, func() bool { return !c.Connected() })
	// The cache keeps the last known state while disconnected.
	if _, ok := c.BridgeExternalIDs(bridge); !ok {
		t.Fatal("cache lost br-int while disconnected")
	}
	startOVSDB(t, o)
	eventually(t, "Connected() to turn true again", 15*time.Second, c.Connected)

	dev := veth(t, o, "ofs-pod4")
	ofport, err := c.AddPort(ctxT(t), bridge, dev, map[string]string{"after": "restart"})
	if err != nil {
		t.Fatal(err)
	}
	if want := vsctlInt(t, o, "get", "interface", dev, "ofport"); ofport != want {
		t.Fatalf("AddPort after reconnect: ofport %d, ovs-vsctl says %d", ofport, want)
	}
	if _, ok := c.GetPort(bridge); !ok {
		t.Fatal("cache has no br-int local port after reconnect")
	}
}

func TestTransactionWaitsForReconnect(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	killDaemon(t, o, "ovsdb-server")
	eventually(t, "Connected() to turn false", 5*time.Second, func() bool { return !c.Connected() })
	dev := veth(t, o, "ofs-pod5")
	go func() {
		time.Sleep(500 * time.Millisecond)
		startOVSDB(t, o)
	}()
	// Issued while ovsdb-server is down: blocks until the client is back, then succeeds.
	if _, err := c.AddPort(ctxT(t), bridge, dev, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAddPortTimesOutWithoutVswitchdAndCleansUp(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	dev := veth(t, o, "ofs-pod6")
	killDaemon(t, o, "ovs-vswitchd")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.AddPort(ctx, bridge, dev, nil)
	if err == nil || !strings.Contains(err.Error(), dev) || !strings.Contains(err.Error(), "ovs-vswitchd") {
		t.Fatalf("AddPort without ovs-vswitchd: %v", err)
	}
	if ps := listPorts(t, o); len(ps) != 0 {
		t.Fatalf("timed-out AddPort left ports: %v", ps)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	c.Close()
	c.Close()
	if c.Connected() {
		t.Fatal("Connected() after Close")
	}
	if err := c.EnsureBridge(ctxT(t), brIntSpec()); !errors.Is(err, ovsdb.ErrClosed) {
		t.Fatalf("EnsureBridge after Close: %v", err)
	}
}

func TestEnsureBridgeReportsBridgeVswitchdCannotCreate(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	err := c.EnsureBridge(ctxT(t), ovsdb.BridgeSpec{Name: "br-bad", DatapathType: "ofsdn-no-such-datapath", FailMode: "secure"})
	if err == nil || !strings.Contains(err.Error(), "br-bad") || !strings.Contains(err.Error(), "did not create it") {
		t.Fatalf("EnsureBridge with an unknown datapath type: %v", err)
	}
	if dpid := o.Vsctl(t, "get", "bridge", "br-bad", "datapath_id"); dpid != "[]" {
		t.Fatalf("ovs-vswitchd did create br-bad? datapath_id %s", dpid)
	}
}

func TestAddPortReplacesPortWhoseDeviceWasMissing(t *testing.T) {
	t.Parallel()
	o, c := setup(t)
	// A stale row: added while the device did not exist, so its ofport is -1.
	cmd := exec.Command("ovs-vsctl", "--db="+o.OVSDBEndpoint(), "add-port", bridge, "ofs-late")
	_ = cmd.Run() // fails: "could not open network device"
	if got := o.Vsctl(t, "get", "interface", "ofs-late", "ofport"); got != "-1" {
		t.Fatalf("stale interface ofport %s, want -1", got)
	}
	// Our cache trails ovs-vsctl's write a little: wait until it shows the stale row.
	eventually(t, "the cache to show ofs-late with ofport -1", 5*time.Second, func() bool {
		p, ok := c.GetPort("ofs-late")
		return ok && p.OFPort == -1
	})
	// AddPort replaces the failed port (delete + insert in one transaction); the device
	// is still missing, so the new one fails too and is removed.
	var ie *ovsdb.InterfaceError
	if _, err := c.AddPort(ctxT(t), bridge, "ofs-late", nil); !errors.As(err, &ie) {
		t.Fatalf("AddPort over a stale port, device still missing: %v", err)
	}
	if ps := listPorts(t, o); len(ps) != 0 {
		t.Fatalf("ports %v left after the failed replacement", ps)
	}
	_ = exec.Command("ovs-vsctl", "--db="+o.OVSDBEndpoint(), "add-port", bridge, "ofs-late").Run()
	eventually(t, "the cache to show ofs-late again", 5*time.Second, func() bool {
		p, ok := c.GetPort("ofs-late")
		return ok && p.OFPort == -1
	})
	// Now the device appears (ovs-vswitchd may or may not pick it up by itself).
	veth(t, o, "ofs-late")
	ofport, err := c.AddPort(ctxT(t), bridge, "ofs-late", map[string]string{"ofsdn-pod": "ns/late"})
	if err != nil {
		t.Fatal(err)
	}
	if want := vsctlInt(t, o, "get", "interface", "ofs-late", "ofport"); ofport != want || ofport <= 0 {
		t.Fatalf("AddPort ofport %d, ovs-vsctl says %d", ofport, want)
	}
	if ps := listPorts(t, o); len(ps) != 1 || ps[0] != "ofs-late" {
		t.Fatalf("ports %v, want just ofs-late", ps)
	}
}

// BenchmarkAddDeletePort measures one AddPort (transaction + wait for the ofport from the
// monitor) and one DeletePort of a veth on a real ovs-vswitchd.
func BenchmarkAddDeletePort(b *testing.B) {
	o := sandbox.Start(b)
	ctx := context.Background()
	c, err := ovsdb.Connect(ctx, o.OVSDBEndpoint(), ovsdb.Options{Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.EnsureBridge(ctx, brIntSpec()); err != nil {
		b.Fatal(err)
	}
	o.Exec(b, "ip", "link", "add", "ofs-b0", "type", "veth", "peer", "name", "ofs-b0-p")
	for b.Loop() {
		if _, err := c.AddPort(ctx, bridge, "ofs-b0", map[string]string{"ofsdn-pod": "bench/x"}); err != nil {
			b.Fatal(err)
		}
		if err := c.DeletePort(ctx, bridge, "ofs-b0"); err != nil {
			b.Fatal(err)
		}
	}
}

// connectWith connects with opts (the test's logger added).
func connectWith(t *testing.T, o *sandbox.OVS, opts ovsdb.Options) *ovsdb.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts.Logger = testLogger()
	c, err := ovsdb.Connect(ctx, o.OVSDBEndpoint(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// logTransactions makes ovsdb-server log every JSON-RPC message it receives, so that
// serverTransactions can count the transactions that reached it.
func logTransactions(t *testing.T, o *sandbox.OVS) {
	t.Helper()
	o.Exec(t, "ovs-appctl", "-t", filepath.Join(o.Dir, "ovsdb-server.ctl"), "vlog/set", "jsonrpc:file:dbg")
}

// serverTransactions counts the "transact" requests in ovsdb-server's log whose text
// contains every one of marks.
func serverTransactions(t *testing.T, o *sandbox.OVS, marks ...string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(o.Dir, "ovsdb-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `received request, method="transact"`) {
			continue
		}
		all := true
		for _, m := range marks {
			all = all && strings.Contains(line, m)
		}
		if all {
			n++
		}
	}
	return n
}

// TestGroupCommitConcurrentPortChanges: port inserts arriving while one is in flight share
// the next transaction (counted in ovsdb-server's own log), and every AddPort still gets
// its own, correct ofport. ovs-vswitchd is held (SIGSTOP) while the ADDs arrive, so the
// first one stays in flight until all have queued; the long GroupCommitMaxWait keeps the
// others queued meanwhile, whatever the machine's load.
func TestGroupCommitConcurrentPortChanges(t *testing.T) {
	t.Parallel()
	o := sandbox.Start(t)
	c := connectWith(t, o, ovsdb.Options{GroupCommitMaxWait: 3 * time.Second})
	if err := c.EnsureBridge(ctxT(t), brIntSpec()); err != nil {
		t.Fatal(err)
	}
	const n = 12
	devs := veths(t, o, "ofs-g", n)
	logTransactions(t, o)
	o.StopVswitchd(t)
	ofports := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ofports[i], errs[i] = c.AddPort(ctx, bridge, devs[i], map[string]string{"i": strconv.Itoa(i)})
		}()
	}
	eventually(t, "every port in the database", 20*time.Second, func() bool { return len(listPorts(t, o)) == n })
	o.ContVswitchd(t)
	wg.Wait()
	seen := map[int]bool{}
	for i := range devs {
		if errs[i] != nil {
			t.Fatalf("AddPort %s: %v", devs[i], errs[i])
		}
		if want := vsctlInt(t, o, "get", "interface", devs[i], "ofport"); ofports[i] != want || want <= 0 || seen[want] {
			t.Fatalf("%s: ofport %d, ovs-vsctl says %d (seen before: %v)", devs[i], ofports[i], want, seen[want])
		}
		seen[ofports[i]] = true
	}
	adds := serverTransactions(t, o, `"op":"insert"`, `"table":"Port"`)
	t.Logf("%d concurrent AddPorts reached ovsdb-server in %d transactions", n, adds)
	if adds >= n || adds < 1 {
		t.Fatalf("%d AddPorts took %d transactions, want fewer than %d", n, adds, n)
	}

	// Deletes group the same way (held here by a stopped ovsdb-server would be too
	// intrusive; vswitchd is not needed for a delete, so only count what happened).
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.DeletePort(ctxT(t), bridge, devs[i])
		}()
	}
	wg.Wait()
	for i := range devs {
		if errs[i] != nil {
			t.Fatalf("DeletePort %s: %v", devs[i], errs[i])
		}
	}
	if ps := listPorts(t, o); len(ps) != 0 {
		t.Fatalf("ports left: %v", ps)
	}
	dels := serverTransactions(t, o, `"op":"delete"`, `"table":"Port"`)
	t.Logf("%d concurrent DeletePorts reached ovsdb-server in %d transactions", n, dels)
	if dels > n || dels < 1 {
		t.Fatalf("%d DeletePorts took %d transactions, want 1..%d", n, dels, n)
	}
}

// TestGroupCommitBadRequestFailsAlone: two requests creating the same port land in one
// group with others; the group's transaction fails (two Interface rows with one name), so
// every member is retried alone: exactly one of the pair fails, naming the port, and every
// other port is added with its right ofport.
func TestGroupCommitBadRequestFailsAlone(t *testing.T) {
	t.Parallel()
	o := sandbox.Start(t)
	c := connectWith(t, o, ovsdb.Options{GroupCommitMaxWait: 3 * time.Second})
	if err := c.EnsureBridge(ctxT(t), brIntSpec()); err != nil {
		t.Fatal(err)
	}
	first := veth(t, o, "ofs-f0")
	dup := veth(t, o, "ofs-dup")
	const n = 6
	devs := []string{dup, dup}
	for i := 0; i < n; i++ {
		devs = append(devs, veth(t, o, fmt.Sprintf("ofs-b%d", i)))
	}
	logTransactions(t, o)
	o.StopVswitchd(t)
	// The first ADD goes alone and stays in flight (no ofport while vswitchd is stopped).
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.AddPort(ctxT(t), bridge, first, nil)
		firstErr <- err
	}()
	eventually(t, "the first port in the database", 10*time.Second, func() bool { return len(listPorts(t, o)) == 1 })
	ofports := make([]int, len(devs))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ofports[i], errs[i] = c.AddPort(ctx, bridge, devs[i], map[string]string{"i": strconv.Itoa(i)})
		}()
	}
	eventually(t, "every port in the database", 20*time.Second, func() bool { return len(listPorts(t, o)) == n+2 })
	o.ContVswitchd(t)
	wg.Wait()
	if err := <-firstErr; err != nil {
		t.Fatalf("first AddPort: %v", err)
	}
	if failed := serverTransactions(t, o, `"op":"insert"`, `"table":"Port"`, `"name":"ofs-b0"`); failed < 2 {
		t.Fatalf("ofs-b0 was sent in %d transactions; want its group's and its retry alone", failed)
	}
	dupFails := 0
	for i, d := range devs {
		if d == dup && errs[i] != nil {
			dupFails++
			if !strings.Contains(errs[i].Error(), dup) {
				t.Errorf("the failed duplicate's error does not name the port: %v", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("AddPort %s (member of the failed group): %v", d, errs[i])
		}
		if want := vsctlInt(t, o, "get", "interface", d, "ofport"); ofports[i] != want || want <= 0 {
			t.Fatalf("%s: ofport %d, ovs-vsctl says %d", d, ofports[i], want)
		}
	}
	if dupFails != 1 {
		t.Fatalf("%d of the two AddPorts of %s failed, want exactly one: %v", dupFails, dup, errs[:2])
	}
}

// BenchmarkConcurrentAddPorts times 32 concurrent AddPorts of veths followed by their 32
// concurrent DeletePorts per iteration, with the group commit (default options) and
// without it (GroupCommitMaxBatch 1: one transaction per port).
func BenchmarkConcurrentAddPorts(b *testing.B) {
	const n = 32
	for _, mode := range []struct {
		name  string
		batch int
		wait  time.Duration
	}{{"group", 0, 0}, {"alone", 1, 0}} {
		b.Run(mode.name, func(b *testing.B) {
			o := sandbox.Start(b)
			ctx := context.Background()
			c, err := ovsdb.Connect(ctx, o.OVSDBEndpoint(), ovsdb.Options{Logger: testLogger(), GroupCommitMaxBatch: mode.batch, GroupCommitMaxWait: mode.wait})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.EnsureBridge(ctx, brIntSpec()); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < n; i++ {
				o.Exec(b, "ip", "link", "add", fmt.Sprintf("ofs-b%d", i), "type", "veth", "peer", "name", fmt.Sprintf("ofs-b%d-p", i))
			}
			for b.Loop() {
				for _, del := range []bool{false, true} {
					var wg sync.WaitGroup
					for i := 0; i < n; i++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							dev := fmt.Sprintf("ofs-b%d", i)
							var err error
							if del {
								err = c.DeletePort(ctx, bridge, dev)
							} else {
								_, err = c.AddPort(ctx, bridge, dev, map[string]string{"ofsdn-pod": "bench/x"})
							}
							if err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
			}
		})
	}
}
