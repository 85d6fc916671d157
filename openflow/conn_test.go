package openflow

// Tests of the OpenFlow connection against a real, private Open vSwitch (test/sandbox):
// the handshake, batches confirmed by barrier, error attribution, bundles, flow stats
// with cookie masks and multipart continuation, and connection loss.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/test/sandbox"
)

// ofTestBridge starts a sandbox with bridge br-int (userspace datapath, OpenFlow 1.3 only,
// fail_mode=secure so it starts with no flows) and returns it with a connection to it.
func ofTestBridge(t *testing.T, opts Options) (*sandbox.OVS, *Conn) {
	t.Helper()
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw, err := Dial(ctx, ovs.MgmtSocket("br-int"), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { sw.Close() })
	return ovs, sw
}

// ofTestFlow returns an OFPFC_ADD of a flow in table that matches in_port=inPort and
// either goes to table+1 or, in the last table 253, outputs to port 1.
func ofTestFlow(table uint8, priority uint16, cookie uint64, inPort uint32) *openflow13.FlowMod {
	fm := openflow13.NewFlowMod()
	fm.TableId = table
	fm.Priority = priority
	fm.Cookie = cookie
	fm.Command = openflow13.FC_ADD
	fm.Match.AddField(*openflow13.NewInPortField(inPort))
	if table < 253 {
		fm.AddInstruction(openflow13.NewInstrGotoTable(table + 1))
	} else {
		ia := openflow13.NewInstrApplyActions()
		ia.AddAction(openflow13.NewActionOutput(1), false)
		fm.AddInstruction(ia)
	}
	return fm
}

// ofOutputFlow returns an OFPFC_ADD of a flow matching in_port=inPort with actions=output:port.
func ofOutputFlow(table uint8, cookie uint64, inPort, port uint32) *openflow13.FlowMod {
	fm := openflow13.NewFlowMod()
	fm.TableId = table
	fm.Priority = 100
	fm.Cookie = cookie
	fm.Match.AddField(*openflow13.NewInPortField(inPort))
	ia := openflow13.NewInstrApplyActions()
	ia.AddAction(openflow13.NewActionOutput(port), false)
	fm.AddInstruction(ia)
	return fm
}

// ofBadPrereqFlow matches ipv4_dst without eth_type=0x0800: OVS rejects it with
// OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ (OpenFlow 1.3.5 §7.2.3.6 prerequisites).
func ofBadPrereqFlow(table uint8) *openflow13.FlowMod {
	fm := openflow13.NewFlowMod()
	fm.TableId = table
	fm.Priority = 300
	fm.Cookie = 0xbad
	fm.Match.AddField(*openflow13.NewIpv4DstField(net.IPv4(10, 0, 0, 1), nil))
	fm.AddInstruction(openflow13.NewInstrGotoTable(table + 1))
	return fm
}

