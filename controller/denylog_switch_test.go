package controller

// The deny log against a real sandbox switch with real packets: two pods (veth pairs
// into network namespaces of their own) on the pipeline's flows, pod b isolated for
// ingress with DenyLog on, pod a sends a burst of 200 TCP SYNs (one per source port, so
// 200 new connections) to b. Checked: what a user sees: the log lines, the rate limit
// (logged bounded by the meter's burst plus rate × elapsed, logged + meter drops = sent),
// the default-deny flow still counting every packet (ofsdnctl policies), and the same
// after ovs-vswitchd restarts (the meter is created again before the flows).

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/switchstate"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(s, DenyLogMessage) {
			out = append(out, s)
		}
	}
	return out
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// denyLogPod makes netns podNS with eth0 (ip/24, mac) whose peer hostVeth is in the
// sandbox's netns, attached to br-int at ofport.
func denyLogPod(t *testing.T, ovs *sandbox.OVS, podNS, hostVeth string, ofport int, ip string, mac net.HardwareAddr) {
	t.Helper()
	run(t, "ip", "netns", "add", podNS)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", podNS).Run() })
	run(t, "ip", "-n", ovs.Netns, "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", podNS)
	run(t, "ip", "-n", ovs.Netns, "link", "set", hostVeth, "up")
	run(t, "ip", "-n", podNS, "link", "set", "eth0", "address", mac.String(), "up")
	run(t, "ip", "-n", podNS, "addr", "add", ip+"/24", "dev", "eth0")
	ovs.Vsctl(t, "add-port", "br-int", hostVeth, "--", "set", "interface", hostVeth, fmt.Sprintf("ofport_request=%d", ofport))
}

// tcpSYN returns a TCP SYN header (20 bytes, checksum set) from src:sport to dst:dport.
func tcpSYN(src, dst net.IP, sport, dport uint16) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint32(h[4:], uint32(sport)*7919)
	h[12], h[13] = 5<<4, 0x02
	binary.BigEndian.PutUint16(h[14:], 64240)
	var sum uint32
	pseudo := append(append(append([]byte{}, src.To4()...), dst.To4()...), 0, ipProtoTCP, 0, 20)
	for _, b := range [][]byte{pseudo, h} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[16:], ^uint16(sum))
	return h
}

