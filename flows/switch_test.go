package flows

// Tests against a real Open vSwitch (a private sandbox): the text our flows render to is
// exactly what ovs-ofctl prints for them, the FlowMod bytes install exactly those flows,
// cookie deletes remove exactly the owner's flows, and packets traced through the
// pipeline go where the design says. They need root and OVS, and do not skip.

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/contiv/libOpenflow/openflow13"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// switchNode is a sandbox bridge set up like an ofsdn node: br-int with named tables, a
// gateway internal port and two pod ports (internal ports too: traces need only ports).
type switchNode struct {
	ovs   *sandbox.OVS
	mgmt  string
	cfg   NodeConfig
	podA  Pod
	podB  Pod
	names PortNames
}

func startSwitchNode(t *testing.T) *switchNode {
	t.Helper()
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	args := []string{}
	for _, ti := range Tables() {
		id := "@t" + strconv.Itoa(int(ti.ID))
		args = append(args, "--", "--id="+id, "create", "Flow_Table", "name="+ti.Name,
			"--", "set", "Bridge", "br-int", fmt.Sprintf("flow_tables:%d=%s", ti.ID, id))
	}
	ovs.Vsctl(t, args...)
	// The flow-based tunnel port, as ofsdn-node creates it (ovsdb.EnsureTunnelPort).
	ovs.Vsctl(t, "add-port", "br-int", "vxlan0", "--", "set", "interface", "vxlan0", "type=vxlan",
		"options:remote_ip=flow", "options:key=flow", "ofport_request=1")
	// Port names: one OVS prints bare, two it quotes (a dash, an underscore).
	ports := []struct {
		name   string
		ofport uint32
	}{{"gw0", 2}, {"pod-a", 3}, {"pod_b", 4}}
	names := PortNames{1: "vxlan0"}
	for _, p := range ports {
		ovs.Vsctl(t, "add-port", "br-int", p.name, "--", "set", "interface", p.name,
			"type=internal", fmt.Sprintf("ofport_request=%d", p.ofport))
		if got := ovs.Vsctl(t, "get", "interface", p.name, "ofport"); got != strconv.Itoa(int(p.ofport)) {
			t.Fatalf("port %s got ofport %s, want %d", p.name, got, p.ofport)
		}
		names[p.ofport] = p.name
	}
	// The deny-log meter policy flows name (the controller creates it, ensureDenyLogMeter).
	ovs.Ofctl(t, "add-meter", ovs.MgmtSocket("br-int"), "meter=1,pktps,band=type=drop,rate=100")
	return &switchNode{ovs: ovs, mgmt: ovs.MgmtSocket("br-int"), cfg: testConfig(),
		podA: testPodA(), podB: testPodB(), names: names}
}

// dump returns the bridge's flows as dump-flows --no-stats --names prints them, one per
// line without the leading space, sorted.
func (n *switchNode) dump(t *testing.T) []string {
	t.Helper()
	out := n.ovs.Ofctl(t, "dump-flows", "--no-stats", "--names", n.mgmt)
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_FLOW") {
			got = append(got, l)
		}
	}
	sort.Strings(got)
	return got
}

func sortedFormat(fs []Flow, names PortNames) []string {
	out := lines(fs, names)
	sort.Strings(out)
	return out
}

func (n *switchNode) desired() []Flow {
	fs := PipelineFlows(n.cfg)
	fs = append(fs, PodFlows(n.cfg, n.podA)...)
	fs = append(fs, PodFlows(n.cfg, n.podB)...)
	return append(fs, n.peerFlows()...)
}

// peerFlows returns the flows of the two peers, B and C.
func (n *switchNode) peerFlows() []Flow {
	return append(PeerFlows(n.cfg, testPeerB()), PeerFlows(n.cfg, testPeerC())...)
}

// addFlowsText installs flows with `ovs-ofctl add-flows` from their String() text.
func (n *switchNode) addFlowsText(t *testing.T, fs []Flow) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines(fs, nil), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.ovs.Ofctl(t, "add-flows", n.mgmt, file)
}

