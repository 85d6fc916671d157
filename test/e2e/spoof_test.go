package e2e

// Spoofing from inside a pod: raw Ethernet frames written on the pod's eth0 with an
// AF_PACKET socket (packet(7)), built by hand, claiming another pod's IP or MAC, or the
// gateway's. The spoof_guard stage must drop every one of them (its drop counter moves),
// no other pod and not the host may see them (AF_PACKET sniffers on their interfaces) or
// learn a forged neighbour entry, and the victim keeps talking.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// rawSocket is an AF_PACKET socket bound to one interface of one network namespace.
type rawSocket struct {
	fd      int
	ifindex int
	where   string
}

// openRaw opens a raw socket on ifName inside the namespace at netnsPath; it stays bound
// there after the call returns.
func openRaw(t *testing.T, netnsPath, ifName string) *rawSocket {
	t.Helper()
	r := &rawSocket{where: netnsPath + "/" + ifName}
	inNetns(t, netnsPath, func() error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		r.ifindex = l.Attrs().Index
		r.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		return unix.Bind(r.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: r.ifindex})
	})
	t.Cleanup(func() { unix.Close(r.fd) })
	return r
}

// send writes one whole Ethernet frame.
func (r *rawSocket) send(t *testing.T, frame []byte) {
	t.Helper()
	var dst [8]byte
	copy(dst[:], frame[0:6])
	if err := unix.Sendto(r.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: r.ifindex, Halen: 6, Addr: dst}); err != nil {
		t.Fatalf("send on %s: %v", r.where, err)
	}
}

// sniffer collects the frames an interface receives (not those it sends).
type sniffer struct {
	r      *rawSocket
	mu     sync.Mutex
	frames [][]byte
	stop   chan struct{}
	done   chan struct{}
}

func sniff(t *testing.T, r *rawSocket) *sniffer {
	t.Helper()
	if err := unix.SetsockoptTimeval(r.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}); err != nil {
		t.Fatal(err)
	}
	s := &sniffer{r: r, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(r.fd, buf, 0)
			if err != nil {
				continue // timeout: look at stop again
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			s.mu.Lock()
			s.frames = append(s.frames, append([]byte(nil), buf[:n]...))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sniffer) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// seen returns the frames received so far that match.
func (s *sniffer) seen(match func([]byte) bool) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for _, f := range s.frames {
		if match(f) {
			out = append(out, f)
		}
	}
	return out
}

// waitSeen waits up to 5 s for a matching frame.
func (s *sniffer) waitSeen(match func([]byte) bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(s.seen(match)) > 0 {
			return true
		}
	}
	return false
}

