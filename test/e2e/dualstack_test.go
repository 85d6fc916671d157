package e2e

// A dual-stack node (issue 23, first slice): the daemon with podSubnets IPv4 + IPv6, pods
// wired through libcni and the plugin binary. Each pod gets both addresses (the CNI
// result checked at several cniVersions), IPv6 works between local pods (ping6, TCP) and
// to the host's gateway address, IPv4 still works, and the IPv6 spoof guard drops what a
// pod forges (raw frames on its eth0: a spoofed source, a Neighbor Advertisement for
// another pod's address, a Router Advertisement), each counted by its flow, while honest
// neighbor discovery and a Packet Too Big pass. DEL leaves nothing behind.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types020 "github.com/containernetworking/cni/pkg/types/020"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/test/harness"
)

const (
	dsSubnet4 = "10.152.0.0/24"
	dsSubnet6 = "fd00:10:152::/64"
)

var (
	dsGW4 = net.ParseIP("10.152.0.1").To4()
	dsGW6 = net.ParseIP("fd00:10:152::1")
)

// startDualStackNode starts a sandbox node whose daemon has both pod subnets.
func startDualStackNode(t *testing.T) *testNode {
	t.Helper()
	n := &testNode{harness.NewNode(t, dsSubnet4, "ofsdn-e2e")}
	n.startDualStackDaemon(t)
	return n
}

// startDualStackDaemon (re)starts n's daemon with both pod subnets.
func (n *testNode) startDualStackDaemon(t *testing.T) {
	t.Helper()
	n.StartDaemon(filepath.Join(buildBinaries(t), "ofsdn-node"), 30*time.Second,
		"--pod-subnets", dsSubnet4+","+dsSubnet6, "--log-level", "debug")
}

// ip6 returns the pod's IPv6 address from its CNI result.
func (p *testPod) ip6(t *testing.T) net.IP {
	t.Helper()
	for _, ip := range p.result.IPs {
		if ip.Address.IP.To4() == nil {
			return ip.Address.IP
		}
	}
	t.Fatalf("%s: no IPv6 address in its CNI result %s", p.name, jsonString(p.result))
	return nil
}

func (p *testPod) mac(t *testing.T) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(p.result.Interfaces[1].Mac)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkDualResult checks a dual-stack pod's CNI 1.1 result: the IPv4 address first, then
// the IPv6 one, each in its pod subnet with its family's gateway, on the pod interface;
// a default route per family.
func checkDualResult(t *testing.T, p *testPod) {
	t.Helper()
	r := p.result
	_, sn4, _ := net.ParseCIDR(dsSubnet4)
	_, sn6, _ := net.ParseCIDR(dsSubnet6)
	if len(r.IPs) != 2 {
		t.Fatalf("%s: %d IPs in the result, want 2 (IPv4, IPv6): %s", p.name, len(r.IPs), jsonString(r))
	}
	for i, c := range []struct {
		sn *net.IPNet
		gw net.IP
	}{{sn4, dsGW4}, {sn6, dsGW6}} {
		ip := r.IPs[i]
		ones, _ := ip.Address.Mask.Size()
		snOnes, _ := c.sn.Mask.Size()
		if !c.sn.Contains(ip.Address.IP) || ones != snOnes || !ip.Gateway.Equal(c.gw) || ip.Interface == nil || *ip.Interface != 1 {
			t.Errorf("%s: ips[%d] = %s via %v (interface %v), want an address of %s with its prefix via %s on interface 1", p.name, i, ip.Address.String(), ip.Gateway, ip.Interface, c.sn, c.gw)
		}
	}
	var routes []string
	for _, rt := range r.Routes {
		routes = append(routes, rt.Dst.String()+" via "+rt.GW.String())
	}
	if got := strings.Join(routes, ", "); got != "0.0.0.0/0 via 10.152.0.1, ::/0 via fd00:10:152::1" {
		t.Errorf("%s: routes %s, want a default route per family", p.name, got)
	}
}

func ping6(netns string, dst net.IP) error { return ping(netns, dst, "-6") }