func TestFlowsOnSwitch(t *testing.T) {
	n := startSwitchNode(t)

	t.Run("text round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		all := append(n.desired(), kitchenSink()...)
		n.addFlowsText(t, all)
		compareLines(t, "dump-flows --names vs Format(port names)", n.dump(t), sortedFormat(all, n.names))
	})

	t.Run("FlowMod round trip", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		all := append(n.desired(), kitchenSink()...)
		var mods []*openflow13.FlowMod
		for _, f := range all {
			mods = append(mods, f.FlowMod(openflow13.FC_ADD))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows after our FlowMods vs Format(port names)", n.dump(t), sortedFormat(all, n.names))

		// Re-adding the same flows with FC_MODIFY_STRICT changes nothing.
		mods = mods[:0]
		for _, f := range all {
			mods = append(mods, f.FlowMod(openflow13.FC_MODIFY_STRICT))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows after modify-strict", n.dump(t), sortedFormat(all, n.names))

		// DELETE_STRICT of the kitchen sink leaves the pipeline.
		mods = mods[:0]
		for _, f := range kitchenSink() {
			mods = append(mods, f.FlowMod(openflow13.FC_DELETE_STRICT))
		}
		sendFlowMods(t, n.mgmt, mods...)
		compareLines(t, "dump-flows after delete-strict", n.dump(t), sortedFormat(n.desired(), n.names))
	})

	t.Run("delete by pod cookie", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		var mods []*openflow13.FlowMod
		for _, f := range n.desired() {
			mods = append(mods, f.FlowMod(openflow13.FC_ADD))
		}
		sendFlowMods(t, n.mgmt, mods...)
		sendFlowMods(t, n.mgmt, DeleteByCookie(PodCookie(n.podA)))
		want := append(PipelineFlows(n.cfg), PodFlows(n.cfg, n.podB)...)
		want = append(want, n.peerFlows()...)
		compareLines(t, "flows after deleting pod A by cookie", n.dump(t), sortedFormat(want, n.names))
	})

	t.Run("delete by peer cookie", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		var mods []*openflow13.FlowMod
		for _, f := range n.desired() {
			mods = append(mods, f.FlowMod(openflow13.FC_ADD))
		}
		sendFlowMods(t, n.mgmt, mods...)
		sendFlowMods(t, n.mgmt, DeleteByCookie(PeerCookie(testPeerC())))
		want := append(PipelineFlows(n.cfg), PodFlows(n.cfg, n.podA)...)
		want = append(want, PodFlows(n.cfg, n.podB)...)
		want = append(want, PeerFlows(n.cfg, testPeerB())...)
		compareLines(t, "flows after deleting peer C by cookie", n.dump(t), sortedFormat(want, n.names))
	})

	t.Run("delete old generation", func(t *testing.T) {
		n.ovs.Ofctl(t, "del-flows", n.mgmt)
		old := n.cfg
		old.Generation = n.cfg.Generation - 1
		// The old generation's pod A flows and the new generation's pipeline: after the
		// old generation's delete only the new flows remain.
		n.addFlowsText(t, PodFlows(old, n.podA))
		n.addFlowsText(t, PipelineFlows(n.cfg))
		sendFlowMods(t, n.mgmt, DeleteByCookie(GenerationCookie(old.Generation)))
		compareLines(t, "flows after deleting the old generation", n.dump(t), sortedFormat(PipelineFlows(n.cfg), n.names))
	})
}

