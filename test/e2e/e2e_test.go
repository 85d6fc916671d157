package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/flows"
)

// TestPodsWiredEndToEnd is the main job: three pods wired through libcni + the plugin binary
// into a real OVS, all pairs ping and exchange TCP and UDP data, pods reach the gateway and
// the host reaches pods, CHECK passes, and DEL leaves nothing behind.
func TestPodsWiredEndToEnd(t *testing.T) {
	serial(t)
	n := startNode(t, "10.128.0.0/24")
	pods := []*testPod{n.addPod("a"), n.addPod("b"), n.addPod("c")}
	_, subnet, _ := net.ParseCIDR("10.128.0.0/24")
	gw := net.ParseIP("10.128.0.1")

	t.Run("result", func(t *testing.T) {
		seen := map[string]bool{}
		for _, p := range pods {
			r := p.result
			if len(r.Interfaces) != 2 || len(r.IPs) != 1 {
				t.Fatalf("%s: want 2 interfaces and 1 IP, got %s", p.name, jsonString(r))
			}
			pod := r.Interfaces[1]
			if pod.Name != "eth0" || pod.Sandbox != p.netns || pod.Mtu != 1450 || pod.Mac == "" {
				t.Errorf("%s: pod interface %s", p.name, jsonString(pod))
			}
			if r.Interfaces[0].Sandbox != "" || len(r.Interfaces[0].Name) > 15 {
				t.Errorf("%s: host interface %s", p.name, jsonString(r.Interfaces[0]))
			}
			ip := r.IPs[0]
			if ip.Interface == nil || *ip.Interface != 1 || !subnet.Contains(ip.Address.IP) || !ip.Gateway.Equal(gw) || ip.Address.IP.Equal(gw) {
				t.Errorf("%s: ip config %s", p.name, jsonString(ip))
			}
			if seen[ip.Address.IP.String()] {
				t.Errorf("%s: IP %s handed out twice", p.name, ip.Address.IP)
			}
			seen[ip.Address.IP.String()] = true
			if len(r.Routes) != 1 || r.Routes[0].Dst.String() != "0.0.0.0/0" || !r.Routes[0].GW.Equal(gw) {
				t.Errorf("%s: routes %s", p.name, jsonString(r.Routes))
			}
			// The interface really is in the pod netns with that MAC and address.
			inNetns(t, p.netns, func() error {
				l, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				if l.Attrs().HardwareAddr.String() != pod.Mac || l.Attrs().MTU != 1450 {
					return fmt.Errorf("%s: eth0 has MAC %s MTU %d, result says %s", p.name, l.Attrs().HardwareAddr, l.Attrs().MTU, pod.Mac)
				}
				return nil
			})
		}
	})

	t.Run("ping all pairs", func(t *testing.T) {
		for _, a := range pods {
			for _, b := range pods {
				if a != b {
					if err := ping(a.netns, b.ip()); err != nil {
						t.Error(err)
					}
				}
			}
		}
	})

	t.Run("gateway and host", func(t *testing.T) {
		for _, p := range pods {
			if err := ping(p.netns, gw); err != nil {
				t.Error(err)
			}
			if err := ping(n.OVS.Netns, p.ip()); err != nil {
				t.Errorf("host (node netns) to pod: %v", err)
			}
		}
	})

	t.Run("tcp and udp", func(t *testing.T) {
		for i, a := range pods {
			b := pods[(i+1)%len(pods)]
			tcpExchange(t, a, b, 256<<10)
			udpExchange(t, a, b)
		}
	})

	t.Run("check", func(t *testing.T) {
		for _, p := range pods {
			if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, p.rt); err != nil {
				t.Errorf("CHECK %s: %v", p.name, err)
			}
		}
	})

	t.Run("spoof guard", func(t *testing.T) {
		a, b := pods[0], pods[1]
		spoofed := net.ParseIP("10.128.0.200")
		inNetns(t, a.netns, func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: spoofed, Mask: net.CIDRMask(24, 32)}})
		})
		before := tableDrops(t, n, "spoof_guard")
		if err := ping(a.netns, b.ip(), "-I", spoofed.String()); err == nil {
			t.Fatalf("pod %s sent from a second IP %s and reached %s: the spoof guard let it through", a.name, spoofed, b.ip())
		}
		if got := udpFrom(t, a, spoofed, b); got {
			t.Fatalf("UDP from the spoofed source %s reached pod %s", spoofed, b.name)
		}
		if after := tableDrops(t, n, "spoof_guard"); after <= before {
			t.Errorf("spoof_guard drop counter did not move (%d → %d)", before, after)
		}
		// The pod's own address still works.
		if err := ping(a.netns, b.ip()); err != nil {
			t.Errorf("after the spoof attempt: %v", err)
		}
	})

	t.Run("del leaves nothing", func(t *testing.T) {
		for _, p := range pods {
			if err := n.delPod(p); err != nil {
				t.Fatalf("DEL %s: %v", p.name, err)
			}
			n.assertGone(t, p)
			if err := n.delPod(p); err != nil {
				t.Errorf("second DEL of %s: %v", p.name, err)
			}
		}
		if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); ports != "ofsdn-gw0" {
			t.Errorf("ports left on br-int: %q", ports)
		}
	})
}