// sendSYNs sends n SYNs from netns podNS (source src) to dst:dport, source ports
// base..base+n-1, through a raw socket; it returns the time the sends took.
func sendSYNs(t *testing.T, podNS string, src, dst net.IP, dport uint16, base, n int) time.Duration {
	t.Helper()
	netns, err := ns.GetNS("/var/run/netns/" + podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	var took time.Duration
	if err := netns.Do(func(ns.NetNS) error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, ipProtoTCP)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		to := &syscall.SockaddrInet4{}
		copy(to.Addr[:], dst.To4())
		start := time.Now()
		for i := range n {
			if err := syscall.Sendto(fd, tcpSYN(src, dst, uint16(base+i), dport), 0, to); err != nil {
				return fmt.Errorf("SYN %d: %w", i, err)
			}
		}
		took = time.Since(start)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return took
}

func TestDenyLogRealPacketsRateLimited(t *testing.T) {
	const rate, sent = 10, 200
	logs := &lockedBuf{}
	names := map[netip.Addr]string{netip.MustParseAddr("10.244.1.5"): "x/a", netip.MustParseAddr("10.244.1.6"): "x/b"}
	owners := map[uint32]netip.Addr{31: netip.MustParseAddr("10.244.1.5"), 32: netip.MustParseAddr("10.244.1.6")}
	d := newDenyLog(slog.New(slog.NewJSONHandler(logs, nil)), rate, func(ip netip.Addr) string { return names[ip] },
		func(id uint32) (netip.Addr, bool) { ip, ok := owners[id]; return ip, ok })
	go d.run()
	defer d.close()

	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	ovs.Vsctl(t, "add-port", "br-int", "gw0", "--", "set", "interface", "gw0", "type=internal", "ofport_request=2")
	macA, _ := net.ParseMAC("0a:58:0a:f4:01:05")
	macB, _ := net.ParseMAC("0a:58:0a:f4:01:06")
	sfx := ovs.Netns[len(ovs.Netns)-4:]
	podA, podB := "dl-a-"+sfx, "dl-b-"+sfx
	denyLogPod(t, ovs, podA, "pa", 3, "10.244.1.5", macA)
	denyLogPod(t, ovs, podB, "pb", 4, "10.244.1.6", macB)
	// No ARP in the burst: the neighbour queue would hold only part of it.
	run(t, "ip", "-n", podA, "neigh", "replace", "10.244.1.6", "lladdr", macB.String(), "dev", "eth0", "nud", "permanent")

	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	gwMAC, _ := net.ParseMAC("0a:58:0a:f4:01:01")
	cfg := flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: gwMAC, GatewayIP: net.ParseIP("10.244.1.1").To4(), PodSubnet: subnet,
		Generation: 5, Policy: true, DenyLog: true}
	a := flows.Pod{OFPort: 3, MAC: macA, IPs: []net.IP{net.ParseIP("10.244.1.5").To4()}, OwnerID: 31}
	b := flows.Pod{OFPort: 4, MAC: macB, IPs: []net.IP{net.ParseIP("10.244.1.6").To4()}, OwnerID: 32}
	want := append(flows.PipelineFlows(cfg), flows.PodFlows(cfg, a)...)
	want = append(want, flows.PodFlows(cfg, b)...)
	deny := flows.PodPolicyFlows(cfg, b, true, false)
	want = append(want, deny...)
	// The node's way: the meter is a desired meter of the pipeline's owner, replayed by
	// the switch state before the flows that use it.
	store := switchstate.New()
	store.Load(flows.PipelineOwner, want)
	if err := d.loadMeter(store); err != nil {
		t.Fatal(err)
	}
	install := func(ctx context.Context, c *openflow.Conn, _ bool) error {
		d.beforeReplay(ctx, c)
		if err := store.Sync(ctx, c, nil, nil); err != nil {
			return err
		}
		d.afterReplay(ctx, c)
		return nil
	}
	sw := openflow.NewSwitch(ovs.MgmtSocket("br-int"), openflow.SwitchOptions{OF: openflow.Options{PacketIns: d.q}}, install)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if got := ovs.Ofctl(t, "dump-meters", ovs.MgmtSocket("br-int")); !strings.Contains(got, "meter=1 pktps burst stats bands=\ntype=drop rate=10 burst_size=10") {
		t.Fatalf("dump-meters:\n%s", got)
	}

	// burst sends sent SYNs and waits until the meter and the log have seen all of them;
	// it returns the logged and meter-dropped counts of this burst and the send time.
	var logged0, dropped0 uint64
	burst := func(base int) (logged, dropped uint64, took time.Duration) {
		took = sendSYNs(t, podA, a.IPv4(), b.IPv4(), 80, base, sent)
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := sw.MeterStats(ctx, flows.DenyLogMeter)
			if err != nil {
				t.Fatal(err)
			}
			dr, err := d.meterDrops(ctx, sw)
			if err != nil {
				t.Fatal(err)
			}
			if err := sw.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
			logged = d.logged.Load() + d.undecodable.Load() + d.q.Dropped()
			if len(st) == 1 && logged-logged0+dr-dropped0 >= sent && len(d.q.C()) == 0 || time.Now().After(deadline) {
				l := d.logged.Load() - logged0
				dd := dr - dropped0
				logged0, dropped0 = d.logged.Load(), dr
				return l, dd, took
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check := func(what string, logged, dropped uint64, took time.Duration) {
		t.Helper()
		t.Logf("%s: %d SYNs sent in %v: logged %d, meter dropped %d, queue dropped %d, undecodable %d (rate %d/s, burst %d)",
			what, sent, took, logged, dropped, d.q.Dropped(), d.undecodable.Load(), rate, rate)
		if logged+dropped != sent {
			t.Errorf("%s: logged %d + meter dropped %d = %d, want the %d sent", what, logged, dropped, logged+dropped, sent)
		}
		// The bucket starts full (burst) and refills at rate; allow the time until the
		// meter saw the last packet (the sends plus the log's wait) and one packet.
		if limit := uint64(rate + rate*(took.Seconds()+1) + 1); logged < 1 || logged > limit {
			t.Errorf("%s: %d logged through a %d/s meter, want 1..%d", what, logged, rate, limit)
		}
		if d.q.Dropped() != 0 || d.undecodable.Load() != 0 {
			t.Errorf("%s: queue dropped %d, undecodable %d; want 0", what, d.q.Dropped(), d.undecodable.Load())
		}
	}
	logged, dropped, took := burst(30000)
	check("first burst", logged, dropped, took)

	lines := logs.lines()
	if uint64(len(lines)) != d.logged.Load() {
		t.Errorf("%d deny log lines, counter says %d", len(lines), d.logged.Load())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		sp, _ := m["src_port"].(float64)
		if m["direction"] != "ingress" || m["isolated_pod"] != "x/b" || m["src"] != "x/a" || m["dst"] != "x/b" ||
			m["protocol"] != "TCP" || m["port"] != float64(80) || sp < 30000 || sp >= 30000+sent || m["level"] != "INFO" {
			t.Errorf("log line %s: want direction ingress, isolated_pod x/b, src x/a, dst x/b, TCP port 80, src_port in 30000..%d", l, 30000+sent-1)
		}
	}

	// The default-deny flow still counts every denied packet (ofsdnctl policies).
	ingress, _ := flows.StageTable(flows.StageIngressRules)
	denyCount := func() uint64 {
		stats, err := sw.DumpFlows(ctx, uint8(ingress), uint64(deny[0].Cookie), ^uint64(0))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stats {
			if s.Priority == flows.PriorityPolicyDeny {
				return s.PacketCount
			}
		}
		t.Fatalf("no default-deny flow for pod b in %v", stats)
		return 0
	}
	// Flow counters come from the datapath flows at revalidation (about every 500 ms).
	waitUntil(t, 15*time.Second, fmt.Sprintf("pod b's default-deny flow to count the %d SYNs", sent), func() bool { return denyCount() >= sent })
	if n := denyCount(); n != sent {
		t.Errorf("pod b's default-deny flow counted %d packets, want %d", n, sent)
	}

	// ovs-vswitchd restarts: the meter is gone with it; the hook creates it before the
	// flows, the flows are accepted, and the log works again.
	ovs.KillVswitchd(t)
	ovs.StartVswitchd(t, false)
	waitUntil(t, 30*time.Second, "the switch reconnected and replayed", func() bool { return sw.Reconnects() >= 1 && sw.Connected() })
	if got := ovs.Ofctl(t, "dump-meters", ovs.MgmtSocket("br-int")); !strings.Contains(got, "meter=1 pktps burst stats") {
		t.Fatalf("dump-meters after restart:\n%s", got)
	}
	logged, dropped, took = burst(31000)
	check("after ovs-vswitchd restart", logged, dropped, took)
	waitUntil(t, 15*time.Second, fmt.Sprintf("pod b's default-deny flow to count the %d SYNs after the restart", sent), func() bool { return denyCount() >= sent })
	if n := denyCount(); n != sent {
		t.Errorf("after restart pod b's default-deny flow counted %d packets, want %d", n, sent)
	}
}