// TestPipelineOnSwitch traces packets through the installed pipeline
// (ovs-appctl ofproto/trace) and checks where each one leaves.
func TestPipelineOnSwitch(t *testing.T) {
	n := startSwitchNode(t)
	var mods []*openflow13.FlowMod
	for _, f := range n.desired() {
		mods = append(mods, f.FlowMod(openflow13.FC_ADD))
	}
	sendFlowMods(t, n.mgmt, mods...)

	gw, a, b := n.cfg, n.podA, n.podB
	ip := func(in uint32, src, dst net.HardwareAddr, nwSrc, nwDst string) string {
		return fmt.Sprintf("in_port=%d,ip,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64", in, src, dst, nwSrc, nwDst)
	}
	arp := func(in uint32, src, dst net.HardwareAddr, op int, sha net.HardwareAddr, spa, tpa string) string {
		return fmt.Sprintf("in_port=%d,arp,dl_src=%s,dl_dst=%s,arp_op=%d,arp_sha=%s,arp_spa=%s,arp_tpa=%s", in, src, dst, op, sha, spa, tpa)
	}
	tun := func(src, packet string) string { return "tun_src=" + src + ",tun_dst=172.16.0.1," + packet }
	bcast := mustMAC("ff:ff:ff:ff:ff:ff")
	other := mustMAC("0a:58:0a:f4:01:99")
	for _, c := range []struct {
		name   string
		packet string
		out    uint32 // 0: dropped
		ethDst net.HardwareAddr
	}{
		{"pod to pod", ip(a.OFPort, a.MAC, b.MAC, "10.244.1.5", "10.244.1.6"), b.OFPort, b.MAC},
		{"pod to pod sets eth_dst", ip(a.OFPort, a.MAC, gw.GatewayMAC, "10.244.1.5", "10.244.1.6"), b.OFPort, b.MAC},
		{"pod to gateway IP", ip(a.OFPort, a.MAC, gw.GatewayMAC, "10.244.1.5", "10.244.1.1"), gw.GatewayOFPort, gw.GatewayMAC},
		{"pod to the world via gateway", ip(a.OFPort, a.MAC, gw.GatewayMAC, "10.244.1.5", "192.0.2.10"), gw.GatewayOFPort, gw.GatewayMAC},
		{"host to pod", ip(gw.GatewayOFPort, gw.GatewayMAC, a.MAC, "10.244.1.1", "10.244.1.5"), a.OFPort, a.MAC},
		{"host (any source) to pod", ip(gw.GatewayOFPort, gw.GatewayMAC, a.MAC, "172.16.0.3", "10.244.1.5"), a.OFPort, a.MAC},
		{"host to off-subnet dropped", ip(gw.GatewayOFPort, gw.GatewayMAC, a.MAC, "10.244.1.1", "192.0.2.10"), 0, nil},
		{"pod to unknown local IP dropped", ip(a.OFPort, a.MAC, gw.GatewayMAC, "10.244.1.5", "10.244.1.77"), 0, nil},
		{"spoofed IP dropped", ip(a.OFPort, a.MAC, b.MAC, "10.244.1.6", "10.244.1.6"), 0, nil},
		{"spoofed MAC dropped", ip(a.OFPort, other, b.MAC, "10.244.1.5", "10.244.1.6"), 0, nil},
		{"unknown port dropped", ip(9, a.MAC, b.MAC, "10.244.1.5", "10.244.1.6"), 0, nil},
		{"ipv6 from pod dropped", fmt.Sprintf("in_port=%d,ipv6,dl_src=%s", a.OFPort, a.MAC), 0, nil},
		{"ARP request pod to pod", arp(a.OFPort, a.MAC, bcast, 1, a.MAC, "10.244.1.5", "10.244.1.6"), b.OFPort, bcast},
		{"ARP reply pod to pod", arp(b.OFPort, b.MAC, a.MAC, 2, b.MAC, "10.244.1.6", "10.244.1.5"), a.OFPort, a.MAC},
		{"ARP request pod to gateway", arp(a.OFPort, a.MAC, bcast, 1, a.MAC, "10.244.1.5", "10.244.1.1"), gw.GatewayOFPort, bcast},
		{"ARP request host to pod", arp(gw.GatewayOFPort, gw.GatewayMAC, bcast, 1, gw.GatewayMAC, "10.244.1.1", "10.244.1.6"), b.OFPort, bcast},
		{"ARP reply pod to host", arp(b.OFPort, b.MAC, gw.GatewayMAC, 2, b.MAC, "10.244.1.6", "10.244.1.1"), gw.GatewayOFPort, gw.GatewayMAC},
		{"ARP for unknown IP dropped", arp(a.OFPort, a.MAC, bcast, 1, a.MAC, "10.244.1.5", "10.244.1.77"), 0, nil},
		{"ARP spoofed spa dropped", arp(a.OFPort, a.MAC, bcast, 1, a.MAC, "10.244.1.6", "10.244.1.1"), 0, nil},
		{"ARP spoofed sha dropped", arp(a.OFPort, a.MAC, bcast, 1, other, "10.244.1.5", "10.244.1.1"), 0, nil},
		{"ARP spoofed eth_src dropped", arp(a.OFPort, other, bcast, 1, a.MAC, "10.244.1.5", "10.244.1.1"), 0, nil},
		// Multi-node: peers B (172.16.0.2, 10.244.2.0/24) and C are known; tunnel port 1.
		{"peer pod to pod through the tunnel", tun("172.16.0.2", ip(1, other, gw.GatewayMAC, "10.244.2.7", "10.244.1.5")), a.OFPort, a.MAC},
		{"peer host to gateway through the tunnel", tun("172.16.0.2", ip(1, other, gw.GatewayMAC, "10.244.2.1", "10.244.1.1")), gw.GatewayOFPort, gw.GatewayMAC},
		{"tunnel from unknown node dropped", tun("172.16.0.9", ip(1, other, gw.GatewayMAC, "10.244.2.7", "10.244.1.5")), 0, nil},
		{"tunnel from peer with C's source dropped", tun("172.16.0.2", ip(1, other, gw.GatewayMAC, "10.244.3.7", "10.244.1.5")), 0, nil},
		{"tunnel ARP dropped", tun("172.16.0.2", arp(1, other, bcast, 1, other, "10.244.2.7", "10.244.1.5")), 0, nil},
		{"pod to service via gateway", ip(a.OFPort, a.MAC, gw.GatewayMAC, "10.244.1.5", "10.96.0.10"), gw.GatewayOFPort, gw.GatewayMAC},
		{"pod to unknown node's subnet dropped", ip(a.OFPort, a.MAC, gw.GatewayMAC, "10.244.9.7", "10.244.9.7"), 0, nil},
		{"host to unknown node's subnet dropped", ip(gw.GatewayOFPort, gw.GatewayMAC, VirtualRouterMAC, "10.244.1.1", "10.244.9.7"), 0, nil},
		{"pod ARP for a remote pod dropped", arp(a.OFPort, a.MAC, bcast, 1, a.MAC, "10.244.1.5", "10.244.2.7"), 0, nil},
		{"host ARP for unknown node's subnet dropped", arp(gw.GatewayOFPort, gw.GatewayMAC, bcast, 1, gw.GatewayMAC, "10.244.1.1", "10.244.9.7"), 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := n.ovs.Appctl(t, "ofproto/trace", "br-int", c.packet)
			out, final := traceResult(t, trace)
			if out != c.out {
				t.Fatalf("packet %s left by port %d, want %d (0 = drop)\n%s", c.packet, out, c.out, trace)
			}
			if c.ethDst != nil && !strings.Contains(final, "dl_dst="+c.ethDst.String()) {
				t.Fatalf("packet %s left with %q, want dl_dst=%s\n%s", c.packet, final, c.ethDst, trace)
			}
		})
	}
	tracePeers(t, n)
}