// TestDelAfterNetnsGone: DEL succeeds when the pod's netns was deleted first, and when
// CNI_NETNS is empty, and for a container never added; nothing is left behind.
func TestDelAfterNetnsGone(t *testing.T) {
	serial(t)
	n := startNode(t, "10.129.0.0/24")
	p := n.addPod("gone")
	if out, err := exec.Command("ip", "netns", "del", filepath.Base(p.netns)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if err := n.delPod(p); err != nil {
		t.Fatalf("DEL after the netns is gone: %v", err)
	}
	n.assertGone(t, p)

	q := n.addPod("nonetns")
	rt := *q.rt
	rt.NetNS = ""
	if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, &rt); err != nil {
		t.Fatalf("DEL with empty CNI_NETNS: %v", err)
	}
	n.assertGone(t, q)

	never := &libcni.RuntimeConf{ContainerID: "never-added", NetNS: "", IfName: "eth0"}
	if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, never); err != nil {
		t.Fatalf("DEL of a container never added: %v", err)
	}
}

// TestGCKeepsValidAttachments: CNI GC with cni.dev/valid-attachments naming two of five
// attachments leaves exactly those two.
func TestGCKeepsValidAttachments(t *testing.T) {
	serial(t)
	n := startNode(t, "10.130.0.0/24")
	var pods []*testPod
	for i := 0; i < 5; i++ {
		pods = append(pods, n.addPod(fmt.Sprintf("gc%d", i)))
	}
	valid := []types.GCAttachment{{ContainerID: pods[1].containerID, IfName: "eth0"}, {ContainerID: pods[3].containerID, IfName: "eth0"}}
	if err := n.CNI.GCNetworkList(context.Background(), n.Netconf, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	for i, p := range pods {
		if i == 1 || i == 3 {
			if err := ping(p.netns, net.ParseIP("10.130.0.1")); err != nil {
				t.Errorf("kept attachment %s lost connectivity: %v", p.name, err)
			}
			continue
		}
		n.assertGone(t, p)
	}
	if got := len(strings.Fields(n.OVS.Vsctl(t, "list-ports", "br-int"))); got != 3 {
		t.Errorf("want gateway + 2 pod ports after GC, got %d", got)
	}
}

// assertGone checks that nothing of pod p is left: no OVS port, no flow with its cookie, no
// host veth, no IP lease.
func (n *testNode) assertGone(t *testing.T, p *testPod) {
	t.Helper()
	host := p.result.Interfaces[0].Name
	if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); contains(ports, host) {
		t.Errorf("%s: OVS port %s left on br-int", p.name, host)
	}
	cookie, mask := n.podCookie(t, p)
	dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
	if lines := flowLines(dump); len(lines) > 0 {
		t.Errorf("%s: flows with its cookie left:\n%s", p.name, strings.Join(lines, "\n"))
	}
	if err := exec.Command("ip", "netns", "exec", n.OVS.Netns, "ip", "link", "show", host).Run(); err == nil {
		t.Errorf("%s: host veth %s left in the node netns", p.name, host)
	}
	for ip, id := range n.Leases(t) {
		if id == p.containerID {
			t.Errorf("%s: IP lease %s left for container %s", p.name, ip, p.containerID)
		}
	}
}

func flowLines(dump string) []string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "OFPST_FLOW") {
			out = append(out, l)
		}
	}
	return out
}

var nPackets = regexp.MustCompile(`n_packets=(\d+)`)