// tcpExchange6 sends payload from a to b over TCP/IPv6 (b's IPv6 address) and back.
func tcpExchange6(t *testing.T, a, b *testPod, size int) {
	t.Helper()
	var ln net.Listener
	inNetns(t, b.netns, func() (err error) {
		ln, err = net.Listen("tcp6", net.JoinHostPort(b.ip6(t).String(), "0"))
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
	payload := bytes.Repeat([]byte("ofsdn-tcp6-"), size/11+1)[:size]
	var conn net.Conn
	inNetns(t, a.netns, func() (err error) {
		conn, err = net.DialTimeout("tcp6", ln.Addr().String(), 5*time.Second)
		return err
	})
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(payload); err != nil {
		t.Fatalf("TCP/IPv6 %s→%s write: %v", a.name, b.name, err)
	}
	ack := make([]byte, 3)
	if _, err := io.ReadFull(conn, ack); err != nil || string(ack) != "ack" {
		t.Fatalf("TCP/IPv6 %s→%s: no ack (%v)", a.name, b.name, err)
	}
	if r := <-got; !bytes.Equal(r, payload) {
		t.Fatalf("TCP/IPv6 %s→%s: received %d bytes, sent %d", a.name, b.name, len(r), len(payload))
	}
}

// ipv6Frame builds an Ethernet II / IPv6 frame (RFC 8200) with next header proto and
// payload, whose checksum at csumOff (when >= 0) is filled in over the pseudo-header
// (RFC 8200 §8.1).
func ipv6Frame(ethDst, ethSrc net.HardwareAddr, src, dst net.IP, proto uint8, hopLimit uint8, payload []byte, csumOff int) []byte {
	if csumOff >= 0 {
		var sum uint32
		add := func(b []byte) {
			for i := 0; i+1 < len(b); i += 2 {
				sum += uint32(binary.BigEndian.Uint16(b[i:]))
			}
			if len(b)%2 == 1 {
				sum += uint32(b[len(b)-1]) << 8
			}
		}
		add(src.To16())
		add(dst.To16())
		var l [8]byte
		binary.BigEndian.PutUint32(l[0:], uint32(len(payload)))
		l[7] = proto
		add(l[:])
		binary.BigEndian.PutUint16(payload[csumOff:], 0)
		add(payload)
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		binary.BigEndian.PutUint16(payload[csumOff:], ^uint16(sum))
	}
	b := append(append([]byte(nil), ethDst...), ethSrc...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IPV6)
	hdr := make([]byte, 40)
	hdr[0] = 0x60
	binary.BigEndian.PutUint16(hdr[4:], uint16(len(payload)))
	hdr[6], hdr[7] = proto, hopLimit
	copy(hdr[8:], src.To16())
	copy(hdr[24:], dst.To16())
	return append(append(b, hdr...), payload...)
}

// icmp6Frame builds an ICMPv6 message (RFC 4443) of type typ with body after the 4-byte
// header; neighbor discovery needs hop limit 255 (RFC 4861 §7.1).
func icmp6Frame(ethDst, ethSrc net.HardwareAddr, src, dst net.IP, typ uint8, body []byte) []byte {
	msg := append([]byte{typ, 0, 0, 0}, body...)
	return ipv6Frame(ethDst, ethSrc, src, dst, unix.IPPROTO_ICMPV6, 255, msg, 2)
}

// nsBody is a Neighbor Solicitation's body (RFC 4861 §4.3): reserved, target, source
// link-layer address option.
func nsBody(target net.IP, sll net.HardwareAddr) []byte {
	b := append(make([]byte, 4), target.To16()...)
	return append(append(b, 1, 1), sll...)
}

// naBody is a Neighbor Advertisement's body (RFC 4861 §4.4) with the solicited and
// override flags, target and target link-layer address option.
func naBody(target net.IP, tll net.HardwareAddr) []byte {
	b := append([]byte{0x60, 0, 0, 0}, target.To16()...)
	return append(append(b, 2, 1), tll...)
}

// raBody is a Router Advertisement's body (RFC 4861 §4.2): hop limit 64, router lifetime
// 1800 s, with the source link-layer address option.
func raBody(sll net.HardwareAddr) []byte {
	b := []byte{64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
	return append(append(b, 1, 1), sll...)
}

// solicitedNode returns the solicited-node multicast address of ip (RFC 4291 §2.7.1)
// and its Ethernet multicast MAC (RFC 2464 §7).
func solicitedNode(ip net.IP) (net.IP, net.HardwareAddr) {
	ip = ip.To16()
	sn := net.IP{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, ip[13], ip[14], ip[15]}
	return sn, net.HardwareAddr{0x33, 0x33, sn[12], sn[13], sn[14], sn[15]}
}

// flowPackets returns the sum of n_packets of the stage's flows whose text contains all
// of subs.
func flowPackets(t *testing.T, n *testNode, stage string, subs ...string) int {
	t.Helper()
	table, _ := flows.StageTable(stage)
	total := 0
	for _, l := range strings.Split(n.OVS.Ofctl(t, "dump-flows", n.mgmt(), fmt.Sprintf("table=%d", table)), "\n") {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if m := nPackets.FindStringSubmatch(l); ok && m != nil {
			v, _ := strconv.Atoi(m[1])
			total += v
		}
	}
	return total
}

// neighMAC6 returns the MAC the IPv6 neighbour table of netnsPath holds for ip (nil when
// there is no usable entry).
func neighMAC6(t *testing.T, netnsPath string, ip net.IP) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	inNetns(t, netnsPath, func() error {
		neighs, err := netlink.NeighList(0, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, nb := range neighs {
			if nb.IP.Equal(ip) && nb.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) == 0 {
				mac = nb.HardwareAddr
			}
		}
		return nil
	})
	return mac
}

func TestDualStack(t *testing.T) {
	serialIPv6(t)
	n := startDualStackNode(t)
	a, b, w := n.addPod("ds-a"), n.addPod("ds-b"), n.addPod("ds-w")
	for _, p := range []*testPod{a, b, w} {
		checkDualResult(t, p)
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("pod interface", func(t *testing.T) {
		out, err := exec.Command("ip", "-n", filepath.Base(a.netns), "-6", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil {
			t.Fatal(err, string(out))
		}
		ll := flows.LinkLocalFromMAC(a.mac(t))
		for _, want := range []string{ll.String() + "/64", a.ip6(t).String() + "/64"} {
			if !strings.Contains(string(out), "inet6 "+want) {
				t.Errorf("eth0 of %s lacks %s:\n%s", a.name, want, out)
			}
		}
		if strings.Count(string(out), "inet6 ") != 2 || strings.Contains(string(out), "tentative") {
			t.Errorf("eth0 of %s: want exactly its two IPv6 addresses, none tentative:\n%s", a.name, out)
		}
		leases := n.Leases(t)
		if leases[a.ip().String()] != a.containerID {
			t.Errorf("no lease of %s for %s: %v", a.ip(), a.name, leases)
		}
	})

	t.Run("connectivity", func(t *testing.T) {
		for _, c := range []struct {
			from string
			to   net.IP
		}{{a.netns, b.ip6(t)}, {b.netns, a.ip6(t)}, {a.netns, dsGW6}, {n.OVS.Netns, a.ip6(t)}} {
			if err := ping6(c.from, c.to); err != nil {
				t.Error(err)
			}
		}
		tcpExchange6(t, a, b, 100000)
		tcpExchange6(t, b, a, 1000)
		// IPv4 as before.
		for _, c := range []struct {
			from string
			to   net.IP
		}{{a.netns, b.ip()}, {b.netns, dsGW4}, {n.OVS.Netns, a.ip()}} {
			if err := ping(c.from, c.to); err != nil {
				t.Error(err)
			}
		}
		tcpExchange(t, a, b, 100000)
	})

	t.Run("spoof guard", func(t *testing.T) {
		aMAC, bMAC, wMAC := a.mac(t), b.mac(t), w.mac(t)
		a6, b6, w6 := a.ip6(t), b.ip6(t), w.ip6(t)
		aLL := flows.LinkLocalFromMAC(aMAC)
		// The witness knows the victim (b): an entry a forged NA could override.
		if err := ping6(w.netns, b6); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // past the neighbour entry's locktime
		tx := openRaw(t, a.netns, "eth0")
		wSniff, aSniff := sniff(t, openRaw(t, w.netns, "eth0")), sniff(t, openRaw(t, a.netns, "eth0"))

		// Controls: honest frames pass. A legitimate ND exchange: a's NS for w's address
		// (from its own address, its MAC as SLL) reaches w, and w's NA comes back to a.
		snW, snWMAC := solicitedNode(w6)
		tx.send(t, icmp6Frame(snWMAC, aMAC, a6, snW, flows.ICMPv6NeighborSolicit, nsBody(w6, aMAC)))
		isICMP6 := func(typ uint8, f []byte) bool {
			return len(f) >= 55 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IPV6 && f[20] == unix.IPPROTO_ICMPV6 && f[54] == typ
		}
		if !wSniff.waitSeen(func(f []byte) bool {
			return isICMP6(flows.ICMPv6NeighborSolicit, f) && bytes.Equal(f[6:12], aMAC) && len(f) >= 78 && net.IP(f[62:78]).Equal(w6)
		}) {
			t.Fatal("control: a's honest neighbor solicitation for w did not reach w")
		}
		if !aSniff.waitSeen(func(f []byte) bool {
			return isICMP6(flows.ICMPv6NeighborAdvert, f) && bytes.Equal(f[6:12], wMAC) && len(f) >= 78 && net.IP(f[62:78]).Equal(w6)
		}) {
			t.Fatal("control: w's neighbor advertisement did not come back to a")
		}
		// An ICMPv6 error from a's own address passes: Packet Too Big (RFC 4443 §3.2,
		// MTU 1280, quoting a packet's start).
		ptb := append([]byte{0, 0, 5, 0}, make([]byte, 48)...)
		tx.send(t, icmp6Frame(wMAC, aMAC, a6, w6, 2, ptb))
		if !wSniff.waitSeen(func(f []byte) bool { return isICMP6(2, f) && bytes.Equal(f[6:12], aMAC) }) {
			t.Fatal("a's Packet Too Big did not reach w")
		}

		spoofPayload := []byte("ofsdn-spoof6-udp\x00\x00\x00\x00")
		udp := func() []byte {
			u := make([]byte, 8, 8+len(spoofPayload))
			binary.BigEndian.PutUint16(u[0:], 40000)
			binary.BigEndian.PutUint16(u[2:], 40001)
			binary.BigEndian.PutUint16(u[4:], uint16(8+len(spoofPayload)))
			return append(u, spoofPayload...)
		}
		const repeat = 3
		drops0 := tableDrops(t, n, "spoof_guard")
		na0 := flowPackets(t, n, "spoof_guard", "priority=120", "icmp_type=136")
		ra0 := flowPackets(t, n, "spoof_guard", "priority=200", "icmp_type=134")
		for i := 0; i < repeat; i++ {
			// A spoofed source: the victim's address.
			tx.send(t, ipv6Frame(wMAC, aMAC, b6, w6, unix.IPPROTO_UDP, 64, udp(), 6))
			// An NA with a foreign target: "b's address is at a's MAC", to w.
			tx.send(t, icmp6Frame(wMAC, aMAC, a6, w6, flows.ICMPv6NeighborAdvert, naBody(b6, aMAC)))
			// A rogue Router Advertisement, unicast to w's address from a's link-local one.
			tx.send(t, icmp6Frame(wMAC, aMAC, aLL, w6, flows.ICMPv6RouterAdvert, raBody(aMAC)))
		}
		time.Sleep(time.Second)
		if d := tableDrops(t, n, "spoof_guard") - drops0; d < repeat {
			t.Errorf("spoof_guard's drop counter moved by %d, want at least the %d spoofed-source frames", d, repeat)
		}
		if d := flowPackets(t, n, "spoof_guard", "priority=120", "icmp_type=136") - na0; d < repeat {
			t.Errorf("the NA drop flow counted %d, want the %d forged advertisements", d, repeat)
		}
		if d := flowPackets(t, n, "spoof_guard", "priority=200", "icmp_type=134") - ra0; d < repeat {
			t.Errorf("the RA drop flow counted %d, want the %d rogue advertisements", d, repeat)
		}
		wSniff.close()
		for _, f := range wSniff.seen(func(f []byte) bool {
			return bytes.Contains(f, spoofPayload) || isICMP6(flows.ICMPv6RouterAdvert, f) ||
				(isICMP6(flows.ICMPv6NeighborAdvert, f) && len(f) >= 78 && net.IP(f[62:78]).Equal(b6) && bytes.Equal(f[6:12], aMAC))
		}) {
			t.Errorf("w received a forged frame: % x", f[:min(len(f), 78)])
		}
		if got := neighMAC6(t, w.netns, b6); got != nil && !bytes.Equal(got, bMAC) {
			t.Errorf("w's neighbour entry for %s is %s, want %s: ND poisoned", b6, got, bMAC)
		}
		if out, _ := exec.Command("ip", "-n", filepath.Base(w.netns), "-6", "route", "show", "proto", "ra").CombinedOutput(); strings.TrimSpace(string(out)) != "" {
			t.Errorf("w took routes from the rogue RA:\n%s", out)
		}
		if err := ping6(w.netns, b6); err != nil {
			t.Errorf("after the attacks: %v", err)
		}
	})

	t.Run("older cniVersions", func(t *testing.T) {
		for _, v := range []string{"0.2.0", "0.3.1", "0.4.0"} {
			rt := &libcni.RuntimeConf{ContainerID: "ctr-v" + v, NetNS: newNetns(t, "ofsdn-e2e-v"), IfName: "eth0",
				Args: [][2]string{{"K8S_POD_NAMESPACE", "e2e"}, {"K8S_POD_NAME", "v" + strings.ReplaceAll(v, ".", "")}}}
			conf := n.ConfList(t, v)
			res, err := n.CNI.AddNetworkList(context.Background(), conf, rt)
			if err != nil {
				t.Fatalf("cniVersion %s: ADD: %v", v, err)
			}
			var got []string
			switch r := res.(type) {
			case *types020.Result:
				if r.IP4 != nil {
					got = append(got, r.IP4.IP.String()+" via "+r.IP4.Gateway.String())
				}
				if r.IP6 != nil {
					got = append(got, r.IP6.IP.String()+" via "+r.IP6.Gateway.String())
				}
			case *types040.Result:
				for _, ip := range r.IPs {
					got = append(got, ip.Address.String()+" via "+ip.Gateway.String())
				}
			case *current.Result:
				for _, ip := range r.IPs {
					got = append(got, ip.Address.String()+" via "+ip.Gateway.String())
				}
			}
			if len(got) != 2 || !strings.HasPrefix(got[0], "10.152.0.") || !strings.HasSuffix(got[0], " via 10.152.0.1") ||
				!strings.HasPrefix(got[1], "fd00:10:152::") || !strings.HasSuffix(got[1], " via fd00:10:152::1") {
				t.Errorf("cniVersion %s: addresses %v, want the IPv4 then the IPv6 one with their gateways", v, got)
			}
			if err := n.CNI.DelNetworkList(context.Background(), conf, rt); err != nil {
				t.Errorf("cniVersion %s: DEL: %v", v, err)
			}
		}
	})

	t.Run("restart", func(t *testing.T) {
		// A restarted daemon restores each pod from its port and its lease: the port
		// records the IPv4 address only, the lease both, and the pods' IPv6 flows come back.
		n.StopDaemon()
		n.startDualStackDaemon(t)
		cookie, mask := n.podCookie(t, a)
		dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
		if !strings.Contains(dump, "ipv6_src="+a.ip6(t).String()) || !strings.Contains(dump, "ipv6_dst="+a.ip6(t).String()) {
			t.Errorf("after the restart %s has no IPv6 flows:\n%s", a.name, dump)
		}
		if err := ping6(b.netns, a.ip6(t)); err != nil {
			t.Errorf("after the restart: %v", err)
		}
		if err := ping(b.netns, a.ip()); err != nil {
			t.Errorf("after the restart: %v", err)
		}
	})

	t.Run("restart with a pod's lease lost: rebuilt from its port with both its addresses", func(t *testing.T) {
		// The lease file as an old backup has it, without a's lease. The port records both
		// addresses (ofsdn-ip, ofsdn-ipv6): the lease comes back with a's own IPv6 address,
		// not the IPv6 pool's next one (which would leave a's IPv6 flows naming an address
		// it does not have, and its own free to be handed out again).
		n.StopDaemon()
		n.editLeaseFile(t, func(st map[string]any) { delete(st["leases"].(map[string]any), a.ip().String()) })
		n.startDualStackDaemon(t)
		raw, err := os.ReadFile(n.LeasesPath())
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Leases map[string]struct {
				ContainerID string   `json:"containerID"`
				MoreIPs     []string `json:"moreIPs"`
			} `json:"leases"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		l, ok := got.Leases[a.ip().String()]
		if !ok || l.ContainerID != a.containerID || len(l.MoreIPs) != 1 || !net.ParseIP(l.MoreIPs[0]).Equal(a.ip6(t)) {
			t.Errorf("lease of %s after the restart: %+v (present %v), want container %s with IPv6 %s", a.ip(), l, ok, a.containerID, a.ip6(t))
		}
		cookie, mask := n.podCookie(t, a)
		dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
		if !strings.Contains(dump, "ipv6_src="+a.ip6(t).String()) {
			t.Errorf("after the restart %s's flows do not name its IPv6 address %s:\n%s", a.name, a.ip6(t), dump)
		}
		if err := ping6(b.netns, a.ip6(t)); err != nil {
			t.Errorf("after the restart: %v", err)
		}
	})

	t.Run("DEL", func(t *testing.T) {
		for _, p := range []*testPod{a, b, w} {
			if err := n.delPod(p); err != nil {
				t.Fatalf("DEL %s: %v", p.name, err)
			}
			n.assertGone(t, p)
		}
		if lines := flowLines(n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), "cookie=0x200000000/0xff00000000")); len(lines) > 0 {
			t.Errorf("pod flows left after every DEL:\n%s", strings.Join(lines, "\n"))
		}
		if got := len(n.Leases(t)); got != 0 {
			t.Errorf("%d leases left after every DEL", got)
		}
	})
}

// TestDualStackLeasesLostRestoredFromPorts: every lease of a dual-stack node is lost at
// once (a lease file restored from a backup whose allocation cursor is at the pool's
// start) while the pods' ports live. Ports that record both addresses get both back,
// whatever order OVS lists the ports in: two ports written before ofsdn recorded the IPv6
// address (no ofsdn-ipv6) take the IPv6 pool's next free addresses only after every
// recorded one is restored, so they never take another pod's; and a port whose recorded
// IPv6 address is another pod's keeps its IPv4 address (and gets a pool address) instead
// of losing its lease. Every pod keeps IPv4; the pods whose recorded IPv6 address no other
// port records keep it.
func TestDualStackLeasesLostRestoredFromPorts(t *testing.T) {
	serialIPv6(t)
	n := startDualStackNode(t)
	var pods []*testPod
	for i := 0; i < 6; i++ {
		pods = append(pods, n.addPod(fmt.Sprintf("dl-%d", i)))
	}
	n.StopDaemon()
	n.editLeaseFile(t, func(st map[string]any) {
		st["leases"] = map[string]any{}
		st["lastAllocated"] = "10.152.0.1"
		st["lastAllocatedIPs"] = []string{"10.152.0.1", "fd00:10:152::1"}
	})
	port := func(p *testPod) string { return p.result.Interfaces[0].Name }
	// dl-4 and dl-5: ports of a build before ofsdn-ipv6; dl-3 records dl-1's IPv6 address.
	n.OVS.Vsctl(t, "remove", "Interface", port(pods[4]), "external_ids", "ofsdn-ipv6")
	n.OVS.Vsctl(t, "remove", "Interface", port(pods[5]), "external_ids", "ofsdn-ipv6")
	n.OVS.Vsctl(t, "set", "Interface", port(pods[3]), fmt.Sprintf(`external_ids:ofsdn-ipv6="%s/64"`, pods[1].ip6(t)))
	n.startDualStackDaemon(t)

	leases := n.Leases(t)
	for i, p := range pods {
		if leases[p.ip().String()] != p.containerID {
			t.Errorf("%s lost its IPv4 lease %s: leases %v", p.name, p.ip(), leases)
		}
		if err := ping(n.OVS.Netns, p.ip()); err != nil {
			t.Errorf("%s over IPv4 after the restart: %v", p.name, err)
		}
		if i == 0 || i == 2 { // recorded and uncontested: their own IPv6 address back (dl-1's is contested by dl-3's record)
			cookie, mask := n.podCookie(t, p)
			dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
			if !strings.Contains(dump, "ipv6_src="+p.ip6(t).String()) {
				t.Errorf("%s's flows do not name its IPv6 address %s after the restart:\n%s", p.name, p.ip6(t), dump)
			}
			if err := ping6(n.OVS.Netns, p.ip6(t)); err != nil {
				t.Errorf("%s over IPv6 after the restart: %v", p.name, err)
			}
		}
	}
	for _, p := range pods {
		if err := n.delPod(p); err != nil {
			t.Errorf("DEL %s: %v", p.name, err)
		}
	}
	if got := len(n.Leases(t)); got != 0 {
		t.Errorf("%d leases left after every DEL", got)
	}
}
