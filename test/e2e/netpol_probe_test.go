package e2e

// Probes for the NetworkPolicy tests: every pod serves TCP and UDP on ports 80 and 81, and
// a connection is "allowed" when it completes (TCP handshake and a byte back, UDP echo).
// This kernel has no SCTP (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) fails with
// EPROTONOSUPPORT), so SCTP is probed one way: the client sends an SCTP INIT through a raw
// socket and the server's raw IPPROTO_SCTP socket records it; allowed = the INIT arrived.
// That is what the policy decides (the first packet of the association); the answer would
// take the reverse path as an established connection.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
)

const ipprotoSCTP = 132

// inNS runs f in the network namespace at path, returning f's error (or the netns's).
func inNS(path string, f func() error) error {
	netns, err := ns.GetNS(path)
	if err != nil {
		return err
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error { return f() })
}

// npServer serves one pod: TCP and UDP on 80 and 81, and an SCTP INIT recorder.
type npServer struct {
	netns string
	ip    net.IP
	tcp   []net.Listener
	udp   []*net.UDPConn
	sctp  int // raw socket fd

	mu   sync.Mutex
	init map[string]bool // "srcIP:sport>dport" of SCTP INITs received
}

// family returns "4" or "6": the IP family of ip, as the net package's network names end.
func family(ip net.IP) string {
	if ip.To4() != nil {
		return "4"
	}
	return "6"
}

// afOf returns the socket address family of ip (AF_INET or AF_INET6).
func afOf(ip net.IP) int {
	if ip.To4() != nil {
		return syscall.AF_INET
	}
	return syscall.AF_INET6
}

// startServer starts the servers inside the pod's netns, in ip's family (an IPv6 server
// beside the IPv4 one of the same pod: tcp6 and udp6 sockets are IPv6-only); they stop
// when the test ends.
func startServer(t *testing.T, netnsPath string, ip net.IP) *npServer {
	t.Helper()
	s := &npServer{netns: netnsPath, ip: ip, sctp: -1, init: map[string]bool{}}
	fam := family(ip)
	err := inNS(netnsPath, func() error {
		for _, port := range npPorts {
			l, err := net.Listen("tcp"+fam, fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			s.tcp = append(s.tcp, l)
			u, err := net.ListenUDP("udp"+fam, &net.UDPAddr{Port: int(port)})
			if err != nil {
				return err
			}
			s.udp = append(s.udp, u)
		}
		fd, err := syscall.Socket(afOf(ip), syscall.SOCK_RAW, ipprotoSCTP)
		if err != nil {
			return fmt.Errorf("raw SCTP socket: %w", err)
		}
		s.sctp = fd
		return nil
	})
	if err != nil {
		t.Fatalf("servers in %s: %v", netnsPath, err)
	}
	for _, l := range s.tcp {
		go func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("k"))
				_ = c.Close()
			}
		}(l)
	}
	for _, u := range s.udp {
		go func(u *net.UDPConn) {
			buf := make([]byte, 256)
			for {
				n, from, err := u.ReadFromUDP(buf)
				if err != nil {
					return
				}
				_, _ = u.WriteToUDP(buf[:n], from)
			}
		}(u)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := syscall.Recvfrom(s.sctp, buf, 0)
			if err != nil {
				return
			}
			// An IPv4 raw socket gives the IP header with the datagram, an IPv6 one the
			// payload only (RFC 3542 §3).
			var src net.IP
			ihl := 0
			switch a := from.(type) {
			case *syscall.SockaddrInet4:
				if n < 20 {
					continue
				}
				ihl, src = int(buf[0]&0xf)*4, net.IP(a.Addr[:])
			case *syscall.SockaddrInet6:
				src = net.IP(a.Addr[:])
			default:
				continue
			}
			if n < ihl+12 {
				continue
			}
			sport, dport := binary.BigEndian.Uint16(buf[ihl:]), binary.BigEndian.Uint16(buf[ihl+2:])
			s.mu.Lock()
			s.init[fmt.Sprintf("%s:%d>%d", src, sport, dport)] = true
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		for _, l := range s.tcp {
			_ = l.Close()
		}
		for _, u := range s.udp {
			_ = u.Close()
		}
		_ = syscall.Close(s.sctp)
	})
	return s
}

func (s *npServer) sawInit(src net.IP, sport, dport uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.init[fmt.Sprintf("%s:%d>%d", src, sport, dport)]
}

// sctpPort hands out distinct source ports for SCTP probes, so each INIT is told apart.
var sctpPort atomic.Uint32