// tableDrops returns the packet count of the priority-0 drop flow of a stage.
func tableDrops(t *testing.T, n *testNode, stage string) int {
	t.Helper()
	table, ok := flows.StageTable(stage)
	if !ok {
		t.Fatalf("no stage %s in the pipeline", stage)
	}
	dump := n.OVS.Ofctl(t, "dump-flows", n.mgmt(), fmt.Sprintf("table=%d", table))
	total := 0
	for _, line := range strings.Split(dump, "\n") {
		if !strings.Contains(line, " priority=0 ") {
			continue
		}
		for _, m := range nPackets.FindAllStringSubmatch(line, -1) {
			v, _ := strconv.Atoi(m[1])
			total += v
		}
	}
	return total
}

// tcpExchange sends size bytes from pod a to pod b over TCP and checks they arrive intact
// and the echo comes back.
func tcpExchange(t *testing.T, a, b *testPod, size int) {
	t.Helper()
	var ln net.Listener
	inNetns(t, b.netns, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.ip().String(), "0"))
		return err
	})
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		buf, _ := io.ReadAll(io.LimitReader(c, int64(size)))
		_, _ = c.Write([]byte("ack"))
		got <- buf
	}()
	payload := bytes.Repeat([]byte("ofsdn-tcp-"), size/10+1)[:size]
	var conn net.Conn
	inNetns(t, a.netns, func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	})
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(payload); err != nil {
		t.Fatalf("TCP %s→%s write: %v", a.name, b.name, err)
	}
	ack := make([]byte, 3)
	if _, err := io.ReadFull(conn, ack); err != nil || string(ack) != "ack" {
		t.Fatalf("TCP %s→%s: no ack (%v)", a.name, b.name, err)
	}
	if r := <-got; !bytes.Equal(r, payload) {
		t.Fatalf("TCP %s→%s: received %d bytes, sent %d", a.name, b.name, len(r), len(payload))
	}
}

// udpExchange sends a datagram from a to b and b answers; both must arrive.
func udpExchange(t *testing.T, a, b *testPod) {
	t.Helper()
	var srv *net.UDPConn
	inNetns(t, b.netns, func() (err error) {
		srv, err = net.ListenUDP("udp", &net.UDPAddr{IP: b.ip()})
		return err
	})
	defer srv.Close()
	go func() {
		buf := make([]byte, 2048)
		_ = srv.SetDeadline(time.Now().Add(5 * time.Second))
		k, from, err := srv.ReadFromUDP(buf)
		if err == nil {
			_, _ = srv.WriteToUDP(append([]byte("re:"), buf[:k]...), from)
		}
	}()
	var cl *net.UDPConn
	inNetns(t, a.netns, func() (err error) {
		cl, err = net.DialUDP("udp", &net.UDPAddr{IP: a.ip()}, srv.LocalAddr().(*net.UDPAddr))
		return err
	})
	defer cl.Close()
	_ = cl.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	for try := 0; try < 3; try++ { // the first datagram may wait on ARP
		if _, err := cl.Write([]byte("hello " + b.name)); err != nil {
			t.Fatal(err)
		}
		_ = cl.SetReadDeadline(time.Now().Add(time.Second))
		k, err := cl.Read(buf)
		if err == nil {
			if string(buf[:k]) != "re:hello "+b.name {
				t.Fatalf("UDP %s→%s: got %q", a.name, b.name, buf[:k])
			}
			return
		}
	}
	t.Fatalf("UDP %s→%s: no answer", a.name, b.name)
}

// udpFrom sends datagrams from pod a with source address src to pod b and reports whether
// any arrived.
func udpFrom(t *testing.T, a *testPod, src net.IP, b *testPod) bool {
	t.Helper()
	var srv *net.UDPConn
	inNetns(t, b.netns, func() (err error) {
		srv, err = net.ListenUDP("udp", &net.UDPAddr{IP: b.ip()})
		return err
	})
	defer srv.Close()
	var cl *net.UDPConn
	inNetns(t, a.netns, func() (err error) {
		cl, err = net.DialUDP("udp", &net.UDPAddr{IP: src}, srv.LocalAddr().(*net.UDPAddr))
		return err
	})
	defer cl.Close()
	for i := 0; i < 5; i++ {
		_, _ = cl.Write([]byte("spoofed"))
		time.Sleep(50 * time.Millisecond)
	}
	_ = srv.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	_, _, err := srv.ReadFromUDP(buf)
	return err == nil
}
