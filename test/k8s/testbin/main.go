// Command testbin is the one static binary of the real-cluster tests' images (test/k8s):
// the test server pods run, the client the tests start in pods with kubectl exec, and the
// pod sandbox ("pause") process. No shell, no busybox: Debian's busybox-static wget
// segfaults in pods, and a Go binary says exactly what failed.
//
//	testbin serve                  TCP 8080: writes "NAME PEER\n" (NAME = $POD_NAME or the
//	                               host name, PEER = the client address it saw) and closes;
//	                               UDP 8081: answers each datagram the same way; both on
//	                               IPv4 and, where the pod has IPv6, on IPv6 (dual-stack pods);
//	                               HTTP 8082: /healthz answers 200 (readiness probes)
//	testbin probe TARGET...        TARGET = tcp:IP:PORT or udp:IP:PORT (IPv6: tcp:[IP]:PORT);
//	                               prints one line per target, "ok TARGET REPLY" or
//	                               "fail TARGET ERROR", and exits 0 (the caller reads the lines)
//	testbin ping [-i 10ms] [-max 5m] [-c N] IP
//	                               ICMP echo (ICMPv6 echo for an IPv6 address) every interval
//	                               until stdin closes (or max; with -c, until N are sent,
//	                               stdin ignored), waits up to 2 s for late replies (with -c
//	                               no longer than until all are in), then prints "lost seq N
//	                               sent at HH:MM:SS.mmm" (UTC) for each unanswered request,
//	                               then "sent N received M missing [SEQ...]"
//	testbin pause                  sleeps until SIGINT/SIGTERM, reaping children (PID 1 of
//	                               a pod sandbox)
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbin serve|probe|ping|pause ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve()
	case "probe":
		probe(os.Args[2:])
	case "ping":
		err = ping(os.Args[2:])
	case "pause":
		pause()
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
}

func podName() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

func serve() error {
	name := podName()
	tl, err := net.Listen("tcp4", ":8080")
	if err != nil {
		return err
	}
	ul, err := net.ListenPacket("udp4", ":8081")
	if err != nil {
		return err
	}
	serveTCP := func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
			c.Close()
		}
	}
	serveUDP := func(c net.PacketConn) {
		buf := make([]byte, 2048)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo([]byte(fmt.Sprintf("%s %s\n", name, from)), from)
		}
	}
	go serveTCP(tl)
	go serveUDP(ul)
	// IPv6 beside IPv4 (IPV6_V6ONLY sockets) when the pod has it: a dual-stack pod answers
	// on both families, an IPv4-only pod (IPv6 off in its namespace) on IPv4 alone.
	if tl6, err := net.Listen("tcp6", ":8080"); err == nil {
		go serveTCP(tl6)
		if ul6, err := net.ListenPacket("udp6", ":8081"); err == nil {
			go serveUDP(ul6)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	fmt.Println("serving tcp :8080, udp :8081, http :8082 as", name)
	return http.ListenAndServe(":8082", mux)
}

// probe reaches every target once and prints the outcome.
func probe(targets []string) {
	for _, t := range targets {
		reply, err := probeOne(t)
		if err != nil {
			fmt.Printf("fail %s %v\n", t, err)
		} else {
			fmt.Printf("ok %s %s\n", t, reply)
		}
	}
}

func probeOne(target string) (string, error) {
	proto, addr, ok := strings.Cut(target, ":")
	if !ok {
		return "", fmt.Errorf("target %q: want tcp:IP:PORT or udp:IP:PORT", target)
	}
	switch proto {
	case "tcp":
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	case "udp":
		c, err := net.Dial("udp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		buf := make([]byte, 2048)
		// A datagram may be lost while a path comes up: three tries, one second each.
		for try := 0; ; try++ {
			if _, err := c.Write([]byte("hello\n")); err != nil {
				return "", err
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if err == nil {
				return strings.TrimSpace(string(buf[:n])), nil
			}
			if try == 2 {
				return "", err
			}
		}
	}
	return "", fmt.Errorf("target %q: protocol must be tcp or udp", target)
}

// ping sends ICMP (ICMPv6 to an IPv6 address) echo requests every interval until stdin
// reaches EOF, max passes or count are sent, then waits two seconds for late replies and
// prints the summary.
func ping(args []string) error {
	fs := flag.NewFlagSet("ping", flag.ContinueOnError)
	interval := fs.Duration("i", 10*time.Millisecond, "interval between echo requests")
	maxDur := fs.Duration("max", 5*time.Minute, "stop after this long even if stdin stays open")
	count := fs.Int("c", 0, "stop after sending this many requests (stdin ignored); 0 = until stdin closes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: testbin ping [-i 10ms] [-max 5m] [-c N] IP")
	}
	dst := net.ParseIP(fs.Arg(0))
	if dst == nil {
		return fmt.Errorf("ping: %q is not an IP address", fs.Arg(0))
	}
	// ICMP for IPv4, ICMPv6 (whose checksum the kernel fills in on a raw socket) for IPv6.
	network, laddr, proto := "ip4:icmp", "0.0.0.0", 1
	var echo, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.To4() != nil {
		dst = dst.To4()
	} else {
		network, laddr, proto = "ip6:ipv6-icmp", "::", 58
		echo, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	conn, err := icmp.ListenPacket(network, laddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	id := os.Getpid() & 0xffff
	var mu sync.Mutex
	got := map[int]bool{}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != reply {
				continue
			}
			e, ok := m.Body.(*icmp.Echo)
			if !ok || e.ID != id || !from.(*net.IPAddr).IP.Equal(dst) {
				continue
			}
			mu.Lock()
			got[e.Seq] = true
			mu.Unlock()
		}
	}()
	stop := make(chan struct{})
	if *count == 0 {
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	}
	deadline := time.After(*maxDur)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	sent := 0
	sentAt := map[int]time.Time{}
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-deadline:
			break loop
		case <-tick.C:
			if *count > 0 && sent == *count {
				break loop
			}
			sent++
			sentAt[sent] = time.Now()
			b, _ := (&icmp.Message{Type: echo, Body: &icmp.Echo{ID: id, Seq: sent & 0xffff, Data: []byte("ofsdn")}}).Marshal(nil)
			if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst}); err != nil {
				fmt.Fprintln(os.Stderr, "send:", err)
			}
		}
	}
	// Late replies: two seconds, or (with -c) until every request is answered.
	for wait := time.Now().Add(2 * time.Second); time.Now().Before(wait); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		all := *count > 0 && len(got) >= sent
		mu.Unlock()
		if all {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var missing []int
	for s := 1; s <= sent; s++ {
		if !got[s&0xffff] {
			missing = append(missing, s)
		}
	}
	sort.Ints(missing)
	for _, s := range missing {
		fmt.Printf("lost seq %d sent at %s\n", s, sentAt[s].UTC().Format("15:04:05.000"))
	}
	fmt.Printf("sent %d received %d missing %v\n", sent, sent-len(missing), missing)
	return nil
}

func pause() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