// ofDumpLines returns the flow lines of ovs-ofctl dump-flows (optionally filtered).
func ofDumpLines(t *testing.T, ovs *sandbox.OVS, filter ...string) []string {
	t.Helper()
	args := append([]string{"dump-flows", ovs.MgmtSocket("br-int")}, filter...)
	var lines []string
	for _, l := range strings.Split(ovs.Ofctl(t, args...), "\n") {
		if strings.Contains(l, "cookie=") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// ofLogRecorder is an io.Writer for a slog text handler that tests can inspect.
type ofLogRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *ofLogRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *ofLogRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func ofVswitchdPid(t *testing.T, ovs *sandbox.OVS) int {
	t.Helper()
	b, err := os.ReadFile(ovs.Dir + "/ovs-vswitchd.pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

func ofWaitDone(t *testing.T, sw *Conn, within time.Duration) {
	t.Helper()
	select {
	case <-sw.Done():
	case <-time.After(within):
		t.Fatalf("Done() not closed within %s", within)
	}
}

func TestConnDialDatapathID(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	want, err := strconv.ParseUint(strings.Trim(ovs.Vsctl(t, "get", "bridge", "br-int", "datapath_id"), `"`), 16, 64)
	if err != nil {
		t.Fatalf("datapath_id from ovs-vsctl: %v", err)
	}
	if got := sw.DatapathID(); got != want {
		t.Fatalf("DatapathID() = %016x, ovs-vsctl says %016x", got, want)
	}
	if sw.NumTables() < 200 {
		t.Errorf("NumTables() = %d, OVS has 254 (or 255)", sw.NumTables())
	}
	if err := sw.Err(); err != nil {
		t.Fatalf("Err() on a live connection = %v", err)
	}
	if _, err := sw.Echo(context.Background()); err != nil {
		t.Fatalf("Echo: %v", err)
	}
	if err := sw.Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

func TestConnDialRejectsBridgeWithoutOpenFlow13(t *testing.T) {
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-old", "--", "set", "bridge", "br-old", "datapath_type=netdev", "protocols=OpenFlow10")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw, err := Dial(ctx, ovs.MgmtSocket("br-old"), Options{})
	if err == nil {
		sw.Close()
		t.Fatal("Dial to an OpenFlow 1.0-only bridge succeeded")
	}
	if !strings.Contains(err.Error(), "protocols=OpenFlow13") || !strings.Contains(err.Error(), "br-old") {
		t.Fatalf("error does not name the bridge and the fix: %v", err)
	}
	t.Logf("error: %v", err)

	_, err = Dial(ctx, ovs.MgmtSocket("br-missing"), Options{})
	if err == nil || !strings.Contains(err.Error(), "br-missing") {
		t.Fatalf("dial of a missing bridge: %v", err)
	}
}

func TestConnApplyInstallsFlows(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	const n = 200
	var ops []FlowModOp
	for i := 0; i < n; i++ {
		ops = append(ops, FlowModOp{Mod: ofTestFlow(uint8(i%5), 100, 0x100+uint64(i), uint32(i+1)), Name: fmt.Sprintf("flow %d", i)})
	}
	if err := sw.Apply(context.Background(), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// The barrier reply means the flows are installed: no polling.
	lines := ofDumpLines(t, ovs)
	if len(lines) != n {
		t.Fatalf("dump-flows shows %d flows, want %d:\n%s", len(lines), n, strings.Join(lines, "\n"))
	}
	for _, want := range []string{
		"cookie=0x100, duration=", "table=0, n_packets=0, n_bytes=0, priority=100,in_port=1 actions=goto_table:1",
		"cookie=0x101,", "table=1, n_packets=0, n_bytes=0, priority=100,in_port=2 actions=goto_table:2",
	} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("dump-flows lacks %q:\n%s", want, strings.Join(lines[:4], "\n"))
		}
	}
	if err := sw.Apply(context.Background(), nil); err != nil {
		t.Fatalf("Apply(nil): %v", err)
	}
}

func TestConnApplyNamesRejectedFlow(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	// goto_table must go forward (OpenFlow 1.3.5 §5.1): table 5 → 2 is OFPBIC_BAD_TABLE_ID.
	backwards := ofTestFlow(5, 100, 0x2, 7)
	backwards.Instructions = nil
	backwards.AddInstruction(openflow13.NewInstrGotoTable(2))
	ops := []FlowModOp{
		{Mod: ofTestFlow(0, 100, 0x1, 1), Name: "good flow A"},
		{Mod: ofBadPrereqFlow(0), Name: "bad flow: ip_dst without eth_type"},
		{Mod: ofTestFlow(0, 100, 0x1, 2), Name: "good flow B"},
		{Mod: backwards, Name: "bad flow: goto_table backwards"},
	}
	err := sw.Apply(context.Background(), ops)
	if err == nil {
		t.Fatal("Apply with bad flows succeeded")
	}
	t.Logf("error: %v", err)
	msg := err.Error()
	for _, want := range []string{
		`"bad flow: ip_dst without eth_type"`, "OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ",
		`"bad flow: goto_table backwards"`, "OFPET_BAD_INSTRUCTION/OFPBIC_BAD_TABLE_ID",
		"rejected 2 of 4",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if strings.Contains(msg, "good flow") {
		t.Errorf("error blames a good flow: %v", err)
	}
	var re *RequestError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Name, "bad flow") || re.Err == nil {
		t.Fatalf("errors.As(*RequestError) = %+v", re)
	}
	// Apply is not atomic: the good flows are in.
	if lines := ofDumpLines(t, ovs); len(lines) != 2 {
		t.Fatalf("want the 2 good flows installed, have:\n%s", strings.Join(lines, "\n"))
	}
	// The connection is still usable after errors.
	if err := sw.Apply(context.Background(), []FlowModOp{{Mod: ofTestFlow(1, 1, 3, 3), Name: "after"}}); err != nil {
		t.Fatalf("Apply after errors: %v", err)
	}
}

func TestConnApplyBundleAllOrNothing(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	var ops []FlowModOp
	for i := 0; i < 20; i++ {
		ops = append(ops, FlowModOp{Mod: ofTestFlow(0, 100, 0x500, uint32(i+1)), Name: fmt.Sprintf("good %d", i)})
	}
	bad := append(append([]FlowModOp{}, ops[:10]...), FlowModOp{Mod: ofBadPrereqFlow(0), Name: "the bad one"})
	bad = append(bad, ops[10:]...)
	err := sw.ApplyBundle(context.Background(), bad)
	if err == nil {
		t.Fatal("bundle with a bad flow committed")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), `"the bad one"`) || !strings.Contains(err.Error(), "OFPBMC_BAD_PREREQ") {
		t.Fatalf("bundle error does not name the bad flow and its error: %v", err)
	}
	if strings.Contains(err.Error(), `"good `) {
		t.Errorf("bundle error blames a good flow: %v", err)
	}
	if lines := ofDumpLines(t, ovs); len(lines) != 0 {
		t.Fatalf("failed bundle left %d flows:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	if err := sw.ApplyBundle(context.Background(), ops); err != nil {
		t.Fatalf("ApplyBundle of good flows: %v", err)
	}
	if lines := ofDumpLines(t, ovs); len(lines) != len(ops) {
		t.Fatalf("bundle installed %d flows, want %d", len(lines), len(ops))
	}
	// A mod that only fails when applied (OFPFF_CHECK_OVERLAP against an installed flow)
	// fails the commit: the switch rolls back the mods before it.
	var late []FlowModOp
	for i := 0; i < 5; i++ {
		late = append(late, FlowModOp{Mod: ofTestFlow(1, 100, 0x700, uint32(i+1)), Name: fmt.Sprintf("late good %d", i)})
	}
	overlap := ofTestFlow(0, 100, 0x701, 1)
	overlap.Match = *openflow13.NewMatch() // matches every packet, so overlaps in_port=N at priority 100
	overlap.Flags = openflow13.FF_CHECK_OVERLAP
	late = append(late, FlowModOp{Mod: overlap, Name: "overlapping"})
	err = sw.ApplyBundle(context.Background(), late)
	if err == nil {
		t.Fatal("bundle with an overlapping flow committed")
	}
	t.Logf("commit error: %v", err)
	if !strings.Contains(err.Error(), `"overlapping"`) || !strings.Contains(err.Error(), "OFPFMFC_OVERLAP") {
		t.Fatalf("commit error does not name the overlapping flow: %v", err)
	}
	if lines := ofDumpLines(t, ovs); len(lines) != len(ops) {
		t.Fatalf("failed commit changed the flow table: %d flows:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	// A bundle mixing a delete and adds (ORDERED): replace cookie 0x500 by 0x600 atomically.
	del := openflow13.NewFlowMod()
	del.Command = openflow13.FC_DELETE
	del.TableId = openflow13.OFPTT_ALL
	del.Cookie, del.CookieMask = 0x500, ^uint64(0)
	repl := []FlowModOp{{Mod: del, Name: "delete 0x500"}, {Mod: ofTestFlow(0, 100, 0x600, 1), Name: "new"}}
	if err := sw.ApplyBundle(context.Background(), repl); err != nil {
		t.Fatalf("ApplyBundle delete+add: %v", err)
	}
	if lines := ofDumpLines(t, ovs); len(lines) != 1 || !strings.Contains(lines[0], "cookie=0x600") {
		t.Fatalf("after delete+add bundle:\n%s", strings.Join(lines, "\n"))
	}
}

func TestConnDumpFlowsCookieMask(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	// 3000 flows: a flow stats reply holds < 64 KiB, so this needs OFPMPF_REPLY_MORE parts.
	var ops []FlowModOp
	want := map[uint64]bool{}
	for i := 0; i < 3000; i++ {
		owner := uint64(1 + i%3) // owners 1, 2, 3 in the upper 32 bits
		cookie := owner<<32 | uint64(i)
		if owner == 2 {
			want[cookie] = true
		}
		ops = append(ops, FlowModOp{Mod: ofTestFlow(uint8(i%4), uint16(10+i%7), cookie, uint32(i+1)), Name: fmt.Sprint(i)})
	}
	if err := sw.Apply(context.Background(), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	all, err := sw.DumpFlows(context.Background(), openflow13.OFPTT_ALL, 0, 0)
	if err != nil {
		t.Fatalf("DumpFlows all: %v", err)
	}
	if len(all) != 3000 {
		t.Fatalf("DumpFlows(all) returned %d flows, want 3000", len(all))
	}
	got, err := sw.DumpFlows(context.Background(), openflow13.OFPTT_ALL, 2<<32, 0xffffffff00000000)
	if err != nil {
		t.Fatalf("DumpFlows: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("DumpFlows(cookie 2/mask) returned %d flows, want %d", len(got), len(want))
	}
	for _, f := range got {
		if !want[f.Cookie] {
			t.Fatalf("DumpFlows returned cookie %#x, not selected by the mask", f.Cookie)
		}
		i := int(f.Cookie & 0xffffffff)
		if f.TableId != uint8(i%4) || f.Priority != uint16(10+i%7) {
			t.Fatalf("flow %d decoded as table %d priority %d", i, f.TableId, f.Priority)
		}
		if len(f.Match.Fields) != 1 || f.Match.Fields[0].Field != openflow13.OXM_FIELD_IN_PORT ||
			f.Match.Fields[0].Value.(*openflow13.InPortField).InPort != uint32(i+1) {
			t.Fatalf("flow %d: match decoded as %+v", i, f.Match.Fields)
		}
		if len(f.Instructions) != 1 {
			t.Fatalf("flow %d: %d instructions decoded, want 1", i, len(f.Instructions))
		}
	}
	// Same answer as ovs-ofctl.
	if lines := ofDumpLines(t, ovs, "cookie=0x200000000/0xffffffff00000000"); len(lines) != len(got) {
		t.Fatalf("ovs-ofctl sees %d flows with the cookie, DumpFlows %d", len(lines), len(got))
	}
	// One table only.
	t3, err := sw.DumpFlows(context.Background(), 3, 2<<32, 0xffffffff00000000)
	if err != nil {
		t.Fatalf("DumpFlows table 3: %v", err)
	}
	for _, f := range t3 {
		if f.TableId != 3 {
			t.Fatalf("DumpFlows(table 3) returned a flow of table %d", f.TableId)
		}
	}
	if len(t3) != 250 {
		t.Fatalf("DumpFlows(table 3, owner 2) = %d flows, want 250", len(t3))
	}
}

func TestConnDeleteByCookie(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	var ops []FlowModOp
	for i := 0; i < 30; i++ {
		ops = append(ops, FlowModOp{Mod: ofTestFlow(uint8(i%3), 100, uint64(0xa0+i%2)<<16|uint64(i), uint32(i+1)), Name: fmt.Sprint(i)})
	}
	if err := sw.Apply(context.Background(), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	del := openflow13.NewFlowMod()
	del.Command = openflow13.FC_DELETE
	del.TableId = openflow13.OFPTT_ALL
	del.Cookie, del.CookieMask = 0xa1<<16, 0xffff0000
	if err := sw.Apply(context.Background(), []FlowModOp{{Mod: del, Name: "delete owner 0xa1"}}); err != nil {
		t.Fatalf("delete by cookie: %v", err)
	}
	lines := ofDumpLines(t, ovs)
	if len(lines) != 15 {
		t.Fatalf("after delete %d flows remain, want 15:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "cookie=0xa0") {
			t.Fatalf("delete by cookie removed the wrong flows; left: %s", l)
		}
	}
}

// libOpenflow's FlowMod encoder writes out_port into out_group too; encodeFlowMod fixes
// that, which a delete filtered by out_port shows.
func TestConnDeleteByOutPort(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	ops := []FlowModOp{
		{Mod: ofOutputFlow(0, 1, 1, 5), Name: "to 5"},
		{Mod: ofOutputFlow(0, 2, 2, 6), Name: "to 6"},
	}
	if err := sw.Apply(context.Background(), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	del := openflow13.NewFlowMod()
	del.Command = openflow13.FC_DELETE
	del.TableId = openflow13.OFPTT_ALL
	del.OutPort = 5
	if err := sw.Apply(context.Background(), []FlowModOp{{Mod: del, Name: "delete out_port=5"}}); err != nil {
		t.Fatalf("delete by out_port: %v", err)
	}
	lines := ofDumpLines(t, ovs)
	if len(lines) != 1 || !strings.Contains(lines[0], "output:6") {
		t.Fatalf("after delete out_port=5:\n%s", strings.Join(lines, "\n"))
	}
}

// A DELETE_STRICT built from the same flow value as its ADD still carries instructions;
// libOpenflow's header length leaves them out, which encodeFlowMod corrects (otherwise the
// switch would read the instructions as a bogus next message).
func TestConnDeleteStrictWithInstructions(t *testing.T) {
	logs := &ofLogRecorder{}
	ovs, sw := ofTestBridge(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	a, b := ofTestFlow(0, 100, 1, 1), ofTestFlow(0, 100, 2, 2)
	if err := sw.Apply(context.Background(), []FlowModOp{{Mod: a, Name: "a"}, {Mod: b, Name: "b"}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	del := ofTestFlow(0, 100, 1, 1)
	del.Command = openflow13.FC_DELETE_STRICT
	if err := sw.Apply(context.Background(), []FlowModOp{{Mod: del, Name: "delete a"}}); err != nil {
		t.Fatalf("DELETE_STRICT: %v", err)
	}
	lines := ofDumpLines(t, ovs)
	if len(lines) != 1 || !strings.Contains(lines[0], "in_port=2") {
		t.Fatalf("after DELETE_STRICT of in_port=1:\n%s", strings.Join(lines, "\n"))
	}
	if err := sw.Barrier(context.Background()); err != nil || sw.Err() != nil {
		t.Fatalf("connection unhealthy after DELETE_STRICT: %v / %v", err, sw.Err())
	}
	if l := logs.String(); strings.Contains(l, "level=WARN") || strings.Contains(l, "nobody waits for") {
		t.Fatalf("the switch sent unexpected messages (a mis-framed request?):\n%s", l)
	}
}

func TestConnConcurrentApply(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	const goroutines, each = 50, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops []FlowModOp
			for i := 0; i < each; i++ {
				ops = append(ops, FlowModOp{Mod: ofTestFlow(uint8(i%3), 100, uint64(g)<<16|uint64(i), uint32(g*each+i+1)), Name: fmt.Sprintf("g%d/%d", g, i)})
			}
			if g%5 == 0 {
				errs <- sw.ApplyBundle(context.Background(), ops)
			} else {
				errs <- sw.Apply(context.Background(), ops)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Apply: %v", err)
		}
	}
	if lines := ofDumpLines(t, ovs); len(lines) != goroutines*each {
		t.Fatalf("%d flows installed, want %d", len(lines), goroutines*each)
	}
	fs, err := sw.DumpFlows(context.Background(), openflow13.OFPTT_ALL, 7<<16, 0xffff0000)
	if err != nil || len(fs) != each {
		t.Fatalf("DumpFlows(goroutine 7) = %d flows, %v", len(fs), err)
	}
}

func TestConnVswitchdKilledFailsPendingAndNextCalls(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	pid := ofVswitchdPid(t, ovs)
	// Freeze vswitchd so the next Apply is pending (written, not answered), then kill it.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		res <- sw.Apply(context.Background(), []FlowModOp{{Mod: ofTestFlow(0, 1, 1, 1), Name: "pending"}})
	}()
	select {
	case err := <-res:
		t.Fatalf("Apply returned while vswitchd is stopped: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-res:
		if !errors.Is(err, ErrDisconnected) {
			t.Fatalf("pending Apply: %v, want ErrDisconnected", err)
		}
		t.Logf("pending Apply failed after %s: %v", time.Since(start), err)
	case <-time.After(3 * time.Second):
		t.Fatal("pending Apply still blocked 3s after vswitchd was killed")
	}
	ofWaitDone(t, sw, time.Second)
	if !errors.Is(sw.Err(), ErrDisconnected) {
		t.Fatalf("Err() = %v", sw.Err())
	}
	start = time.Now()
	err := sw.Apply(context.Background(), []FlowModOp{{Mod: ofTestFlow(0, 1, 1, 1), Name: "next"}})
	if !errors.Is(err, ErrDisconnected) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Apply after loss: %v after %s", err, time.Since(start))
	}
	if _, err := sw.DumpFlows(context.Background(), openflow13.OFPTT_ALL, 0, 0); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("DumpFlows after loss: %v", err)
	}
}

func TestConnEchoTimeoutDeclaresDead(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{EchoInterval: 200 * time.Millisecond, EchoTimeout: 500 * time.Millisecond})
	// Idle for a few echo intervals: the switch answers, the connection stays up.
	time.Sleep(time.Second)
	if err := sw.Err(); err != nil {
		t.Fatalf("connection died while the switch answers echoes: %v", err)
	}
	pid := ofVswitchdPid(t, ovs)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	ofWaitDone(t, sw, 3*time.Second)
	if err := sw.Err(); !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "echo") {
		t.Fatalf("Err() = %v, want an echo timeout", err)
	}
}

func TestConnContextCancelDoesNotHang(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	pid := ofVswitchdPid(t, ovs)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := sw.Apply(ctx, []FlowModOp{{Mod: ofTestFlow(0, 1, 1, 1), Name: "slow"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("Apply with expired ctx: %v after %s", err, time.Since(start))
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The late barrier reply of the abandoned call is dropped; the connection still works.
	if err := sw.Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier after a cancelled call: %v", err)
	}
	if lines := ofDumpLines(t, ovs); len(lines) != 1 {
		t.Fatalf("the abandoned flow mod should still have been applied once vswitchd resumed: %v", lines)
	}
}

func TestConnClose(t *testing.T) {
	_, sw := ofTestBridge(t, Options{EchoInterval: 50 * time.Millisecond})
	if err := sw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ofWaitDone(t, sw, 100*time.Millisecond)
	if !errors.Is(sw.Err(), ErrDisconnected) {
		t.Fatalf("Err() after Close = %v", sw.Err())
	}
	if err := sw.Barrier(context.Background()); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Barrier after Close: %v", err)
	}
	if err := sw.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConnDumpFlowsMACMatches: flows matching dl_src, a masked dl_dst, arp_sha and
// arp_tha come back from DumpFlows with those addresses (the pinned libOpenflow alone
// decodes them as zeros), and re-encode to the bytes that were sent, so the inspection
// API pairs them with the desired flows by value.
func TestConnDumpFlowsMACMatches(t *testing.T) {
	ovs, sw := ofTestBridge(t, Options{})
	src := net.HardwareAddr{0x0a, 0x58, 0x0a, 0x8e, 0x00, 0x07}
	dst := net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0x00}
	dstMask := net.HardwareAddr{0xff, 0xff, 0xff, 0x80, 0x00, 0x00}
	sha := net.HardwareAddr{0x0a, 0x58, 0x0a, 0x8e, 0x00, 0x08}
	tha := net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

	eth := openflow13.NewFlowMod()
	eth.Cookie, eth.Priority = 0x1, 100
	eth.Match.AddField(*openflow13.NewInPortField(1))
	eth.Match.AddField(*openflow13.NewEthSrcField(src, nil))
	eth.Match.AddField(*openflow13.NewEthDstField(dst, &dstMask))
	eth.AddInstruction(openflow13.NewInstrGotoTable(1))
	arp := openflow13.NewFlowMod()
	arp.Cookie, arp.Priority = 0x2, 100
	arp.Match.AddField(*openflow13.NewEthTypeField(0x0806))
	arp.Match.AddField(*openflow13.NewArpShaField(sha))
	arp.Match.AddField(*openflow13.NewArpThaField(tha))
	arp.AddInstruction(openflow13.NewInstrGotoTable(1))
	if err := sw.Apply(context.Background(), []FlowModOp{{Mod: eth, Name: "eth"}, {Mod: arp, Name: "arp"}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	t.Logf("ovs-ofctl:\n%s", strings.Join(ofDumpLines(t, ovs), "\n"))

	stats, err := sw.DumpFlows(context.Background(), openflow13.OFPTT_ALL, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range stats {
		for _, f := range s.Match.Fields {
			switch v := f.Value.(type) {
			case *openflow13.EthSrcField:
				got["eth_src"] = v.EthSrc.String()
			case *openflow13.EthDstField:
				got["eth_dst"] = v.EthDst.String()
				if m, ok := f.Mask.(*openflow13.EthDstField); ok {
					got["eth_dst_mask"] = m.EthDst.String()
				}
			case *openflow13.ArpXHaField:
				if f.Field == openflow13.OXM_FIELD_ARP_SHA {
					got["arp_sha"] = v.ArpHa.String()
				} else {
					got["arp_tha"] = v.ArpHa.String()
				}
			}
		}
	}
	want := map[string]string{"eth_src": src.String(), "eth_dst": dst.String(), "eth_dst_mask": dstMask.String(),
		"arp_sha": sha.String(), "arp_tha": tha.String()}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("dumped %s = %q, want %s", k, got[k], w)
		}
	}
	// The dumped matches encode to the sent ones (fields in any order).
	sent := map[uint64]openflow13.Match{0x1: eth.Match, 0x2: arp.Match}
	for _, s := range stats {
		if a, b := MatchKey(s.Match), MatchKey(sent[s.Cookie]); a != b {
			t.Errorf("cookie %#x: dumped match %s, sent %s", s.Cookie, a, b)
		}
	}
}

// TestConnDumpFlowsUnknownNiciraAction: a flow whose actions include a Nicira action the
// pinned libOpenflow cannot decode (multipath, on every UDP Service port's flow) comes
// back from DumpFlows with its match and counters and without instructions, logged at
// debug level only: the audit and the inspection API dump such flows every round, and
// the flow is well formed. A malformed entry is not taken for one (still a warning).
func TestConnDumpFlowsUnknownNiciraAction(t *testing.T) {
	var logs bytes.Buffer
	ovs, sw := ofTestBridge(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ovs.Ofctl(t, "add-flow", ovs.MgmtSocket("br-int"),
		"cookie=0x7,priority=100,udp,nw_dst=10.96.0.10,tp_dst=53 actions=load:0x1->NXM_NX_REG5[],multipath(symmetric_l3l4+udp,0,modulo_n,4,0,NXM_NX_REG6[0..15]),goto_table:1")
	stats, err := sw.DumpFlows(context.Background(), openflow13.OFPTT_ALL, 0x7, 0xffffffffffffffff)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Priority != 100 || len(stats[0].Match.Fields) != 4 {
		t.Fatalf("DumpFlows of the multipath flow: %+v, want one entry, priority 100, its 4 match fields", stats)
	}
	if logs.Len() != 0 {
		t.Errorf("DumpFlows of a flow with a multipath action logged at warning level:\n%s", logs.String())
	}
	for _, e := range [][]byte{nil, make([]byte, 51), make([]byte, 64)} {
		if sub := undecodedNXSubtype(e); sub != -1 {
			t.Errorf("undecodedNXSubtype of a malformed %d-byte entry = %d, want -1", len(e), sub)
		}
	}
}
