package controller

// Tests of the reconnecting Switch and the flow store's per-connection sync against a real,
// private Open vSwitch: a dead connection (ovs-vswitchd hung) and a restarted ovs-vswitchd
// both end with exactly the desired flows on the switch; changes while down fail fast.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/switchstate"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// cookieCounts counts flows per cookie.
func cookieCounts(fs []flows.Flow) map[uint64]int {
	m := map[uint64]int{}
	for _, f := range fs {
		m[uint64(f.Cookie)]++
	}
	return m
}

// ofTestBridge starts a sandbox with bridge br-int (userspace datapath, OpenFlow 1.3 only,
// fail_mode=secure so it starts with no flows) and returns it with a connection to it.
func ofTestBridge(t testing.TB, opts openflow.Options) (*sandbox.OVS, *openflow.Conn) {
	t.Helper()
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw, err := openflow.Dial(ctx, ovs.MgmtSocket("br-int"), opts)
	if err != nil {
		t.Fatalf("openflow.Dial: %v", err)
	}
	t.Cleanup(func() { sw.Close() })
	return ovs, sw
}

// switchTestNode is a Node on a sandbox bridge for the realizers' tests (policy,
// Services): pod subnet 10.244.1.0/24, gateway ofport 2, generation 3, NetworkPolicy on
// (and the Services feature with services), its store not yet synchronised to the
// returned connection; ctx ends with the test, after 60 s at most.
func switchTestNode(t *testing.T, services bool) (*sandbox.OVS, *openflow.Conn, *Node, context.Context) {
	t.Helper()
	ovs, sw := ofTestBridge(t, openflow.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	gwMAC, _ := net.ParseMAC("0a:58:0a:f4:01:01")
	n := &Node{log: slog.Default(), runCtx: ctx, store: flowStore{switchstate.New()}, opts: NodeOptions{DataDir: t.TempDir()},
		cfg: flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: gwMAC, GatewayIP: net.ParseIP("10.244.1.1").To4(),
			PodSubnet: subnet, Generation: 3, Policy: true, Services: services}}
	return ovs, sw, n, ctx
}

// ofDumpLines returns the flow lines of ovs-ofctl dump-flows of br-int.
func ofDumpLines(t *testing.T, ovs *sandbox.OVS) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", ovs.MgmtSocket("br-int")), "\n") {
		if strings.Contains(l, "cookie=") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

var reCookie = regexp.MustCompile(`cookie=(0x[0-9a-f]+)`)