var (
	traceOutPort   = regexp.MustCompile(`-> output port is (\d+)`)
	traceFinalFlow = regexp.MustCompile(`(?m)^Final flow: (.*)$`)
	traceDatapath  = regexp.MustCompile(`(?m)^Datapath actions: (.*)$`)
)

// traceResult returns the ofport an ofproto/trace says the packet leaves by (0 when it is
// dropped) and the final flow (the packet's headers at output).
func traceResult(t *testing.T, trace string) (uint32, string) {
	t.Helper()
	// With conntrack the trace has one part per recirculation (--ct-next); the last
	// part's datapath actions and final flow are the packet's fate.
	all := traceDatapath.FindAllStringSubmatch(trace, -1)
	if all == nil {
		t.Fatalf("no datapath actions in trace:\n%s", trace)
	}
	dp := all[len(all)-1]
	final := ""
	if m := traceFinalFlow.FindAllStringSubmatch(trace, -1); m != nil {
		final = m[len(m)-1][1]
	}
	if dp[1] == "drop" {
		return 0, final
	}
	m := traceOutPort.FindAllStringSubmatch(trace, -1)
	if len(m) != 1 {
		t.Fatalf("want one output port in trace, got %v:\n%s", m, trace)
	}
	p, _ := strconv.ParseUint(m[0][1], 10, 32)
	if final == "" { // "Final flow: unchanged"
		final = trace
	}
	return uint32(p), final
}