// sctpInit builds an SCTP common header and an INIT chunk (RFC 9260 §3.3.2) with the
// CRC32c checksum (RFC 9260 Appendix A).
func sctpInit(sport, dport uint16) []byte {
	b := make([]byte, 12+20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	// verification tag 0 for an INIT; checksum at 8..11, filled below
	c := b[12:]
	c[0] = 1 // INIT
	binary.BigEndian.PutUint16(c[2:], 20)
	binary.BigEndian.PutUint32(c[4:], 0x0f5d0001|uint32(sport)<<8) // initiate tag, non-zero
	binary.BigEndian.PutUint32(c[8:], 65535)                       // a_rwnd
	binary.BigEndian.PutUint16(c[12:], 1)                          // outbound streams
	binary.BigEndian.PutUint16(c[14:], 1)                          // inbound streams
	binary.BigEndian.PutUint32(c[16:], 1)                          // initial TSN
	sum := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	binary.LittleEndian.PutUint32(b[8:], sum)
	return b
}

// probe reports whether a connection from src to dst on proto/port completes within
// timeout, in dst's IP family (src is the source pod's server of the same family).
func probe(src, dst *npServer, proto corev1.Protocol, port int32, timeout time.Duration) (bool, error) {
	addr := net.JoinHostPort(dst.ip.String(), fmt.Sprint(port))
	fam := family(dst.ip)
	switch proto {
	case corev1.ProtocolTCP:
		ok := false
		err := inNS(src.netns, func() error {
			c, err := net.DialTimeout("tcp"+fam, addr, timeout)
			if err != nil {
				return nil // refused or timed out: not allowed
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(timeout))
			b := make([]byte, 1)
			if n, _ := c.Read(b); n == 1 {
				ok = true
			}
			return nil
		})
		return ok, err
	case corev1.ProtocolUDP:
		ok := false
		err := inNS(src.netns, func() error {
			c, err := net.Dial("udp"+fam, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			nonce := fmt.Sprintf("probe-%d", time.Now().UnixNano())
			deadline := time.Now().Add(timeout)
			b := make([]byte, 64)
			for time.Now().Before(deadline) && !ok {
				if _, err := c.Write([]byte(nonce)); err != nil {
					return nil
				}
				_ = c.SetReadDeadline(time.Now().Add(timeout / 3))
				if n, err := c.Read(b); err == nil && string(b[:n]) == nonce {
					ok = true
				}
			}
			return nil
		})
		return ok, err
	case corev1.ProtocolSCTP:
		sport := uint16(20000 + sctpPort.Add(1)%40000)
		pkt := sctpInit(sport, uint16(port))
		var fd int
		if err := inNS(src.netns, func() (err error) {
			fd, err = syscall.Socket(afOf(dst.ip), syscall.SOCK_RAW, ipprotoSCTP)
			return err
		}); err != nil {
			return false, err
		}
		defer syscall.Close(fd)
		var to syscall.Sockaddr
		if ip4 := dst.ip.To4(); ip4 != nil {
			a := &syscall.SockaddrInet4{}
			copy(a.Addr[:], ip4)
			to = a
		} else {
			a := &syscall.SockaddrInet6{}
			copy(a.Addr[:], dst.ip.To16())
			to = a
		}
		deadline := time.Now().Add(timeout)
		for sent := 0; time.Now().Before(deadline); sent++ {
			if sent < 3 { // like SCTP's own INIT retransmissions
				_ = syscall.Sendto(fd, pkt, 0, to)
			}
			for i := 0; i < 10; i++ {
				if dst.sawInit(src.ip, sport, uint16(port)) {
					return true, nil
				}
				time.Sleep(timeout / 40)
			}
		}
		return false, nil
	}
	return false, errors.New("unknown protocol " + string(proto))
}

// probeTable probes every ordered pair of pods (not a pod to itself) on proto/port, all at
// once, and returns the table seen. A probe that fails where want allows it is retried
// twice, one at a time, so a slow machine does not fail an allowed connection; a probe that
// succeeds where want denies it is never retried (a connection that completed was
// allowed).
// only, when not nil, limits the probes to the pairs it accepts (the others stay false).
func probeTable(t *testing.T, servers map[string]*npServer, proto corev1.Protocol, port int32, want reach, only func(from, to string) bool) reach {
	t.Helper()
	got := newReach(false)
	skip := func(f, to string) bool { return f == to || only != nil && !only(f, to) }
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []string
	for _, f := range npPods() {
		for _, to := range npPods() {
			if skip(f, to) {
				continue
			}
			wg.Add(1)
			go func(f, to string) {
				defer wg.Done()
				ok, err := probe(servers[f], servers[to], proto, port, 1500*time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s -> %s: %v", f, to, err))
				}
				got[f][to] = ok
			}(f, to)
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("probes failed to run:\n%s", strings.Join(errs, "\n"))
	}
	for _, f := range npPods() {
		for _, to := range npPods() {
			if skip(f, to) || got[f][to] || !want[f][to] {
				continue
			}
			for i := 0; i < 2 && !got[f][to]; i++ {
				ok, err := probe(servers[f], servers[to], proto, port, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				got[f][to] = ok
			}
		}
	}
	return got
}

// diffTables lists the pairs where got and want differ, and prints both tables.
func diffTables(got, want reach) string {
	var bad []string
	for _, f := range npPods() {
		for _, to := range npPods() {
			if f != to && got[f][to] != want[f][to] {
				bad = append(bad, fmt.Sprintf("%s -> %s: got %v, want %v", f, to, got[f][to], want[f][to]))
			}
		}
	}
	if len(bad) == 0 {
		return ""
	}
	sort.Strings(bad)
	return strings.Join(bad, "\n") + "\n\ngot:\n" + formatTable(got) + "\nwant:\n" + formatTable(want)
}

// formatTable prints a table like upstream's: rows are sources, columns destinations.
func formatTable(r reach) string {
	var b strings.Builder
	b.WriteString("     ")
	for _, to := range npPods() {
		fmt.Fprintf(&b, " %s", to)
	}
	b.WriteByte('\n')
	for _, f := range npPods() {
		fmt.Fprintf(&b, "%s ", f)
		for _, to := range npPods() {
			switch {
			case f == to:
				b.WriteString("   - ")
			case r[f][to]:
				b.WriteString("   . ")
			default:
				b.WriteString("   X ")
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