// switchCookieCounts counts the switch's flows per cookie, from ovs-ofctl dump-flows.
func switchCookieCounts(t *testing.T, ovs *sandbox.OVS) map[uint64]int {
	t.Helper()
	m := map[uint64]int{}
	for _, l := range ofDumpLines(t, ovs) {
		c, err := strconv.ParseUint(reCookie.FindStringSubmatch(l)[1], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		m[c]++
	}
	return m
}

func sameCounts(a, b map[uint64]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func fmtCounts(m map[uint64]int) string {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf("  %#x: %d\n", k, m[k])
	}
	return s
}

func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSwitchReconnectReplaysExactDesiredState(t *testing.T) {
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	_, subnet, _ := net.ParseCIDR("10.150.0.0/24")
	cfg := flows.NodeConfig{GatewayOFPort: 1, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x96, 0, 1},
		GatewayIP: net.ParseIP("10.150.0.1").To4(), PodSubnet: subnet, Generation: 7}
	pod := func(i int) flows.Pod {
		return flows.Pod{OFPort: uint32(10 + i), MAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x96, 0, byte(i)},
			IPs: []net.IP{net.IPv4(10, 150, 0, byte(i)).To4()}, OwnerID: uint32(0x0a960000 + i)}
	}
	store := flowStore{switchstate.New()}
	store.Load(flows.PipelineOwner, flows.PipelineFlows(cfg))
	store.Load(flows.PodOwner(pod(2)), flows.PodFlows(cfg, pod(2)))
	store.Load(flows.PodOwner(pod(3)), flows.PodFlows(cfg, pod(3)))

	var firsts, reconnects int
	sw := openflow.NewSwitch(ovs.MgmtSocket("br-int"), openflow.SwitchOptions{
		OF:         openflow.Options{EchoInterval: 200 * time.Millisecond},
		MaxBackoff: 200 * time.Millisecond,
	}, func(ctx context.Context, c *openflow.Conn, first bool) error {
		var pre []openflow.FlowModOp
		if first {
			firsts++
		} else {
			reconnects++
			pre = []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete all"}}
		}
		return store.Sync(ctx, c, pre, nil)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sw.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sw.Close() })
	if got, want := switchCookieCounts(t, ovs), cookieCounts(store.All()); !sameCounts(got, want) {
		t.Fatalf("after Start: switch has\n%swant\n%s", fmtCounts(got), fmtCounts(want))
	}

	// 1. The connection dies while ovs-vswitchd keeps its tables (hung past the echo
	// timeout). A stray flow added meanwhile must not survive the replay.
	ovs.Ofctl(t, "add-flow", ovs.MgmtSocket("br-int"), "cookie=0xdead,table=3,priority=5,actions=drop")
	ovs.StopVswitchd(t)
	waitUntil(t, 20*time.Second, "the connection to be declared dead", func() bool { return !sw.Connected() })
	err := store.SetOwner(context.Background(), flows.PodOwner(pod(4)), flows.PodFlows(cfg, pod(4)))
	if !errors.Is(err, ErrOVSUnavailable) || !errors.Is(err, openflow.ErrDisconnected) {
		t.Errorf("SetOwner while disconnected: want ErrOVSUnavailable and openflow.ErrDisconnected, got %v", err)
	}
	if _, ok := store.Owner(flows.PodOwner(pod(4))); ok {
		t.Error("SetOwner that failed while disconnected changed the desired state")
	}
	if _, err := sw.DumpFlows(context.Background(), openflow.TableAll, 0, 0); !errors.Is(err, openflow.ErrDisconnected) || !errors.Is(ovsUnavailable(err), ErrOVSUnavailable) {
		t.Errorf("DumpFlows while disconnected: want openflow.ErrDisconnected, ErrOVSUnavailable once through the controller, got %v", err)
	}
	ovs.ContVswitchd(t)
	waitUntil(t, 20*time.Second, "the reconnect", func() bool { return sw.Connected() })
	if got, want := switchCookieCounts(t, ovs), cookieCounts(store.All()); !sameCounts(got, want) {
		t.Fatalf("after a reconnect to the same ovs-vswitchd: switch has\n%swant\n%s", fmtCounts(got), fmtCounts(want))
	}

	// 2. ovs-vswitchd is killed and restarted: its tables start empty. A DeleteOwner while
	// it is down succeeds (forgets the owner) and the pod's flows do not come back.
	ovs.KillVswitchd(t)
	waitUntil(t, 10*time.Second, "the connection loss", func() bool { return !sw.Connected() })
	if err := store.DeleteOwner(context.Background(), flows.PodOwner(pod(3))); err != nil {
		t.Errorf("DeleteOwner while disconnected: %v", err)
	}
	ovs.StartVswitchd(t, false)
	waitUntil(t, 20*time.Second, "the reconnect after the restart", func() bool { return sw.Connected() })
	if got, want := switchCookieCounts(t, ovs), cookieCounts(store.All()); !sameCounts(got, want) {
		t.Fatalf("after ovs-vswitchd restarted: switch has\n%swant\n%s", fmtCounts(got), fmtCounts(want))
	}
	if err := store.SetOwner(context.Background(), flows.PodOwner(pod(4)), flows.PodFlows(cfg, pod(4))); err != nil {
		t.Fatalf("SetOwner after the reconnect: %v", err)
	}
	if got, want := switchCookieCounts(t, ovs), cookieCounts(store.All()); !sameCounts(got, want) {
		t.Fatalf("after SetOwner on the new connection: switch has\n%swant\n%s", fmtCounts(got), fmtCounts(want))
	}
	if firsts != 1 || reconnects < 2 || sw.Reconnects() < 2 {
		t.Errorf("OnConnect ran %d times first and %d times after reconnects (Switch counts %d); want 1 and ≥2", firsts, reconnects, sw.Reconnects())
	}
}