// arpFrame builds an Ethernet II frame carrying an ARP packet for IPv4 over Ethernet
// (RFC 826): op 1 request, 2 reply.
func arpFrame(ethDst, ethSrc net.HardwareAddr, op uint16, sha net.HardwareAddr, spa net.IP, tha net.HardwareAddr, tpa net.IP) []byte {
	b := make([]byte, 0, 60)
	b = append(b, ethDst...)
	b = append(b, ethSrc...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = binary.BigEndian.AppendUint16(b, 1)      // htype Ethernet
	b = binary.BigEndian.AppendUint16(b, 0x0800) // ptype IPv4
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	b = append(b, sha...)
	b = append(b, spa.To4()...)
	b = append(b, tha...)
	b = append(b, tpa.To4()...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

// udpFrame builds an Ethernet II / IPv4 / UDP frame (RFC 791, RFC 768; UDP checksum 0 =
// none, allowed over IPv4).
func udpFrame(ethDst, ethSrc net.HardwareAddr, src, dst net.IP, payload []byte) []byte {
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	copy(ip[12:], src.To4())
	copy(ip[16:], dst.To4())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 40001)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	b := append(append([]byte(nil), ethDst...), ethSrc...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IP)
	return append(append(append(b, ip...), udp...), payload...)
}

// arpFields returns an ARP frame's sender hardware and protocol addresses.
func arpFields(f []byte) (sha net.HardwareAddr, spa net.IP, ok bool) {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_ARP {
		return nil, nil, false
	}
	return net.HardwareAddr(f[22:28]), net.IP(f[28:32]), true
}

// neighMAC returns the MAC the neighbour table of the namespace at netnsPath holds for ip
// (nil when there is no usable entry).
func neighMAC(t *testing.T, netnsPath string, ip net.IP) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	inNetns(t, netnsPath, func() error {
		neighs, err := netlink.NeighList(0, netlink.FAMILY_V4)
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

func TestSpoofing(t *testing.T) {
	serial(t)
	n := startNode(t, "10.143.0.0/24")
	attacker, victim, witness := n.addPod("attacker"), n.addPod("victim"), n.addPod("witness")
	gw := net.ParseIP("10.143.0.1").To4()
	mac := func(p *testPod) net.HardwareAddr {
		m, err := net.ParseMAC(p.result.Interfaces[1].Mac)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	aMAC, vMAC, wMAC := mac(attacker), mac(victim), mac(witness)
	aIP, vIP, wIP := attacker.ip().To4(), victim.ip().To4(), witness.ip().To4()
	var gwMAC net.HardwareAddr
	inNetns(t, n.OVS.NetnsPath(), func() error {
		l, err := netlink.LinkByName("ofsdn-gw0")
		if err == nil {
			gwMAC = l.Attrs().HardwareAddr
		}
		return err
	})

	// Neighbour entries that a forged ARP could overwrite: witness → victim and gateway,
	// host (gateway) → victim. Linux ignores unsolicited updates within locktime (1 s) of
	// the last one, so wait it out before attacking.
	for _, p := range [][2]string{{witness.netns, vIP.String()}, {witness.netns, gw.String()}, {n.OVS.Netns, vIP.String()}} {
		if err := ping(p[0], net.ParseIP(p[1])); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond)

	tx := openRaw(t, attacker.netns, "eth0")
	sniffers := map[string]*sniffer{
		"victim":         sniff(t, openRaw(t, victim.netns, "eth0")),
		"witness":        sniff(t, openRaw(t, witness.netns, "eth0")),
		"gateway (host)": sniff(t, openRaw(t, n.OVS.NetnsPath(), "ofsdn-gw0")),
	}

	// Controls: the attacker's honest frames pass, so the sniffers and the raw sender work.
	legitUDP := []byte("ofsdn-legit-udp")
	tx.send(t, udpFrame(wMAC, aMAC, aIP, wIP, legitUDP))
	tx.send(t, arpFrame(broadcastMAC, aMAC, 1, aMAC, aIP, make(net.HardwareAddr, 6), wIP))
	if !sniffers["witness"].waitSeen(func(f []byte) bool { return bytes.Contains(f, legitUDP) }) {
		t.Fatal("control: the attacker's honest UDP frame did not reach the witness; the test cannot judge drops")
	}
	if !sniffers["witness"].waitSeen(func(f []byte) bool {
		sha, spa, ok := arpFields(f)
		return ok && spa.Equal(aIP) && bytes.Equal(sha, aMAC)
	}) {
		t.Fatal("control: the attacker's honest ARP request did not reach the witness")
	}

	zero := make(net.HardwareAddr, 6)
	attacks := []struct {
		name  string
		frame []byte
	}{
		{"UDP with the victim's IP", udpFrame(wMAC, aMAC, vIP, wIP, []byte("ofsdn-spoof-ip"))},
		{"UDP with the victim's MAC", udpFrame(wMAC, vMAC, aIP, wIP, []byte("ofsdn-spoof-mac"))},
		{"UDP with the victim's IP and MAC", udpFrame(wMAC, vMAC, vIP, wIP, []byte("ofsdn-spoof-both"))},
		{"UDP with the gateway's IP to the victim", udpFrame(vMAC, aMAC, gw, vIP, []byte("ofsdn-spoof-gw"))},
		{"gratuitous ARP request claiming the victim's IP", arpFrame(broadcastMAC, aMAC, 1, aMAC, vIP, zero, vIP)},
		{"gratuitous ARP reply claiming the victim's IP", arpFrame(broadcastMAC, aMAC, 2, aMAC, vIP, broadcastMAC, vIP)},
		{"gratuitous ARP request claiming the gateway's IP", arpFrame(broadcastMAC, aMAC, 1, aMAC, gw, zero, gw)},
		{"gratuitous ARP reply claiming the gateway's IP", arpFrame(broadcastMAC, aMAC, 2, aMAC, gw, broadcastMAC, gw)},
		{"ARP reply to the witness with the victim as forged sender", arpFrame(wMAC, aMAC, 2, aMAC, vIP, wMAC, wIP)},
		{"ARP reply to the witness with the gateway as forged sender", arpFrame(wMAC, aMAC, 2, aMAC, gw, wMAC, wIP)},
		{"ARP reply to the host with the victim as forged sender", arpFrame(gwMAC, aMAC, 2, aMAC, vIP, gwMAC, gw)},
		{"ARP request with the victim's MAC as sender hardware address", arpFrame(broadcastMAC, aMAC, 1, vMAC, aIP, zero, wIP)},
		{"ARP request from the victim's MAC and IP", arpFrame(broadcastMAC, vMAC, 1, vMAC, vIP, zero, wIP)},
	}
	const repeat = 3
	before := tableDrops(t, n, "spoof_guard")
	for _, a := range attacks {
		for i := 0; i < repeat; i++ {
			tx.send(t, a.frame)
		}
	}
	time.Sleep(time.Second) // let any frame that got through arrive
	for _, s := range sniffers {
		s.close()
	}
	after := tableDrops(t, n, "spoof_guard")
	if sent := len(attacks) * repeat; after-before < sent {
		t.Errorf("spoof_guard drop counter moved by %d (%d → %d), want at least the %d spoofed frames", after-before, before, after, sent)
	} else {
		t.Logf("spoof_guard dropped %d frames (%d spoofed frames sent)", after-before, sent)
	}

	owner := map[string]net.HardwareAddr{vIP.String(): vMAC, gw.String(): gwMAC, aIP.String(): aMAC}
	forged := func(f []byte) bool {
		if bytes.Contains(f, []byte("ofsdn-spoof-")) {
			return true
		}
		sha, spa, ok := arpFields(f)
		if !ok {
			return false
		}
		if m, known := owner[spa.String()]; known && !bytes.Equal(m, sha) {
			return true
		}
		return bytes.Equal(sha, vMAC) && !spa.Equal(vIP)
	}
	for who, s := range sniffers {
		for _, f := range s.seen(forged) {
			t.Errorf("%s received a spoofed frame: % x", who, f[:min(len(f), 42)])
		}
	}

	// Nobody learnt a forged neighbour.
	for _, c := range []struct {
		where, netns string
		ip           net.IP
		want         net.HardwareAddr
	}{
		{"witness", witness.netns, vIP, vMAC},
		{"witness", witness.netns, gw, gwMAC},
		{"host (node netns)", n.OVS.NetnsPath(), vIP, vMAC},
	} {
		if got := neighMAC(t, c.netns, c.ip); got != nil && !bytes.Equal(got, c.want) {
			t.Errorf("%s's neighbour entry for %s is %s, want %s: ARP poisoned", c.where, c.ip, got, c.want)
		}
	}

	// The victim is unaffected.
	for _, p := range [][2]string{{victim.netns, wIP.String()}, {victim.netns, gw.String()}, {witness.netns, vIP.String()}, {n.OVS.Netns, vIP.String()}} {
		if err := ping(p[0], net.ParseIP(p[1])); err != nil {
			t.Errorf("after the attacks: %v", err)
		}
	}
	udpExchange(t, victim, witness)
	udpExchange(t, witness, victim)
}