// sendFlowMods sends flow mods to the switch over a bare OpenFlow 1.3 connection on its
// management socket, then a barrier, and fails the test on any OFPT_ERROR (OpenFlow
// 1.3.5 §7.3.4.1, §7.3.8, §7.4.4). A minimal client, so this package's tests do not
// depend on the controller's.
func sendFlowMods(t *testing.T, mgmt string, mods ...*openflow13.FlowMod) {
	t.Helper()
	if err := trySendFlowMods(t, mgmt, mods...); err != nil {
		t.Fatal(err)
	}
}

// trySendFlowMods is sendFlowMods returning the switch's first OFPT_ERROR as an error
// (*switchError) instead of failing the test; connection problems still fail it.
func trySendFlowMods(t *testing.T, mgmt string, mods ...*openflow13.FlowMod) error {
	t.Helper()
	conn, err := net.DialTimeout("unix", mgmt, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", mgmt, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	const version = 4 // OpenFlow 1.3
	header := func(typ uint8, length int, xid uint32) []byte {
		b := make([]byte, 8)
		b[0], b[1] = version, typ
		binary.BigEndian.PutUint16(b[2:], uint16(length))
		binary.BigEndian.PutUint32(b[4:], xid)
		return b
	}
	read := func() (typ uint8, xid uint32, body []byte) {
		h := make([]byte, 8)
		if _, err := io.ReadFull(conn, h); err != nil {
			t.Fatalf("read from %s: %v", mgmt, err)
		}
		body = make([]byte, int(binary.BigEndian.Uint16(h[2:]))-8)
		if _, err := io.ReadFull(conn, body); err != nil {
			t.Fatalf("read from %s: %v", mgmt, err)
		}
		return h[1], binary.BigEndian.Uint32(h[4:]), body
	}
	if _, err := conn.Write(header(openflow13.Type_Hello, 8, 1)); err != nil {
		t.Fatal(err)
	}
	if typ, _, _ := read(); typ != openflow13.Type_Hello {
		t.Fatalf("switch answered hello with message type %d", typ)
	}
	names := map[uint32]int{}
	var buf []byte
	for i, m := range mods {
		m.Header.Xid = uint32(100 + i)
		names[m.Header.Xid] = i
		data, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("flow mod %d: %v", i, err)
		}
		buf = append(buf, data...)
	}
	const barrierXid = 99
	buf = append(buf, header(openflow13.Type_BarrierRequest, 8, barrierXid)...)
	if _, err := conn.Write(buf); err != nil {
		t.Fatal(err)
	}
	for {
		typ, xid, body := read()
		switch typ {
		case openflow13.Type_Error:
			i, ok := names[xid]
			errType, errCode := binary.BigEndian.Uint16(body[0:]), binary.BigEndian.Uint16(body[2:])
			if ok {
				m := mods[i]
				return &switchError{Type: errType, Code: errCode, msg: fmt.Sprintf("switch refused flow mod %d (table %d priority %d cookie %#x command %d): error type %d code %d", i, m.TableId, m.Priority, m.Cookie, m.Command, errType, errCode)}
			}
			return &switchError{Type: errType, Code: errCode, msg: fmt.Sprintf("switch error xid %d type %d code %d", xid, errType, errCode)}
		case openflow13.Type_EchoRequest:
			_, _ = conn.Write(append(header(openflow13.Type_EchoReply, 8+len(body), xid), body...))
		case openflow13.Type_BarrierReply:
			if xid == barrierXid {
				return nil
			}
		}
	}
}

// switchError is an OFPT_ERROR the switch answered a flow mod with (OpenFlow 1.3.5
// §7.4.4: type and code).
type switchError struct {
	Type, Code uint16
	msg        string
}

func (e *switchError) Error() string { return e.msg }
